"""P2, retry throughput: deliveries per second through the retry loop against plain consume, same client.

For each queue type: `messages` messages are published (confirmed) before the consumer starts, then one
rabbitmq_retry_client.RetryingConsumer (prefetch 10, the handler runs in its worker thread) consumes them:
- plain: a plain queue of the same type, the handler never fails: `messages` deliveries, each acked; run
  PLAIN_RUNS times (it is short), the median counts;
- each strategy: its retryable queue, the handler fails every message `FAILURES` times and then succeeds:
  `messages × (FAILURES + 1)` deliveries. Delays are short (10–40 ms) so the figure is the broker/client path,
  not the waiting.
Seconds = from the consumer's start until the last message succeeded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pika.spec import BasicProperties

from bench.strategies import EXCHANGE, LEVELS, NATIVE, QUEUE, TIERS, Strategy, client_refusal, refused, vhost_config
from rabbitmq_retry_client import RetryingConsumer
from tests.support.amqp import parameters
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import Broker
from tests.support.retrying import publish_ids, run_consumers

FAILURES = 3
TIMEOUT_S = 300.0
"""A bound for an eventual condition (every message through its retries), not a figure."""
DELAYS_MS: dict[str, tuple[int, ...]] = {"tiers": (10, 20, 40), "levels": (10, 20, 40), "native": (10, 30)}
"""tiers: the tiers (reject mode waits in the first only); levels: backoff 10 ms × 2 up to 40 ms, levels of
10 ms; native: min 10 ms, max 30 ms (10, 20, 30 ms)."""
PLAIN = "plain"
PLAIN_RUNS = 5


@dataclass(frozen=True)
class Run:
    queue_type: str
    row: str
    """`plain` or the strategy (with its client mode)."""
    messages: int = 0
    deliveries: int = 0
    seconds: float = 0.0
    skipped: str = ""
    rates: tuple[float, ...] = ()
    """Plain consume is short (under a second for 2,000 messages), so it runs PLAIN_RUNS times: every rate, the
    row being the median run."""

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds else 0.0


class _Handler:
    """Fails each message `failures` times, then succeeds; thread-safe."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.seen: dict[str, int] = {}
        self.calls = 0

    def __call__(self, body: bytes, properties: BasicProperties) -> None:
        message_id = str(properties.message_id)
        with self.lock:
            self.calls += 1
            attempt = self.seen[message_id] = self.seen.get(message_id, 0) + 1
        if attempt <= self.failures:
            raise RuntimeError(f"planned failure {attempt} of {message_id}")


def plain_contract(vhost: str, queue_type: str) -> dict[str, Any]:
    """A tiers contract for a plain queue: the client only consumes and acks (its handler never fails)."""
    return {"vhost": vhost, "queue": QUEUE, "queue_type": queue_type, "retry_exchange": "unused",
            "reject_routes_to": "unused", "tiers": [{"routing_key": "unused", "queue": "unused", "delay_ms": 1}],
            "max_retries": 0, "delivery_limit": None, "attempt_header": "retry-count",
            "error_exchange": "unused", "error_queue": "unused"}


def _consume(broker: Broker, vhost: str, contract: dict[str, Any], mode: str, messages: int,
             failures: int) -> tuple[int, float]:
    ids = [f"t{i:05d}" for i in range(messages)]
    publish_ids(broker, vhost, EXCHANGE, ids)
    handler = _Handler(failures)
    consumer = RetryingConsumer(parameters(broker, vhost), contract, handler, mode)  # type: ignore[arg-type]
    start = time.monotonic()
    run_consumers([consumer], lambda: consumer.processed >= messages, timeout=TIMEOUT_S)
    seconds = time.monotonic() - start
    if consumer.processed != messages or consumer.parked:
        raise RuntimeError(f"{contract['queue']}: {consumer.processed} of {messages} processed, "
                           f"{consumer.parked} parked")
    return handler.calls, seconds


def measure(broker: Broker, version: Sequence[int], queue_type: str, strategy: Strategy | None, mode: str | None,
            messages: int) -> Run:
    """One P2 row: plain consume (strategy None) or `strategy` in client `mode`, in a throw-away vhost."""
    row = PLAIN if strategy is None else strategy.row(mode)
    if strategy is None:
        config: dict[str, Any] = {"exchanges": [{"name": EXCHANGE, "type": "fanout"}],
                                  "queues": [{"name": QUEUE, "type": queue_type, "bindings": [{"exchange": EXCHANGE}]}]}
    else:
        if why := strategy.unsupported(version, queue_type):
            return Run(queue_type, row, skipped=why)
        delays = DELAYS_MS[strategy.name]
        config = vhost_config(strategy, queue_type, delays, FAILURES, unit_ms=delays[0])
        if why := refused(config):
            return Run(queue_type, row, skipped=f"the config parser refuses it: {why}")
    with throwaway_vhost(broker) as vhost:
        deployment = Deployer(broker, vhost)(config)
        contract = plain_contract(vhost, queue_type) if strategy is None else deployment.contracts[QUEUE]
        if why := client_refusal(contract):
            return Run(queue_type, row, skipped=f"rabbitmq_retry_client refuses its contract: {why}")
        if strategy is None:
            timings = [_consume(broker, vhost, contract, "reject", messages, 0) for _ in range(PLAIN_RUNS)]
            deliveries, seconds = sorted(timings, key=lambda t: t[1])[len(timings) // 2]
            return Run(queue_type, row, messages, deliveries, seconds, rates=tuple(d / s for d, s in timings))
        # levels and native ignore the client mode; tiers runs in both
        deliveries, seconds = _consume(broker, vhost, contract, mode or "reject", messages, FAILURES)
    return Run(queue_type, row, messages, deliveries, seconds)


ROWS: tuple[tuple[Strategy | None, str | None], ...] = (
    (None, None), *((s, m) for s in (TIERS, LEVELS, NATIVE) for m in s.p2_modes))
