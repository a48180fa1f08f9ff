"""What the rollout driver reads, each followed live from the bus: the fleet bundles (last
revision of each), the rollout states (what another driver wrote before this one took over),
the steering requests (``rollout pause``, ``resume``, ``promote``: the last of each action per
bundle), the bundle status of every cluster (the gate), the registry, the tenant policy and the
clusters of each tenant's NATS publisher (``credentials``).

Every view is push-fed (a follower), so an idle fleet costs the driver nothing but the messages
that actually change something.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

import msgspec

from schemas.codec import WireError, decode
from schemas.fleet import FleetBundle, RolloutControl, RolloutState
from schemas.messages import BundleStatus
from schemas.subjects import (
    PREFIX,
    SubjectError,
    decode_token,
    family_filter,
    fleet_bundle_of,
    join_bundle,
    parse_subject,
    rollout_control_subject,
)
from schemas.tenants import TenantCredentials, TenantPolicy
from services.clusters.registry import RegistryView
from services.common import bus
from services.fleet.rollout.steps import Observed
from services.tenancy.store import CREDENTIALS_SUBJECT, POLICY_SUBJECT, credentials_of, policy_of

log = logging.getLogger("driftbus.fleet")
ROLLOUT_PREFIX = f"$KV.{bus.ROLLOUTS_BUCKET}.rollout."


@dataclasses.dataclass(frozen=True)
class Stored:
    """A rollout state and the KV revision it was read at (what a compare-and-set names)."""

    revision: int
    state: RolloutState


def observed_of(status: BundleStatus) -> Observed:
    """What the gate needs of a bundle status. Objects the API server refuses (403) leave the
    bundle Reconciling, never Ready; the gate counts them as a failure."""
    forbidden = any("Forbidden" in line for line in status.failed_objects) or (
        "forbidden" in status.message.lower()
    )
    return Observed(
        revision=status.revision,
        phase=status.phase,
        published_at=status.published_at,
        message=status.message,
        forbidden=forbidden,
        window=status.window,
    )


class FleetViews:
    """The driver's inputs as last seen; ``changed`` fires on anything new."""

    def __init__(self, js: bus.JetStream, changed: Callable[[], None]) -> None:
        self.js = js
        self._changed = changed
        self.fleets: dict[str, tuple[int, FleetBundle]] = {}
        self.states: dict[str, Stored] = {}
        self.controls: dict[str, dict[str, tuple[int, RolloutControl]]] = {}
        """bundle → action → the last steering request of it and its stream sequence."""
        self.statuses: dict[str, dict[str, Observed]] = {}
        """bundle → cluster → its last status (fleet bundles only: what the gate reads)."""
        self.policy = TenantPolicy()
        self.credentials: TenantCredentials | None = None
        """The clusters of each tenant's NATS publisher, as recorded (None: none recorded)."""
        self.registry = RegistryView(js, self._everything_changed)
        self._dirty: set[str] | None = None
        """The bundles whose inputs changed since the last tick (None: all of them)."""
        self.caught_up = {
            name: asyncio.Event()
            for name in ("fleets", "states", "controls", "statuses", "policy", "credentials")
        }

    def tasks(self) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(self.registry.follow(), name="follow registry"),
            asyncio.create_task(
                self._follow("fleets", bus.FLEET, family_filter("fleet"), self._fleet),
                name="follow fleet bundles",
            ),
            asyncio.create_task(
                self._follow("states", bus.ROLLOUTS_STREAM, ROLLOUT_PREFIX + ">", self._state),
                name="follow rollout states",
            ),
            asyncio.create_task(
                self._follow(
                    "controls", bus.CONTROL, family_filter("rollout-control"), self._control
                ),
                name="follow rollout steering",
            ),
            asyncio.create_task(
                self._follow("statuses", bus.STATUS, f"{PREFIX}.status.*.*.*.bundle", self._status),
                name="follow bundle statuses",
            ),
            asyncio.create_task(
                self._follow("policy", bus.TENANTS_STREAM, POLICY_SUBJECT, self._policy),
                name="follow tenant policy",
            ),
            asyncio.create_task(
                self._follow(
                    "credentials", bus.TENANTS_STREAM, CREDENTIALS_SUBJECT, self._credentials
                ),
                name="follow tenant credentials",
            ),
        ]

    def take_dirty(self) -> set[str] | None:
        """The bundles to tick (None: every one), and start collecting afresh."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def mark_all(self) -> None:
        """Every rollout is ticked next time (a driver that just took the lease)."""
        self._dirty = None

    def _touch(self, bundle: str) -> None:
        if self._dirty is not None:
            self._dirty.add(bundle)
        self._changed()

    def _everything_changed(self) -> None:
        self._dirty = None  # the registry or the policy: every rollout's members
        self._changed()

    async def ready(self) -> None:
        """Until every view has replayed what the bus holds."""
        for event in (*self.caught_up.values(), self.registry.caught_up):
            await event.wait()

    # --- folding one message into a view -------------------------------------------------------

    def _fleet(self, msg: bus.Message) -> None:
        try:
            bundle = fleet_bundle_of(msg.subject)
            fb = decode(msg.data, FleetBundle)
        except (SubjectError, WireError) as exc:
            log.error("ignoring a fleet bundle message on %s: %s", msg.subject, exc)
            return
        if fb.bundle != bundle:
            log.error("ignoring fleet bundle %s published on the subject of %s", fb.bundle, bundle)
            return
        self.fleets[bundle] = (int(msg.metadata.sequence.stream), fb)
        self._touch(bundle)

    def _state(self, msg: bus.Message) -> None:
        tokens = msg.subject.removeprefix(ROLLOUT_PREFIX).split(".")
        try:
            bundle = join_bundle(decode_token(tokens[0]), decode_token(tokens[1]))
        except (SubjectError, IndexError):
            log.warning("ignoring rollout entry %s", msg.subject)
            return
        rev = int(msg.metadata.sequence.stream)
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            self.states.pop(bundle, None)
            return
        current = self.states.get(bundle)
        if current is not None and current.revision >= rev:
            return  # our own write, already folded in
        try:
            state = msgspec.json.decode(msg.data, type=RolloutState)
        except msgspec.DecodeError as exc:
            log.error("rollout state of %s is unreadable (%s); left alone", bundle, exc)
            return
        self.states[bundle] = Stored(rev, state)
        self._touch(bundle)

    def _control(self, msg: bus.Message) -> None:
        try:
            ctl = decode(msg.data, RolloutControl)
            if rollout_control_subject(ctl.bundle, ctl.action) != msg.subject:
                raise SubjectError(f"{ctl.action} of {ctl.bundle} published on {msg.subject}")
        except (SubjectError, WireError) as exc:
            log.error("ignoring a rollout steering request on %s: %s", msg.subject, exc)
            return
        seq = int(msg.metadata.sequence.stream)
        self.controls.setdefault(ctl.bundle, {})[ctl.action] = (seq, ctl)
        self._touch(ctl.bundle)

    def _status(self, msg: bus.Message) -> None:
        try:
            parsed = parse_subject(msg.subject)
            status = decode(msg.data, BundleStatus)
        except (SubjectError, WireError):
            return  # the status readers report these; the gate only needs readable ones
        if parsed.bundle is None:
            return
        if parsed.bundle not in self.fleets and self.caught_up["fleets"].is_set():
            return  # not a fleet bundle: the gate never reads it (statuses from before a
            # fleet bundle existed say nothing of its placements either)
        self.statuses.setdefault(parsed.bundle, {})[parsed.cluster] = observed_of(status)
        self._touch(parsed.bundle)

    def _policy(self, msg: bus.Message) -> None:
        self._dirty = None  # the tenants' limits: every rollout's members
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            self.policy = TenantPolicy()
            return
        try:
            self.policy = policy_of(msg)
        except Exception as exc:  # noqa: BLE001 - the planner reports a bad policy
            log.error("tenant policy unreadable for the rollout driver: %s", exc)

    def _credentials(self, msg: bus.Message) -> None:
        self._dirty = None  # which clusters a tenant may use: every rollout's members
        try:
            self.credentials = credentials_of(msg)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # never read as "none recorded", which would hold no tenant to anything: every
            # tenant is held to no cluster until a readable record is written
            log.error("tenant credentials unreadable (%s): no tenant's fleet is placed", exc)
            self.credentials = TenantCredentials()

    async def _follow(
        self, name: str, stream: str, subject: str, fold: Callable[[bus.Message], None]
    ) -> None:
        while True:
            follower = bus.Follower(self.js, stream, subject)
            marker = asyncio.create_task(self._mark(name, follower))
            try:
                async for msg in follower.messages():
                    fold(msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following %s failed; following it again", subject)
            finally:
                marker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await marker
            await asyncio.sleep(1.0)

    async def _mark(self, name: str, follower: bus.Follower) -> None:
        await follower.caught_up.wait()
        self.caught_up[name].set()
        if name == "fleets":  # statuses kept while the fleet bundles were not all known yet
            for bundle in [b for b in self.statuses if b not in self.fleets]:
                del self.statuses[bundle]
        self._changed()
