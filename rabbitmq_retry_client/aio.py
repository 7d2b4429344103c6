"""An asyncio consumer of the retry contract, on aio-pika: the same retry policies as the threaded
`RetryingConsumer` (`policies.py`), carried out on an asyncio connection.

`AsyncRetryingConsumer(params, contract, handler)` awaits `handler(message)` (an aio-pika `IncomingMessage`: `.body`,
`.headers`, `.message_id`) for each delivery, one at a time in delivery order. Success acks it; a failure becomes its
policy's decision: a reject (the broker retries), or a copy published on a second, confirm-mode channel (a retry that
waits, or parking), the original acked only once the broker confirmed the copy and requeued (nack) when it refused it
(nack, unroutable return, channel closed). Copies are confirmed in background tasks, so the next delivery's handler
does not wait for them; the prefetch bounds how many originals wait for their copies. Acks leave once the loop
yields, those asked for meanwhile together (a run from the oldest unsettled delivery as one multiple ack,
`settlements.py`, as the threaded consumer sends them): an awaited ack per delivery cost a socket write and a
pass of the event loop each (bench/README.md). After a lost connection it connects again (each host in
turn, up to `reconnect_timeout`): the originals it had not settled go back to the queue with their channel, so a
message may be handled twice, never lost.

Install it with `pip install "rabbitmq-retry[aio]"` (aio-pika); docs/contract.md ("The asyncio consumer") shows it
in an application.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aio_pika
import aiormq
from aio_pika import IncomingMessage
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, DeliveryMode
from aiormq.abc import DeliveredMessage

from .connection import BrokerUnreachableError, CertificateCredentials, where
from .follower import Follower, Run
from .handler_thread import DeadlineExceededError
from .policies import Delivered, PermanentError, Publish, Reason, Reject
from .settlements import Settlements

LOG = logging.getLogger("rabbitmq_retry_client")

AsyncHandler = Callable[[AbstractIncomingMessage], Awaitable[None]]
"""`await handler(message)`: returns on success; raises on failure (PermanentError: park at once)."""

_LOST = (aiormq.exceptions.AMQPConnectionError, aiormq.exceptions.ChannelInvalidStateError, ConnectionError,
         asyncio.IncompleteReadError)
"""What a lost connection or channel raises."""


class _LostError(ConnectionError):
    """The consuming connection or channel closed while the consumer waited for a delivery."""


class AsyncRetryingConsumer(Follower[AsyncHandler]):
    """Consume the contract's queue with asyncio, await `handler(message)`, and retry or park what it raises on.

    Its arguments and counters are `Follower`'s, as `RetryingConsumer`'s. Certificate login (SASL EXTERNAL) is the
    threaded consumer's only.
    """

    def _start(self) -> None:
        if any(isinstance(p.credentials, CertificateCredentials) for p in self._params):
            raise ValueError("the asyncio consumer logs in with a user and password; for a client certificate login "
                             "(SASL EXTERNAL) use RetryingConsumer")
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._copies: AbstractChannel | None = None
        self._deliveries: collections.deque[AbstractIncomingMessage] = collections.deque()
        """Deliveries received, not handled yet (at most `prefetch`)."""
        self._arrival: asyncio.Future[None] | None = None
        """What `_next` waits on while `_deliveries` is empty; the next delivery (or the poll timer) resolves it."""
        self._consumer_tag: str | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._node: str | None = None
        self._settlements = Settlements(None)
        """The consuming channel's deliveries not settled yet (`settlements.py`; its channel is aiormq's)."""
        self._acks_due = False
        """`_send_acks` is scheduled: it runs once this task yields."""

    # connection ---------------------------------------------------------------------------------------

    async def _connect_once(self) -> AbstractConnection:
        """A connection to the first host that accepts one."""
        error: BaseException | None = None
        for params in self._params:
            ssl = params.ssl_options
            try:
                connection = await aio_pika.connect(
                    host=params.host, port=params.port, login=params.credentials.username,
                    password=params.credentials.password, virtualhost=params.virtual_host, ssl=ssl is not None,
                    ssl_context=ssl.context if ssl is not None else None, timeout=10)
                self._node = f"{params.host}:{params.port}"
                return connection
            except (*_LOST, OSError, TimeoutError) as failed:
                error = failed
        raise BrokerUnreachableError(f"broker unreachable at {where(self._params)}: {error}")

    async def _connect(self) -> None:
        """Connect, open the consuming channel and the confirm channel, and start consuming; waits up to
        `reconnect_timeout` for the broker, then raises BrokerUnreachableError."""
        deadline = time.monotonic() + (self.reconnect_timeout if self.reconnect else 0.0)
        while True:
            try:
                self._connection = await self._connect_once()
                break
            except BrokerUnreachableError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(1.0)
        self._channel = await self._connection.channel(publisher_confirms=False)
        await self._channel.set_qos(prefetch_count=self.prefetch)
        consuming = await self._channel.get_underlay_channel()
        self._settlements = Settlements(consuming)
        self._copies = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        self._deliveries.clear()
        # aiormq's own consume: aio-pika's would run each delivery in one more task before it reached `_arrived`.
        self._consumer_tag = (await consuming.basic_consume(self.queue, self._arrived)).consumer_tag

    async def _arrived(self, delivered: DeliveredMessage) -> None:
        """Queue a delivery for `run`, waking it when it waits."""
        self._deliveries.append(IncomingMessage(delivered))
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(None)

    async def _drop(self) -> None:
        """Forget a broken connection; its unsettled deliveries go back to the queue with it."""
        connection, self._connection, self._channel, self._copies = self._connection, None, None, None
        for task in list(self._in_flight):
            task.cancel()
        self._in_flight.clear()
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(*_LOST, TimeoutError):
                await connection.close()

    async def close(self) -> None:
        await self._drop()

    async def __aenter__(self) -> AsyncRetryingConsumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def stop(self) -> None:
        """Ask `run` to return: the delivery being handled is finished and settled first, every copy in flight
        answered; prefetched ones not yet handled go back to the queue."""
        self._stopping = True

    @property
    def connected_to(self) -> str | None:
        """"host:port" of the node the consumer is connected to now (None when it is not connected)."""
        connection = self._connection
        if connection is None or connection.is_closed:
            return None
        return self._node

    def in_flight(self) -> int:
        """Originals not settled yet in the background: their copies wait for the broker's answer (and one task
        for the acks not sent yet)."""
        return len(self._in_flight)

    # loop ---------------------------------------------------------------------------------------------

    async def run(self, max_messages: int | None = None, idle_timeout: float | None = None,
                  until: Callable[[], bool] | None = None) -> int:
        """Handle deliveries until `max_messages` were handled, nothing arrived for `idle_timeout` seconds,
        `until()` is true or `stop()` was called; returns how many were handled. Reconnects after a lost
        connection; raises `BrokerUnreachableError` when the broker stays away longer than `reconnect_timeout`."""
        self._stopping = False
        run = Run(max_messages, idle_timeout, until, lambda: self._stopping)
        try:
            while not run.done():
                try:
                    if self._connection is None or self._connection.is_closed:
                        await self._connect()
                    while not run.done() and not run.idle():
                        message = await self._next(run.poll)
                        if message is not None:
                            run.active(await self._handle(message))
                    if run.idle():
                        return run.handled
                except (*_LOST, _LostError) as error:
                    await self._lost(error)
                    run.active()
            return run.handled
        finally:
            await self._settle_all()
            await self._stop_consuming()

    async def _lost(self, error: BaseException) -> None:
        """Forget a lost connection (the loop connects again), or raise `error` when not reconnecting."""
        if not self.reconnect:
            raise error
        LOG.warning("connection lost (%s); reconnecting", error or type(error).__name__)
        await self._drop()
        self.reconnects += 1

    async def _next(self, poll: float) -> AbstractIncomingMessage | None:
        """The next delivery, or None after `poll` seconds; raises `_LostError` once the connection or channel
        closed."""
        if self._pause_owed and self.publish_failure_pause > 0:
            self._pause_owed = False
            await asyncio.sleep(self.publish_failure_pause)
        if not self._deliveries:
            loop = asyncio.get_running_loop()
            self._arrival = arrival = loop.create_future()
            timer = loop.call_later(poll, _resolve, arrival)
            try:
                await arrival
            finally:
                timer.cancel()
                self._arrival = None
        if self._deliveries:
            return self._deliveries.popleft()
        if self._connection is None or self._connection.is_closed or self._channel is None or self._channel.is_closed:
            raise _LostError("the connection or its channel closed")
        return None

    async def _settle_all(self) -> None:
        """Wait until every copy in flight is answered and its original settled."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        await self._send_acks()

    async def _stop_consuming(self) -> None:
        """Cancel the consumer; the prefetched, unhandled deliveries go back to the queue."""
        channel, tag = self._channel, self._consumer_tag
        if channel is None or channel.is_closed or tag is None:
            return
        try:
            underlay = await channel.get_underlay_channel()
            await underlay.basic_cancel(tag)
            self._consumer_tag = None
            while self._deliveries:
                await self._deliveries.popleft().nack(requeue=True)
        except (*_LOST, TimeoutError):
            await self._drop()

    # one delivery -------------------------------------------------------------------------------------

    async def _handle(self, message: AbstractIncomingMessage) -> int:
        """Run the handler of one delivery and settle it by its outcome; 1 (handled)."""
        self._settlements.delivered(message.delivery_tag or 0)
        parking = self.policy.before_handler(_delivered(message))
        if parking is not None:
            self._carry_out(message, parking, Reason(str(parking.headers["error-reason"])))
            return 1
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            await asyncio.wait_for(self.handler(message), self.handler_timeout)
        except TimeoutError:
            self.timed_out += 1
            error = DeadlineExceededError(f"handler still running after its deadline of {self.handler_timeout:g} s")
        except Exception as failed:  # any failure of the handler is a failed attempt
            error = failed
        self.metrics.handled(self.queue, time.perf_counter() - started, error is not None)
        if error is None:
            self._ack_later(message)
            self.processed += 1
            return 1
        reason = Reason(error)
        decision = self.policy.on_failure(_delivered(message), reason, permanent=isinstance(error, PermanentError))
        if isinstance(decision, Reject):
            await self._give_back(message, requeue=decision.requeue, reject=True)
            self._count(decision, message.message_id, reason)
        else:
            self._carry_out(message, decision, reason)
        return 1

    def _carry_out(self, message: AbstractIncomingMessage, decision: Publish, reason: Reason) -> None:
        """Publish the copy in a background task; ack the original once the broker confirmed it."""
        self._in_background(self._publish_then_ack(message, decision, reason))

    def _in_background(self, settling: Coroutine[Any, Any, None]) -> None:
        """Run `settling` in a task that `_settle_all` waits for and `_drop` cancels."""
        task = asyncio.get_running_loop().create_task(settling)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _publish_then_ack(self, message: AbstractIncomingMessage, decision: Publish, reason: Reason) -> None:
        """Ack the original after the copy's confirm; nack it back to the queue after a nack, a return (unroutable)
        or the confirm channel closing. A crash in between duplicates, never loses."""
        copies = self._copies
        try:
            if copies is None or copies.is_closed:
                raise aiormq.exceptions.ChannelInvalidStateError("the confirm channel is closed")
            exchange = await copies.get_exchange(decision.exchange, ensure=False)
            await exchange.publish(_copy(message, decision.headers), decision.routing_key, mandatory=True)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # nack, return, closed channel: the original goes back to the queue
            self._pause_owed = True
            if self._copies is copies and copies is not None and copies.is_closed and self._connection is not None \
                    and not self._connection.is_closed:
                self._copies = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
            with contextlib.suppress(*_LOST):
                await self._give_back(message, requeue=True)
                self.requeued += 1
                LOG.error("could not publish %s to %r (%s: %s); original requeued", message.message_id,
                          decision.exchange, type(error).__name__, error)
            return
        self._ack_later(message)
        self._count(decision, message.message_id, reason)

    def _ack_later(self, message: AbstractIncomingMessage) -> None:
        """Ack `message` with the acks asked for beside it, once this task yields (`_send_acks`): the deliveries
        handled between two waits, and the originals of a batch of confirms, leave as one frame where they can. An
        original of a lost channel is not acked: the broker put it back in the queue."""
        try:
            if message.channel is not self._settlements.channel:
                return
        except aiormq.exceptions.ChannelInvalidStateError:  # closed
            return
        self._settlements.ack_later(message.delivery_tag or 0)
        if not self._acks_due:
            self._acks_due = True
            self._in_background(self._send_acks())

    async def _send_acks(self) -> None:
        """Send the acks asked for since the last time: a run from the oldest unsettled delivery as one
        `basic.ack(multiple=true)`, the others one each (`Settlements.flush`)."""
        self._acks_due = False
        channel, acks = self._settlements.channel, self._settlements.flush()
        if channel is None or channel.is_closed:
            return
        with contextlib.suppress(*_LOST):
            for number, (tag, multiple) in enumerate(acks, start=1):
                # Only the last waits until it is written: frames leave in order, so a close after it (stop, then
                # close) cannot drop acks still queued in aiormq, whose deliveries would come again.
                await channel.basic_ack(tag, multiple=multiple, wait=number == len(acks))

    async def _give_back(self, message: AbstractIncomingMessage, *, requeue: bool, reject: bool = False) -> None:
        """Reject or nack a delivery; it counts as settled only once its frame is queued, so that no multiple ack
        sent meanwhile covers it."""
        if reject:
            await message.reject(requeue=requeue)
        else:
            await message.nack(requeue=requeue)
        self._settlements.settled(message.delivery_tag or 0)


def _resolve(arrival: asyncio.Future[None]) -> None:
    """Wake a `_next` that waited its poll interval."""
    if not arrival.done():
        arrival.set_result(None)


def _delivered(message: AbstractIncomingMessage) -> Delivered:
    """What a policy reads of an aio-pika delivery."""
    return Delivered(message.exchange or "", message.routing_key or "", message.headers or {}, message.message_id)


def _copy(message: AbstractIncomingMessage, headers: dict[str, Any]) -> aio_pika.Message:
    """The original's body and properties for a copy, persistent, without `expiration` and `user_id` (as
    `headers.copy_properties`: a TTL would shorten a wait or discard a parked message; the broker refuses another
    user's id)."""
    return aio_pika.Message(
        message.body, headers=headers, content_type=message.content_type, content_encoding=message.content_encoding,
        delivery_mode=DeliveryMode.PERSISTENT, priority=message.priority, correlation_id=message.correlation_id,
        reply_to=message.reply_to, message_id=message.message_id, timestamp=message.timestamp, type=message.type,
        app_id=message.app_id)
