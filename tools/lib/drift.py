"""The live vhosts against what the stack declares (`make drift`, tools/drift.py): each declared object read
back the way pulumi-rabbitmq's Read fills its state and compared with the program's inputs under the provider's
diff rules (tools/lib/engine.py). `make adopt` and `make doctor` compare the same way."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.model import wire
from components.model.naming import binding_id
from components.plan.effective import PolicyIndex, effective_settings
from components.user_limits import LIMIT_NAMES
from tools.lib import definitions, engine
from tools.lib.evaluation import MigrationInfo
from tools.lib.inventory import policy_plan, queue_plan
from tools.lib.markdown import code, names, row
from tools.lib.mockrun import Registered
from tools.lib.snapshot import Snapshot
from tools.lib.unowned import unmanageable_binding, unmanageable_exchange, unmanageable_queue

COMPARED = (engine.QUEUE, engine.EXCHANGE, engine.BINDING, engine.POLICY, engine.OPERATOR_POLICY)
"""What `make adopt` can import from a vhost snapshot."""
DRIFT_COMPARED = (*COMPARED, engine.PERMISSIONS, engine.TOPIC_PERMISSIONS)
"""What `make drift` compares: also who may do what in the vhost. The migrations' shovels (as the evaluation's
migrations have them: a recorded shovel's settings are one secret with its URIs) are compared too when the snapshot
carries them, and the users (broker-wide, passwords unreadable) by name when it carries those."""
USER_LIMIT_NAMES = frozenset(LIMIT_NAMES.values())
"""The user limits a UserLimits resource manages; it leaves any other limit of its user alone."""


@dataclass(frozen=True)
class Draining:
    """What a vhost's migrations still drain: the old objects of a move (an external one's are not the stack's) or
    a drain's tiers and levels, expected on the broker until its step retire."""

    queues: frozenset[str] = frozenset()
    exchanges: frozenset[str] = frozenset()
    policies: frozenset[str] = frozenset()
    shovels: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Its shovels by name: (source queue, destination queue)."""

    def holds(self, kind: str, name: str) -> bool:
        return name in {"Queue": self.queues, "Exchange": self.exchanges, "Policy": self.policies,
                        "Shovel": self.shovels}.get(kind, ())

    def binds(self, binding: dict[str, Any]) -> bool:
        """A binding of the old topology: from one of its exchanges, or to one of its queues."""
        return binding.get("source") in self.exchanges or (binding.get("destination_type") == "queue"
                                                           and binding.get("destination") in self.queues)


def draining(migrations: Iterable[MigrationInfo]) -> dict[str, Draining]:
    """By vhost, what its migrations before step retire still drain (read from the evaluation's plan)."""
    found: dict[str, Draining] = {}
    for m in migrations:
        if m.retiring:
            continue
        known = found.get(m.vhost, Draining())
        found[m.vhost] = Draining(known.queues | set(m.old_queues), known.exchanges | set(m.old_exchanges),
                                  known.policies | set(m.old_policies),
                                  {**known.shovels, **{name: (source, target) for name, source, target in m.shovels}})
    return found


def shovel_findings(snapshot: Snapshot, drained: Draining) -> list[Finding]:
    """The migrations' shovels against the broker's, when the snapshot carries them: missing, or moving between
    other queues (a shovel's settings are replaced, not updated). Shovels the migrations do not declare are extra
    (`extras`); the user they connect as is compared with the other users (`_granted_users`)."""
    found: list[Finding] = []
    if snapshot.shovels is None:
        return found
    for name, (source, target) in sorted(drained.shovels.items()):
        live = snapshot.shovels.get(name)
        if live is None:
            found.append(Finding("missing", snapshot.vhost, "Shovel", name, f"`pulumi up` creates it ({source} → "
                                 f"{target})"))
        elif (live.get("src-queue"), live.get("dest-queue")) != (source, target):
            found.append(Finding("immutable", snapshot.vhost, "Shovel", name, f"src-queue, dest-queue: stack "
                                 f"{source} → {target}, broker {live.get('src-queue')} → {live.get('dest-queue')}"))
    return found


@dataclass(frozen=True)
class Finding:
    kind: str
    """"uncreatable" (in an `existing: true` vhost that is not on the broker), "missing", "immutable", "mutable",
    "effective" (a queue whose effective TTL or dead-letter route differs) or "extra"."""
    vhost: str
    type: str
    """Short type: Queue, Exchange, Binding, Policy, OperatorPolicy."""
    name: str
    detail: str = ""


@dataclass
class Comparison:
    """One recorded resource against the broker: absent, or the changed input paths."""

    record: Registered
    present: bool
    changed: list[str] = field(default_factory=list)
    state: dict[str, Any] | None = None
    properties_key: str | None = None
    """The broker's key of a matching binding (live snapshots only)."""

    @property
    def immutable(self) -> list[str]:
        return [p for p in self.changed if engine.forces_replace(self.record.type, p)]

    @property
    def importable(self) -> bool:
        """Pulumi imports it without a replace: present and equal as Read would see it."""
        return self.present and not self.changed


def read_policy_value(value: Any) -> Any:
    """resource_policy.go Read: numbers formatted as strings, lists joined with ","."""
    if isinstance(value, (bool, dict)):
        return value
    if isinstance(value, (int, float)):
        return engine.tf_string(float(value))
    if isinstance(value, list):
        return ",".join(map(str, value))
    return value


def _queue_arguments_state(inputs: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Read puts the broker's arguments in `argumentsJson` when the program used it or any value is not a
    string, else in `arguments`."""
    settings = inputs.get("settings") or {}
    if settings.get("argumentsJson") or any(not isinstance(v, str) for v in arguments.values()):
        return {"argumentsJson": json.dumps(arguments, sort_keys=True)}
    return {"arguments": arguments}


def find_binding(snapshot: Snapshot, inputs: dict[str, Any]) -> dict[str, Any] | None:
    """The broker binding with the same ends, routing key and arguments (Read matches by properties_key,
    which a binding keeps exactly as long as those stay the same)."""
    wanted = definitions.arguments(inputs)
    return next((b for b in snapshot.bindings
                 if (b.get("source"), b.get("destination"), b.get("destination_type"), b.get("routing_key") or "")
                 == (inputs.get("source"), inputs.get("destination"), inputs.get("destinationType") or "queue",
                     inputs.get("routingKey") or "")
                 and (b.get("arguments") or {}) == wanted), None)


def read_state(record: Registered, snapshot: Snapshot) -> tuple[dict[str, Any] | None, str | None]:
    """The inputs as the provider's Read would store them, or None when the object is absent; and a binding's
    properties_key."""
    i, t = record.inputs, record.type
    base = {"vhost": snapshot.vhost}
    if t == engine.QUEUE:
        q = snapshot.queues.get(i.get("name", ""))
        if q is None:
            return None, None
        return {**base, "name": q["name"], "settings": {
            "durable": bool(q.get("durable")), "autoDelete": bool(q.get("auto_delete")),
            **_queue_arguments_state(i, dict(q.get("arguments") or {}))}}, None
    if t == engine.EXCHANGE:
        x = snapshot.exchanges.get(i.get("name", ""))
        if x is None:
            return None, None
        return {**base, "name": x["name"], "settings": {
            "type": x.get("type"), "durable": bool(x.get("durable")), "autoDelete": bool(x.get("auto_delete")),
            "arguments": dict(x.get("arguments") or {})}}, None
    if t == engine.BINDING:
        b = find_binding(snapshot, i)
        if b is None:
            return None, None
        state: dict[str, Any] = {k: i[k] for k in ("vhost", "source", "destination", "destinationType",
                                                   "routingKey", "arguments", "argumentsJson") if k in i}
        return state, b.get("properties_key")
    if t in (engine.POLICY, engine.OPERATOR_POLICY):
        policies = snapshot.policies if t == engine.POLICY else snapshot.operator_policies
        p = policies.get(i.get("name", ""))
        if p is None:
            return None, None
        return {**base, "name": p["name"], "policy": {
            "pattern": p.get("pattern"), "priority": p.get("priority"), "applyTo": p.get("apply-to"),
            "definition": {k: read_policy_value(v) for k, v in (p.get("definition") or {}).items()}}}, None
    if t == engine.PERMISSIONS:
        p = snapshot.permissions.get(str(i.get("user")))
        return (None if p is None else {**base, "user": i.get("user"), "permissions": dict(p)}), None
    if t == engine.TOPIC_PERMISSIONS:
        entries = snapshot.topic_permissions.get(str(i.get("user")))
        return (None if not entries else {**base, "user": i.get("user"), "permissions": list(entries)}), None
    if t == engine.USER_LIMITS:
        # The limits the resource manages, as its provider's read returns them (components/user_limits.py).
        found = (snapshot.user_limits or {}).get(str(i.get("user")))
        managed = {k: v for k, v in (found or {}).items() if k in USER_LIMIT_NAMES}
        return (None if not managed else {"user": i.get("user"), "limits": managed}), None
    if t == engine.USER:  # by name only: its password cannot be read back
        return (dict(i) if str(i.get("name")) in (snapshot.users or ()) else None), None
    raise ValueError(f"{t} is not compared")


def compare(record: Registered, snapshot: Snapshot) -> Comparison:
    state, key = read_state(record, snapshot)
    if state is None:
        return Comparison(record, False)
    return Comparison(record, True, engine.input_changes(record.type, engine.with_defaults(record), state), state,
                      key)


def import_id(comparison: Comparison, snapshot: Snapshot) -> str | None:
    """The provider's ID for importing this object, or None when it cannot be imported as planned."""
    if not comparison.importable:
        return None
    i = comparison.record.inputs
    if comparison.record.type == engine.BINDING:
        if comparison.properties_key is None:
            return None
        return binding_id(snapshot.vhost, i["source"], i["destination"], i.get("destinationType") or "queue",
                          comparison.properties_key)
    return f"{i['name']}@{snapshot.vhost}"


def extras(snapshot: Snapshot, records: Iterable[Registered], own_user: str = "",
           drained: Draining = Draining(), referenced: bool = False) -> list[Finding]:
    """Objects of the vhost that no record declares (amq.* exchanges and their bindings are the broker's; the
    permissions of `own_user`, the provider's user reading the vhost, are its own; what a migration still drains,
    `drained`, is expected until its step retire). In a vhost the stack only references (`referenced`: `existing:
    true`, e.g. adopted), what the stack cannot own (`tools/lib/unowned.py`: a queue that deletes itself, an
    exchange-to-exchange binding …) is "expected", with the reason, not drift."""
    return [_expected(snapshot, f) if referenced else f for f in _extras(snapshot, records, own_user, drained)]


def _expected(snapshot: Snapshot, finding: Finding) -> Finding:
    """The extra `finding` as expected when the stack cannot own it, with why."""
    why = None
    if finding.type == "Queue":
        why = unmanageable_queue(snapshot, finding.name)
    elif finding.type == "Exchange":
        why = unmanageable_exchange(snapshot.exchanges[finding.name])
    elif finding.type == "Binding":
        binding = next(b for b in snapshot.bindings if binding_label(b) == finding.name)
        why = unmanageable_binding(snapshot, binding)
    return finding if why is None else Finding("expected", finding.vhost, finding.type, finding.name, why)


def _unclaimed(snapshot: Snapshot, kind: str, type_: str, items: Mapping[str, Any], claimed: set[tuple[str, Any]],
               detail: Callable[[str, Any], str], drained: Draining) -> list[Finding]:
    """The `items` of one kind (by name, or by user) that no record claims and no migration still drains."""
    return [Finding("extra", snapshot.vhost, kind, n, detail(n, x)) for n, x in sorted(items.items())
            if (type_, n) not in claimed and not drained.holds(kind, n)]


def _unbound(snapshot: Snapshot, bound: Sequence[dict[str, Any] | None], drained: Draining) -> list[Finding]:
    """The bindings no record declares (but the default exchanges' and what a migration still drains)."""
    return [Finding("extra", snapshot.vhost, "Binding", binding_label(b), "") for b in snapshot.bindings
            if not any(b is x for x in bound) and not b["source"].startswith("amq.") and not drained.binds(b)]


def _extras(snapshot: Snapshot, records: Iterable[Registered], own_user: str,
            drained: Draining) -> list[Finding]:
    records = list(records)
    declared = {(r.type, r.inputs.get("name")) for r in records}
    granted = ({(r.type, str(r.inputs.get("user"))) for r in records}
               | {(engine.PERMISSIONS, own_user), (engine.TOPIC_PERMISSIONS, own_user)})
    exchanges = {n: x for n, x in snapshot.exchanges.items() if not n.startswith("amq.")}
    return [
        *_unclaimed(snapshot, "Queue", engine.QUEUE, snapshot.queues, declared,
                    lambda n, _: _queue_detail(snapshot, n), drained),
        *_unclaimed(snapshot, "Exchange", engine.EXCHANGE, exchanges, declared, lambda _, x: f"type {x.get('type')}",
                    drained),
        *_unbound(snapshot, [find_binding(snapshot, r.inputs) for r in records if r.type == engine.BINDING], drained),
        *_unclaimed(snapshot, "Policy", engine.POLICY, snapshot.policies, declared,
                    lambda _, p: f"pattern {p.get('pattern')}", drained),
        *_unclaimed(snapshot, "OperatorPolicy", engine.OPERATOR_POLICY, snapshot.operator_policies, declared,
                    lambda _, p: f"pattern {p.get('pattern')}", drained),
        *_unclaimed(snapshot, "Permissions", engine.PERMISSIONS, snapshot.permissions, granted,
                    lambda _, p: f"configure {p.get('configure')!r}, write {p.get('write')!r}, read {p.get('read')!r}",
                    drained),
        *_unclaimed(snapshot, "TopicPermissions", engine.TOPIC_PERMISSIONS, snapshot.topic_permissions, granted,
                    lambda _, entries: names(str(e.get("exchange", "")) for e in entries), drained),
        *_unclaimed(snapshot, "Shovel", engine.SHOVEL, snapshot.shovels or {}, declared,
                    lambda _, v: f"{v.get('src-queue')} → {v.get('dest-queue')}", drained)]


def binding_label(b: dict[str, Any]) -> str:
    key = b.get("routing_key") or ""
    arguments = f" {json.dumps(b['arguments'], sort_keys=True)}" if b.get("arguments") else ""
    return f"{b['source']} → {b['destination']} ({key!r}{arguments})"


def _queue_detail(snapshot: Snapshot, name: str) -> str:
    messages = snapshot.messages(name)
    consumers = snapshot.queues[name].get("consumers")
    return ", ".join(part for part in (
        f"{messages} messages" if messages is not None else "",
        f"{consumers} consumers" if isinstance(consumers, int) else "") if part)


def present_drained(snapshots: dict[str, Snapshot], migrations: Iterable[MigrationInfo]) -> list[str]:
    """`vhost/queue` of each queue the migrations still drain that is on the broker: said in the report, not drift."""
    drained = draining(migrations)
    return [f"{vhost}/{name}" for vhost, snapshot in snapshots.items()
            for name in sorted(snapshot.queues) if drained.get(vhost, Draining()).holds("Queue", name)]


def _record_label(record: Registered) -> str:
    i = record.inputs
    if record.type == engine.BINDING:
        return binding_label({"source": i.get("source"), "destination": i.get("destination"),
                              "routing_key": i.get("routingKey"), "arguments": definitions.arguments(i)})
    return str(i.get("name") or i.get("user"))


def findings(records: Sequence[Registered], snapshots: dict[str, Snapshot], own_user: str = "",
             migrations: Iterable[MigrationInfo] = ()) -> list[Finding]:
    """Missing, different and extra objects of every vhost in `snapshots`; `own_user`: see `extras`; `migrations`:
    the stack's, whose old objects are expected until their step retire (`draining`)."""
    drained = draining(migrations)
    found: list[Finding] = []
    created = {r.inputs.get("name") for r in records if r.type == engine.VHOST}
    for vhost, snapshot in snapshots.items():
        # An `existing: true` vhost is referenced, never created: without it `pulumi up` fails with 404.
        absent = "missing" if snapshot.exists or vhost in created else "uncreatable"
        if not snapshot.exists:
            found.append(Finding(absent, vhost, "VHost", vhost, "the vhost itself, with everything in it"
                                 if absent == "missing" else "declared `existing: true`, so never created"))
        mine = [r for r in records if r.custom and r.type in DRIFT_COMPARED and r.inputs.get("vhost") == vhost]
        mine += _granted_users(records, mine, snapshot)
        for record in mine:
            result = compare(record, snapshot)
            label, kind = _record_label(record), engine.short_type(record.type)
            if not result.present:
                found.append(Finding(absent, vhost, kind, label, f"`pulumi up` creates it ({record.name})"
                                     if absent == "missing" else f"its vhost does not exist ({record.name})"))
            elif result.immutable:
                found.append(Finding("immutable", vhost, kind, label, _changes(result, result.immutable)))
            elif result.changed:
                found.append(Finding("mutable", vhost, kind, label, _changes(result, result.changed)))
        reported = {f.name for f in found if f.vhost == vhost and f.type == "Queue"}
        found += [f for f in effective_findings(mine, snapshot) if f.name not in reported]
        found += shovel_findings(snapshot, drained.get(vhost, Draining()))
        shovels = [r for r in records if r.type == engine.SHOVEL and r.inputs.get("vhost") == vhost]
        found += extras(snapshot, [*mine, *shovels], own_user, drained.get(vhost, Draining()), vhost not in created)
    return found


def _granted_users(records: Sequence[Registered], mine: Sequence[Registered], snapshot: Snapshot) -> list[Registered]:
    """The limits of the users this vhost grants permissions to, then those users (the migrations' shovel user
    included), each when the snapshot carries them: users are broker-wide, and each is compared in the vhosts that
    grant it (one vhost's application)."""
    granted = {r.inputs.get("user") for r in mine if r.type == engine.PERMISSIONS}
    carried = {engine.USER_LIMITS: ("user", snapshot.user_limits), engine.USER: ("name", snapshot.users)}
    return [r for kind, (key, read) in carried.items() if read is not None
            for r in records if r.type == kind and r.inputs.get(key) in granted]


ROUTE_KEYS = (wire.MESSAGE_TTL.key, wire.DEAD_LETTER_EXCHANGE.key, wire.DEAD_LETTER_ROUTING_KEY.key,
              wire.DEAD_LETTER_STRATEGY.key)
"""What decides how long a message waits in a queue and where it goes when it expires or is rejected."""


def _stated(settings: list[Any], key: str) -> str:
    """A key's effective value(s), and what sets it (a policy's name, or the queue's argument)."""
    values = sorted({f"{s.settings[key].value!r} ({s.settings[key].source or 'argument'})" if key in s.settings
                     else "none" for s in settings})
    return " or ".join(values)


def effective_findings(records: Sequence[Registered], snapshot: Snapshot) -> list[Finding]:
    """Each declared queue whose effective TTL or dead-letter route on the broker (its arguments, and the user and
    operator policies RabbitMQ applies to it, whoever declared them) differs from what the stack's own queues and
    policies give it: a retry would wait another time, go elsewhere, or be dropped, even where every object the
    stack declares reads back equal (another team's policy of higher priority displacing ours, an operator policy
    lowering a TTL)."""
    planned_user, planned_operator = (
        PolicyIndex(policy_plan(str(r.inputs["name"]), r.inputs.get("policy") or {})
                    for r in records if r.type == kind) for kind in (engine.POLICY, engine.OPERATOR_POLICY))
    live_user, live_operator = (PolicyIndex(policy_plan(n, p, "apply-to") for n, p in policies.items())
                                for policies in (snapshot.policies, snapshot.operator_policies))
    found = []
    for record in records:
        if record.type != engine.QUEUE or record.inputs.get("name") not in snapshot.queues:
            continue
        name = str(record.inputs["name"])
        live = snapshot.queues[name]
        declared = definitions.arguments(record.inputs.get("settings") or {})
        planned = effective_settings(queue_plan(name, declared), planned_user, planned_operator)
        actual = effective_settings(queue_plan(name, dict(live.get("arguments") or {}), live.get("type")),
                                    live_user, live_operator)
        differences = []
        for key in ROUTE_KEYS:
            want = {str(s.settings[key].value) if key in s.settings else None for s in planned}
            have = {str(s.settings[key].value) if key in s.settings else None for s in actual}
            if want != have:
                differences.append(f"{key}: stack {_stated(planned, key)}, broker {_stated(actual, key)}")
        if differences:
            found.append(Finding("effective", snapshot.vhost, "Queue", name, "; ".join(differences)))
    return found


def _changes(result: Comparison, paths: list[str]) -> str:
    def shown(tree: Any, path: str) -> Any:
        """The value at `path`, `<absent>` for none; recorded numbers come back as floats (5.0): shown as the
        integers they are."""
        value = engine.lookup(tree, path)
        if value is None:
            return "<absent>"
        return int(value) if isinstance(value, float) and value.is_integer() else value

    return "; ".join(f"{p}: stack {shown(result.record.inputs, p)!r}, broker {shown(result.state, p)!r}"
                     for p in paths)


HEADINGS = {
    "uncreatable": ("Missing, not created by `pulumi up`", "the stack references the vhost (`existing: true`) and "
                    "never creates it, and it is not on the broker: `pulumi up` fails with 404 vhost_not_found; "
                    "create the vhost first, or set the vhost's `existing: false` so that the stack creates it"),
    "missing": ("Missing", "declared by the stack, not on the broker: `pulumi up` creates it"),
    "immutable": ("Different, immutable", "an input that forces a replacement: `pulumi up` would replace it "
                  "(a queue loses its messages) or fail, and an import fails"),
    "mutable": ("Different, mutable", "`pulumi up` overwrites it in place"),
    "effective": ("Different where it counts", "the queue's effective TTL or dead-letter route (its arguments and the "
                  "policies RabbitMQ applies to it) is not what the stack gives it: a message waits another time, "
                  "goes elsewhere, or is dropped when it expires or is rejected. A policy the stack does not declare "
                  "(higher priority, or an operator policy) is the usual cause: narrow its pattern or lower its "
                  "priority"),
    "extra": ("Extra", "on the broker, declared by nothing in the stack (e.g. still declared at runtime by an "
              "application)"),
    "expected": ("Expected, not drift", "on the broker, declared by nothing in the stack because the stack cannot own "
                 "it (the vhost is referenced, `existing: true`, as `make adopt` writes it): left alone on purpose, "
                 "as the detail says"),
}


def drifted(found: Iterable[Finding]) -> list[Finding]:
    """The findings that are drift (`make drift` exits 2 on any): all but the expected ones."""
    return [f for f in found if f.kind != "expected"]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return [row(header), row("---" for _ in header), *(row(r) for r in rows)]


def _row_order(row: tuple[str, str, str, str]) -> tuple[str, bool, str, str, str]:
    """Rows by vhost, the vhost itself first, then by type and name: the program registers its resources in no fixed
    order, and the same broker reports the same bytes, as the review's rows do."""
    vhost, kind, name, detail = row
    return vhost, kind != "VHost", kind, name, detail


def render(stack: str, found: Sequence[Finding], snapshots: dict[str, Snapshot], drained: Sequence[str] = ()) -> str:
    """The report; `drained`: the queues (`vhost/queue`) the migrations still drain (`present_drained`)."""
    sources = ", ".join(f"{code(v)} at {code(s.source)}" + (f" (RabbitMQ {s.broker_version})" if s.broker_version
                                                              else "") for v, s in snapshots.items())
    lines = [f"# Drift: stack `{stack}`", "", f"Read {sources}.", ""]
    if drained:
        lines += [f"Still draining, expected until their migration's step retire (with the old exchanges, bindings "
                  f"and policies of an external move): {names(drained)}.", ""]
    if not drifted(found):
        lines += ["**In sync**: every declared object is on the broker as the stack declares it, and nothing else is"
                  + (" but what the stack cannot own (below)." if found else "."), ""]
    else:
        counts = ", ".join(f"{sum(f.kind == k for f in found)} {HEADINGS[k][0].lower()}" for k in HEADINGS
                           if k != "expected" and any(f.kind == k for f in found))
        lines += [f"**Drift**: {counts}.", ""]
    for kind, (title, meaning) in HEADINGS.items():
        rows = sorted(((f.vhost, f.type, f.name, f.detail) for f in found if f.kind == kind), key=_row_order)
        if rows:
            header = ("vhost", "type", "object", "detail")
            lines += [f"## {title}", "", meaning + ".", "", *markdown_table(header, rows), ""]
    return "\n".join(lines)
