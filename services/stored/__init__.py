"""Settings kept on the bus (the tenant policy, the sync windows, the notification
configurations), one shape for all: a setting brings its schema and its checks, the rest is here.

- ``document`` (pure) — ``Document[T]``: a settings file read and checked with ``FILE:LINE``
  errors, its stored form written and decoded (checked again), and the last good value of its
  stored versions.
- ``bucket`` — ``Kept[T]``: a document in its KV bucket under a key; put, read, and followed
  live keeping the last good value (``Following``).
"""
