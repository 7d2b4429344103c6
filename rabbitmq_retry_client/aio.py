"""An asyncio consumer of the retry contract, on aio-pika: the same retry policies as the threaded
`RetryingConsumer` (`policies.py`), carried out on an asyncio connection.

`AsyncRetryingConsumer(params, contract, handler)` awaits `handler(message)` (an aio-pika `IncomingMessage`: `.body`,
`.headers`, `.message_id`) for each delivery, one at a time in delivery order. Success acks it; a failure becomes its
policy's decision: a reject (the broker retries), or a copy published on a second, confirm-mode channel (a retry that
waits, or parking), the original acked only once the broker confirmed the copy and requeued (nack) when it refused it
(nack, unroutable return, channel closed). Copies are confirmed in background tasks, so the next delivery's handler
does not wait for them; the prefetch bounds how many originals wait for their copies. After a lost connection it
connects again (each host in turn, up to `reconnect_timeout`): the originals it had not settled go back to the queue
with their channel, so a message may be handled twice, never lost.

Install it with `pip install "rabbitmq-retry[aio]"` (aio-pika); docs/client.md shows it in an application.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, DeliveryMode

from .connection import BrokerUnreachableError, CertificateCredentials, ConnectionParams, hosts, where
from .consumer import DEFAULT_PREFETCH
from .handler_thread import DeadlineExceededError
from .management import TlsSettings
from .metrics import NO_METRICS, Metrics
from .policies import Delivered, Follower, PermanentError, Publish, Reason, Reject
from .strategies import Mode

LOG = logging.getLogger("rabbitmq_retry_client")

AsyncHandler = Callable[[AbstractIncomingMessage], Awaitable[None]]
"""`await handler(message)`: returns on success; raises on failure (PermanentError: park at once)."""

_LOST = (aiormq.exceptions.AMQPConnectionError, aiormq.exceptions.ChannelInvalidStateError, ConnectionError,
         asyncio.IncompleteReadError)
"""What a lost connection or channel raises."""


class _LostError(ConnectionError):
    """The consuming connection or channel closed while the consumer waited for a delivery."""


class AsyncRetryingConsumer(Follower):
    """Consume the contract's queue with asyncio, await `handler(message)`, and retry or park what it raises on.

    The counters, `mode`, `prefetch`, `reconnect_timeout`, `publish_failure_pause`, `handler_timeout` and `metrics`
    mean what they mean for `RetryingConsumer`. Certificate login (SASL EXTERNAL) is the threaded consumer's only.
    """

    def __init__(self, connection_params: ConnectionParams, contract: Mapping[str, Any], handler: AsyncHandler,
                 mode: Mode | None = None, prefetch: int = DEFAULT_PREFETCH, *, reconnect: bool = True,
                 reconnect_timeout: float = 60.0, publish_failure_pause: float = 1.0,
                 handler_timeout: float | None = None, tls: TlsSettings | None = None,
                 metrics: Metrics = NO_METRICS) -> None:
        super().__init__(contract, mode, handler_timeout, metrics)
        self.handler = handler
        self.prefetch, self.reconnect, self.reconnect_timeout = prefetch, reconnect, reconnect_timeout
        self.publish_failure_pause = publish_failure_pause
        self._params = hosts(connection_params, self.contract["vhost"], tls)
        if any(isinstance(p.credentials, CertificateCredentials) for p in self._params):
            raise ValueError("the asyncio consumer logs in with a user and password; for a client certificate login "
                             "(SASL EXTERNAL) use RetryingConsumer")
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._copies: AbstractChannel | None = None
        self._deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self._consumer_tag: str | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._pause_owed = False
        self._node: str | None = None

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
        self._copies = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        self._deliveries = asyncio.Queue()
        queue = await self._channel.get_queue(self.queue, ensure=False)
        self._consumer_tag = await queue.consume(self._deliveries.put)

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
        """Copies published whose originals wait for the broker's answer."""
        return len(self._in_flight)

    # loop ---------------------------------------------------------------------------------------------

    async def run(self, max_messages: int | None = None, idle_timeout: float | None = None,
                  until: Callable[[], bool] | None = None) -> int:
        """Handle deliveries until `max_messages` were handled, nothing arrived for `idle_timeout` seconds,
        `until()` is true or `stop()` was called; returns how many were handled. Reconnects after a lost
        connection; raises `BrokerUnreachableError` when the broker stays away longer than `reconnect_timeout`."""
        self._stopping = False
        handled = 0
        poll = 0.2 if idle_timeout is None else max(0.01, min(0.2, idle_timeout))
        last_activity = time.monotonic()

        finished = False

        def done() -> bool:
            """Sticky: `until()` is asked once more only while it said no (it may answer yes only once)."""
            nonlocal finished
            finished = finished or (self._stopping or (max_messages is not None and handled >= max_messages)
                                    or (until is not None and until()))
            return finished

        try:
            while not done():
                try:
                    if self._connection is None or self._connection.is_closed:
                        await self._connect()
                    while not done():
                        if idle_timeout is not None and time.monotonic() - last_activity >= idle_timeout:
                            return handled
                        message = await self._next(poll)
                        if message is not None:
                            handled += await self._handle(message)
                            last_activity = time.monotonic()
                except (*_LOST, _LostError) as error:
                    if not self.reconnect:
                        raise
                    LOG.warning("connection lost (%s); reconnecting", error or type(error).__name__)
                    await self._drop()
                    self.reconnects += 1
                    last_activity = time.monotonic()
            return handled
        finally:
            await self._settle_all()
            await self._stop_consuming()

    async def _next(self, poll: float) -> AbstractIncomingMessage | None:
        """The next delivery, or None after `poll` seconds; raises `_LostError` once the connection or channel
        closed."""
        if self._pause_owed and self.publish_failure_pause > 0:
            self._pause_owed = False
            await asyncio.sleep(self.publish_failure_pause)
        try:
            return await asyncio.wait_for(self._deliveries.get(), poll)
        except TimeoutError:
            if self._connection is None or self._connection.is_closed or self._channel is None \
                    or self._channel.is_closed:
                raise _LostError("the connection or its channel closed") from None
            return None

    async def _settle_all(self) -> None:
        """Wait until every copy in flight is answered and its original settled."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _stop_consuming(self) -> None:
        """Cancel the consumer; the prefetched, unhandled deliveries go back to the queue."""
        channel, tag = self._channel, self._consumer_tag
        if channel is None or channel.is_closed or tag is None:
            return
        try:
            underlay = await channel.get_underlay_channel()
            await underlay.basic_cancel(tag)
            self._consumer_tag = None
            while not self._deliveries.empty():
                await self._deliveries.get_nowait().nack(requeue=True)
        except (*_LOST, TimeoutError):
            await self._drop()

    # one delivery -------------------------------------------------------------------------------------

    async def _handle(self, message: AbstractIncomingMessage) -> int:
        """Run the handler of one delivery and settle it by its outcome; 1 (handled)."""
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
            await message.ack()
            self.processed += 1
            return 1
        reason = Reason(error)
        decision = self.policy.on_failure(_delivered(message), reason, permanent=isinstance(error, PermanentError))
        if isinstance(decision, Reject):
            await message.reject(requeue=decision.requeue)
            self._count(decision, message.message_id, reason)
        else:
            self._carry_out(message, decision, reason)
        return 1

    def _carry_out(self, message: AbstractIncomingMessage, decision: Publish, reason: Reason) -> None:
        """Publish the copy in a background task; ack the original once the broker confirmed it."""
        task = asyncio.get_running_loop().create_task(self._publish_then_ack(message, decision, reason))
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
                await message.nack(requeue=True)
                self.requeued += 1
                LOG.error("could not publish %s to %r (%s: %s); original requeued", message.message_id,
                          decision.exchange, type(error).__name__, error)
            return
        with contextlib.suppress(*_LOST):
            await message.ack()
            self._count(decision, message.message_id, reason)


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
