"""Is bundle X Ready, and why (pure; by this folder). DESIGN §7; the rule is in ``phase``.

- ``report`` — the whole answer: ``bundle_status(state, view, ledger)``, read from what the
  cluster's planner knows; start here.
- ``tally`` — each object of the revision marked (ready, failed, in flight, drifted, ...) and
  counted into a ``Tally``, with the prunes the bundle still owes.
- ``ledger`` — each bundle's tally kept current from the objects that changed, instead of
  counting every object again per tick (what ``tally`` counts from scratch, it must equal).
- ``phase`` — the phase and one-line message from a tally: **Ready only when every object of
  the revision is applied, seen healthy, and no prune is pending.**

Publishing it (when, coalesced per tick, only when what a user reads changed) is the shell's
``status_board``.
"""
