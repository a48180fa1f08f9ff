"""What ``publish`` and ``plan`` read: the PATH / ``--git`` / ``--helm`` flags and the bundle they
name, and the manifests those flags select (the loaders themselves: ``services.common.load`` and
``.gitrepo``; a kubectl or helm they need and cannot find is built, ``assets.ensure``).
"""

from __future__ import annotations

import argparse
from typing import Any

from services.cli import context


def load_manifests(args: argparse.Namespace) -> Any:
    """The manifests named on the command line: PATH... or --git REPO --ref REF [--path DIR];
    a revision with no objects is refused unless --allow-empty (it would prune the bundle).
    Objects naming no namespace take ``--namespace``, else (a tenant's bundle) the tenant's
    ``defaultNamespace`` from the policy on the bus."""
    from services.common import gitrepo, load
    from services.common.limits import InputLimits
    from services.common.settings import SettingsError
    from services.controlplane import assets

    try:
        limits = InputLimits.from_env(args=args)
    except SettingsError as exc:
        raise load.InputError(str(exc)) from None
    allow_remote = bool(getattr(args, "allow_remote_bases", False))

    if sum(map(bool, (args.helm, args.git, args.paths))) > 1:
        raise load.InputError(f"{args.command}: give one source: PATH..., --git or --helm")
    if args.helm:
        loaded = load.load_helm(
            args.helm,
            release=args.release or load.release_name(args.bundle),
            namespace=args.namespace or "",
            values=args.values,
            sets=args.set,
            locate=assets.ensure,
            limits=limits,
        )
    elif args.git:
        # a chart at --path is rendered like --helm, its --values relative to the chart
        helm = gitrepo.HelmOptions(
            release=args.release or load.release_name(args.bundle),
            namespace=args.namespace or "",
            values=tuple(args.values),
            sets=tuple(args.set),
        )
        read = gitrepo.ReadOptions(limits, allow_remote)
        loaded = gitrepo.load_git(
            args.git, args.ref, args.path or "", helm, locate=assets.ensure, read=read
        )
    elif args.paths:
        loaded = load.load_paths(
            args.paths, locate=assets.ensure, limits=limits, allow_remote_bases=allow_remote
        )
    else:
        raise load.InputError(
            f"nothing to {args.command}: give PATH..., --git REPO [--ref REF] or --helm CHART"
        )
    if not args.allow_empty:
        load.require_objects(loaded, args.bundle, args.command)
    try:
        load.require_namespaces(loaded, args.namespace or "")
    except load.InputError:
        # objects naming no namespace: a tenant's bundle may take its tenant's default (only
        # then is the bus asked)
        default = "" if args.namespace else tenant_default_namespace(args)
        if not default:
            raise
        load.require_namespaces(loaded, default)
    return loaded


def tenant_default_namespace(args: argparse.Namespace) -> str:
    """The default namespace the tenant policy gives the bundle's tenant ("" for a platform
    bundle, a tenant with none, or a policy that cannot be read: the planner decides then)."""
    import asyncio

    from schemas.subjects import split_bundle
    from services.cli import user
    from services.common import policy
    from services.core import tenancy

    if not split_bundle(args.bundle)[0]:
        return ""

    async def read() -> str:
        nc = await user.connect(args)
        try:
            return tenancy.default_namespace(await policy.read_policy(nc.jetstream()), args.bundle)
        finally:
            await nc.close()

    try:
        return asyncio.run(read())
    except Exception:  # noqa: BLE001 - no bus, no right, no policy: the local check says why
        return ""


def add_source_args(p: argparse.ArgumentParser, *, fleet: bool = False) -> None:
    """Where the manifests come from, and which bundle of which cluster: publish and plan
    (with the input limits, ``services.common.limits``). ``fleet``: ``--cluster`` may be
    repeated (a list: a fleet of the named clusters, ``services/cli/fleet.py``)."""
    from services.common import settings
    from services.common.limits import InputLimits

    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="directories (recursive; hidden files and directories below them skipped), "
        "YAML/JSON files, .tar.gz tarballs",
    )
    if fleet:
        p.add_argument(
            "--cluster",
            action="append",
            help="the cluster the bundle is for; repeated: a fleet of these clusters (default: "
            "the cluster of the stack `driftbus up` runs, when NATS_URL is unset)",
        )
        p.set_defaults(cluster_from_context=True)
    else:
        context.add_cluster_arg(p, "the cluster the bundle is for")
    p.add_argument("--bundle", required=True, help="the bundle's name")
    p.add_argument("--git", metavar="REPO", help="read the manifests from a Git repository")
    p.add_argument(
        "--ref", default="HEAD", help="Git ref to read (with --git; default %(default)s)"
    )
    p.add_argument("--path", help="directory inside the repository (with --git)")
    p.add_argument(
        "--helm",
        metavar="CHART",
        help="render a Helm chart (a chart directory or .tgz) with `helm template`",
    )
    p.add_argument(
        "--values",
        action="append",
        default=[],
        metavar="FILE",
        help="Helm values file (repeat; with --git, relative to the chart at --path)",
    )
    p.add_argument("--set", action="append", default=[], metavar="K=V", help="Helm value (repeat)")
    p.add_argument(
        "--allow-remote-bases",
        action="store_true",
        help="let kustomize fetch remote bases and resources (URLs) while rendering; without "
        "it a kustomization naming one is refused (what is fetched is not pinned by the input)",
    )
    p.add_argument("--release", help="Helm release name (default: the bundle's name)")
    p.add_argument(
        "-n",
        "--namespace",
        help="default namespace for objects of namespaced kinds that name none (as kubectl "
        "apply -n); objects naming a namespace keep it",
    )
    # the bundle's byte limit is the bus's (NatsSettings.bundle_max_bytes, --bundle-max-bytes)
    settings.add_arguments(p, InputLimits, skip={"bundle_max_bytes"})
