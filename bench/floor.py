"""P2 against the broker's floor: our retry loops beside the same broker mechanism wired and driven by hand.

A quorum retry costs the broker far more than a plain delivery (the wait queue's log, at-least-once
dead-lettering), so "retries per second ÷ plain consume" measures the broker as much as us. The floor is the
fastest the same mechanism goes with nothing of ours in the way: the same topology (the program's recording of
`tiers` or `native`, applied by tests/support/mirror.py: the same queues, arguments and policies, nothing typed
again here) consumed by the thinnest pika code there is (`SelectConnection`, pika's own asynchronous adapter:
callbacks, no threads; no library, no contract, no header of its own):

- `tiers (reject)`: the seed's DLX/TTL loop: a failed delivery is `basic.reject(requeue=false)`; the queue
  dead-letters it to the wait queue, whose TTL dead-letters it back;
- `tiers (republish)`: a failed delivery is published as it came (same properties) to the wait queue's tier on a
  confirm-mode channel, and acked once the broker confirmed the copy;
- `native` (RabbitMQ 4.3.1+, quorum): a failed delivery is `basic.reject(requeue=true)`: the broker waits,
  counts and redelivers it;
- `plain`: a plain queue of the same type, every delivery acked, against our plain consume (a contract whose
  handler never fails).

Each message fails once and then succeeds (the hand-wired loops tell a retry from a first delivery by the
message id they saw, as our benchmark handler does), so a run is `messages` retries and `2 × messages`
deliveries; plain consume gets `2 × messages` messages, as many deliveries. Same publisher
(tests/support/retrying.publish_ids), same prefetch, same message count, the client on one core
(`throughput.client_core`); in every round each row runs ours and the hand-wired loop back to back, in alternating
order (ours first in odd rounds), so a busy second hits both sides alike. A ratio is the median over rounds of
the paired ratios; the load average is recorded beside each pair.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pika
from pika.channel import Channel
from pika.frame import Method
from pika.spec import Basic, BasicProperties

from bench import aio_floor
from bench.report import load
from bench.strategies import EXCHANGE, NATIVE, QUEUE, TIERS, Strategy, plain_config, vhost_config
from bench.throughput import Sample, client_core, consume, cpu_stopwatch, plain_contract
from rabbitmq_retry_client.handler_thread import HandlerThread
from rabbitmq_retry_client.headers import (
    FIRST_FAILURE_AT,
    ORIGINAL_EXCHANGE,
    ORIGINAL_ROUTING_KEY,
    copy_properties,
    utc_iso,
    without_broker_headers,
)
from tests.support.amqp import parameters
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import Broker
from tests.support.retrying import publish_ids

MESSAGES = 2000
"""Messages per run of `make bench` (each fails once: 2,000 retries, 4,000 deliveries): a run lasts about a second,
long enough to pair, short enough for 6 rounds of every row on both brokers in `make bench` (about 40 s a broker)."""
QUICK_MESSAGES = 300
ROUNDS = 6
PREFETCH = 250
TIER_MS = 10
"""The one tier of `tiers` (reject mode waits in tier 1 only; a message failing once waits there in both modes)."""
NATIVE_MS = (10, 30)
"""`native`'s min and max delay: a message failing once waits the minimum."""
TIMEOUT_S = 300.0
"""A bound for an eventual condition (every message through its retry), not a figure."""
RATE_TARGET = 0.9
"""Ours ≥ 0.9 × the hand-wired loop's retries (deliveries for plain) per second."""
BROKER_CPU_TARGET = 1.1
"""Ours ≤ 1.1 × the hand-wired loop's broker CPU per retried delivery."""

PLAIN = "plain"
REJECT, REPUBLISH = "tiers (reject)", "tiers (republish)"
ASYNCIO = "tiers (republish), asyncio"
"""`AsyncRetryingConsumer` against a bare aio-pika loop (bench/aio_floor.py) on the republish row's deployment."""
ROWS = (REJECT, REPUBLISH, NATIVE.name, PLAIN, ASYNCIO)
THREAD = "plain + handler thread"
HEADERS = "republish + our headers"
AIO_HEADERS = "republish + our headers, asyncio"
"""The asyncio row's `HEADERS`: the bare aio-pika loop carrying what our copy must (bench/aio_floor.carrying)."""
MULTIPLE = "plain + multiple acks"
PARTS = (THREAD, HEADERS, MULTIPLE, AIO_HEADERS)
"""What a difference between ours and the floor buys, measured alone, each as the hand-wired loop with only that
added (the `ours` side of its Pair) against the bare hand-wired loop: our handler thread (heartbeats and
`handler_timeout` during a long handler) on plain consume; the headers our republished copy carries (its attempt
and origin) with `mandatory` set (an unroutable copy comes back instead of vanishing); our acks, the deliveries
of an I/O pass acked as one `basic.ack(multiple=true)` (rabbitmq_retry_client/settlements.py), on plain consume.
No target of their own. The headers' part runs in the same rounds as the republish row, as its third side: a
republish row short of the bare loop is judged against it (`Pair.verdict`), the issue's "say what the difference
buys and measure that alone"; `AIO_HEADERS` is the same for the asyncio row."""
PLAIN_ROWS = (PLAIN, THREAD, MULTIPLE)
"""The rows of plain consume: twice the messages, none failing."""


def shown(ratio: float, bound: float) -> str:
    """Two decimals, or as many more as it takes not to round across `bound` (0.8998 would read as a met 0.90)."""
    for digits in (2, 3, 4):
        text = f"{ratio:.{digits}f}"
        if (float(text) >= bound) == (ratio >= bound) and (float(text) <= bound) == (ratio <= bound):
            return text
    return f"{ratio:.5f}"


@dataclass
class Pair:
    """One row on one queue type: ours and the hand-wired loop, a sample of each per round, and the load average
    after each round's pair."""

    queue_type: str
    row: str
    skipped: str = ""
    ours: list[Sample] = field(default_factory=list)
    hand: list[Sample] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    carrying: list[Sample] = field(default_factory=list)
    """The republish rows only: the hand-wired loop whose copy carries what ours must (`HEADERS`, `AIO_HEADERS`), run
    in the same rounds, so that a shortfall against the bare loop is measured apart from what the copy carries."""

    def _paired(self, pick: Callable[[Sample], float]) -> list[float]:
        return [pick(o) / pick(h) for o, h in zip(self.ours, self.hand, strict=True) if pick(h)]

    @property
    def rate_ratios(self) -> list[float]:
        return self._paired(lambda s: s.rate)

    @property
    def broker_ratios(self) -> list[float]:
        return self._paired(lambda s: s.broker_us)

    @property
    def rate_ratio(self) -> float | None:
        return statistics.median(self.rate_ratios) if self.rate_ratios else None

    @property
    def broker_ratio(self) -> float | None:
        return statistics.median(self.broker_ratios) if self.broker_ratios else None

    def median(self, side: str, pick: Callable[[Sample], float]) -> float:
        samples = self.ours if side == "ours" else self.hand
        return statistics.median(pick(s) for s in samples) if samples else 0.0

    def carried(self) -> Pair | None:
        """The `HEADERS` part of this republish row: the loop carrying our copy's headers against the bare one, in
        the same rounds (None when it was not run)."""
        if not self.carrying:
            return None
        return Pair(self.queue_type, AIO_HEADERS if self.row == ASYNCIO else HEADERS, ours=self.carrying,
                    hand=self.hand, loads=self.loads)

    def _retries_within(self) -> tuple[bool, str]:
        """(met, the broker CPU's words) of a retry row: rate ≥ 0.9 × and broker CPU ≤ 1.1 × the hand-wired side's."""
        rate, broker = self.rate_ratio or 0.0, self.broker_ratio
        cpu = ("broker CPU not local" if broker is None
               else f"{shown(broker, BROKER_CPU_TARGET)} × its broker CPU per retry")
        return rate >= RATE_TARGET and (broker is None or broker <= BROKER_CPU_TARGET), cpu

    def verdict(self) -> tuple[bool, str]:
        """(met, why) against the targets: rate ≥ 0.9 ×, and for retries broker CPU ≤ 1.1 ×. A republish row short
        of the bare loop is met only by the issue's other way: ours within the same targets of the hand-wired loop
        that carries what our copy must carry, that cost measured alone in the same rounds (`carried`)."""
        rate = self.rate_ratio or 0.0
        if self.row in PARTS:
            broker = self.broker_ratio
            return True, (f"information: {rate:.2f} × the bare loop's rate, "
                          + ("broker CPU not local" if broker is None else f"{broker:.2f} × its broker CPU"))
        if self.row == PLAIN:
            return rate >= RATE_TARGET, (f"{shown(rate, RATE_TARGET)} × bare pika's deliveries/s "
                                         f"(target ≥ {RATE_TARGET})")
        met, cpu = self._retries_within()
        why = (f"{shown(rate, RATE_TARGET)} × the hand-wired retries/s (target ≥ {RATE_TARGET}), {cpu} "
               f"(target ≤ {BROKER_CPU_TARGET})")
        carried = self.carried()
        if met or carried is None or not carried.rate_ratios:
            return met, why
        against = Pair(self.queue_type, self.row, ours=self.ours, hand=self.carrying, loads=self.loads)
        (explained, carried_cpu), carried_rate = against._retries_within(), against.rate_ratio or 0.0
        cost = carried.rate_ratio or 0.0
        return explained, (f"{why}; {'explained' if explained else 'not explained'} by what our copy carries (its "
                           f"attempt and origin headers, `mandatory`), measured alone in the same rounds: the "
                           f"hand-wired loop carrying it runs at {cost:.2f} × the bare loop's retries/s, and ours at "
                           f"{shown(carried_rate, RATE_TARGET)} × that loop's, {carried_cpu}")


KINDS = ("reject", "republish", "native", "plain", "plain-thread", "republish-headers", "plain-multiple")
PART_KINDS = {THREAD: "plain-thread", HEADERS: "republish-headers", MULTIPLE: "plain-multiple"}
"""The hand-wired kind that measures each of PARTS."""


class HandWired:
    """The thinnest pika consumer of `queue` on `SelectConnection`: each message id's first delivery fails
    (`kind`: "reject", "republish", "native"; "plain": none fails) and its next is acked. It stops once every one
    of `messages` ids was acked after its retry (plain: `messages` acks) and no copy awaits its confirm.
    `deliveries` counts the deliveries per message id (what the tests check: none lost, each retried once)."""

    def __init__(self, broker: Broker, vhost: str, queue: str, kind: str, messages: int, prefetch: int = PREFETCH,
                 retry_to: tuple[str, str] = ("", "")) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.broker, self.vhost, self.queue, self.kind = broker, vhost, queue, kind
        self.messages, self.prefetch, self.retry_to = messages, prefetch, retry_to
        self.deliveries: dict[str, int] = {}
        self.acked = self.retries = 0
        self.first = self.last = 0.0
        self._published = 0
        self._waiting: dict[int, int] = {}
        """Publish sequence number of a copy → delivery tag of its original, until the broker confirms it."""
        self._channel: Channel | None = None
        self._connection: pika.SelectConnection | None = None
        self._error: BaseException | None = None
        self._worker = HandlerThread(lambda body, properties: None) if kind == "plain-thread" else None
        self._to_ack = 0
        """"plain-multiple": the highest delivery tag to ack with the I/O pass's one multiple ack (0: none)."""

    def run(self, timeout: float = TIMEOUT_S) -> None:
        self._connection = pika.SelectConnection(
            parameters(self.broker, self.vhost), on_open_callback=self._opened,
            on_open_error_callback=self._failed, on_close_callback=self._closed)
        self._connection.ioloop.call_later(timeout, lambda: self._failed(
            self._connection, TimeoutError(f"{self.queue}: {self.acked} of {self.messages} done in {timeout:g} s")))
        self._connection.ioloop.start()
        if self._error is not None:
            raise self._error

    @property
    def done(self) -> bool:
        return self.acked >= self.messages and not self._waiting

    def _opened(self, connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: Channel) -> None:
        self._channel = channel
        channel.basic_qos(prefetch_count=self.prefetch, callback=self._qos_set)

    def _qos_set(self, _: Method) -> None:
        assert self._channel is not None
        if self.kind.startswith("republish"):
            self._channel.confirm_delivery(ack_nack_callback=self._confirmed, callback=self._consume)
        else:
            self._consume(None)

    def _consume(self, _: Method | None) -> None:
        assert self._channel is not None
        self._channel.basic_consume(self.queue, self._delivered)

    def _delivered(self, channel: Channel, method: Basic.Deliver, properties: BasicProperties, body: bytes) -> None:
        self.last = time.monotonic()
        self.first = self.first or self.last
        message_id = str(properties.message_id)
        seen = self.deliveries[message_id] = self.deliveries.get(message_id, 0) + 1
        if self._worker is not None:  # our consumer's hand-off to its handler thread, and back
            self._worker.submit(body, properties)
            self._worker.outcome(TIMEOUT_S)
        if self.kind == "plain-multiple":  # every delivery before it is acked too: one ack for the pass's run
            if not self._to_ack and self._connection is not None:
                self._connection.ioloop.call_later(0, self._ack_run)
            self._to_ack = method.delivery_tag
            return
        if seen > 1 or self.kind.startswith("plain"):
            channel.basic_ack(method.delivery_tag)
            self.acked += 1
            self._finish()
            return
        self.retries += 1
        if self.kind == "reject":
            channel.basic_reject(method.delivery_tag, requeue=False)
        elif self.kind == "native":
            channel.basic_reject(method.delivery_tag, requeue=True)
        else:
            exchange, routing_key = self.retry_to
            if self.kind == "republish-headers":  # what our consumer's copy carries (consumer._fail_republish)
                properties = copy_properties(properties, {
                    **without_broker_headers(properties.headers), ORIGINAL_EXCHANGE: method.exchange,
                    ORIGINAL_ROUTING_KEY: method.routing_key, FIRST_FAILURE_AT: utc_iso(), "retry-count": 1})
            channel.basic_publish(exchange, routing_key, body, properties,
                                  mandatory=self.kind == "republish-headers")
            self._published += 1
            self._waiting[self._published] = method.delivery_tag

    def _ack_run(self) -> None:
        """Ack every delivery up to the pass's last one with one `basic.ack(multiple=true)`."""
        assert self._channel is not None
        tag, self._to_ack = self._to_ack, 0
        if tag and self._channel.is_open:
            self._channel.basic_ack(tag, multiple=True)
            self.acked = tag
            self._finish()

    def _confirmed(self, frame: Method) -> None:
        assert self._channel is not None
        confirm = frame.method
        tag = confirm.delivery_tag
        numbers = [n for n in self._waiting if n <= tag] if confirm.multiple else [tag]
        for number in numbers:
            original = self._waiting.pop(number)
            if isinstance(confirm, Basic.Ack):
                self._channel.basic_ack(original)
            else:
                self._channel.basic_nack(original, requeue=True)
        self._finish()

    def _finish(self) -> None:
        if self.done and self._connection is not None and self._connection.is_open:
            self._connection.close()

    def _failed(self, connection: Any, error: BaseException | str) -> None:
        self._error = error if isinstance(error, BaseException) else RuntimeError(str(error))
        if connection is not None and connection.is_open:
            connection.close()
        else:
            connection.ioloop.stop()

    def _closed(self, connection: pika.SelectConnection, reason: BaseException) -> None:
        if not self.done and self._error is None:
            self._error = reason
        connection.ioloop.stop()


@dataclass(frozen=True)
class Target:
    """A row deployed for one queue type: its vhost and contract, or why it cannot run here."""

    row: str
    vhost: str = ""
    contract: dict[str, Any] | None = None
    skipped: str = ""


def _deploy(stack: ExitStack, broker: Broker, queue_type: str, strategy: Strategy | None) -> tuple[str, dict[str, Any]]:
    """The program's topology for `strategy` (None: a plain queue bound to `in`) in a throw-away vhost."""
    vhost = stack.enter_context(throwaway_vhost(broker, "floor"))
    if strategy is None:
        config = plain_config(queue_type)
    else:
        delays = (TIER_MS,) if strategy is TIERS else NATIVE_MS
        config = vhost_config(strategy, queue_type, delays, 3)
    deployment = Deployer(broker, vhost)(config)
    return vhost, plain_contract(vhost, queue_type) if strategy is None else deployment.contracts[QUEUE]


def prepare(stack: ExitStack, broker: Broker, version: Sequence[int], queue_type: str) -> list[Target]:
    """Every row of ROWS and PARTS for `queue_type` but `HEADERS`, which runs within the republish row (its
    `carrying` side); both `tiers` modes share one deployment (the mode is the client's), as do plain consume and
    the handler thread's and the acks' parts."""
    vhost, contract = _deploy(stack, broker, queue_type, TIERS)
    targets = [Target(REJECT, vhost, contract), Target(REPUBLISH, vhost, contract)]
    if why := NATIVE.unsupported(version, queue_type):
        targets.append(Target(NATIVE.name, skipped=why))
    else:
        targets.append(Target(NATIVE.name, *_deploy(stack, broker, queue_type, NATIVE)))
    plain = Target(PLAIN, *_deploy(stack, broker, queue_type, None))
    targets.append(Target(ASYNCIO, vhost, contract))
    return [*targets, plain, Target(THREAD, plain.vhost, plain.contract), Target(MULTIPLE, plain.vhost, plain.contract)]


def _published(row: str, messages: int) -> int:
    """Plain consume gets twice the messages: as many deliveries as a retry run's."""
    return 2 * messages if row in PLAIN_ROWS else messages


def run_ours(broker: Broker, target: Target, messages: int, prefetch: int = PREFETCH) -> Sample:
    """One run of `RetryingConsumer` on the target (handler in its worker thread, as in P2); for a row of PARTS,
    the hand-wired loop with only that part added."""
    if target.row in PARTS:
        return run_hand(broker, target, messages, prefetch, PART_KINDS[target.row])
    if target.row == ASYNCIO:
        return _run_aio(broker, target, messages, prefetch, aio_floor.ours)
    assert target.contract is not None
    mode = "republish" if target.row == REPUBLISH else "reject"
    return consume(broker, target.vhost, target.contract, mode, _published(target.row, messages),
                   0 if target.row == PLAIN else 1, prefetch)


BARE_KINDS = {REJECT: "reject", REPUBLISH: "republish", NATIVE.name: "native", PLAIN: "plain", THREAD: "plain",
              HEADERS: "republish", MULTIPLE: "plain"}
"""The bare hand-wired loop each row is measured against."""


def loop_of(broker: Broker, target: Target, messages: int, prefetch: int = PREFETCH,
            kind: str | None = None) -> HandWired:
    """The hand-wired consumer (not run yet) of the target's queue, of `kind` (KINDS; default: the row's bare loop,
    BARE_KINDS), retrying where its contract's tier 1 is."""
    assert target.contract is not None
    kind = kind or BARE_KINDS[target.row]
    retry_to = ((target.contract["retry_exchange"], target.contract["tiers"][0]["routing_key"])
                if kind.startswith("republish") else ("", ""))
    return HandWired(broker, target.vhost, target.contract["queue"], kind, _published(target.row, messages),
                     prefetch, retry_to)


def run_hand(broker: Broker, target: Target, messages: int, prefetch: int = PREFETCH,
             kind: str | None = None) -> Sample:
    """One run of the hand-wired loop on the target (or of its `kind`), measured as `run_ours` is."""
    if target.row == ASYNCIO:
        return _run_aio(broker, target, messages, prefetch, aio_floor.bare)
    count = _published(target.row, messages)
    publish_ids(broker, target.vhost, EXCHANGE, [f"f{i:05d}" for i in range(count)])
    loop = loop_of(broker, target, messages, prefetch, kind)
    stopwatch = cpu_stopwatch(broker)
    loop.run()
    client, broker_cpu = stopwatch()
    return Sample(sum(loop.deliveries.values()), loop.retries, loop.last - loop.first, client, broker_cpu)


def _run_aio(broker: Broker, target: Target, messages: int, prefetch: int,
             run: Callable[[Any, dict[str, Any], int, int], aio_floor.Run]) -> Sample:
    """One run of an asyncio side (`aio_floor.ours` or `aio_floor.bare`) on the target, measured as `run_ours` is."""
    assert target.contract is not None
    publish_ids(broker, target.vhost, EXCHANGE, [f"f{i:05d}" for i in range(messages)])
    stopwatch = cpu_stopwatch(broker)
    deliveries, retries, seconds = run(parameters(broker, target.vhost), target.contract, messages, prefetch)
    return Sample(deliveries, retries, seconds, *stopwatch())


CARRYING: dict[str, Callable[[Broker, Target, int], Sample]] = {
    REPUBLISH: lambda b, t, n: run_hand(b, t, n, kind=PART_KINDS[HEADERS]),
    ASYNCIO: lambda b, t, n: _run_aio(b, t, n, PREFETCH, aio_floor.carrying)}
"""The third side of each republish row: its bare loop carrying what our copy must."""


def measure(broker: Broker, version: Sequence[int], messages: int, rounds: int,
            progress: Callable[[str], None] = lambda _: None,
            queue_types: Sequence[str] = ("classic", "quorum")) -> list[Pair]:
    """Every row on each queue type, `rounds` rounds; in round n each row runs ours and the hand-wired loop back
    to back, ours first when n is odd. The client stays on one core throughout."""
    pairs: list[Pair] = []
    with ExitStack() as stack:
        stack.enter_context(client_core())
        for queue_type in queue_types:
            targets = prepare(stack, broker, version, queue_type)
            rows = [Pair(queue_type, t.row, t.skipped) for t in targets]
            for number in range(1, rounds + 1):
                for target, pair in zip(targets, rows, strict=True):
                    if target.skipped:
                        continue
                    sides: list[tuple[str, Callable[[Broker, Target, int], Sample]]] = [
                        ("ours", run_ours), ("hand", run_hand)]
                    if target.row in CARRYING:
                        sides.append(("carrying", CARRYING[target.row]))
                    for side, run in sides if number % 2 else reversed(sides):
                        sample = run(broker, target, messages)
                        {"ours": pair.ours, "hand": pair.hand, "carrying": pair.carrying}[side].append(sample)
                    pair.loads.append(load())
                    unit = "deliveries" if pair.row in PLAIN_ROWS else "retries"
                    progress(f"floor {queue_type} round {number}/{rounds} {pair.row}: ours {pair.ours[-1].rate:,.0f}"
                             f", hand-wired {pair.hand[-1].rate:,.0f} {unit}/s (load {pair.loads[-1]})")
            pairs += rows
            pairs += [carried for pair in rows if (carried := pair.carried()) is not None]
    return pairs


def section(pairs: Sequence[Pair], messages: int, rounds: int) -> list[str]:
    """The results file's section: the paired figures, per-round detail and the verdicts."""
    out = ["## P2 against the broker's floor (hand-wired loops)", "",
           f"Our consumer against the same broker mechanism driven by the thinnest pika code (`SelectConnection` "
           f"callbacks, no library, no contract, no header of its own) on the same topology: the program's "
           f"recording of `tiers` (one {TIER_MS} ms tier) and `native` (min {NATIVE_MS[0]} ms) applied as "
           f"`pulumi up` would. {messages:,} messages, each failing once then succeeding ({messages:,} retries, "
           f"{2 * messages:,} deliveries); `plain`: {2 * messages:,} messages, none failing. Same publisher, "
           f"prefetch {PREFETCH}, client on one core. Hand-wired `tiers (reject)`: `basic.reject(requeue=false)`, "
           "the queue dead-letters it to the wait queue whose TTL dead-letters it back (the seed's loop); "
           "`tiers (republish)`: the delivery published as it came to the tier on a confirm-mode channel, the "
           "original acked on the confirm; `native`: `basic.reject(requeue=true)`; `tiers (republish), asyncio`: "
           "`AsyncRetryingConsumer` against the same republish loop written bare on aio-pika (bench/aio_floor.py). "
           f"{rounds} round(s), each running ours and the hand-wired loop back to back in alternating order; "
           "figures are medians over rounds, ratios the median of each round's ours ÷ hand-wired. Broker CPU per "
           "retried delivery: the broker OS process's CPU over the run ÷ retries (÷ deliveries for plain). Targets: "
           f"retries/s ≥ {RATE_TARGET} × hand-wired and broker CPU per retry ≤ {BROKER_CPU_TARGET} ×; plain "
           f"deliveries/s ≥ {RATE_TARGET} × bare pika.", "",
           "| queue type | row | ours /s | hand-wired /s | ÷ hand-wired | broker µs ours | broker µs hand-wired "
           "| ÷ | client µs/delivery ours | client µs/delivery hand-wired | met |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in pairs:
        if p.skipped:
            continue
        met, _ = p.verdict()
        judged = ("information" if p.row in PARTS else "**no**" if not met
                  else "yes" if (p.rate_ratio or 0.0) >= RATE_TARGET else "explained")
        broker = p.broker_ratio
        cpu = "" if broker is None else shown(broker, BROKER_CPU_TARGET)
        out.append(f"| {p.queue_type} | `{p.row}` | {p.median('ours', lambda s: s.rate):,.0f} | "
                   f"{p.median('hand', lambda s: s.rate):,.0f} | {shown(p.rate_ratio or 0.0, RATE_TARGET)} | "
                   f"{p.median('ours', lambda s: s.broker_us):,.0f} | {p.median('hand', lambda s: s.broker_us):,.0f} "
                   f"| {cpu} | {p.median('ours', lambda s: s.client_us):,.1f} | "
                   f"{p.median('hand', lambda s: s.client_us):,.1f} | {judged} |")
    out += ["", "Per round (ours ÷ hand-wired /s; broker CPU ÷; load average 1, 5, 15 min after the pair):", ""]
    for p in pairs:
        if p.skipped:
            out.append(f"- {p.queue_type} `{p.row}` skipped: {p.skipped}")
            continue
        out.append(f"- {p.queue_type} `{p.row}`: " + "; ".join(
            f"{o.rate:,.0f} ÷ {h.rate:,.0f} = {o.rate / h.rate if h.rate else 0:.2f}, broker "
            f"{o.broker_us:,.0f} ÷ {h.broker_us:,.0f} µs (load {load})"
            for o, h, load in zip(p.ours, p.hand, p.loads, strict=True)) + ".")
    out += ["", "What a difference costs (or buys) alone: in the rows "
            + ", ".join(f"`{row}`" for row in PARTS) + ", the `ours` columns are the hand-wired loop with only "
            "that added: our consumer's hand-off of each delivery to its handler thread and back (which keeps the "
            "connection's heartbeats going and `handler_timeout` working while a handler runs long); the "
            "headers our republished copy carries (its attempt and origin) with `mandatory` set (an unroutable copy "
            "comes back, and its original is requeued, instead of vanishing), on bare pika and on the bare aio-pika "
            "loop of the asyncio row (bench/aio_floor.py, `carrying`); and our way of acking, the "
            "deliveries of an I/O pass acked with one `basic.ack(multiple=true)` instead of one ack each (ours "
            "does so for every run of acks from its oldest unsettled delivery, the hand-wired loops ack one by "
            "one).", "", "Targets:", ""]
    for p in pairs:
        if not p.skipped and p.row not in PARTS:
            met, why = p.verdict()
            out.append(f"- {p.queue_type} `{p.row}`: {why}: {'met' if met else '**not met**'}.")
    return [*out, ""]
