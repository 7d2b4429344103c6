"""What `pulumi up` would do between two recordings of the program, for pulumi-rabbitmq 3.5.3.

Pure (no HTTP, no Pulumi runtime), so the PR-review tool and the tests can ask "does this change
replace a queue?" without a broker. What it encodes (docs/provider.md):
- which inputs force a replacement: the schema's `willReplaceOnChanges` (§2);
- how the provider compares: `argumentsJson` as parsed JSON (SuppressJsonDiff, §3.2), numbers and
  booleans equal to the strings the bridge turns them into (§3.2, §4: priority 10.0 == 10), and an
  unset primitive equal to its zero value, as in SDKv2;
- how the engine plans: resources matched by URN; an explicitly named resource is replaced
  delete-before-replace and drags along the resources whose inputs reference it (§2).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tools.lib.mockrun import Registered

Op = Literal["create", "import", "update", "replace", "delete", "same"]
"""`import`: a new resource with an import ID (`import_`), which `pulumi up` adopts as the broker holds it."""

QUEUE = "rabbitmq:index/queue:Queue"
EXCHANGE = "rabbitmq:index/exchange:Exchange"
BINDING = "rabbitmq:index/binding:Binding"
POLICY = "rabbitmq:index/policy:Policy"
OPERATOR_POLICY = "rabbitmq:index/operatorPolicy:OperatorPolicy"
PERMISSIONS = "rabbitmq:index/permissions:Permissions"
TOPIC_PERMISSIONS = "rabbitmq:index/topicPermissions:TopicPermissions"
USER = "rabbitmq:index/user:User"
VHOST = "rabbitmq:index/vHost:VHost"
SHOVEL = "rabbitmq:index/shovel:Shovel"
FEDERATION_UPSTREAM = "rabbitmq:index/federationUpstream:FederationUpstream"
USER_LIMITS = "pulumi-python:dynamic/rabbitmq-retry:UserLimits"
"""The project's own dynamic resource (components/user_limits.py), whose diff replaces it for another user only."""
STACK = "pulumi:pulumi:Stack"
STASH = "pulumi:index:Stash"
"""The path guards (components/pulumi/resources.py): Pulumi's built-in Stash, whose `input` updates in place."""


def short_type(resource_type: str) -> str:
    """`rabbitmq:index/queue:Queue` → `Queue`: a type as the tables of plans, reviews and reports name it."""
    return resource_type.rsplit(":", 1)[-1]


EVERYTHING = "*"
REPLACE_ON_CHANGES: dict[str, frozenset[str]] = {
    QUEUE: frozenset({EVERYTHING}),
    EXCHANGE: frozenset({EVERYTHING}),
    BINDING: frozenset({EVERYTHING}),
    SHOVEL: frozenset({EVERYTHING}),
    POLICY: frozenset({"name", "vhost"}),
    OPERATOR_POLICY: frozenset({"name", "vhost"}),
    FEDERATION_UPSTREAM: frozenset({"name", "vhost"}),
    PERMISSIONS: frozenset({"user", "vhost"}),
    TOPIC_PERMISSIONS: frozenset({"user", "vhost"}),
    USER: frozenset({"name"}),
    VHOST: frozenset({"name"}),
    USER_LIMITS: frozenset({"user"}),
    STASH: frozenset(),
}
"""Top-level inputs whose change replaces the resource; an unknown type is assumed to replace on
any change (the cautious answer for a review tool)."""

SCHEMA_DEFAULTS: dict[str, dict[str, Any]] = {
    QUEUE: {"vhost": "/"}, EXCHANGE: {"vhost": "/"}, PERMISSIONS: {"vhost": "/"}, TOPIC_PERMISSIONS: {"vhost": "/"},
}
FREE_MAPS = frozenset({"definition", "arguments"})
"""User-keyed maps: a key that is absent differs from a key set to ""."""
SETS: dict[str, frozenset[str]] = {TOPIC_PERMISSIONS: frozenset({"permissions"})}
"""TypeSet inputs: element order is irrelevant."""
REFERENCES: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    BINDING: (("source", frozenset({EXCHANGE})), ("destination", frozenset({QUEUE, EXCHANGE}))),
    PERMISSIONS: (("user", frozenset({USER})),),
    TOPIC_PERMISSIONS: (("user", frozenset({USER})),),
    USER_LIMITS: (("user", frozenset({USER})),),
}
"""Inputs that carry another resource's `name` output (every type also references its VHost by `vhost`)."""


@dataclass(frozen=True)
class Step:
    """One resource's fate in the plan."""

    op: Op
    urn: str
    type: str
    name: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    changed: list[str] = field(default_factory=list)
    """Changed input paths, e.g. "policy.definition.message-ttl"."""
    forced_by: list[str] = field(default_factory=list)
    """For a replace: the changed paths (or referencing inputs) that force it."""
    delete_before_replace: bool = False
    """Explicit name: the old one is deleted first (a queue loses its messages), provider.md §6."""
    replaced_dependency: str | None = None
    """URN of the replaced resource that drags this one along (engine dependent replacement, §5)."""
    custom: bool = True
    protect: bool = False
    retain_on_delete: bool = False


def forces_replace(type_: str, path: str) -> bool:
    """Would a change at input `path` ("settings.argumentsJson.x", "policy.priority") replace the resource? Any
    change does for a type REPLACE_ON_CHANGES does not list."""
    keys = REPLACE_ON_CHANGES.get(type_, frozenset({EVERYTHING}))
    return EVERYTHING in keys or path.split(".", 1)[0] in keys


def tf_string(value: Any) -> str:
    """A number or bool as the bridge stringifies it for a string field (FormatFloat 'f' -1)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _zero(value: Any) -> bool:
    """SDKv2 cannot tell an unset primitive from its zero value (False == 0 here too)."""
    return value is None or value in ("", 0, {}, [])


def _same_scalar(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return _zero(a) and _zero(b)
    if isinstance(a, str) != isinstance(b, str) or isinstance(a, bool) != isinstance(b, bool):
        return tf_string(a) == tf_string(b)
    return bool(a == b)


def json_changes(a: Any, b: Any, path: str) -> list[str]:
    """Strict JSON comparison (types matter: 60000 is not "60000", True is not 1)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b), key=str)
                for p in ([f"{path}.{k}"] if (k in a) != (k in b) else json_changes(a[k], b[k], f"{path}.{k}"))]
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                       and not isinstance(a, bool) and not isinstance(b, bool)):
        return [path]
    return [] if a == b else [path]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _same_list(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        _canonical(x) == _canonical(y) if isinstance(x, (dict, list)) else _same_scalar(x, y)
        for x, y in zip(a, b, strict=True))


def input_changes(type_: str, old: Mapping[str, Any], new: Mapping[str, Any], path: str = "",
                  free: bool = False) -> list[str]:
    """Paths of inputs that differ the way the provider sees them."""
    changes: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        where = f"{path}.{key}" if path else str(key)
        a: Any = old.get(key)  # inputs are JSON-shaped data: what a key holds depends on the key
        b: Any = new.get(key)
        if free and (key in old) != (key in new):
            changes.append(where)
        elif key in ("argumentsJson", "arguments_json"):
            if _zero(a) or _zero(b):  # SuppressJsonDiff only compares two JSON texts
                changes += [] if _zero(a) and _zero(b) else [where]
            else:
                changes += json_changes(json.loads(a), json.loads(b), where)
        elif isinstance(a, Mapping) or isinstance(b, Mapping):
            changes += input_changes(type_, a or {}, b or {}, where, free=key in FREE_MAPS)
        elif where in SETS.get(type_, ()):
            if sorted(map(_canonical, a or [])) != sorted(map(_canonical, b or [])):
                changes.append(where)
        elif isinstance(a, list) or isinstance(b, list):
            if not _same_list(list(a or []), list(b or [])):
                changes.append(where)
        elif not _same_scalar(a, b):
            changes.append(where)
    return changes


def lookup(inputs: Mapping[str, Any] | None, path: str) -> Any:
    """An input by path (`settings.argumentsJson.x-message-ttl`), JSON text (argumentsJson) looked into; None when
    absent."""
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


def with_defaults(record: Registered) -> dict[str, Any]:
    """The inputs as the provider compares them: the schema's defaults under those set."""
    return {**SCHEMA_DEFAULTS.get(record.type, {}), **{k: v for k, v in record.inputs.items() if v is not None}}


def _step(old: Registered | None, new: Registered | None) -> Step:
    current = new or old
    assert current is not None
    base: dict[str, Any] = {"urn": current.urn, "type": current.type, "name": current.name,
                            "old": old.inputs if old else None, "new": new.inputs if new else None,
                            "custom": current.custom, "protect": bool(old and old.protect),
                            "retain_on_delete": bool(old and old.retain_on_delete)}
    if old is None:
        return Step("import" if new is not None and new.import_id else "create", **base)
    if new is None:
        return Step("delete", **base)
    if not current.custom:
        return Step("same", **base)
    changed = input_changes(current.type, with_defaults(old), with_defaults(new))
    forced = [p for p in changed if forces_replace(current.type, p)]
    if forced:
        # Only types with a `name` input are autonamed; an explicit one makes the bridge ask for DBR.
        return Step("replace", **base, changed=changed, forced_by=forced, delete_before_replace="name" in new.inputs)
    return Step("update" if changed else "same", **base, changed=changed)


def _drag_dependents(steps: dict[str, Step], new: Mapping[str, Registered]) -> None:
    """The engine replaces resources whose replace-forcing inputs come from a resource replaced
    delete-before-replace. Mocks echo inputs, so a reference is a dependency whose `name` equals the
    input (which tells a property dependency from a plain `depends_on`)."""
    changed = True
    while changed:
        changed = False
        for urn, record in new.items():
            step = steps[urn]
            if not record.custom or step.op not in ("same", "update"):
                continue
            for key, types in (("vhost", frozenset({VHOST})), *REFERENCES.get(record.type, ())):
                value = record.inputs.get(key)
                via = next((d for d in record.dependencies if d in steps and steps[d].op == "replace"
                            and steps[d].delete_before_replace and steps[d].type in types
                            and (steps[d].new or {}).get("name") == value), None)
                if via is not None and value is not None and forces_replace(record.type, key):
                    steps[urn] = Step("replace", urn, record.type, record.name, step.old, step.new, step.changed,
                                      [key], True, via, True, step.protect, step.retain_on_delete)
                    changed = True
                    break


def diff(old: Sequence[Registered], new: Sequence[Registered]) -> list[Step]:
    """Steps for every resource: new ones in creation order, then deletions in deletion order.

    The root Stack exists in every program; a recording without it (mockrun registers it only in
    the first `record()` of a process) is not a plan to create or delete it."""
    old_by, new_by = {r.urn: r for r in old}, {r.urn: r for r in new}
    old = [r for r in old if r.type != STACK or r.urn in new_by]
    new = [r for r in new if r.type != STACK or r.urn in old_by]
    steps = {r.urn: _step(old_by.get(r.urn), r) for r in new}
    _drag_dependents(steps, {r.urn: r for r in new})
    ordered = [steps[r.urn] for r in creation_order(new)]
    return ordered + [_step(r, None) for r in deletion_order([r for r in old if r.urn not in new_by])]


def creation_order(resources: Sequence[Registered]) -> list[Registered]:
    """Topological over `dependencies` and `parent` (within the list), otherwise registration order."""
    index = {r.urn: i for i, r in enumerate(resources)}
    needs = {r.urn: {d for d in [*r.dependencies, r.parent] if d in index and d != r.urn} for r in resources}
    users: dict[str, list[str]] = {u: [] for u in index}
    for urn, deps in needs.items():
        for dep in deps:
            users[dep].append(urn)
    ready = [index[u] for u, deps in needs.items() if not deps]
    heapq.heapify(ready)
    ordered: list[Registered] = []
    while ready:
        record = resources[heapq.heappop(ready)]
        ordered.append(record)
        for user in users[record.urn]:
            needs[user].discard(record.urn)
            if not needs[user]:
                heapq.heappush(ready, index[user])
    if len(ordered) != len(resources):
        stuck = sorted(u for u, deps in needs.items() if deps)
        raise ValueError(f"dependency cycle among {stuck}")
    return ordered


def deletion_order(resources: Sequence[Registered]) -> list[Registered]:
    """Dependents first: the reverse of creation order."""
    return list(reversed(creation_order(resources)))
