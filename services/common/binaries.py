"""Where the binaries driftbus runs are: the servers of the local control plane (nats-server,
etcd, kube-apiserver) and the renderers a publish may need (kubectl for kustomize, helm).

Finding only: a missing binary is built from the pinned Go modules by
``services.controlplane.assets``, which the CLI and the tests use; the loader
(``services.inputs.load``) and so ``driftbus source`` only find one. Lookup order follows the
controller-runtime/envtest convention so a user who already has binaries keeps using them:

1. ``TEST_ASSET_<NAME>`` (e.g. ``TEST_ASSET_KUBE_APISERVER``),
2. ``$KUBEBUILDER_ASSETS/<name>``,
3. ``<name>`` on ``PATH`` — only if it reports the pinned major.minor version (a machine's
   kubectl is often years older than the API server we test against),
4. the driftbus cache (``$DRIFTBUS_CACHE_DIR`` or ``~/.cache/driftbus``), where
   ``assets`` builds them.

Standard library only: ``assets`` runs before the project's Python dependencies exist.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Asset:
    """One binary driftbus runs and the pinned Go package it is built from."""

    name: str  # binary name, e.g. "kube-apiserver"
    module_dir: str  # consumer module under tools/go/
    package: str  # Go main package to build
    version: str  # pinned module version, also the cache key
    ldflags: str = "-s -w"

    @property
    def env_var(self) -> str:
        return "TEST_ASSET_" + self.name.upper().replace("-", "_")


KUBE_VERSION = "v1.36.3"
HELM_VERSION = "v4.3.1"
KWOK_VERSION = "v0.8.0"
SOPS_VERSION = "v3.13.3"
AGE_VERSION = "v1.3.2"
REGISTRY_VERSION = "v3.1.2"
_KUBE_LDFLAGS = (
    "-s -w"
    f" -X k8s.io/component-base/version.gitVersion={KUBE_VERSION}"
    " -X k8s.io/component-base/version.gitMajor=1"
    " -X k8s.io/component-base/version.gitMinor=36"
    " -X k8s.io/component-base/version.gitTreeState=clean"
)

ASSETS: dict[str, Asset] = {
    a.name: a
    for a in (
        Asset("nats-server", "nats", "github.com/nats-io/nats-server/v2", "v2.14.9"),
        Asset("etcd", "etcd", "go.etcd.io/etcd/server/v3", "v3.6.16"),
        Asset(
            "kube-apiserver",
            "kube",
            "k8s.io/kubernetes/cmd/kube-apiserver",
            KUBE_VERSION,
            _KUBE_LDFLAGS,
        ),
        Asset("kubectl", "kube", "k8s.io/kubernetes/cmd/kubectl", KUBE_VERSION, _KUBE_LDFLAGS),
        Asset(
            "kube-controller-manager",
            "kube",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            KUBE_VERSION,
            _KUBE_LDFLAGS,
        ),
        Asset(
            "kube-scheduler",
            "kube",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            KUBE_VERSION,
            _KUBE_LDFLAGS,
        ),
        Asset("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION),
        Asset(
            "helm",
            "helm",
            "helm.sh/helm/v4/cmd/helm",
            HELM_VERSION,
            f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
        ),
        Asset("sops", "sops", "github.com/getsops/sops/v3/cmd/sops", SOPS_VERSION),
        Asset("age-keygen", "sops", "filippo.io/age/cmd/age-keygen", AGE_VERSION),
        Asset(
            "registry",
            "registry",
            "github.com/distribution/distribution/v3/cmd/registry",
            REGISTRY_VERSION,
        ),
    )
}


class AssetError(RuntimeError):
    """A binary could not be found or built; the message says which and why."""


def cache_dir() -> Path:
    env = os.environ.get("DRIFTBUS_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "driftbus"


def cached_path(asset: Asset) -> Path:
    return cache_dir() / "bin" / f"{asset.name}-{asset.version}" / asset.name


def find(name: str) -> Path | None:
    """Return an existing binary for ``name`` without building anything."""
    asset = ASSETS[name]
    explicit = os.environ.get(asset.env_var)
    if explicit:
        p = Path(explicit)
        if not os.access(p, os.X_OK):
            raise AssetError(f"{asset.env_var}={explicit} is not an executable file")
        return p
    kb = os.environ.get("KUBEBUILDER_ASSETS")
    if kb and os.access(Path(kb) / name, os.X_OK):
        return Path(kb) / name
    on_path = shutil.which(name)
    if on_path and _same_minor(asset, version_of(name, Path(on_path))):
        return Path(on_path)
    cached = cached_path(asset)
    return cached if os.access(cached, os.X_OK) else None


def require(name: str) -> Path:
    """The binary for ``name``, or an ``AssetError`` saying where it was looked for and how to
    get it (nothing is built here)."""
    found = find(name)
    if found is None:
        asset = ASSETS[name]
        raise AssetError(
            f"{name}: not found via {asset.env_var}, KUBEBUILDER_ASSETS, PATH (version "
            f"{asset.version}) or {cached_path(asset)}; `driftbus assets --build {name}` builds it"
        )
    return found


def _same_minor(asset: Asset, reported: str) -> bool:
    want = re.match(r"v?(\d+)\.(\d+)\.", asset.version)
    got = re.search(r"v?(\d+)\.(\d+)\.", reported)
    return bool(want and got and want.groups() == got.groups())


def version_of(name: str, path: Path) -> str:
    """The version string a binary reports about itself (shown in the pytest header)."""
    args = {
        "nats-server": ["--version"],
        "etcd": ["--version"],
        "kube-apiserver": ["--version"],
        "kubectl": ["version", "--client"],
        "helm": ["version", "--short"],
        "sops": ["--version", "--disable-version-check"],
        "age-keygen": ["--version"],
        "registry": ["--version"],
    }[name]
    try:
        res = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (res.stdout or res.stderr).strip().splitlines()
    return text[0] if text else "unknown"
