"""The pure core: manifests, SHAs, health, scopes and YAML, with no I/O."""
