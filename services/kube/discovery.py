"""Discovery: (apiVersion, kind) → REST resource, cached per group-version.

A kind that is not in the cache triggers a fetch of just its group-version (that is how a new
CRD becomes known); the whole discovery is never invalidated and refetched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from services.kube.errors import NotFound


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str = "", name: str = "") -> str:
        """Collection or object path; ``namespace=""`` on a namespaced kind means all namespaces."""
        parts = [self.base_path()]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        return "/".join(parts)

    def __str__(self) -> str:
        return (
            f"{self.plural}.{self.group}/{self.version}"
            if self.group
            else f"{self.plural}/{self.version}"
        )


Fetch = Callable[[str], Awaitable[dict[str, Any]]]

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
"""Accept header of aggregated discovery (GA in Kubernetes 1.30): every group, version and
resource of ``/apis`` in one response. An older server answers a plain ``APIGroupList``."""


def aggregated_scopes(doc: dict[str, Any]) -> dict[tuple[str, str], bool]:
    """(group, kind) → namespaced, for every resource of an aggregated discovery document;
    nothing for any other document (a server without aggregated discovery)."""
    if doc.get("kind") != "APIGroupDiscoveryList":
        return {}
    scopes: dict[tuple[str, str], bool] = {}
    for group in doc.get("items") or []:
        name = str((group.get("metadata") or {}).get("name", ""))
        for version in group.get("versions") or []:
            for r in version.get("resources") or []:
                kind = (r.get("responseKind") or {}).get("kind")
                if kind and r.get("scope") in ("Namespaced", "Cluster"):
                    scopes.setdefault((name, str(kind)), r["scope"] == "Namespaced")
    return scopes


class Discovery:
    def __init__(self, fetch: Fetch, fetch_aggregated: Fetch | None = None) -> None:
        self._fetch = fetch
        self._fetch_aggregated = fetch_aggregated
        self._by_gv: dict[str, dict[str, Resource]] = {}
        self.fetches = 0
        """How many group-version documents were fetched (tests assert it stays small)."""

    async def resource(self, api_version: str, kind: str) -> Resource:
        cached = self._by_gv.get(api_version, {}).get(kind)
        if cached is not None:
            return cached
        kinds = await self.refresh(api_version)
        if kind not in kinds:
            raise NotFound(
                f"{kind} ({api_version})",
                404,
                "NotFound",
                f"the server does not serve kind {kind} in {api_version}",
            )
        return kinds[kind]

    async def refresh(self, api_version: str) -> dict[str, Resource]:
        """Refetch one group-version (after a CRD appears or changes)."""
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        self.fetches += 1
        try:
            doc = await self._fetch(path)
        except NotFound:
            doc = {"resources": []}
        kinds: dict[str, Resource] = {}
        for r in doc.get("resources", []):
            name = r.get("name", "")
            if "/" in name:  # subresources such as deployments/status
                continue
            kinds[r["kind"]] = Resource(group, version, r["kind"], name, bool(r.get("namespaced")))
        self._by_gv[api_version] = kinds
        return kinds

    async def served_scopes(self) -> dict[tuple[str, str], bool]:
        """The scope of every kind ``/apis`` serves, in one request (aggregated discovery); empty
        when the server cannot answer so (then kinds are learned one group-version at a time)."""
        if self._fetch_aggregated is None:
            return {}
        self.fetches += 1
        return aggregated_scopes(await self._fetch_aggregated("/apis"))

    def forget(self, api_version: str) -> None:
        self._by_gv.pop(api_version, None)
