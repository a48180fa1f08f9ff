"""``driftbus ui``: a live status page, fed by the status, decision and server streams.

One page (``static/``, shipped in the package: no CDN) and two endpoints:

- ``GET /api/state`` — everything the page shows, as JSON: bundles with tenant, revision and
  phase, per-object phase, health and reason, the latest drift events, hit ratio, intents
  pending; ``?tenant=T`` keeps only tenant T's bundles (``?tenant=`` the platform team's);
- ``GET /events`` — the same as server-sent events, live: ``state`` once, then ``bundle``,
  ``object``, ``drift`` and ``stats`` events as they happen; ``?tenant=T`` as above (the
  ``stats``, hit ratio and intents pending, are the cluster's, not the tenant's);
- ``GET /api/object?cluster=&bundle=&group=&kind=&namespace=&name=`` — one object explained
  (``detail``): its decision history, last error, desired-vs-live difference (masked);
- ``GET /api/bundle?cluster=&bundle=`` — the bundle's revision history, rollbacks marked.

Every endpoint takes ``?tenant=T`` (and one pinned with ``--tenant`` holds for all): a bundle of
another tenant is not found. Nothing is served without the page's token or under a Host name
that is not this machine's (``guard``). A Secret's SHAs (manifest, applied, server: unsalted
hashes of its values) appear in no response (``detail.without_secret_shas``).

``stats`` also carries the last hour per minute: writes made (apply, delete) against writes
avoided (cache hits), and each drift's time to correct (detected → corrected), for the charts.

The page server only reads the bus: STATUS, DECISIONS and SERVER; for the detail also OUTCOMES,
BUNDLES and the Object Store (manifests: on a locked-down bus, the admin's identity;
docs/observability.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import time
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import orjson
from aiohttp import web
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schemas.codec import WireError, decode
from schemas.messages import BundleStatus, DecisionRecord, ObjectStatus, ServerEvent
from schemas.subjects import ObjectKey, family_filter, split_bundle
from services.common import bus
from services.common.permissions import UI_INBOX
from services.common.statuswatch import decode_status
from services.ui import detail, fleet, guard

log = logging.getLogger("driftbus.ui")
T = TypeVar("T")
STATIC = Path(__file__).parent / "static"
DRIFT_REASONS = ("drift", "deleted")
MAX_DRIFT_EVENTS = 200
HOUR = 3600.0
MAX_CORRECTIONS = 500


def _plain(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


def _epoch(at: Any) -> float:
    """An RFC 3339 time (as the page's documents carry them) in epoch seconds; 0 if none."""
    if not isinstance(at, str):
        return 0.0
    try:
        return dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _decoded(msg: Msg, kind: type[T]) -> T | None:
    """The message as ``kind``, or None after saying why it was skipped (bad input never stops
    the page)."""
    try:
        return decode(msg.data, kind)
    except WireError as exc:
        log.warning("ignoring %s on %s: %s", kind.__name__, msg.subject, exc)
        return None


class LiveState:
    """What the page shows, kept current from the streams; pure bookkeeping, no I/O."""

    def __init__(self) -> None:
        self.bundles: dict[tuple[str, str], dict[str, Any]] = {}
        self.objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = collections.defaultdict(
            dict
        )
        self.drift: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_DRIFT_EVENTS)
        self.decisions: collections.Counter[str] = collections.Counter()
        self.pending: dict[str, int] = {}
        self.health: dict[tuple[str, str], tuple[str, str]] = {}
        """(cluster, object) → (health, message) as the watcher last saw it."""
        self._bundle_of: dict[tuple[str, str], str] = {}
        self.minutes: dict[int, collections.Counter[str]] = {}
        """minute (epoch // 60) → writes made and avoided (hits) in it, for the last hour."""
        self.corrections: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=MAX_CORRECTIONS
        )
        """Each drift corrected: when, which object, seconds from detected to corrected."""
        self._detected: dict[str, float] = {}
        """object → when its drift was detected (epoch seconds), until it is corrected."""

    def on_server(self, ev: ServerEvent) -> dict[str, Any] | None:
        """Health from the watcher's facts; the object row it changes, if the page has it."""
        ident = (ev.cluster, str(ev.key))
        self.health[ident] = (str(ev.health), ev.health_message)
        bundle = self._bundle_of.get(ident)
        row = self.objects.get((ev.cluster, bundle), {}).get(str(ev.key)) if bundle else None
        if row is None:
            return None
        row["health"], row["health_message"] = self.health[ident]
        return row

    def on_bundle(self, st: BundleStatus) -> dict[str, Any]:
        doc: dict[str, Any] = _plain(st) | {"tenant": split_bundle(st.bundle)[0]}
        self.bundles[(st.cluster, st.bundle)] = doc
        return doc

    def on_object(self, st: ObjectStatus) -> tuple[dict[str, Any], dict[str, Any] | None]:
        doc = detail.without_secret_shas(_plain(st) | {"object": str(st.key)}, st.key)
        ident = (st.cluster, str(st.key))
        self._bundle_of[ident] = st.bundle
        if ident in self.health:
            doc["health"], doc["health_message"] = self.health[ident]
        self.objects[(st.cluster, st.bundle)][str(st.key)] = doc
        corrected = None
        if st.message.endswith(tuple(f"({r})" for r in DRIFT_REASONS)):
            corrected = {
                "event": "corrected",
                "cluster": st.cluster,
                "bundle": st.bundle,
                "object": str(st.key),
                "at": doc.get("at"),
                "detail": st.message,
            }
            self.drift.appendleft(corrected)
            since = self._detected.pop(f"{st.cluster}/{st.key}", None)
            if since is not None and st.at is not None:
                self.corrections.append(
                    {
                        "at": doc.get("at"),
                        "object": str(st.key),
                        "seconds": round(max(0.0, st.at.timestamp() - since), 3),
                    }
                )
        return doc, corrected

    def on_decision(self, d: DecisionRecord) -> dict[str, Any] | None:
        self.decisions["hit" if str(d.action) == "hit" else "miss"] += 1
        at = d.at.timestamp() if d.at is not None else time.time()
        if str(d.action) in ("apply", "delete", "hit"):
            minute = int(at // 60)
            self.minutes.setdefault(minute, collections.Counter())[
                "hits" if str(d.action) == "hit" else "writes"
            ] += 1
            for old in [m for m in self.minutes if m <= minute - 60]:
                del self.minutes[old]
        if str(d.reason) not in DRIFT_REASONS:
            return None
        self._detected.setdefault(f"{d.cluster}/{d.key}", at)
        event = {
            "event": "detected",
            "cluster": d.cluster,
            "bundle": d.bundle,
            "object": str(d.key),
            "at": _plain(d.at),
            "detail": f"{d.reason}: live object differs from what was applied",
        }
        self.drift.appendleft(event)
        return event

    def stats(self, now: float | None = None) -> dict[str, Any]:
        total = sum(self.decisions.values())
        now = time.time() if now is None else now
        first = int(now // 60) - 59
        empty: collections.Counter[str] = collections.Counter()
        return {
            "hit_ratio": round(self.decisions["hit"] / total, 4) if total else None,
            "decisions": total,
            "pending": dict(self.pending),
            # the charts: the last 60 minutes, oldest first, empty minutes included
            "minutes": [
                {
                    "minute": m * 60,
                    "writes": self.minutes.get(m, empty)["writes"],
                    "avoided": self.minutes.get(m, empty)["hits"],
                }
                for m in range(first, first + 60)
            ],
            "corrections": [c for c in self.corrections if _epoch(c.get("at")) >= now - HOUR],
        }

    def snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """What the page shows; only ``tenant``'s bundles and objects when one is given."""

        def shown(bundle: str) -> bool:
            return tenant is None or split_bundle(bundle)[0] == tenant

        return {
            "bundles": sorted(
                (b for b in self.bundles.values() if shown(b.get("bundle", ""))),
                key=lambda b: (b.get("cluster", ""), b.get("bundle", "")),
            ),
            "objects": {
                f"{c}/{b}": sorted(objs.values(), key=lambda o: o["object"])
                for (c, b), objs in self.objects.items()
                if shown(b)
            },
            "drift": [d for d in self.drift if shown(d.get("bundle", ""))],
            "stats": self.stats(),
        }


class StatusPage:
    def __init__(self, js: JetStreamContext, page: guard.PageSettings | None = None) -> None:
        self.js = js
        self.page = page or guard.PageSettings()
        self.state = LiveState()
        self.live = detail.LiveReader()
        self._clients: dict[asyncio.Queue[bytes], str | None] = {}
        """Each live page's queue, and the tenant it shows (None: all)."""

    def _send(self, kind: str, data: Any, bundle: str | None = None) -> None:
        """To every page, or (``bundle`` given) to the pages showing that bundle's tenant."""
        try:
            body = orjson.dumps(data)
        except TypeError as exc:  # what the schemas let through and JSON cannot say
            log.warning("status page: a %s event not sent: %s", kind, exc)
            return
        frame = b"event: " + kind.encode() + b"\ndata: " + body + b"\n\n"
        tenant = split_bundle(bundle)[0] if bundle is not None else None
        for q, shows in list(self._clients.items()):
            if shows is not None and tenant is not None and shows != tenant:
                continue
            with contextlib.suppress(asyncio.QueueFull):  # a stuck browser loses events only
                q.put_nowait(frame)

    def _on_status(self, msg: Msg) -> None:
        event = decode_status(msg.subject, msg.data)
        if isinstance(event, BundleStatus):
            self._send("bundle", self.state.on_bundle(event), event.bundle)
        elif isinstance(event, ObjectStatus):
            doc, corrected = self.state.on_object(event)
            self._send("object", doc, event.bundle)
            if corrected:
                self._send("drift", corrected, event.bundle)
        # a Git source's status is shown by `driftbus status`, not (yet) on the page

    def _on_decision(self, msg: Msg) -> None:
        if (d := _decoded(msg, DecisionRecord)) is None:
            return
        if event := self.state.on_decision(d):
            self._send("drift", event, d.bundle)
        self._send("stats", self.state.stats())

    def _on_server(self, msg: Msg) -> None:
        if (ev := _decoded(msg, ServerEvent)) is not None and (row := self.state.on_server(ev)):
            self._send("object", row, row.get("bundle"))

    async def follow(self) -> None:
        """Replay current status (last per subject), then follow status and decisions live."""
        status = bus.Follower(self.js, bus.STATUS, family_filter("status"))
        # the last hour of decisions: the charts start full, not empty
        decisions = bus.Follower(
            self.js,
            bus.DECISIONS,
            family_filter("decision"),
            since=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=HOUR),
        )
        facts = bus.Follower(self.js, bus.SERVER, family_filter("server"))

        async def pump(f: bus.Follower, handle: Any) -> None:
            async for msg in f.messages():
                handle(msg)

        await asyncio.gather(
            pump(status, self._on_status),
            pump(decisions, self._on_decision),
            pump(facts, self._on_server),
            self._poll_pending(),
        )

    async def _poll_pending(self) -> None:
        while True:
            clusters = {c for c, _ in self.state.bundles}
            for c in clusters:
                if (n := await bus.intents_pending(self.js, c)) is not None:
                    self.state.pending[c] = n
            self._send("stats", self.state.stats())
            await asyncio.sleep(2.0)

    # --- HTTP -----------------------------------------------------------------------------

    async def index(self, _: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    def _bundle_shown(self, request: web.Request, bundle: str) -> None:
        """404 unless the request's tenant (pinned or asked) is the bundle's."""
        tenant = guard.tenant_of(request, self.page)
        if tenant is not None and split_bundle(bundle)[0] != tenant:
            raise web.HTTPNotFound(text=f"no bundle {bundle!r} of tenant {tenant!r}\n")

    async def api_state(self, request: web.Request) -> web.Response:
        tenant = guard.tenant_of(request, self.page)
        return web.Response(
            body=orjson.dumps(self.state.snapshot(tenant)), content_type="application/json"
        )

    async def events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        tenant = guard.tenant_of(request, self.page)
        await resp.prepare(request)
        q: asyncio.Queue[bytes] = asyncio.Queue(maxsize=10_000)
        self._clients[q] = tenant
        try:
            await resp.write(
                b"event: state\ndata: " + orjson.dumps(self.state.snapshot(tenant)) + b"\n\n"
            )
            while True:
                try:
                    frame = await asyncio.wait_for(q.get(), timeout=15)
                except TimeoutError:
                    frame = b": keep-alive\n\n"
                await resp.write(frame)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._clients.pop(q, None)
        return resp

    async def api_object(self, request: web.Request) -> web.Response:
        q = request.query
        try:
            key = ObjectKey(
                group=q.get("group", ""),
                kind=q["kind"],
                namespace=q.get("namespace", ""),
                name=q["name"],
            )
            cluster, bundle = q["cluster"], q["bundle"]
        except KeyError as exc:
            raise web.HTTPBadRequest(text=f"missing query parameter {exc}") from None
        self._bundle_shown(request, bundle)
        doc = await detail.object_detail(self.js, self.live, cluster, bundle, key)
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    async def api_bundle(self, request: web.Request) -> web.Response:
        try:
            cluster, bundle = request.query["cluster"], request.query["bundle"]
        except KeyError as exc:
            raise web.HTTPBadRequest(text=f"missing query parameter {exc}") from None
        self._bundle_shown(request, bundle)
        doc = {"revisions": await detail.bundle_history(self.js, cluster, bundle)}
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application(middlewares=[guard.middleware(self.page)])
        app.router.add_get("/", self.index)
        app.router.add_get("/api/state", self.api_state)
        app.router.add_get("/api/object", self.api_object)
        app.router.add_get("/api/bundle", self.api_bundle)
        app.router.add_get("/api/fleet", fleet.handler(self.js, self.page, self.state.bundles))
        app.router.add_get("/events", self.events)
        app.router.add_static("/static/", STATIC)
        return app


async def run(nats: bus.NatsSettings, settings: guard.PageSettings) -> None:
    # replies on the page's own inbox: on a locked-down bus its identity (`driftbus up`'s
    # viewer) may read no one else's
    nc = await bus.connect(nats, name="driftbus-ui", inbox=UI_INBOX)
    page = StatusPage(nc.jetstream(), settings)
    runner = web.AppRunner(page.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    # the token in the address is the one secret ever printed (as Jupyter does): it is how
    # the person who started the page opens it
    print(f"driftbus ui: {settings.url()}", flush=True)
    try:
        await bus.ensure_streams(page.js, manage=False)  # the planner creates them
        while True:
            try:
                await page.follow()
            except Exception:  # a broken follow must not take the page down: log, start over
                log.exception("following the streams failed; retrying")
                await asyncio.sleep(1.0)
    finally:
        await runner.cleanup()
        await nc.drain()


__all__ = ["LiveState", "StatusPage", "run"]
