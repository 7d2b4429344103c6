"""Property-based fuzzing of the stack config: whatever the `rabbitmq-retry:` namespace holds, parsing
either yields a config that plans and checks cleanly, or a ConfigError that points at real keys.

Trees are built by mutating a valid base tree (0…3 mutations at random paths), so a good share are
valid and the rest are broken in targeted ways: wrong types at every level, missing and misspelt keys,
odd names, bad durations, duplicates and derived-name clashes, dangling references, bad policies,
applications and passwords.

Beyond "accepted or refused with real key paths", an accepted config must keep every entry of the input
(nothing silently dropped), and the stack check (`check_logical_names`) must refuse it exactly when two
resources `__main__` registers would share a URN (checked against `urns`, a walk of the layout tables), and
`password_problems` must name exactly the application users without a non-empty password, each with a
command that the shell and Pulumi's property-path reading (`property_path`) turn into that user's key.

`FUZZ_EXAMPLES` sets the number of examples (default 1000, about 25 s); with `CI=true` the run is
derandomized, so it is reproducible. Shrunk failures are kept below in `REGRESSIONS`; an open bug there is
`xfail(strict=True)`, and `KNOWN_CRASHES` / `KNOWN_VIOLATIONS` keep the fuzzer from failing on it again
until it is fixed (then the xfail turns into an XPASS failure: remove both entries).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from components.config.load import load_stack_config
from components.config.passwords import password_problems
from components.model import naming, wire
from components.model.durations import MAX_MS, DurationError, format_duration, parse_duration
from components.model.key_paths import NAME_KEYS, with_paths
from components.model.keys import KEY_TABLES, NAMESPACE, TOP_LEVEL_KEYS
from components.model.plan_types import VhostPlan
from components.model.problems import ConfigError, Problem
from components.model.stack_config import EXCHANGE_TYPES, QUEUE_TYPES, X_MATCH, StackConfig
from components.plan import layout
from components.plan.checks import check_logical_names, check_vhost
from components.plan.planner import plan_vhost
from tests.support.environment import IN_CI

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))

Tree = dict[str, Any]
Path = tuple[str | int, ...]

KNOWN_KEYS = frozenset(key for path, keys in KEY_TABLES.items() if not path.endswith(".definition") for key in keys)
"""Every key a config mapping may hold (the keys of a policy's definition are values: never reported missing)."""


# ---------------------------------------------------------------------------------------------------------------
# Valid base trees
# ---------------------------------------------------------------------------------------------------------------

# Name stems: none is another stem followed by digits, none contains a derived suffix (".wait.", ".error",
# ".retry", ".requeue"), so stem + unique index never clashes, even with derived names.
STEMS = ("orders", "orders.billing", "billing_events", "ÄÖÜ", "注文", "очередь", "", "x+y(1)", "$weird^*")
VHOST_STEMS = ("shop", "payments", "shop floor", "ünï", "名前", "a/b", "")
SEPARATORS = (".", "_", ":")


@st.composite
def long_name(draw: st.DrawFn, budget: int) -> str:
    """A name of at most `budget` UTF-8 bytes, close to it, in 1- to 4-byte characters."""
    char = draw(st.sampled_from(["x", "é", "名", "😀"]))
    size = len(char.encode())
    return char * draw(st.integers(max(1, budget // size - 3), budget // size))


@st.composite
def names(draw: st.DrawFn, index: int, budget: int = naming.MAX_NAME_BYTES) -> str:
    """A valid queue or exchange name, unique through `index`."""
    suffix = f"{draw(st.sampled_from(SEPARATORS))}{index}"
    if draw(st.integers(0, 9)) == 0:
        return draw(long_name(budget - len(suffix))) + suffix
    stem = draw(st.sampled_from(STEMS))
    return f"{stem}{suffix}" if stem else str(index)  # digits only when the stem is empty


@st.composite
def durations(draw: st.DrawFn, ms: int) -> str:
    exact = format_duration(ms)
    return draw(st.sampled_from([exact, f"{ms}ms"]))


@st.composite
def valid_retry(draw: st.DrawFn) -> Tree:
    values = sorted(set(draw(st.lists(st.integers(1, MAX_MS), min_size=1, max_size=4))))
    if draw(st.booleans()):  # the bounds, and round values
        values = sorted({*values[1:], draw(st.sampled_from([1, 500, 1_000, 60_000]))})
    if draw(st.booleans()):
        values = sorted({*values[:-1], draw(st.sampled_from([3_600_000, MAX_MS]))})
    retry: Tree = {"delays": [draw(durations(ms)) for ms in values]}
    if draw(st.booleans()):
        retry["max_retries"] = draw(st.one_of(st.integers(1, 12), st.just(10_000)))
    if draw(st.booleans()):
        retry["error_retention"] = draw(durations(draw(st.integers(1, MAX_MS))))
    if draw(st.booleans()):
        retry["error_max_length"] = draw(st.integers(1, 10**9))
    return retry


USER_STEMS = ("app", "billing-worker", "amq.svc", "ünï", "42", "billing.svc", 'say "hi"', "o'neil", "team:billing",
              "x[0]", "a]b", "billing svc", "$tag_1", "back\\slash", "a.b\\")
"""Plain user names, and names whose password path needs `["…"]` (or cannot be written at all)."""


def unique_user(stem: str, index: int) -> str:
    """`stem` made unique by `index`, keeping a final backslash last."""
    head, tail = (stem[:-1], stem[-1]) if stem.endswith("\\") else (stem, "")
    return f"{head}-{index}{tail}"


VALID_PATTERNS = ("^payments\\.", "^other$", "^audit", ".*", "^(a|b)$", "^注文", "", "x{2,3}")
POLICY_VALUES: dict[str, tuple[str | int, ...]] = {
    "max-length": (0, 5, "5"), "message-ttl": (60_000, "60000"), "dead-letter-exchange": ("dlx", "dlx.1", "ünï"),
    "overflow": ("reject-publish",), "queue-leader-locator": ("client-local",), "expires": (3_600_000,),
}


@st.composite
def definitions(draw: st.DrawFn, operator: bool) -> Tree:
    if operator:
        keys = draw(st.lists(st.sampled_from(wire.OPERATOR_POLICY_KEYS), min_size=1, max_size=3, unique=True))
        return {key: "reject-publish" if key == "overflow" else draw(st.sampled_from([1, 1_000, "1000", 2]))
                for key in keys}
    keys = draw(st.lists(st.sampled_from(sorted(POLICY_VALUES)), min_size=1, max_size=3, unique=True))
    return {key: draw(st.sampled_from(POLICY_VALUES[key])) for key in keys}


@st.composite
def valid_policy(draw: st.DrawFn, index: int, operator: bool) -> Tree:
    policy: Tree = {"name": f"{'limits' if operator else 'team-policy'}-{index}",
                    "pattern": draw(st.sampled_from(VALID_PATTERNS)),
                    "definition": draw(definitions(operator))}
    if draw(st.booleans()):
        policy["priority"] = draw(st.integers(0, 1_000))
    if draw(st.booleans()):
        policy["apply_to"] = draw(st.sampled_from(["queues", "classic_queues", "quorum_queues", "all", "exchanges"]))
    return policy


@st.composite
def valid_vhost(draw: st.DrawFn, vhost_index: int, users: list[str], default_type: str) -> Tree:
    if vhost_index == 0 and draw(st.integers(0, 4)) == 0:
        name = "/"
    else:
        stem = draw(st.sampled_from(VHOST_STEMS))
        name = f"{stem}{vhost_index}"
    vhost: Tree = {"name": name}
    if name == "/":
        if draw(st.booleans()):
            vhost["existing"] = True
    elif draw(st.integers(0, 3)) == 0:
        vhost["existing"] = draw(st.booleans())
    counter = iter(range(1_000))

    exchanges = [{"name": draw(names(next(counter))), "type": draw(st.sampled_from(EXCHANGE_TYPES))}
                 for _ in range(draw(st.integers(0, 3)))]
    if exchanges or draw(st.booleans()):
        vhost["exchanges"] = exchanges

    queues: list[Tree] = []
    consumable: list[str] = []  # input and plain queues: never wait tiers or error queues
    writable: set[str] = {e["name"] for e in exchanges}  # exchanges the config names: not the retry machinery
    for _ in range(draw(st.integers(0, 4))):
        retryable = draw(st.integers(0, 9)) < 6
        # Derived names add at most ".requeue" or ".wait.4" (8 bytes).
        queue: Tree = {"name": draw(names(next(counter), naming.MAX_NAME_BYTES - 8 if retryable else 255))}
        if draw(st.booleans()):
            queue["type"] = draw(st.sampled_from(QUEUE_TYPES))
        bindings = []
        for exchange in draw(st.lists(st.sampled_from(exchanges), unique_by=lambda e: e["name"], max_size=2)
                             if exchanges else st.just([])):
            binding: Tree = {"exchange": exchange["name"]}
            if draw(st.booleans()):
                binding["routing_key"] = draw(st.sampled_from(["", "#", "order.*", "42", "ключ"]))
            if exchange["type"] == "headers" and draw(st.booleans()):
                binding["arguments"] = {"x-match": draw(st.sampled_from(X_MATCH)),
                                        "kind": draw(st.sampled_from(["invoice", 1, True]))}
            bindings.append(binding)
        if draw(st.integers(0, 4)) == 0:
            external = draw(st.sampled_from(["amq.topic", "amq.direct", "elsewhere"]))
            bindings.append({"exchange": external, "routing_key": "#", "external": True})
            writable.add(external)
        if bindings or draw(st.booleans()):
            queue["bindings"] = bindings
        if draw(st.booleans()):
            queue["max_length"] = draw(st.integers(0, 10**7))
        if draw(st.booleans()):
            queue["policy_priority"] = draw(st.integers(0, 100))
        if retryable:
            queue["retry"] = draw(valid_retry())
        consumable.append(queue["name"])
        if queue.get("type", default_type) == "quorum" and draw(st.booleans()):
            retries = queue.get("retry", {}).get("max_retries", len(queue.get("retry", {}).get("delays", [])))
            queue["delivery_limit"] = retries + draw(st.integers(2, 50))
        queues.append(queue)
    if queues or draw(st.booleans()):
        vhost["queues"] = queues

    for key, operator in (("policies", False), ("operator_policies", True)):
        if draw(st.booleans()):
            vhost[key] = [draw(valid_policy(i, operator)) for i in range(draw(st.integers(0, 2)))]

    applications = []
    for _ in range(draw(st.integers(0, 2))):
        user = unique_user(draw(st.sampled_from(USER_STEMS)), len(users))
        users.append(user)
        app: Tree = {"user": user}
        ordered_writable = sorted(writable)
        if ordered_writable and draw(st.booleans()):
            app["publishes"] = draw(st.lists(st.sampled_from(ordered_writable), unique=True, max_size=3))
        if consumable and draw(st.booleans()):
            app["consumes"] = draw(st.lists(st.sampled_from(consumable), unique=True, max_size=3))
        if ordered_writable and draw(st.booleans()):
            topic: Tree = {"exchange": draw(st.sampled_from(ordered_writable))}
            for side in ("write", "read"):
                if draw(st.booleans()):
                    topic[side] = draw(st.sampled_from(["^$", ".*", "^orders\\..*", "^(a|b)$"]))
            app["topic_permissions"] = [topic]
        applications.append(app)
    if applications or draw(st.booleans()):
        vhost["applications"] = applications

    if name != "/" and not vhost.get("existing"):
        if draw(st.integers(0, 3)) == 0:
            vhost["limits"] = draw(st.fixed_dictionaries({}, optional={"max_connections": st.integers(0, 10_000),
                                                                       "max_queues": st.integers(0, 10_000)}))
        if draw(st.integers(0, 3)) == 0:
            vhost["default_queue_type"] = draw(st.sampled_from(QUEUE_TYPES))
    return vhost


@st.composite
def valid_trees(draw: st.DrawFn) -> Tree:
    tree: Tree = {}
    for key in ("protect", "retain_error_queues"):
        if draw(st.booleans()):
            tree[key] = draw(st.booleans())
    if draw(st.booleans()):
        tree["defaults"] = draw(st.fixed_dictionaries({}, optional={
            "queue_type": st.sampled_from(QUEUE_TYPES),
            "policy_priority": st.integers(0, 1_000),
            "delivery_limit": st.integers(2, 100),
        }))
    default_type = tree.get("defaults", {}).get("queue_type", "quorum")
    users: list[str] = []
    tree["vhosts"] = [draw(valid_vhost(i, users, default_type)) for i in range(draw(st.integers(1, 3)))]
    if users or draw(st.booleans()):
        # Any string is a valid password for the config; missing and empty ones are `password_problems`.
        # A password filed under a user nobody declares is refused (a misspelt user): only declared ones here.
        tree["passwords"] = {user: password for user in users
                             if (password := draw(st.sampled_from(["s3cret", "pässwörd", " ", "", None]))) is not None}
    return tree


# ---------------------------------------------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------------------------------------------

ODD_NAMES = ("@", "a@b", "/", "a/b", "amq.", "amq.mine", "", " ", " x", "x ", "\t", "a\nb", "\u200b", "123", "0",
             "ünïcödé", "名前", "%2F", "x" * 255, "x" * 256, "x" * 300, "é" * 127 + "x", "é" * 128, "名" * 86,
             "😀" * 63, "😀" * 64, "amq.topic")
BAD_DURATIONS = ("0ms", "0s", "4294967296ms", "4294967295ms", "49d", "1.5s", "10x", "", " ", "10", "ms", "-1s", "+1s",
                 "1 s", "1S", "10sec", " 10s ", "٣s", "99999999999999999999h", "1" * 5_000 + "ms", 10, 0, -1, 1.5,
                 True, None, [], ["1s"], {"s": 1})
BAD_REGEXES = ("(", "[a-", "*x", "(?P<", "\\", "a{2,1}", "(?<=a+)b")
JUNK: tuple[Any, ...] = (None, True, False, 0, -1, 1, 1.5, 2**31, 2**64, "", " ", "x", "0", "true", "null", [], [None],
                         [[]], [["a"]], [{}], {}, {"a": None}, {"name": None}, "amq.gen", "1s")
TOP_LEVEL_TYPOS = ("protekt", "vhost", "Vhosts", "password", "default", "retain_error_queue", "", "a.b", "x[0]")


def fresh(values: Sequence[Any]) -> st.SearchStrategy[Any]:
    """One of `values`, copied: a mutable constant put in a tree must not carry one example's mutations into
    the next (Hypothesis refuses strategies that depend on such state)."""
    return st.sampled_from(values).map(copy.deepcopy)


def junk() -> st.SearchStrategy[Any]:
    scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
    nested = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=6), inner, max_size=3), max_leaves=6)
    return st.one_of(fresh(JUNK), st.sampled_from(ODD_NAMES), fresh(BAD_DURATIONS), nested)


def typo(key: str) -> st.SearchStrategy[str]:
    variants = {key + "s", key[:-1], key.upper(), key.replace("_", "-"), key.capitalize(), key[1:] + key[:1]}
    if len(key) > 2:
        variants.add(key[0] + key[2] + key[1] + key[3:])
    variants.discard(key)
    return st.sampled_from(sorted(variants)) if variants else st.just(key + "x")


def walk(node: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Every (path, value) of the tree, the root included."""
    found = [(path, node)]
    if isinstance(node, dict):
        for key, value in node.items():
            found += walk(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += walk(value, (*path, index))
    return found


def get(tree: Any, path: Path) -> Any:
    for step in path:
        tree = tree[step]
    return tree


def put(tree: Any, path: Path, value: Any) -> None:
    get(tree, path[:-1])[path[-1]] = value


Mutation = Callable[[st.DrawFn, Tree], str | None]
"""Changes the tree in place and says what it did, or returns None when it does not apply."""


def pick(draw: st.DrawFn, tree: Tree, accept: Callable[[Path, Any], bool]) -> tuple[Path, Any] | None:
    candidates = [(path, value) for path, value in walk(tree) if accept(path, value)]
    return draw(st.sampled_from(candidates)) if candidates else None


def replace_anywhere(draw: st.DrawFn, tree: Tree) -> str | None:
    """Wrong type (or wrong value) at any level."""
    found = pick(draw, tree, lambda path, _: bool(path))
    if found is None:
        return None
    path, value = found
    directed = {str: st.sampled_from([0, 42, ["x"], None]), list: st.sampled_from(["x", "", {}, [value], None]),
                dict: st.sampled_from([[], [value], "x", None, 1]), bool: st.sampled_from(["yes", 1, 0, None, "true"]),
                int: st.sampled_from([-1, 0, 1.0, str(value) if not isinstance(value, bool) else 1, None])}
    new = draw(st.one_of(directed.get(type(value), junk()), junk()))
    put(tree, path, new)
    return f"replace {path} with {new!r}"


def delete_key(draw: st.DrawFn, tree: Tree) -> str | None:
    found = pick(draw, tree, lambda path, _: bool(path) and isinstance(path[-1], str))
    if found is None:
        return None
    path, _ = found
    del get(tree, path[:-1])[path[-1]]
    return f"delete {path}"


def add_unknown_key(draw: st.DrawFn, tree: Tree) -> str | None:
    found = pick(draw, tree, lambda _, value: isinstance(value, dict))
    if found is None:
        return None
    path, node = found
    if not path and draw(st.booleans()):
        key = draw(st.sampled_from(TOP_LEVEL_TYPOS))
    elif node and draw(st.integers(0, 3)):
        key = draw(typo(draw(st.sampled_from(sorted(node)))))
    else:
        key = draw(st.text(max_size=8))
    if key in node:
        return None
    node[key] = draw(st.one_of(st.sampled_from([True, 1, "x", None, []]), junk()))
    return f"add {key!r} at {path}"


def duplicate_element(draw: st.DrawFn, tree: Tree) -> str | None:
    found = pick(draw, tree, lambda _, value: isinstance(value, list) and bool(value))
    if found is None:
        return None
    path, node = found
    element = copy.deepcopy(draw(st.sampled_from(node)))
    node.insert(draw(st.integers(0, len(node))), element)
    return f"duplicate an element of {path}"


def odd_name(draw: st.DrawFn, tree: Tree) -> str | None:
    found = pick(draw, tree, lambda path, _: bool(path) and path[-1] in ("name", "user", "exchange"))
    if found is None:
        return None
    path, _ = found
    new = draw(st.one_of(st.sampled_from(ODD_NAMES), st.text(max_size=10)))
    put(tree, path, new)
    return f"name {path} = {new!r}"


def bad_duration(draw: st.DrawFn, tree: Tree) -> str | None:
    """Malformed or out-of-range durations, non-increasing delays, and delays that are not a list."""
    found = pick(draw, tree, lambda path, value: bool(path) and path[-1] == "retry" and isinstance(value, dict))
    if found is None:
        return None
    path, retry = found
    delays = retry.get("delays")
    how = draw(st.sampled_from(["element", "element", "order", "retention", "whole"]))
    if how == "whole":
        retry["delays"] = draw(st.sampled_from([None, [], "1s", "1s, 10s", {"1": "1s"}, 10, [["1s"]]]))
        return f"delays = {retry['delays']!r} at {path}"
    if how == "retention":
        retry["error_retention"] = draw(fresh(BAD_DURATIONS))
        return f"error_retention = {str(retry['error_retention'])[:30]!r} at {path}"
    if not isinstance(delays, list) or not delays:
        return None
    if how == "element":
        index = draw(st.integers(0, len(delays) - 1))
        delays[index] = draw(fresh(BAD_DURATIONS))
        return f"delays[{index}] = {str(delays[index])[:30]!r} at {path}"
    order = draw(st.sampled_from(["reverse", "repeat", "same value"]))
    if order == "reverse" and len(delays) > 1:
        delays.reverse()
    elif order == "repeat":
        delays.append(delays[-1])
    else:
        try:
            ms = parse_duration(delays[-1])
        except DurationError:
            return None
        delays.append(f"{ms}ms" if delays[-1] != f"{ms}ms" else format_duration(ms))
    return f"delays {order}: {delays}"


def vhosts_of(tree: Tree) -> list[Tree]:
    vhosts = tree.get("vhosts")
    return [v for v in vhosts if isinstance(v, dict)] if isinstance(vhosts, list) else []


def entries(vhost: Tree, key: str) -> list[Tree]:
    value = vhost.get(key)
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def derived_clash(draw: st.DrawFn, tree: Tree) -> str | None:
    """A name that one of a retryable queue's derived queues, exchanges or logical keys also has."""
    retryables = [(vhost, q) for vhost in vhosts_of(tree) for q in entries(vhost, "queues")
                  if isinstance(q.get("name"), str) and isinstance(q.get("retry"), dict)]
    if not retryables:
        return None
    vhost, queue = draw(st.sampled_from(retryables))
    name = queue["name"]
    kind, clash = draw(st.sampled_from([
        ("queue", f"{name}.error"), ("queue", f"{name}.wait.1"), ("queue", f"{name}.retry"),
        ("exchange", f"{name}.retry"), ("exchange", f"{name}.requeue"), ("exchange", f"{name}.error"),
        ("policy", f"{name}.wait.1"), ("retryable", f"{name}-wait-1"), ("retryable", f"{name}-error"),
    ]))
    if kind == "exchange":
        vhost.setdefault("exchanges", [])
        if not isinstance(vhost["exchanges"], list):
            return None
        vhost["exchanges"].append({"name": clash, "type": "direct"})
    elif kind == "policy":
        vhost["policies"] = [*entries(vhost, "policies"),
                             {"name": clash, "pattern": "^nothing$", "definition": {"max-length": 1}}]
    else:
        new: Tree = {"name": clash}
        if kind == "retryable":
            new.update(retry={"delays": ["1s"], "error_retention": "1h"}, max_length=10)
        if not isinstance(vhost.get("queues"), list):
            return None
        vhost["queues"].append(new)
    return f"{kind} {clash!r} beside retryable {name!r}"


def dangling(draw: st.DrawFn, tree: Tree) -> str | None:
    vhosts = vhosts_of(tree)
    if not vhosts:
        return None
    vhost = draw(st.sampled_from(vhosts))
    where = draw(st.sampled_from(["binding", "consumes", "publishes", "topic"]))
    missing = draw(st.sampled_from(["nowhere", "amq.topic", "", 7]))
    if where == "binding":
        queues = entries(vhost, "queues")
        if not queues:
            return None
        queue = draw(st.sampled_from(queues))
        queue["bindings"] = [*(queue.get("bindings") if isinstance(queue.get("bindings"), list) else []),
                             {"exchange": missing}]
    else:
        apps = entries(vhost, "applications")
        if not apps:
            return None
        app = draw(st.sampled_from(apps))
        if where == "topic":
            app["topic_permissions"] = [{"exchange": missing, "write": ".*"}]
        else:
            app[where] = [missing]
    return f"{where} refers to undeclared {missing!r}"


def bad_policy(draw: st.DrawFn, tree: Tree) -> str | None:
    policies = [p for vhost in vhosts_of(tree) for key in ("policies", "operator_policies")
                for p in entries(vhost, key)]
    if not policies:
        return None
    policy = draw(st.sampled_from(policies))
    how = draw(st.sampled_from(["regex", "digits-dlx", "operator-key", "definition", "priority", "apply_to"]))
    if how == "regex":
        policy["pattern"] = draw(st.sampled_from(BAD_REGEXES))
    elif how == "digits-dlx":
        policy["definition"] = {draw(st.sampled_from(["dead-letter-exchange", "dead-letter-routing-key",
                                                      "alternate-exchange"])): draw(st.sampled_from(
                                                          ["123", 123, "+5", "-7", "٣", "0"]))}
    elif how == "operator-key":
        policy["definition"] = {draw(st.sampled_from(["dead-letter-exchange", "ha-mode", "federation-upstream",
                                                      "message-ttl"])): 1}
    elif how == "definition":
        policy["definition"] = draw(st.sampled_from([{}, None, [], "max-length=1", {"max-length": 1.5},
                                                     {"max-length": None}, {"max-length": True}]))
    elif how == "priority":
        policy["priority"] = draw(st.sampled_from([-1, "1", 1.0, None]))
    else:
        policy["apply_to"] = draw(st.sampled_from(["queue", "streams", "", None]))
    return f"policy {how}: {policy}"


def bad_passwords(draw: st.DrawFn, tree: Tree) -> str | None:
    users = [(vhost, app) for vhost in vhosts_of(tree) for app in entries(vhost, "applications")
             if isinstance(app.get("user"), str)]
    how = draw(st.sampled_from(["missing", "non-string", "not-a-map", "same-user-twice"]))
    if how == "not-a-map":
        tree["passwords"] = draw(st.sampled_from(["secret", ["a"], 1, None]))
    elif not users:
        return None
    elif how == "same-user-twice":
        _, app = draw(st.sampled_from(users))
        vhost = draw(st.sampled_from(vhosts_of(tree)))
        vhost["applications"] = [*entries(vhost, "applications"), {"user": app["user"]}]
    else:
        _, app = draw(st.sampled_from(users))
        passwords = tree.setdefault("passwords", {})
        if not isinstance(passwords, dict):
            return None
        if how == "missing":
            passwords.pop(app["user"], None)
        else:
            passwords[app["user"]] = draw(st.sampled_from([123, None, ["p"], "", {"v": "p"}, True]))
    return f"passwords {how}"


def nest(draw: st.DrawFn, tree: Tree) -> str | None:
    """Nested lists, and lists where one value is expected."""
    found = pick(draw, tree, lambda path, _: bool(path))
    if found is None:
        return None
    path, value = found
    put(tree, path, [value] if draw(st.booleans()) else [[value]])
    return f"wrap {path} in a list"


MUTATIONS: tuple[Mutation, ...] = (replace_anywhere, delete_key, add_unknown_key, duplicate_element, odd_name,
                                   bad_duration, derived_clash, dangling, bad_policy, bad_passwords, nest)


@dataclass(frozen=True)
class Case:
    raw: Tree
    mutations: tuple[str, ...] = ()
    """What was done to the valid base tree; empty means the tree must parse."""


@st.composite
def cases(draw: st.DrawFn) -> Case:
    tree = draw(valid_trees())
    done = []
    for _ in range(draw(st.integers(0, 3) | st.integers(1, 3))):  # about a quarter stay valid
        for _attempt in range(3):  # another kind of mutation when one does not apply to this tree
            if (what := draw(st.sampled_from(MUTATIONS))(draw, tree)) is not None:
                done.append(what)
                break
    return Case(tree, tuple(done))


# ---------------------------------------------------------------------------------------------------------------
# The property
# ---------------------------------------------------------------------------------------------------------------


def path_exists(node: Any, rest: str, root: bool = True, key: object = None) -> bool:
    """`rest` (as ConfigError writes key paths: `vhosts[shop].queues[1].name`) names a value of `node`, or a
    schema key missing from a mapping that exists. Keys may contain "." or "[", so this backtracks. An entry of a
    list in `NAME_KEYS` (`key`: the list's own key) is named by its name when no other entry has it, else by index."""
    if not rest:
        return True
    if isinstance(node, list):
        entry = list_entry(node, NAME_KEYS.get(str(key)), rest)
        return entry is not None and path_exists(node[entry[0]], rest[entry[1]:], root=False)
    if not isinstance(node, Mapping):
        return False
    if not root and rest.startswith('["'):  # a key Pulumi writes `["…"]`, `\\"` for a quote; it may hold `"]`
        ends = (match.start() for match in re.finditer(r'"\]', rest) if match.start() >= 2)
        return any((name := rest[2:end].replace('\\"', '"')) in node
                   and path_exists(node[name], rest[end + 2:], root=False, key=name) for end in ends)
    if not root:
        if not rest.startswith("."):
            return False
        rest = rest[1:]
    if any(rest.startswith(str(name)) and path_exists(value, rest[len(str(name)):], root=False, key=name)
           for name, value in node.items()):
        return True
    return rest in KNOWN_KEYS and rest not in node


def list_entry(node: list[Any], name_key: str | None, rest: str) -> tuple[int, int] | None:
    """(index, length of the segment) of the entry `rest` starts with: `[2]` for an entry without a name of its own,
    `[orders]` or `["a]b"]` (JSON, for a name that could be misread) for one whose name no other entry has."""
    names = [entry.get(name_key) if name_key and isinstance(entry, Mapping) else None for entry in node]
    unique = [isinstance(name, str) and name != "" and names.count(name) == 1 for name in names]
    if match := re.match(r"\[(\d+)\]", rest):
        index = int(match[1])
        return (index, match.end()) if index < len(node) and not unique[index] else None
    match = re.match(r'\[("(?:[^"\\]|\\.)*")\]', rest) or re.match(r'\[([^\[\]"\s]+)\]', rest)
    if match is None:
        return None
    name = json.loads(match[1]) if match[1].startswith('"') else match[1]
    index = next((i for i, written in enumerate(names) if unique[i] and written == name), None)
    return None if index is None else (index, match.end())


def check_problems(raw: Tree, error: ConfigError) -> None:
    assert error.problems, "ConfigError without problems"
    # An unknown top-level key is named as the stack file writes it, namespace and all; nothing under it is read.
    unknown = {f"{NAMESPACE}:{key}" for key in raw if key not in TOP_LEVEL_KEYS}
    for problem in error.problems:
        assert isinstance(problem, tuple) and len(problem) == 2, problem
        path, message = problem
        assert isinstance(path, str) and isinstance(message, str), problem
        assert message.strip(), f"empty message at {path!r}"
        if path in unknown:
            assert message.startswith("unknown key"), problem
            continue
        assert any(path == root or path.startswith((f"{root}.", f"{root}[")) for root in TOP_LEVEL_KEYS), problem
        assert path_exists(raw, path), f"{path!r} is not a key path of the input ({message})"


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


class PropertyViolationError(AssertionError):
    """load_stack_config accepted a config that breaks the property; `violations` says how."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = tuple(violations)
        super().__init__("\n".join(f"{v.kind}: {v.detail}" for v in violations))


def physical_names(plan: VhostPlan) -> tuple[list[str], list[str], list[str]]:
    """Queues and exchanges the plan declares, and everything else it names (policies, users)."""
    queues = [q.name for q in plan.queues] + [q.name for r in plan.retryables for q in r.queues]
    exchanges = [e.name for e in plan.exchanges] + [e.name for r in plan.retryables for e in r.exchanges]
    others = ([p.name for p in plan.policies] + [p.name for r in plan.retryables for p in r.policies]
              + [p.name for p in plan.operator_policies] + [g.user for g in plan.permissions]
              + [b.source for b in plan.bindings if b.source_external])
    return queues, exchanges, others


def urns(config: StackConfig, plans: Sequence[VhostPlan]) -> list[tuple[tuple[str, str], str]]:
    """((type chain, logical name), what it comes from) of every resource `__main__` registers: the layout
    tables the components declare from (components/plan/layout.py), walked here on their own so that
    `check_logical_names` is checked against them; `test_the_urn_model_matches_the_program` checks the
    walk against the program. A URN is the type chain and the logical name, so each pair must be unique."""
    found: list[tuple[tuple[str, str], str]] = []

    def walk(chain: str, table: Sequence[layout.Slot[Any]], component: str, plan: Any, where: str) -> None:
        for slot, name, entry in layout.children(component, table, plan):
            source = f"{where}.{slot.kind} {entry!r}" if slot.kind == "Binding" else f"{where}.{slot.kind}"
            found.append(((f"{chain}${slot.kind}", name), source))
            if slot.kind in layout.NESTED:
                walk(f"{chain}${slot.kind}", layout.NESTED[slot.kind], name, entry, f"{where}.queues[{name!r}]")

    for i, (vhost, plan) in enumerate(zip(config.vhosts, plans, strict=True)):
        key = naming.vhost_key(vhost.name)
        found.append((("Vhost", key), f"vhosts[{i}]"))
        walk("Vhost", layout.VHOST, key, plan, f"vhosts[{i}]")
    return found


def urn_clashes(found: list[tuple[tuple[str, str], str]]) -> list[Violation]:
    """Each URN declared twice, with the cause: an entry written twice, or two names that join into one."""
    sources: dict[tuple[str, str], list[str]] = {}
    for urn, source in found:
        sources.setdefault(urn, []).append(source)
    violations = []
    for urn, where in sources.items():
        if len(where) < 2:
            continue
        if all(".Binding " in w for w in where):
            cause = "duplicate binding" if len(set(where)) == 1 else "ambiguous binding key"
        elif len(set(where)) == 1:
            cause = f"duplicate {urn[0].rsplit('$', 1)[-1]}"
        else:
            cause = "logical names joined with '-'"
        violations.append(Violation(f"duplicate URN ({cause})", f"{urn} from {where}"))
    return violations


def duplicates(items: Sequence[Any]) -> list[str]:
    seen: set[Any] = set()
    return sorted({repr(item) for item in items if item in seen or seen.add(item)})


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def dropped(raw: Tree, config: StackConfig) -> list[Violation]:
    """Entries of the input that are missing from the accepted config (a queue missing from config is a
    queue that `pulumi up` deletes)."""
    raw_vhosts = as_list(raw.get("vhosts"))
    if len(config.vhosts) != len(raw_vhosts):
        return [Violation("dropped", f"{len(raw_vhosts)} vhosts in, {len(config.vhosts)} parsed")]
    found = []
    for i, (vhost, raw_vhost) in enumerate(zip(config.vhosts, raw_vhosts, strict=True)):
        for key in ("exchanges", "queues", "policies", "operator_policies", "applications"):
            if len(getattr(vhost, key)) != len(as_list(raw_vhost.get(key))):
                found.append(Violation("dropped", f"vhosts[{i}].{key}: {len(as_list(raw_vhost.get(key)))} in, "
                                       f"{len(getattr(vhost, key))} parsed"))
        if len(vhost.queues) == len(as_list(raw_vhost.get("queues"))):
            for j, (queue, raw_queue) in enumerate(zip(vhost.queues, as_list(raw_vhost.get("queues")), strict=True)):
                if (queue.retry is None) != ("retry" not in raw_queue) or len(queue.bindings) != len(
                        as_list(raw_queue.get("bindings"))):
                    found.append(Violation("dropped", f"vhosts[{i}].queues[{j}]: {raw_queue!r} parsed as {queue!r}"))
    return found


def property_path(path: str) -> list[str | int]:
    """Pulumi's reading of a `pulumi config set --path` key (the non-strict `ParsePropertyPath` of
    sdk/go/common/resource/properties_path.go): `a.b`, `a["b.c"]` with `\\"` for a quote, `a[0]`."""
    elements: list[str | int] = []
    while path:
        if path[0] == ".":
            path = path[1:]
        elif path.startswith('["'):
            key, i = [], 2
            while True:
                if i >= len(path):
                    raise ValueError("missing closing quote in property name")
                if path[i] == '"':
                    break
                if path[i] == "\\" and path[i + 1:i + 2] == '"':
                    key.append('"')
                    i += 2
                else:
                    key.append(path[i])
                    i += 1
            if path[i + 1:i + 2] != "]":
                raise ValueError("missing closing bracket in property access")
            elements.append("".join(key))
            path = path[i + 2:]
        elif path[0] == "[":
            end = path.index("]")
            elements.append(int(path[1:end]))
            path = path[end + 1:]
        else:
            end = min([i for i in (path.find("."), path.find("[")) if i >= 0], default=len(path))
            elements.append(path[:end])
            path = path[end:]
    return elements


def password_key(message: str) -> list[str | int]:
    """The config path the command in a password problem sets, as the shell and then Pulumi read it."""
    # Between the command's own backticks: a user name may hold a backtick too, before or inside the command.
    start = message.index("`pulumi config set ") + 1
    argv = shlex.split(message[start:message.index(" <password>`", start) + len(" <password>")])
    assert argv[:5] == ["pulumi", "config", "set", "--secret", "--path"] and argv[6:] == ["<password>"], argv
    namespace, _, name = argv[5].partition(":")
    assert namespace == "rabbitmq-retry", argv
    return property_path(name)


def password_violations(raw: Tree, config: StackConfig) -> list[Violation]:
    """`password_problems` names exactly the application users without a non-empty string password, each
    with a command that sets exactly that user's password (or, when none can, says so)."""
    passwords = raw.get("passwords")
    users = {f"{at}.{path}": user for at, vhost in with_paths("", "vhosts", config.vhosts)
             for user, path in vhost.user_paths() if path.startswith("applications[")}
    missing = {path for path, user in users.items()
               if not isinstance(passwords, Mapping) or not isinstance(passwords.get(user), str) or not passwords[user]}
    problems = password_problems(config, passwords)
    violations = []
    if {path for path, _ in problems} != missing or len(problems) != len(missing):
        violations.append(Violation("password problems", f"{problems} for missing {sorted(missing)}"))
    for path, message in problems:
        user = users.get(path)
        assert user is not None and path_exists(raw, path), (path, message)
        if "no `pulumi config set --path` can name this user" in message:
            if not user.endswith("\\") or not re.search(r"[^A-Za-z0-9_$-]", user):
                violations.append(Violation("password hint", f"{user!r} refused as unspellable: {message}"))
        elif (key := password_key(message)) != ["passwords", user]:
            violations.append(Violation("password hint", f"{user!r}: {message} sets {key}"))
    return violations


def check_accepted(raw: Tree, config: StackConfig) -> str:
    """An accepted config plans and checks without raising, names only what RabbitMQ and the provider
    accept, and keeps every entry of the input. Two resources with one URN are refused before anything is
    registered, by `check_logical_names` (`read_stack_config`), exactly when the model here finds them."""
    assert isinstance(config, StackConfig)
    violations = dropped(raw, config) + password_violations(raw, config)
    plans = []
    for vhost in config.vhosts:
        plan = plan_vhost(vhost)
        problems = check_vhost(plan)
        assert isinstance(problems, list) and all(isinstance(p, Problem) and p.message for p in problems), problems
        plans.append(plan)
        queues, exchanges, others = physical_names(plan)
        for name in [vhost.name, *queues, *exchanges, *others]:
            assert naming.byte_length(name) <= naming.MAX_NAME_BYTES, f"{name[:40]!r}… is over 255 bytes"
            assert "@" not in name, name
        for name in [*queues, *exchanges]:
            assert "/" not in name and not name.startswith(naming.RESERVED_PREFIX), name
        ours = [p.name for p in plan.policies if not p.key.startswith("policy-")]
        ours += [p.name for r in plan.retryables for p in r.policies]
        for kind, declared in (("queue", queues), ("exchange", exchanges),
                               ("policy", ours + sorted({p.name for p in vhost.policies}))):
            if clash := duplicates(declared):
                violations.append(Violation(f"duplicate {kind}", f"vhost {vhost.name!r}: {clash}"))
    clashes = urn_clashes(urns(config, plans))
    refusals = check_logical_names((naming.vhost_key(v.name), plan) for v, plan in zip(config.vhosts, plans,
                                                                                         strict=True))
    assert isinstance(refusals, list) and all(isinstance(p, Problem) and p.message for p in refusals), refusals
    if bool(clashes) != bool(refusals):
        violations.append(Violation("URN clash check disagrees", f"model: {clashes}; check_logical_names: {refusals}"))
    if violations:
        raise PropertyViolationError(violations)
    return "refused by the stack check" if refusals else "accepted"


def check(case: Case) -> str:
    """The whole property; raises on any violation, else says whether the config was accepted or refused."""
    raw = case.raw
    before = copy.deepcopy(raw)
    try:
        config = load_stack_config(raw)
    except ConfigError as error:
        check_problems(raw, error)
        assert case.mutations, f"a valid tree was refused: {error.problems}"
        return "refused"
    else:
        return check_accepted(raw, config)
    finally:
        assert repr(raw) == repr(before), "load_stack_config mutated its input"


# ---------------------------------------------------------------------------------------------------------------
# Open bugs, and regressions
# ---------------------------------------------------------------------------------------------------------------


KNOWN_CRASHES: dict[str, Callable[[Tree, Exception], bool]] = {}
KNOWN_VIOLATIONS: dict[str, Callable[[Tree, Violation], bool]] = {}
"""Open bugs, by name, with a predicate that recognises them; each has an xfail(strict=True) regression
below. The fuzzer notes them (as an event) and moves on, so that it keeps looking for others; once a bug is
fixed its regression XPASSes, which fails: remove it from here and drop the xfail mark. BUG-1…7 of the
first run are fixed (a2adc9b) and pinned below as plain regressions."""


def known_bug(raw: Tree, error: Exception) -> str | None:
    if isinstance(error, PropertyViolationError):
        bugs = [next((bug for bug, matches in KNOWN_VIOLATIONS.items() if matches(raw, v)), None)
                for v in error.violations]
        return None if None in bugs else ", ".join(sorted(set(filter(None, bugs))))
    return next((bug for bug, matches in KNOWN_CRASHES.items() if matches(raw, error)), None)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=IN_CI, database=None, print_blob=not IN_CI,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_any_config_is_accepted_and_plans_cleanly_or_refused_with_real_key_paths(case: Case) -> None:
    event(f"mutations: {len(case.mutations)}")
    try:
        event(check(case))
    except Exception as error:
        if bug := known_bug(case.raw, error):
            event(f"known bug: {bug}")
            return
        raise


def vhost(**entries: Any) -> Tree:
    return {"vhosts": [{"name": "v", **entries}]}


def retryable(name: str, *delays: Any, **queue: Any) -> Tree:
    return {"name": name, "retry": {"delays": list(delays or ["1s"])}, **queue}


EVENTS = [{"name": "events", "type": "topic"}]
POLICY = {"name": "p", "pattern": "^a$", "definition": {"max-length": 1}}
APP = {"user": "u"}
AUDIT = {"name": "audit",
         "bindings": [{"exchange": "events", "routing_key": "created"}, {"exchange": "events-created"}]}


REGRESSIONS = [
    # Bugs the fuzzer found (BUG-1…5, BUG-7) or that review found and the property confirmed (BUG-6, the policy
    # case of BUG-7); all fixed in a2adc9b. Outcome: "accepted", "refused" (ConfigError), or "refused by the
    # stack check" (check_logical_names, before anything is registered).
    pytest.param(vhost(queues=[retryable("q", "1" * 5_000 + "ms")]), "refused", id="BUG-1-huge-duration"),
    pytest.param({**vhost(applications=[{"user": "u", "topic_permissions": [{"exchange": ["e"]}]}]),
                  "passwords": {"u": "p"}}, "refused", id="BUG-2-topic-permission-exchange-list"),
    pytest.param(vhost(queues=[{"name": "q", "retry": {"delays": None}}]), "refused", id="BUG-3-delays-null"),
    pytest.param(vhost(exchanges=EVENTS, queues=[{"name": "q", "bindings": [{"exchange": "events"}] * 2}]), "refused",
                 id="BUG-4-duplicate-binding"),
    pytest.param(vhost(policies=[POLICY, {**POLICY, "pattern": "^b$"}]), "refused", id="BUG-5-duplicate-policy-name"),
    pytest.param(vhost(operator_policies=[POLICY, POLICY]), "refused", id="BUG-5-duplicate-operator-policy-name"),
    pytest.param(vhost(exchanges=[*EVENTS, {"name": "events-created", "type": "fanout"}], queues=[AUDIT]),
                 "refused by the stack check", id="BUG-6-binding-keys-joined-with-dashes"),
    pytest.param(vhost(queues=[retryable("orders"), retryable("orders-wait-1")]), "refused by the stack check",
                 id="BUG-6-retryable-children-joined-with-dashes"),
    pytest.param({"vhosts": [{"name": "a", "queues": [{"name": "x-queue-y"}]},
                             {"name": "a-queue-x", "queues": [{"name": "y"}]}]}, "refused by the stack check",
                 id="BUG-6-vhost-children-joined-with-dashes"),
    pytest.param({"vhosts": [{"name": "v", "applications": [None, {"user": "u"}]}]}, "refused",
                 id="BUG-7-application-index"),
    pytest.param(vhost(queues=[{"name": "q"}], policies=[None, {**POLICY, "name": "q"}]), "refused",
                 id="BUG-7-policy-index"),
    # Never broken: corner cases the fuzzer reaches, pinned.
    *(pytest.param(vhost(queues=[retryable("q", *delays)]), "refused", id=f"bad-delays-{i}") for i, delays in enumerate(
        [("1s", "1000ms"), ("0ms",), ("4294967296ms",), ("1.5s",), ("10x",), ("",), (10,), ("10s", "1s"), ("1s", None),
         ([["1s"]],)])),
    pytest.param(vhost(queues=[retryable("q", "1ms", "4294967295ms")]), "accepted", id="delay-bounds"),
    pytest.param({"vhosts": [], "a.b": 1, "x[0]": None, "": []}, "refused", id="unknown-top-level-keys-with-dots"),
    pytest.param({"vhosts": [None], "defaults": None, "protect": None, "passwords": None}, "refused", id="nulls"),
    pytest.param({"vhosts": [[{"name": "v"}]]}, "refused", id="nested-list"),
    pytest.param({"vhosts": "v"}, "refused", id="string-for-list"),
    pytest.param(vhost(queues=[{"name": "é" * 127 + "x"}]), "accepted", id="plain-name-255-bytes"),
    pytest.param(vhost(queues=[{"name": "é" * 128}]), "refused", id="plain-name-256-bytes-128-chars"),
    pytest.param(vhost(queues=[{"name": "😀" * 64}]), "refused", id="plain-name-256-bytes-64-chars"),
    pytest.param(vhost(queues=[retryable("x" * 247)]), "accepted", id="retryable-name-247-bytes"),
    pytest.param(vhost(queues=[retryable("x" * 248)]), "refused", id="retryable-derived-name-256-bytes"),
    pytest.param({"vhosts": [{"name": "名" * 86}]}, "refused", id="vhost-name-258-bytes"),
    *(pytest.param(vhost(queues=[{"name": name}]), "refused", id=f"odd-queue-name-{i}")
      for i, name in enumerate(["@", "/", "amq.q", "", " ", " q", "q\t", 42, None, ["q"]])),
    pytest.param(vhost(queues=[{"name": "123"}, {"name": "ünïcödé.名前"}]), "accepted", id="digits-and-unicode-names"),
    pytest.param({"vhosts": [{"name": "/"}, {"name": "%2F"}]}, "accepted", id="vhost-keys-are-escaped"),
    pytest.param(vhost(queues=[retryable("x"), {"name": "x.error"}]), "refused", id="derived-queue-clash"),
    pytest.param(vhost(exchanges=[{"name": "x.retry", "type": "direct"}], queues=[retryable("x")]), "refused",
                 id="derived-exchange-clash"),
    pytest.param(vhost(queues=[{"name": "q", "bindings": [{"exchange": "nowhere"}]}]), "refused",
                 id="binding-to-undeclared-exchange"),
    pytest.param({**vhost(applications=[{"user": "u", "consumes": ["nowhere"], "publishes": ["nowhere"]}]),
                  "passwords": {"u": "p"}}, "refused", id="application-dangling"),
    pytest.param(vhost(policies=[{**POLICY, "pattern": "("}]), "refused", id="invalid-regex"),
    pytest.param(vhost(policies=[{**POLICY, "definition": {"dead-letter-exchange": "123"}}]), "refused",
                 id="digits-only-dlx"),
    pytest.param(vhost(policies=[{**POLICY, "definition": {"alternate-exchange": -7}}]), "refused",
                 id="digits-only-alternate-exchange"),
    pytest.param(vhost(operator_policies=[{**POLICY, "definition": {"dead-letter-exchange": "dlx"}}]), "refused",
                 id="operator-policy-disallowed-key"),
    pytest.param({"vhosts": [{"name": "a", "applications": [APP]}, {"name": "b", "applications": [APP]}],
                  "passwords": {"u": "p"}}, "refused", id="same-user-in-two-vhosts"),
    pytest.param(vhost(applications=[APP]), "accepted", id="no-password"),
    pytest.param({**vhost(applications=[APP]), "passwords": {"u": 123}}, "refused", id="non-string-password"),
    pytest.param({**vhost(applications=[APP]), "passwords": "p"}, "refused", id="passwords-not-a-mapping"),
    pytest.param({**vhost(applications=[{"user": user} for user in ('say "hi"', "o'neil", "x[0]", "a.b\\", "42")]),
                  "passwords": {"42": ""}}, "accepted", id="password-hints-for-odd-user-names"),
]


@pytest.mark.parametrize(("raw", "outcome"), REGRESSIONS)
def test_regression(raw: Tree, outcome: str) -> None:
    """The property, with no allowance for open bugs, on inputs pinned from fuzzing and review. An open bug
    goes here as pytest.param(..., marks=pytest.mark.xfail(strict=True, raises=..., reason=...))."""
    assert check(Case(raw, () if outcome == "accepted" else ("regression",))) == outcome


def test_the_key_path_check_accepts_only_paths_of_the_input() -> None:
    raw = {"vhosts": [{"name": "v", "queues": [{"name": "q.1"}, {"name": "0"}, {"name": "a]b"}, {"name": "d"},
                                                {"name": "d"}, {"bindings": [{"exchange": "x"}]}]}],
           "a.b": {"c": 1}}
    for path in ("vhosts", "vhosts[v].queues[q.1].name", "vhosts[v].queues[q.1].retry", 'vhosts[v].queues["0"]',
                 'vhosts[v].queues["a]b"].name', "vhosts[v].queues[3]", "vhosts[v].queues[4].name",
                 "vhosts[v].queues[5].bindings[0].exchange", "a.b", "a.b.c", "defaults"):
        assert path_exists(raw, path), path
    for path in ("vhosts[0]", "vhosts[1]", "vhosts[v].queues[0].name", "vhosts[v].queues[1]", "vhosts[v].queues[0]",
                 "vhosts[v].queues[d]", 'vhosts[v].queues["q.2"]', "vhosts[v].queues[6]",
                 "vhosts[v].queues[5].bindings[x]", "vhosts[v].queues[q.1].name.x", "vhosts.name", "a", "a.b.d",
                 "vhosts[v]queues", "nonsense"):
        assert not path_exists(raw, path), path


def test_the_urn_model_matches_the_program() -> None:
    """`urns` models what `__main__` registers; check it against the program run under Pulumi's mocks."""
    import json
    import runpy

    from tools.lib.mockrun import ROOT, record

    raw: Tree = {"vhosts": [
        {"name": "/", "exchanges": EVENTS, "policies": [POLICY], "operator_policies": [{**POLICY, "name": "op"}],
         "queues": [retryable("orders", "1s", "2s", bindings=[{"exchange": "events", "routing_key": "a"}],
                              max_length=5),
                    {"name": "audit", "max_length": 3,
                     "bindings": [{"exchange": "events"}, {"exchange": "amq.topic", "external": True}]}],
         "applications": [{"user": "u", "consumes": ["orders"], "publishes": ["events"],
                           "topic_permissions": [{"exchange": "events"}]}]},
        {"name": "shop", "queues": [{"name": "q", "type": "classic"}]},
    ], "passwords": {"u": "p"}}
    config = load_stack_config(raw)
    registered = record(lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"),
                        config={f"rabbitmq-retry:{key}": json.dumps(value) for key, value in raw.items()},
                        secret_keys=["rabbitmq-retry:passwords"])
    # urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>, types shortened to their last part.
    program = sorted(("$".join(t.split(":")[-1] for t in types.split("$")), name)
                     for _, _, types, name in (r.urn.split("::") for r in registered) if "Stack" not in types)
    assert program == sorted(urn for urn, _ in urns(config, [plan_vhost(v) for v in config.vhosts]))


def test_the_property_path_model_reads_pulumis_documented_examples() -> None:
    assert property_path("root.nested") == ["root", "nested"]
    assert property_path('root["double"].nest') == ["root", "double", "nest"]
    assert property_path("root.array[0][1].nested") == ["root", "array", 0, 1, "nested"]
    assert property_path('root["key with \\"escaped\\" quotes"]') == ["root", 'key with "escaped" quotes']
    assert property_path('["root key with a ."][100]') == ["root key with a .", 100]
    assert property_path("passwords.billing.svc") == ["passwords", "billing", "svc"]
    with pytest.raises(ValueError, match="closing quote"):
        property_path('passwords["a.b\\"]')
