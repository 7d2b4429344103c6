"""Driving rabbitmq_retry_client against a deployed topology: a config for a retryable queue, a
handler that fails on plan and records every delivery, and consumers run in threads. Shared by
tests/broker/test_retry_behaviour.py and bench/retry_timing.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import pika
from pika.spec import BasicProperties

from rabbitmq_retry_client import Handler, RetryingConsumer
from rabbitmq_retry_client.aio import AsyncRetryingConsumer
from rabbitmq_retry_client.confirms import Confirms
from rabbitmq_retry_client.publisher import message_properties
from tests.support.amqp import parameters
from tests.support.mirror import Broker, call, esc, get


def retryable_queue(name: str, queue_type: str, delays: list[str], max_retries: int, exchange: str = "in",
                    routing_key: str = "") -> dict[str, Any]:
    """The config of one retryable queue bound to `exchange`."""
    binding: dict[str, Any] = {"exchange": exchange}
    if routing_key:
        binding["routing_key"] = routing_key
    return {"name": name, "type": queue_type, "bindings": [binding],
            "retry": {"delays": delays, "max_retries": max_retries}}


@dataclass(frozen=True)
class Delivery:
    """One call of the handler: when (monotonic for gaps, UTC for the broker's timestamps) and the headers."""

    monotonic: float
    at: datetime
    headers: dict[str, Any]


class Recorder:
    """A handler that fails a planned number of times per message (`failures(message_id)`) and records
    every delivery; thread-safe, so several consumers can share it."""

    def __init__(self, failures: Callable[[str], int]) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.deliveries: dict[str, list[Delivery]] = defaultdict(list)
        self.succeeded: list[str] = []

    def __call__(self, body: bytes, properties: BasicProperties) -> None:
        message_id = str(properties.message_id)
        with self.lock:
            self.deliveries[message_id].append(Delivery(time.monotonic(), datetime.now(UTC),
                                                        dict(properties.headers or {})))
            attempt = len(self.deliveries[message_id])
        if attempt <= self.failures(message_id):
            raise RuntimeError(f"planned failure {attempt} of {message_id}")
        with self.lock:
            self.succeeded.append(message_id)

    def gaps_ms(self, message_id: str) -> list[float]:
        """Milliseconds between consecutive deliveries of one message."""
        times = [d.monotonic for d in self.deliveries[message_id]]
        return [(b - a) * 1000 for a, b in pairwise(times)]


PUBLISH_WINDOW = 500
"""publish_ids: messages published and not yet confirmed at most; one confirm at a time took the benchmark's
P2 longer to publish its messages than to consume them."""


def publish_ids(broker: Broker, vhost: str, exchange: str, ids: Iterable[str], routing_key: str = "",
                content_type: str | None = None, timeout: float = 60.0) -> None:
    """One mandatory, persistent message per id, in order: body and message_id are the id, header app=test.
    Up to PUBLISH_WINDOW at a time await their confirms (rabbitmq_retry_client's `Confirms`); returns once the
    broker confirmed every one, and raises why the first it did not confirm was refused (NackError,
    UnroutableError, the channel's closing reason), or TimeoutError when a window is not confirmed in `timeout` s."""
    refusals: list[BaseException] = []

    def answer(error: BaseException | None) -> None:
        if error is not None:
            refusals.append(error)

    with pika.BlockingConnection(parameters(broker, vhost)) as connection:
        confirms = Confirms(connection.channel())

        def settle(window: int) -> None:
            deadline = time.monotonic() + timeout
            while len(confirms.pending) > window and not refusals:
                if (left := deadline - time.monotonic()) <= 0:
                    raise TimeoutError(f"{len(confirms.pending)} messages unconfirmed after {timeout:g} s")
                confirms.wait(connection, left)
                for copy, error in confirms.answers():
                    copy.answer(error)

        for message_id in ids:
            confirms.publish(exchange, routing_key, message_id.encode(),
                             message_properties(message_id, {"app": "test"}, content_type), answer)
            settle(PUBLISH_WINDOW - 1)
            if refusals:
                break
        settle(0)
    if refusals:
        raise refusals[0]


CONSUMER_KINDS = ("threaded", "asyncio")
"""The behaviour suite runs each consumer: `RetryingConsumer`, and `AsyncRetryingConsumer` through `AsyncInThread`."""


class AsyncInThread:
    """An `AsyncRetryingConsumer` driven as a `RetryingConsumer` is (`run`, `close`, the counters), on an event loop
    of its own, so that the same tests and `run_consumers` drive both; `handler(body, properties)` is called with
    the aio-pika message as its properties (`message_id`, `headers`)."""

    def __init__(self, params: Any, contract: Any, handler: Handler, *args: Any, **kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.handler = handler
        """Called for each delivery; a test may replace it, as a RetryingConsumer's."""

        async def handle(message: Any) -> None:
            self.handler(message.body, message)

        self.consumer = AsyncRetryingConsumer(params, contract, handle, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)

    def run(self, max_messages: int | None = None, idle_timeout: float | None = None,
            until: Callable[[], bool] | None = None) -> int:
        return self.loop.run_until_complete(self.consumer.run(max_messages, idle_timeout, until))

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.close())


def consumer_of(kind: str, params: Any, contract: Any, handler: Handler, *args: Any,
                **kwargs: Any) -> RetryingConsumer:
    """A consumer of `kind` (CONSUMER_KINDS) with `RetryingConsumer`'s arguments."""
    if kind == "threaded":
        return RetryingConsumer(params, contract, handler, *args, **kwargs)
    return AsyncInThread(params, contract, handler, *args, **kwargs)  # type: ignore[return-value]


def fail_every_attempt(broker: Broker, vhost: str, contract: dict[str, Any], ids: list[str], exchange: str,
                       routing_key: str, idle_s: float = 1.0, kind: str = "threaded") -> Recorder:
    """Publish `ids`, let one RetryingConsumer fail every delivery until it has parked them all, then keep
    consuming for `idle_s` (nothing else may come back); the recorder of every delivery."""
    recorder = Recorder(lambda _: 10**6)
    consumer = consumer_of(kind, parameters(broker, vhost), contract, recorder)
    publish_ids(broker, vhost, exchange, ids, routing_key=routing_key)
    run_consumers([consumer], lambda: consumer.parked >= len(ids), timeout=60)
    consumer.run(idle_timeout=idle_s)
    consumer.close()
    return recorder


def run_consumers(consumers: list[RetryingConsumer], until: Callable[[], bool], timeout: float) -> None:
    """Run every consumer in its own thread (own connection) until `until()` or the timeout (a generous
    bound for an eventual condition: the caller asserts the outcome); re-raise the first consumer error."""
    deadline = time.monotonic() + timeout
    errors: list[BaseException] = []

    def stop() -> bool:
        return bool(errors) or until() or time.monotonic() > deadline

    def work(consumer: RetryingConsumer) -> None:
        try:
            consumer.run(until=stop)
        except BaseException as error:  # reported in the caller's thread below
            errors.append(error)
        finally:
            consumer.close()

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 60)
    if errors:
        raise errors[0]


OVERRIDE = "override-wait-ttl"
"""A policy of higher priority than the stack's on one wait tier, without `message-ttl`: the override that strands
what enters the tier meanwhile (docs/alerts.md, not_draining)."""


def strand_in_tier(broker: Broker, vhost: str, contract: dict[str, Any], ids: list[str], tier: int = 0) -> str:
    """Retry copies of `ids` (attempt header 1) stuck in the contract's tier `tier`: published to its retry exchange
    while a policy overrode the tier's TTL, the override then removed and the stack's policy back, so they hold no
    TTL. Returns the tier's queue, once its own policy applies again."""
    wait = contract["tiers"][tier]
    path = f"queues/{esc(vhost)}/{esc(wait['queue'])}"
    _until(lambda: bool(get(broker, path).get("policy")), f"the stack's policy applies to {wait['queue']}")
    ours = get(broker, path)["policy"]
    call(broker, "PUT", f"policies/{esc(vhost)}/{OVERRIDE}",
         {"pattern": f"^{wait['queue'].replace('.', '[.]')}$", "definition": {"max-length": 1_000_000},
          "priority": 10_000, "apply-to": "queues"})
    _until(lambda: get(broker, path).get("policy") == OVERRIDE, f"{OVERRIDE} applies to {wait['queue']}")
    with pika.BlockingConnection(parameters(broker, vhost)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for message_id in ids:
            channel.basic_publish(contract["retry_exchange"], wait["routing_key"], message_id.encode(),
                                  message_properties(message_id, {"app": "test", contract["attempt_header"]: 1}),
                                  mandatory=True)
    call(broker, "DELETE", f"policies/{esc(vhost)}/{OVERRIDE}")
    _until(lambda: get(broker, path).get("policy") == ours, f"{ours} applies to {wait['queue']} again")
    return str(wait["queue"])


def _until(done: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)
