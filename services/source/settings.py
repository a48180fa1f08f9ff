"""The ``source`` service's settings: on their own, so that starting any service (whose command
line declares every service's flags) does not load what reading a sources file needs (YAML,
OCI references, Helm options)."""

from __future__ import annotations

import dataclasses

from services.common import bus
from services.common.settings import setting
from services.fleet.rollout_flags import RolloutSettings


@dataclasses.dataclass(frozen=True)
class SourceSettings(RolloutSettings, bus.NatsSettings):
    """The ``source`` service's settings; the rollout ones (``--rollout``, ``--bake``,
    ``--max-unavailable``, ``--on-leave``, ``--substitute``…) are ``publish``'s, for
    ``--selector``."""

    cluster: str = setting("", "cluster the bundle is published for")
    bundle: str = setting("", "bundle the repository is published as")
    git: str = setting("", "repository to follow: any URL git clones, or a local path", secret=True)
    oci: str = setting(
        "",
        "OCI repository to follow instead: oci://REGISTRY/REPO (with --tag or --semver), "
        "or with :TAG or @DIGEST; a Flux artifact, a Helm chart or a generic artifact of one "
        "tar+gzip layer (docs/oci.md)",
    )
    oci_username: str = setting("", "registry user (with --oci-password-file)")
    oci_password_file: str = setting("", "file holding the registry password or token")
    oci_config: str = setting(
        "",
        "docker config.json with registry credentials (default: $DOCKER_CONFIG/config.json, "
        "else ~/.docker/config.json)",
    )
    insecure: bool = setting(
        False, "allow plain HTTP to a registry not on loopback (loopback: HTTP without asking)"
    )
    branch: str = setting(
        "",
        "branch to follow (default: the remote's default branch, followed if renamed; for a "
        "local path, the branch checked out)",
    )
    tag: str = setting("", "tag to follow (a moved tag is followed; Git or OCI)")
    semver: str = setting(
        "", "follow the newest tag in this npm-style range, e.g. ^1.2 (Git or OCI)"
    )
    path: str = setting("", "directory in the repository (a kustomization or chart is rendered)")
    namespace: str = setting("", "default namespace (kubectl apply -n); a chart's namespace")
    release: str = setting("", "Helm release name for a chart (default: the bundle's name)")
    values: tuple[str, ...] = setting((), "Helm values files, relative to the chart (a,b)")
    prune: bool = setting(True, "delete objects that leave the repository")
    allow_remote_bases: bool = setting(
        False,
        "let kustomize fetch remote bases (URLs) when rendering; off, a kustomization naming "
        "one is the source's error (what is fetched is not pinned by the commit)",
    )
    sources: str = setting(
        "",
        "YAML file listing several sources (each: cluster, bundle, git, branch|tag|semver, "
        "path, namespace, release, values, prune, allow_remote_bases; a fleet's: selector, "
        "rollout, on_leave, substitute); replaces the "
        "single-source settings",
    )
    interval: float = setting(60.0, "seconds between polls of each repository")
    webhook: str = setting("", "HOST:PORT to serve push webhooks on (POST /hook[/BUNDLE])")
    webhook_secret: str = setting(
        "",
        "shared secret webhooks must prove (GitHub X-Hub-Signature-256, GitLab X-Gitlab-Token "
        "or Authorization: Bearer); unset: only POSTs from loopback trigger a poll",
        secret=True,
    )
    selector: str = setting(
        "",
        "a label selector over the cluster registry: publish each commit to that fleet "
        "instead of one cluster (docs/fleet.md); '*' for every registered cluster",
    )
    cache_dir: str = setting(
        "", "where the bare copies are cloned, afresh at each start (default: a temporary dir)"
    )
