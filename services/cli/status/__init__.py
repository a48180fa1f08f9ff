"""What the user's commands read on the bus: ``status`` (``-f``), ``why`` and ``shards``.

- ``command`` — the commands: flags and output.
- ``read`` — what they read on the bus, and the waits of ``publish --wait``.
- ``follow`` — ``status -f``: every status message as it comes.
- ``shards`` — planner replicas and who plans which cluster.
- ``objectref`` — an object as a person types it.
"""
