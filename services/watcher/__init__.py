"""The watcher: list+watch of driftbus-owned objects per kind, publishing serverSHA and health.

The only component that reads the cluster continuously (DESIGN §5).
"""
