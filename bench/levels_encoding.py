"""Levels routing encoding: the broker's cost per delayed copy of today's `levels` key against cheaper candidates.

A delayed copy of strategy `levels` is routed once per level from its highest 1 bit down, and once more by the
delivery exchange; each step is a topic match of the whole key (28 bit words, then the queue's name). Each
encoding here builds its own levels in a throw-away vhost (`lenc-…`), with the same level count, unit, delays,
queue and publisher, and only the key and the level bindings differ:

- `msb-28` (today's, `components/model/naming.py`): 28 bit words, most significant first; level k reads word 27 - k;
- `lsb-28`: 28 bit words, least significant first; level k reads word k, so its pattern is decided within its
  first k + 1 words;
- `lsb-L` / `msb-L`: only as many bit words as there are levels (the shorter key), either order;
- `direct` (the floor): the same copies published straight to the queue, no level at all.

One run per encoding and queue type and round: `messages` copies are published, unconfirmed, one channel, to
the exchange of their highest level (as `rabbitmq_retry_client.levels.delay_exchange` does), each with a delay
of 512–1023 units of 1 ms (highest bit 9: 10 levels and the delivery exchange route every copy, 11 topic
matches), and the run ends when all of them are in the queue (a passive declare every 20 ms). Measured: copies
per second (first publish to the last arrival, the delays included, the same for every encoding) and the broker
OS process's CPU per copy (`/proc/<pid>/stat`, user + system, over the same span). Each round runs every
encoding once, one after another, so a busy minute on the shared machine hits all of them; round r starts one
encoding later than round r - 1, so none always runs first.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pika

from bench import report
from bench.peers import plain_vhost
from bench.throughput import _cpu_seconds, broker_pid
from components.model import wire
from components.model.plan_types import quorum_dead_lettering
from tests.support.amqp import parameters
from tests.support.deploy import unreachable
from tests.support.mirror import Broker, call

LEVELS = 17
"""As many levels as `delay_levels` 1s up to 1d gives (the default)."""
UNIT_MS = 1
HIGHEST_BIT = 9
"""Every delay has its highest 1 bit here (512–1023 units): each copy passes levels 9 … 0 and the delivery
exchange, whatever its other bits."""
QUEUE = "orders.billing"
"""Two words, as the product's examples name queues."""
TIMEOUT_S = 300.0
"""A bound for an eventual condition (every copy arrived), not a figure."""
POLL_S = 0.02
ROUNDS = 5
QUEUE_TYPES = ("classic", "quorum")


@dataclass(frozen=True)
class Encoding:
    """How a delay in units becomes routing-key words, and the level bindings that read them."""

    name: str
    words: int
    """Bit words before the queue's name; 0: no levels (the `direct` floor)."""
    lsb_first: bool = False

    def key(self, units: int, queue: str) -> str:
        """The routing key of a copy that waits `units` units, then reaches `queue`."""
        if not self.words:
            return queue
        bits = format(units, f"0{self.words}b")
        return "".join(f"{bit}." for bit in (bits[::-1] if self.lsb_first else bits)) + queue

    def position(self, level: int) -> int:
        """The word (from the left, 0-based) level k reads."""
        return level if self.lsb_first else self.words - 1 - level

    def pattern(self, level: int, bit: str) -> str:
        """Level k's binding for its bit: `1` to its queue, `0` one exchange down."""
        return "*." * self.position(level) + f"{bit}.#"

    def delivery(self, queue: str) -> str:
        """The delivery exchange's binding of `queue`: exactly the bit words, then its name."""
        return "*." * self.words + queue


TODAY = Encoding("msb-28", 28)
ENCODINGS = (Encoding("direct", 0), TODAY, Encoding("lsb-28", 28, lsb_first=True),
             Encoding(f"msb-{LEVELS}", LEVELS), Encoding(f"lsb-{LEVELS}", LEVELS, lsb_first=True))


def delays(messages: int, seed: int = 1) -> list[int]:
    """The same delays, in units, for every encoding: highest bit HIGHEST_BIT, the rest random."""
    chooser = random.Random(seed)
    return [2**HIGHEST_BIT + chooser.randrange(2**HIGHEST_BIT) for _ in range(messages)]


def level(k: int) -> str:
    return f"lenc.delay.{k}"


DELIVER = "lenc.delay.deliver"


@contextmanager
def encoding_vhost(broker: Broker, encoding: Encoding, queue_type: str) -> Iterator[str]:
    """A throw-away vhost with `encoding`'s levels (queues of `queue_type`, TTL unit × 2^k in their arguments)
    and QUEUE bound to the delivery exchange; deleted afterwards."""
    with plain_vhost(broker, prefix="lenc") as vhost:
        with pika.BlockingConnection(parameters(broker, vhost)) as connection:
            ch = connection.channel()
            ch.queue_declare(QUEUE, durable=True, arguments={wire.QUEUE_TYPE.argument: queue_type})
            if encoding.words:
                ch.exchange_declare(DELIVER, "topic", durable=True)
                ch.queue_bind(QUEUE, DELIVER, encoding.delivery(QUEUE))
                dead_letter = quorum_dead_lettering(queue_type)
                for k in range(LEVELS):
                    below = DELIVER if k == 0 else level(k - 1)
                    ch.exchange_declare(level(k), "topic", durable=True)
                    ch.queue_declare(level(k), durable=True, arguments={
                        wire.QUEUE_TYPE.argument: queue_type, wire.MESSAGE_TTL.argument: UNIT_MS * 2**k,
                        wire.DEAD_LETTER_EXCHANGE.argument: below, **dead_letter})
                    ch.queue_bind(level(k), level(k), encoding.pattern(k, "1"))
                    ch.exchange_bind(below, level(k), encoding.pattern(k, "0"))
        yield vhost


@dataclass(frozen=True)
class Run:
    encoding: str
    queue_type: str
    copies: int
    seconds: float
    broker_cpu_s: float

    @property
    def rate(self) -> float:
        return self.copies / self.seconds if self.seconds else 0.0

    @property
    def broker_us(self) -> float:
        return 1e6 * self.broker_cpu_s / self.copies if self.copies else 0.0


def run_once(broker: Broker, pid: int | None, encoding: Encoding, queue_type: str, units: Sequence[int]) -> Run:
    """Publish one copy per delay to its highest level and wait until every one is in QUEUE."""
    with encoding_vhost(broker, encoding, queue_type) as vhost, \
            pika.BlockingConnection(parameters(broker, vhost)) as publisher_connection, \
            pika.BlockingConnection(parameters(broker, vhost)) as watcher_connection:
        publisher, watcher = publisher_connection.channel(), watcher_connection.channel()
        keys = [(level(u.bit_length() - 1) if encoding.words else "", encoding.key(u, QUEUE)) for u in units]
        body = b"x" * 64
        properties = pika.BasicProperties(delivery_mode=2)
        cpu_before = _cpu_seconds(pid) if pid else 0.0
        started = time.monotonic()
        for exchange, key in keys:
            publisher.basic_publish(exchange, key, body, properties)
        publisher_connection.process_data_events(0)
        deadline = started + TIMEOUT_S
        while (arrived := watcher.queue_declare(QUEUE, passive=True).method.message_count) < len(units):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{encoding.name} {queue_type}: {arrived} of {len(units)} copies arrived in "
                                   f"{TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        seconds = time.monotonic() - started
        cpu = (_cpu_seconds(pid) - cpu_before) if pid else 0.0
        if arrived != len(units):
            raise RuntimeError(f"{encoding.name} {queue_type}: {arrived} copies arrived for {len(units)} published")
    return Run(encoding.name, queue_type, len(units), seconds, cpu)


@dataclass
class Result:
    """Every round of one encoding and queue type on one broker."""

    encoding: str
    queue_type: str
    runs: list[Run] = field(default_factory=list)

    def median(self, value: Callable[[Run], float]) -> float:
        return statistics.median(value(r) for r in self.runs)


def measure(broker: Broker, messages: int, rounds: int = ROUNDS, queue_types: Sequence[str] = QUEUE_TYPES,
            encodings: Sequence[Encoding] = ENCODINGS,
            progress: Callable[[str], None] = lambda _: None) -> tuple[list[Result], bool]:
    """Every encoding once per round, per queue type; (results, whether the broker's CPU was read)."""
    pid = broker_pid(broker)
    units = delays(messages)
    results = {(e.name, q): Result(e.name, q) for q in queue_types for e in encodings}
    for queue_type in queue_types:
        for number in range(1, rounds + 1):
            shift = (number - 1) % len(encodings)
            for encoding in (*encodings[shift:], *encodings[:shift]):
                run = run_once(broker, pid, encoding, queue_type, units)
                results[(encoding.name, queue_type)].runs.append(run)
                progress(f"levels encoding {queue_type} round {number}/{rounds} {encoding.name}: "
                         f"{run.rate:,.0f} copies/s, broker {run.broker_us:,.0f} µs/copy")
    return list(results.values()), pid is not None


def section(version: str, results: Sequence[Result], cpu_read: bool, messages: int, rounds: int) -> list[str]:
    """Markdown for one broker: medians, each round, and the ratio to today's encoding."""
    lines = [f"## RabbitMQ {version}", "",
             f"{messages} copies per run, {rounds} rounds; medians, then every round in order. Ratio: the "
             f"median of each round's figure ÷ the same round's `{TODAY.name}` figure.", "",
             "| queues | encoding | copies/s | ÷ today | broker µs/copy | ÷ today | copies/s per round | "
             "broker µs/copy per round |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    today = {r.queue_type: r for r in results if r.encoding == TODAY.name}
    for result in results:
        base = today[result.queue_type]
        rate_ratio = statistics.median(r.rate / b.rate for r, b in zip(result.runs, base.runs, strict=True))
        cpu_ratio = statistics.median(r.broker_us / b.broker_us for r, b in zip(result.runs, base.runs, strict=True)
                                      if b.broker_us) if cpu_read else 0.0
        rate = result.median(lambda r: r.rate)
        lines.append(
            f"| {result.queue_type} | `{result.encoding}` | {rate:,.0f} | {rate_ratio:.2f} | "
            + (f"{result.median(lambda r: r.broker_us):,.0f} | {cpu_ratio:.2f} | " if cpu_read else "n/a | n/a | ")
            + ", ".join(f"{r.rate:,.0f}" for r in result.runs) + " | "
            + (", ".join(f"{r.broker_us:,.0f}" for r in result.runs) if cpu_read else "n/a") + " |")
    return [*lines, ""]


def results_file(brokers: Sequence[Broker], context: report.Context, out: Path, messages: int, rounds: int,
                 progress: Callable[[str], None]) -> list[Path]:
    """`<out>/<date>-levels-encoding.md`: every encoding on every broker that answers, in one run."""
    started = time.monotonic()
    sections: list[str] = []
    versions: list[str] = []
    for broker in brokers:
        if problem := unreachable(broker):
            progress(f"levels encoding skipped: {problem}")
            continue
        version = str(call(broker, "GET", "overview")[1]["rabbitmq_version"])
        versions.append(version)
        results, cpu_read = measure(broker, messages, rounds, progress=report.prefixed(progress, f"rabbitmq-{version}"))
        sections += section(version, results, cpu_read, messages, rounds)
    if not sections:
        return []
    lines = [f"| brokers | RabbitMQ {', '.join(versions)} (their node's OS process read from /proc) |",
             f"| levels | {LEVELS} levels of {UNIT_MS} ms × 2^k, delays {2**HIGHEST_BIT}–{2**(HIGHEST_BIT + 1) - 1} "
             f"units (every copy through levels {HIGHEST_BIT}…0 and the delivery exchange), queue `{QUEUE}` |",
             f"| publisher | one pika channel, unconfirmed, {messages} copies of 64 bytes, persistent |"]
    text = report.header(f"Benchmark: levels routing encoding, {context.date}", context, lines, started)
    text += [*(__doc__ or "").split("\n\n", 1)[1].strip().splitlines(), "", *sections]
    return [report.write(out / f"{context.date}-levels-encoding.md", text, progress)]
