"""The test and benchmark harness (not shipped: the wheel holds ``services`` and ``schemas``):
the real pipeline as subprocesses on the local control plane (``pipeline``: services, bundles,
status, API write counts) and several clusters on one bus (``fleet``)."""
