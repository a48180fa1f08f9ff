"""driftbus: keeps Kubernetes clusters equal to published manifests (watcher, planner,
applier, source, the CLI); see docs/architecture.md."""
