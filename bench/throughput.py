"""P2, retry throughput: deliveries per second through the retry loop against plain consume, same client.

For each queue type and prefetch, in ROUNDS rounds (each round runs every row once, plain first, and a ratio
divides a strategy's run by the plain run of its own round, seconds apart, so a busy minute hits both sides):
`messages` messages are published (confirmed) before one rabbitmq_retry_client.RetryingConsumer (the handler
runs in its worker thread) consumes them:
- each strategy: its retryable queue, the handler fails every message `FAILURES` times and then succeeds:
  `messages × (FAILURES + 1)` deliveries. Delays are short (10–40 ms) so the figure is the broker/client path,
  not the waiting;
- plain: a plain queue of the same type, `messages × (FAILURES + 1)` messages whose handler never fails, each
  acked: as many deliveries as a strategy's run, so both runs last about as long and a scheduling hiccup weighs
  as much in either.
The client (this process: its consumer, handler and bench threads) runs on one core for the whole of P2
(`client_core`), the broker on every core: threads that hop between cores made plain consume alone vary 2.4×
from run to run on a 2-core machine. Seconds = from the handler's first call until its last (the success of
the last message): the consumer's connection set-up is in neither. Each run also records the CPU time the
client process and the broker's OS process spent on it, per delivery.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pika.spec import BasicProperties

from bench import strategies
from bench.strategies import EXCHANGE, LEVELS, NATIVE, QUEUE, TIERS, Strategy, client_refusal, refused, vhost_config
from rabbitmq_retry_client import RetryingConsumer
from tests.support.amqp import parameters
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import Broker, call
from tests.support.retrying import publish_ids, run_consumers

FAILURES = 3
TIMEOUT_S = 300.0
"""A bound for an eventual condition (every message through its retries), not a figure."""
DELAYS_MS: dict[str, tuple[int, ...]] = {"tiers": (10, 20, 40), "levels": (10, 20, 40), "native": (10, 30)}
"""tiers: the tiers (reject mode waits in the first only); levels: backoff 10 ms × 2 up to 40 ms, levels of
10 ms; native: min 10 ms, max 30 ms (10, 20, 30 ms)."""
PLAIN = "plain"
ROUNDS = 3
PREFETCHES = (250,)
"""The client's default prefetch, in the 100–300 range RabbitMQ's documentation names for throughput (Consumer
Acknowledgements and Publisher Confirms) and Spring AMQP's default: an original stays unacked (holding a prefetch
slot) until the broker confirmed its copy, so the prefetch bounds how many copies are in flight. The previous
default, 10, is measured beside the peers' defaults (bench/peers.py)."""


@dataclass(frozen=True)
class Run:
    queue_type: str
    row: str
    """`plain` or the strategy (with its client mode)."""
    messages: int = 0
    deliveries: int = 0
    seconds: float = 0.0
    """Of the median round (by rate)."""
    skipped: str = ""
    prefetch: int = 0
    rates: tuple[float, ...] = ()
    """Deliveries per second of every round, in round order."""
    ratios: tuple[float, ...] = ()
    """Each round's rate ÷ that round's plain rate (strategies only)."""
    client_us: float = 0.0
    broker_us: float = 0.0
    """CPU microseconds per delivery of the client process and of the broker's OS process (median round)."""

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds else 0.0

    @property
    def ratio(self) -> float | None:
        """The median of the paired ratios; None for plain."""
        return statistics.median(self.ratios) if self.ratios else None

    @classmethod
    def of(cls, queue_type: str, row: str, messages: int, prefetch: int, sample: Sample) -> Run:
        """One round's run from what it measured."""
        rate = sample.deliveries / sample.seconds if sample.seconds else 0.0
        return cls(queue_type, row, messages, sample.deliveries, sample.seconds, prefetch=prefetch, rates=(rate,),
                   client_us=sample.client_us, broker_us=1e6 * sample.broker_s / sample.deliveries)


@dataclass(frozen=True)
class Sample:
    """One run of one side: deliveries, retries (failed deliveries retried), seconds from the first delivery to
    the last success, and the CPU seconds of the client process and the broker's OS process (0: not local)."""

    deliveries: int
    retries: int
    seconds: float
    client_s: float
    broker_s: float

    @property
    def rate(self) -> float:
        """Retries per second; deliveries per second for plain consume (no retries, and a Pair's ratio of these
        rates is the ratio of deliveries per second anyway: both sides deliver as often)."""
        count = self.retries or self.deliveries
        return count / self.seconds if self.seconds else 0.0

    @property
    def client_us(self) -> float:
        """Client CPU µs per delivery."""
        return 1e6 * self.client_s / self.deliveries if self.deliveries else 0.0

    @property
    def broker_us(self) -> float:
        """Broker CPU µs per retried delivery; per delivery for plain consume."""
        count = self.retries or self.deliveries
        return 1e6 * self.broker_s / count if count else 0.0


class _Handler:
    """Fails each message `failures` times, then succeeds; thread-safe. `first` and `last`: the monotonic times
    of its first and its latest call; `done`: the calls that succeeded."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.seen: dict[str, int] = {}
        self.calls = self.done = 0
        self.first = self.last = 0.0

    def succeeds(self, message_id: str) -> bool:
        """Count a call for `message_id`; True past its first `failures` calls."""
        with self.lock:
            self.last = time.monotonic()
            self.first = self.first or self.last
            self.calls += 1
            attempt = self.seen[message_id] = self.seen.get(message_id, 0) + 1
            self.done += attempt > self.failures
        return attempt > self.failures

    def __call__(self, body: bytes, properties: BasicProperties) -> None:
        message_id = str(properties.message_id)
        if not self.succeeds(message_id):
            raise RuntimeError(f"planned failure {self.seen[message_id]} of {message_id}")


def plain_contract(vhost: str, queue_type: str) -> dict[str, Any]:
    """A tiers contract for a plain queue: the client only consumes and acks (its handler never fails)."""
    return {"vhost": vhost, "queue": QUEUE, "queue_type": queue_type, "retry_exchange": "unused",
            "reject_routes_to": "unused", "tiers": [{"routing_key": "unused", "queue": "unused", "delay_ms": 1}],
            "max_retries": 1, "delivery_limit": None, "attempt_header": "retry-count",
            "error_exchange": "unused", "error_queue": "unused"}


def plain_messages(messages: int) -> int:
    """Plain consume's messages for a P2 run of `messages`: as many as a strategy's run delivers."""
    return messages * (FAILURES + 1)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid(broker: Broker) -> int | None:
    """The broker node's OS process when it runs on this machine (its /proc entry exists), else None."""
    nodes = call(broker, "GET", "nodes")[1]
    pid = int(nodes[0].get("os_pid") or 0) if nodes else 0
    return pid if pid and Path(f"/proc/{pid}/stat").exists() else None


def cpu_stopwatch(broker: Broker) -> Callable[[], tuple[float, float]]:
    """A stopwatch of (client CPU s, broker CPU s) from now; the broker's 0 when it does not run on this machine."""
    pid = broker_pid(broker)
    server, client = _cpu_seconds(pid) if pid else 0.0, time.process_time()
    return lambda: (time.process_time() - client, (_cpu_seconds(pid) - server) if pid else 0.0)


def consume(broker: Broker, vhost: str, contract: dict[str, Any], mode: str, messages: int,
            failures: int, prefetch: int) -> Sample:
    """One run of `RetryingConsumer` (handler in its worker thread) on `messages` messages published first, each
    failing `failures` times before it succeeds."""
    ids = [f"t{i:05d}" for i in range(messages)]
    publish_ids(broker, vhost, EXCHANGE, ids)
    handler = _Handler(failures)
    consumer = RetryingConsumer(parameters(broker, vhost), contract, handler, mode,  # type: ignore[arg-type]
                                prefetch=prefetch)
    stopwatch = cpu_stopwatch(broker)
    run_consumers([consumer], lambda: consumer.processed >= messages, timeout=TIMEOUT_S)
    sample = Sample(handler.calls, consumer.retried, handler.last - handler.first, *stopwatch())
    if consumer.processed != messages or consumer.parked:
        raise RuntimeError(f"{contract['queue']}: {consumer.processed} of {messages} processed, "
                           f"{consumer.parked} parked")
    return sample


@dataclass(frozen=True)
class Target:
    """One row, deployed in its own throw-away vhost for every round and prefetch (queues are empty after a
    run), or the reason it cannot run here."""

    row: str
    mode: str
    failures: int
    vhost: str = ""
    contract: dict[str, Any] | None = None
    skipped: str = ""


def prepare(stack: ExitStack, broker: Broker, version: Sequence[int], queue_type: str, strategy: Strategy | None,
            mode: str | None) -> Target:
    """Deploy plain consume (strategy None) or `strategy` for `queue_type` in a throw-away vhost that `stack`
    deletes; levels and native ignore the client mode, tiers runs in both."""
    row = PLAIN if strategy is None else strategy.row(mode)
    failures = 0 if strategy is None else FAILURES
    if strategy is None:
        config = strategies.plain_config(queue_type)
    else:
        if why := strategy.unsupported(version, queue_type):
            return Target(row, "", failures, skipped=why)
        delays = DELAYS_MS[strategy.name]
        config = vhost_config(strategy, queue_type, delays, FAILURES, unit_ms=delays[0])
        if why := refused(config):
            return Target(row, "", failures, skipped=f"the config parser refuses it: {why}")
    vhost = stack.enter_context(throwaway_vhost(broker))
    deployment = Deployer(broker, vhost)(config)
    contract = plain_contract(vhost, queue_type) if strategy is None else deployment.contracts[QUEUE]
    if why := client_refusal(contract):
        return Target(row, "", failures, skipped=f"rabbitmq_retry_client refuses its contract: {why}")
    return Target(row, mode or "reject", failures, vhost, contract)


def measure(broker: Broker, queue_type: str, target: Target, messages: int, prefetch: int) -> Run:
    """One P2 run of a prepared target."""
    if target.skipped or target.contract is None:
        return Run(queue_type, target.row, skipped=target.skipped, prefetch=prefetch)
    published = messages if target.failures else plain_messages(messages)
    return Run.of(queue_type, target.row, published, prefetch, consume(
        broker, target.vhost, target.contract, target.mode, published, target.failures, prefetch))


def combine(per_row: dict[str, list[Run]]) -> list[Run]:
    """One Run per row: every round's rate, the ratios to the same round's plain run, the median round's figures."""
    plain = per_row[PLAIN]
    combined = []
    for row, runs in per_row.items():
        if runs[0].skipped:
            combined.append(runs[0])
            continue
        median = sorted(runs, key=lambda r: r.rate)[len(runs) // 2]
        ratios = () if row == PLAIN else tuple(r.rate / p.rate for r, p in zip(runs, plain, strict=True) if p.rate)
        combined.append(replace(median, rates=tuple(r.rate for r in runs), ratios=ratios))
    return combined


@contextmanager
def client_core() -> Iterator[int | None]:
    """Keep this thread, and the threads it starts meanwhile, on the lowest core it may use; yields that core, or
    None on a single-core machine (nothing to separate). The previous affinity is restored on exit."""
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        yield None
        return
    core = min(allowed)
    os.sched_setaffinity(0, {core})
    try:
        yield core
    finally:
        os.sched_setaffinity(0, allowed)


def measure_rounds(broker: Broker, version: Sequence[int], queue_type: str, messages: int,
                   prefetches: Sequence[int] = PREFETCHES, rounds: int = ROUNDS,
                   progress: Callable[[str], None] = lambda _: None) -> list[Run]:
    """Every row of ROWS at each prefetch `rounds` times, a round at a time, plain first in each (combine), with
    the client on one core (`client_core`)."""
    combined: list[Run] = []
    with ExitStack() as stack:
        stack.enter_context(client_core())
        targets = [prepare(stack, broker, version, queue_type, strategy, mode) for strategy, mode in ROWS]
        for prefetch in prefetches:
            per_row: dict[str, list[Run]] = {}
            for number in range(1, rounds + 1):
                for target in targets:
                    run = measure(broker, queue_type, target, messages, prefetch)
                    per_row.setdefault(run.row, []).append(run)
                    progress(f"P2 {queue_type} prefetch {prefetch} round {number}/{rounds} {run.row}: "
                             + (f"skipped: {run.skipped}" if run.skipped else f"{run.rate:,.0f} deliveries/s"))
            combined += combine(per_row)
    return combined


ROWS: tuple[tuple[Strategy | None, str | None], ...] = (
    (None, None), *((s, m) for s in (TIERS, LEVELS, NATIVE) for m in s.p2_modes))
