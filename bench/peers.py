"""The peers a user would pick instead, measured beside our strategies in the same run on the same broker.

- **kombu's native delayed delivery** (Celery's default on quorum queues, kombu >= 5.5): the binary-levels design
  of our `levels`, with 28 topic exchanges and level queues of 2^k seconds declared by kombu; every copy enters at
  level 27 and is routed down through every level. Driven here through kombu's own module
  (`kombu.transport.native_delayed_delivery`) without Celery's worker: kombu declares the levels and binds the
  queue, kombu computes the routing key, and in P2 a kombu consumer republishes a failed message as Celery's
  retry does (a new message through `celery_delayed_27`, then the original acked). Whole seconds only.
- **dramatiq** (`RabbitmqBroker`): a delayed message goes to `<queue>.DQ` and waits in the WORKER's memory
  (prefetched, unacked: up to `worker_threads × 1000`) until its eta, checked every `worker_timeout` (1000 ms by
  default), then is republished to `<queue>`. Driven by its `Worker` in this process. Its queues are classic
  (dramatiq declares no queue type).

P1 (delay accuracy) gives each peer the same messages and delays as ours (`accuracy`); P2 (`retry_loops`) runs each
peer's retry loop against plain consume with the same library, with a delay every peer can take (1 s); `holding`
measures what dramatiq's design keeps in the consumer: its memory with N delayed messages held, and what a kill -9
of that worker does to them.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.accuracy import SLACK_S, Delays, Outcome, stats_of
from bench.strategies import EXCHANGE, KOMBU, LEVELS, QUEUE, Strategy, vhost_config
from tests.support.admin import parse_version
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import Broker, call, esc

DRAMATIQ_THREADS = 8
"""dramatiq's default `worker_threads`."""
DRAMATIQ_TIMEOUTS_MS = (1000, 100)
"""dramatiq's default `worker_timeout`, then a tuned one: how often the worker checks a held message's eta."""


def dramatiq_strategy(timeout_ms: int) -> Strategy:
    return Strategy(f"dramatiq-{timeout_ms}ms", f"dramatiq `actor.send_with_options(delay=…)` to its RabbitmqBroker; "
                    f"the message waits in `{QUEUE}.DQ` until the in-process Worker ({DRAMATIQ_THREADS} threads, "
                    f"`worker_timeout` {timeout_ms} ms) takes it into memory, holds it until its eta and "
                    f"republishes it to `{QUEUE}`; arrival = the actor's call", queue_types=("classic",), ours=False)


DRAMATIQ = tuple(dramatiq_strategy(t) for t in DRAMATIQ_TIMEOUTS_MS)
P1_PEERS: tuple[tuple[Strategy, str], ...] = (
    (KOMBU, "quorum"), (KOMBU, "classic"), *((d, "classic") for d in DRAMATIQ))
"""(peer, queue type) in P1's order: kombu on both queue types, dramatiq (classic only) at both timeouts."""


def amqp_url(broker: Broker, vhost: str) -> str:
    return (f"amqp://{quote(broker.username, safe='')}:{quote(broker.password, safe='')}@{broker.host}:"
            f"{broker.amqp_port}/{quote(vhost, safe='')}")


def declare_kombu(broker: Broker, vhost: str, queue_type: str) -> None:
    """kombu declares its 28 levels for `queue_type` and binds QUEUE's exchange to its delivery exchange, as
    Celery's worker does at start-up for a quorum queue."""
    import kombu
    from kombu.transport.native_delayed_delivery import (
        bind_queue_to_native_delayed_delivery_exchange,
        declare_native_delayed_delivery_exchanges_and_queues,
    )

    with kombu.Connection(amqp_url(broker, vhost)) as connection:
        declare_native_delayed_delivery_exchanges_and_queues(connection, queue_type)
        queue = kombu.Queue(QUEUE, kombu.Exchange(EXCHANGE, type="fanout"), routing_key=QUEUE,
                            queue_arguments={"x-queue-type": queue_type})
        bind_queue_to_native_delayed_delivery_exchange(connection, queue)


def whole_seconds(plan: Delays) -> Delays:
    """`plan` with only its delays of whole seconds (every peer can run them), at least 1 s and 2 s."""
    whole = tuple(d for d in plan.delays_ms if d % 1000 == 0)
    return replace(plan, delays_ms=whole if len(whole) >= 2 else (1000, 2000))


@contextmanager
def plain_vhost(broker: Broker, queue_type: str | None = None) -> Iterator[str]:
    """A throw-away vhost; with `queue_type`, also the plain QUEUE bound to the fanout EXCHANGE."""
    with throwaway_vhost(broker) as vhost:
        if queue_type is None:
            call(broker, "PUT", f"vhosts/{esc(vhost)}", {})
            call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(broker.username)}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
        else:
            Deployer(broker, vhost)({"exchanges": [{"name": EXCHANGE, "type": "fanout"}], "queues": [
                {"name": QUEUE, "type": queue_type, "bindings": [{"exchange": EXCHANGE}]}]})
        yield vhost


# --- dramatiq ---------------------------------------------------------------------------------------------------


class _Dramatiq:
    """A dramatiq RabbitmqBroker on `vhost` with one actor on QUEUE; `calls(message_id, attempt)` per call."""

    def __init__(self, broker: Broker, vhost: str, call_: Callable[[str], None], confirm: bool = True,
                 retries: bool = False) -> None:
        import dramatiq
        from dramatiq.brokers.rabbitmq import RabbitmqBroker
        from dramatiq.middleware import Retries

        self.broker = RabbitmqBroker(url=amqp_url(broker, vhost), confirm_delivery=confirm,
                                     middleware=[Retries(max_retries=100)] if retries else [])
        options: dict[str, Any] = {"max_retries": 100} if retries else {}
        self.actor = dramatiq.actor(call_, actor_name="bench", queue_name=QUEUE, broker=self.broker, **options)

    def worker(self, timeout_ms: int, prefetch: int | None = None) -> Any:
        from dramatiq import Worker

        worker = Worker(self.broker, worker_timeout=timeout_ms, worker_threads=DRAMATIQ_THREADS)
        if prefetch is not None:
            worker.queue_prefetch = prefetch
        return worker

    def close(self) -> None:
        self.broker.close()


def dramatiq_p1(broker: Broker, strategy: Strategy, timeout_ms: int, plan: Delays, seed: int = 3) -> Outcome:
    """P1 for dramatiq: `plan.messages` messages sent with the plan's delays (shuffled as ours), timed at the
    actor's call."""
    import random

    delays = [plan.delays_ms[i % len(plan.delays_ms)] for i in range(plan.messages)]
    random.Random(seed).shuffle(delays)
    sent: dict[str, float] = {}
    arrived: dict[str, float] = {}
    start = time.monotonic()

    def record(message_id: str) -> None:
        arrived.setdefault(message_id, time.monotonic())

    with plain_vhost(broker) as vhost:
        peer = _Dramatiq(broker, vhost, record)
        try:
            peer.broker.declare_queue(QUEUE)
            worker = peer.worker(timeout_ms)
            worker.start()
            try:
                for i, delay in enumerate(delays):
                    message_id = f"m{i:05d}"
                    sent[message_id] = time.monotonic()
                    peer.actor.send_with_options(args=(message_id,), delay=delay)
                deadline = time.monotonic() + max(delays) / 1000 + SLACK_S
                while len(arrived) < len(delays) and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                worker.stop(timeout=5000)
        finally:
            peer.close()
    if len(arrived) != len(delays):
        raise RuntimeError(f"{strategy.name}: {len(arrived)} of {len(delays)} messages arrived")
    samples = [(d, (arrived[f"m{i:05d}"] - sent[f"m{i:05d}"]) * 1000 - d) for i, d in enumerate(delays)]
    return Outcome(strategy, "classic", stats_of(strategy.name, samples), seconds=time.monotonic() - start)


def p1(broker: Broker, version: Sequence[int], plan: Delays, progress: Callable[[str], None]) -> list[Outcome]:
    """P1 of every peer on this broker, in P1_PEERS' order, with the whole-second delays of `plan`."""
    from bench import accuracy

    whole = whole_seconds(plan)
    outcomes = []
    for strategy, queue_type in P1_PEERS:
        progress(f"P1 {strategy.name} ({queue_type}, {whole.messages} messages) …")
        if strategy is KOMBU:
            outcome = accuracy.measure(broker, version, strategy, queue_type, whole)
        else:
            outcome = dramatiq_p1(broker, strategy, int(strategy.name.split("-")[1][:-2]), whole)
        outcomes.append(outcome)
        progress(f"P1 {strategy.name} ({queue_type}): p99 " + ", ".join(
            f"{s.delay_ms} ms {s.percentile(99):.1f}" for s in outcome.stats) + f" ({outcome.seconds:.0f} s)")
    return outcomes
