"""Publisher confirms without waiting for each one: several copies in flight on one confirm-mode channel, each
answered when the broker's basic.ack, basic.nack or basic.return for it arrives, or when the channel closes.

pika's `BlockingChannel.confirm_delivery()` makes every `basic_publish` wait for its own confirm (one round
trip per copy). Here the underlying channel gets our own callbacks instead (`channel._impl.confirm_delivery`,
pika 1.x). They only record what arrived, in arrival order; `answers()` turns that into outcomes in the
caller's thread, outside pika's I/O loop, so settling an original never re-enters pika.

The broker numbers the publishes of a confirm-mode channel 1, 2, 3…; a basic.ack or basic.nack names one of
them, or with `multiple` every one up to it. A basic.return names none: it carries the message, and comes
before the ack of that message (RabbitMQ sends the return when routing finds no queue, the ack after), so it
is matched to the earliest copy in flight with the same exchange, routing key, message id and body (and the
same headers when one has them). A channel that closes (404 missing exchange, 403 refused) refuses every copy
still in flight: none of them can be confirmed any more.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection, ReturnedMessage
from pika.channel import Channel
from pika.frame import Method
from pika.spec import Basic, BasicProperties

LOG = logging.getLogger("rabbitmq_retry_client")

Answer = Callable[[BaseException | None], None]
"""Called once per copy: None once the broker confirmed it, else why it did not (NackError, UnroutableError,
the channel's closing reason)."""
_Event: TypeAlias = Method | ReturnedMessage | BaseException


@dataclass(eq=False)
class InFlight:
    """A copy published and not answered yet, with what to call once it is."""

    exchange: str
    routing_key: str
    body: bytes
    properties: BasicProperties
    answer: Answer
    returned: ReturnedMessage | None = None


def _nothing() -> None:
    """A timer callback: the timer only wakes pika's I/O loop."""


class Confirms:
    """One confirm-mode channel on which `publish` does not wait: `pending` maps each publish sequence number
    to its copy until `answers()` hands the copy back with its outcome."""

    def __init__(self, channel: BlockingChannel, on_event: Callable[[], None] | None = None) -> None:
        self.channel = channel
        self.pending: dict[int, InFlight] = {}
        """In publish order (dicts keep insertion order): a `multiple` ack covers a prefix."""
        self.on_event = on_event
        """Called, inside pika's I/O pass, after each ack, nack or close is recorded (a return waits for the ack
        that follows it): a caller that waits for something else meanwhile (a consumer waiting for deliveries) can
        settle what arrived without waiting for that (`answers()` there may only queue frames on channels, never
        wait on the connection)."""
        self.answered = 0
        """Copies `answers()` has handed back so far: `wait` returns once it grows, wherever they were taken."""
        self._events: deque[_Event] = deque()
        self._published = 0
        selected: list[Method] = []
        impl = channel._impl
        impl.add_on_return_callback(self._on_return)
        impl.add_on_close_callback(self._on_close)
        impl.confirm_delivery(ack_nack_callback=self._record, callback=selected.append)
        channel._flush_output(lambda: bool(selected))

    def _record(self, event: _Event) -> None:
        self._events.append(event)
        if self.on_event is not None:
            self.on_event()

    @property
    def is_open(self) -> bool:
        return bool(self.channel.is_open)

    def _on_return(self, channel: Channel, method: Basic.Return, properties: BasicProperties, body: bytes) -> None:
        # Not handed on at once: the ack of the returned copy follows, and answers it with the return.
        self._events.append(ReturnedMessage(method, properties, body))

    def _on_close(self, channel: Channel, reason: BaseException) -> None:
        self._record(reason)

    def publish(self, exchange: str, routing_key: str, body: bytes, properties: BasicProperties,
                answer: Answer) -> None:
        """Queue a mandatory copy on the connection and return: the connection's next I/O pass (the consumer's
        next wait for a delivery, an ack, `wait`) sends it, together with whatever else is queued by then; one
        send per copy cost the broker a fifth more CPU per retried delivery. `answer` is called later, from
        `answers()`. A channel that is closed or closes meanwhile refuses the copy (and any in flight)."""
        self._published += 1
        self.pending[self._published] = InFlight(exchange, routing_key, body, properties, answer)
        try:
            self.channel._impl.basic_publish(exchange, routing_key, body, properties, mandatory=True)
        except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ChannelWrongStateError) as error:
            self._events.append(error)

    def wait(self, connection: BlockingConnection, timeout: float) -> None:
        """Process I/O until the broker answers for a copy, the channel closes or `timeout` seconds passed."""
        if self._events or not self.is_open:
            return
        deadline = time.monotonic() + timeout
        answered = self.answered
        timer = connection.call_later(timeout, _nothing)
        try:
            self.channel._flush_output(lambda: bool(self._events) or self.answered != answered
                                       or time.monotonic() >= deadline)
        except pika.exceptions.ChannelClosedByBroker:
            pass  # recorded by _on_close: answers() refuses what was in flight
        finally:
            connection.remove_timeout(timer)

    def answers(self) -> list[tuple[InFlight, BaseException | None]]:
        """The copies answered for since the last call, each with None (confirmed) or why not, in the order
        the broker answered; they leave `pending`. The caller settles them (`InFlight.answer`)."""
        answered: list[tuple[InFlight, BaseException | None]] = []
        while self._events:
            event = self._events.popleft()
            if isinstance(event, ReturnedMessage):
                self._match(event)
            elif isinstance(event, BaseException):
                answered += [(copy, event) for copy in self.pending.values()]
                self.pending.clear()
            else:
                answered += self._confirmed(event.method)
        if self.pending and not self.is_open:  # closed without a reason recorded: nothing can confirm them now
            closed = pika.exceptions.ChannelWrongStateError("the confirm channel closed")
            answered += [(copy, closed) for copy in self.pending.values()]
            self.pending.clear()
        self.answered += len(answered)
        return answered

    def _confirmed(self, method: Basic.Ack | Basic.Nack) -> list[tuple[InFlight, BaseException | None]]:
        tag = method.delivery_tag
        covered = [n for n in self.pending if n <= tag] if method.multiple else [tag] if tag in self.pending else []
        answered: list[tuple[InFlight, BaseException | None]] = []
        for number in covered:
            copy = self.pending.pop(number)
            returned = [copy.returned] if copy.returned is not None else []
            if isinstance(method, Basic.Nack):
                answered.append((copy, pika.exceptions.NackError(returned)))
            elif returned:
                answered.append((copy, pika.exceptions.UnroutableError(returned)))
            else:
                answered.append((copy, None))
        return answered

    def _match(self, returned: ReturnedMessage) -> None:
        """Mark the copy a basic.return is about (see the module docstring). Should none match, every copy in
        flight is marked: their originals are requeued, a duplicate at worst, never a loss."""
        method = returned.method
        unanswered = [c for c in self.pending.values() if c.returned is None]
        headers = returned.properties.headers or {}
        # The first alike, one with the same headers before any other.
        best = min((c for c in unanswered if _alike(c, returned)), default=None,
                   key=lambda c: (c.properties.headers or {}) != headers)
        chosen = unanswered if best is None else [best]
        if best is None:
            LOG.warning("a copy to %r (%s) was returned (%s %s) but matches none in flight; requeueing the "
                        "originals of all %d", method.exchange, method.routing_key, method.reply_code,
                        method.reply_text, len(self.pending))
        for copy in chosen:
            copy.returned = returned


def _alike(copy: InFlight, returned: ReturnedMessage) -> bool:
    """The copy could be the one returned: same exchange, routing key, body and message id."""
    method = returned.method
    return (copy.exchange, copy.routing_key, copy.body, copy.properties.message_id) == (
        method.exchange, method.routing_key, returned.body, returned.properties.message_id)
