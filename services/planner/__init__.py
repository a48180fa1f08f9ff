"""The planner: the decision rule of DESIGN §3 over the compacted BUNDLES/SERVER/APPLIED streams.

Owns no connection to Kubernetes; emits apply and delete intents and bundle status.
"""
