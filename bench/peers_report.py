"""The results file's sections for the peers (bench/peers.py), the cluster's P1 (bench/cluster.py) and the targets
of issue 25 judged from one broker's figures, all measured in the same run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from bench.accuracy import Outcome
from bench.cluster import ClusterP1
from bench.floor import PARTS, Pair
from bench.peers import (
    DRAMATIQ_THREADS,
    HOLD_DELAY_MS,
    IDLE_S,
    LOOPS,
    RETRY_DELAY_MS,
    Holding,
    Loops,
)
from bench.report import p1_worst, ran_peers, save
from bench.strategies import KOMBU, LEVELS, NATIVE, TIERS
from bench.throughput import FAILURES, Run, plain_messages

COPY_CPU_TARGET = 0.5
"""`levels` spends at most this share of kombu's broker CPU per delayed copy."""


def _library(row: str) -> str:
    return next(loop.library for loop in LOOPS if loop.row == row)


def copy_us(run: Run) -> float:
    """Broker CPU µs per delayed copy of a retry row: its broker CPU over the run ÷ the copies (FAILURES per
    message); plain consume's share is in it, as every peer's plain figure is beside it."""
    copies = run.messages * FAILURES
    return run.broker_us * run.deliveries / copies if copies else 0.0


def p2_peers_section(loops: Loops, plot: str) -> list[str]:
    out = ["## P2 beside the peers: retry loops with each library", "",
           f"Each library's retry loop against plain consume with the same library, in the same round: "
           f"{loops.messages:,} messages, each failing {FAILURES} times and then succeeding, every retry delayed "
           f"{RETRY_DELAY_MS:,} ms (kombu's unit is the whole second); plain: {plain_messages(loops.messages):,} "
           "messages that succeed at once. Ours: `RetryingConsumer` on a `levels` queue (levels of 1 s, the default "
           "unit, as kombu's) and on a plain queue. kombu: a kombu consumer that republishes a failed message "
           "through `celery_delayed_27` with kombu's routing key and acks it, as Celery's retry does (Celery's "
           "defaults: no publisher confirms, a failed publish retried on a new connection). dramatiq: its Worker "
           f"({DRAMATIQ_THREADS} threads) with its Retries middleware, the actor raising `Retry(delay=1000)` "
           "(defaults: no publisher confirms; classic queues, the only kind it declares). Ours and kombu on quorum "
           "queues. Messages are published before the consumer starts; seconds run from the handler's first call "
           "to its last. Client on one core, broker on every core, CPU from /proc as in P2. "
           f"At prefetch 250 ({loops.rounds} round(s), ratios the median of each round's rate ÷ the same library's "
           "plain rate in that round), then once at each library's default: ours 10 (its default before this "
           "run), Celery's 4 × concurrency (8 here), dramatiq's 2 × threads (16). With 1 s delays a run cannot "
           f"take less than {FAILURES} s: a rate near {4 * loops.messages / FAILURES:,.0f} deliveries/s is the "
           "delays', not the broker's.", "",
           "| prefetch | queue type | library | row | deliveries | deliveries/s | ÷ own plain | client CPU µs | "
           "broker CPU µs | broker CPU µs per delayed copy | messages lost |",
           "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for run in loops.judged + loops.defaults:
        counts = loops.lost.get(run.row, [])
        lost = sum(counts[:loops.rounds]) if run in loops.judged else sum(counts[loops.rounds:])
        if run.skipped:
            out.append(f"| {run.prefetch} | {run.queue_type} | {_library(run.row)} | `{run.row}` | skipped: "
                       f"{run.skipped} | | | | | | |")
            continue
        ratio = "" if run.ratio is None else f"{run.ratio:.2f}"
        copy = f"{copy_us(run):,.0f}" if run.ratio is not None else ""
        out.append(f"| {run.prefetch} | {run.queue_type} | {_library(run.row)} | `{run.row}` | {run.deliveries:,} | "
                   f"{run.rate:,.0f} | {ratio} | {run.client_us:,.0f} | {run.broker_us:,.0f} | {copy} | {lost} |")
    out.append("")
    if any(sum(counts) for counts in loops.lost.values()):
        out.append(f"- **Messages lost** (never came back within {IDLE_S:g} s of the last delivery, and no queue "
                   "held them): "
                   + ", ".join(f"`{row}` {' + '.join(map(str, counts))}" for row, counts in loops.lost.items()
                               if sum(counts)) + " (per run, in run order). A retried copy published without "
                   "confirms is lost when its connection fails: py-amqp sets TCP_USER_TIMEOUT to 1 s, so a socket "
                   "the broker's flow control blocks for longer fails, and what sat in it with the connection; the "
                   "publish that failed is retried on a new connection, the copies before it are not. "
                   "Ours confirms every copy before it acks the original.")
    if loops.rounds > 1:
        for run in loops.judged:
            if not run.skipped:
                out.append(f"- prefetch {run.prefetch} `{run.row}`: deliveries/s by round "
                           + ", ".join(f"{rate:,.0f}" for rate in run.rates)
                           + (f"; ÷ own plain {', '.join(f'{x:.2f}' for x in run.ratios)}" if run.ratios else "") + ".")
    out += ["", f"![P2 beside the peers]({plot})", ""]
    return out


def p2_peers_plot(loops: Loops, title: str, path: Path) -> None:
    runs = [r for r in loops.judged + loops.defaults if not r.skipped]
    fig, ax = plt.subplots(figsize=(11, 5))
    labels = [f"{r.row}\nprefetch {r.prefetch}" for r in runs]
    bars = ax.bar(range(len(runs)), [r.rate for r in runs],
                  color=["tab:blue" if r.ratio is None else "tab:orange" for r in runs])
    for bar, run in zip(bars, runs, strict=True):
        text = f"{run.rate:,.0f}" + (f"\n{run.ratio:.2f}×" if run.ratio is not None else "")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(runs)), labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("deliveries per second")
    ax.legend(handles=[Patch(color="tab:blue", label="plain consume"),
                       Patch(color="tab:orange", label="retry loop (× its own library's plain)")],
              fontsize=8, loc="upper right")
    ax.set_title(title, fontsize=9)
    ax.margins(y=0.2)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, path)


def holding_section(held: Sequence[Holding]) -> list[str]:
    out = ["## What dramatiq keeps in the worker", "",
           f"dramatiq holds a delayed message in the worker's memory until its eta. A worker process with dramatiq's "
           f"defaults ({DRAMATIQ_THREADS} threads: delay prefetch {DRAMATIQ_THREADS * 1000:,}) was sent N messages "
           f"delayed {(held[0].delay_ms if held else HOLD_DELAY_MS) / 1000:g} s "
           f"from the first one sent, all with the same eta (bodies: a 6-character id); once it held what its "
           "prefetch allows, "
           "its resident memory was read (/proc VmRSS) and it was killed with `kill -9`; then a fresh worker "
           "took over and every arrival at the actor was counted.", "",
           "| messages sent | held by the worker | RSS before | RSS holding | per held message | back in `bench.DQ` "
           "after the kill | delivered by the next worker | duplicates | lost |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for h in held:
        out.append(f"| {h.sent:,} | {h.held:,} | {h.rss_before_kib / 1024:,.1f} MiB | "
                   f"{h.rss_holding_kib / 1024:,.1f} MiB | {h.per_message_bytes:,.0f} B | {h.back_in_queue:,} | "
                   f"{h.delivered:,} | {h.duplicates} | {h.lost} |")
    lost = sum(h.lost for h in held)
    duplicates = sum(h.duplicates for h in held)
    out += ["", "- A held message is an unacked delivery of `bench.DQ`: when the worker dies the broker requeues it "
            "there, and the next worker delivers it at its eta. Measured: "
            + (f"**{lost} lost**" if lost else "none lost") + f", {duplicates} delivered twice"
            + ". Past the delay prefetch, messages wait in `bench.DQ` (ready) until the worker has room."]
    if late := [h.sent for h in held if not h.killed_before_eta]:
        out.append(f"- With {', '.join(f'{n:,}' for n in late)} messages the eta passed before the kill (sending "
                   "took that long): the first worker had delivered some, and those it had republished but not yet "
                   "acked came back twice.")
    out.append("")
    return out


def cluster_section(cluster: ClusterP1, single: Sequence[Outcome]) -> list[str]:
    out = [f"## P1 on the three-node {cluster.version} cluster", ""]
    if cluster.skipped:
        return [*out, f"Skipped: {cluster.skipped}", ""]
    out += [f"The same P1 as above (same messages, delays and seed; quorum queues) on the cluster of "
            f"scripts/clusters.sh, at the end of this broker's part of the run (after P2, so the cluster's work does "
            f"not share the cores with P2): {cluster.nodes}. Members of `bench`'s quorum queue after deployment: "
            + ", ".join(f"{k} {v}" for k, v in (cluster.members or {}).items())
            + ". The cost of replication is the cluster's figure beside the single node's.", "",
            "| strategy | delay ms | single node p50 | cluster p50 | single node p99 | cluster p99 | cluster max | "
            "cluster early | p99 target | met on the cluster |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for o in cluster.outcomes:
        alone = next((s for s in single if s.strategy is o.strategy and s.queue_type == o.queue_type), None)
        for stat in o.stats:
            one = next((s for s in (alone.stats if alone else ()) if s.delay_ms == stat.delay_ms), None)
            met = "yes" if stat.percentile(99) <= stat.target_ms else "**no**"
            out.append(f"| `{o.strategy.name}` | {stat.delay_ms:,} | {f'{one.percentile(50):,.1f}' if one else ''} | "
                       f"{stat.percentile(50):,.1f} | {f'{one.percentile(99):,.1f}' if one else ''} | "
                       f"{stat.percentile(99):,.1f} | {max(stat.lateness_ms):,.1f} | {stat.early} | "
                       f"{stat.target_ms:,.1f} | {met} |")
    for o in cluster.outcomes:
        if o.skipped:
            out.append(f"- `{o.strategy.name}` skipped: {o.skipped}")
    return [*out, ""]


def _worst(outcomes: Sequence[Outcome], pick: object) -> float | None:
    values = [s.percentile(99) for o in outcomes if o.strategy is pick for s in o.stats]
    return max(values) if values else None


def _ran(loops: Loops | None, library: str) -> Run | None:
    """The judged round's run of `library`'s retry loop, if it ran."""
    return next((r for r in (loops.judged if loops else []) if r.row.startswith(library) and not r.skipped), None)


def _copy_cost(loops: Loops | None) -> list[str]:
    """Issue 37: `levels` against kombu in the same retry loop, broker CPU per delayed copy and retries per second."""
    levels, kombu = _ran(loops, "levels"), _ran(loops, "kombu")
    if not (levels and kombu):
        return []
    share = copy_us(levels) / copy_us(kombu) if copy_us(kombu) else 0.0
    return [f"- `levels` ÷ kombu, broker CPU per delayed copy (1 s, quorum, prefetch 250): {copy_us(levels):,.0f} ÷ "
            f"{copy_us(kombu):,.0f} µs = **{share:.2f}** (target ≤ {COPY_CPU_TARGET}: "
            f"{'met' if share <= COPY_CPU_TARGET else '**not met**'}).",
            f"- Retries per second, `levels` against kombu (same loop, 1 s): {levels.rate:,.0f} against "
            f"{kombu.rate:,.0f} deliveries/s ({'more: met' if levels.rate > kombu.rate else '**not more: not met**'})."]


def _accuracy_against_kombu(outcomes: Sequence[Outcome]) -> list[str]:
    ours_levels, peer_kombu = _worst(outcomes, LEVELS), _worst(outcomes, KOMBU)
    if ours_levels is None or peer_kombu is None:
        return []
    return [f"- P1 worst p99, `levels` against kombu (quorum and classic): {ours_levels:,.1f} against "
            f"{peer_kombu:,.1f} ms ({'no worse: met' if ours_levels <= peer_kombu else '**worse: not met**'})."]


def _against_plain(runs: Sequence[Run]) -> list[str]:
    """`tiers` and `native` against plain consume at prefetch 250: information (the floor judges them)."""
    out = []
    for strategy in (TIERS, NATIVE):
        ratios = [(r.row, r.queue_type, r.ratio or 0.0) for r in runs if r.prefetch == 250 and r.ratio is not None
                  and r.row.split(" ")[0] == strategy.name]
        if ratios:
            low = min(ratios, key=lambda x: x[2])
            out.append(f"- `{strategy.name}` ÷ plain at prefetch 250 (information; judged against the broker's floor "
                       "below): " + ", ".join(f"{row} {queue_type} {ratio:.2f}" for row, queue_type, ratio in ratios)
                       + (" (at least 0.5)" if low[2] >= 0.5 else f" (below 0.5: {low[0]} {low[1]})"))
    return out


def _against_the_floor(pairs: Sequence[Pair]) -> list[str]:
    verdicts = [(pair, *pair.verdict()) for pair in pairs if not pair.skipped and pair.row not in PARTS]
    return [f"- `{pair.row}` against its hand-wired loop, {pair.queue_type} queues: {why}: "
            f"{'met' if met else '**not met**'}." for pair, met, why in verdicts]


def _accuracy_against_peers(outcomes: Sequence[Outcome]) -> list[str]:
    """Our worst p99 within target, and below every peer's worst (over all queue types, then per type)."""
    worst = p1_worst(outcomes)
    if worst is None:
        return []
    within = all(s.percentile(99) <= s.target_ms for o in outcomes if o.strategy.ours for s in o.stats)
    peers = _peers_worst(outcomes)
    return [f"- Our worst p99: {worst[0]:,.1f} ms ({worst[1]}); every p99 of ours under max(5 % of the delay, "
            f"100 ms): {'yes' if within else '**no**'}.",
            *(_below_the_peers(outcomes, worst[0], peers) if peers else [])]


def _below_the_peers(outcomes: Sequence[Outcome], worst: float, peers: Sequence[tuple[float, str, str]]) -> list[str]:
    beaten = [where for p99, where, _ in peers if p99 <= worst]
    out = ["- Our worst p99 below every peer's worst p99 (each over its delays: "
           + ", ".join(f"{where} {p99:,.1f} ms" for p99, where, _ in peers) + "): "
           + ("**yes**." if not beaten else f"**no**, not below {', '.join(beaten)}.")]
    for p99, where, queue_type in peers:
        if mine := p1_worst([o for o in outcomes if o.queue_type == queue_type]):
            out.append(f"  - on {queue_type} queues, our worst {mine[0]:,.1f} ms ({mine[1]}) against {where} "
                       f"{p99:,.1f} ms: {'below' if mine[0] < p99 else '**not below**'}.")
    return out


def _peers_worst(outcomes: Sequence[Outcome]) -> list[tuple[float, str, str]]:
    """Each peer's worst p99 over its delays: (p99, `name (queue type)`, queue type)."""
    return [(max(s.percentile(99) for s in o.stats), f"{o.strategy.name} ({o.queue_type})", o.queue_type)
            for o in ran_peers(outcomes)]


def targets_section(outcomes: Sequence[Outcome], runs: Sequence[Run], loops: Loops | None,
                    pairs: Sequence[Pair] = ()) -> list[str]:
    """Issue 25's and issue 37's targets, each judged from figures of this file (paired within this run)."""
    return ["## Targets, from the figures above", "", *_copy_cost(loops), *_accuracy_against_kombu(outcomes),
            *_against_plain(runs), *_against_the_floor(pairs), *_accuracy_against_peers(outcomes), ""]


P1_TOLERANCE_MS = 2.0
P1_TOLERANCE_SHARE = 0.10
"""Our worst p99 over the rounds may exceed a peer's worst over the rounds by max(2 ms, 10 % of it)."""


def p1_rounds_section(rounds: Sequence[Sequence[Outcome]]) -> list[str]:
    """Our worst P1 p99 against each peer's worst, each over every round it ran in, within a tolerance of
    max(P1_TOLERANCE_MS, P1_TOLERANCE_SHARE × the peer's worst)."""
    measured = [worst[0] for r in rounds if (worst := p1_worst(r))]
    if not measured:
        return []
    worst = max(measured)
    out = [f"## P1 over {len(rounds)} round(s): our worst p99 against each peer's worst", "",
           "Ours (every strategy, delay and queue type) and kombu run every round; the anchor and dramatiq the "
           "first only. Our worst p99 per round: " + ", ".join(f"{x:,.1f}" for x in measured)
           + f" ms; over the rounds {worst:,.1f} ms. Met when it is at most the peer's worst + max("
           f"{P1_TOLERANCE_MS:g} ms, {P1_TOLERANCE_SHARE:.0%}) of it.", ""]
    peers: dict[str, list[float]] = {}
    for r in rounds:
        for p99, where, _ in _peers_worst(r):
            peers.setdefault(where, []).append(p99)
    for where, values in peers.items():
        theirs = max(values)
        tolerance = max(P1_TOLERANCE_MS, P1_TOLERANCE_SHARE * theirs)
        side = "below" if worst < theirs else "above"
        met = worst <= theirs + tolerance
        out.append(f"- {where}: worst {theirs:,.1f} ms over {len(values)} round(s) (per round "
                   f"{', '.join(f'{v:,.1f}' for v in values)}); ours {worst:,.1f} ms is {side} it by "
                   f"{abs(worst - theirs):,.1f} ms, tolerance {tolerance:,.1f} ms: {'met' if met else '**not met**'}.")
    return [*out, ""]
