"""What ``publish`` and ``plan`` read: the PATH / ``--git`` / ``--helm`` / ``--oci`` flags and
the bundle they name, and the manifests those flags select (the loaders themselves:
``services.inputs.load``, ``.gitrepo`` and ``.oci_artifact``; a kubectl or helm they need and
cannot find is built, ``assets.ensure``).
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
    from services.common.settings import SettingsError
    from services.controlplane import assets
    from services.inputs import git as gitrepo
    from services.inputs import load
    from services.inputs.limits import InputLimits

    try:
        limits = InputLimits.from_env(args=args)
    except SettingsError as exc:
        raise load.InputError(str(exc)) from None
    allow_remote = bool(getattr(args, "allow_remote_bases", False))

    if sum(map(bool, (args.helm, args.git, args.paths, args.oci))) > 1:
        raise load.InputError(f"{args.command}: give one source: PATH..., --git, --helm or --oci")
    if args.semver and not args.oci:
        raise load.InputError(f"{args.command}: --semver picks an OCI tag: give --oci too")
    if args.oci:
        loaded = load_oci(args, limits, allow_remote)
    elif args.helm:
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
            f"nothing to {args.command}: give PATH..., --git REPO [--ref REF], --helm CHART or "
            "--oci oci://REGISTRY/REPO:TAG"
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


def oci_access(args: argparse.Namespace) -> Any:
    """How the registry is reached: ``add_oci_access_args``'s flags (``oci.OciAccess``)."""
    from services.inputs.oci.reference import OciAccess

    return OciAccess(
        username=args.oci_username or "",
        password_file=args.oci_password_file or "",
        docker_config=args.oci_config or "",
        insecure=args.insecure,
    )


def load_oci(args: argparse.Namespace, limits: Any, allow_remote: bool) -> Any:
    """``--oci``: the artifact (Flux's, or generic) or chart the reference names, or the newest tag
    in ``--semver``; its manifest's digest is the revision (``oci_artifact``)."""
    import asyncio

    from services.controlplane import assets
    from services.inputs import load
    from services.inputs.oci import artifact as oci_artifact
    from services.inputs.oci import reference as oci

    ref = oci.parse_reference(args.oci, bare=bool(args.semver))
    chart = oci_artifact.ChartOptions(
        release=args.release or load.release_name(args.bundle),
        namespace=args.namespace or "",
        values=tuple(args.values),
        sets=tuple(args.set),
    )
    return asyncio.run(
        oci_artifact.fetch_and_load(
            ref,
            access=oci_access(args),
            semver=args.semver or "",
            path=args.path or "",
            chart=chart,
            locate=assets.ensure,
            limits=limits,
            allow_remote_bases=allow_remote,
        )
    )


def add_oci_access_args(p: argparse.ArgumentParser) -> None:
    """How a registry is reached (``--oci``, ``driftbus push``): credentials and plain HTTP."""
    p.add_argument(
        "--oci-username",
        metavar="USER",
        help="registry user (with --oci-password-file; default: the registry's entry in the "
        "docker config.json, else anonymous)",
    )
    p.add_argument(
        "--oci-password-file",
        metavar="FILE",
        help="file holding the registry password or token (one line)",
    )
    p.add_argument(
        "--oci-config",
        metavar="FILE",
        help="docker config.json to read registry credentials from (default: "
        "$DOCKER_CONFIG/config.json, else ~/.docker/config.json; auths entries only)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain HTTP to a registry that is not on loopback (loopback registries "
        "without TLS are reached over HTTP anyway)",
    )


def tenant_default_namespace(args: argparse.Namespace) -> str:
    """The default namespace the tenant policy gives the bundle's tenant ("" for a platform
    bundle, a tenant with none, or a policy that cannot be read: the planner decides then)."""
    import asyncio

    from schemas.subjects import split_bundle
    from services.cli import reads as user
    from services.tenancy import policy as tenancy
    from services.tenancy import store as policy

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
    (with the input limits, ``services.inputs.limits``). ``fleet``: ``--cluster`` may be
    repeated (a list: a fleet of the named clusters, ``services/cli/fleet/publish.py``)."""
    from services.common import settings
    from services.inputs.limits import InputLimits

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
    p.add_argument(
        "--path", help="directory inside the repository (with --git) or the artifact (--oci)"
    )
    p.add_argument(
        "--oci",
        metavar="URL",
        help="read a Flux-format OCI artifact, a Helm chart or a generic artifact of one "
        "tar+gzip layer (oras push, Argo CD) from a registry: "
        "oci://REGISTRY/REPO:TAG, …@sha256:DIGEST, or with --semver; the manifest's digest is "
        "the revision (docs/oci.md)",
    )
    p.add_argument(
        "--semver",
        metavar="RANGE",
        help="with --oci (no tag): the newest tag in this npm-style range, e.g. '>=1.0 <2'",
    )
    add_oci_access_args(p)
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
