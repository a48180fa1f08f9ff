"""The ``driftbus`` command line: one parser (``main``), each command family registered by its
module.

The commands:

- ``publish`` — send manifests as a bundle revision; with ``--wait``, follow it to an exit code.
- ``plan/`` — ``driftbus plan``: ``command`` (flags, connections, printing), ``explain`` (its
  rows, by the planner's own rule and a server-side dry-run), ``render`` (JSON, Markdown, an exit
  code).
- ``lifecycle`` — a bundle after its publish: ``bundles``, ``delete bundle``, ``suspend``,
  ``resume``, ``rollback``.
- ``approve`` — ``driftbus approve``: let deletions held by the prune budget through, on one
  cluster (``--cluster``) or a fleet's.
- ``status/`` — ``status``, ``why`` and ``shards``: ``command``, ``gather`` (what ``status``
  reads, as a typed value) and ``show`` (it as a table or JSON), ``follow`` (``status -f``) and
  ``shards`` (the shards bucket, its document made by a pure function).
- ``replay`` — ``driftbus replay``: the recorded decisions of a period made again by this
  build's rule (``services.planner.rule.replay``), every difference listed, exit 2.
- ``fleet/`` — fleets: ``publish`` (``--selector``, ``--cluster`` repeated, and its ``--wait``),
  ``rollout`` (a fleet bundle's rollout, seen and steered) and ``clusters`` (the registry: list,
  ``label``, ``remove``).
- ``tenants`` — the tenant policy: show it, ``apply`` a file, the ``rbac`` it needs.
- ``windows`` — the sync windows: show them (open or closed, the next change), ``apply`` a file.
- ``notify`` — ``driftbus notify``: the notification service, ``apply`` and ``show`` its
  configuration.
- ``push`` — ``driftbus push DIR oci://…:TAG``: a directory as a Flux-format OCI artifact; prints
  its digest.
- ``security`` — ``nats-config`` and ``dev-certs``: the locked-down bus, generated.
- ``tools`` — ``driftbus ui`` and ``driftbus assets``.
- ``run`` — ``driftbus watcher|planner|applier|source``: one service in the foreground.
- ``up/`` — ``driftbus up`` / ``down``: ``command`` (nats-server, the control plane and the
  services, supervised, then the example bundle), ``clusters`` (which ones, started how, one
  kubeconfig for all), ``localbus`` (its closed bus), ``example`` (the operator's first steps),
  ``detach`` (``up --detach`` and ``down``) and ``info`` (where a stack lives, how it describes
  itself).

What the commands share:

- ``reads`` — what the commands read on the bus: statuses, decisions, members, shards, waits.
- ``inputs`` — what ``publish`` and ``plan`` read: PATH, ``--git`` or ``--helm``, and the
  manifests they select.
- ``objectref`` — an object as a person types it, matched against the objects the bus knows.
- ``context`` — finding the running stack (the context file ``up`` writes) when no NATS URL is
  given.
- ``output`` — ``-o``: one typed value as a table, JSON or YAML; ``table`` aligned tables,
  colour on a terminal, error lines.
- ``progress`` — live progress of a revision while a command waits for it.
- ``exits`` — a bus command's coroutine run to an exit code; any failure one line, exit 1.

And ``docs``: ``python -m services.cli.docs`` writes ``docs/settings.md`` from the settings
models and the ``publish`` flags.
"""
