"""The headers of the retry contract, and what a retried, parked or redriven copy carries over.

None of our headers starts with "x-": that prefix belongs to the broker (3.13+/4.x ignore an `x-death`
set by a client).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pika.spec import BasicProperties

MAX_REASON_BYTES = 1024

ERROR_REASON = "error-reason"
ERROR_QUEUE = "error-queue"
ORIGINAL_EXCHANGE = "original-exchange"
ORIGINAL_ROUTING_KEY = "original-routing-key"
ATTEMPTS = "attempts"
FIRST_FAILURE_AT = "first-failure-at"
LAST_FAILURE_AT = "last-failure-at"
"""Strategy `native` parks with this instead of `first-failure-at`: the broker redelivers the same message
unchanged, so nothing a consumer wrote at the first failure survives; it is the time of the failure that parked it."""
PERMANENT = "permanent"
"""Set (true) on a message parked at once because its handler called the failure permanent."""
REDRIVEN_COUNT = "redriven-count"
"""How often a parked message was sent back by `rabbitmq-retry parked redrive`."""
REDRIVEN_AT = "redriven-at"

PARKING_HEADERS = (ERROR_REASON, ERROR_QUEUE, ATTEMPTS, FIRST_FAILURE_AT, LAST_FAILURE_AT, PERMANENT)
"""What parking adds and a redrive removes (the origin headers stay: they still say where it came from)."""

_DEATH_PREFIXES = ("x-first-death-", "x-last-death-")
_DELIVERY_COUNTERS = ("x-delivery-count", "x-acquired-count")
"""Set by quorum queues on 4.x per delivery: they describe the original's deliveries, not the copy's."""


def text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def counter(value: object) -> int:
    """A counter from a header; a malformed one counts as 0 rather than crashing the consumer."""
    try:
        return int(text(value)) if value is not None else 0
    except ValueError:
        return 0


_now_text: tuple[int, str] = (-1, "")
"""The last millisecond `utc_iso()` wrote, and its text: a batch of failed deliveries is handled within a
millisecond or a few, and each copy records the time of its failure (formatting a datetime cost a few % of the
consumer's time in a retry loop)."""


def utc_iso(moment: datetime | None = None) -> str:
    """`moment` (default now) in UTC to the millisecond, as `2026-11-27T07:15:35.123Z`."""
    global _now_text
    if moment is None:
        millis = time.time_ns() // 1_000_000
        if millis != _now_text[0]:
            seconds, part = divmod(millis, 1000)
            _now_text = (millis, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{part:03d}Z")
        return _now_text[1]
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-len("+00:00")] + "Z"


def parse_utc(value: object) -> datetime | None:
    """A `first-failure-at` header back as an aware datetime; None when absent or malformed."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(text(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def deaths(headers: Mapping[str, Any] | None, queue: str, reason: str = "rejected") -> list[Mapping[str, Any]]:
    """The `x-death` entries the broker wrote for `queue` and `reason`."""
    entries = (headers or {}).get("x-death") or []
    return [e for e in entries if isinstance(e, Mapping)
            and text(e.get("queue")) == queue and text(e.get("reason")) == reason]


def rejected_attempts(headers: Mapping[str, Any] | None, queue: str) -> int:
    """How often `queue`'s consumers rejected this message so far (broker-written, reject mode only)."""
    return sum(counter(e.get("count")) for e in deaths(headers, queue))


def without_broker_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Headers minus the broker's dead-letter history and delivery counters: a copy is a new message
    (and 3.13+/4.x ignores a client-set `x-death` anyway)."""
    return {k: v for k, v in (headers or {}).items()
            if k != "x-death" and not k.startswith(_DEATH_PREFIXES) and k not in _DELIVERY_COUNTERS}


def redriven_headers(headers: Mapping[str, Any] | None, attempt_header: str,
                     moment: datetime | None = None) -> dict[str, Any]:
    """A parked message's headers for its redriven copy: a full retry budget (no attempt counter, no
    parking headers, no broker history) and `redriven-count` one higher; the origin headers stay."""
    copied = without_broker_headers(headers)
    for key in (*PARKING_HEADERS, attempt_header):
        copied.pop(key, None)
    copied[REDRIVEN_COUNT] = counter((headers or {}).get(REDRIVEN_COUNT)) + 1
    copied[REDRIVEN_AT] = utc_iso(moment)
    return copied


def truncate(reason: str, limit: int = MAX_REASON_BYTES) -> str:
    """At most `limit` UTF-8 bytes, cut on a character boundary: headers count against frame size."""
    data = reason.encode("utf-8")
    return reason if len(data) <= limit else data[:limit - 3].decode("utf-8", "ignore") + "..."


def copy_properties(properties: BasicProperties, headers: dict[str, Any]) -> BasicProperties:
    """The original's properties for a republished copy, persistent.

    Dropped: `expiration` (a per-message TTL in a wait queue blocks the messages behind it and would
    shorten the tier; in the error queue it would discard the parked message) and `user_id` (the broker
    refuses a user_id other than the publishing connection's user).
    """
    return BasicProperties(
        content_type=properties.content_type, content_encoding=properties.content_encoding,
        headers=headers, delivery_mode=2, priority=properties.priority,
        correlation_id=properties.correlation_id, reply_to=properties.reply_to,
        message_id=properties.message_id, timestamp=properties.timestamp, type=properties.type,
        app_id=properties.app_id,
    )
