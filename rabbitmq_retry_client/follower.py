"""What both consumers (threaded `consumer.py`, asyncio `aio.py`) share: their settings checked, the contract validated
and its policy, the counters, and the counting of a decision carried out. Each consumer adds its connection and
its loop (`_start`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from .connection import ConnectionParams, hosts
from .contract import validate
from .management import TlsSettings
from .metrics import NO_METRICS, Metrics
from .policies import Decision, Publish, Reason
from .strategies import MODES, Mode, behaviour_of, contract_mode

HandlerT = TypeVar("HandlerT")

DEFAULT_PREFETCH = 250
"""Deliveries the broker sends ahead of the handler. 250 is Spring AMQP's default and inside the 100–300 range
RabbitMQ's documentation gives for throughput: a retrying consumer holds each original until the broker confirmed
its copy, so a small prefetch leaves it waiting on confirms (bench/README.md measures 10 against 250). A consumer
with a slow handler, beside others, gets fairer sharing from a smaller one (`prefetch=`, `--prefetch`)."""


class Run:
    """One call of a consumer's `run`: how many it handled, and whether it is over: `max_messages` handled, nothing
    arrived for `idle_timeout` seconds, `until()` true or `stopping()` (stop() called)."""

    def __init__(self, max_messages: int | None, idle_timeout: float | None, until: Callable[[], bool] | None,
                 stopping: Callable[[], bool]) -> None:
        self.max_messages, self.idle_timeout, self.until, self.stopping = max_messages, idle_timeout, until, stopping
        self.handled = 0
        self.poll = 0.2 if idle_timeout is None else max(0.01, min(0.2, idle_timeout))
        """Seconds to wait for a delivery before looking again."""
        self.last_activity = time.monotonic()
        self._finished = False

    def done(self) -> bool:
        """Sticky: `until()` is asked once more only while it said no (it may answer yes only once)."""
        self._finished = self._finished or self.stopping() or self.room() == 0 or (
            self.until is not None and self.until())
        return self._finished

    def room(self) -> int | None:
        """How many more it may handle (None: no limit)."""
        return None if self.max_messages is None else max(0, self.max_messages - self.handled)

    def idle(self) -> bool:
        return self.idle_timeout is not None and time.monotonic() - self.last_activity >= self.idle_timeout

    def active(self, handled: int = 0) -> None:
        """`handled` more were handled (or the connection came back): the idle time starts again."""
        self.handled += handled
        self.last_activity = time.monotonic()


class Follower(Generic[HandlerT]):
    """A consumer of the contract's queue that calls `handler` for each delivery, and retries or parks what it
    raises on. The connection's vhost is the contract's. `mode` applies to `tiers` contracts only; None (the
    default) is the contract's own, `contract_mode`. `handler_timeout`: seconds one delivery's handler may run, past
    it the attempt fails (and is retried). After a lost connection it connects again, each host in turn, for up to
    `reconnect_timeout` seconds; after a refused copy it pauses `publish_failure_pause` seconds once.

    Counters: `processed` (handler succeeded, acked), `retried` (left to wait for a retry), `parked` (sent to the
    error exchange, `permanent` of them at once), `requeued` (a retry or parking publish failed: the original was
    nacked back to the queue), `reconnects`, `timed_out` (handlers abandoned at their deadline)."""

    def __init__(self, connection_params: ConnectionParams, contract: Mapping[str, Any], handler: HandlerT,
                 mode: Mode | None = None, prefetch: int = DEFAULT_PREFETCH, *, reconnect: bool = True,
                 reconnect_timeout: float = 60.0, publish_failure_pause: float = 1.0,
                 handler_timeout: float | None = None, tls: TlsSettings | None = None,
                 metrics: Metrics = NO_METRICS) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if handler_timeout is not None and handler_timeout <= 0:
            raise ValueError(f"handler_timeout must be positive seconds or None, got {handler_timeout!r}")
        self.contract = validate(contract)
        self.mode: Mode = contract_mode(self.contract) if mode is None else mode
        self.policy = behaviour_of(self.contract).policy(self.contract, self.mode)
        self.queue: str = self.contract["queue"]
        self.handler = handler
        self.handler_timeout = handler_timeout
        self.prefetch, self.reconnect, self.reconnect_timeout = prefetch, reconnect, reconnect_timeout
        self.publish_failure_pause = publish_failure_pause
        self.metrics = metrics
        self._params = hosts(connection_params, self.contract["vhost"], tls)
        """Every host to try, in order, on connect and on each reconnect (a cluster's nodes)."""
        self._pause_owed = False
        """A copy was refused; the loop pauses before its next delivery (no hot loop on a broken topology)."""
        self.processed = self.retried = self.parked = self.permanent = self.requeued = 0
        self.reconnects = self.timed_out = 0
        self._start()

    def _start(self) -> None:
        """Set up the consumer's own state (not connected yet)."""

    def _count(self, decision: Decision, message_id: object, reason: Reason | str) -> None:
        """Count (and log, and tell `metrics`) a decision carried out."""
        if decision.parked:
            self.parked += 1
            self.permanent += isinstance(decision, Publish) and decision.permanent
            self.metrics.parked(self.queue, isinstance(decision, Publish) and decision.permanent)
        else:
            self.retried += 1
            self.metrics.retried(self.queue)
        self.policy.log(decision, message_id, reason)
