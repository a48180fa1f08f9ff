"""The wire contract: messages, subjects and their codec; JSON Schemas generated from them.

The messages:

- ``messages`` — every message driftbus puts on NATS, each a Struct tagged with its schema and
  version; ``MESSAGE_TYPES`` names them all, those of the modules below included.
- ``base`` — what every message shares: the base Struct with its schema tag, and the common field
  types (SHA, name, raw object).
- ``bundle`` — the bundle message: a revision of manifests, inline or in the Object Store, with
  the options it is applied with.
- ``fleet`` — fleets: the cluster registry's ``ClusterRecord``, the ``FleetBundle``, the
  ``RolloutState`` and its ``RolloutEvent`` transitions.
- ``decision`` — the planner's audit log: one ``DecisionRecord`` per decision, with its action
  and why, and the inputs the rule decided it from (``DecisionInputs``); several of one shelf
  in a ``DecisionRecords``.
- ``intents`` — the planner's apply and delete intents, alone or several in an ``IntentBatch``.
- ``tenants`` — the tenants file (tenants, their identities and limits), also its stored form.
- ``windows`` — the sync windows file (allow / deny, cron, duration, time zone, globs).
- ``notify`` — the notifications file: providers, alerts, filters, secrets read from files.
- ``cli`` — what the command line prints with ``-o json``, as typed Structs.
- ``replay`` — what ``driftbus replay -o json`` prints: the decisions a build would make
  otherwise.
- ``checkpoint`` — a cluster's checkpoint: what its planner folded from the fact streams, up to
  which sequences, in MessagePack parts (not a JSON message: no schema file).

Around them:

- ``tokens`` — object keys and their one reversible encoding into subject tokens and KV keys.
- ``subjects`` — the subject layout: every subject built, and read back (``parse_subject``); the
  shelf of a decision record (``decision_shelf``).
- ``codec`` — encoding and decoding: the one place bytes become typed messages (``WireError``).
- ``generate`` — ``python -m schemas.generate [--check]``: the committed JSON Schema files in
  ``schemas/json/``, rewritten or checked.
"""
