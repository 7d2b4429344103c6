"""`make review BASE=<rev> STACK=<stack>`: what `pulumi up` would do to a stack between git revision BASE
and the working tree, as Markdown for a pull-request comment, with the risk of every change.

Both sides run under Pulumi's mocks (no CLI, broker or secrets), at once, each in its own `tools.mockrun`
subprocess so that BASE's own `__main__.py` and `components/` are evaluated; `tools.engine` compares them.
The review printed (and written to --output) fits one comment: identical changes are grouped, diagrams
are drawn for retry paths whose shape or risk changed; --output-full gets every change and diagram.
Exit status: 0 no data loss (or acknowledged with ALLOW_DATA_LOSS=1 / --allow-data-loss), 2 a queue or
vhost is deleted or replaced, or `pulumi up` would fail halfway (a retained error queue replaced under its own
name: no acknowledgement waives that), 1 error (a config error is printed as `pulumi preview` prints it).
Contract and protection risks are flagged, and do not change it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

from components.durations import format_duration
from components.naming import DELAY_PREFIX
from tools import engine, markdown
from tools.checkout import CheckoutError, checkout
from tools.diagram import retry_path
from tools.engine import Step
from tools.inventory import (
    RETRYABLE_COMPONENT,
    QueueKey,
    config_policies,
    contracts,
    physical_name,
    retryable_queue_of,
    short_type,
)
from tools.mockrun import Registered
from tools.risk import (
    ACCESS,
    CONTRACT,
    DATA_LOSS,
    FAILS,
    MUST_SEE,
    ORDER,
    PROTECTION,
    SAFE,
    contract_breaks,
    fails_halfway,
    option_risk,
    risk,
)
from tools.stack_file import is_secret_placeholder

TOOLS_ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("op", "type", "logical name", "physical name", "what changed", "risk")


class ReviewError(Exception):
    """The program failed; the message is shown as is (mockrun's stderr for a config error)."""


class BaseProgramError(ReviewError):
    """The program at BASE failed (the working tree's did not)."""


def _fmt(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _lookup(inputs: Mapping[str, Any] | None, path: str) -> Any:
    """An input by engine path; JSON text (argumentsJson) is looked into."""
    value: Any = inputs
    for part in path.split("."):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def what_changed(step: Step, names: Mapping[str, str]) -> str:
    """`message-ttl 1000 → 2000` per changed path; a dragged replacement names its cause. Markdown."""
    parts = [f"replaced with {markdown.code(names.get(step.replaced_dependency, step.replaced_dependency))}"] * bool(
        step.replaced_dependency)
    if step.op == "create":
        parts += [markdown.text(part) for part in _created(step)]
    for path in step.changed:
        label = re.sub(r"^(policy\.definition|settings\.argumentsJson|settings)\.", "", path)
        before, after = _lookup(step.old, path), _lookup(step.new, path)
        if is_secret_placeholder(before) or is_secret_placeholder(after):
            parts.append(markdown.text(f"{label} changed (secret)"))
        else:
            parts.append(markdown.text(f"{label} {_fmt(before)} → {_fmt(after)}"))
    return "; ".join(parts)


def _created(step: Step) -> list[str]:
    """What a new policy sets and what a new user, permission or topic permission grants."""
    new = step.new or {}
    if step.type in (engine.POLICY, engine.OPERATOR_POLICY):
        return [f"{k} {_fmt(v)}" for k, v in sorted((_lookup(new, "policy.definition") or {}).items())]
    if step.type == engine.PERMISSIONS:
        grants = new.get("permissions") or {}
        return [f"{k} {_fmt(grants.get(k, ''))}" for k in ("configure", "write", "read")]
    if step.type == engine.TOPIC_PERMISSIONS:
        return [f"topic {p.get('exchange')}: write {_fmt(p.get('write', ''))} read {_fmt(p.get('read', ''))}"
                for p in sorted(new.get("permissions") or [], key=lambda p: str(p.get("exchange")))]
    if step.type == engine.USER:
        return [f"tags {', '.join(new.get('tags') or []) or '(none)'}"]
    return []


def _notes(step: Step, vhost_deleted: bool = False) -> str:
    notes = []
    if step.protect and step.op in ("delete", "replace"):
        notes.append("🔒 protected: `pulumi up` will refuse until unprotected")
    if fails_halfway(step, vhost_deleted):
        notes.append("⛔ retained (retain_error_queues): `pulumi up` leaves the old queue in place, then fails to "
                     'create it again (400 "inequivalent arg") after replacing the queues before it; first move its '
                     "parked messages elsewhere and delete it by hand (`pulumi up` then creates it), or give the "
                     "queue another name")
    elif step.retain_on_delete and step.op == "delete" and vhost_deleted:
        notes.append(f"retain_on_delete cannot keep it: deleting vhost {markdown.code(_vhost_of(step))} deletes it "
                     "with its messages")
    elif step.retain_on_delete and step.op == "delete":
        notes.append("retained on the broker with its messages (retain_on_delete), no longer managed")
    return "".join(f" — {note}" for note in notes)


def _vhost_of(step: Step) -> str:
    return str((step.old or step.new or {}).get("vhost", "/"))


def _contract_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    if old is None or new is None:
        return ["new retryable queue" if old is None else "retryable queue removed"]
    # A contract without `strategy` is a tiers contract: a switch reads `strategy tiers → native`.
    old, new = {"strategy": "tiers", **old}, {"strategy": "tiers", **new}
    changes = [f"{k} {_fmt(old.get(k))} → {_fmt(new.get(k))}" for k in sorted(set(old) | set(new))
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
NAMES_SHOWN = 10
"""Names a group of safe changes lists before `and N more`; a group of risky ones lists every name."""
OP_ORDER = {"replace": 0, "delete": 1, "update": 2, "create": 3, "options": 4}
PLURALS = {"Policy": "policies", "OperatorPolicy": "operator policies", "VHost": "vhosts",
           "Permissions": "permissions", "TopicPermissions": "topic permissions"}
RETRYABLE = "RetryableQueue"


DELAY_LEVEL = re.compile(rf"{re.escape(DELAY_PREFIX)}\.[0-9]+")


def any_level(text: str) -> str:
    """`text` with each delay level `rabbitmq-retry.delay.<k>` as `rabbitmq-retry.delay.*`, so that the same change
    to every level of a vhost's shared delay levels reads alike (and is one row)."""
    return DELAY_LEVEL.sub(f"{DELAY_PREFIX}.*", text)


def relative(name: str, queue: str) -> str:
    """`name` with the retryable queue's own name as `*` (`orders.wait.3` → `*.wait.3`, a binding
    `orders.retry → orders.wait.3` → `*.retry → *.wait.3`), so that its siblings in other queues read alike."""
    return " → ".join("*" + part[len(queue):] if part == queue or part.startswith(queue + ".") else part
                      for part in name.split(" → "))


@dataclass(frozen=True)
class Row:
    """One line of the changes table: a step, a protect/retain toggle, or a break of a retry contract."""

    risk: str
    op: str
    type: str
    logical: str
    physical: str
    what: str
    """Markdown."""
    notes: str
    vhost: str
    family: QueueKey | None
    """The retryable queue the resource belongs to."""
    role: str
    """The physical name relative to `family` (`*.wait.3`), or the physical name."""
    what_alike: str
    """`what` with names relative to their retryable queue: equal for the same change in sibling queues."""

    def cells(self) -> list[str]:
        label = f"**{self.risk}**" if self.risk != SAFE else SAFE
        return [self.op, self.type, markdown.code(self.logical), markdown.code(self.physical), self.what,
                label + self.notes]

    def order(self) -> tuple[int, int, str, str, list[Any], str, str]:
        return (ORDER[self.risk], OP_ORDER.get(self.op, 9), self.type, self.vhost, _natural(self.physical),
                self.logical, self.what)


def _vhost(record: Registered) -> str:
    return str(record.inputs.get("name" if record.type == engine.VHOST else "vhost", "/"))


def _relative_contract(contract: Mapping[str, Any]) -> dict[str, Any]:
    queue = contract["queue"]

    def rel(value: Any) -> Any:
        if isinstance(value, str):
            return relative(value, queue)
        if isinstance(value, list):
            return [rel(v) for v in value]
        return {k: rel(v) for k, v in value.items()} if isinstance(value, dict) else value
    return {k: v if k in ("queue", "vhost") else rel(v) for k, v in contract.items()}


@dataclass
class Model:
    """Everything a review shows, before it is grouped for a comment or listed in full."""

    rows: list[Row]
    counts: Counter[str]
    contracts: tuple[dict[QueueKey, dict[str, Any]], dict[QueueKey, dict[str, Any]]]
    touched: dict[QueueKey, list[Step]]
    physical: dict[str, str]
    families: dict[str, set[QueueKey]]
    """Retryable queues per vhost, after the change (before it for what is deleted: `families_before`)."""
    families_before: dict[str, set[QueueKey]]
    stale: list[str]


def _step_rows(steps: Sequence[Step], old_by: Mapping[str, Registered], new_by: Mapping[str, Registered]) -> list[Row]:
    names = {urn: r.name for by in (old_by, new_by) for urn, r in by.items()}
    alike_names = dict(names)
    for by in (old_by, new_by):
        for urn, record in by.items():
            if (family := retryable_queue_of(record, by)) is not None:
                alike_names[urn] = relative(physical_name(record), family[1])
    retryables = {key for by in (old_by, new_by) for key in contracts(list(by.values()))}
    deleted_vhosts = {str((s.old or {}).get("name")) for s in steps
                      if s.type == engine.VHOST and s.op in ("delete", "replace") and not s.retain_on_delete}
    rows = []
    for s in (s for s in steps if s.custom and s.op != "same"):
        by_urn = old_by if s.op == "delete" else new_by
        record = by_urn[s.urn]
        physical = physical_name(record)
        family = retryable_queue_of(record, by_urn) or _bound_to(physical, _vhost(record), retryables)
        vhost_deleted = s.type != engine.VHOST and _vhost_of(s) in deleted_vhosts
        rows.append(Row(risk(s, vhost_deleted), s.op, short_type(s.type), s.name, physical, what_changed(s, names),
                        _notes(s, vhost_deleted),
                        _vhost(record), family, relative(physical, family[1]) if family else any_level(physical),
                        any_level(what_changed(s, alike_names))))
    return rows


def _bound_to(physical: str, vhost: str, retryables: set[QueueKey]) -> QueueKey | None:
    """The retryable queue a config binding of the vhost leads to (`events → orders`)."""
    return next(((vhost, part) for part in physical.split(" → ") if (vhost, part) in retryables), None)


def _option_rows(old: Sequence[Registered], new_by: Mapping[str, Registered]) -> list[Row]:
    """`protect` and `retain_on_delete` turned on or off: `pulumi up` changes no object for it (and
    `pulumi preview` shows no step), but what a later deletion does changes."""
    rows = []
    for before in (r for r in old if r.custom and r.urn in new_by):
        after = new_by[before.urn]
        for option, was, now in (("protect", before.protect, after.protect),
                                 ("retain_on_delete", before.retain_on_delete, after.retain_on_delete)):
            if was == now:
                continue
            level = option_risk(after.type, now)
            note = ""
            if level == PROTECTION:
                note = (" — `pulumi up` no longer refuses to delete or replace it" if option == "protect"
                        else " — deleting it now deletes its messages on the broker")
            what = markdown.text(f"{option} {'on' if was else 'off'} → {'on' if now else 'off'}")
            family = retryable_queue_of(after, new_by)
            physical = physical_name(after)
            rows.append(Row(level, "options", short_type(after.type), after.name, physical, what, note,
                            _vhost(after), family, relative(physical, family[1]) if family else physical, what))
    return rows


def _contract_rows(old_contracts: Mapping[QueueKey, dict[str, Any]], new_contracts: Mapping[QueueKey, dict[str, Any]],
                   components: Mapping[QueueKey, str]) -> list[Row]:
    rows = []
    for key in sorted(set(old_contracts) & set(new_contracts)):
        before, after = old_contracts[key], new_contracts[key]
        if before == after:
            continue
        alike = contract_breaks(_relative_contract(before), _relative_contract(after))
        for text, text_alike in zip(contract_breaks(before, after), alike, strict=True):
            rows.append(Row(CONTRACT, "contract", RETRYABLE, components.get(key, ""), key[1], markdown.text(text),
                            "", key[0], key, "*", markdown.text(text_alike)))
    return rows


def _stale_policies(old: Sequence[Registered], new: Sequence[Registered]) -> list[str]:
    """User and operator policies of the config that match nothing after the change."""
    before = config_policies(old)
    lines = []
    for key, policy in sorted(config_policies(new).items()):
        if policy.matches:
            continue
        was = before.get(key)
        since = ("it matched nothing before either" if was is not None and not was.matches
                 else f"it matched {was.matches:,} before" if was is not None else "it is new")
        lines.append(f"- {policy.kind} {markdown.code(policy.name)} in vhost {markdown.code(policy.vhost)} (pattern "
                     f"{markdown.code(policy.pattern)}, apply-to {policy.apply_to}) matches no queue or exchange "
                     f"after this change ({since}): if a queue was renamed, update the pattern")
    return lines


def model(steps: Sequence[Step], old: Sequence[Registered], new: Sequence[Registered]) -> Model:
    old_by, new_by = {r.urn: r for r in old}, {r.urn: r for r in new}
    old_contracts, new_contracts = contracts(old), contracts(new)
    touched: dict[QueueKey, list[Step]] = {k: [] for k in set(old_contracts) | set(new_contracts)
                                           if old_contracts.get(k) != new_contracts.get(k)}
    for s in (s for s in steps if s.op != "same"):
        by_urn = old_by if s.op == "delete" else new_by
        key = retryable_queue_of(by_urn[s.urn], by_urn)
        if key is not None:
            touched.setdefault(key, []).append(s)
    components = {(c["vhost"], c["queue"]): r.name for r in [*old, *new] if r.type == RETRYABLE_COMPONENT
                  for c in [r.outputs.get("contract")] if c}
    rows = [*_step_rows(steps, old_by, new_by), *_option_rows(old, new_by),
            *_contract_rows(old_contracts, new_contracts, components)]
    families: dict[str, set[QueueKey]] = {}
    families_before: dict[str, set[QueueKey]] = {}
    for found, by_vhost in ((new_contracts, families), (old_contracts, families_before)):
        for key in found:
            by_vhost.setdefault(key[0], set()).add(key)
    physical = {urn: physical_name(r) for by in (old_by, new_by) for urn, r in by.items()}
    return Model(sorted(rows, key=Row.order), Counter(s.op for s in steps if s.custom), (old_contracts, new_contracts),
                 touched, physical, families, families_before,
                 _stale_policies(old, new) if rows or touched else [])


def _summary(m: Model, allow_data_loss: bool) -> list[str]:
    by_risk = Counter(r.risk for r in m.rows)
    counts = m.counts
    summary = [f"{counts[op]:,} to {op}" for op in ("replace", "delete", "update", "create") if counts[op]]
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
        out += ["", "> ⚠️ The queues below lose their messages. Drain them first (README: Changing topology "
                "safely), then acknowledge with ALLOW_DATA_LOSS=1 or --allow-data-loss."]
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


def _plural(kind: str, count: int) -> str:
    if count == 1:
        return kind
    return PLURALS.get(kind, kind.lower() + ("es" if kind.endswith("x") else "s"))


def _listed(names: Sequence[str], limit: int | None) -> str:
    shown = names if limit is None else names[:limit]
    more = len(names) - len(shown)
    return ", ".join(markdown.code(n) for n in shown) + (f" and {more:,} more" if more else "")


def _every_name(rows: Sequence[Row]) -> str:
    """Every name of a group of risky rows, compactly: the resources of retryable queues by role, once for
    all the queues that share them (`` `*`, `*.wait.1` of 1,000 retryable queues: `q0000`, … ``), then the rest."""
    roles: dict[QueueKey, set[str]] = {}
    for r in rows:
        if r.family is not None:
            roles.setdefault(r.family, set()).add(r.role)
    alike: dict[tuple[str, ...], list[str]] = {}
    for family, own in roles.items():
        alike.setdefault(tuple(sorted(own)), []).append(family[1])
    parts = [f"{', '.join(markdown.code(role) for role in shared)} of {len(queues):,} retryable "
             f"queue{'s' * (len(queues) != 1)}: {_listed(sorted(queues), None)}"
             for shared, queues in sorted(alike.items())]
    rest = sorted(r.physical for r in rows if r.family is None)
    return "; ".join([*parts, *([_listed(rest, None)] if rest else [])])


def _described(m: Model, rows: Sequence[Row]) -> str:
    """What a group of safe rows covers: `*.wait.3 of every retryable queue in vhost shop`, or names."""
    first = rows[0]
    vhost = markdown.code(first.vhost)
    if first.family is not None and all(r.family is not None for r in rows):
        queues = sorted({r.family[1] for r in rows if r.family})
        every = (m.families_before if first.op == "delete" else m.families).get(first.vhost, set())
        if {r.family for r in rows} == every and len(queues) > 1:
            return f"{markdown.code(first.role)} of every retryable queue in vhost {vhost}"
        return f"{markdown.code(first.role)} of {len(queues):,} retryable queues in vhost {vhost}: " + _listed(
            queues, NAMES_SHOWN)
    return f"in vhost {vhost}: " + _listed(sorted((r.physical for r in rows), key=_natural), NAMES_SHOWN)


def _natural(name: str) -> list[Any]:
    """Numbers in a name compared as numbers: `rabbitmq-retry.delay.2` before `rabbitmq-retry.delay.10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


def _group_key(r: Row) -> tuple[Any, ...]:
    """Risky rows group by change alone (their names are all listed); safe ones by role too."""
    return (r.order()[:2], r.type, r.vhost, r.what_alike, r.notes, None if r.risk in MUST_SEE else r.role)


def _grouped(m: Model, rows: Sequence[Row]) -> list[str]:
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(_group_key(r), []).append(r)
    lines = []
    for group in groups.values():
        if len(group) == 1:
            lines.append(markdown.row(group[0].cells()))
            continue
        first = group[0]
        label = f"**{first.risk}**" if first.risk != SAFE else SAFE
        kind = "retryable queues" if first.type == RETRYABLE else _plural(first.type, len(group))
        names = (f"in vhost {markdown.code(first.vhost)}: " + _every_name(group) if first.risk in MUST_SEE
                 else _described(m, group))
        lines.append(markdown.row([first.op, first.type, f"{len(group):,} {kind}", names, first.what_alike,
                                   label + first.notes]))
    return lines


LABELS = frozenset({"tiers", "queue_type", "delivery_limit", "max_retries", "min_delay_ms", "max_delay_ms", "backoff",
                    "delay_unit_ms", "delay_levels"})
"""Contract fields a retry path's diagram shows as labels (delays, back-off, counts), not as nodes or edges."""


def _shape(contract: Mapping[str, Any] | None) -> Any:
    """A retry path's nodes and edges, without the labels (delays, back-off, max retries) and the queue type.
    Only `tiers` contracts have tiers (`native` and `levels` have none)."""
    if contract is None:
        return None
    return {**{k: v for k, v in contract.items() if k not in LABELS},
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
    out += _grouped(m, must)
    tail: list[str] = []
    size = len("\n".join(out)) + 600  # the heading and the notes below
    if size > LIMIT:
        out[1:1] = ["", f"> ⚠️ The rows at risk alone take {size:,} characters, more than a comment's "
                    f"{LIMIT:,}: every one is listed below anyway; GitHub may refuse or cut this comment."]
    safe_lines = _grouped(m, [r for r in m.rows if r.risk not in MUST_SEE])
    kept = 0
    for line in safe_lines:
        if size + len(line) + 1 > LIMIT - RETRY_PATHS_ROOM * bool(m.touched):
            break
        out.append(line)
        size += len(line) + 1
        kept += 1
    if kept < len(safe_lines):
        tail.append(f"{len(safe_lines) - kept:,} more rows of safe changes are in the full report.")
    grouped = len(safe_lines) + len(_grouped(m, must)) < len(m.rows)

    risky = {r.family for r in m.rows if r.risk in MUST_SEE and r.family}
    drawn = sorted((k for k in m.touched if k in risky or _shape(m.contracts[0].get(k)) != _shape(
        m.contracts[1].get(k))), key=lambda k: (k not in risky, k))
    not_drawn = [k for k in sorted(m.touched) if k not in set(drawn)]
    lines: dict[str, list[str]] = {}
    for key in not_drawn:
        before, after = m.contracts[0].get(key), m.contracts[1].get(key)
        if before == after:
            continue
        text = "; ".join(_contract_changes(_relative_contract(before) if before else None,
                                           _relative_contract(after) if after else None))
        lines.setdefault(f"{key[0]}\0{text}", []).append(key[1])
    paths = []
    for joined, queues in sorted(lines.items()):
        vhost, text = joined.split("\0")
        every = {k[1] for k in m.families.get(vhost, set())}
        who = (f"every retryable queue in vhost {markdown.code(vhost)} ({len(queues):,})"
               if len(queues) > 1 and set(queues) == every else
               f"{markdown.code(vhost)} / " + _listed(queues, NAMES_SHOWN))
        paths.append(f"- Retry contract: {markdown.text(text)} — {who}")
    header = ["", "### Retry paths", ""]
    if paths or drawn:
        size += len("\n".join(header)) + 80
        out += header
    for line in paths:
        if size + len(line) + 1 > LIMIT:
            tail.append("More retry contract changes are in the full report.")
            break
        out.append(line)
        size += len(line) + 1
    shown = 0
    for key in drawn:
        diagram = _diagram(m, key)
        if shown == 0:
            diagram[:0] = ["", "Diagrams of the retry paths whose shape or risk changed; yellow = created, updated "
                           "or replaced; red = deleted."]
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
        tail.append("Identical changes are grouped (`*` stands for each retryable queue's name); the full report "
                    "(`--output-full`, in CI the artifact `review-<stack>-full`) lists every change and diagram.")
    return "\n".join([*out, *(["", *(f"_{t}_" for t in tail)] if tail else [])])


@dataclass(frozen=True)
class Review:
    compact: str
    """For one pull-request comment: at most LIMIT characters, unless the rows at risk alone are longer."""
    full: str
    """Every change and diagram, ungrouped."""
    status: int
    """2 when data loss is not acknowledged, else 0."""


def render(steps: Sequence[Step], old: Sequence[Registered], new: Sequence[Registered],
           allow_data_loss: bool = False) -> Review:
    """The review's Markdown (grouped for a comment, and in full) and the exit status."""
    m = model(steps, old, new)
    lost = any(r.risk == DATA_LOSS for r in m.rows)
    fails = any(r.risk == FAILS for r in m.rows)
    return Review(compact(m, allow_data_loss), full(m, allow_data_loss),
                  2 if fails or (lost and not allow_data_loss) else 0)


def _start(stack: str, root: Path, output: IO[str]) -> subprocess.Popen[str]:
    """The program at `root` under mocks, in a fresh interpreter running these tools (so that `root`'s
    own `components/` are imported), writing its recording to `output`."""
    return subprocess.Popen([sys.executable, "-m", "tools.mockrun", "--stack", stack, "--root", str(root)],
                            cwd=TOOLS_ROOT, stdout=output, stderr=subprocess.PIPE, text=True)


def _recording(process: subprocess.Popen[str], output: IO[str]) -> list[Registered]:
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise ReviewError(stderr.rstrip() or f"error: tools.mockrun exited {process.returncode}")
    output.seek(0)
    known = {f.name for f in fields(Registered)}
    return [Registered(**{k: v for k, v in item.items() if k in known}) for item in json.load(output)]


def evaluate_both(stack: str, head: Path, base: Path | None) -> tuple[list[Registered], list[Registered]]:
    """(BASE, HEAD) recordings, both programs running at once; [] for a BASE without the stack."""
    with tempfile.TemporaryFile("w+") as head_out, tempfile.TemporaryFile("w+") as base_out:
        at_head = _start(stack, head, head_out)
        at_base = _start(stack, base, base_out) if base is not None else None
        try:
            new = _recording(at_head, head_out)
        finally:  # never leave BASE running, whatever HEAD did
            try:
                old = _recording(at_base, base_out) if at_base is not None else []
            except ReviewError as error:
                base_error: ReviewError | None = BaseProgramError(str(error))
            else:
                base_error = None
        if base_error is not None:
            raise base_error
    return old, new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision to compare with, e.g. origin/main")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project directory (default: current)")
    parser.add_argument("--output", type=Path, help="also write the review for a comment here (for CI to post)")
    parser.add_argument("--output-full", type=Path, help="write the full, ungrouped review here")
    parser.add_argument("--allow-data-loss", action="store_true", help="acknowledge data loss: exit 0")
    args = parser.parse_args(argv)
    allow = args.allow_data_loss or os.environ.get("ALLOW_DATA_LOSS", "").lower() in ("1", "true", "yes")
    project, stack_file = args.root.resolve(), f"Pulumi.{args.stack}.yaml"
    try:
        if not (project / stack_file).exists():
            raise ReviewError(f"error: {stack_file} not found in {project}: is STACK={args.stack} a stack here?")
        with tempfile.TemporaryDirectory(prefix="rabbitmq-retry-review-") as tmp:
            commit = checkout(args.base, project, Path(tmp))
            at_base = (Path(tmp) / stack_file).exists()
            try:
                old, new = evaluate_both(args.stack, project, Path(tmp) if at_base else None)
            except BaseProgramError as error:
                raise ReviewError(f"the program at BASE={args.base} ({commit}) fails:\n{error}") from None
        steps = engine.diff(old, new)
    except (ReviewError, CheckoutError) as error:
        print(error, file=sys.stderr)
        return 1
    review = render(steps, old, new, allow_data_loss=allow)
    heading = f"## RabbitMQ review: stack `{args.stack}`, `{args.base}` ({commit}) → working tree"
    note = "" if at_base else f"\n\n`{stack_file}` does not exist at `{args.base}`: every resource is created."
    compact, complete = (f"{heading}{note}\n\n{body}\n" for body in (review.compact, review.full))
    sys.stdout.write(compact)
    if args.output:
        args.output.write_text(compact)
    if args.output_full:
        args.output_full.write_text(complete)
    return review.status


if __name__ == "__main__":
    sys.exit(main())
