"""Alerts: how long the generated rules take to fire after the event, on the real Prometheus of
scripts/prometheus.sh scraping each local broker's rabbitmq_prometheus, against the bound the configuration sets.

Per broker, in a throw-away vhost (`alerts-…`) with one retryable quorum queue `work` and its rules as `make alerts`
writes them (scoped to the broker by `alerts.selector`), each round times, polling `/api/v1/alerts` every 0.1 s:
- `parked` (`for: 0s`, then `for: 10s`): from a message published (confirmed) into `work`'s error exchange, as the
  client parks one, until the alert is firing; then from `queue.purge` of the error queue until it is gone;
- `no_consumer` (`for: 0s`): from closing the only consumer of `work` while messages wait until the alert fires.

And what the alert points to, at scale: reading 100,000 parked messages with `parked summary` and `parked list` at
their default limit (10,000), beside `parked list` reading every one (quick: 3,000 at a limit of 1,000).

The anchor: `for` + one scrape interval + one evaluation interval, the longest Prometheus itself can take (an
alert can fire as soon as `for` after the event, when a scrape and an evaluation follow it at once). RabbitMQ adds
its own: a queue's figures are refreshed every `collect_statistics_interval` (5 s by default), so the measured
figure can exceed the anchor by up to that much.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pika.exceptions
import yaml

from bench import report
from components.config.load import load_stack_config
from components.model.durations import parse_duration
from components.plan.alert_rules import rule_file, stack_rules
from components.pulumi.stack_resources import plan_stack
from rabbitmq_retry_client import ParkedQueue, Selection
from rabbitmq_retry_client.cli import LIST_LIMIT
from rabbitmq_retry_client.management import ManagementError
from tests.support import prometheus
from tests.support.amqp import parameters
from tests.support.deploy import Deployer, throwaway_vhost, unreachable
from tests.support.mirror import Broker
from tests.support.retrying import retryable_queue

ROUNDS = 3
"""Rounds per rule and broker in `make bench`: each waits on Prometheus's intervals and `for`, about 15 s; five
rounds made the alerts the longest part of `make bench` (546 s) for figures whose spread is the 2 s intervals."""
STATS_INTERVAL_S = 5.0
"""RabbitMQ's default `collect_statistics_interval`: how often a queue's figures change in the plugin's output."""
TIMEOUT_S = 120.0
"""A bound for an eventual condition (the alert fired or resolved), not a figure."""
POLL_S = 0.1


@dataclass
class Timing:
    broker: str
    rule: str
    for_s: float
    fire_s: list[float] = field(default_factory=list)
    resolve_s: list[float] = field(default_factory=list)


def intervals() -> tuple[float, float]:
    """(scrape, evaluation) interval of the running Prometheus, in seconds, from its loaded configuration."""
    loaded = yaml.safe_load(prometheus.get("/api/v1/status/config")["yaml"])["global"]
    return (parse_duration(loaded["scrape_interval"]) / 1000, parse_duration(loaded["evaluation_interval"]) / 1000)


def _until(condition: Callable[[], bool], what: str) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > TIMEOUT_S:
            raise TimeoutError(f"not within {TIMEOUT_S:.0f}s: {what}")
        time.sleep(POLL_S)
    return time.monotonic() - start


def _rules(broker: Broker, config: dict[str, object], parked_for: str) -> dict[str, object]:
    stack = load_stack_config({"vhosts": [config], "alerts": {
        "selector": {"broker": broker.name}, "parked": {"for": parked_for}, "no_consumer": {"for": "0s"}}})
    return rule_file(stack_rules("bench", stack.alerts, [p for _, p in plan_stack(stack, "shovel")]))


@contextmanager
def _work_vhost(broker: Broker) -> Iterator[tuple[str, dict[str, object]]]:
    """A throw-away vhost's name and its config: the retryable quorum queue `work` (one 1 s tier) bound to `in`."""
    with throwaway_vhost(broker, "alerts") as vhost:
        yield vhost, {"name": vhost, "exchanges": [{"name": "in", "type": "direct"}],
                      "queues": [retryable_queue("work", "quorum", ["1s"], 1, routing_key="work")]}


def measure(broker: Broker, rounds: int, progress: Callable[[str], None]) -> list[Timing]:
    """Every rule's timings on `broker`: `rounds` rounds each."""
    timings: list[Timing] = []
    with _work_vhost(broker) as (vhost, config):
        labels = {"alertname": "RabbitmqRetryMessagesParked", "vhost": vhost, "queue": "work"}
        Deployer(broker, vhost)(config)
        connection = pika.BlockingConnection(parameters(broker, vhost))
        channel = connection.channel()
        channel.confirm_delivery()
        for parked_for in ("0s", "10s"):
            parked = Timing(broker.name, "parked", 0.0 if parked_for == "0s" else parse_duration(parked_for) / 1000)
            with prometheus.loaded(f"bench-{vhost}", _rules(broker, config, parked_for)):
                for _ in range(rounds):
                    _until(lambda: not prometheus.alerts(**labels), "no parked alert before the round")
                    channel.basic_publish("work.error", "", b"parked", pika.BasicProperties(delivery_mode=2))
                    parked.fire_s.append(_until(lambda: bool(prometheus.firing(**labels)), "parked fires"))
                    channel.queue_purge("work.error")
                    parked.resolve_s.append(_until(lambda: not prometheus.alerts(**labels), "parked resolves"))
                    progress(f"{broker.name} alerts parked for {parked_for}: fired after {parked.fire_s[-1]:.1f} s, "
                             f"resolved after {parked.resolve_s[-1]:.1f} s")
            timings.append(parked)
        idle = Timing(broker.name, "no_consumer", 0.0)
        labels = {**labels, "alertname": "RabbitmqRetryNoConsumer"}
        with prometheus.loaded(f"bench-{vhost}", _rules(broker, config, "0s")):
            for _ in range(rounds):
                consumer = pika.BlockingConnection(parameters(broker, vhost))
                held = consumer.channel()
                held.basic_qos(prefetch_count=1)
                held.basic_consume("work", lambda ch, method, props, body: None)
                for _ in range(3):
                    channel.basic_publish("in", "work", b"waiting", pika.BasicProperties(delivery_mode=2))
                consumer.process_data_events(0.5)
                _until(lambda: not prometheus.alerts(**labels), "no alert while it consumes")
                time.sleep(STATS_INTERVAL_S + 2)  # the broker's figures show the consumer before it stops
                consumer.close()
                idle.fire_s.append(_until(lambda: bool(prometheus.firing(**labels)), "no_consumer fires"))
                channel.queue_purge("work")
                idle.resolve_s.append(_until(lambda: not prometheus.alerts(**labels), "no_consumer resolves"))
                progress(f"{broker.name} alerts no_consumer: fired after {idle.fire_s[-1]:.1f} s")
        timings.append(idle)
        connection.close()
    return timings


@dataclass
class ReadCost:
    broker: str
    parked: int
    what: str
    limit: int
    read: int
    seconds: float


EVERY_MESSAGE_MAX = 10_000
"""`parked list` reading every message, each held unacknowledged until the read ends (what it did before the
limit), is timed only up to this many parked: past it the read grows faster than the count (a quorum queue's
`basic.get` with that many unsettled), and one such read of 100,000 is kept in the results bench/README.md links."""


def parked_cost(broker: Broker, count: int, limit: int, progress: Callable[[str], None]) -> list[ReadCost]:
    """What reading a large error queue costs: `count` messages parked in `work.error` (published straight into its
    error exchange with the parking headers), then `parked summary` and `parked list` at their default limit beside
    `parked list` reading every message (what it did before the limit: every one held unacknowledged)."""
    costs = []
    with _work_vhost(broker) as (vhost, config):
        deployment = Deployer(broker, vhost)(config)
        connection = pika.BlockingConnection(parameters(broker, vhost))
        channel = connection.channel()
        for n in range(count):
            headers = {"error-reason": f"ValueError: case {n % 7}", "first-failure-at": "2026-11-27T00:00:00.000Z",
                       "original-routing-key": "work", "attempts": 2}
            channel.basic_publish("work.error", "", b"x" * 100, pika.BasicProperties(
                delivery_mode=2, message_id=f"m{n}", headers=headers))
            if n % 5000 == 4999:
                connection.process_data_events(0)
        _until(lambda: int(channel.queue_declare("work.error", passive=True).method.message_count) >= count,
               f"{count} messages parked")
        connection.close()
        progress(f"{broker.name} alerts: {count:,} parked")
        contract = deployment.contracts["work"]
        reads = [("summary", limit), ("list", limit)] + ([("list, every message", count)]
                                                         if count <= EVERY_MESSAGE_MAX else [])
        for what, bound in reads:
            started = time.monotonic()
            with ParkedQueue(parameters(broker, vhost), contract) as queue:
                if what == "summary":
                    queue.count()
                    queue.oldest()
                read = sum(g.count for g in queue.summary(Selection(limit=bound)))
            costs.append(ReadCost(broker.name, count, what, bound, read, time.monotonic() - started))
            progress(f"{broker.name} alerts: parked {what} --limit {bound:,}: {costs[-1].seconds:.1f} s")
    return costs


def _s(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}–{max(values):.1f})"


def results_file(brokers: Sequence[Broker], context: report.Context, out: Path, rounds: int, parked: int,
                 limit: int, progress: Callable[[str], None], beside: str = "",
                 before_reads: Callable[[], None] = lambda: None) -> Path | None:
    """Every answering broker's timings in `<out>/<date>-alerts.md`; None when Prometheus or no broker answers.
    `parked` messages are read at `limit` (the commands' default, LIST_LIMIT, in a full run). `beside`: what ran
    beside the rounds (for the file's header); `before_reads` is called between the rounds and the reads, which
    load the broker and the client and so run alone."""
    prometheus.ensure_running()
    scrape, evaluation = intervals()
    started = time.monotonic()
    answering = [b for b in brokers if not unreachable(b)]
    timings: list[Timing] = []
    costs: list[ReadCost] = []
    failed: list[str] = []

    def on_each_broker(part: str, run: Callable[[Broker], None]) -> None:
        for b in answering:
            try:
                run(b)
            except (OSError, pika.exceptions.AMQPError, ManagementError, TimeoutError) as error:  # a broker restarted
                failed.append(f"- {b.name}, {part}: not measured, {type(error).__name__}: {error}")
                progress(failed[-1][2:])

    on_each_broker("time to fire", lambda b: timings.extend(measure(b, rounds, progress)))
    before_reads()
    on_each_broker(f"reading {parked:,} parked", lambda b: costs.extend(parked_cost(b, parked, limit, progress)))
    if not timings:
        return None
    version = re.sub(r"\s+", " ", prometheus.get("/api/v1/status/buildinfo")["version"])
    lines = [f"| Prometheus | {version} on 127.0.0.1 (scripts/prometheus.sh), scrape interval {scrape:g} s, "
             f"evaluation interval {evaluation:g} s |",
             f"| rounds | {rounds} per rule and broker |",
             *([f"| beside the rounds | {beside} |"] if beside else [])]
    text = report.header(f"Benchmark: alerts firing on a real Prometheus, {context.date}", context, lines, started)
    text += ["## Time to fire and to resolve", "",
             "From the event (a message parked, the consumer gone; the error queue purged) until Prometheus's "
             "`/api/v1/alerts` shows the alert firing (resolved: gone), median (min–max). Prometheus takes at most "
             f"`for` + one scrape interval + one evaluation interval; RabbitMQ refreshes a queue's figures every "
             f"{STATS_INTERVAL_S:g} s (`collect_statistics_interval`), which that bound leaves out.", "",
             "| broker | rule | `for` | `for` + scrape + evaluation | fired after | resolved after |",
             "|---|---|---|---|---|---|"]
    for t in timings:
        text.append(f"| {t.broker} | `{t.rule}` | {t.for_s:g} s | {t.for_s + scrape + evaluation:g} s | "
                    f"{_s(t.fire_s)} | {_s(t.resolve_s)} |")
    text += ["", f"## Reading {parked:,} parked messages", "",
             "What an alert points to: the error queue, read with `basic.get`, each message held unacknowledged "
             f"until the read ends. `parked summary` (exact count, the oldest from the head, reasons of at most "
             f"{limit:,}) and `parked list --limit {limit:,}` (the commands' default is {LIST_LIMIT:,}), beside "
             f"`parked list` reading every message (what it did before the limit; timed up to {EVERY_MESSAGE_MAX:,} "
             "parked, bench/README.md links a run at 100,000). 100-byte bodies, one quorum "
             "error queue.", "",
             "| broker | parked | command | held at most | read | seconds |", "|---|---|---|---|---|---|"]
    for c in costs:
        text.append(f"| {c.broker} | {c.parked:,} | `parked {c.what}` | {c.limit:,} | {c.read:,} | {c.seconds:.1f} |")
    if failed:
        text += ["", "## Not measured", "", *failed]
    return report.write(out / f"{context.date}-alerts.md", [*text, ""], progress)
