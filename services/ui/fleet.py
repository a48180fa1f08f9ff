"""The status page's fleet view (issue 31): a matrix of bundles × clusters coloured by phase,
and each rollout's progress with its last transitions (its decision records).

- ``cell`` and ``view`` are pure: from the bundle statuses the page already follows
  (``LiveState.bundles``, every cluster's), the cluster registry and the rollout states, what the
  page draws. A fleet bundle's cells and progress render its rollout view
  (``services.fleet.rollout.view``, what ``driftbus rollout status`` prints too). A cell's
  ``tone`` is its colour: ``ok`` (Ready), ``warn`` (Reconciling, OutOfSync, PruneHeld),
  ``bad`` (Failed, Degraded, Conflict), ``none`` (no status), and for a fleet bundle
  ``waiting`` (a member the rollout has not reached yet) and ``refused`` (excluded by the
  tenant's limits, or refused by the driver; ``title`` says why).
- ``FleetReader`` reads the registry and the rollout states when the page asks (``GET
  /api/fleet``, polled every few seconds), coalescing requests within a second.
- ``handler`` is that endpoint. Tenancy is the page's (``guard.tenant_of``): a tenant sees its
  own bundles' rows and rollouts only, as on every other endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

import msgspec
import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from schemas.fleet import ClusterRecord, FleetRow, FleetStatus, RolloutPhase, RolloutState
from schemas.subjects import SubjectError, decode_token, join_bundle, split_bundle
from services.clusters.registry import members, records
from services.clusters.selector import SelectorError
from services.common import bus
from services.fleet.rollout.view import WAITING, Seen, fleet_status, step_clusters
from services.ui import guard

log = logging.getLogger("driftbus.ui")
ROLLOUT_PREFIX = f"$KV.{bus.ROLLOUTS_BUCKET}.rollout."
TONES = {
    "Ready": "ok",
    "Reconciling": "warn",
    "OutOfSync": "warn",
    "PruneHeld": "warn",
    "Failed": "bad",
    "Degraded": "bad",
    "Conflict": "bad",
}
"""A bundle phase's colour; any other phase (Deleted, none) is grey."""
MAX_EVENTS = 10
"""Transitions shown per rollout, newest first (the state keeps the last 20)."""
Statuses = Mapping[tuple[str, str], Mapping[str, Any]]
"""(cluster, bundle) → the bundle status as the page holds it (``LiveState.bundles``)."""


def _plain(at: dt.datetime | None) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at is not None else None


def members_of(
    state: RolloutState, registry: Mapping[str, ClusterRecord]
) -> dict[str, dict[str, str]]:
    """The registered clusters a fleet bundle's selector (and names) pick, with their labels
    (none while its selector cannot be read: the driver halts on it)."""
    try:
        return members(registry, state.selector, state.clusters_named)
    except SelectorError:
        return {}


def _status_cell(cluster: str, status: Mapping[str, Any] | None) -> dict[str, Any]:
    if status is None:
        return {"cluster": cluster, "label": "", "tone": "none", "title": "no status"}
    phase = str(status.get("phase", ""))
    title = f"{phase} at {status.get('revision', '')}"
    if status.get("message"):
        title += f": {status['message']}"
    return {
        "cluster": cluster,
        "label": phase,
        "tone": TONES.get(phase, "none"),
        "revision": status.get("revision", ""),
        "title": title,
    }


def cell(
    cluster: str,
    status: Mapping[str, Any] | None,
    fs: FleetStatus | None = None,
    row: FleetRow | None = None,
) -> dict[str, Any]:
    """One cell of the matrix: the bundle's phase in ``cluster`` and, for a fleet bundle (its
    rollout view ``fs``, with ``row`` the cluster's row there if it has one), where the
    cluster stands in its rollout."""
    out = _status_cell(cluster, status)
    if fs is None:
        return out
    if cluster in fs.excluded:
        reason = fs.excluded[cluster]
        return out | {
            "label": "Excluded",
            "tone": "refused",
            "rollout": "excluded",
            "title": f"excluded: {reason}",
        }
    if row is not None and row.rollout == "refused":
        return out | {
            "label": "Refused",
            "tone": "refused",
            "rollout": "refused",
            "title": f"refused: {row.message or 'by the rollout driver'}",
        }
    if row is not None and row.rollout == WAITING:
        return out | {
            "label": "Waiting",
            "tone": "waiting",
            "rollout": WAITING,
            "title": f"waiting for step {row.step + 1}/{fs.steps} of {fs.revision}",
        }
    if row is None or row.rollout == "removed":
        if status is None:
            out["title"] = "not in the fleet" if row is None else "left the fleet (removed)"
        return out | {"rollout": "removed" if row is not None else "outside"}
    out["rollout"] = row.rollout
    placed = f"placed {row.revision} (step {row.step + 1 if row.step >= 0 else 'joined'})"
    if status is None:
        return out | {"label": "NoStatus", "title": f"{placed}; no status yet"}
    if row.message and row.message != status.get("message"):
        placed += f": {row.message}"
    out["title"] = f"{out['title']} — {placed}"
    return out


def _shown(bundle: str, tenant: str | None) -> bool:
    return tenant is None or split_bundle(bundle)[0] == tenant


def progress(
    state: RolloutState,
    registry: Mapping[str, ClusterRecord],
    now: float,
    fs: FleetStatus | None = None,
) -> dict[str, Any]:
    """One rollout's progress: phase, step k/n and the steps' selectors with their clusters,
    clusters Ready on the target / in the fleet, the bake left, the clusters a rollback put the
    previous revision back on and how many are Ready again on it, the last transitions. The
    counts are the rollout view's (``fs``; made here when not given)."""
    fleet = members_of(state, registry)
    sets = step_clusters(state, fleet)
    if fs is None:
        fs = fleet_status(state, fleet, {})
    selectors = [*state.spec.steps, "(the whole fleet)"]
    placed = [c for c, e in state.clusters.items() if e.state != "removed"]
    bake_left = None
    if state.ready_since is not None and state.phase == RolloutPhase.PROGRESSING:
        bake_left = round(max(0.0, state.spec.bake - (now - state.ready_since.timestamp())), 1)
    return {
        "bundle": fs.bundle,
        "tenant": split_bundle(fs.bundle)[0],
        "revision": fs.revision,
        "previous": fs.previous or None,
        "rollback": fs.rollback,
        "rollback_ready": fs.rollback_ready,
        "phase": str(fs.phase),
        "paused": fs.paused,
        "message": fs.message,
        "step": fs.step + 1,
        "steps": fs.steps,
        "selectors": [
            {
                "step": i + 1,
                "selector": sel,
                "clusters": sorted(sets[i]) if i < len(sets) else [],
                "state": "done" if i < fs.step else "current" if i == fs.step else "next",
            }
            for i, sel in enumerate(selectors)
        ],
        "ready": fs.ready,
        "placed": len(placed),
        "total": fs.total,
        "bake": state.spec.bake,
        "bake_remaining": bake_left,
        "step_started_at": _plain(state.step_started_at),
        "updated_at": _plain(state.updated_at),
        "excluded": dict(sorted(state.excluded.items())),
        "events": [
            {
                "seq": e.seq,
                "event": e.event,
                "revision": e.revision,
                "phase": str(e.phase),
                "step": e.step + 1,
                "clusters": list(e.clusters),
                "message": e.message,
                "at": _plain(e.at),
                "driver": e.driver,
            }
            for e in sorted(state.recent, key=lambda e: e.seq, reverse=True)[:MAX_EVENTS]
        ],
    }


def view(
    statuses: Statuses,
    registry: Mapping[str, ClusterRecord],
    states: Mapping[str, RolloutState],
    *,
    tenant: str | None = None,
    now: float = 0.0,
) -> dict[str, Any]:
    """The fleet view (``GET /api/fleet``): ``clusters`` (the columns), ``rows`` (one per
    bundle: its cells in column order) and ``rollouts``; only ``tenant``'s bundles when given."""
    states = {b: s for b, s in states.items() if _shown(b, tenant)}
    bundles = sorted({b for _, b in statuses if _shown(b, tenant)} | set(states))
    reported: dict[str, dict[str, Seen]] = {}
    for (c, b), status in statuses.items():
        if b in states:
            reported.setdefault(b, {})[c] = Seen.of(status)
    fleets = {b: members_of(s, registry) for b, s in states.items()}
    views = {b: fleet_status(s, fleets[b], reported.get(b, {})) for b, s in states.items()}
    columns = set(registry)
    columns |= {c for c, b in statuses if b in bundles}
    for b, s in states.items():
        columns |= set(s.clusters) | set(s.excluded) | set(fleets[b])
    clusters = sorted(columns)
    rows = []
    for b in bundles:
        fs = views.get(b)
        by_cluster = {r.cluster: r for r in fs.clusters} if fs is not None else {}
        rows.append(
            {
                "bundle": b,
                "tenant": split_bundle(b)[0],
                "fleet": fs is not None,
                "cells": [cell(c, statuses.get((c, b)), fs, by_cluster.get(c)) for c in clusters],
            }
        )
    return {
        "clusters": [
            {
                "name": c,
                "labels": dict(registry[c].labels) if c in registry else {},
                "registered": c in registry,
            }
            for c in clusters
        ],
        "rows": rows,
        "rollouts": [progress(states[b], registry, now, views[b]) for b in sorted(states)],
    }


def rollout_bundle(subject: str) -> str | None:
    """The bundle of a rollouts-bucket entry's subject (None: not a rollout entry)."""
    tokens = subject.removeprefix(ROLLOUT_PREFIX).split(".")
    if len(tokens) != 2:
        return None
    try:
        return join_bundle(decode_token(tokens[0]), decode_token(tokens[1]))
    except SubjectError:
        return None


async def rollout_states(js: bus.JetStream) -> dict[str, RolloutState]:
    """Every rollout state in the bucket (a snapshot; none if there is no bucket yet)."""
    out: dict[str, RolloutState] = {}
    with contextlib.suppress(Exception):  # no bucket yet (no planner made it): no rollouts
        async with asyncio.timeout(10):
            async for msg in bus.Follower(js, bus.ROLLOUTS_STREAM, ROLLOUT_PREFIX + ">").snapshot():
                bundle = rollout_bundle(msg.subject)
                if bundle is None or (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
                    continue
                try:
                    out[bundle] = msgspec.json.decode(msg.data, type=RolloutState)
                except msgspec.DecodeError as exc:
                    log.warning("fleet view: rollout state of %s unreadable: %s", bundle, exc)
    return out


class FleetReader:
    """The registry and the rollout states, read when asked and kept for ``max_age`` seconds,
    so many open pages polling cost one read."""

    def __init__(self, js: bus.JetStream, *, max_age: float = 1.0) -> None:
        self.js = js
        self.max_age = max_age
        self._lock = asyncio.Lock()
        self._at = -1e9
        self._last: tuple[dict[str, ClusterRecord], dict[str, RolloutState]] = ({}, {})

    async def read(self) -> tuple[dict[str, ClusterRecord], dict[str, RolloutState]]:
        async with self._lock:
            if time.monotonic() - self._at >= self.max_age:
                self._last = (await records(self.js), await rollout_states(self.js))
                self._at = time.monotonic()
            return self._last


def handler(js: bus.JetStream, page: guard.PageSettings, statuses: Statuses) -> Handler:
    """``GET /api/fleet``: ``view`` for the request's tenant."""
    reader = FleetReader(js)

    async def api_fleet(request: web.Request) -> web.StreamResponse:
        tenant = guard.tenant_of(request, page)
        registry, states = await reader.read()
        doc = view(statuses, registry, states, tenant=tenant, now=time.time())
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    return api_fleet


__all__ = ["FleetReader", "cell", "handler", "progress", "view"]
