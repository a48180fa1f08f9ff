"""The planner: the decision rule of DESIGN §3 over the compacted BUNDLES/SERVER/APPLIED streams.

Owns no connection to Kubernetes. Built in the reconcile pipeline issue; this package exists so
the layout and import contracts hold from day one.
"""
