"""The planner: the decision rule of DESIGN §3 over the compacted BUNDLES/SERVER/APPLIED streams.

Owns no connection to Kubernetes; emits apply and delete intents and bundle status. A house of
rooms, each importing only the rooms below it (enforced by import-linter, by folder):

- ``service`` — the process: claims clusters and runs one planner per claimed cluster;
  ``settings`` its flags. With ``rule`` below, the planner's public face.
- ``shell/`` — the I/O: the run loop, bundle intake, publishing decisions and status, the
  periodic duties, rollback requests.
- ``sharding/`` — which replica plans which cluster: the claim loop over a KV bucket, and its
  pure rules.
- ``status/`` (pure) — is bundle X Ready, and why: its objects counted, its phase named.
- ``memory/`` (pure) — what the planner holds: the packed SHA cache, each object's manifest,
  health and last word, and one cluster's whole state.
- ``rule/`` (pure) — what to do with one object: the records and events, the decision rule, a
  revision checked and taken in, holds, tenant limits, take-over, prune safety, and the messages
  a decision sends. ``driftbus plan`` uses it too, so a plan cannot disagree with the planner.
"""
