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

import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dramatiq
import kombu
from dramatiq import Retry, Worker
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import Retries
from kombu.transport.native_delayed_delivery import calculate_routing_key, level_name

from bench import accuracy, throughput
from bench.accuracy import SLACK_S, Delays, Outcome, amqp_url, declare_kombu, stats_of
from bench.strategies import EXCHANGE, KOMBU, LEVELS, QUEUE, Strategy, plain_config, vhost_config
from bench.throughput import _Handler
from tests.support import amqp
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import publish_ids

DRAMATIQ_THREADS = 8
"""dramatiq's default `worker_threads`."""
DRAMATIQ_TIMEOUTS_MS = (1000, 100)
"""dramatiq's default `worker_timeout`, then a tuned one: how often the worker checks a held message's eta."""


DRAMATIQ = tuple(Strategy(f"dramatiq-{timeout_ms}ms", f"dramatiq `actor.send_with_options(delay=…)` to its "
                          f"RabbitmqBroker; the message waits in `{QUEUE}.DQ` until the in-process Worker "
                          f"({DRAMATIQ_THREADS} threads, `worker_timeout` {timeout_ms} ms) takes it into memory, holds "
                          f"it until its eta and republishes it to `{QUEUE}`; arrival = the actor's call",
                          queue_types=("classic",), ours=False) for timeout_ms in DRAMATIQ_TIMEOUTS_MS)
"""dramatiq at each of DRAMATIQ_TIMEOUTS_MS, as a peer of P1."""
P1_PEERS: tuple[tuple[Strategy, str], ...] = (
    (KOMBU, "quorum"), (KOMBU, "classic"), *((d, "classic") for d in DRAMATIQ))
"""(peer, queue type) in P1's order: kombu on both queue types, dramatiq (classic only) at both timeouts."""


def whole_seconds(plan: Delays) -> Delays:
    """`plan` with only its delays of whole seconds (every peer can run them), 1 s if it has none."""
    whole = tuple(d for d in plan.delays_ms if d % 1000 == 0)
    return replace(plan, delays_ms=whole or (1000,))


@contextmanager
def plain_vhost(broker: Broker, queue_type: str | None = None, prefix: str = "test") -> Iterator[str]:
    """A throw-away vhost named `prefix-…`; with `queue_type`, also the plain QUEUE bound to the fanout EXCHANGE."""
    with throwaway_vhost(broker, prefix) as vhost:
        if queue_type is None:
            call(broker, "PUT", f"vhosts/{esc(vhost)}", {})
            call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(broker.username)}",
                 {"configure": ".*", "write": ".*", "read": ".*"})
        else:
            Deployer(broker, vhost)(plain_config(queue_type))
        yield vhost


# --- dramatiq ---------------------------------------------------------------------------------------------------


class _Dramatiq:
    """A dramatiq RabbitmqBroker on `vhost` with one actor on QUEUE; `calls(message_id, attempt)` per call."""

    def __init__(self, broker: Broker, vhost: str, call_: Callable[[str], None], confirm: bool = True,
                 retries: bool = False) -> None:
        self.broker = RabbitmqBroker(url=amqp_url(broker, vhost), confirm_delivery=confirm,
                                     middleware=[Retries(max_retries=100)] if retries else [])
        options: dict[str, Any] = {"max_retries": 100} if retries else {}
        self.actor = dramatiq.actor(actor_name="bench", queue_name=QUEUE, broker=self.broker, **options)(call_)

    def worker(self, timeout_ms: int, prefetch: int | None = None) -> Any:
        worker = Worker(self.broker, worker_timeout=timeout_ms, worker_threads=DRAMATIQ_THREADS)
        if prefetch is not None:
            worker.queue_prefetch = prefetch
        return worker

    def close(self) -> None:
        self.broker.close()


def dramatiq_p1(broker: Broker, strategy: Strategy, timeout_ms: int, plan: Delays, seed: int = 3) -> Outcome:
    """P1 for dramatiq: `plan.messages` messages sent with the plan's delays (shuffled as ours), timed at the
    actor's call."""
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
                _wait(lambda: len(arrived) >= len(delays), max(delays) / 1000 + SLACK_S, 0.05)
            finally:
                worker.stop(timeout=5000)
        finally:
            peer.close()
    if len(arrived) != len(delays):
        raise RuntimeError(f"{strategy.name}: {len(arrived)} of {len(delays)} messages arrived")
    samples = [(d, (arrived[f"m{i:05d}"] - sent[f"m{i:05d}"]) * 1000 - d) for i, d in enumerate(delays)]
    return Outcome(strategy, "classic", stats_of(strategy.name, samples), seconds=time.monotonic() - start)


def p1(broker: Broker, version: Sequence[int], plan: Delays, progress: Callable[[str], None],
       peers: Sequence[Strategy] | None = None) -> list[Outcome]:
    """P1 of every peer on this broker (or of `peers` only), in P1_PEERS' order, with the whole-second delays of
    `plan`."""
    whole = whole_seconds(plan)
    outcomes = []
    for strategy, queue_type in P1_PEERS:
        if peers is not None and strategy not in peers:
            continue
        progress(f"P1 {strategy.name} ({queue_type}, {whole.messages} messages) …")
        if strategy is KOMBU:
            outcome = accuracy.measure(broker, version, strategy, queue_type, whole)
        else:
            outcome = dramatiq_p1(broker, strategy, int(strategy.name.split("-")[1][:-2]), whole)
        outcomes.append(outcome)
        progress(f"P1 {strategy.name} ({queue_type}): p99 " + ", ".join(
            f"{s.delay_ms} ms {s.percentile(99):.1f}" for s in outcome.stats) + f" ({outcome.seconds:.0f} s)")
    return outcomes


# --- P2: retry loops, each against plain consume with the same library --------------------------------------------

MESSAGES = 1000
"""Messages per run of the peers' P2 (make bench); each fails 3 times."""
RETRY_DELAY_MS = 1000
"""The delay of every retry in the peers' P2: kombu's unit is the whole second, so 1 s is the shortest delay every
peer (and ours) can take."""
KOMBU_DEFAULT_PREFETCH = 8
"""Celery's default prefetch: `worker_prefetch_multiplier` (4) × the worker's concurrency (the CPU count, 2 here);
kombu itself sets none."""
DRAMATIQ_DEFAULT_PREFETCH = 2 * DRAMATIQ_THREADS
"""dramatiq's default `queue_prefetch`: `worker_threads × 2`."""
IDLE_S = 5.0
"""A peer's loop ends when nothing arrived for this long (every copy is due 1 s after it was sent): what has not
come back by then is counted as lost, on an empty queue, instead of waiting for the timeout."""
OURS_LOW_PREFETCH = 10
"""rabbitmq_retry_client's default prefetch until 250 replaced it: measured beside the peers' defaults."""


@dataclass(frozen=True)
class Loop:
    """One row of the peers' P2: a library, plain consume or its retry loop, on a queue type."""

    library: str
    row: str
    queue_type: str
    retries: bool
    default_prefetch: int

    @property
    def plain(self) -> bool:
        return not self.retries


LOOPS = (
    Loop("rabbitmq_retry_client", "plain (rabbitmq_retry_client)", "quorum", False, OURS_LOW_PREFETCH),
    Loop("rabbitmq_retry_client", "levels, 1 s", "quorum", True, OURS_LOW_PREFETCH),
    Loop("kombu", "plain (kombu)", "quorum", False, KOMBU_DEFAULT_PREFETCH),
    Loop("kombu", "kombu native delayed delivery, 1 s", "quorum", True, KOMBU_DEFAULT_PREFETCH),
    Loop("dramatiq", "plain (dramatiq)", "classic", False, DRAMATIQ_DEFAULT_PREFETCH),
    Loop("dramatiq", "dramatiq Retry(delay=1 s)", "classic", True, DRAMATIQ_DEFAULT_PREFETCH),
)
"""Ours and kombu on quorum queues (Celery's native delayed delivery is its quorum-queue path), dramatiq on the
classic queues it declares."""


def _kombu_loop(broker: Broker, vhost: str, tally: _Handler, messages: int, prefetch: int) -> None:
    """A kombu consumer on QUEUE: a failed message is republished as Celery retries a task on a quorum queue (a new
    message through `celery_delayed_27` with the countdown's routing key, without x-death), then acked. Celery's
    defaults: no publisher confirms."""
    key = calculate_routing_key(RETRY_DELAY_MS // 1000, QUEUE)
    deadline = time.monotonic() + throughput.TIMEOUT_S
    options = {"socket_settings": {socket.TCP_USER_TIMEOUT: 0}} if os.environ.get("BENCH_KOMBU_NO_USER_TIMEOUT") else {}
    with kombu.Connection(amqp_url(broker, vhost)) as connection, \
            kombu.Connection(amqp_url(broker, vhost), transport_options=options) as publishing:
        channel = connection.channel()
        producer = kombu.Producer(publishing.channel())  # its own connection, as Celery's producer pool

        def on_message(body: Any, message: Any) -> None:
            message_id = str(message.properties.get("message_id"))
            if not tally.succeeds(message_id):
                producer.publish(message.body, exchange=level_name(27), routing_key=key, delivery_mode=2,
                                 message_id=message_id, content_type=message.content_type,
                                 content_encoding=message.content_encoding, retry=True)
            message.ack()

        with kombu.Consumer(channel, queues=[kombu.Queue(QUEUE, no_declare=True)], callbacks=[on_message],
                            prefetch_count=prefetch, accept=None):
            idle_since = time.monotonic()
            while tally.done < messages and time.monotonic() < deadline:
                calls = tally.calls
                with suppress(TimeoutError):
                    connection.drain_events(timeout=0.2)
                if tally.calls != calls:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > IDLE_S:
                    break  # nothing more will come: the caller counts what never came back


def _dramatiq_loop(broker: Broker, vhost: str, tally: _Handler, messages: int, prefetch: int,
                   started: Callable[[], None]) -> None:
    """dramatiq's Worker in this process: the actor raises `Retry(delay=1000)` for a failed attempt (its Retries
    middleware sends the message to QUEUE.DQ with an eta; the worker holds it and republishes it). dramatiq's
    defaults: no publisher confirms. `started()` once the messages are in QUEUE, before the worker starts."""
    logging.getLogger("dramatiq").setLevel(logging.CRITICAL)  # a log line with a traceback per retry otherwise

    def act(message_id: str) -> None:
        if not tally.succeeds(message_id):
            raise Retry(delay=RETRY_DELAY_MS)

    peer = _Dramatiq(broker, vhost, act, confirm=False, retries=True)
    try:
        _send_dramatiq(peer, broker, vhost, messages)
        started()
        worker = peer.worker(DRAMATIQ_TIMEOUTS_MS[0], prefetch)
        worker.start()
        try:
            deadline = time.monotonic() + throughput.TIMEOUT_S
            calls, idle_since = tally.calls, time.monotonic()
            while tally.done < messages and time.monotonic() < deadline:
                time.sleep(0.01)
                if tally.calls != calls:
                    calls, idle_since = tally.calls, time.monotonic()
                elif time.monotonic() - idle_since > IDLE_S:
                    break
        finally:
            worker.stop(timeout=10000)
    finally:
        peer.close()


def _send_dramatiq(peer: _Dramatiq, broker: Broker, vhost: str, messages: int) -> None:
    """`messages` dramatiq messages on QUEUE, each with its id as its one argument; returns once QUEUE holds them
    all (sent without confirms, as dramatiq does by default, then counted)."""
    peer.broker.declare_queue(QUEUE)
    for i in range(messages):
        peer.actor.send(f"t{i:05d}")
    if not _wait(lambda: _ready(broker, vhost, QUEUE) >= messages, 60):
        raise TimeoutError(f"dramatiq: fewer than {messages} messages reached {QUEUE}")


def run_loop(broker: Broker, loop: Loop, vhost: str, contract: dict[str, Any] | None, messages: int,
             prefetch: int) -> tuple[Any, int]:
    """One run of `loop` in its prepared vhost: a throughput.Run, and how many messages never succeeded (a peer's
    loop ends IDLE_S after its last delivery; ours raises instead, as in P2)."""
    published = messages if loop.retries else throughput.plain_messages(messages)
    failures = throughput.FAILURES if loop.retries else 0
    if loop.library == "rabbitmq_retry_client":
        assert contract is not None
        sample, lost = throughput.consume(broker, vhost, contract, "reject", published, failures, prefetch), 0
    else:
        tally = _Handler(failures)
        stopwatch: list[Callable[[], tuple[float, float]]] = []
        if loop.library == "kombu":
            publish_ids(broker, vhost, EXCHANGE, [f"t{i:05d}" for i in range(published)])
            stopwatch.append(throughput.cpu_stopwatch(broker))
            _kombu_loop(broker, vhost, tally, published, prefetch)
        else:
            _dramatiq_loop(broker, vhost, tally, published, prefetch,
                           lambda: stopwatch.append(throughput.cpu_stopwatch(broker)))
        sample = throughput.Sample(tally.calls, tally.calls - tally.done, tally.last - tally.first, *stopwatch[0]())
        lost = published - tally.done
    return throughput.Run.of(loop.queue_type, loop.row, published, prefetch, sample), lost


@contextmanager
def prepared(broker: Broker, loop: Loop) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """`loop`'s throw-away vhost, deployed: (vhost, our contract or None)."""
    if loop.library == "dramatiq":
        with plain_vhost(broker) as vhost:
            yield vhost, None
    elif loop.row.startswith("levels"):
        with throwaway_vhost(broker) as vhost:
            config = vhost_config(LEVELS, loop.queue_type, (RETRY_DELAY_MS,), throughput.FAILURES,
                                  unit_ms=RETRY_DELAY_MS)  # the default unit, 1 s, as kombu's
            yield vhost, Deployer(broker, vhost)(config).contracts[QUEUE]
    else:
        with plain_vhost(broker, loop.queue_type) as vhost:
            if loop.library == "kombu" and loop.retries:
                declare_kombu(broker, vhost, loop.queue_type)
            yield vhost, throughput.plain_contract(vhost, loop.queue_type)


@dataclass(frozen=True)
class Loops:
    """The peers' P2: every row at prefetch 250 (`judged`, `rounds` rounds) and at each library's default
    (`defaults`, one round)."""

    judged: list[Any]
    defaults: list[Any]
    rounds: int
    messages: int
    lost: dict[str, list[int]]
    """Messages that never succeeded, per row, one count per run (judged rounds, then the defaults' run)."""


def retry_loops(broker: Broker, messages: int, rounds: int, progress: Callable[[str], None],
                defaults: bool = True) -> Loops:
    """Every LOOPS row at prefetch 250 in `rounds` rounds (each: every row once; a retry row's ratio is to its
    library's plain run of the same round), then (`defaults`) once at each library's default prefetch; client on
    one core."""
    results: dict[str, dict[str, list[Any]]] = {"judged": {}, "defaults": {}}
    lost: dict[str, list[int]] = {}
    with ExitStack() as stack:
        stack.enter_context(throughput.client_core())
        targets = [(loop, *stack.enter_context(prepared(broker, loop))) for loop in LOOPS]
        schedule = [("judged", number, 250) for number in range(1, rounds + 1)] + [("defaults", 1, 0)] * defaults
        for group, number, prefetch in schedule:
            for loop, vhost, contract in targets:
                chosen = prefetch or loop.default_prefetch
                run, missing = run_loop(broker, loop, vhost, contract, messages, chosen)
                results[group].setdefault(loop.row, []).append(run)
                lost.setdefault(loop.row, []).append(missing)
                progress(f"P2 peers prefetch {chosen} round {number} {loop.row}: {run.rate:,.0f} deliveries/s"
                         + (f", {missing} messages lost" if missing else ""))
                if missing:  # what was lost is not in a queue: the next run starts empty all the same
                    purge(broker, vhost)
    return Loops(_pair(results["judged"]), _pair(results["defaults"]) if defaults else [], rounds, messages, lost)


def purge(broker: Broker, vhost: str) -> None:
    """Empty every queue of `vhost` (a straggler of a run that lost messages must not count in the next)."""
    for queue in call(broker, "GET", f"queues/{esc(vhost)}")[1]:
        call(broker, "DELETE", f"queues/{esc(vhost)}/{esc(queue['name'])}/contents")


def _pair(per_row: dict[str, list[Any]]) -> list[Any]:
    """throughput.combine per library: each retry row's ratios to its own library's plain runs."""
    combined: list[Any] = []
    for library in dict.fromkeys(loop.library for loop in LOOPS):
        rows = [loop.row for loop in LOOPS if loop.library == library]
        plain = next(loop.row for loop in LOOPS if loop.library == library and loop.plain)
        got = throughput.combine({throughput.PLAIN: per_row[plain], **{r: per_row[r] for r in rows if r != plain}})
        combined += [replace(got[0], row=plain), *got[1:]]
    return combined


# --- What dramatiq keeps in the worker: its memory holding delayed messages, and a kill -9 ----------------------

HOLD_DELAY_MS = 15000
"""The delay of the held messages, from the first one sent (every one gets the same eta): long enough to send them
all, measure and kill the worker before the eta."""


@dataclass(frozen=True)
class Holding:
    """dramatiq's worker holding `sent` delayed messages: `held` of them in its memory (its delay prefetch bounds
    it), its RSS before and while holding, then kill -9 and a fresh worker: what came back and what arrived."""

    sent: int
    held: int
    rss_before_kib: int
    rss_holding_kib: int
    back_in_queue: int
    """Ready in QUEUE.DQ after the kill: held messages the broker took back (unacked), plus those never held."""
    delivered: int
    """Distinct messages the actor ran once a fresh worker took over."""
    duplicates: int
    lost: int
    seconds: float
    delay_ms: int = HOLD_DELAY_MS
    killed_before_eta: bool = True
    """False: the eta passed before the kill (sending took that long), so some were delivered before it."""

    @property
    def per_message_bytes(self) -> float:
        return 1024 * (self.rss_holding_kib - self.rss_before_kib) / self.held if self.held else 0.0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _worker_process(url: str, log: Path) -> subprocess.Popen[bytes]:
    """A dramatiq Worker (default settings) in a process of its own, its actor appending each id to `log`."""
    return subprocess.Popen([sys.executable, "-m", "bench.peers", "worker", url, str(log)],
                            cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait(done: Callable[[], bool], seconds: float, poll_s: float = 0.1) -> bool:
    """Poll `done` every `poll_s` for at most `seconds` (a bound for an eventual condition, not a figure); its last
    answer."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(poll_s)
    return done()


def _ready(broker: Broker, vhost: str, queue: str) -> int:
    return amqp.message_counts(broker, vhost, [queue])[queue]


def holding(broker: Broker, sent: int, tmp: Path, delay_ms: int = HOLD_DELAY_MS) -> Holding:
    """Send `sent` messages delayed HOLD_DELAY_MS to a dramatiq worker process; once it holds what its delay prefetch
    allows, read its RSS, kill -9 it, count what is back in QUEUE.DQ, start a fresh worker and count the arrivals."""
    start = time.monotonic()
    log = tmp / f"dramatiq-held-{sent}.log"
    log.write_text("")
    with plain_vhost(broker) as vhost:
        url = amqp_url(broker, vhost)
        peer = _Dramatiq(broker, vhost, lambda _: None, confirm=False)  # sent in a second, well before the eta
        try:
            peer.broker.declare_queue(QUEUE, ensure=True)
            first = _worker_process(url, log)
            try:
                _wait(lambda: _consumers(broker, vhost, f"{QUEUE}.DQ") >= 1, 60)
                time.sleep(1.0)  # its threads started
                before = _rss_kib(first.pid)
                eta = time.monotonic() + delay_ms / 1000  # the same eta for every message, however long sending takes
                for i in range(sent):
                    left = max(1, int(1000 * (eta - time.monotonic())))
                    peer.actor.send_with_options(args=(f"h{i:05d}",), delay=left)
                expected_held = min(sent, DRAMATIQ_THREADS * 1000)
                _wait(lambda: _ready(broker, vhost, f"{QUEUE}.DQ") <= sent - expected_held, 60)
                time.sleep(1.0)  # the last deliveries decoded and queued in memory
                ready = _ready(broker, vhost, f"{QUEUE}.DQ")
                rss = _rss_kib(first.pid)
                first.send_signal(signal.SIGKILL)
                killed_before_eta = time.monotonic() < eta
            finally:
                first.kill()
                first.wait()
            _wait(lambda: _ready(broker, vhost, f"{QUEUE}.DQ") >= sent, 30)
            back = _ready(broker, vhost, f"{QUEUE}.DQ")
            second = _worker_process(url, log)
            try:
                _wait(lambda: len(set(log.read_text().split())) >= sent, delay_ms / 1000 + SLACK_S, 0.2)
                time.sleep(2.0)  # a duplicate would show up by now
            finally:
                second.terminate()
                second.wait(30)
        finally:
            peer.close()
    ids = log.read_text().split()
    delivered = len(set(ids))
    return Holding(sent, sent - ready, before, rss, back, delivered, len(ids) - delivered, sent - delivered,
                   time.monotonic() - start, delay_ms, killed_before_eta)


def _consumers(broker: Broker, vhost: str, queue: str) -> int:
    with amqp.channel(broker, vhost, confirms=False) as opened:
        return int(opened.queue_declare(queue, passive=True).method.consumer_count)


def _worker_main(url: str, log: str) -> None:
    """`python -m bench.peers worker URL LOG`: a dramatiq Worker with its defaults until killed."""
    rabbit = RabbitmqBroker(url=url)
    lock = threading.Lock()

    def record(message_id: str) -> None:
        with lock, open(log, "a") as out:
            out.write(message_id + "\n")

    dramatiq.actor(actor_name="bench", queue_name=QUEUE, broker=rabbit)(record)
    rabbit.declare_queue(QUEUE)
    worker = Worker(rabbit)
    worker.start()
    def stop(*_: object) -> None:
        worker.stop(timeout=5000)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        _worker_main(sys.argv[2], sys.argv[3])
