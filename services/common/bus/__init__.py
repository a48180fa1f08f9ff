"""JetStream plumbing shared by the services: the bus's public API, one module per concept.

``streams`` (names, limits, creation), ``connection`` (settings, TLS, credentials, connect),
``claims`` (planner claims on clusters), ``intents`` (the appliers' work queue), ``publisher``
(bounded, deduplicated, timed publishing) and ``follower`` (compacted replay, then live).
"""

from services.common.bus.claims import (
    Claim,
    claim_holder,
    claim_key,
    claim_revision,
    heartbeat_key,
    read_claim,
)
from services.common.bus.connection import (
    NatsSettings,
    connect,
    credentials,
    inbox_prefix,
    tls_context,
)
from services.common.bus.follower import Follower, last_message
from services.common.bus.intents import (
    IntentConsumerSettings,
    ensure_intent_consumer,
    intent_consumer_name,
    intents_pending,
)
from services.common.bus.publisher import Publisher
from services.common.bus.streams import (
    APPLIED,
    BUNDLES,
    COMPARE_REFUSED,
    DAY,
    DECISIONS,
    DEDUPE_WINDOW,
    INTENTS,
    MEMBERS,
    OBJECT_STORE_BUCKET,
    OUTCOMES,
    SERVER,
    SHARDS_BUCKET,
    SHARDS_STREAM,
    STATUS,
    TENANTS_BUCKET,
    TENANTS_KEY,
    TENANTS_STREAM,
    WRONG_LAST_SEQUENCE,
    BusError,
    ensure_streams,
    ensure_tenants_bucket,
    log,
    stream_configs,
)

__all__ = [
    "APPLIED",
    "BUNDLES",
    "COMPARE_REFUSED",
    "DAY",
    "DECISIONS",
    "DEDUPE_WINDOW",
    "INTENTS",
    "MEMBERS",
    "OBJECT_STORE_BUCKET",
    "OUTCOMES",
    "SERVER",
    "SHARDS_BUCKET",
    "SHARDS_STREAM",
    "STATUS",
    "TENANTS_BUCKET",
    "TENANTS_KEY",
    "TENANTS_STREAM",
    "WRONG_LAST_SEQUENCE",
    "BusError",
    "Claim",
    "Follower",
    "IntentConsumerSettings",
    "NatsSettings",
    "Publisher",
    "claim_holder",
    "claim_key",
    "claim_revision",
    "connect",
    "credentials",
    "ensure_intent_consumer",
    "ensure_streams",
    "ensure_tenants_bucket",
    "heartbeat_key",
    "inbox_prefix",
    "intent_consumer_name",
    "intents_pending",
    "last_message",
    "log",
    "read_claim",
    "stream_configs",
    "tls_context",
]
