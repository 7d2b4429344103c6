"""A consumer that follows the retry contract: retry what its handler fails on, park what is out of retries
or failed permanently, and settle every delivery only after the broker confirmed its copy.

What a failed delivery becomes is its retry policy's decision (`policies.py`: reject mode, republish mode and
levels, native; `contract_mode` picks a tiers contract's mode); this module carries it out on a pika connection.

The handler runs in a worker thread (`handler_thread.py`) while this thread keeps the connection serviced
(heartbeats, other channels), so a long handler does not lose the connection; `handler_timeout` bounds it.

Copies (retries, parking) are published without waiting for their confirms (`confirms.py`): the consumer
goes on with the next delivery, and settles each original once the broker answered for its copy (ack after
a confirm, nack with requeue otherwise), with at most `max_in_flight` copies unanswered at a time.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import Basic, BasicProperties

from . import headers as h
from .confirms import Confirms
from .connection import connect, connection_params_of, quiet_pika
from .follower import DEFAULT_PREFETCH, Follower, Run
from .handler_thread import DeadlineExceededError, Handler, HandlerThread, NotRunError
from .policies import Decision, Delivered, PermanentError, Publish, Reason, Reject
from .settlements import Settlements
from .strategies import contract_mode

LOG = logging.getLogger("rabbitmq_retry_client")

__all__ = ["DEFAULT_PREFETCH", "DeadlineExceededError", "Handler", "NotRunError", "PermanentError",
           "RetryingConsumer", "contract_mode"]


Delivery = tuple[Basic.Deliver, BasicProperties, bytes]


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


class RetryingConsumer(Follower[Handler]):
    """Consume the contract's queue, call `handler(body, properties)`, and retry or park what it raises on.

    Its arguments and counters are `Follower`'s. An abandoned handler (`handler_timeout`) runs on in its thread:
    handlers should honour their own deadline.
    """

    def _start(self) -> None:
        self._stopping = threading.Event()
        self._connection: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._confirms: Confirms | None = None
        self._worker: HandlerThread | None = None
        self._settlements: Settlements | None = None
        """The consuming channel's deliveries not settled yet (`settlements.py`)."""
        self._answer_scheduled = False
        """`_settle_in_io` is due once the I/O loop has dispatched what it read."""
        self._to_flush: list[Settlements] = []
        """Those holding acks of originals whose copies were confirmed, until `_settle` sends them."""
        self.max_in_flight = self.prefetch if self.prefetch > 0 else 1000
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
        deliveries from the oldest one unsettled leave as one `basic.ack(multiple=true)` (`settlements.py`), with
        whatever else is queued. `BlockingChannel.basic_ack` would run an I/O pass per ack, which cost more client CPU
        than the rest of a plain delivery."""
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
                for tag, multiple in settlements.flush():
                    settlements.channel._impl.basic_ack(tag, multiple=multiple)

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
        run = Run(max_messages, idle_timeout, until, self._stopping.is_set)
        try:
            while not run.done():
                try:
                    channel = self._connect()
                    for method, properties, body in channel.consume(self.queue, inactivity_timeout=run.poll):
                        self._settle()
                        if method is not None:
                            run.active(self._handle_buffered(channel, (method, properties, body), run.room()))
                        if run.done() or run.idle():
                            break
                    else:
                        # The generator ends when the broker cancels the consumer (queue deleted, leader moved).
                        LOG.warning("consumer on %s cancelled by the broker; consuming again", self.queue)
                        time.sleep(0.5)
                        continue
                    self._settle_all()
                    return run.handled
                except (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelWrongStateError) as error:
                    self._lost(error)
                    run.active()
            self._settle_all()
            return run.handled
        finally:
            if self.in_flight():
                # Leaving on an error with copies unanswered: closing the connection puts their originals
                # back in the queue (a duplicate at worst) and no late confirm can settle them wrongly.
                self._drop()
            self._stop_consuming()

    def _lost(self, error: pika.exceptions.AMQPError) -> None:
        """Forget a lost connection (the loop connects again); raise `error` when not reconnecting, or when only a
        channel closed (a broker's refusal on the consuming channel is not a lost connection)."""
        if not self.reconnect or (self._connection is not None and self._connection.is_open):
            raise error
        LOG.warning("connection lost (%s); reconnecting", error or type(error).__name__)
        self._drop()
        self.reconnects += 1

    def _stop_consuming(self) -> None:
        """Cancel the consumer; prefetched, unhandled messages go back to the queue (not lost)."""
        if self._channel is not None and self._channel.is_open:
            try:
                self._flush_acks()
                self._channel.cancel()
            except pika.exceptions.AMQPError:
                self._drop()

    # one delivery -------------------------------------------------------------------------------------

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
        and timed alone (`room` 1)."""
        if self.handler_timeout is not None:
            room = 1
        if self._worker is None:
            self._worker = HandlerThread(self.handler, self._stopping, self.metrics, self.queue)
        given: collections.deque[Delivery] = collections.deque()
        skipped = 0
        try:
            taken = self._hand_over(channel, first, room, given)
            while given:
                method, properties, body = given.popleft()
                outcome = self._await_outcome(self.handler_timeout)
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

    def _hand_over(self, channel: BlockingChannel, first: Delivery, room: int | None,
                   given: collections.deque[Delivery]) -> int:
        """Give the worker `first` and the deliveries pika holds behind it (up to `room`, none once stopping),
        appending each to `given`, but those parked before their handler; how many were taken."""
        assert self._worker is not None
        taken = 0
        delivery: Delivery | None = first
        while delivery is not None:
            taken += 1
            if self._before_handler(channel, *delivery):
                self._worker.submit(delivery[2], delivery[1])
                given.append(delivery)
            more = (room is None or taken < room) and not self._stopping.is_set()
            delivery = _buffered(channel) if more else None
        return taken

    def _before_handler(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                        body: bytes) -> bool:
        """False when the delivery was parked before its handler (its delivery count reached the limit)."""
        self._settlements_of(channel).delivered(method.delivery_tag)
        parking = self.policy.before_handler(_delivered(method, properties))
        if parking is None:
            return True
        self._carry_out(channel, method, properties, body, parking, Reason(parking.headers[h.ERROR_REASON]))
        return False

    def _after_handler(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                       body: bytes, error: BaseException | None) -> None:
        """Settle a delivery by its handler's outcome: ack it, or retry or park it; one whose handler never ran
        (`NotRunError`: stopping) goes back to the queue."""
        if isinstance(error, NotRunError):
            self._give_back(channel, method.delivery_tag, requeue=True)
            return
        if error is None:
            self._ack(channel, method.delivery_tag)
            self.processed += 1
            return
        reason = Reason(error)
        decision = self.policy.on_failure(_delivered(method, properties), reason,
                                          permanent=isinstance(error, PermanentError))
        self._carry_out(channel, method, properties, body, decision, reason)

    def _carry_out(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes,
                   decision: Decision, reason: Reason) -> None:
        """Settle a delivery as its policy decided: a reject (queued, not sent yet), or a copy published, the
        original acked once the broker confirmed it."""
        if isinstance(decision, Reject):
            self._give_back(channel, method.delivery_tag, requeue=decision.requeue, reject=True)
            self._count(decision, properties.message_id, reason)
            return
        self._publish_then_ack(channel, method, properties, body, decision, reason)

    def _publish_then_ack(self, channel: BlockingChannel, method: Basic.Deliver, properties: BasicProperties,
                          body: bytes, decision: Publish, reason: Reason) -> None:
        """Publish the copy and settle the original once the broker answered for it: ack it (then count it) after
        the confirm; nack it back to the queue after a nack, a return (unroutable) or the confirm channel closing. A
        crash in between duplicates, never loses. Returns without waiting for the confirm unless `max_in_flight`
        copies are unanswered."""

        def answer(error: BaseException | None) -> None:
            if not channel.is_open:
                return  # the broker put the original back in the queue with its channel
            if error is None:
                self._ack(channel, method.delivery_tag)
                self._count(decision, properties.message_id, reason)
                return
            self._give_back(channel, method.delivery_tag, requeue=True)
            self.requeued += 1
            LOG.error("could not publish %s to %r (%s: %s); original requeued", properties.message_id,
                      decision.exchange, type(error).__name__, error)

        copy = h.copy_properties(properties, decision.headers)
        self._confirming().publish(decision.exchange, decision.routing_key, body, copy, answer)
        self._settle()
        while self.in_flight() >= self.max_in_flight:
            self._await_answers()


def _delivered(method: Basic.Deliver, properties: BasicProperties) -> Delivered:
    """What a policy reads of a pika delivery."""
    return Delivered(method.exchange, method.routing_key, properties.headers or {}, properties.message_id)
