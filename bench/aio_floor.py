"""The asyncio consumer against a bare aio-pika loop on the same topology (bench/floor.py's `tiers (republish)`
deployment): `AsyncRetryingConsumer` in republish mode, and the thinnest aio-pika code that does the same retry, a
failed delivery published as it came to the tier on a confirm-mode channel and acked once the broker confirmed the
copy (no library, no contract, no header of its own). Each message fails once, then succeeds; floor.py pairs the two
runs round by round as it pairs the threaded consumer with bare pika.

The bare loop does less than the contract asks of a copy: no attempt and origin headers, and an unroutable copy
(returned) counts as confirmed, so its original is acked and the message lost. `carrying` is the same loop with
what the contract requires: the copy carries the original's properties and the headers ours adds, and a returned
copy raises (the original is nacked back to the queue), as floor.py's `republish + our headers` row does for pika.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, DeliveryMode

from rabbitmq_retry_client.aio import AsyncRetryingConsumer
from rabbitmq_retry_client.headers import (
    FIRST_FAILURE_AT,
    ORIGINAL_EXCHANGE,
    ORIGINAL_ROUTING_KEY,
    utc_iso,
    without_broker_headers,
)

Run = tuple[int, int, float]
"""(deliveries, retries, seconds from the first delivery to the last success)."""


class _FailsOnce:
    """Fails each message id's first delivery; `first` and `last` the monotonic times of its first and latest call."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.calls = 0
        self.first = self.last = 0.0

    def __call__(self, message_id: str) -> bool:
        """True when this delivery fails."""
        self.last = time.monotonic()
        self.first = self.first or self.last
        self.calls += 1
        if message_id in self.seen:
            return False
        self.seen.add(message_id)
        return True


def ours(params: Any, contract: dict[str, Any], count: int, prefetch: int) -> Run:
    """`AsyncRetryingConsumer` (republish mode) until `count` messages succeeded."""
    fails = _FailsOnce()

    async def handle(message: AbstractIncomingMessage) -> None:
        if fails(str(message.message_id)):
            raise RuntimeError("planned failure")

    async def consume() -> int:
        async with AsyncRetryingConsumer(params, contract, handle, "republish", prefetch=prefetch) as consumer:
            await consumer.run(until=lambda: consumer.processed >= count)
            if consumer.processed < count or consumer.parked:
                raise RuntimeError(f"asyncio: {consumer.processed} of {count} processed, {consumer.parked} parked")
            return consumer.retried

    retried = asyncio.run(consume())
    return fails.calls, retried, fails.last - fails.first


def carrying(params: Any, contract: dict[str, Any], count: int, prefetch: int) -> Run:
    """The bare loop whose copy carries what ours must (module docstring)."""
    return bare(params, contract, count, prefetch, carry=True)


def _carried(message: AbstractIncomingMessage) -> aio_pika.Message:
    """The copy as the contract has it: the original's properties, persistent, with the attempt and origin headers."""
    headers = {**without_broker_headers(message.headers), ORIGINAL_EXCHANGE: message.exchange or "",
               ORIGINAL_ROUTING_KEY: message.routing_key or "", FIRST_FAILURE_AT: utc_iso(), "retry-count": 1}
    return aio_pika.Message(
        message.body, headers=headers, content_type=message.content_type, content_encoding=message.content_encoding,
        delivery_mode=DeliveryMode.PERSISTENT, priority=message.priority, correlation_id=message.correlation_id,
        reply_to=message.reply_to, message_id=message.message_id, timestamp=message.timestamp, type=message.type,
        app_id=message.app_id)


def bare(params: Any, contract: dict[str, Any], count: int, prefetch: int,
         connect: Callable[..., Any] = aio_pika.connect, carry: bool = False) -> Run:
    """A bare aio-pika loop: the first delivery of each id is published to the tier as it came (`carry`: as
    `carrying` says), on a confirm-mode channel, and acked after the confirm; the next one is acked."""
    fails = _FailsOnce()

    async def consume() -> int:
        connection = await connect(host=params.host, port=params.port, login=params.credentials.username,
                                   password=params.credentials.password, virtualhost=params.virtual_host)
        async with connection:
            channel = await connection.channel(publisher_confirms=False)
            await channel.set_qos(prefetch_count=prefetch)
            copies = await connection.channel(publisher_confirms=True, on_return_raises=carry)
            exchange = await copies.get_exchange(contract["retry_exchange"], ensure=False)
            routing_key = contract["tiers"][0]["routing_key"]
            done = asyncio.Event()
            acked = retried = 0
            in_flight: set[asyncio.Task[None]] = set()

            async def retry(message: AbstractIncomingMessage) -> None:
                nonlocal retried
                await exchange.publish(_carried(message) if carry else aio_pika.Message(
                    message.body, headers=message.headers, message_id=message.message_id,
                    delivery_mode=message.delivery_mode), routing_key)
                await message.ack()
                retried += 1

            async def delivered(message: AbstractIncomingMessage) -> None:
                nonlocal acked
                if fails(str(message.message_id)):
                    task = asyncio.get_running_loop().create_task(retry(message))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                    return
                await message.ack()
                acked += 1
                if acked >= count:
                    done.set()

            queue = await channel.get_queue(contract["queue"], ensure=False)
            await queue.consume(delivered)
            await asyncio.wait_for(done.wait(), 300)
            # A copy can come back and succeed before its original's ack is sent: closing now would requeue that
            # original, a duplicate for the next run on this queue.
            while in_flight:
                await asyncio.gather(*in_flight)
            return retried

    retried = asyncio.run(consume())
    return fails.calls, retried, fails.last - fails.first
