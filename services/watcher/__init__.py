"""The watcher: list+watch of driftbus-owned objects per GVK, publishing serverSHA and health.

The only component that reads the cluster continuously (DESIGN §5). Built in the reconcile
pipeline issue; this package exists so the layout and import contracts hold from day one.
"""
