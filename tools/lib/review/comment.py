"""The review as Markdown: in full, and for one pull-request comment within LIMIT characters (rows at risk
first and never dropped, then safe rows, grouped contract changes and diagrams while room is left)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.model.durations import format_duration
from rabbitmq_retry_client.contract import strategy_of
from tools.lib import engine, markdown
from tools.lib.diagram import retry_path
from tools.lib.engine import Step
from tools.lib.mockrun import Registered
from tools.lib.planned import PlanIndex, QueueKey
from tools.lib.review.grouping import NAMES_SHOWN, Line, grouped_rows, listed
from tools.lib.review.migrations import MigrationInfo, Reader
from tools.lib.review.migrations import section as migration_section
from tools.lib.review.rows import COLUMNS, Model, Row, formatted, model, relative_contract
from tools.lib.risk import (
    ACCESS,
    CONTRACT,
    DATA_LOSS,
    FAILS,
    MUST_SEE,
    PROTECTION,
)


def _contract_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    if old is None or new is None:
        return ["new retryable queue" if old is None else "retryable queue removed"]
    # A contract without `strategy` is of the schema's default strategy: a switch reads `strategy tiers → native`.
    old, new = {"strategy": strategy_of(old), **old}, {"strategy": strategy_of(new), **new}
    changes = [f"{k} {formatted(old.get(k))} → {formatted(new.get(k))}" for k in sorted(set(old) | set(new))
               if k != "tiers" and old.get(k) != new.get(k)]
    delays = [", ".join(format_duration(int(t["delay_ms"])) for t in c.get("tiers", [])) or "(none)"
              for c in (old, new)]
    return changes + ([f"delays {delays[0]} → {delays[1]}"] if delays[0] != delays[1] else [])


def _with_removed_tiers(contract: dict[str, Any], old: Mapping[str, Any] | None, removed: set[str]) -> dict[str, Any]:
    """Keep deleted wait tiers in the diagram, so a reviewer sees them struck out."""
    kept = {t["queue"] for t in contract.get("tiers", [])}
    gone = [t for t in (old or {}).get("tiers", []) if t["queue"] in removed and t["queue"] not in kept]
    return {**contract, "tiers": [*contract.get("tiers", []), *gone]} if gone or "tiers" in contract else contract


LIMIT = 60_000
"""Characters of the review a pull-request comment gets (GitHub refuses more than 65,536)."""
MAX_DIAGRAMS = 10
RETRY_PATHS_ROOM = 8_000
"""Characters that safe rows leave for the retry paths (grouped contract changes, a few diagrams)."""


def _summary(m: Model, allow_data_loss: bool) -> list[str]:
    by_risk = Counter(r.risk for r in m.rows)
    counts = m.counts
    summary = [f"{counts[op]:,} to {op}" for op in ("replace", "delete", "update", "create", "import")
               if counts[op]]
    options = sum(r.op == "options" for r in m.rows)
    summary += [f"{options} protect/retain change{'s' * (options != 1)}"] * bool(options)
    flags = [("⛔ fails", FAILS), ("⚠️ data loss", DATA_LOSS), ("🔑 access", ACCESS), ("💥 contract", CONTRACT),
             ("🔓 protection", PROTECTION)]
    out = ["**" + ", ".join([*summary, f"{counts['same']:,} unchanged"]) + "**"
           + "".join(f" — {label}: {by_risk[level]:,}" for label, level in flags if by_risk[level])]
    if by_risk[FAILS]:
        out += ["", "> ⛔ `pulumi up` would stop halfway, after replacing (and emptying) other queues: resolve the "
                "rows marked **fails** before applying this change; ALLOW_DATA_LOSS does not waive them."]
    if by_risk[DATA_LOSS] and allow_data_loss:
        out += ["", "> ⚠️ Data loss acknowledged (ALLOW_DATA_LOSS=1 or --allow-data-loss): the queues below still "
                "lose their messages."]
    elif by_risk[DATA_LOSS]:
        out += ["", "> ⚠️ The queues below lose their messages. Drain them first (docs/operations.md: Changing "
                "topology safely), then acknowledge with ALLOW_DATA_LOSS=1 or --allow-data-loss."]
    if by_risk[CONTRACT]:
        out += ["", "> 💥 Consumers of the old retry contract break as said below: redeploy them with the new "
                "contract before, or together with, `pulumi up`."]
    if m.stale:
        out += ["", "### Policies that match nothing", "", *m.stale]
    return out


def _diagram(m: Model, key: QueueKey) -> list[str]:
    before, after = m.contracts[0].get(key), m.contracts[1].get(key)
    steps = m.touched.get(key, [])
    removed = {m.physical[s.urn] for s in steps if s.op == "delete"}
    changed = {m.physical[s.urn] for s in steps if s.op != "delete"}
    contract = _with_removed_tiers(after, before, removed) if after else before
    assert contract is not None
    out = ["", f"#### {markdown.code(key[0])} / {markdown.code(key[1])}", ""]
    if before != after:
        out += ["Retry contract: " + markdown.text("; ".join(_contract_changes(before, after))), ""]
    return [*out, "```mermaid", retry_path(contract, changed=changed, removed=removed), "```"]


TABLE = ["", "### Changes", "", markdown.row(COLUMNS), markdown.row(["---"] * len(COLUMNS))]


def full(m: Model, allow_data_loss: bool = False) -> str:
    """Every row and every diagram of a touched retry path, ungrouped."""
    if not m.rows and not m.touched:
        return f"**No changes** — {m.counts['same']:,} unchanged."
    out = _summary(m, allow_data_loss)
    if m.rows:
        out += [*TABLE, *(markdown.row(r.cells()) for r in m.rows)]
    if m.touched:
        out += ["", "### Retry paths", "", "Highlighted: yellow = created, updated or replaced; red = deleted."]
    for key in sorted(m.touched):
        out += _diagram(m, key)
    return "\n".join(out)


LABELS = frozenset({"tiers", "queue_type", "delivery_limit", "max_retries", "min_delay_ms", "max_delay_ms", "backoff",
                    "delay_unit_ms", "delay_levels"})
"""Contract fields a retry path's diagram shows as labels (delays, back-off, counts), not as nodes or edges."""


def _shape(contract: Mapping[str, Any] | None) -> Any:
    """A retry path's nodes and edges, without the labels (delays, back-off, max retries) and the queue type, and
    without a migration's progress (`migration`: the Migrations section's). Only `tiers` contracts have tiers
    (`native` and `levels` have none)."""
    if contract is None:
        return None
    return {**{k: v for k, v in contract.items() if k not in LABELS and k != "migration"},
            "tiers": [{k: v for k, v in t.items() if k != "delay_ms"} for t in contract.get("tiers", [])]}


def compact(m: Model, allow_data_loss: bool = False) -> str:
    """The review for one pull-request comment, at most LIMIT characters whatever the change (unless its
    risky rows alone are longer: they are never dropped). Identical changes are one row; safe rows, grouped
    contract changes and diagrams fill what is left, risky retry paths first."""
    if not m.rows and not m.touched:
        return f"**No changes** — {m.counts['same']:,} unchanged."
    must = [r for r in m.rows if r.risk in MUST_SEE]
    out = _summary(m, allow_data_loss)
    if m.rows:
        out += TABLE
    must_lines = grouped_rows(m, must)
    out += [line.text for line in must_lines]
    stars = any(line.stars for line in must_lines)  # some line shown writes a retryable queue's name as `*`
    tail: list[str] = []
    size = len("\n".join(out)) + 600  # the heading and the notes below
    if size > LIMIT:
        out[1:1] = ["", f"> ⚠️ The rows at risk alone take {size:,} characters, more than a comment's "
                    f"{LIMIT:,}: every one is listed below anyway; GitHub may refuse or cut this comment."]
    safe_lines = grouped_rows(m, [r for r in m.rows if r.risk not in MUST_SEE])
    kept = 0
    for line in safe_lines:
        if size + len(line.text) + 1 > LIMIT - RETRY_PATHS_ROOM * bool(m.touched):
            break
        out.append(line.text)
        stars = stars or line.stars
        size += len(line.text) + 1
        kept += 1
    if kept < len(safe_lines):
        tail.append(f"{len(safe_lines) - kept:,} more rows of safe changes are in the full report.")
    grouped = len(safe_lines) + len(must_lines) < len(m.rows)

    risky = {r.family for r in m.rows if r.risk in MUST_SEE and r.family}
    drawn = sorted((k for k in m.touched if k in risky or _shape(m.contracts[0].get(k)) != _shape(
        m.contracts[1].get(k))), key=lambda k: (k not in risky, k))
    not_drawn = [k for k in sorted(m.touched) if k not in set(drawn)]
    lines: dict[str, list[str]] = {}
    starred: set[str] = set()
    for key in not_drawn:
        before, after = m.contracts[0].get(key), m.contracts[1].get(key)
        if before == after:
            continue
        changes = _contract_changes(relative_contract(before) if before else None,
                                    relative_contract(after) if after else None)
        text = "; ".join(changes)
        lines.setdefault(f"{key[0]}\0{text}", []).append(key[1])
        if changes != _contract_changes(before, after):  # names of the queue's own objects, written `*.retry`
            starred.add(f"{key[0]}\0{text}")
    paths = []
    for joined, queues in sorted(lines.items()):
        vhost, text = joined.split("\0")
        every = {k[1] for k in m.families.get(vhost, set())}
        who = (f"every retryable queue in vhost {markdown.code(vhost)} ({len(queues):,})"
               if len(queues) > 1 and set(queues) == every else
               f"{markdown.code(vhost)} / " + listed(queues, NAMES_SHOWN))
        paths.append(Line(f"- Retry contract: {markdown.text(text)} — {who}", joined in starred))
    header = ["", "### Retry paths", ""]
    if paths or drawn:
        size += len("\n".join(header)) + 80
        out += header
    for line in paths:
        if size + len(line.text) + 1 > LIMIT:
            tail.append("More retry contract changes are in the full report.")
            break
        out.append(line.text)
        stars = stars or line.stars
        size += len(line.text) + 1
    shown = 0
    for key in drawn:
        diagram = _diagram(m, key)
        if shown == 0:  # one blank line after the contract lines, or after the heading when there is none
            diagram[:0] = [*([""] if out[-1] else []), "Diagrams of the retry paths whose shape or risk changed; "
                           "yellow = created, updated or replaced; red = deleted."]
        length = len("\n".join(diagram)) + 1
        if shown == MAX_DIAGRAMS or size + length > LIMIT:
            break
        out += diagram
        size += length
        shown += 1
    if shown < len(drawn):
        tail.append(f"{len(drawn) - shown:,} more retry paths changed shape or risk; their diagrams are in the full "
                    "report.")
    if tail or grouped:
        star = " (`*` stands for each retryable queue's name)" if stars else ""
        tail.append(f"Identical changes are grouped{star}; the full report (`--output-full`, in CI the artifact "
                    "`review-<stack>-full`) lists every change and diagram.")
    return "\n".join([*out, *(["", *(f"_{t}_" for t in tail)] if tail else [])])


@dataclass(frozen=True)
class Review:
    compact: str
    """For one pull-request comment: at most LIMIT characters, unless the rows at risk alone are longer."""
    full: str
    """Every change and diagram, ungrouped."""
    status: int
    """2 when data loss is not acknowledged, else 0."""
    rows: tuple[Row, ...] = ()
    """Every row of the full review, riskiest first (`make review FORMAT=json`)."""


def render(steps: Sequence[Step], old: Sequence[Registered], new: Sequence[Registered],
           plans: tuple[PlanIndex, PlanIndex], allow_data_loss: bool = False,
           migrations: Sequence[MigrationInfo] = (), stack: str = "<stack>", read: Reader | None = None,
           endpoint: str | None = None) -> Review:
    """The review's Markdown (grouped for a comment, and in full) and the exit status; `plans` say what the
    planner knew of each side's resources (`Evaluation.plan`), BASE's first; `migrations`: the working tree's
    (the working tree's evaluation), each with a section of its own (what each old queue holds now with `read`)."""
    # The path guards (pulumi:index:Stash) are not topology: the guard section shows the paths they guard.
    steps = [s for s in steps if s.type != engine.STASH]
    old = [r for r in old if r.type != engine.STASH]
    new = [r for r in new if r.type != engine.STASH]
    m = model(steps, old, new, plans, migrations)
    lost = any(r.risk == DATA_LOSS for r in m.rows)
    fails = any(r.risk == FAILS for r in m.rows)
    moving = migration_section(migrations, steps, old, plans[0], stack, read, endpoint)
    return Review(compact(m, allow_data_loss) + moving, full(m, allow_data_loss) + moving,
                  2 if fails or (lost and not allow_data_loss) else 0, tuple(m.rows))
