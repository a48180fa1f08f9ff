"""Publishing a fleet bundle revision: the manifests stored once, the ``FleetBundle`` naming them.

``publish_fleet`` is the one way a revision reaches ``driftbus.fleet.<tenant>.<name>``:
``driftbus publish --selector`` / ``--cluster`` repeated, ``driftbus source --selector``,
``driftbus rollout undo`` and the tests call it. The rollout driver places it in each cluster.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from schemas.codec import WireError, decode, encode
from schemas.fleet import FleetBundle, OnLeave, RolloutSpec
from schemas.messages import BundleOptions
from schemas.subjects import fleet_subject
from services.clusters.selector import SelectorError, parse_selector
from services.common import bus, telemetry
from services.core.manifest import ManifestError, bundle_kinds, check_bundle_name, check_not_empty
from services.fleet.rollout.steps import check_steps
from services.revisions.publish import store_manifests

_NO_STEPS = RolloutSpec()
FLEET_STORE = "_fleet"
"""The Object Store prefix of fleet manifests (no cluster is called that: names are DNS labels)."""


class FleetError(ValueError):
    """A fleet publish is refused before anything is sent; the message says why."""


def check(selector: str, clusters: Sequence[str], rollout: RolloutSpec) -> None:
    """FleetError for a selector or a rollout step that cannot be read (pure)."""
    try:
        parse_selector(selector)
    except SelectorError as exc:
        raise FleetError(f"--selector: {exc}") from None
    try:
        check_steps(rollout.steps)
    except ValueError as exc:
        raise FleetError(str(exc)) from None
    if len(set(clusters)) != len(clusters):
        raise FleetError("a cluster is named twice")


async def publish_fleet(
    js: bus.JetStream,
    *,
    bundle: str,
    revision: str,
    manifests: list[dict[str, Any]],
    options: BundleOptions,
    selector: str = "",
    clusters: Sequence[str] = (),
    rollout: RolloutSpec = _NO_STEPS,
    substitute: bool = False,
    on_leave: OnLeave = "prune",
    source: str = "",
    rollback_of: str = "",
    delete: bool = False,
) -> FleetBundle:
    """Store ``manifests`` once and publish the fleet revision naming them; the message sent."""
    check_bundle_name(bundle)
    check(selector, clusters, rollout)
    try:
        check_not_empty(
            bundle,
            len(manifests),
            allow_empty=options.allow_empty,
            delete=delete,
            where=" in every cluster of the fleet",
        )
    except ManifestError as exc:
        raise FleetError(str(exc)) from None
    await bus.ensure_streams(js, manage=False, within=30.0)
    ref = None
    if not delete:
        ref = await store_manifests(js, FLEET_STORE, bundle, revision, manifests)
    msg = FleetBundle(
        bundle=bundle,
        revision=revision,
        selector=selector,
        clusters=list(clusters),
        options=options,
        manifests_ref=ref,
        kinds=bundle_kinds(manifests),
        substitute=substitute,
        on_leave=on_leave,
        rollout=rollout,
        published_at=dt.datetime.now(dt.UTC),
        source=source,
        rollback_of=rollback_of,
        delete=delete,
    )
    await bus.publish(
        js,
        fleet_subject(bundle),
        encode(msg),
        headers=telemetry.inject({"Nats-Msg-Id": f"fleet/{bundle}@{revision}/{time.time_ns()}"}),
    )
    return msg


async def fleet_revisions(js: bus.JetStream, bundle: str) -> list[FleetBundle]:
    """The fleet bundle's revisions on the bus, oldest first (the stream keeps the last 10)."""
    out: list[FleetBundle] = []
    follower = bus.Follower(js, bus.FLEET, fleet_subject(bundle), history=True)
    try:
        async for m in follower.snapshot(timeout=10.0):
            try:
                out.append(decode(m.data, FleetBundle))
            except WireError:
                continue
    except Exception:  # noqa: BLE001 - no stream yet, or nothing on the subject
        return out
    return out


async def republish(js: bus.JetStream, fb: FleetBundle, rollback_of: str) -> FleetBundle:
    """Publish ``fb`` again as a new message (``driftbus rollout undo``): the same manifests
    (its ``manifests_ref``, not stored again) and rollout spec, a fresh ``published_at`` and
    ``rollback_of`` naming the revision it replaces; the message sent. The driver rolls it out
    like any revision."""
    if fb.delete or fb.manifests_ref is None:
        raise FleetError(f"{fb.bundle}@{fb.revision} is a deletion; it cannot be put back")
    msg = msgspec.structs.replace(fb, rollback_of=rollback_of, published_at=dt.datetime.now(dt.UTC))
    await bus.publish(
        js,
        fleet_subject(fb.bundle),
        encode(msg),
        headers=telemetry.inject(
            {"Nats-Msg-Id": f"fleet/{fb.bundle}@{fb.revision}/undo/{time.time_ns()}"}
        ),
    )
    return msg
