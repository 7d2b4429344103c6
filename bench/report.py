"""The results files (Markdown) and their plots (PNG, matplotlib's Agg backend) for P1, P2 and P3."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.accuracy import Delays, Outcome
from bench.plan_cost import GC_ON, KINDS, SPREAD, Cost, growth
from bench.strategies import SEED_003
from bench.throughput import DELAYS_MS, FAILURES, Run, plain_messages

ROOT = Path(__file__).resolve().parent.parent
GROWTH_TARGET = 12.0
THROUGHPUT_TARGET = 0.5


@dataclass(frozen=True)
class Context:
    """What every results file states: when, how, where."""

    date: str
    started_utc: str
    command: str
    quick: bool
    machine: str
    commit: str


def machine() -> str:
    """Cores, CPU model, memory, OS, Python and the client library's version."""
    model = ""
    memory_gib = 0.0
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
        memory_gib = kib / 1024 / 1024
    except (OSError, StopIteration, ValueError):
        pass
    return (f"{os.cpu_count()} cores{f' ({model})' if model else ''}, {memory_gib:.1f} GiB memory, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
            f"pika {package_version('pika')}, pulumi {package_version('pulumi')}")


def commit() -> str:
    """The commit measured; `-dirty` when files other than bench/results/ (what the run writes) differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results")
    return (git("describe", "--always") or "unknown") + ("-dirty" if changed else "")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def save(fig: Any, path: Path, **layout: Any) -> None:
    """The figure as a PNG at `path`, then closed."""
    fig.tight_layout(**layout)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(path: Path, text: Sequence[str], progress: Callable[[str], None]) -> Path:
    """A results file, said on the progress line."""
    path.write_text("\n".join(text))
    progress(f"wrote {path}")
    return path


def prefixed(progress: Callable[[str], None], name: str) -> Callable[[str], None]:
    """Progress lines that start with `name` (a broker's)."""
    return lambda line: progress(f"{name} {line}")


def _ms(value: float) -> str:
    return f"{value:,.1f}"


def header(title: str, context: Context, lines: Sequence[str], started: float | None = None,
           duration: str = "") -> list[str]:
    """A results file's title, how and where it was measured, and its table of `lines`; with `started` (a
    time.monotonic()), the load average now and the duration since (`duration`: what it is of)."""
    if started is not None:
        lines = [*lines, f"| load average | {load()} (1, 5, 15 min) at the end; shared machine |",
                 f"| duration | {time.monotonic() - started:.0f} s{duration} |"]
    mode = "quick (`BENCH_QUICK=1`)" if context.quick else "full"
    return [f"# {title}", "",
            f"Measured by `{context.command}` ({mode}), started {context.started_utc}, in one run; figures "
            "depend on the machine and its load and are never asserted by tests. Commit "
            f"`{context.commit}`.", "",
            "| | |", "|---|---|", f"| machine | {context.machine} |", *lines, ""]


# --- P1 --------------------------------------------------------------------------------------------------------


def p1_worst(outcomes: Sequence[Outcome]) -> tuple[float, str] | None:
    """Our worst p99 over every strategy and delay, and where."""
    ours = [(s.percentile(99), f"{o.strategy.name} ({o.queue_type}) {s.delay_ms} ms") for o in outcomes
            if o.strategy.ours for s in o.stats]
    return max(ours) if ours else None


def p1_anchor_ratio(outcomes: Sequence[Outcome]) -> tuple[float, float, float] | None:
    """(seed-003's worst p99, our worst p99, their ratio), when both ran."""
    anchor = [s.percentile(99) for o in outcomes if o.strategy is SEED_003 for s in o.stats]
    worst = p1_worst(outcomes)
    if not anchor or worst is None or worst[0] <= 0:
        return None
    return max(anchor), worst[0], max(anchor) / worst[0]


def label(outcome: Outcome, queue_type: str) -> str:
    """The outcome's name in P1's tables: the strategy's, with the queue type when it also runs on `queue_type`
    but ran on another (kombu on classic queues)."""
    name = outcome.strategy.name
    other = outcome.queue_type != queue_type and queue_type in outcome.strategy.queue_types
    return f"{name} ({outcome.queue_type})" if other else name


def ran_peers(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The peers' outcomes that measured something (not ours, not the anchor), in the order they ran."""
    return [o for o in outcomes if not o.strategy.ours and o.strategy is not SEED_003 and o.stats]


def p1_peers_worst(outcomes: Sequence[Outcome], queue_type: str) -> list[tuple[float, str]]:
    """Each peer's worst p99 and where, in the order they ran."""
    return [max((s.percentile(99), f"{label(o, queue_type)} {s.delay_ms} ms") for s in o.stats)
            for o in ran_peers(outcomes)]


def p1_section(outcomes: Sequence[Outcome], plan: Delays, queue_type: str, plot: str) -> list[str]:
    out = ["## P1: delay accuracy", "",
           f"{plan.messages:,} messages in flight per strategy, {queue_type} queues (the default type, and the only "
           "one `native` runs on) unless the name says `(classic)`: ours run on both types, as kombu does, so each "
           "is compared on the same type. Strategies one after another in fresh vhosts. Lateness = arrival at a "
           "consumer that only records the time and acks − (the time just before the publish, for `native` just before "
           "the rejection, + the intended delay), one monotonic clock; early = lateness below −1 ms (the broker "
           "stamps expiry in whole ms). Nearest-rank percentiles. Target for ours: p99 ≤ max(5 % of the delay, "
           "100 ms).", "", "| strategy | how a message is delayed | delays |", "|---|---|---|"]
    for o in outcomes:
        if o.strategy.per_attempt:
            delays = (f"min {plan.native_ms[0]} ms, max {plan.native_ms[1]} ms, {plan.native_retries} rejections "
                      f"per message: {', '.join(map(str, plan.native_delays()))} ms, every message at every attempt")
        else:
            shown = sorted({s.delay_ms for s in o.stats}) or plan.delays_ms
            delays = (f"{', '.join(map(str, shown))} ms, equal shares, shuffled (seed 3)"
                      + (f"; levels of {plan.unit_ms} ms" if o.strategy.name == "levels" else "")
                      + (f"; {o.queue_type} queues" if o.queue_type != queue_type else ""))
        out.append(f"| `{label(o, queue_type)}` | {o.strategy.how} | {delays if not o.skipped else 'skipped'} |")
    out += ["", "| strategy | delay ms | messages | min | p50 | p99 | max | early | p99 target | met |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for o in outcomes:
        for s in o.stats:
            met = (("yes" if s.percentile(99) <= s.target_ms else "**no**") if o.strategy.ours else
                   "(anchor)" if o.strategy is SEED_003 else "(peer)")
            out.append(f"| `{label(o, queue_type)}` | {s.delay_ms:,} | {s.count:,} | {_ms(min(s.lateness_ms))} | "
                       f"{_ms(s.percentile(50))} | {_ms(s.percentile(99))} | {_ms(max(s.lateness_ms))} | {s.early} | "
                       f"{_ms(s.target_ms)} | {met} |")
    out.append("")
    ran = [o for o in outcomes if o.stats]
    if worst := p1_worst(ran):
        out.append(f"- Our worst p99: **{_ms(worst[0])} ms** ({worst[1]}); early messages, all strategies: "
                   f"{sum(s.early for o in ran for s in o.stats)}.")
    if ratio := p1_anchor_ratio(ran):
        out.append(f"- Seed 003's anchor: worst p99 **{_ms(ratio[0])} ms**, **{ratio[2]:,.0f} ×** our worst p99 "
                   f"({_ms(ratio[1])} ms), in the same run.")
    if (peers := p1_peers_worst(ran, queue_type)) and worst:
        below = [where for p99, where in peers if worst[0] >= p99]
        out.append("- Peers' worst p99: " + ", ".join(f"{_ms(p99)} ms ({where})" for p99, where in peers) + "; our "
                   "worst " + ("is below every peer's." if not below else f"is **not below** {', '.join(below)}."))
    for o in ran:
        if o.strategy.ours:
            missed = [s.delay_ms for s in o.stats if s.percentile(99) > s.target_ms]
            verdict = "met at every delay" if not missed else "missed at " + ", ".join(f"{d} ms" for d in missed)
            out.append(f"- `{label(o, queue_type)}`: target {verdict} ({o.seconds:.0f} s including deployment).")
    for o in outcomes:
        if o.skipped:
            out.append(f"- `{label(o, queue_type)}` skipped: {o.skipped}")
    out += ["", f"![P1: lateness against delay]({plot})", ""]
    return out


def p1_plot(outcomes: Sequence[Outcome], title: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 5.5))
    palette = ("tab:blue", "tab:green", "tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
               "tab:cyan", "navy", "gold")  # not grey: the target's line is
    queue_type = outcomes[0].queue_type if outcomes else ""
    colors = {label(o, queue_type): palette[i % len(palette)] for i, o in enumerate(outcomes)}
    delays: set[int] = set()
    for o in outcomes:
        if not o.stats:
            continue
        xs = [s.delay_ms for s in o.stats]
        delays.update(xs)
        name = label(o, queue_type)
        color = colors.get(name, "black")
        ax.plot(xs, [s.percentile(99) for s in o.stats], "-^", color=color, label=f"{name} p99")
        ax.plot(xs, [s.percentile(50) for s in o.stats], ":o", color=color, alpha=0.7, label=f"{name} p50")
        ax.plot(xs, [max(s.lateness_ms) for s in o.stats], "x", color=color, markersize=9, label=f"{name} max")
    if delays:
        span = sorted(delays)
        ax.plot(span, [max(0.05 * d, 100.0) for d in span], "--", color="grey", label="target: max(5 %, 100 ms)")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.axhline(-1.0, color="black", linewidth=0.8, linestyle="-.", label="early below −1 ms")
    ax.set_ylim(bottom=-2.0)
    if delays:
        ax.set_xticks(sorted(delays), [f"{d:,}" for d in sorted(delays)], fontsize=8)
        ax.minorticks_off()
    ax.set_xlabel("intended delay (ms, log scale)")
    ax.set_ylabel("lateness = arrival − (sent + delay) (ms, symlog: linear below 1 ms)")
    ax.set_title(title, fontsize=10, wrap=True)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)


# --- P2 --------------------------------------------------------------------------------------------------------


def ratio_text(ratio: float) -> str:
    """Two decimals, or three where two would round across the target (0.497 would read as a met 0.50)."""
    shown = f"{ratio:.2f}"
    return shown if (float(shown) >= THROUGHPUT_TARGET) == (ratio >= THROUGHPUT_TARGET) else f"{ratio:.3f}"


def p2_section(runs: Sequence[Run], messages: int, rounds: int, plot: str) -> list[str]:
    prefetches = sorted({r.prefetch for r in runs if not r.skipped})
    out = ["## P2: retry throughput", "",
           f"{messages:,} messages published (confirmed) before one `RetryingConsumer` (handler in its worker "
           f"thread) starts; seconds = from the handler's first call to its last (the last message's success), so "
           f"connection set-up is in neither. Each strategy: every message fails {FAILURES} times, then succeeds "
           f"({FAILURES + 1} deliveries each). `plain`: a plain queue of the same type, {plain_messages(messages):,} "
           f"messages whose handler never fails: as many deliveries as a strategy's run, so both last about as long. "
           f"Short delays so the figure is the broker/client path, "
           f"not the waiting: tiers {', '.join(map(str, DELAYS_MS['tiers']))} ms (reject mode waits in the first "
           f"tier only); levels backoff {', '.join(map(str, DELAYS_MS['levels']))} ms on levels of "
           f"{DELAYS_MS['levels'][0]} ms; native min {DELAYS_MS['native'][0]} ms, max {DELAYS_MS['native'][1]} ms "
           f"(10, 20, 30 ms). At prefetch {' and '.join(map(str, prefetches))} (the client's default, in the "
           f"100–300 range RabbitMQ's documentation names for throughput: each original holds its prefetch "
           f"slot until its copy is confirmed). {rounds} round(s): each runs "
           "every row once, plain first; deliveries/s is the median round's, ÷ plain the median of each round's "
           "rate ÷ that round's plain rate. The client's threads run on one core (`throughput.client_core`), the "
           "broker's on every core. CPU µs per delivery: the client process and the broker's OS process, median "
           "round. At least half of plain consume was the target until issue 37; it stays as information: a quorum "
           "retry costs the broker far more than a plain delivery, so the targets are against the same mechanism wired "
           "by hand (the next section).", "",
           "| prefetch | queue type | strategy | deliveries | deliveries/s | ÷ plain | client CPU µs | broker CPU µs "
           "| ≥ 0.5 |",
           "|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        if r.skipped:
            continue
        ratio = r.ratio
        met = "" if ratio is None else ("yes" if ratio >= THROUGHPUT_TARGET else "no")
        shown = "" if ratio is None else ratio_text(ratio)
        out.append(f"| {r.prefetch} | {r.queue_type} | `{r.row}` | {r.deliveries:,} | {r.rate:,.0f} | "
                   f"{shown} | {r.client_us:,.0f} | "
                   f"{f'{r.broker_us:,.0f}' if r.broker_us else 'not local'} | {met} |")
    out.append("")
    if rounds > 1:
        for r in runs:
            if not r.skipped:
                out.append(f"- prefetch {r.prefetch}, {r.queue_type} `{r.row}`: deliveries/s by round "
                           + ", ".join(f"{rate:,.0f}" for rate in r.rates)
                           + (f"; ÷ plain {', '.join(f'{x:.2f}' for x in r.ratios)}" if r.ratios else "") + ".")
    first = min((r.prefetch for r in runs), default=0)
    for r in runs:
        if r.skipped and r.prefetch == first:  # the same reason at every prefetch
            out.append(f"- {r.queue_type} `{r.row}` skipped: {r.skipped}")
    out += ["", f"![P2: deliveries per second]({plot})", ""]
    return out


def p2_plot(runs: Sequence[Run], title: str, path: Path) -> None:
    measured = [r for r in runs if not r.skipped]
    groups = list(dict.fromkeys((r.queue_type, r.prefetch) for r in measured))
    rows = list(dict.fromkeys(r.row for r in measured))
    fig, ax = plt.subplots(figsize=(max(9, 2.6 * len(groups)), 5))
    width = 0.8 / max(1, len(rows))
    for i, row in enumerate(rows):
        placed = [(j, r) for j, group in enumerate(groups) for r in measured
                  if r.row == row and (r.queue_type, r.prefetch) == group]
        bars = ax.bar([j + i * width for j, _ in placed], [r.rate for _, r in placed], width, label=row)
        for bar, (_, run) in zip(bars, placed, strict=True):
            label = f"{run.rate:,.0f}" + (f"\n{ratio_text(run.ratio)}×" if run.ratio is not None else "")
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=7)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))],
                  [f"{queue_type}, prefetch {prefetch}" for queue_type, prefetch in groups])
    ax.set_ylabel("deliveries per second (ack, reject or retry)")
    ax.set_title(title)
    ax.margins(y=0.2)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


# --- P3 --------------------------------------------------------------------------------------------------------


def _layout(c: Cost) -> str:
    return "1 vhost" if c.vhosts == 1 else f"{c.vhosts} vhosts"


def p3_section(costs: Sequence[Cost], sizes: Sequence[int], plot: str) -> list[str]:
    small, big = min(sizes), max(sizes)
    out = ["## P3: plan cost", "",
           f"Retryable classic queues × 3 wait tiers (1s, 10s, 1m), one topic exchange per vhost, in one vhost or "
           f"spread over {SPREAD} vhosts; the review's change is the last tier's delay of every queue (1m → 2m). "
           "Each measurement runs in a process of its own; peak memory is that process tree's peak resident set "
           "(`wait4`'s ru_maxrss), interpreter and imports included. Seconds: the work itself for the program, the "
           "floor and check_vhost (after imports); the command's wall time for `make plan` and `make review`. "
           f"Target: t1000/t100 ≤ {GROWTH_TARGET:g}" + ("." if (small, big) == (100, 1000) else
                                                        f"; not applicable to t{big}/t{small} (quick run)."), "",
           "| what | queues | layout | resources | seconds | peak MB |", "|---|---:|---|---:|---:|---:|"]
    for c in costs:
        out.append(f"| {c.kind} | {c.queues:,} | {_layout(c)} | {c.resources or ''} | {c.seconds:.2f} | "
                   f"{c.peak_mb:.0f} |")
    out += ["", f"| what | layout | t{big}/t{small} | ÷ SDK floor at {small} | ÷ SDK floor at {big} | met |",
            "|---|---|---:|---:|---:|---|"]

    def seconds(kind: str, layout: str, queues: int) -> float | None:
        return next((c.seconds for c in costs if (c.kind, c.layout, c.queues) == (kind, layout, queues)), None)

    def over_floor(kind: str, layout: str, queues: int) -> str:
        own, floor = seconds(kind, layout, queues), seconds(KINDS[1], layout, queues)
        return f"{own / floor:.2f}" if own is not None and floor and kind not in ("check_vhost", GC_ON) else ""

    judged = (small, big) == (100, 1000)
    for kind in KINDS:
        for layout in dict.fromkeys(c.layout for c in costs):
            ratio = growth(costs, kind, layout, small, big)
            if ratio is None:
                continue
            where = _layout(next(c for c in costs if c.layout == layout))
            met = "(anchor)" if kind == GC_ON else ("yes" if ratio <= GROWTH_TARGET else "**no**") if judged else "n/a"
            out.append(f"| {kind} | {where} | {ratio:.1f} | {over_floor(kind, layout, small)} | "
                       f"{over_floor(kind, layout, big)} | {met} |")
    floors = [r for layout in dict.fromkeys(c.layout for c in costs)
              if (r := growth(costs, KINDS[1], layout, small, big)) is not None]
    if floors:
        out += ["", f"The SDK floor (no code of ours but the recording mock monitor of tools/lib/mockrun.py, constant "
                f"work per registration) itself grows {min(floors):.1f}–{max(floors):.1f}× from {small:,} to "
                f"{big:,} queues for 10× the resources: a ratio above 10 that is the same over the floor at both "
                "sizes is the SDK's, not ours."]
    with_gc = {layout: (seconds(GC_ON, layout, big), seconds(KINDS[0], layout, big))
               for layout in dict.fromkeys(c.layout for c in costs)}
    if gains := [(on, off) for on, off in with_gc.values() if on and off]:
        out += ["", f"`__main__.py` turns Python's cyclic garbage collector off: with it on (`{GC_ON}`, the program "
                f"as it was) {big:,} queues took {min(on for on, _ in gains):.1f}–{max(on for on, _ in gains):.1f} s "
                f"instead of {min(off for _, off in gains):.1f}–{max(off for _, off in gains):.1f} s, the "
                "collector walking the SDK's ever-growing heap again and again."]
    out += ["", f"![P3: seconds and peak memory]({plot})", ""]
    return out


def p3_plot(costs: Sequence[Cost], title: str, path: Path) -> None:
    groups = list(dict.fromkeys((c.queues, c.layout) for c in costs))
    kinds = [k for k in KINDS if any(c.kind == k for c in costs)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    width = 0.8 / max(1, len(groups))
    for i, (queues, layout) in enumerate(groups):
        chosen = [next((c for c in costs if c.kind == k and c.queues == queues and c.layout == layout), None)
                  for k in kinds]
        xs = [j + i * width for j, c in enumerate(chosen) if c]
        label = f"{queues:,} queues, {_layout(next(c for c in costs if c.layout == layout))}"
        left.bar(xs, [max(c.seconds, 1e-3) for c in chosen if c], width, label=label)
        right.bar(xs, [c.peak_mb for c in chosen if c], width, label=label)
    for ax in (left, right):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(kinds))], kinds, rotation=20, ha="right", fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("seconds (log scale)")
    right.set_ylabel("peak resident memory of the process tree (MB)")
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(groups), fontsize=8)
    fig.suptitle(title)
    save(fig, path, rect=(0, 0.06, 1, 1))
