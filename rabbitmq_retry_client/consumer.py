"""A consumer that follows the retry contract: retry what its handler fails on, park what is out of retries
or failed permanently, and settle every delivery only after the broker confirmed its copy.

Modes:
- "reject": a failed message is rejected (requeue=False); the broker dead-letters it to tier 1 and counts
  the attempts in `x-death`. Fixed delay (tier 1's), no publish by the client.
- "republish": a failed message is copied to the tier of its attempt (stepped back-off) with the attempt
  in the contract's own header, because RabbitMQ 3.13+/4.x ignores an `x-death` set by a client.
Republish mode is the one that follows every tier; reject mode waits the same only when the contract has a
single tier, so that is the default then (`contract_mode`; docs/contract.md, "Which mode").
A contract of strategy `native` (RabbitMQ 4.3's delayed retry) takes neither mode: a failed message is
rejected with `basic.reject(requeue=true)`, the one call the broker delays and counts (`basic.nack` with
requeue neither waits nor counts: a nack loop never ends); the broker's `x-delivery-count` is the attempt.
A contract of strategy `levels` takes neither mode either: a failed message is republished (as in
"republish") to the delay level of its back-off delay's highest bit, with a routing key that spells the delay
(`levels.py`), counted in the contract's own `attempt_header`.

The handler runs in a worker thread while this thread keeps the connection serviced (heartbeats, other
channels), so a long handler does not lose the connection; `handler_timeout` bounds it.

Copies (retries, parking) are published without waiting for their confirms (`confirms.py`): the consumer
goes on with the next delivery, and settles each original once the broker answered for its copy (ack after
a confirm, nack with requeue otherwise), with at most `max_in_flight` copies unanswered at a time.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import Basic, BasicProperties

from . import headers as h
from .confirms import Confirms
from .connection import ConnectionParams, connect, connection_params_of, hosts, quiet_pika
from .contract import strategy_of, validate
from .durations import format_duration
from .management import TlsSettings
from .settlements import Settlements
from .strategies import MODES, Mode, Retries, behaviour_of

LOG = logging.getLogger("rabbitmq_retry_client")

Handler = Callable[[bytes, BasicProperties], None]
"""`handler(body, properties)`: returns on success; raises on failure (PermanentError: park at once)."""


def contract_mode(contract: Mapping[str, Any]) -> Mode:
    """The mode a `tiers` contract prescribes: "republish" (attempt n waits in tier min(n, len(tiers))), or
    "reject" when it has a single tier, where both wait the same and reject mode publishes nothing. A reject-mode
    consumer of a contract with more tiers would wait tier 1's delay every time."""
    return "reject" if len(contract.get("tiers") or []) == 1 else "republish"


class PermanentError(Exception):
    """Raised by a handler for a failure that no retry can fix (a malformed message, a rule it breaks): the
    message is parked at once, with `permanent: true`. Any other exception is transient and retried."""


class NotRunError(Exception):
    """Its handler was never started: the consumer was stopping (`stop()`) when its turn came. The delivery goes
    back to the queue, unhandled, as a prefetched one does."""


class DeadlineExceededError(Exception):
    """The handler was still running at `handler_timeout`: the attempt counts as a transient failure."""


class _Worker:
    """The thread that runs the handler, one delivery at a time, for as long as the consumer lives: starting a
    thread per delivery cost more than a fast handler. Deliveries go in and outcomes (None or the handler's
    exception) come back through two `queue.SimpleQueue`s, whose waits are C-level: with an Event per delivery a
    sampling profiler found a sizeable share of the client's time in its waits, and the queues made plain consume
    faster (bench/README.md). `retire()` lets it finish its current handler and exit."""

    def __init__(self, handler: Handler, stopping: threading.Event | None = None) -> None:
        self._handler = handler
        self._stopping = stopping
        self._jobs: queue.SimpleQueue[tuple[bytes, BasicProperties] | None] = queue.SimpleQueue()
        self._outcomes: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="rabbitmq-retry-handler", daemon=True).start()

    def submit(self, body: bytes, properties: BasicProperties) -> None:
        self._jobs.put((body, properties))

    def outcome(self, timeout: float) -> tuple[bool, BaseException | None]:
        """(finished, the handler's exception or None) of the delivery submitted last; (False, None) while it
        still runs after `timeout` seconds."""
        try:
            return True, self._outcomes.get(timeout=timeout)
        except queue.Empty:
            return False, None

    def retire(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            outcome: BaseException | None = None
            if self._stopping is not None and self._stopping.is_set():
                # The consumer is stopping: a delivery given ahead with others is not started (`NotRunError`).
                self._outcomes.put(NotRunError("the consumer was stopping"))
                continue
            try:
                self._handler(*job)
            except BaseException as error:  # any failure of the handler is a failed attempt
                # Even SystemExit or KeyboardInterrupt raised in this thread: acking it would drop a message whose
                # handler never finished, and letting it end the thread would leave the consumer waiting forever.
                outcome = error
            self._outcomes.put(outcome)


Delivery = tuple[Basic.Deliver, BasicProperties, bytes]


class _Reason:
    """Why an attempt failed, `Type: message` cut to `MAX_REASON_BYTES`, made only when read: a parked copy's
    `error-reason` and the log lines read it, a retry logged below INFO does not."""

    __slots__ = ("_error", "_text")

    def __init__(self, error: BaseException) -> None:
        self._error = error
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = h.truncate(f"{type(self._error).__name__}: {self._error}")
        return self._text


def _buffered(channel: BlockingChannel) -> Delivery | None:
    """The next delivery pika already received for the channel's consumer, taken without any I/O, or None when
    there is none (or a cancellation is next: the consume loop sees it). The buffer is pika 1.x's own
    (`BlockingChannel.consume` yields from it); a pika without it leaves every delivery to the consume loop."""
    generator = getattr(channel, "_queue_consumer_generator", None)
    pending = generator.pending_events if generator is not None else None
    if not pending or not hasattr(pending[0], "properties"):
        return None
    event = pending.popleft()
    return event.method, event.properties, event.body


DEFAULT_PREFETCH = 250
"""Deliveries the broker sends ahead of the handler. 250 is Spring AMQP's default and inside the 100–300 range
RabbitMQ's documentation gives for throughput: a retrying consumer holds each original until the broker confirmed
its copy, so a small prefetch leaves it waiting on confirms (bench/README.md measures 10 against 250). A consumer
with a slow handler, beside others, gets fairer sharing from a smaller one (`prefetch=`, `--prefetch`)."""


class RetryingConsumer:
    """Consume the contract's queue, call `handler(body, properties)`, and retry or park what it raises on.

    Counters: `processed` (handler succeeded, acked), `retried` (left to wait for a retry), `parked` (sent to
    the error exchange, `permanent` of them at once), `requeued` (a retry or parking publish failed: the original
    was nacked back to the queue), `reconnects`, `timed_out` (handlers abandoned at their deadline). The
    connection's vhost is the contract's. `mode` applies to `tiers` contracts only (see the module docstring);
    None (the default) is the contract's own, `contract_mode`.
    """

    def __init__(self, connection_params: ConnectionParams, contract: Mapping[str, Any], handler: Handler,
                 mode: Mode | None = None, prefetch: int = DEFAULT_PREFETCH, *, reconnect: bool = True,
                 reconnect_timeout: float = 60.0, publish_failure_pause: float = 1.0,
                 handler_timeout: float | None = None, tls: TlsSettings | None = None) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if handler_timeout is not None and handler_timeout <= 0:
            raise ValueError(f"handler_timeout must be positive seconds or None, got {handler_timeout!r}")
        self.contract = validate(contract)
        mode = contract_mode(self.contract) if mode is None else mode
        self.strategy = strategy_of(self.contract)
        self.behaviour = behaviour_of(self.contract)
        self.retries = self.behaviour.retries(mode)
        """How a failure is retried: by the broker, by a dead-lettering reject, or by publishing a copy."""
        self.counts_in_header = self.retries is Retries.BY_PUBLISHED_COPY
        """The attempt is our own `attempt_header`, and a failure is retried by publishing a copy."""
        self.queue: str = self.contract["queue"]
        self.handler = handler
        self.mode: Mode = mode
        self.prefetch = prefetch
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.publish_failure_pause = publish_failure_pause
        self.handler_timeout = handler_timeout
        """Seconds one delivery's handler may run; past it the attempt fails (and is retried) while the
        abandoned handler thread runs on: handlers should honour their own deadline."""
        self.processed = self.retried = self.parked = self.permanent = self.requeued = 0
        self.reconnects = self.timed_out = 0
        self._stopping = threading.Event()
        self._params = hosts(connection_params, self.contract["vhost"], tls)
        """Every host to try, in order, on connect and on each reconnect (a cluster's nodes)."""
        self._connection: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._confirms: Confirms | None = None
        self._worker: _Worker | None = None
        self._settlements: Settlements | None = None
        """The consuming channel's deliveries not settled yet (`settlements.py`)."""
        self._pause_owed = False
        """A copy was refused while settling inside an I/O pass, where the consumer cannot pause."""
        self._answer_scheduled = False
        """`_settle_in_io` is due once the I/O loop has dispatched what it read."""
        self._to_flush: list[Settlements] = []
        """Those holding acks of originals whose copies were confirmed, until `_settle` sends them."""
        self.max_in_flight = prefetch if prefetch > 0 else 1000
        """Copies published and not yet confirmed; at the bound the consumer waits for confirms. `prefetch`
        is the natural bound: each unconfirmed copy holds its original, unacked, and so one prefetch slot."""

    # connection ---------------------------------------------------------------------------------------

    def _connect(self) -> BlockingChannel:
        """The consuming channel; waits up to `reconnect_timeout` for the broker (one log line, not one a
        second) and raises `BrokerUnreachableError` after that."""
        if self._connection is None or not self._connection.is_open:
            self._connection = connect(self._params, self.reconnect_timeout if self.reconnect else 0.0)
            self._channel, self._confirms = None, None
            self._answer_scheduled = False  # a timer of the old connection's I/O loop never runs
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
            self._channel.basic_qos(prefetch_count=self.prefetch)
        return self._channel

    @property
    def connected_to(self) -> str | None:
        """"host:port" of the node the consumer is connected to now (None when it is not connected)."""
        if self._connection is None or not self._connection.is_open:
            return None
        used = connection_params_of(self._connection, self._params)
        return f"{used.host}:{used.port}"

    def _drop(self) -> None:
        """Forget a broken connection, and the copies in flight with it: their originals are unsettled
        deliveries, which the broker puts back in the queue when the connection closes."""
        connection, self._connection, self._channel, self._confirms = self._connection, None, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()

    def _confirming(self) -> Confirms:
        """A second channel for retries and parking, in confirm mode: a broker that refuses a copy (or a
        404 on a missing exchange) closes only this channel, never the consumer's. A closed one is settled
        (its copies in flight refused) before a new one replaces it."""
        assert self._connection is not None
        if self._confirms is None or not self._confirms.is_open:
            if self._confirms is not None:
                self._settle()
            self._confirms = Confirms(self._connection.channel(), on_event=self._answer_after_this_read)
        return self._confirms

    def in_flight(self) -> int:
        """Copies published whose originals wait for the broker's answer."""
        return len(self._confirms.pending) if self._confirms is not None else 0

    def _answer(self) -> tuple[int, bool]:
        """Settle the originals of the copies the broker answered for (see `_publish_then_ack`), queueing their
        frames; (how many, whether any was refused)."""
        answered = self._confirms.answers() if self._confirms is not None else []
        refused = False
        for copy, error in answered:
            copy.answer(error)
            refused = refused or error is not None
        self._flush_acks()
        return len(answered), refused

    def _settle(self) -> None:
        """Settle what the broker answered for and send it; after any refusal, pause once for
        `publish_failure_pause` (no hot loop on a broken topology)."""
        answered, refused = self._answer()
        if answered and self._connection is not None and self._connection.is_open:
            self._connection.process_data_events(time_limit=0)  # sends the acks of the whole batch at once
        if (refused or self._pause_owed) and self.publish_failure_pause > 0 and self._connection is not None:
            self._pause_owed = False
            self._connection.sleep(self.publish_failure_pause)

    def _answer_after_this_read(self) -> None:
        """The confirm channel's hook, inside pika's I/O pass, for each answer that arrives: settle once what this
        read brought (`_settle_in_io`, as a timer of the I/O loop, which runs after the read is dispatched), so one
        multiple ack covers the originals of all its confirms."""
        connection = self._connection
        if self._answer_scheduled or connection is None or not connection.is_open:
            return
        self._answer_scheduled = True
        connection._impl.ioloop.call_later(0, self._settle_in_io)

    def _settle_in_io(self) -> None:
        """Settle inside pika's I/O loop what the broker answered for, so the acks leave with its next write. A
        consumer whose prefetch is taken by originals waiting for their copies' confirms receives nothing until it
        acks them; settling only once a delivery arrived stalled it, on classic queues (whose confirms of
        persistent copies come late) until its poll ran out. Only frames are queued here; a refusal's pause is
        taken by the next `_settle`, outside the I/O loop."""
        self._answer_scheduled = False
        _, refused = self._answer()
        self._pause_owed = self._pause_owed or refused

    def _ack(self, channel: BlockingChannel, delivery_tag: int) -> None:
        """Ack a delivery with the next `_flush_acks`, before the connection's next I/O pass: the acks of a run of
        deliveries from the oldest one unsettled leave as one `basic.ack(multiple=true)` (`settlements.py`)."""
        settlements = self._settlements_of(channel)
        settlements.ack_later(delivery_tag)
        if settlements not in self._to_flush:
            self._to_flush.append(settlements)

    def _give_back(self, channel: BlockingChannel, delivery_tag: int, *, requeue: bool, reject: bool = False) -> None:
        """`basic.nack` (or `basic.reject`) a delivery, queued on the channel after the acks asked for before it:
        frames leave in the order the consumer settled them."""
        self._flush_acks()
        if reject:
            channel._impl.basic_reject(delivery_tag, requeue=requeue)
        else:
            channel._impl.basic_nack(delivery_tag, requeue=requeue)
        self._settlements_of(channel).settled(delivery_tag)

    def _flush_acks(self) -> None:
        """Queue the acks asked for since the last flush on their channels (`Settlements.flush`); the consumer
        flushes before every I/O pass of the connection, so no ack waits longer than it did when each was queued
        at once."""
        while self._to_flush:
            settlements = self._to_flush.pop()
            if settlements.channel.is_open:
                settlements.flush()

    def _settlements_of(self, channel: BlockingChannel) -> Settlements:
        """The record of `channel`'s unsettled deliveries (a new one for a new channel)."""
        if self._settlements is None or self._settlements.channel is not channel:
            self._settlements = Settlements(channel)
        return self._settlements

    def _await_answers(self) -> None:
        """Wait (briefly) for the broker to answer for a copy in flight, then settle what it answered."""
        if self._confirms is not None and self._connection is not None:
            self._flush_acks()
            self._confirms.wait(self._connection, 0.2)
        self._settle()

    def _settle_all(self) -> None:
        """Return only once every copy in flight is answered and its original settled."""
        while self.in_flight():
            self._await_answers()

    def stop(self) -> None:
        """Ask `run` to return, from any thread or a signal handler: the delivery being handled is finished
        and settled first, and every copy in flight answered and its original settled; prefetched ones not yet
        handled (also those already given to the handler thread behind it, not started) go back to the queue
        (nack, requeue)."""
        self._stopping.set()

    def close(self) -> None:
        self._drop()
        if self._worker is not None:
            self._worker.retire()
            self._worker = None

    def __enter__(self) -> RetryingConsumer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    # loop ---------------------------------------------------------------------------------------------

    def run(self, max_messages: int | None = None, idle_timeout: float | None = None,
            until: Callable[[], bool] | None = None) -> int:
        """Handle deliveries until `max_messages` were handled, nothing arrived for `idle_timeout` seconds,
        `until()` is true or `stop()` was called; returns how many were handled. Reconnects after a broker
        restart; raises `BrokerUnreachableError` when the broker stays away longer than `reconnect_timeout`."""
        quiet_pika()
        self._stopping.clear()
        handled = 0
        poll = 0.2 if idle_timeout is None else max(0.01, min(0.2, idle_timeout))
        last_activity = time.monotonic()

        def done() -> bool:
            return (self._stopping.is_set() or (max_messages is not None and handled >= max_messages)
                    or (until is not None and until()))

        try:
            while not done():
                try:
                    channel = self._connect()
                    for method, properties, body in channel.consume(self.queue, inactivity_timeout=poll):
                        self._settle()
                        if method is not None:
                            room = None if max_messages is None else max_messages - handled
                            handled += self._handle_buffered(channel, (method, properties, body), room)
                            last_activity = time.monotonic()
                        if done() or (idle_timeout is not None and time.monotonic() - last_activity >= idle_timeout):
                            break
                    else:
                        # The generator ends when the broker cancels the consumer (queue deleted, leader moved).
                        LOG.warning("consumer on %s cancelled by the broker; consuming again", self.queue)
                        time.sleep(0.5)
                        continue
                    self._settle_all()
                    return handled
                except (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelWrongStateError) as error:
                    connection_lost = self._connection is None or not self._connection.is_open
                    if not self.reconnect or not connection_lost:
                        raise
                    LOG.warning("connection lost (%s); reconnecting", error or type(error).__name__)
                    self._drop()
                    self.reconnects += 1
                    last_activity = time.monotonic()
            self._settle_all()
            return handled
        finally:
            if self.in_flight():
                # Leaving on an error with copies unanswered: closing the connection puts their originals
                # back in the queue (a duplicate at worst) and no late confirm can settle them wrongly.
                self._drop()
            self._stop_consuming()

    def _stop_consuming(self) -> None:
        """Cancel the consumer; prefetched, unhandled messages go back to the queue (not lost)."""
        if self._channel is not None and self._channel.is_open:
            try:
                self._flush_acks()
                self._channel.cancel()
            except pika.exceptions.AMQPError:
                self._drop()

    # one delivery -------------------------------------------------------------------------------------

    def _call_handler(self, body: bytes, properties: BasicProperties) -> BaseException | None:
        """Run the handler in the worker thread while this one keeps the connection serviced; its exception,
        DeadlineExceededError at `handler_timeout`, or None on success."""
        if self._worker is None:
            self._worker = _Worker(self.handler, self._stopping)
        self._worker.submit(body, properties)
        return self._await_outcome(self.handler_timeout)

    def _await_outcome(self, timeout: float | None) -> BaseException | None:
        """The outcome of the oldest delivery given to the worker and not answered yet, servicing the connection
        meanwhile; DeadlineExceededError (and a new worker for the next delivery) after `timeout` seconds."""
        assert self._worker is not None
        started = time.monotonic()
        wait = 0.02
        while True:
            finished, outcome = self._worker.outcome(wait)
            if finished:
                return outcome
            if self._connection is not None:
                self._flush_acks()
                self._connection.process_data_events(time_limit=0)  # heartbeats during a long handler
                self._settle()  # and confirms of earlier copies
            if timeout is not None and time.monotonic() - started >= timeout:
                self.timed_out += 1
                self._worker.retire()  # it finishes the abandoned handler, then exits; the next delivery gets a new one
                self._worker = None
                return DeadlineExceededError(f"handler still running after its deadline of {timeout:g} s")
            wait = 0.05

    def _handle_buffered(self, channel: BlockingChannel, first: Delivery, room: int | None) -> int:
        """Handle `first` and the deliveries that already arrived behind it (up to `room`), returning how many.

        Without `handler_timeout`, their handlers run back to back in the worker thread: each is given to it
        as soon as it is taken from what pika holds (no I/O, so no wait), and their outcomes are settled in
        order once the last one is given. Handing deliveries over one at a time costs two thread switches
        each, the largest part of the consumer's own CPU per delivery (bench/README.md, "Against the broker's
        floor"); a batch costs about two in all. With `handler_timeout`, each delivery is handed over alone
        and timed alone."""
        if self.handler_timeout is not None:
            return self._handle(channel, *first)
        if self._worker is None:
            self._worker = _Worker(self.handler, self._stopping)
        given: collections.deque[Delivery] = collections.deque()
        taken = skipped = 0
        try:
            delivery: Delivery | None = first
            while delivery is not None:
                taken += 1
                if self._before_handler(channel, *delivery):
                    self._worker.submit(delivery[2], delivery[1])
                    given.append(delivery)
                more = (room is None or taken < room) and not self._stopping.is_set()
                delivery = _buffered(channel) if more else None
            while given:
                method, properties, body = given.popleft()
                outcome = self._await_outcome(None)
                skipped += isinstance(outcome, NotRunError)
                self._after_handler(channel, method, properties, body, outcome)
            self._flush_acks()
        finally:
            if given and self._worker is not None:
                # Leaving on an error with outcomes still owed: that worker finishes what it was given and exits,
                # and the next delivery gets a new one, so no outcome can be taken for another delivery's. Their
                # deliveries stay unsettled: the broker requeues them (at least once, as after a crash).
                self._worker.retire()
                self._worker = None
        return taken - skipped

    def _before_handler(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                        body: bytes) -> bool:
        """False when the delivery was parked before its handler (its delivery count reached the limit)."""
        self._settlements_of(channel).delivered(method.delivery_tag)
        headers = properties.headers or {}
        limit = self.contract.get("delivery_limit")
        deliveries = h.counter(headers.get("x-delivery-count"))
        # Retries by the broker count toward the limit by design: past it the broker itself parks the message.
        if limit and deliveries >= limit and self.retries is not Retries.BY_BROKER:
            # Park before the broker's delivery-limit fires: its dead-letter would jam in a cycle
            # (docs/contract.md, "Before the handler"). This catches a message that keeps crashing consumers.
            exchange, routing_key, _ = self._origin(method, headers)
            self._park(channel, method, properties, body, f"x-delivery-count {deliveries} reached the "
                       f"delivery limit {limit}", attempts=deliveries, exchange=exchange, routing_key=routing_key,
                       first_failure_at=h.utc_iso())
            return False
        return True

    def _handle(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                body: bytes) -> int:
        """One delivery, its handler run and timed alone; 0 when its handler never ran (stopping), else 1."""
        if not self._before_handler(channel, method, properties, body):
            return 1
        outcome = self._call_handler(body, properties)
        self._after_handler(channel, method, properties, body, outcome)
        self._flush_acks()
        return 0 if isinstance(outcome, NotRunError) else 1

    def _after_handler(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                       body: bytes, error: BaseException | None) -> None:
        """Settle a delivery by its handler's outcome: ack it, or retry or park it; one whose handler never ran
        (`NotRunError`: stopping) goes back to the queue."""
        if isinstance(error, NotRunError):
            self._give_back(channel, method.delivery_tag, requeue=True)
            return
        if error is None:
            # Not sent yet: the consumer's next wait for a delivery sends it with whatever else is queued
            # (`BlockingChannel.basic_ack` runs an I/O pass per ack, which cost more client CPU than the rest of a
            # plain delivery), with the acks before and after it as one multiple ack where it can (`_ack`).
            self._ack(channel, method.delivery_tag)
            self.processed += 1
            return
        reason = _Reason(error)
        if isinstance(error, PermanentError):
            self._park_permanent(channel, method, properties, body, reason)
        elif self.retries is Retries.BY_BROKER:
            self._fail_native(channel, method, properties, body, reason)
        elif self.counts_in_header:
            self._fail_republish(channel, method, properties, body, reason)
        else:
            self._fail_reject(channel, method, properties, body, reason)

    def _origin(self, method: Basic.Deliver, headers: Mapping[str, Any]) -> tuple[str, str, datetime | None]:
        """Where the message was first published (exchange, routing key) and, in reject mode, when it first
        failed: recorded headers first (a redriven message keeps them), then the broker's x-death, then this
        delivery."""
        entry = (h.deaths(headers, self.queue) or [{}])[0]
        routing_keys = entry.get("routing-keys") or [method.routing_key]
        exchange = h.text(headers.get(h.ORIGINAL_EXCHANGE, entry.get("exchange", method.exchange)))
        routing_key = h.text(headers.get(h.ORIGINAL_ROUTING_KEY, routing_keys[0]))
        first = entry.get("time")
        return exchange, routing_key, first if isinstance(first, datetime) else None

    def _attempt(self, headers: Mapping[str, Any]) -> int:
        """This delivery's attempt number (1 = first)."""
        if self.retries is Retries.BY_BROKER:
            return h.counter(headers.get("x-delivery-count")) + 1
        if not self.counts_in_header:
            return h.rejected_attempts(headers, self.queue) + 1
        return h.counter(headers.get(self.contract["attempt_header"])) + 1

    def _park_permanent(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                        body: bytes, reason: _Reason) -> None:
        headers = properties.headers or {}
        exchange, routing_key, first = self._origin(method, headers)
        attempt = self._attempt(headers)
        first_failure_at: str | None
        if self.retries is Retries.BY_BROKER:
            first_failure_at = None
        elif self.counts_in_header and attempt > 1 and h.FIRST_FAILURE_AT in headers:
            first_failure_at = h.text(headers[h.FIRST_FAILURE_AT])
        else:
            first_failure_at = h.utc_iso(first)
        self._park(channel, method, properties, body, reason, attempts=attempt, exchange=exchange,
                   routing_key=routing_key, first_failure_at=first_failure_at, permanent=True)

    def _fail_reject(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                     body: bytes, reason: _Reason) -> None:
        headers = properties.headers or {}
        so_far = h.rejected_attempts(headers, self.queue)
        if so_far < self.contract["max_retries"]:
            # The queue's dead-letter arguments send it to tier 1; the broker records the attempt in x-death.
            self._give_back(channel, method.delivery_tag, requeue=False, reject=True)  # queued, not sent yet
            self.retried += 1
            LOG.info("reject %s: attempt %d failed, broker retries after %s (%.200s)", properties.message_id,
                     so_far + 1, format_duration(self.contract["tiers"][0]["delay_ms"]), reason)
            return
        exchange, routing_key, first = self._origin(method, headers)
        self._park(channel, method, properties, body, reason, attempts=so_far + 1, exchange=exchange,
                   routing_key=routing_key, first_failure_at=h.utc_iso(first))

    def _fail_native(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                     body: bytes, reason: _Reason) -> None:
        """Reject with requeue while retries are left: the broker keeps the message in the queue for
        `min(min_delay_ms × n, max_delay_ms)` and counts it. The last attempt is parked by the client, with
        the reason; a consumer that dies on it leaves the parking to the broker (reason `delivery_limit`)."""
        attempt = self._attempt(properties.headers or {})
        if attempt <= self.contract["max_retries"]:
            self._give_back(channel, method.delivery_tag, requeue=True, reject=True)  # queued, not sent yet
            self.retried += 1
            delay = min(self.contract["min_delay_ms"] * attempt, self.contract["max_delay_ms"])
            LOG.info("reject %s: attempt %d/%d failed, broker retries after %s (%.200s)", properties.message_id,
                     attempt, self.contract["max_retries"], format_duration(delay), reason)
            return
        exchange, routing_key, _ = self._origin(method, properties.headers or {})
        self._park(channel, method, properties, body, reason, attempts=attempt, exchange=exchange,
                   routing_key=routing_key, first_failure_at=None)

    def retry_route(self, attempt: int) -> tuple[str, str, int]:
        """(exchange, routing key, wait in ms) of the copy that retries `attempt`, as the contract's strategy
        routes it: the attempt's tier, or the delay levels holding it for the attempt's back-off."""
        return self.behaviour.retry_route(self.contract, attempt)

    def _fail_republish(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                        body: bytes, reason: _Reason) -> None:
        """Publish a copy that retries later (`retry_route`), counted in `attempt_header`; park it after
        `max_retries`."""
        headers = properties.headers or {}
        attempt_header = self.contract["attempt_header"]
        attempt = self._attempt(headers)
        exchange, routing_key, _ = self._origin(method, headers)
        # The first failure records where the message came from: later deliveries come from Q.requeue (tiers)
        # or rabbitmq-retry.delay.deliver (levels).
        fresh = attempt == 1 or h.FIRST_FAILURE_AT not in headers
        origin = {h.ORIGINAL_EXCHANGE: exchange, h.ORIGINAL_ROUTING_KEY: routing_key,
                  h.FIRST_FAILURE_AT: h.utc_iso() if fresh else h.text(headers[h.FIRST_FAILURE_AT])}
        if attempt > self.contract["max_retries"]:
            self._park(channel, method, properties, body, reason, attempts=attempt, exchange=exchange,
                       routing_key=routing_key, first_failure_at=origin[h.FIRST_FAILURE_AT])
            return
        retry_exchange, retry_key, wait_ms = self.retry_route(attempt)
        copy_headers = {**h.without_broker_headers(headers), **origin, attempt_header: attempt}

        def retried() -> None:
            self.retried += 1
            LOG.info("retry %s: attempt %d/%d failed, next in %s via %s (%.200s)", properties.message_id,
                     attempt, self.contract["max_retries"], format_duration(wait_ms), retry_key, reason)

        self._publish_then_ack(channel, method, retry_exchange, retry_key, body,
                               h.copy_properties(properties, copy_headers), retried)

    def _park(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes,
              reason: _Reason | str, *, attempts: int, exchange: str, routing_key: str, first_failure_at: str | None,
              permanent: bool = False) -> None:
        """Publish the parking copy (then ack). `first_failure_at` None (strategy native): the copy carries
        `last-failure-at`, now, instead: a native retry is the same message redelivered unchanged, so no time
        recorded at the first failure can reach the last one."""
        # The attempt counter is left out so that a parked message replayed to its exchange gets a full budget.
        headers = h.without_broker_headers(properties.headers)
        headers.pop(self.contract["attempt_header"], None)
        headers.update({
            h.ERROR_REASON: str(reason), h.ERROR_QUEUE: self.queue, h.ORIGINAL_EXCHANGE: exchange,
            h.ORIGINAL_ROUTING_KEY: routing_key, h.ATTEMPTS: attempts,
        })
        if first_failure_at is None:
            headers[h.LAST_FAILURE_AT] = h.utc_iso()
        else:
            headers[h.FIRST_FAILURE_AT] = first_failure_at
        if permanent:
            headers[h.PERMANENT] = True

        def parked() -> None:
            self.parked += 1
            self.permanent += 1 if permanent else 0
            LOG.info("park %s after %d attempts%s in %s (%.200s)", properties.message_id, attempts,
                     " (permanent failure)" if permanent else "", self.contract["error_queue"], reason)

        self._publish_then_ack(channel, method, self.contract["error_exchange"], routing_key, body,
                               h.copy_properties(properties, headers), parked)

    def _publish_then_ack(self, channel: BlockingChannel, method: Basic.Deliver, exchange: str,
                          routing_key: str, body: bytes, properties: BasicProperties,
                          confirmed: Callable[[], None]) -> None:
        """Publish the copy and settle the original once the broker answered for it: ack it (then count,
        `confirmed()`) after the confirm; nack it back to the queue after a nack, a return (unroutable) or the
        confirm channel closing. A crash in between duplicates, never loses. Returns without waiting for the
        confirm unless `max_in_flight` copies are unanswered."""

        def answer(error: BaseException | None) -> None:
            if not channel.is_open:
                return  # the broker put the original back in the queue with its channel
            # Not sent yet: `_settle` sends a batch of answers with one I/O pass, the acks of a run of originals
            # as one multiple ack (`_ack`).
            if error is None:
                self._ack(channel, method.delivery_tag)
                confirmed()
                return
            self._give_back(channel, method.delivery_tag, requeue=True)
            self.requeued += 1
            LOG.error("could not publish %s to %r (%s: %s); original requeued", properties.message_id, exchange,
                      type(error).__name__, error)

        self._confirming().publish(exchange, routing_key, body, properties, answer)
        self._settle()
        while self.in_flight() >= self.max_in_flight:
            self._await_answers()
