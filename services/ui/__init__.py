"""The status page: a read-only web view of bundles and objects, fed from the bus."""

UI_PORT = 8787
"""The page's default port: not 8080, which kubectl falls back to and many dev servers take."""
