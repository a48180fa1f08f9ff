"""Credentials come from kubernetes-asyncio's loaders without its API models (credentials.py).

Each case runs in a fresh interpreter: what a service process imports is the point."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_kubeconfig_is_read_without_importing_the_api_models(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    out = _run(
        f"""
        import asyncio, sys
        from services.kube import KubeClient

        async def main():
            client = await KubeClient.from_kubeconfig({str(path)!r})
            await client.close()
            return client._config.host

        host = asyncio.run(main())
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models")]
        print(host, len(models))
        """
    )
    assert out == "https://127.0.0.1:6443 0"


def test_the_library_whole_still_imports_after_the_loaders(tmp_path: Path) -> None:
    """ApiClient (and with it the models) loads on demand: nothing of the library is lost."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    out = _run(
        f"""
        import asyncio
        from services.kube import credentials
        from kubernetes_asyncio.client import ApiClient

        async def main():
            config = await credentials.from_kubeconfig({str(path)!r}, None)
            api = ApiClient(configuration=config)
            await api.close()
            from kubernetes_asyncio.client.models import V1ConfigMap
            return type(api).__name__, V1ConfigMap.__name__

        print(*asyncio.run(main()))
        """
    )
    assert out == "ApiClient V1ConfigMap"
