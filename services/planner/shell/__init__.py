"""The planner's I/O: reads the streams, publishes what the pure rooms decide.

- ``hub`` — ``Hub``: the replica's followers, shared by all its clusters — a live tap per
  cluster stream demultiplexed by cluster, and the policy, windows, registry and members'
  heartbeats followed once.
- ``loop`` — ``Planner``: one cluster's run loop over BUNDLES, SERVER, APPLIED and OUTCOMES, one
  message at a time; the rebuild at start and going live.
- ``going_live`` — the go-live after a rebuild: every desired object evaluated once, hits
  counted where decided, the rest sent in apply order.
- ``inbox`` — the cluster's one queue: the hub's messages (held back during the replay), the
  replay of its compacted streams, its duties' alarms; each stream message handled once.
- ``budget`` — how much replaying a replica does at once, in messages, not clusters.
- ``alarms`` — one ``call_at`` handle per duty on the event loop's heap, set only when there
  is work: a quiet cluster schedules nothing but its daily refresh.
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
- ``intent_batches`` — apply intents of objects with nothing in flight, sent together (one
  message per few milliseconds of decisions, at most ``--batch-intents``).
- ``decision_batches`` — decision records sent together: a message per shelf of names per
  moment, sent before each bundle status (so ``why`` explains what a status says).
- ``status_board`` — each changed bundle's status (``status.report``), published per tick when
  what a user reads of it changed.
- ``periodic`` — the duties, run when their alarm rings: who serves the cluster, lost intents
  sent again, pending intents, the status tick, the sync windows' clock.
- ``lost_intents`` — which overdue intents are lost: one look at the cluster's queue and its
  unread facts decides for all of them.
- ``checkpointing`` — the cluster's checkpoint written after a burst of facts (a quiet cluster
  writes none).
- ``yielding`` — long work let run beside the rest of the event loop: bursts paced by time,
  pure computations done in steps.
- ``rollback`` — rollback requests answered by republishing a revision from the bus's history.
"""
