"""Sync windows (docs/windows.md): when a bundle's writes may happen.

Pure, by contract (no I/O):

- ``spec`` — one window: what it names and when it is open.
- ``verdict`` — for a bundle on a cluster, whether writes may happen now and when that changes;
  the windows in force as rows.
- ``document`` — the windows file read and checked (``FILE:LINE``), the stored windows read back:
  the windows as a ``services.stored`` document.

On the bus:

- ``store`` — the windows in their KV bucket, followed live keeping the last good ones.
"""
