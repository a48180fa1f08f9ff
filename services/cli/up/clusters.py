"""The clusters of ``driftbus up``: which ones, started how, served by which processes, and one
kubeconfig for all of them.

Which: ``--cluster NAME[:KEY=VALUE,…]`` repeated (each name a DNS label, each label a
Kubernetes one, checked before anything starts: a bad spec is one line naming it), or
``--clusters N`` (``local`` for 1, ``local-1`` … ``local-N`` otherwise, no labels), else the one
cluster ``local``. The labels go to that cluster's watcher (``--cluster-labels``), which gives
them to the fleet registry when the cluster first registers.

Started how: each its own etcd + kube-apiserver (and its controllers unless
``--no-controllers``), one after the other, each in ``WORKDIR/<name>/``; they share the stack's
one nats-server and planner. ``kubeconfig`` merges them into ``WORKDIR/kubeconfig``: a context
per cluster, named as the cluster (its cluster entry too; its user ``<name>-admin``), the first
one current.

Served by: a watcher and ``--appliers`` appliers per cluster, each as that cluster's own NATS
identity (``localbus``); ``service`` is the command line of any process of the stack.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from services.cli.up.localbus import LocalBus
from services.clusters.selector import parse_cluster_spec
from services.controlplane import servers

DEFAULT = "local"
"""The cluster of a one-cluster ``up``; ``--clusters N`` names them ``local-1`` … ``local-N``."""


class SpecError(ValueError):
    """A ``--cluster``/``--clusters`` value that cannot be used; the message names it."""


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """One cluster ``up`` serves: its name and the labels its watcher registers it with."""

    name: str
    labels: dict[str, str] = dataclasses.field(default_factory=dict)

    def labels_arg(self) -> str:
        """The labels as the watcher's ``--cluster-labels`` takes them: ``k=v,k2=v2``."""
        return ",".join(f"{k}={v}" for k, v in self.labels.items())

    def describe(self) -> str:
        """``a (env=canary)``, or the name alone."""
        return f"{self.name} ({self.labels_arg()})" if self.labels else self.name


def specs(given: list[str] | None, count: int | None) -> list[ClusterSpec]:
    """The clusters asked for: ``--cluster`` (repeated) or ``--clusters N``, else ``local``."""
    if given and count is not None:
        raise SpecError("give either --clusters N or --cluster NAME (repeated), not both")
    if count is not None:
        if count < 1:
            raise SpecError(f"--clusters {count}: at least 1")
        if count == 1:
            return [ClusterSpec(DEFAULT)]
        return [ClusterSpec(f"{DEFAULT}-{i}") for i in range(1, count + 1)]
    out: list[ClusterSpec] = []
    for spec in given or [DEFAULT]:
        try:  # the fleet's rules (services.clusters.selector); the message names the spec
            name, labels = parse_cluster_spec(spec)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        if any(s.name == name for s in out):
            raise SpecError(
                f"cluster {json.dumps(spec)}: the name {json.dumps(name)} is given twice"
            )
        out.append(ClusterSpec(name, labels))
    return out


def start(
    wanted: list[ClusterSpec], workdir: Path, *, controllers: bool, into: list[servers.Cluster]
) -> None:
    """Start every cluster in turn under ``workdir/<name>``, appending each to ``into`` once it
    runs (the caller stops what is there, whatever happens on the way)."""
    for spec in wanted:
        into.append(
            servers.Cluster.start(
                spec.name,
                workdir / spec.name,
                controllers=controllers,
                etcd_tls=True,  # its storage: the API server's client certificate only
            )
        )


def kubeconfig(clusters: list[servers.Cluster], path: Path) -> Path:
    """One kubeconfig with a context per cluster, named as the cluster; the first current."""
    merged: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": clusters[0].name,
    }
    for c in clusters:
        own = json.loads(c.kubeconfig.read_text())  # JSON, as KubeAPIServer writes it
        user = f"{c.name}-admin"
        merged["clusters"].append({"name": c.name, "cluster": own["clusters"][0]["cluster"]})
        merged["users"].append({"name": user, "user": own["users"][0]["user"]})
        merged["contexts"].append({"name": c.name, "context": {"cluster": c.name, "user": user}})
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)  # the admin tokens of every cluster
    path.write_text(json.dumps(merged, indent=2))  # JSON is YAML: every reader takes it
    return path


def service(
    name: str,
    role: str,
    cluster: str,
    workdir: Path,
    env: dict[str, str],
    *,
    context: str | None = None,
    ui_port: int = 0,
    extra: tuple[str, ...] = (),
) -> servers.Process:
    """The process ``name`` of the stack: ``driftbus ROLE`` with its flags, logging under
    ``workdir/services``."""
    argv = [sys.executable, "-m", "services.cli.main", role]
    if role == "ui":
        argv += ["--port", str(ui_port)]
    elif role == "source":
        argv += ["--cluster", cluster]
    elif role not in ("planner", "notify"):
        argv += ["--cluster", cluster]
        if context:
            argv += ["--context", context]
    return servers.Process(name, [*argv, *extra], workdir / "services", env=env)


def cluster_services(
    wanted: list[ClusterSpec],
    args: argparse.Namespace,
    workdir: Path,
    env: dict[str, str],
    creds: LocalBus,
) -> list[servers.Process]:
    """A watcher (given the cluster's labels) and ``--appliers`` appliers per cluster, each as
    that cluster's NATS identity: ``watcher``, ``applier-0``… for one cluster, ``watcher-<name>``,
    ``applier-<name>-0``… for several. A local cluster is its context of the stack's kubeconfig;
    ``--kubeconfig``'s is ``--context``."""
    procs = []
    for spec in wanted:
        suffix = f"-{spec.name}" if len(wanted) > 1 else ""
        ctx = args.context if args.kubeconfig else spec.name
        labels = ("--cluster-labels", spec.labels_arg()) if spec.labels else ()
        w_env = env | creds.env(f"watcher-{spec.name}")
        procs.append(
            service(
                f"watcher{suffix}", "watcher", spec.name, workdir, w_env, context=ctx, extra=labels
            )
        )
        a_env = env | creds.env(f"applier-{spec.name}")
        procs += [
            service(f"applier{suffix}-{i}", "applier", spec.name, workdir, a_env, context=ctx)
            for i in range(args.appliers)
        ]
    return procs


def describe(
    wanted: list[ClusterSpec], *, local: bool, context: str | None
) -> list[dict[str, Any]]:
    """What ``up -o json`` says of each cluster (``schemas.cli.UpCluster``): a local cluster's
    context is its name; with ``--kubeconfig``, the ``--context`` given (None: the current)."""
    return [
        {"name": s.name, "labels": dict(s.labels), "context": s.name if local else context}
        for s in wanted
    ]


def listed(rows: list[dict[str, Any]]) -> str:
    """``describe``'s rows in one line: ``a (env=canary), b (env=prod)``."""
    return ", ".join(ClusterSpec(r["name"], r.get("labels") or {}).describe() for r in rows)


__all__ = [
    "DEFAULT",
    "ClusterSpec",
    "SpecError",
    "cluster_services",
    "describe",
    "kubeconfig",
    "listed",
    "service",
    "specs",
    "start",
]
