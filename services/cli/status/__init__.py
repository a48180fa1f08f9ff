"""What the user's commands read on the bus: ``status`` (``-f``), ``why`` and ``shards``.

- ``command`` — the commands: flags, the connection, and which view is read and shown.
- ``gather`` — what ``status`` reads on the bus, as one typed value per view (a cluster's
  bundles; one bundle with its objects, source and sync windows).
- ``show`` — how ``status`` shows that value: a table, or ``-o json`` / ``-o yaml``.
- ``follow`` — ``status -f``: its connection, and every status message as it comes.
- ``shards`` — planner replicas and who plans which cluster.

What they read through is ``services.cli.reads``; an object as a person types it,
``services.cli.objectref``.
"""
