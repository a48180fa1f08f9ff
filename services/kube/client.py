"""The one choke point for Kubernetes HTTP: auth, TLS, timeouts, status → typed error.

Verb helpers (apply, get, delete, list, watch) are thin wrappers over ``request``. Credentials
come from kubernetes-asyncio's loaders (kubeconfig, exec plugins, in-cluster service account),
which we use only for that: the HTTP is ours, so list/watch/apply behave predictably
(TESTENV.md lists the library pitfalls this avoids).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from multidict import CIMultiDict

from services.common.telemetry import meter
from services.kube import credentials
from services.kube.discovery import AGGREGATED, Discovery, Resource
from services.kube.errors import Gone, KubeError, Retryable, error_for

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

APPLY_PATCH = "application/apply-patch+yaml"
# A single watch line holds a whole object; CRDs with big schemas exceed aiohttp's 64 KiB default.
_READ_BUFFER = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        rv: str = self.object.get("metadata", {}).get("resourceVersion", "")
        return rv


Page = list[dict[str, Any]]  # (a method below is called ``list``)


API_REQUESTS = meter.create_counter(
    "driftbus_kube_requests", description="Kubernetes API requests by verb and HTTP code"
)


class KubeClient:
    """Async client of one cluster. Create with ``from_kubeconfig`` or ``in_cluster``."""

    def __init__(self, config: Configuration, *, timeout: float = 30.0) -> None:
        self._config = config
        self.host: str = str(config.host or "").rstrip("/")
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._root = self
        """The client whose connection pool this one uses (itself, or what it is a view of)."""
        self._impersonate: tuple[str, tuple[str, ...]] | None = None
        self.discovery = Discovery(self.get_path, self._get_aggregated)

    def impersonating(self, user: str, groups: Sequence[str] = ()) -> KubeClient:
        """A view of this client whose requests are made as ``user`` in ``groups``
        (``Impersonate-User``/``-Group``): the API server authorises each one as that identity.
        It shares the connection pool and the discovery cache, and discovery still runs as
        this client's own identity (which kinds exist is not a tenant's secret)."""
        view = copy.copy(self)
        view._impersonate = (user, tuple(groups))
        return view

    @classmethod
    async def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        return cls(await credentials.from_kubeconfig(path, context), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeClient:
        return cls(credentials.in_cluster(), **kwargs)

    def _ssl(self) -> ssl.SSLContext | bool:
        c = self._config
        if not c.verify_ssl:
            return False
        ctx = ssl.create_default_context(cafile=c.ssl_ca_cert or None)
        if c.cert_file:
            ctx.load_cert_chain(c.cert_file, c.key_file)
        return ctx

    async def _client(self) -> aiohttp.ClientSession:
        root = self._root
        if root._session is None or root._session.closed:
            connector = aiohttp.TCPConnector(ssl=root._ssl(), limit=64)
            root._session = aiohttp.ClientSession(
                connector=connector,
                read_bufsize=_READ_BUFFER,
                json_serialize=_dumps_str,
            )
        return root._session

    async def close(self) -> None:
        if self._root is self and self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _headers(
        self, content_type: str | None, accept: str = "application/json"
    ) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict(Accept=accept)
        token = await self._config.get_api_key_with_prefix("BearerToken")
        if token:
            headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        if self._impersonate is not None:
            user, groups = self._impersonate
            headers["Impersonate-User"] = user
            for group in groups:  # one header per group, as the API server reads them
                headers.add("Impersonate-Group", group)
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        subject: str = "",
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-request HTTP timeout, passed on
        accept: str = "application/json",
    ) -> dict[str, Any]:
        """One API call; returns the decoded JSON body or raises a typed ``KubeError``.

        ``subject`` names what the call is about (``ConfigMap/ns/name``) and starts every error.
        """
        session = await self._client()
        subject = subject or f"{method} {path}"
        try:
            async with session.request(
                method,
                self.host + path,
                params=params,
                data=body,
                headers=await self._headers(content_type, accept),
                timeout=aiohttp.ClientTimeout(total=timeout or self._timeout),
            ) as resp:
                raw = await resp.read()
                API_REQUESTS.add(1, {"verb": method, "code": str(resp.status)})
                if resp.status >= 400:
                    raise error_for(
                        subject,
                        resp.status,
                        _loads_or_none(raw),
                        _retry_after(resp.headers.get("Retry-After")),
                    )
        except KubeError:
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            API_REQUESTS.add(1, {"verb": method, "code": "unreachable"})
            raise Retryable(
                subject, 0, type(exc).__name__, str(exc) or "connection failed"
            ) from None
        decoded = _loads_or_none(raw)
        if decoded is None:
            raise KubeError(subject, resp.status, "BadResponse", "response is not a JSON object")
        return decoded

    async def get_path(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def _get_aggregated(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path, accept=AGGREGATED)

    async def resource_for(self, obj: Mapping[str, Any]) -> Resource:
        return await self.discovery.resource(
            str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        )

    # --- verbs ----------------------------------------------------------------------------

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str = "driftbus",
        force: bool = False,
        dry_run: bool = False,
        resource: Resource | None = None,
    ) -> dict[str, Any]:
        """Server-side apply of a raw object; returns the object the server stored."""
        res = resource or await self.resource_for(obj)
        meta = obj.get("metadata", {})
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        if dry_run:
            params["dryRun"] = "All"
        return await self.request(
            "PATCH",
            res.path(meta.get("namespace", ""), meta["name"]),
            subject=_subject(obj),
            params=params,
            body=orjson.dumps(obj),
            content_type=APPLY_PATCH,
        )

    async def get(self, res: Resource, name: str, namespace: str = "") -> dict[str, Any]:
        return await self.request(
            "GET",
            res.path(namespace, name),
            subject=f"{res.kind}/{namespace + '/' if namespace else ''}{name}",
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str = "",
        *,
        resource_version: str | None = None,
        uid: str | None = None,
        propagation: str | None = None,
    ) -> dict[str, Any]:
        """Delete; ``uid``/``resource_version`` make it conditional on the object being that
        very one (409 Conflict otherwise)."""
        options: dict[str, Any] = {}
        preconditions = {
            k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        body = None
        if options:
            body = orjson.dumps({"apiVersion": "v1", "kind": "DeleteOptions", **options})
        return await self.request(
            "DELETE",
            res.path(namespace, name),
            body=body,
            content_type="application/json" if body else None,
            subject=f"{res.kind}/{namespace + '/' if namespace else ''}{name}",
        )

    async def list(
        self, res: Resource, *, namespace: str = "", label_selector: str = "", limit: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Paginated list; returns (items, the list's resourceVersion to watch from)."""
        items: Page = []
        rv = ""
        async for page, page_rv in self.list_pages(
            res, namespace=namespace, label_selector=label_selector, limit=limit
        ):
            items += page
            rv = page_rv
        return items, rv

    async def list_pages(
        self, res: Resource, *, namespace: str = "", label_selector: str = "", limit: int = 500
    ) -> AsyncIterator[tuple[Page, str]]:
        """The pages of a list, one at a time, so a big list is never all in memory at once.

        Yields (items, resourceVersion); the resourceVersion to watch from is the last page's.
        """
        cont = ""
        while True:
            params = {"limit": str(limit)}
            if label_selector:
                params["labelSelector"] = label_selector
            if cont:
                params["continue"] = cont
            page = await self.request(
                "GET", res.path(namespace), params=params, subject=f"list {res}"
            )
            items: Page = page.get("items", [])
            # List items omit apiVersion/kind; restore them so items hash like watch objects.
            for item in items:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
            meta = page.get("metadata", {})
            cont = meta.get("continue", "")
            yield items, str(meta.get("resourceVersion", ""))
            if not cont:
                return

    async def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str = "",
        label_selector: str = "",
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """Watch from ``resource_version`` with bookmarks, one event per line.

        Raises ``Gone`` when the version was compacted away (the caller relists); ends normally
        when the server closes the stream (the caller resumes from the last version it saw).
        """
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            params["labelSelector"] = label_selector
        session = await self._client()
        subject = f"watch {res}"
        try:
            async with session.get(
                self.host + res.path(namespace),
                params=params,
                headers=await self._headers(None),
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self._timeout, sock_read=timeout_seconds + 30
                ),
            ) as resp:
                if resp.status >= 400:
                    raise error_for(subject, resp.status, _loads_or_none(await resp.read()))
                while True:
                    line = await resp.content.readline()
                    if not line:
                        return
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        code = int(obj.get("code") or 500)
                        raise error_for(subject, code, obj)
                    yield WatchEvent(str(event.get("type")), obj)
        except (KubeError, Gone):
            raise
        except (aiohttp.ClientError, TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            raise Retryable(subject, 0, type(exc).__name__, str(exc) or "stream broken") from None


def _subject(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{ns + '/' if ns else ''}{meta.get('name')}"


def _loads_or_none(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _dumps_str(value: Any) -> str:
    return orjson.dumps(value).decode()


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
