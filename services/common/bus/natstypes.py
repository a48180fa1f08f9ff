"""The NATS types and errors the rest of driftbus names, under the bus's own names (DESIGN §12:
every NATS call goes through ``services/common/bus``; an import-linter contract forbids importing
``nats`` anywhere else).

The callers still hold these objects (a connection, a JetStream context, a delivered message) and
catch these errors; what they send and read goes through the bus's functions as they move behind
it (issue 33). Aliases, not wrappers: a caller's ``except bus.StreamMissing`` catches exactly
what ``except nats.js.errors.NotFoundError`` did.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error, TimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

Connection = Client
"""A NATS connection (``bus.connect``)."""
JetStream = JetStreamContext
"""A JetStream context (``Connection.jetstream()``)."""
Message = Msg
"""A message as a follower delivers it (subject, data, headers, metadata)."""
Bucket = KeyValue
"""A key-value bucket (``JetStream.key_value(name)``)."""
PublishAck = PubAck
"""JetStream's acknowledgement of a publish (stream, sequence, duplicate)."""

NatsError = Error
"""Any error of the NATS client (connection closed, no responders, timeout, ...)."""
NatsTimeout = TimeoutError
"""A request to NATS got no answer in time."""
ApiError = APIError
"""JetStream refused a request (its error code and description)."""
StreamMissing = NotFoundError
"""JetStream's answer for a stream (or message) that does not exist."""
BucketNotFound = BucketNotFoundError
"""The client's answer for a key-value bucket that does not exist."""
KeyMissing = KeyNotFoundError
"""The client's answer for a key that is absent (or deleted) in a bucket."""
WrongLastSequence = KeyWrongLastSequenceError
"""A compare-and-set on a key lost: its revision is no longer the one given."""
