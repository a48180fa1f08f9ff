"""How a local stack (``driftbus up``) is found and how it describes itself once running: its
default working directory (where its ``stack.json``, logs and data live), the description ``up``
prints when it is ready (a table, or with ``-o json`` one line typed as ``schemas.cli.UpInfo``),
and the shorter one ``up --detach`` prints before it returns.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from services.cli import context
from services.cli.up import clusters as upclusters
from services.controlplane import assets


def default_workdir() -> Path:
    return assets.cache_dir() / "up"


def print_info(info: dict[str, Any], output: str) -> None:
    if output == "json":
        import msgspec

        from schemas.cli import UpInfo

        # typed, as schemas/json/cli-up.schema.json says
        print(msgspec.json.encode(msgspec.convert(info, UpInfo)).decode(), flush=True)
        return
    width = max(len(k) for k in info)
    print()
    for k, v in info.items():
        print(f"  {k:<{width}}  {_cell(k, v)}")
    print(f"\n  driftbus commands find this stack through {info['context']} (no exports needed);")
    print("  its NATS takes mutual TLS and a password per role (the context names the files);")
    print("  kubectl and other tools:")
    print(f"  export KUBECONFIG={info['kubeconfig']}")
    if len(info["clusters"]) > 1:
        last = info["clusters"][-1]["name"]
        print(f"  kubectl --context {last} get namespaces   # a context per cluster")
    exe = "driftbus" if shutil.which("driftbus") else str(Path(sys.executable).parent / "driftbus")
    print(f"  {exe} status --cluster {info['cluster']} --bundle hello")
    print("\nCtrl-C stops everything.", flush=True)


def _cell(key: str, value: Any) -> str:
    """One value of the table as a person reads it: the clusters listed, the services as
    ``watcher (pid 4120), planner (pid 4121)``, never a Python repr."""
    if key == "clusters":
        return upclusters.listed(value)
    if key == "services" and isinstance(value, dict):
        return ", ".join(f"{name} (pid {pid})" for name, pid in value.items())
    return str(value)


def print_detached(info: dict[str, Any]) -> None:
    print(f"driftbus is running in the background (pid {info['pid']})")
    print(f"  driftbus commands find it through {context.path()}; kubectl and other tools:")
    print(f"  KUBECONFIG={info['kubeconfig']}")
    clusters = context.clusters(info)
    if len(clusters) > 1:
        print(f"  clusters (a kubeconfig context each): {upclusters.listed(info['clusters'])}")
    print(f"  NATS at {info['nats_url']}: mutual TLS and a password per role (see the context)")
    if info.get("ui"):
        print(f"  status page: {info['ui']}")
    print("  `driftbus down` stops it.")
