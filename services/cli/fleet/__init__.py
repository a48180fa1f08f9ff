"""Fleets on the command line: ``publish`` to many clusters, ``rollout``, ``clusters``.

- ``publish`` — the targeting flags of ``publish`` (``-l``, ``--cluster``) and fleet publishing.
- ``rollout`` — ``driftbus rollout status|pause|resume|promote|undo|history``.
- ``clusters`` — ``driftbus clusters`` (list), ``label`` and ``remove``.
"""
