"""One retry policy per mechanism: what to do with a delivery whose handler failed, or that reached the queue's
delivery limit, decided from its headers and the contract alone, without any I/O.

A policy answers with a `Decision`: `Reject` (the broker retries: dead-lettered to the first tier, or delayed and
redelivered by RabbitMQ 4.3's native retry), or `Publish` a copy to an exchange with these headers, then ack the
original once the broker confirmed the copy (a retry that waits, or parking). The consumers (threaded `consumer.py`,
asyncio `aio.py`) carry decisions out on their own connections, so both follow the contract the same way:

- `RejectPolicy`: tiers in reject mode; the attempt is counted by the broker in `x-death`;
- `RepublishPolicy`: tiers in republish mode, and levels; the attempt is the contract's `attempt_header`, the copy
  goes where the strategy routes it;
- `NativePolicy`: strategy native; the attempt is the broker's `x-delivery-count`, and the retry is
  `basic.reject(requeue=true)`, the one call the broker delays and counts.
Every policy parks (a copy to the error exchange with the parking headers) past `max_retries`, or at once for a
permanent failure. Which policy follows a contract, and where its copies go, is its strategy's to say
(`strategies.StrategyBehaviour.policy`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import headers as h
from .contract import RetryContract
from .durations import format_duration

LOG = logging.getLogger("rabbitmq_retry_client")


class PermanentError(Exception):
    """Raised by a handler for a failure that no retry can fix (a malformed message, a rule it breaks): the
    message is parked at once, with `permanent: true`. Any other exception is transient and retried."""


@dataclass(frozen=True)
class Delivered:
    """What a policy reads of a delivery: where it was delivered from and its headers."""

    exchange: str
    routing_key: str
    headers: Mapping[str, Any]
    message_id: str | None = None


class Reason:
    """Why an attempt failed, `Type: message` cut to `MAX_REASON_BYTES`, made only when read: a parked copy's
    `error-reason` and the log lines read it, a retry logged below INFO does not."""

    __slots__ = ("_error", "_text")

    def __init__(self, error: BaseException | str) -> None:
        self._error = error
        self._text: str | None = error if isinstance(error, str) else None

    def __str__(self) -> str:
        if self._text is None:
            self._text = h.truncate(f"{type(self._error).__name__}: {self._error}")
        return self._text


@dataclass(frozen=True)
class Reject:
    """Settle the delivery with `basic.reject`: `requeue` False dead-letters it to the first tier, True has the
    broker delay and redeliver it (native)."""

    requeue: bool
    attempt: int
    wait_ms: int
    parked: bool = field(default=False, init=False)


@dataclass(frozen=True)
class Publish:
    """Publish a copy of the delivery (its body and properties, with `headers`) to `exchange` with `routing_key`,
    and ack the original once the broker confirmed it; a refused copy requeues the original instead."""

    exchange: str
    routing_key: str
    headers: dict[str, Any]
    attempt: int
    parked: bool
    permanent: bool = False
    wait_ms: int = 0


Decision = Reject | Publish


class RetryPolicy:
    """What the contract asks of a failed delivery; subclasses say how one is retried and counted."""

    def __init__(self, contract: RetryContract, retry_route: Callable[[int], tuple[str, str, int]]) -> None:
        self.contract = contract
        self.retry_route = retry_route
        """(exchange, routing key, wait in ms) of the copy that retries an attempt, as the contract's strategy
        routes it: the attempt's tier, or the delay levels holding it for the attempt's back-off."""
        self.queue = contract["queue"]
        self.max_retries = contract["max_retries"]

    def attempt(self, headers: Mapping[str, Any]) -> int:
        """This delivery's attempt number (1 = first)."""
        raise NotImplementedError

    def retry(self, delivered: Delivered, attempt: int) -> Decision:
        """The decision that retries `attempt`, which failed and is within `max_retries`."""
        raise NotImplementedError

    def first_failure_at(self, delivered: Delivered, attempt: int) -> str | None:
        """`first-failure-at` of a parking copy; None for a strategy that records `last-failure-at` instead."""
        raise NotImplementedError

    def origin(self, delivered: Delivered) -> tuple[str, str, datetime | None]:
        """Where the message was first published (exchange, routing key) and, in reject mode, when it first
        failed: recorded headers first (a redriven message keeps them), then the broker's x-death, then this
        delivery."""
        headers = delivered.headers
        entry = (h.deaths(headers, self.queue) or [{}])[0]
        routing_keys = entry.get("routing-keys") or [delivered.routing_key]
        exchange = h.text(headers.get(h.ORIGINAL_EXCHANGE, entry.get("exchange", delivered.exchange)))
        routing_key = h.text(headers.get(h.ORIGINAL_ROUTING_KEY, routing_keys[0]))
        first = entry.get("time")
        return exchange, routing_key, first if isinstance(first, datetime) else None

    def before_handler(self, delivered: Delivered) -> Publish | None:
        """Parking, before the handler, of a delivery whose `x-delivery-count` reached the queue's delivery limit;
        None to run the handler."""
        limit = self.contract.get("delivery_limit")
        deliveries = h.counter(delivered.headers.get("x-delivery-count"))
        if not limit or deliveries < limit:
            return None
        # Park before the broker's delivery-limit fires: its dead-letter would jam in a cycle (docs/contract.md,
        # "Before the handler"). This catches a message that keeps crashing consumers.
        return self.park(delivered, f"x-delivery-count {deliveries} reached the delivery limit {limit}",
                         attempts=deliveries, first_failure_at=h.utc_iso())

    def on_failure(self, delivered: Delivered, reason: Reason | str, *, permanent: bool = False) -> Decision:
        """Retry the failed attempt while retries are left, else (or when `permanent`) park it."""
        attempt = self.attempt(delivered.headers)
        if not permanent and attempt <= self.max_retries:
            return self.retry(delivered, attempt)
        return self.park(delivered, reason, attempts=attempt, permanent=permanent,
                         first_failure_at=self.first_failure_at(delivered, attempt))

    def park(self, delivered: Delivered, reason: Reason | str, *, attempts: int, first_failure_at: str | None,
             permanent: bool = False) -> Publish:
        """The parking copy. `first_failure_at` None (strategy native): the copy carries `last-failure-at`, now,
        instead: a native retry is the same message redelivered unchanged, so no time recorded at the first failure
        can reach the last one."""
        exchange, routing_key, _ = self.origin(delivered)
        # The attempt counter is left out so that a parked message replayed to its exchange gets a full budget.
        headers = h.without_broker_headers(delivered.headers)
        headers.pop(self.contract["attempt_header"], None)
        headers.update({h.ERROR_REASON: str(reason), h.ERROR_QUEUE: self.queue, h.ORIGINAL_EXCHANGE: exchange,
                        h.ORIGINAL_ROUTING_KEY: routing_key, h.ATTEMPTS: attempts})
        if first_failure_at is None:
            headers[h.LAST_FAILURE_AT] = h.utc_iso()
        else:
            headers[h.FIRST_FAILURE_AT] = first_failure_at
        if permanent:
            headers[h.PERMANENT] = True
        return Publish(self.contract["error_exchange"], routing_key, headers, attempts, parked=True,
                       permanent=permanent)

    def log(self, decision: Decision, message_id: object, reason: Reason | str) -> None:
        """One INFO line for a decision carried out (a retry once it is on its way, parking once confirmed)."""
        if decision.parked:
            permanent = isinstance(decision, Publish) and decision.permanent
            LOG.info("park %s after %d attempts%s in %s (%.200s)", message_id, decision.attempt,
                     " (permanent failure)" if permanent else "", self.contract["error_queue"], reason)
        elif isinstance(decision, Reject):
            LOG.info("reject %s: attempt %d/%d failed, broker retries after %s (%.200s)", message_id,
                     decision.attempt, self.max_retries, format_duration(decision.wait_ms), reason)
        else:
            LOG.info("retry %s: attempt %d/%d failed, next in %s via %s (%.200s)", message_id, decision.attempt,
                     self.max_retries, format_duration(decision.wait_ms), decision.routing_key, reason)


class RejectPolicy(RetryPolicy):
    """Tiers in reject mode: `basic.reject(requeue=false)`, the queue dead-letters it to tier 1, and the broker
    counts the attempts in `x-death`."""

    def attempt(self, headers: Mapping[str, Any]) -> int:
        return h.rejected_attempts(headers, self.queue) + 1

    def retry(self, delivered: Delivered, attempt: int) -> Decision:
        return Reject(requeue=False, attempt=attempt, wait_ms=self.contract["tiers"][0]["delay_ms"])

    def first_failure_at(self, delivered: Delivered, attempt: int) -> str | None:
        """The broker's x-death time of the first reject (now, for the first failure)."""
        return h.utc_iso(self.origin(delivered)[2])


class RepublishPolicy(RetryPolicy):
    """Tiers in republish mode, and levels: a copy where it waits (`retry_route`), counted in `attempt_header`."""

    def attempt(self, headers: Mapping[str, Any]) -> int:
        return h.counter(headers.get(self.contract["attempt_header"])) + 1

    def retry(self, delivered: Delivered, attempt: int) -> Decision:
        exchange, routing_key, _ = self.origin(delivered)
        # The first failure records where the message came from: later deliveries come from Q.requeue (tiers) or
        # rabbitmq-retry.delay.deliver (levels).
        headers = delivered.headers
        fresh = attempt == 1 or h.FIRST_FAILURE_AT not in headers
        retry_exchange, retry_key, wait_ms = self.retry_route(attempt)
        copy = {**h.without_broker_headers(headers), h.ORIGINAL_EXCHANGE: exchange,
                h.ORIGINAL_ROUTING_KEY: routing_key,
                h.FIRST_FAILURE_AT: h.utc_iso() if fresh else h.text(headers[h.FIRST_FAILURE_AT]),
                self.contract["attempt_header"]: attempt}
        return Publish(retry_exchange, retry_key, copy, attempt, parked=False, wait_ms=wait_ms)

    def first_failure_at(self, delivered: Delivered, attempt: int) -> str | None:
        if attempt > 1 and h.FIRST_FAILURE_AT in delivered.headers:
            return h.text(delivered.headers[h.FIRST_FAILURE_AT])
        return h.utc_iso()


class NativePolicy(RetryPolicy):
    """Strategy native: reject with requeue while retries are left; the broker keeps the message in the queue for
    `min(min_delay_ms × n, max_delay_ms)` and counts it in `x-delivery-count`. The last attempt is parked by the
    client, with the reason; a consumer that dies on it leaves the parking to the broker (reason `delivery_limit`)."""

    def attempt(self, headers: Mapping[str, Any]) -> int:
        return h.counter(headers.get("x-delivery-count")) + 1

    def before_handler(self, delivered: Delivered) -> Publish | None:
        """None: a retry by the broker counts toward the delivery limit by design (past it the broker parks the
        message itself)."""
        return None

    def retry(self, delivered: Delivered, attempt: int) -> Decision:
        delay = min(self.contract["min_delay_ms"] * attempt, self.contract["max_delay_ms"])
        return Reject(requeue=True, attempt=attempt, wait_ms=delay)

    def first_failure_at(self, delivered: Delivered, attempt: int) -> str | None:
        return None

