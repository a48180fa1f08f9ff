"""What the services share at their edges: the bus, the Kubernetes client, settings, telemetry,
members and process start-up."""
