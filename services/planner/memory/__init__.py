"""What the planner holds, and as little of it as it can (pure; by this folder).

- ``store`` — the SHA cache, packed: one ``bytes`` record per object instead of an ``Entry``.
- ``record`` — one object's packed record: its layout, and what is read from its header.
- ``inflight`` — ``InflightIndex``: which objects have an intent in flight, and since when.
- ``interned`` — the strings its records repeat (bundles, revisions) as small ids.
- ``codebook`` — desired manifests deflated against a dictionary drawn from their revision.
- ``manifests`` — ``Kept``: values by key within a byte budget, the least recently used dropped
  first (the stored manifests a replica's clusters share).
- ``checked`` — ``CheckedRevisions``: what checking a fleet revision gave, kept for the next
  cluster taking it, keyed by everything the check reads.
- ``object_details`` — per object, what the packed entry does not hold: the desired manifest,
  the watcher's health, the applier's last word.
- ``cluster`` — ``ClusterState``: one cluster's entries, details, bundles in force, its
  registry labels and who serves it, shared explicitly by the parts of the shell.
- ``gates`` — ``Gates``: what holds a bundle's writes back (suspension, sync windows and their
  overrides, the dependencies' phases, the bundles held now), and why a bundle is held.
- ``tenancy`` — ``Tenancy``: the tenant policy in force, or why the latest cannot be used.
"""
