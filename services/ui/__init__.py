"""The status page: a read-only web view of bundles and objects, fed from the bus."""
