"""State kept on the bus and read back whole: settings (the tenant policy, the sync windows,
the notification configurations), one shape for all — a setting brings its schema and its
checks, the rest is here — and what the services wrote about each object: the live objects'
server facts, the planner's decision records.

- ``document`` (pure) — ``Document[T]``: a settings file read and checked with ``FILE:LINE``
  errors, its stored form written and decoded (checked again), and the last good value of its
  stored versions.
- ``bucket`` — ``Kept[T]``: a document in its KV bucket under a key; put, read, and followed
  live keeping the last good value (``Following``).
- ``facts`` — the newest server or applied fact of every object of some clusters: each
  cluster's checkpoint and the SERVER or APPLIED batches after it (the watcher's seed,
  ``driftbus status``, the status page and its object detail).
- ``decisions`` — the decision records of one object, or of every object of a name: its own
  subject (records written before issue 44) and its name's shelf of the log (``driftbus why``,
  the status page's object detail).
- ``checkpoints`` — the checkpoint parts of some clusters as CHECKPOINTS holds them, for
  ``facts`` and ``driftbus plan`` to assemble.
"""
