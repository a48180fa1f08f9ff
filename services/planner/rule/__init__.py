"""The decision rule and everything it needs to decide one object (pure: no I/O, no clock but
``messages.now``; pure by this folder, enforced by import-linter).

The planner's public face: ``driftbus plan`` imports this package, and nothing else of the
planner but the process, so a plan cannot disagree with the planner.

- ``entry`` — what the planner knows about one object (``Entry``) and the events that change it;
  ``Slot`` (cluster, key), the address of an object in every map.
- ``decide`` — the rule: ``step(entry, event) -> (entry, decision)``, ``evaluate``, ``restore``.
- ``facts`` — SERVER, APPLIED and OUTCOMES messages → the events ``decide`` folds.
- ``revision`` — a published revision taken in: keyed, normalised, owned, hashed, or refused.
- ``holds`` — why a bundle's writes wait: suspended, or a dependency not Ready.
- ``waves`` — which objects of a revision may be written now: its hooks and sync waves.
- ``limits`` — a revision held to its tenant's limits, and whom its writes are made as.
- ``takeover`` — which objects a revision takes when another bundle declares them.
- ``prune`` — which prunes would destroy what others still want; which objects are strays.
- ``budget`` — the prune budget: how much one revision may delete of a bundle at once.
- ``messages`` — what a decision sends: the intent and its id, the decision record, the row.
- ``checkpoint`` — a cluster's checkpoint: the facts' part of its entries with the stream
  sequences they cover, split into parts, and put back together (``assemble``); what the rule
  can read of an entry (``said``).
- ``replay`` — a decision's inputs kept in its record, and made again by ``decide``
  (``driftbus replay``).
"""
