"""The applier: server-side apply of intents from the shared durable consumer (DESIGN §6).

The only component that writes to the cluster. ``service`` (the ``Applier`` and ``run``; its
flags are in ``settings``, which the command line reads without loading the service) wires
together ``consumer`` (fetching, concurrency), ``fence`` (deposed planners), ``gate`` (objects
wait for their namespace's apply), ``verbs`` (apply, replace, prune), ``decrypt`` (a SOPS
Secret's key, by its bundle's tenant, and ``sops``), ``classify`` (errors → report / retry,
pure), ``report`` (facts and status) and ``reports`` (the applied facts of one moment as one
message, issue 44).
"""
