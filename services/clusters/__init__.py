"""Clusters: what they are called and labelled, and who serves them.

- ``selector`` — label selectors, label changes and cluster specs, read as Kubernetes reads them
  (pure, by contract).
- ``registry`` — the cluster registry: one ``ClusterRecord`` per cluster, and a live view of it.
- ``members`` — heartbeats: who serves a cluster; ``serving`` (pure) says what is missing.
"""
