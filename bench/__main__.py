"""`make bench`: which strategy to pick and what it costs, measured in one run on each local broker.

    .venv/bin/python -m bench [--quick] [--brokers 3.10 4.3] [--parts p1 p2 p3] [--out DIR] [--floor-rounds N]

- P1 delay accuracy (bench/accuracy.py): lateness per strategy and delay, seed 003's anchor beside ours;
- P2 retry throughput (bench/throughput.py): deliveries/s through the retry loop against plain consume, then
  against the same broker mechanism wired by hand (bench/floor.py; `--parts floor` runs only that);
- P3 plan cost (bench/plan_cost.py, broker-free): program under mocks, SDK floor, check_vhost, make plan and
  make review at 100 and 1,000 retryable queues;
- alerts (bench/alerts.py): how long the generated alerting rules take to fire on the real Prometheus of
  scripts/prometheus.sh, against `for` + scrape + evaluation interval; their rounds run beside P3 (they wait on
  Prometheus, P3 keeps one core busy), their reads of 100,000 parked messages after it, alone;
- levels-encoding (bench/levels_encoding.py, only when named in --parts): the broker's CPU and copies/s per
  delayed copy of today's `levels` routing key against cheaper encodings, on every broker, in one file.

Writes `<out>/<date>-rabbitmq-<version>.md` per broker (P1, P2), `<out>/<date>-alerts.md` and
`<out>/<date>-plan-cost.md` (P3), each with
its PNG plots beside it. `--quick` (or BENCH_QUICK=1): fewer messages, shorter delays, 10 and 100 queues, written
to bench/results/quick/ (not kept in git) unless --out says otherwise. Brokers come from RABBITMQ_BROKERS as for
the tests (tests/support/deploy.py); each strategy runs in a throw-away vhost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import accuracy, alerts, cluster, floor, levels_encoding, peers, peers_report, plan_cost, report, throughput
from bench.strategies import KOMBU, P1_STRATEGIES, SEED_003, Strategy
from tests.support.admin import parse_version
from tests.support.deploy import configured_brokers, unreachable
from tests.support.mirror import Broker, call

RESULTS = Path(__file__).resolve().parent / "results"
P1_QUEUE_TYPE = "quorum"
"""The default queue type, the only one `native` runs on, and the anchor's: P1's tables name other types."""
QUEUE_TYPES = ("classic", "quorum")
DEFAULT_PARTS = ("p1", "p2", "p3", "alerts")
QUICK_PARTS = ("p1", "p2", "p3")
"""`BENCH_QUICK=1 make bench` leaves the alerts out: their rounds wait on Prometheus's scrape and evaluation
intervals and `for`, which a quick run cannot shorten (`--quick --parts alerts` runs them quick)."""
P1_ROUNDS = 3
"""Rounds of P1 for ours and kombu in `make bench` (the anchor and dramatiq run in the first only: the anchor's p99
is seconds, dramatiq's its worker_timeout, neither a few ms from ours): a few ms of the broker's own TTL expiry
flip a single round's verdict, so our worst p99 is judged over the rounds (`peers_report.p1_rounds_section`)."""


@dataclass(frozen=True)
class Scale:
    """How much a run measures: FULL for `make bench`, QUICK for a smoke run (`--quick`, BENCH_QUICK=1)."""

    plan: accuracy.Delays
    p1_rounds: int
    p2_messages: int
    p2_rounds: int
    peer_messages: int
    """Messages of each peer's retry loop (bench/peers.py)."""
    hold_delay_ms: int
    held: tuple[int, ...]
    """Messages a dramatiq worker holds, beside the last broker's P2 (its memory is the client's, measured once)."""
    floor_messages: int
    floor_rounds: int
    plan_cost_sizes: tuple[int, ...]
    alert_rounds: int
    parked: int
    """Parked messages the alerts' part reads back, `limit` at a time."""
    limit: int
    encoding_messages: int
    encoding_rounds: int
    name: str
    results: Path
    """Where its files go unless --out says otherwise."""


FULL = Scale(accuracy.FULL, P1_ROUNDS, 2000, throughput.ROUNDS, peers.MESSAGES, peers.HOLD_DELAY_MS, (1000, 10000),
             floor.MESSAGES, floor.ROUNDS, (100, 1000), alerts.ROUNDS, 100_000, alerts.LIST_LIMIT, 3000,
             levels_encoding.ROUNDS, "full", RESULTS)
QUICK = Scale(accuracy.QUICK, 1, 300, 1, 50, 3000, (200,), floor.QUICK_MESSAGES, 1, (10, 30), 2, 3_000, 1_000, 300, 1,
              "quick", RESULTS / "quick")


def p1_runs() -> list[tuple[Strategy, str]]:
    """P1's runs of ours and the anchor, in order: every strategy on quorum queues (the default type), then ours
    again on classic queues where they run there (the peers run on both), so each is compared on the same type;
    the anchor only on quorum (its head-of-line blocking does not depend on the type)."""
    quorum = [(strategy, P1_QUEUE_TYPE) for strategy in P1_STRATEGIES]
    classic = [(strategy, "classic") for strategy in P1_STRATEGIES
               if strategy.ours and "classic" in strategy.queue_types]
    return quorum + classic


class Progress:
    """Timestamped progress lines on stdout, as the run goes."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, line: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f} s] {line}", flush=True)


Outcomes = list[accuracy.Outcome]


def p1(broker: Broker, version: tuple[int, ...], scale: Scale, progress: Callable[[str], None]) -> list[Outcomes]:
    """P1's outcomes per round: the first (every strategy and peer), then ours and kombu again."""
    outcomes: Outcomes = []
    for strategy, queue_type in p1_runs():
        progress(f"P1 {strategy.name} ({queue_type}, {scale.plan.messages} messages) …")
        outcome = accuracy.measure(broker, version, strategy, queue_type, scale.plan)
        outcomes.append(outcome)
        if outcome.skipped:
            progress(f"P1 {strategy.name} ({queue_type}) skipped: {outcome.skipped}")
        else:
            progress(f"P1 {strategy.name} ({queue_type}): p99 " + ", ".join(
                f"{s.delay_ms} ms {s.percentile(99):.1f}" for s in outcome.stats) + f" ({outcome.seconds:.0f} s)")
    rounds = [outcomes + peers.p1(broker, version, scale.plan, progress)]
    for number in range(2, scale.p1_rounds + 1):
        again = [accuracy.measure(broker, version, strategy, queue_type, scale.plan)
                 for strategy, queue_type in p1_runs() if strategy is not SEED_003]
        again += peers.p1(broker, version, scale.plan, progress, peers=(KOMBU,))
        progress(f"P1 round {number}/{scale.p1_rounds}: our worst p99 "
                 f"{max(s.percentile(99) for o in again if o.strategy.ours for s in o.stats):.1f} ms")
        rounds.append(again)
    return rounds


@dataclass
class Measured:
    """What one broker's part of the run measured, each part empty (or None) when it did not run."""

    rounds: list[Outcomes]
    """P1's outcomes per round; the first has every strategy and peer."""
    runs: list[throughput.Run]
    loops: peers.Loops | None
    pairs: list[floor.Pair]
    holdings: list[peers.Holding]
    on_cluster: cluster.ClusterP1 | None

    def sections(self, release: str, stem: str, out: Path, scale: Scale, parts: Sequence[str]) -> list[str]:
        """The results file's sections after its header, with their plots written beside it in `out`."""
        outcomes, text = self.rounds[0], []
        if outcomes:
            report.p1_plot(outcomes, f"P1 delay accuracy, RabbitMQ {release}\n{scale.plan.messages} messages in "
                           f"flight, {P1_QUEUE_TYPE} queues unless named", out / f"{stem}-p1.png")
            text += report.p1_section(outcomes, scale.plan, P1_QUEUE_TYPE, f"{stem}-p1.png")
        if outcomes and self.on_cluster:
            text += peers_report.cluster_section(self.on_cluster, outcomes)
        if self.runs:
            report.p2_plot(self.runs, f"P2 retry throughput, RabbitMQ {release}: {scale.p2_messages} messages, "
                           f"{throughput.FAILURES} failures each; plain {throughput.plain_messages(scale.p2_messages)} "
                           "messages", out / f"{stem}-p2.png")
            text += report.p2_section(self.runs, scale.p2_messages, scale.p2_rounds, f"{stem}-p2.png")
        if self.pairs:
            text += floor.section(self.pairs, scale.floor_messages, scale.floor_rounds)
        if self.loops:
            peers_report.p2_peers_plot(self.loops, f"P2 beside the peers, RabbitMQ {release}: {self.loops.messages} "
                                       f"messages, {throughput.FAILURES} retries of 1 s each",
                                       out / f"{stem}-p2-peers.png")
            text += peers_report.p2_peers_section(self.loops, f"{stem}-p2-peers.png")
        text += peers_report.holding_section(self.holdings) if self.holdings else []
        text += peers_report.targets_section(outcomes, self.runs, self.loops, self.pairs)
        return text + (peers_report.p1_rounds_section(self.rounds) if "p1" in parts else [])


def measure(broker: Broker, version: tuple[int, ...], context: report.Context, scale: Scale, parts: Sequence[str],
            progress: Callable[[str], None], held: Sequence[int]) -> Measured:
    """P1 and P2 on one broker, each with the peers beside ours (P1 also on the cluster of the broker's version when
    there is one), and dramatiq holding `held` messages."""
    rounds = p1(broker, version, scale, progress) if "p1" in parts else [[]]
    p2 = "p2" in parts
    runs = [run for queue_type in QUEUE_TYPES if p2 for run in throughput.measure_rounds(
        broker, version, queue_type, scale.p2_messages, rounds=scale.p2_rounds, progress=progress)]
    loops = peers.retry_loops(broker, scale.peer_messages, min(scale.p2_rounds, 2), progress,
                              defaults=not context.quick) if p2 else None
    pairs = (floor.measure(broker, version, scale.floor_messages, scale.floor_rounds, progress)
             if {"p2", "floor"} & set(parts) else [])
    # After P2, so that neither a dramatiq worker's 10,000 held messages nor the cluster's work after its own P1
    # shares the cores with P2's throughput figures.
    with tempfile.TemporaryDirectory() as tmp:
        holdings = [peers.holding(broker, count, Path(tmp), scale.hold_delay_ms) for count in held] if p2 else []
    on_cluster = on_the_cluster(version, context, scale, progress) if "p1" in parts else None
    return Measured(rounds, runs, loops, pairs, holdings, on_cluster)


def on_the_cluster(version: tuple[int, ...], context: report.Context, scale: Scale,
                   progress: Callable[[str], None]) -> cluster.ClusterP1 | None:
    """P1 on the cluster of the broker's series (4.x only), or why it did not run."""
    if version < (4, 0, 0):
        return None
    if context.quick:
        return cluster.ClusterP1(cluster.series_of(version), skipped="quick run (BENCH_QUICK)")
    return cluster.p1(cluster.series_of(version), scale.plan, progress)


def broker_file(broker: Broker, context: report.Context, out: Path, scale: Scale, parts: Sequence[str],
                progress: Progress, held: Sequence[int] = ()) -> Path | None:
    """P1 and P2 on one broker (`measure`): the results file and its plots. None when the broker does not answer."""
    if problem := unreachable(broker):
        progress(f"skipped: {problem} (start it with `scripts/brokers.sh ensure all`)")
        return None
    overview = call(broker, "GET", "overview")[1]
    release = overview["rabbitmq_version"]
    stem = f"{context.date}-rabbitmq-{release}"
    started = time.monotonic()
    measured = measure(broker, parse_version(release), context, scale, parts,
                       report.prefixed(progress, f"rabbitmq-{release}"), held)
    lines = [f"| broker | RabbitMQ {release}, Erlang {overview.get('erlang_version', '?')}, "
             f"AMQP {broker.host}:{broker.amqp_port} (`{broker.name}` in RABBITMQ_BROKERS) |",
             f"| queue types | P1 {P1_QUEUE_TYPE}, ours also classic; P2 {' and '.join(QUEUE_TYPES)} |"]
    text = report.header(f"Benchmark: RabbitMQ {release}, {context.date}", context, lines, started, " for this broker")
    text += measured.sections(release, stem, out, scale, parts)
    if "p3" in parts:
        text += [f"P3 (plan cost, broker-free) is in [{context.date}-plan-cost.md]({context.date}-plan-cost.md).", ""]
    return report.write(out / f"{stem}.md", text, progress)


ALERT_ROUNDS = ("the alerts' rounds (bench/alerts.py: a message parked or a consumer closed, then `/api/v1/alerts` "
                "polled every 0.1 s until Prometheus fires), not their reads of the parked messages")
P3_BESIDE = ("P3 (bench/plan_cost.py: broker-free, one core busy); the rounds' figures are seconds set by Prometheus's "
             "intervals and `for`; the reads of the parked messages ran after P3, alone")


def plan_cost_file(context: report.Context, out: Path, sizes: Sequence[int], progress: Progress,
                   beside: str = "") -> Path:
    started = time.monotonic()
    costs = [c for queues in sizes for layout in plan_cost.LAYOUTS
             for c in plan_cost.measure(queues, layout, progress)]
    stem = f"{context.date}-plan-cost"
    report.p3_plot(costs, f"P3 plan cost at {' and '.join(f'{s:,}' for s in sizes)} retryable queues × 3 tiers",
                   out / f"{stem}.png")
    text = report.header(f"Benchmark: plan cost (broker-free), {context.date}", context,
                         [f"| beside it | {beside} |"] if beside else [], started)
    text += report.p3_section(costs, sizes, f"{stem}.png")
    return report.write(out / f"{stem}.md", text, progress)


def command(quick: bool, parts: Sequence[str], brokers: Sequence[str] | None, floor_rounds: int | None = None) -> str:
    """How this run was started, as its results files name it."""
    if set(parts) == set(QUICK_PARTS if quick else DEFAULT_PARTS) and not brokers and floor_rounds is None:
        return "BENCH_QUICK=1 make bench" if quick else "make bench"
    return (f"{'BENCH_QUICK=1 ' if quick else ''}.venv/bin/python -m bench --parts {' '.join(parts)}"
            + (f" --brokers {' '.join(brokers)}" if brokers else "")
            + (f" --floor-rounds {floor_rounds}" if floor_rounds is not None else ""))


def rounds(text: str) -> int:
    """`--floor-rounds`: a whole number of rounds, at least 1 (argparse names a value `int` refuses)."""
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"at least 1 round, got {number}")
    return number


def scale_of(quick: bool, floor_rounds: int | None) -> Scale:
    """FULL or QUICK, with the floor's rounds `--floor-rounds` asks for."""
    scale = QUICK if quick else FULL
    return scale if floor_rounds is None else replace(scale, floor_rounds=floor_rounds)


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, its parts defaulted for a full or quick run, `chosen` its brokers; a usage error for a
    broker not configured."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
                        help="CI smoke: fewer messages, shorter delays, smaller stacks (default: BENCH_QUICK)")
    parser.add_argument("--brokers", nargs="+", help="names from RABBITMQ_BROKERS (default: all)")
    parser.add_argument("--parts", nargs="+", choices=(*DEFAULT_PARTS, "floor", "levels-encoding"),
                        help=f"default: {' '.join(DEFAULT_PARTS)}; quick: {' '.join(QUICK_PARTS)}")
    parser.add_argument("--out", type=Path, help="directory for results (default bench/results, quick: …/quick)")
    parser.add_argument("--floor-rounds", type=rounds, metavar="N",
                        help=f"rounds of the floor's rows (default {floor.ROUNDS}, quick 1): more for a firmer median")
    args = parser.parse_args(argv)
    args.parts = args.parts or list(QUICK_PARTS if args.quick else DEFAULT_PARTS)
    configured = configured_brokers()
    known = [broker.name for broker in configured]
    names = args.brokers or known
    if unknown := [name for name in names if name not in known]:
        parser.error(f"--brokers: no broker named {', '.join(unknown)} in RABBITMQ_BROKERS; its brokers are "
                     f"{', '.join(known)}")
    args.chosen = [broker for broker in configured if broker.name in names]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    scale = scale_of(args.quick, args.floor_rounds)
    out: Path = args.out or scale.results
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    context = report.Context(now.strftime("%Y-%m-%d"), now.strftime("%Y-%m-%d %H:%M UTC"),
                             command(args.quick, args.parts, args.brokers, args.floor_rounds), args.quick,
                             report.machine(), report.commit())
    progress = Progress()
    progress(f"{scale.name} run: {context.machine}; load {report.load()}; writing to {out}")
    chosen: list[Broker] = args.chosen
    written: list[Path] = []
    for broker in chosen if {"p1", "p2", "floor"} & set(args.parts) else ():
        # dramatiq's memory is the client's, not the broker's: measured once, beside the last broker's P2.
        held = scale.held if broker is chosen[-1] else ()
        path = broker_file(broker, context, out, scale, args.parts, progress, held)
        written += [path] if path else []
    if "alerts" in args.parts:
        written += alerts_and_plan_cost(chosen, context, out, scale, "p3" in args.parts, progress)
    elif "p3" in args.parts:
        written.append(plan_cost_file(context, out, scale.plan_cost_sizes, progress))
    if "levels-encoding" in args.parts:
        written += levels_encoding.results_file(chosen, context, out, scale.encoding_messages, scale.encoding_rounds,
                                                progress)
    progress(f"done: {', '.join(str(p) for p in written)}")
    return 0 if written else 1


def alerts_and_plan_cost(brokers: Sequence[Broker], context: report.Context, out: Path, scale: Scale, p3: bool,
                         progress: Progress) -> list[Path]:
    """The alerts' results file and, with `p3`, P3's. P3 is broker-free and keeps one core busy; the alerts' rounds
    wait on Prometheus's intervals and `for` (seconds) and load the machine with a message and a poll now and then:
    they run together, and the reads of the parked messages, which load the broker and the client, after P3."""
    with ThreadPoolExecutor(max_workers=1) as beside:
        plan_cost = (beside.submit(plan_cost_file, context, out, scale.plan_cost_sizes, progress, beside=ALERT_ROUNDS)
                     if p3 else None)
        path = alerts.results_file(brokers, context, out, scale.alert_rounds, scale.parked, scale.limit, progress,
                                   beside=P3_BESIDE if plan_cost else "",
                                   before_reads=plan_cost.result if plan_cost else lambda: None)
        written = [plan_cost.result()] if plan_cost else []
    return written + ([path] if path else [])


if __name__ == "__main__":
    sys.exit(main())
