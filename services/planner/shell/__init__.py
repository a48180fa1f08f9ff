"""The planner's I/O for one cluster: reads the streams, publishes what the pure rooms decide.

- ``loop`` — ``Planner``: the run loop that follows BUNDLES, SERVER, APPLIED and OUTCOMES, one
  message at a time; the rebuild at start and going live.
- ``followed`` — the settings followed on the bus: the tenant policy (fail closed) and the sync
  windows (the last good ones).
- ``folding`` — the one way an event changes an entry: folded, its bundle marked, the decision
  published; and the level-triggered prune.
- ``intake`` — a bundle message taken in (checked, taken, folded) or refused; suspend, resume
  and a hold's release.
- ``fencing`` — fleet placements held to the rollout driver's fence: a deposed driver's
  dropped, live or on a rebuild (then checked against the bundle's history), the message in
  force published again.
- ``manifests`` — ``ManifestCache``: stored manifests read from the Object Store once per
  replica, by reference, and shared by its clusters (a fleet revision placed on each).
- ``sending`` — publishing one decision: status row, intent, decision record, under the fencing
  token.
- ``status_board`` — each changed bundle's status (``status.report``), published per tick when
  what a user reads of it changed.
- ``periodic`` — the duties beside the loop: who serves the cluster, lost intents sent again,
  pending intents, the status tick.
- ``rollback`` — rollback requests answered by republishing a revision from the bus's history.
"""
