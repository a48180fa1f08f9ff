"""The ``driftbus`` command line."""
