"""P1, delay accuracy: how late a delayed message arrives, per strategy and delay, with every message in flight.

Lateness = arrival at the consumer − (time just before the publish, or before the rejection for native
+ the intended delay), on one monotonic clock in this process. "Early" = lateness below −EARLY_MS (the broker
stamps expiry in whole milliseconds). The consumer of the destination queue only records the time and acks,
so the figure is the broker's delay path plus the AMQP round trip, not a handler.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote

import kombu
import pika
from kombu.transport.native_delayed_delivery import (
    bind_queue_to_native_delayed_delivery_exchange,
    declare_native_delayed_delivery_exchanges_and_queues,
)
from pika.adapters.blocking_connection import BlockingChannel

from bench.strategies import (
    ANCHOR_DELAY_QUEUE,
    EXCHANGE,
    KOMBU,
    NATIVE,
    QUEUE,
    SEED_003,
    Strategy,
    anchor_arguments,
    refused,
    route,
    vhost_config,
)
from components.model import wire
from tests.support.amqp import channel, parameters
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import Broker

EARLY_MS = 1.0
SLACK_S = 60.0
"""How long after the last intended arrival the run gives up (a bound for an eventual condition, not a figure)."""


@dataclass(frozen=True)
class Delays:
    """What P1 sends: `messages` in flight; tiers, levels and seed-003 give each message one of `delays_ms`
    (shuffled, equal shares); native runs `native_retries` attempts of min `native_ms[0]`, max `native_ms[1]`."""

    messages: int
    delays_ms: tuple[int, ...]
    native_ms: tuple[int, int]
    native_retries: int
    unit_ms: int

    def native_delays(self) -> list[int]:
        low, high = self.native_ms
        return [min(n * low, high) for n in range(1, self.native_retries + 1)]


FULL = Delays(1000, (1000, 2000, 3000, 5000), (1000, 5000), 5, 1000)
"""`levels` at its default unit, 1 s (kombu's too): every delay here is whole seconds. Up to 5 s: a run lasts about
its longest delay (11 s with the 10 s of the runs before 2026-11-27's third session, 6 s now), and P1 runs about 25
times per broker (three rounds, the peers, the cluster)."""
QUICK = Delays(200, (200, 500, 1000), (100, 500), 5, 20)
"""A smoke run: the peers get its 1 s only."""


@dataclass(frozen=True)
class Stat:
    """Lateness of the messages of one (strategy, delay), in ms."""

    strategy: str
    delay_ms: int
    lateness_ms: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.lateness_ms)

    def percentile(self, p: float) -> float:
        """Nearest-rank percentile."""
        ordered = sorted(self.lateness_ms)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    @property
    def early(self) -> int:
        return sum(1 for x in self.lateness_ms if x < -EARLY_MS)

    @property
    def target_ms(self) -> float:
        """The issue's bound for our strategies: p99 ≤ max(5 % of the delay, 100 ms)."""
        return max(0.05 * self.delay_ms, 100.0)


@dataclass(frozen=True)
class Outcome:
    strategy: Strategy
    queue_type: str
    stats: tuple[Stat, ...] = ()
    skipped: str = ""
    seconds: float = 0.0


def stats_of(strategy: str, samples: Sequence[tuple[int, float]]) -> tuple[Stat, ...]:
    by_delay: dict[int, list[float]] = {}
    for delay, lateness in samples:
        by_delay.setdefault(delay, []).append(lateness)
    return tuple(Stat(strategy, d, tuple(v)) for d, v in sorted(by_delay.items()))


class _Arrivals:
    """A consumer thread on its own connection: `on_delivery(channel, method, properties, now)` per message,
    until `done()` or `deadline()`."""

    def __init__(self, broker: Broker, vhost: str, queue: str, prefetch: int,
                 on_delivery: Callable[[BlockingChannel, pika.spec.Basic.Deliver, pika.BasicProperties, float], None],
                 done: Callable[[], bool], deadline: Callable[[], float]) -> None:
        self.errors: list[BaseException] = []
        self._ready = threading.Event()

        def work() -> None:
            try:
                with pika.BlockingConnection(parameters(broker, vhost)) as connection:
                    opened = connection.channel()
                    opened.basic_qos(prefetch_count=prefetch)
                    self._ready.set()
                    for method, properties, _ in opened.consume(queue, inactivity_timeout=0.05):
                        if method is not None:
                            on_delivery(opened, method, properties, time.monotonic())
                        if done() or time.monotonic() > deadline():
                            break
                    opened.cancel()
            except BaseException as error:  # re-raised in the caller's thread by join()
                self.errors.append(error)
                self._ready.set()

        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()
        self._ready.wait(30)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.errors:
            raise self.errors[0]


def _one_shot(broker: Broker, vhost: str, strategy: Strategy, contract: dict[str, object] | None,
              plan: Delays, seed: int) -> list[tuple[int, float]]:
    """Publish `plan.messages` messages, each with one of the delays (shuffled), and time their arrival."""
    delays = [plan.delays_ms[i % len(plan.delays_ms)] for i in range(plan.messages)]
    random.Random(seed).shuffle(delays)
    ids = [f"m{i:05d}" for i in range(plan.messages)]
    sent: dict[str, float] = {}
    arrived: dict[str, float] = {}
    last_due = [time.monotonic() + max(plan.delays_ms) / 1000 + SLACK_S]

    def on_delivery(opened: BlockingChannel, method: pika.spec.Basic.Deliver, properties: pika.BasicProperties,
                    now: float) -> None:
        arrived[str(properties.message_id)] = now
        opened.basic_ack(method.delivery_tag)

    consumer = _Arrivals(broker, vhost, QUEUE, 500, on_delivery, lambda: len(arrived) >= plan.messages,
                         lambda: last_due[0])
    with channel(broker, vhost) as opened:
        for message_id, delay in zip(ids, delays, strict=True):
            exchange, routing_key, expiration = route(strategy, contract or {}, delay)
            properties = pika.BasicProperties(message_id=message_id, delivery_mode=2, expiration=expiration)
            sent[message_id] = time.monotonic()
            opened.basic_publish(exchange, routing_key, message_id.encode(), properties, mandatory=True)
        last_due[0] = time.monotonic() + max(plan.delays_ms) / 1000 + SLACK_S
    consumer.join(max(plan.delays_ms) / 1000 + SLACK_S + 30)
    if len(arrived) != plan.messages:
        raise RuntimeError(f"{strategy.name}: {len(arrived)} of {plan.messages} messages arrived")
    return [(d, (arrived[i] - sent[i]) * 1000 - d) for i, d in zip(ids, delays, strict=True)]


def _native(broker: Broker, vhost: str, plan: Delays) -> list[tuple[int, float]]:
    """Publish `plan.messages` messages; reject each `native_retries` times (requeue) and time every return."""
    delays = plan.native_delays()
    retries = len(delays)
    rejected_at: dict[str, float] = {}
    samples: list[tuple[int, float]] = []
    finished: set[str] = set()
    last_due = [time.monotonic() + sum(delays) / 1000 + SLACK_S]

    def on_delivery(opened: BlockingChannel, method: pika.spec.Basic.Deliver, properties: pika.BasicProperties,
                    now: float) -> None:
        message_id = str(properties.message_id)
        attempt = int((properties.headers or {}).get("x-delivery-count") or 0)
        if attempt >= 1:
            delay = delays[attempt - 1]
            samples.append((delay, (now - rejected_at[message_id]) * 1000 - delay))
        if attempt < retries:
            rejected_at[message_id] = time.monotonic()
            opened.basic_reject(method.delivery_tag, requeue=True)
        else:
            opened.basic_ack(method.delivery_tag)
            finished.add(message_id)

    consumer = _Arrivals(broker, vhost, QUEUE, 500, on_delivery, lambda: len(finished) >= plan.messages,
                         lambda: last_due[0])
    with channel(broker, vhost) as opened:
        for i in range(plan.messages):
            message_id = f"m{i:05d}"
            opened.basic_publish(EXCHANGE, "", message_id.encode(),
                                 pika.BasicProperties(message_id=message_id, delivery_mode=2), mandatory=True)
        last_due[0] = time.monotonic() + sum(delays) / 1000 + SLACK_S
    consumer.join(sum(delays) / 1000 + SLACK_S + 30)
    if len(finished) != plan.messages:
        raise RuntimeError(f"native: {len(finished)} of {plan.messages} messages went through {retries} retries")
    return samples


def config_for(strategy: Strategy, queue_type: str, plan: Delays) -> dict[str, object]:
    if strategy is NATIVE:
        return vhost_config(strategy, queue_type, plan.native_ms, plan.native_retries)
    return vhost_config(strategy, queue_type, plan.delays_ms, 3, plan.unit_ms)


def amqp_url(broker: Broker, vhost: str) -> str:
    return (f"amqp://{quote(broker.username, safe='')}:{quote(broker.password, safe='')}@{broker.host}:"
            f"{broker.amqp_port}/{quote(vhost, safe='')}")


def declare_kombu(broker: Broker, vhost: str, queue_type: str) -> None:
    """kombu declares its 28 levels for `queue_type` and binds QUEUE's exchange to its delivery exchange, as
    Celery's worker does at start-up for a quorum queue."""
    with kombu.Connection(amqp_url(broker, vhost)) as connection:
        declare_native_delayed_delivery_exchanges_and_queues(connection, queue_type)
        queue = kombu.Queue(QUEUE, kombu.Exchange(EXCHANGE, type="fanout"), routing_key=QUEUE,
                            queue_arguments={wire.QUEUE_TYPE.argument: queue_type})
        bind_queue_to_native_delayed_delivery_exchange(connection, queue)


@contextmanager
def deployed(broker: Broker, strategy: Strategy, queue_type: str,
             plan: Delays) -> Iterator[tuple[str, dict[str, object] | None]]:
    """`strategy` deployed for `plan` in a throw-away vhost, deleted afterwards: (vhost, QUEUE's contract)."""
    with throwaway_vhost(broker) as vhost:
        deployment = Deployer(broker, vhost)(config_for(strategy, queue_type, plan))
        contract = deployment.contracts.get(QUEUE)
        if strategy is SEED_003:
            with pika.BlockingConnection(parameters(broker, vhost)) as connection:
                connection.channel().queue_declare(ANCHOR_DELAY_QUEUE, durable=True,
                                                   arguments=anchor_arguments(queue_type))
        if strategy is KOMBU:
            declare_kombu(broker, vhost, queue_type)
        yield vhost, contract


def measure(broker: Broker, version: Sequence[int], strategy: Strategy, queue_type: str, plan: Delays,
            seed: int = 3, on_deployed: Callable[[str], None] | None = None) -> Outcome:
    """Deploy `strategy` in a throw-away vhost, run P1 there, and return the lateness per delay (or why not).
    `on_deployed(vhost)`: called once the topology is in place, before any message."""
    if why := strategy.unsupported(version, queue_type):
        return Outcome(strategy, queue_type, skipped=why)
    if why := refused(config_for(strategy, queue_type, plan)):
        return Outcome(strategy, queue_type, skipped=f"the config parser refuses it: {why}")
    start = time.monotonic()
    with deployed(broker, strategy, queue_type, plan) as (vhost, contract):
        if on_deployed:
            on_deployed(vhost)
        if strategy is NATIVE:
            samples = _native(broker, vhost, plan)
        else:
            samples = _one_shot(broker, vhost, strategy, contract, plan, seed)
    return Outcome(strategy, queue_type, stats_of(strategy.name, samples), seconds=time.monotonic() - start)
