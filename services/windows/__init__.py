"""Sync windows (docs/windows.md): when a bundle's writes may happen.

Pure, by contract (no I/O):

- ``spec`` — one window: what it names and when it is open.
- ``verdict`` — for a bundle on a cluster, whether writes may happen now and when that changes;
  the windows file read and checked.
"""
