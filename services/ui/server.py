"""``driftbus ui``: a live status page, fed by the status, decision and server streams.

One page (``static/``, shipped in the package: no CDN) and two endpoints:

- ``GET /api/state`` — everything the page shows, as JSON: bundles with tenant, revision and
  phase, per-object phase, health and reason, the latest drift events, hit ratio, intents
  pending; ``?tenant=T`` keeps only tenant T's bundles (``?tenant=`` the platform team's);
- ``GET /events`` — the same as server-sent events, live: ``state`` once, then ``bundle``,
  ``object``, ``drift`` and ``stats`` events as they happen; ``?tenant=T`` as above (the
  ``stats``, hit ratio and intents pending, are the cluster's, not the tenant's);
- ``GET /api/object?cluster=&bundle=&group=&kind=&namespace=&name=`` — one object explained
  (``detail``): its decision history, last error, desired-vs-live difference (masked), for an
  object the planner accepted for the bundle only (``accepted``: a refused revision's objects
  are never read from the cluster);
- ``GET /api/bundle?cluster=&bundle=`` — the bundle's revision history, rollbacks marked.

Every endpoint takes ``?tenant=T`` (and one pinned with ``--tenant`` holds for all): a bundle of
another tenant is not found. Nothing is served without the page's token or under a Host name
that is not this machine's (``guard``). A Secret's SHAs (manifest, applied, server: unsalted
hashes of its values) appear in no response (``detail.without_secret_shas``).

``stats`` also carries the last hour per minute: writes made (apply, delete) against writes
avoided (cache hits), and each drift's time to correct (detected → corrected), for the charts.
A ``windows`` event carries the sync windows (docs/windows.md): each open or not and its next
change, and per bundle a window names, the window holding its writes and the next change as its
planner published them (``BundleStatus.windows``) — sent when the windows on the bus change, when
one opens or closes, and when a planner says they stand otherwise for a bundle.

The page server only reads the bus: STATUS, DECISIONS, SERVER and the sync windows' bucket; for
the detail also OUTCOMES, APPLIED (with the decisions: whether the planner took the object in),
BUNDLES and the Object Store (manifests: on a locked-down bus, the admin's identity;
docs/observability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from schemas.codec import WireError, decision_records, server_events
from schemas.messages import BundleStatus, ObjectStatus, ServerEvent
from schemas.subjects import ObjectKey, family_filter, split_bundle
from schemas.windows import WindowsFile
from services.access.permissions import UI_INBOX
from services.common import bus
from services.revisions.watch import decode_statuses
from services.stored import facts as stored_facts
from services.stored.document import Good
from services.ui import detail, fleet, guard
from services.ui.live import HOUR, LiveState
from services.windows import store as windows_store

log = logging.getLogger("driftbus.ui")
STATIC = Path(__file__).parent / "static"
WINDOWS_EVERY = 5.0
"""Seconds between two looks at whether a sync window opened or closed (sent when one did)."""


class StatusPage:
    def __init__(self, js: bus.JetStream, page: guard.PageSettings | None = None) -> None:
        self.js = js
        self.page = page or guard.PageSettings()
        self.state = LiveState()
        self.live = detail.LiveReader()
        self._clients: dict[asyncio.Queue[bytes], str | None] = {}
        """Each live page's queue, and the tenant it shows (None: all)."""
        self._windows_seen: dict[asyncio.Queue[bytes], bytes] = {}
        """The windows view each live page was last sent."""

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

    def _on_status(self, msg: bus.Message) -> None:
        for event in decode_statuses(msg.subject, msg.data):
            if isinstance(event, BundleStatus):
                before = self.state.bundles.get((event.cluster, event.bundle), {}).get("windows")
                doc = self.state.on_bundle(event)
                self._send("bundle", doc, event.bundle)
                if doc.get("windows") != before:  # how the windows stand, as its planner says
                    self._send_windows()
            elif isinstance(event, ObjectStatus):
                doc, corrected = self.state.on_object(event)
                self._send("object", doc, event.bundle)
                if corrected:
                    self._send("drift", corrected, event.bundle)
            # a Git source's status is shown by `driftbus status`, not (yet) on the page

    def _on_decision(self, msg: bus.Message) -> None:
        try:
            records = decision_records(msg.subject, msg.data)
        except WireError as exc:  # bad input never stops the page
            log.warning("ignoring decision records on %s: %s", msg.subject, exc)
            return
        for d in records:
            if event := self.state.on_decision(d):
                self._send("drift", event, d.bundle)
        if records:
            self._send("stats", self.state.stats())

    def _on_windows(self, good: Good[WindowsFile]) -> None:
        """A new version of the sync windows; an unusable one leaves the last good ones shown
        (as the planners keep them) and says why."""
        self.state.set_windows(good.value, good.problem)
        self._send_windows()

    def _send_windows(self) -> None:
        """The windows view to every page whose view of it changed (each tenant its own)."""
        now = dt.datetime.now(dt.UTC)
        views: dict[str | None, bytes] = {}
        for q, shows in list(self._clients.items()):
            if shows not in views:
                views[shows] = orjson.dumps(self.state.windows_view(now, shows))
            body = views[shows]
            if self._windows_seen.get(q) == body:
                continue
            self._windows_seen[q] = body
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(b"event: windows\ndata: " + body + b"\n\n")

    async def _follow_windows(self) -> None:
        """The windows bucket, every version in order (the last good one wins); a bucket not
        there yet (no planner has run) is waited for."""
        while True:
            try:
                async for good in windows_store.STORED.following(self.js).versions():
                    self._on_windows(good)
            except Exception as exc:  # noqa: BLE001 - not there yet, or not ours to read
                log.debug("status page: the sync windows not followed: %s", exc)
            await asyncio.sleep(5.0)

    async def _windows_clock(self) -> None:
        while True:
            await asyncio.sleep(WINDOWS_EVERY)
            self._send_windows()

    def _on_server(self, msg: bus.Message) -> None:
        try:
            events = server_events(msg.subject, msg.data)
        except WireError as exc:
            log.warning("status page: ignoring server facts on %s: %s", msg.subject, exc)
            return
        for ev in events:
            self._on_fact(ev)

    def _on_fact(self, ev: ServerEvent) -> None:
        if row := self.state.on_server(ev):
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
        # live facts from now on; what came before: each cluster's checkpoint and the facts
        # after it (SERVER keeps a batch only until a checkpoint covers it)
        facts = bus.Follower(self.js, bus.SERVER, family_filter("server"), from_now=True)

        async def known() -> None:
            with contextlib.suppress(bus.StreamMissing):
                for by_key in (await stored_facts.live(self.js)).values():
                    for ev in by_key.values():
                        if (ev.cluster, str(ev.key)) not in self.state.health:  # live is newer
                            self._on_fact(ev)

        async def pump(f: bus.Follower, handle: Any) -> None:
            async for msg in f.messages():
                handle(msg)

        await asyncio.gather(
            pump(status, self._on_status),
            pump(decisions, self._on_decision),
            pump(facts, self._on_server),
            known(),
            self._poll_pending(),
            self._follow_windows(),
            self._windows_clock(),
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
            self._windows_seen.pop(q, None)
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


__all__ = ["StatusPage", "run"]
