"""The review as Markdown: in full, and for one pull-request comment within LIMIT characters (rows at risk
first and never dropped, then safe rows, grouped contract changes and diagrams while room is left)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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

FAILS_NOTE = ("> ⛔ `pulumi up` would stop halfway, after replacing (and emptying) other queues: resolve the rows "
              "marked **fails** before applying this change; ALLOW_DATA_LOSS does not waive them.")
LOSS_NOTES = {
    False: "> ⚠️ The queues below lose their messages. Drain them first (docs/operations.md: Changing topology "
           "safely), then acknowledge with ALLOW_DATA_LOSS=1 or --allow-data-loss.",
    True: "> ⚠️ Data loss acknowledged (ALLOW_DATA_LOSS=1 or --allow-data-loss): the queues below still lose their "
          "messages."}
CONTRACT_NOTE = ("> 💥 Consumers of the old retry contract break as said below: redeploy them with the new contract "
                 "before, or together with, `pulumi up`.")


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
    for level, note in ((FAILS, FAILS_NOTE), (DATA_LOSS, LOSS_NOTES[allow_data_loss]), (CONTRACT, CONTRACT_NOTE)):
        out += ["", note] * bool(by_risk[level])
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


@dataclass
class _Comment:
    """The comment's lines as they are written, their size in characters (with room kept for the heading and the
    notes), and whether a line shown writes a retryable queue's name as `*`."""

    out: list[str]
    size: int
    stars: bool
    grouped: bool = False
    """Identical changes were grouped into one row."""
    notes: list[str] = field(default_factory=list)
    """What was left out, in italics at the end."""

    def fill(self, lines: Sequence[Line], limit: int) -> int:
        """Add `lines` (one or more lines of text each) in order while the comment stays within `limit` characters;
        how many were added."""
        for added, line in enumerate(lines):
            if self.size + len(line.text) + 1 > limit:
                return added
            self.out.append(line.text)
            self.stars = self.stars or line.stars
            self.size += len(line.text) + 1
        return len(lines)

    def text(self) -> str:
        """The comment, with the notes on what was left out or grouped and where the full report is."""
        notes = self.notes
        if notes or self.grouped:
            star = " (`*` stands for each retryable queue's name)" if self.stars else ""
            notes = [*notes, f"Identical changes are grouped{star}; the full report (`--output-full`, in CI the "
                     "artifact `review-<stack>-full`) lists every change and diagram."]
        return "\n".join([*self.out, *(["", *(f"_{t}_" for t in notes)] if notes else [])])


def _contract_lines(m: Model, keys: Sequence[QueueKey]) -> list[Line]:
    """One line per vhost and contract change of the retry paths in `keys`, naming the queues it applies to."""
    lines: dict[tuple[str, str], list[str]] = {}
    starred: set[tuple[str, str]] = set()
    for key in keys:
        before, after = m.contracts[0].get(key), m.contracts[1].get(key)
        if before == after:
            continue
        changes = _contract_changes(relative_contract(before) if before else None,
                                    relative_contract(after) if after else None)
        joined = (key[0], "; ".join(changes))
        lines.setdefault(joined, []).append(key[1])
        if changes != _contract_changes(before, after):  # names of the queue's own objects, written `*.retry`
            starred.add(joined)
    paths = []
    for (vhost, text), queues in sorted(lines.items()):
        every = {k[1] for k in m.families.get(vhost, set())}
        who = (f"every retryable queue in vhost {markdown.code(vhost)} ({len(queues):,})"
               if len(queues) > 1 and set(queues) == every else
               f"{markdown.code(vhost)} / " + listed(queues, NAMES_SHOWN))
        paths.append(Line(f"- Retry contract: {markdown.text(text)} — {who}", (vhost, text) in starred))
    return paths


def _drawn(m: Model) -> list[QueueKey]:
    """The retry paths whose diagram the comment shows: those with a risky row first, then those whose shape
    changed."""
    risky = {r.family for r in m.rows if r.risk in MUST_SEE and r.family}
    return sorted((k for k in m.touched if k in risky or _shape(m.contracts[0].get(k)) != _shape(
        m.contracts[1].get(k))), key=lambda k: (k not in risky, k))


def _diagrams(m: Model, drawn: Sequence[QueueKey], above: str) -> list[Line]:
    """The diagrams of `drawn`, MAX_DIAGRAMS at the most, the first introduced (after a blank line unless `above`,
    the line before it, is one)."""
    diagrams = [_diagram(m, key) for key in drawn[:MAX_DIAGRAMS]]
    if diagrams:
        diagrams[0][:0] = [*([""] if above else []), "Diagrams of the retry paths whose shape or risk changed; "
                           "yellow = created, updated or replaced; red = deleted."]
    return [Line("\n".join(diagram), False) for diagram in diagrams]


def _rows(m: Model, allow_data_loss: bool) -> _Comment:
    """The summary and the table: every row at risk, then safe rows while room is left for the retry paths; the
    notes on what was left out or grouped."""
    must_lines = grouped_rows(m, [r for r in m.rows if r.risk in MUST_SEE])
    out = [*_summary(m, allow_data_loss), *(TABLE if m.rows else []), *(line.text for line in must_lines)]
    comment = _Comment(out, len("\n".join(out)) + 600, any(line.stars for line in must_lines))
    if comment.size > LIMIT:
        out[1:1] = ["", f"> ⚠️ The rows at risk alone take {comment.size:,} characters, more than a comment's "
                    f"{LIMIT:,}: every one is listed below anyway; GitHub may refuse or cut this comment."]
    safe_lines = grouped_rows(m, [r for r in m.rows if r.risk not in MUST_SEE])
    kept = comment.fill(safe_lines, LIMIT - RETRY_PATHS_ROOM * bool(m.touched))
    if kept < len(safe_lines):
        comment.notes.append(f"{len(safe_lines) - kept:,} more rows of safe changes are in the full report.")
    comment.grouped = len(safe_lines) + len(must_lines) < len(m.rows)
    return comment


def compact(m: Model, allow_data_loss: bool = False) -> str:
    """The review for one pull-request comment, at most LIMIT characters whatever the change (unless its
    risky rows alone are longer: they are never dropped). Identical changes are one row; safe rows, grouped
    contract changes and diagrams fill what is left, risky retry paths first."""
    if not m.rows and not m.touched:
        return f"**No changes** — {m.counts['same']:,} unchanged."
    comment = _rows(m, allow_data_loss)
    drawn = _drawn(m)
    paths = _contract_lines(m, [k for k in sorted(m.touched) if k not in set(drawn)])
    if paths or drawn:
        comment.size += len("\n".join(["", "### Retry paths", ""])) + 80
        comment.out += ["", "### Retry paths", ""]
    if comment.fill(paths, LIMIT) < len(paths):
        comment.notes.append("More retry contract changes are in the full report.")
    if (shown := comment.fill(_diagrams(m, drawn, comment.out[-1]), LIMIT)) < len(drawn):
        comment.notes.append(f"{len(drawn) - shown:,} more retry paths changed shape or risk; their diagrams are in "
                             "the full report.")
    return comment.text()


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
    risks = {r.risk for r in m.rows}
    moving = migration_section(migrations, steps, old, plans[0], stack, read, endpoint)
    return Review(compact(m, allow_data_loss) + moving, full(m, allow_data_loss) + moving,
                  2 if FAILS in risks or (DATA_LOSS in risks and not allow_data_loss) else 0, tuple(m.rows))
