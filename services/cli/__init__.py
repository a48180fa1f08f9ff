"""The ``driftbus`` command line: one parser (``main``), each command family registered by its
module.

The commands:

- ``publish`` — send manifests as a bundle revision; with ``--wait``, follow it to an exit code.
- ``fleet`` — ``publish`` to a fleet (``--selector``, ``--cluster`` repeated) and its ``--wait``.
- ``plan_cmd`` — ``driftbus plan`` as a command (flags, connections, printing); ``plan`` computes
  its rows with the planner's own rule and a server-side dry-run, ``plan_render`` makes
  them JSON, Markdown and an exit code.
- ``lifecycle`` — a bundle after its publish: ``bundles``, ``delete bundle``, ``suspend``,
  ``resume``, ``rollback``.
- ``status`` — ``status``, ``why`` and ``shards``; ``follow`` is ``status -f``, ``shards`` reads
  the shards bucket (its document made by a pure function), ``user`` what these read on the bus.
- ``clusters`` — the cluster registry: list, ``label``, ``remove``.
- ``rollout`` — a fleet bundle's rollout, seen and steered (``status``, ``pause``, ``undo``, …).
- ``tenants`` — the tenant policy: show it, ``apply`` a file, the ``rbac`` it needs.
- ``windows`` — the sync windows: show them (open or closed, the next change), ``apply`` a file.
- ``notify`` — ``driftbus notify``: the notification service, ``apply`` and ``show`` its
  configuration.
- ``push`` — ``driftbus push DIR oci://…:TAG``: a directory as a Flux-format OCI artifact; prints
  its digest.
- ``security`` — ``nats-config`` and ``dev-certs``: the locked-down bus, generated.
- ``tools`` — ``driftbus ui`` and ``driftbus assets``.
- ``run`` — ``driftbus watcher|planner|applier|source``: one service in the foreground.

What the commands share:

- ``inputs`` — what ``publish`` and ``plan`` read: PATH, ``--git`` or ``--helm``, and the
  manifests they select.
- ``objectref`` — an object as a person types it, matched against the objects the bus knows.
- ``context`` — finding the running stack (the context file ``up`` writes) when no NATS URL is
  given.
- ``output`` — ``-o``: one typed value as a table, JSON or YAML; ``table`` aligned tables,
  colour on a terminal, error lines.
- ``progress`` — live progress of a revision while a command waits for it.
- ``exits`` — a bus command's coroutine run to an exit code; any failure one line, exit 1.

Starting the local stack:

- ``up`` — ``driftbus up`` / ``down``: nats-server, the control plane and the services,
  supervised, then the example bundle.
- ``upclusters`` — its clusters: which ones, started how, served by which processes, and one
  kubeconfig for all.
- ``localbus`` — its closed bus: a CA, certificates, passwords and permission sets per identity.
- ``example`` — what it does on its bus as the operator: the tenant policy, ``examples/hello``.
- ``detach`` — ``up --detach`` and ``down``: the stack in the background, stopped by its pid.
- ``upinfo`` — where a stack lives (its working directory) and how it describes itself once up.

And ``docs``: ``python -m services.cli.docs`` writes ``docs/settings.md`` from the settings
models and the ``publish`` flags.
"""
