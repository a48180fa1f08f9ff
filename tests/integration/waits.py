"""Waiting for the API server to show an object (again), or no longer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from services.kube import KubeClient, NotFound
from services.kube.discovery import Resource


async def until_object(
    kube: KubeClient,
    res: Resource,
    name: str,
    namespace: str,
    *,
    present: bool = True,
    within: float = 60.0,
    logs: Callable[[], str] = lambda: "",
) -> None:
    """Until ``name`` exists (``present``) or is gone; fails with the services' logs."""
    deadline = time.monotonic() + within
    while True:
        try:
            await kube.get(res, name, namespace)
            exists = True
        except NotFound:
            exists = False
        if exists == present:
            return
        what = "never (re)appeared" if present else "never went away"
        assert time.monotonic() < deadline, f"{res.kind}/{namespace}/{name} {what}\n{logs()}"
        await asyncio.sleep(0.1)
