"""Every NATS subject driftbus uses: built here and nowhere else, and read back by
``parse_subject``. Values become tokens by ``schemas.tokens`` (the one reversible encoding of
object keys into subject tokens and KV keys).

Subject layout (the contract; ``<key>`` is four tokens ``group.kind.namespace.name``,
``<bundle>`` two tokens ``tenant.name``):

    driftbus.bundle.<cluster>.<bundle>
    driftbus.server.<cluster>.<key>           (per object: written by watchers before issue 44)
    driftbus.server.<cluster>.batch.<id>      (``ServerFacts``: a page or burst of facts)
    driftbus.applied.<cluster>.<key>
    driftbus.intent.<cluster>.<key>
    driftbus.status.<cluster>.<bundle>.object.<key>
    driftbus.status.<cluster>.<bundle>.rows.<id>  (``ObjectRows``: an applier's rows of a moment)
    driftbus.status.<cluster>.<bundle>.bundle
    driftbus.decision.<cluster>.<key>         (per object: written by planners before issue 44)
    driftbus.decision.<cluster>.batch.<shelf>.<id>  (``DecisionRecords``: ``decision_shelf``)

A bundle's full name is ``tenant/name`` (``team-a/web``) or just ``name`` for a bundle of the
platform team, whose tenant token is the empty one, ``=``. The tenant is a token of its own so
that what a tenant's publisher may touch is a plain NATS permission
(``driftbus.bundle.<cluster>.team-a.*``), which no platform bundle's subject can match.
"""

from __future__ import annotations

import hashlib
from typing import Final

import msgspec

from schemas.tokens import ObjectKey as ObjectKey
from schemas.tokens import SubjectError as SubjectError
from schemas.tokens import decode_token as decode_token
from schemas.tokens import encode_token as encode_token
from schemas.tokens import key_tokens as key_tokens
from schemas.tokens import parse_key_tokens as parse_key_tokens

PREFIX: Final = "driftbus"
# nats-server refuses a protocol line over max_control_line (4 KiB by default); HPUB lines carry
# the subject plus a reply subject and sizes, so keep subjects well below it.
MAX_SUBJECT_LEN: Final = 3072


def _checked(subject: str) -> str:
    if len(subject) > MAX_SUBJECT_LEN:
        raise SubjectError(
            f"subject of {len(subject)} characters exceeds {MAX_SUBJECT_LEN}: {subject[:80]}…"
        )
    return subject


def split_bundle(bundle: str) -> tuple[str, str]:
    """(tenant, name) of a bundle's full name; the tenant is "" for a platform bundle."""
    tenant, _, name = bundle.rpartition("/")
    return tenant, name


def join_bundle(tenant: str, name: str) -> str:
    """Inverse of ``split_bundle``."""
    return f"{tenant}/{name}" if tenant else name


def bundle_tokens(bundle: str) -> str:
    """The two subject tokens ``tenant.name`` of a bundle's full name."""
    tenant, name = split_bundle(bundle)
    return f"{encode_token(tenant)}.{encode_token(name)}"


def _bundle_of(tenant: str, name: str) -> str:
    return join_bundle(decode_token(tenant), decode_token(name))


def bundle_subject(cluster: str, bundle: str) -> str:
    return _checked(f"{PREFIX}.bundle.{encode_token(cluster)}.{bundle_tokens(bundle)}")


def control_subject(cluster: str, bundle: str) -> str:
    """``driftbus.control.<cluster>.<tenant>.<name>``: the bundle's ``BundleControl`` (suspended
    or not); the stream keeps the last one per bundle."""
    return _checked(f"{PREFIX}.control.{encode_token(cluster)}.{bundle_tokens(bundle)}")


def tenant_control_filter(cluster: str, tenant: str) -> str:
    """Every control subject of one tenant's bundles in one cluster (what it may suspend)."""
    return f"{PREFIX}.control.{encode_token(cluster)}.{encode_token(tenant)}.*"


def rollback_subject(cluster: str, bundle: str) -> str:
    """``driftbus.rollback.<cluster>.<tenant>.<name>``: a request (``RollbackRequest``) the
    planner of the cluster answers (``RollbackAnswer``) by republishing an earlier revision."""
    return _checked(f"{PREFIX}.rollback.{encode_token(cluster)}.{bundle_tokens(bundle)}")


def tenant_rollback_filter(cluster: str, tenant: str) -> str:
    """Every rollback subject of one tenant's bundles in one cluster."""
    return f"{PREFIX}.rollback.{encode_token(cluster)}.{encode_token(tenant)}.*"


def object_subject(kind: str, cluster: str, key: ObjectKey) -> str:
    """``driftbus.<kind>.<cluster>.<key>`` for the per-object streams (server, applied, ...)."""
    if kind not in _OBJECT_STREAMS:
        raise SubjectError(f"no per-object subject family {kind!r}")
    return _checked(f"{PREFIX}.{kind}.{encode_token(cluster)}.{key_tokens(key)}")


BATCH_TOKEN: Final = "batch"  # noqa: S105 - a subject token (then the id: no key is 2 tokens)


def batch_subject(kind: str, cluster: str, batch_id: str) -> str:
    """``driftbus.<kind>.<cluster>.batch.<id>``: a batch of one cluster's facts (``ServerFacts``
    for ``server``); ``batch_id`` is unique per batch (the stream keeps the last per subject)."""
    if kind not in _OBJECT_STREAMS:
        raise SubjectError(f"no per-object subject family {kind!r}")
    return _checked(
        f"{PREFIX}.{kind}.{encode_token(cluster)}.{BATCH_TOKEN}.{encode_token(batch_id)}"
    )


def is_batch_subject(subject: str) -> bool:
    """Whether a per-object family's subject is a batch's (``batch_subject``) rather than an
    object's: an object's has four key tokens, and a Job's begins with its group, "batch", too."""
    parts = subject.split(".")
    return len(parts) == 5 and parts[3] == BATCH_TOKEN


def batch_filter(kind: str, cluster: str) -> str:
    """Every batch subject of one cluster's facts of a family."""
    return f"{PREFIX}.{kind}.{encode_token(cluster)}.{BATCH_TOKEN}.*"


def object_status_subject(cluster: str, bundle: str, key: ObjectKey) -> str:
    return _checked(
        f"{PREFIX}.status.{encode_token(cluster)}.{bundle_tokens(bundle)}.object.{key_tokens(key)}"
    )


ROWS_TOKEN: Final = "rows"  # noqa: S105 - a subject token


def object_rows_subject(cluster: str, bundle: str, batch_id: str) -> str:
    """``driftbus.status.<cluster>.<tenant>.<name>.rows.<id>``: object status rows of one
    bundle sent together (``ObjectRows``); ``batch_id`` is unique per message."""
    return _checked(
        f"{PREFIX}.status.{encode_token(cluster)}.{bundle_tokens(bundle)}"
        f".{ROWS_TOKEN}.{encode_token(batch_id)}"
    )


def bundle_status_subject(cluster: str, bundle: str) -> str:
    return _checked(f"{PREFIX}.status.{encode_token(cluster)}.{bundle_tokens(bundle)}.bundle")


def source_status_subject(cluster: str, bundle: str) -> str:
    return _checked(f"{PREFIX}.status.{encode_token(cluster)}.{bundle_tokens(bundle)}.source")


def cluster_filter(kind: str, cluster: str) -> str:
    """Wildcard subject selecting one cluster's messages of a family, e.g. its intents."""
    return f"{PREFIX}.{kind}.{encode_token(cluster)}.>"


def family_filter(kind: str) -> str:
    """Wildcard subject selecting every message of a family (every cluster's), e.g. bundles."""
    return f"{PREFIX}.{kind}.>"


def bundle_status_filter(cluster: str, bundle: str) -> str:
    """Every status message of one bundle: its objects', its own, its source's."""
    return f"{PREFIX}.status.{encode_token(cluster)}.{bundle_tokens(bundle)}.>"


def bundle_statuses_filter(cluster: str, tenant: str | None = None) -> str:
    """The bundle status of every bundle of one cluster: every tenant's (``tenant`` None), or
    one tenant's ("": the platform team's, bundles of no tenant)."""
    tenant_token = "*" if tenant is None else encode_token(tenant)
    return f"{PREFIX}.status.{encode_token(cluster)}.{tenant_token}.*.bundle"


def object_status_filter(cluster: str, bundle: str) -> str:
    """The object status messages of one bundle."""
    return f"{PREFIX}.status.{encode_token(cluster)}.{bundle_tokens(bundle)}.object.>"


def source_status_filter(cluster: str) -> str:
    """The Git source status of every bundle of one cluster."""
    return f"{PREFIX}.status.{encode_token(cluster)}.*.*.source"


def tenant_bundle_filter(cluster: str, tenant: str) -> str:
    """Every bundle subject of one tenant in one cluster (what its publisher may publish)."""
    return f"{PREFIX}.bundle.{encode_token(cluster)}.{encode_token(tenant)}.*"


def tenant_status_filter(cluster: str, tenant: str) -> str:
    """Every status message of one tenant's bundles in one cluster (what its publisher reads)."""
    return f"{PREFIX}.status.{encode_token(cluster)}.{encode_token(tenant)}.>"


def decisions_named_filter(cluster: str, namespace: str, name: str) -> str:
    """The decision subjects of every object of any group and kind called ``namespace/name``
    (``driftbus why`` finds the group and kind a person left out)."""
    return (
        f"{PREFIX}.decision.{encode_token(cluster)}.*.*.{encode_token(namespace)}."
        f"{encode_token(name)}"
    )


DECISION_SHELVES: Final = 16
"""Shelves the decision records of a cluster are spread over (one hex digit)."""


def decision_shelf(namespace: str, name: str) -> str:
    """The shelf holding the decision records of every object called ``namespace/name``, of
    any group and kind (``driftbus why`` may leave them out): the first hex digit of the
    SHA-256 of ``namespace/name``. A lookup reads 1/16 of a cluster's records."""
    return hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[0]


def decision_batch_subject(cluster: str, shelf: str, batch_id: str) -> str:
    """``driftbus.decision.<cluster>.batch.<shelf>.<id>``: records of one shelf sent together
    (``DecisionRecords``); ``batch_id`` is unique per message."""
    if len(shelf) != 1 or shelf not in "0123456789abcdef":
        raise SubjectError(f"no decision shelf {shelf!r}")
    return _checked(
        f"{PREFIX}.decision.{encode_token(cluster)}.{BATCH_TOKEN}.{shelf}.{encode_token(batch_id)}"
    )


def decision_shelf_filter(cluster: str, shelf: str) -> str:
    """Every batch of decision records on one shelf of one cluster."""
    return f"{PREFIX}.decision.{encode_token(cluster)}.{BATCH_TOKEN}.{shelf}.*"


def member_filter(cluster: str) -> str:
    """The heartbeats of every watcher/applier role of one cluster."""
    return f"{PREFIX}.member.{encode_token(cluster)}.*"


_OBJECT_STREAMS: Final = frozenset(("server", "applied", "intent", "decision", "outcome"))
MEMBER_ROLES: Final = ("watcher", "applier")


def checkpoint_subject(cluster: str, part: int) -> str:
    """``driftbus.checkpoint.<cluster>.<part>``: one part of a cluster's last checkpoint."""
    if part < 0:
        raise SubjectError(f"no checkpoint part {part}")
    return _checked(f"{PREFIX}.checkpoint.{encode_token(cluster)}.{part}")


def member_subject(cluster: str, role: str) -> str:
    """``driftbus.member.<cluster>.<role>``: the last heartbeat of a watcher/applier of it."""
    if role not in MEMBER_ROLES:
        raise SubjectError(f"no member role {role!r}")
    return _checked(f"{PREFIX}.member.{encode_token(cluster)}.{role}")


class ParsedSubject(msgspec.Struct, frozen=True):
    family: str
    cluster: str
    bundle: str | None = None
    key: ObjectKey | None = None


def parse_subject(subject: str) -> ParsedSubject:
    """Inverse of every ``*_subject`` function above."""
    parts = subject.split(".")
    if len(parts) < 4 or parts[0] != PREFIX:
        raise SubjectError(f"not a driftbus subject: {subject!r}")
    family, cluster = parts[1], decode_token(parts[2])
    rest = parts[3:]
    if family in ("bundle", "control", "rollback") and len(rest) == 2:
        return ParsedSubject(family, cluster, bundle=_bundle_of(*rest))
    if family == "decision" and len(rest) == 3 and rest[0] == BATCH_TOKEN:
        return ParsedSubject(family, cluster)  # a shelf's batch: its records name their objects
    if family in _OBJECT_STREAMS and is_batch_subject(subject):
        return ParsedSubject(family, cluster)  # a batch: its messages name their objects
    if family in _OBJECT_STREAMS:
        return ParsedSubject(family, cluster, key=parse_key_tokens(rest))
    if family == "member" and len(rest) == 1 and rest[0] in MEMBER_ROLES:
        return ParsedSubject("member." + rest[0], cluster)
    if family == "status" and rest[2:] == ["bundle"]:
        return ParsedSubject("status.bundle", cluster, bundle=_bundle_of(*rest[:2]))
    if family == "status" and rest[2:] == ["source"]:
        return ParsedSubject("status.source", cluster, bundle=_bundle_of(*rest[:2]))
    if family == "status" and len(rest) == 4 and rest[2] == ROWS_TOKEN:
        return ParsedSubject("status.rows", cluster, bundle=_bundle_of(*rest[:2]))
    if family == "status" and len(rest) == 7 and rest[2] == "object":
        return ParsedSubject(
            "status.object", cluster, bundle=_bundle_of(*rest[:2]), key=parse_key_tokens(rest[3:])
        )
    raise SubjectError(f"unknown driftbus subject layout: {subject!r}")


# --- fleets (DESIGN §13): subjects without a cluster token -------------------------------------


def fleet_subject(bundle: str) -> str:
    """``driftbus.fleet.<tenant>.<name>``: the revisions of a fleet bundle (``FleetBundle``)."""
    return _checked(f"{PREFIX}.fleet.{bundle_tokens(bundle)}")


def tenant_fleet_filter(tenant: str) -> str:
    """Every fleet bundle subject of one tenant (what its publisher may publish)."""
    return f"{PREFIX}.fleet.{encode_token(tenant)}.*"


def rollout_event_subject(bundle: str) -> str:
    """``driftbus.rollout.<tenant>.<name>``: the transitions of a fleet bundle's rollouts."""
    return _checked(f"{PREFIX}.rollout.{bundle_tokens(bundle)}")


def rollout_control_subject(bundle: str, action: str) -> str:
    """``driftbus.rollout-control.<tenant>.<name>.<action>``: ``rollout pause``, ``resume``,
    ``promote`` or (``driftbus approve``) ``approve`` of a fleet bundle (``RolloutControl``),
    for the driver; one subject per action, so the stream's last message of each keeps every
    one not yet applied."""
    if action not in ("pause", "resume", "promote", "approve"):
        raise SubjectError(f"no rollout action {action!r}")
    return _checked(f"{PREFIX}.rollout-control.{bundle_tokens(bundle)}.{action}")


def fleet_bundle_of(subject: str) -> str:
    """The bundle's full name of a ``fleet_subject`` or ``rollout_event_subject``."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or parts[1] not in ("fleet", "rollout"):
        raise SubjectError(f"not a fleet or rollout subject: {subject!r}")
    return _bundle_of(parts[2], parts[3])


def cluster_registry_key(cluster: str) -> str:
    """The cluster's key in the registry bucket (``driftbus-clusters``)."""
    return encode_token(cluster)


def rollout_key(bundle: str) -> str:
    """A fleet bundle's key in the rollouts bucket: ``rollout.<tenant>.<name>``."""
    return f"rollout.{bundle_tokens(bundle)}"


ROLLOUT_DRIVER_KEY: Final = "driver"
"""The rollouts bucket's entry naming the one process that drives every rollout (its lease)."""
