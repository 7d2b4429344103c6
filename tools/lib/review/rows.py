"""The review's row model: one row per step of `pulumi up`, per protect/retain toggle and per break of a
retry contract, each with its risk, its retryable queue and its role in it (`*.wait.3`)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.config.pulumi_yaml import is_secret_placeholder
from components.model.naming import DELAY_PREFIX
from tools.lib import engine, markdown
from tools.lib.engine import Step, lookup, short_type
from tools.lib.inventory import (
    RETRYABLE_COMPONENT,
    config_policies,
    contracts,
    natural,
    physical_name,
)
from tools.lib.mockrun import Registered
from tools.lib.permissions import NO_PLAN, Names, Sides, kinds, names_of, permissions_of
from tools.lib.planned import PlanIndex, QueueKey, family_of
from tools.lib.review.migrations import MigrationInfo, kept_by_drains, retired_by
from tools.lib.risk import (
    CONTRACT,
    DATA_LOSS,
    ORDER,
    PROTECTION,
    SAFE,
    contract_breaks,
    fails_halfway,
    option_risk,
    password_changed,
    risk,
)

COLUMNS = ("op", "type", "logical name", "physical name", "what changed", "risk")


def formatted(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _regex_change(kind: str, before: str, after: str, old: Names, new: Names) -> str:
    """One permission regex's change: the names added and removed when the plans built both from lists of names
    (`old`, `new`: `permissions.names_of`; `+ a, − b`), else both regexes as code (no JSON escaping). Markdown."""
    if old is None or new is None:
        return f"{kind} {markdown.code(before) or '(none)'} → {markdown.code(after) or '(none)'}"
    changes = [f"+ {markdown.code(name)}" for name in sorted(set(new) - set(old))]
    changes += [f"− {markdown.code(name)}" for name in sorted(set(old) - set(new))]
    return f"{kind} {', '.join(changes)}"


def _grant_changes(step: Step, sides: Sides) -> list[str] | None:
    """What an update of Permissions or TopicPermissions adds and removes, per permission (and per exchange of
    topic permissions), instead of both whole regexes; None for any other step. `sides`: what each side's plan knew
    of the resource. Markdown."""
    if step.op != "update" or step.type not in (engine.PERMISSIONS, engine.TOPIC_PERMISSIONS):
        return None

    def change(exchange: str | None, kind: str, was: Any, now: Any) -> str:
        before, after = str(was.get(kind, "")), str(now.get(kind, ""))
        return _regex_change(kind, before, after, names_of(sides[0], exchange, kind, before),
                             names_of(sides[1], exchange, kind, after))

    before_by, after_by = permissions_of(step.type, step.old), permissions_of(step.type, step.new)
    if step.type == engine.PERMISSIONS:
        before, after = before_by[None], after_by[None]
        return [change(None, kind, before, after) for kind in kinds(None)
                if before.get(kind, "") != after.get(kind, "")]
    parts = []
    for exchange in sorted({str(x) for x in (*before_by, *after_by)}, key=natural):
        was, now = before_by.get(exchange), after_by.get(exchange)
        if now is None:
            parts.append(f"− topic {markdown.code(exchange)}")
        elif was is None:
            parts.append(f"+ topic {markdown.code(exchange)}: write {markdown.code(str(now.get('write', '')))} read "
                         f"{markdown.code(str(now.get('read', '')))}")
        else:
            parts += [f"topic {markdown.code(exchange)} " + change(exchange, kind, was, now)
                      for kind in kinds(exchange) if was.get(kind, "") != now.get(kind, "")]
    return parts


def what_changed(step: Step, names: Mapping[str, str], sides: Sides = NO_PLAN) -> str:
    """`message-ttl 1000 → 2000` per changed path; a dragged replacement names its cause. `sides`: what each side's
    plan knew of the resource (a grant's names). Markdown."""
    parts = []
    if step.replaced_dependency:
        parts.append(f"replaced by {markdown.code(names.get(step.replaced_dependency, step.replaced_dependency))}")
    if (grants := _grant_changes(step, sides)) is not None:
        return "; ".join([*parts, *grants])
    if step.op == "create":
        parts += [markdown.text(part) for part in _created(step)]
    elif step.op == "import":
        parts.append(markdown.text("adopted as the broker holds it, with its messages (nothing is created)"))
    for path in step.changed:
        label = re.sub(r"^(policy\.definition|settings\.argumentsJson|settings|limits)\.", "", path)
        before, after = lookup(step.old, path), lookup(step.new, path)
        if is_secret_placeholder(before) or is_secret_placeholder(after):
            parts.append(markdown.text(f"{label} changed (secret)"))
        else:
            parts.append(markdown.text(f"{label} {formatted(before)} → {formatted(after)}"))
    return "; ".join(parts)


def _created(step: Step) -> list[str]:
    """What a new policy sets and what a new user, permission or topic permission grants."""
    new = step.new or {}
    if step.type in (engine.POLICY, engine.OPERATOR_POLICY):
        return [f"{k} {formatted(v)}" for k, v in sorted((lookup(new, "policy.definition") or {}).items())]
    if step.type == engine.PERMISSIONS:
        grants = new.get("permissions") or {}
        return [f"{k} {formatted(grants.get(k, ''))}" for k in ("configure", "write", "read")]
    if step.type == engine.TOPIC_PERMISSIONS:
        return [f"topic {p.get('exchange')}: write {formatted(p.get('write', ''))} read {formatted(p.get('read', ''))}"
                for p in sorted(new.get("permissions") or [], key=lambda p: str(p.get("exchange")))]
    if step.type == engine.USER:
        return [f"tags {', '.join(new.get('tags') or []) or '(none)'}"]
    if step.type == engine.USER_LIMITS:
        return [f"{k} {formatted(v)}" for k, v in sorted((new.get("limits") or {}).items())]
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
    if lowered := lowered_limits(step):
        notes.append(f"{' and '.join(lowered)}: what exists stays, and past the limit RabbitMQ refuses new ones "
                     "(check that the clients fit)")
    if password_changed(step):
        notes.append(f"every client using the old password of {markdown.code(str((step.new or {}).get('name')))} is "
                     "locked out at its next reconnect (open connections stay until then): give them the new one "
                     "as this is applied")
    return "".join(f" — {note}" for note in notes)


LIMIT_INPUTS = {
    engine.VHOST: {"maxConnections": "max-connections", "maxQueues": "max-queues"},
    engine.USER_LIMITS: {"limits.max-connections": "max-connections", "limits.max-channels": "max-channels"},
}
"""The limit inputs of a vhost and of a user's limits: lowering or setting one can refuse clients."""


def lowered_limits(step: Step) -> list[str]:
    """`sets max-connections` / `lowers max-queues` for each limit a change sets where there was none or lowers (the
    limits of a new user's limits too: its user may have clients already; a new vhost has none)."""
    if step.op not in ("create", "update") or (step.op == "create" and step.type == engine.VHOST):
        return []
    lowered = []
    for path, name in LIMIT_INPUTS.get(step.type, {}).items():
        before, after = lookup(step.old, path), lookup(step.new, path)
        if after in (None, ""):
            continue
        if before in (None, ""):
            lowered.append(f"sets {name}")
        elif float(after) < float(before):
            lowered.append(f"lowers {name}")
    return lowered


def _vhost_of(step: Step) -> str:
    return str((step.old or step.new or {}).get("vhost", "/"))
OP_ORDER = {"replace": 0, "delete": 1, "update": 2, "create": 3, "import": 4, "options": 5}
RETRYABLE = "RetryableQueue"


DELAY_LEVEL = re.compile(rf"{re.escape(DELAY_PREFIX)}\.[0-9]+")


def any_level(line: str) -> str:
    """`line` with each delay level `rabbitmq-retry.delay.<k>` as `rabbitmq-retry.delay.*`, so that the same change
    to every level of a vhost's shared delay levels reads alike (and is one row)."""
    return DELAY_LEVEL.sub(f"{DELAY_PREFIX}.*", line)


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
    alike_relative: bool = False
    """`what_alike` writes a retryable queue's name as `*` (`replaced by `*.wait.1``), which `what` does not."""

    def cells(self) -> list[str]:
        label = f"**{self.risk}**" if self.risk != SAFE else SAFE
        return [self.op, self.type, markdown.code(self.logical), markdown.code(self.physical), self.what,
                label + self.notes]

    def order(self) -> tuple[int, int, str, str, list[Any], str, str]:
        return (ORDER[self.risk], OP_ORDER.get(self.op, 9), self.type, self.vhost, natural(self.physical),
                self.logical, self.what)


def _vhost(record: Registered) -> str:
    return str(record.inputs.get("name" if record.type == engine.VHOST else "vhost", "/"))


def relative_contract(contract: Mapping[str, Any]) -> dict[str, Any]:
    """The contract with its own objects written relative to its queue (`*.retry`), so that the same change to
    several queues reads as one. A migration names other queues (successor, predecessor): kept whole."""
    queue = contract["queue"]

    def rel(value: Any) -> Any:
        if isinstance(value, str):
            return relative(value, queue)
        if isinstance(value, list):
            return [rel(v) for v in value]
        return {k: rel(v) for k, v in value.items()} if isinstance(value, dict) else value
    return {k: v if k in ("queue", "vhost", "migration") else rel(v) for k, v in contract.items()}


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


def _step_rows(steps: Sequence[Step], old_by: Mapping[str, Registered], new_by: Mapping[str, Registered],
               plans: tuple[PlanIndex, PlanIndex], migrations: Sequence[MigrationInfo] = ()) -> list[Row]:
    names = {urn: r.name for by in (old_by, new_by) for urn, r in by.items()}
    alike_names = dict(names)
    starred: set[str] = set()  # written as `*` in `what_alike` (relative to their retryable queue)
    for by, plan in zip((old_by, new_by), plans, strict=True):
        for urn, record in by.items():
            if (family := family_of(record, plan)) is not None:
                alike_names[urn] = relative(physical_name(record), family[1])
                if alike_names[urn] != physical_name(record):
                    starred.add(urn)
    deleted_vhosts = {str((s.old or {}).get("name")) for s in steps
                      if s.type == engine.VHOST and s.op in ("delete", "replace") and not s.retain_on_delete}
    rows = []
    for s in (s for s in steps if s.custom and s.op != "same"):
        by_urn, plan = (old_by, plans[0]) if s.op == "delete" else (new_by, plans[1])
        record = by_urn[s.urn]
        physical = physical_name(record)
        known = plan.get(record.urn)
        family = known.family or known.leads_to if known is not None else None
        sides = (plans[0].get(s.urn) if s.urn in old_by else None, plans[1].get(s.urn) if s.urn in new_by else None)
        vhost_deleted = s.type != engine.VHOST and _vhost_of(s) in deleted_vhosts
        level, notes = risk(s, vhost_deleted, sides), _notes(s, vhost_deleted)
        if level == DATA_LOSS and s.op == "delete" and not vhost_deleted and (
                retiring := retired_by(record, plans[0], migrations)) is not None:
            level, notes = SAFE, f"{notes} — retired by migration `{retiring.name}` once empty (see Migrations)"
        rows.append(Row(level, s.op, short_type(s.type), s.name, physical, what_changed(s, names, sides),
                        notes, _vhost(record), family,
                        relative(physical, family[1]) if family else any_level(physical),
                        any_level(what_changed(s, alike_names, sides)), s.replaced_dependency in starred))
    return rows


def _option_rows(old: Sequence[Registered], new_by: Mapping[str, Registered], plan: PlanIndex) -> list[Row]:
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
            family = family_of(after, plan)
            physical = physical_name(after)
            rows.append(Row(level, "options", short_type(after.type), after.name, physical, what, note,
                            _vhost(after), family, relative(physical, family[1]) if family else physical, what))
    return rows


def _contract_rows(old_contracts: Mapping[QueueKey, dict[str, Any]], new_contracts: Mapping[QueueKey, dict[str, Any]],
                   components: Mapping[QueueKey, str], kept: Mapping[str, Mapping[str, str]]) -> list[Row]:
    rows = []
    for key in sorted(set(old_contracts) & set(new_contracts)):
        before, after = old_contracts[key], new_contracts[key]
        if before == after:
            continue
        still = kept.get(key[0], {})
        alike = contract_breaks(relative_contract(before), relative_contract(after),
                                {relative(name, key[1]): m for name, m in still.items()})
        for broken, broken_alike in zip(contract_breaks(before, after, still), alike, strict=True):
            rows.append(Row(CONTRACT, "contract", RETRYABLE, components.get(key, ""), key[1], markdown.text(broken),
                            "", key[0], key, "*", markdown.text(broken_alike), broken_alike != broken))
    added = [key for key in new_contracts if key not in old_contracts]
    for key in sorted(set(old_contracts) - set(new_contracts)):
        vhost, queue = key
        successors = [name for other_vhost, name in added if other_vhost == vhost]
        error_exchange = str(old_contracts[key].get("error_exchange"))

        def removed(name: str, renamed: str, error: str) -> str:
            return (f"retryable queue {name} removed ({renamed}its contract is gone): consumers still running on it "
                    f"consume a queue that no longer exists (channel error 404 NOT_FOUND) and cannot park to "
                    f"{error}; move them to the new contract before this is applied")

        renamed = f"renamed to {successors[0]}? " if len(successors) == 1 else ""
        rows.append(Row(CONTRACT, "contract", RETRYABLE, components.get(key, ""), queue,
                        markdown.text(removed(queue, renamed, error_exchange)), "", vhost, key, "*",
                        markdown.text(removed("*", "renamed? " * bool(renamed), relative(error_exchange, queue))),
                        True))
    return rows


def _stale_policies(old: Sequence[Registered], new: Sequence[Registered],
                    plans: tuple[PlanIndex, PlanIndex]) -> list[str]:
    """User and operator policies of the config that match nothing after the change."""
    before = config_policies(old, plans[0])
    lines = []
    for key, policy in sorted(config_policies(new, plans[1]).items()):
        if policy.matches:
            continue
        was = before.get(key)
        since = ("it matched nothing before either" if was is not None and not was.matches
                 else f"it matched {was.matches:,} before" if was is not None else "it is new")
        lines.append(f"- {policy.kind} {markdown.code(policy.name)} in vhost {markdown.code(policy.vhost)} (pattern "
                     f"{markdown.code(policy.pattern)}, apply-to {policy.apply_to}) matches no queue or exchange "
                     f"after this change ({since}): if a queue was renamed, update the pattern")
    return lines


def model(steps: Sequence[Step], old: Sequence[Registered], new: Sequence[Registered],
          plans: tuple[PlanIndex, PlanIndex], migrations: Sequence[MigrationInfo] = ()) -> Model:
    """`plans`: what the planner knew of each side's resources (`Evaluation.plan`), BASE's first;
    `migrations`: the working tree's (a deletion their step retire covers is not data loss)."""
    old_by, new_by = {r.urn: r for r in old}, {r.urn: r for r in new}
    old_contracts, new_contracts = contracts(old), contracts(new)
    touched: dict[QueueKey, list[Step]] = {k: [] for k in set(old_contracts) | set(new_contracts)
                                           if old_contracts.get(k) != new_contracts.get(k)}
    for s in (s for s in steps if s.op != "same"):
        by_urn, plan = (old_by, plans[0]) if s.op == "delete" else (new_by, plans[1])
        key = family_of(by_urn[s.urn], plan)
        if key is not None:
            touched.setdefault(key, []).append(s)
    components = {(c["vhost"], c["queue"]): r.name for r in [*old, *new] if r.type == RETRYABLE_COMPONENT
                  for c in [r.outputs.get("contract")] if c}
    rows = [*_step_rows(steps, old_by, new_by, plans, migrations), *_option_rows(old, new_by, plans[1]),
            *_contract_rows(old_contracts, new_contracts, components, kept_by_drains(migrations))]
    families: dict[str, set[QueueKey]] = {}
    families_before: dict[str, set[QueueKey]] = {}
    for found, by_vhost in ((new_contracts, families), (old_contracts, families_before)):
        for key in found:
            by_vhost.setdefault(key[0], set()).add(key)
    physical = {urn: physical_name(r) for by in (old_by, new_by) for urn, r in by.items()}
    return Model(sorted(rows, key=Row.order), Counter(s.op for s in steps if s.custom), (old_contracts, new_contracts),
                 touched, physical, families, families_before,
                 _stale_policies(old, new, plans) if rows or touched else [])
