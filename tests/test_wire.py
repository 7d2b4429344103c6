"""The wire table (components/model/wire.py): each RabbitMQ key is spelt there alone, and what each row says is what the
config, the effective-policy merge, the broker-version checks and the review's engine do with the key."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from components.config.capabilities import version_problems
from components.config.load import load_stack_config
from components.config.parsers import parse_queue_arguments, policy_value
from components.model import wire
from components.model.fields import Problems
from components.model.keys import KEY_TABLES
from components.model.plan_types import PolicyPlan, QueuePlan
from components.plan.effective import applies_to_queue_type, merge
from tests.conftest import RETRYABLE, vhost_config
from tests.support.sources import ROOT, python_files
from tools.lib import engine

SOURCES = ("components", "tools", "rabbitmq_retry_client", "bench", "__main__.py")
"""Everything the project ships or runs, except the tests."""
WIRE_NAMES = {name for row in wire.ROWS for name in (row.key, *([row.argument] if row.queue_argument else []))}


def spellings(path: Path) -> list[str]:
    """The wire keys `path` spells as a string of their own (a key inside a sentence is prose, not a spelling)."""
    return [node.value for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WIRE_NAMES]


def test_each_wire_key_is_spelt_at_most_once_outside_the_table_and_the_tests():
    files = python_files(*SOURCES)
    counts = Counter(name for path in files if path != ROOT / "components" / "wire.py" for name in spellings(path))
    assert {name: n for name, n in counts.items() if n > 1} == {}


def test_the_scan_sees_a_key_spelt_in_code(tmp_path: Path):
    source = tmp_path / "spelt.py"
    source.write_text('ARGS = {"x-message-ttl": 1}\nTEXT = f"message-ttl {ARGS}"\n"""message-ttl in prose"""\n')
    assert spellings(source) == ["x-message-ttl"]


def test_each_key_has_one_row_and_the_config_tables_are_its_views():
    assert len({row.key for row in wire.ROWS}) == len(wire.ROWS)
    assert KEY_TABLES["vhosts[].operator_policies[].definition"] == wire.OPERATOR_POLICY_KEYS
    assert set(wire.OPERATOR_POLICY_KEYS) <= set(wire.POLICY_KEYS)
    assert not set(wire.RETIRED_POLICY_KEYS) & set(wire.POLICY_KEYS)


def test_a_queue_argument_replaces_the_queue_and_a_policy_key_changes_in_place():
    for row in wire.ROWS:
        if row.queue_argument:
            assert engine.forces_replace(engine.QUEUE, f"settings.argumentsJson.{row.argument}"), row.key
        if row.policy:
            assert not engine.forces_replace(engine.POLICY, f"policy.definition.{row.key}"), row.key
            assert not engine.forces_replace(engine.OPERATOR_POLICY, f"policy.definition.{row.key}"), row.key


def test_a_key_that_is_not_a_queue_argument_has_none():
    with pytest.raises(ValueError, match="target-group-size is not a queue argument"):
        _ = wire.TARGET_GROUP_SIZE.argument


def test_rabbitmq_skips_a_policy_holding_a_key_its_queue_type_does_not_take():
    # rabbit_queue_type capabilities of 3.10.8 and 4.3: these make the whole policy inapplicable.
    assert wire.SKIPPED_KEYS["classic"] >= {"delivery-limit", "dead-letter-strategy", "max-age",
                                          "stream-max-segment-size-bytes", "initial-cluster-size"}
    assert wire.SKIPPED_KEYS["quorum"] >= {"max-priority", "queue-mode", "ha-mode", "ha-params", "ha-sync-mode",
                                         "ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator",
                                         "max-age", "stream-max-segment-size-bytes", "initial-cluster-size"}
    assert "stream" not in wire.SKIPPED_KEYS
    for queue_type in wire.QUEUE_TYPES:
        for row in wire.ROWS:
            if row.policy or row.retired:
                policy = PolicyPlan("p", "p", "^q$", 1, {row.key: "1"})
                assert applies_to_queue_type(policy, queue_type) == (queue_type in row.queue_types), row.key


VALUES = {"integer": ("5", "3"), "name": ("a5", "a3"), "boolean": ("true", "false"), "age": ("5D", "3D")}


def values(row: wire.WireKey) -> tuple[str, str]:
    """A higher and a lower value RabbitMQ takes for `row`."""
    return (row.choices[-1], row.choices[0]) if row.type == "choice" else VALUES[row.type]


def typed(row: wire.WireKey, text: str) -> str | int:
    return int(text) if row.type == "integer" else text


@pytest.mark.parametrize("queue_type", wire.QUEUE_TYPES)
@pytest.mark.parametrize("row", [r for r in wire.ROWS if r.policy and r.queue_argument], ids=lambda r: r.key)
def test_a_policy_and_an_argument_combine_as_the_row_says(row: wire.WireKey, queue_type: str):
    high, low = values(row)
    for argument, policy in ((high, low), (low, high)):
        queue = QueuePlan("q", "q", queue_type, {row.argument: typed(row, argument)}, "plain")
        setting = merge(queue, PolicyPlan("p", "q", "^q$", 1, {row.key: policy}), None).settings[row.key]
        expected = {"argument": argument, "policy": policy, "lower": low}[row.combine(queue_type)]
        assert str(setting.value) == expected, (argument, policy)
    # The dead-letter route is the queue's own: a policy never moves it (docs/broker-facts.md §2).
    assert wire.DEAD_LETTER_EXCHANGE.combine(queue_type) == "argument"
    assert wire.MESSAGE_TTL.combine(queue_type) == "lower"


@pytest.mark.parametrize("row", [r for r in wire.ROWS if r.operator_policy], ids=lambda r: r.key)
def test_a_user_and_an_operator_policy_combine_as_the_row_says(row: wire.WireKey):
    high, low = values(row)
    queue = QueuePlan("q", "q", "quorum", {}, "plain")
    for user, operator in ((high, low), (low, high)):
        merged = merge(queue, PolicyPlan("u", "q", "^q$", 1, {row.key: user}),
                       PolicyPlan("o", "o", "^q$", 1, {row.key: operator}))
        expected = operator if row.operator_wins else low if row.lower_wins else user
        assert str(merged.settings[row.key].value) == expected, (user, operator)


def test_an_unlimited_delivery_limit_loses_to_a_finite_one():
    queue = QueuePlan("q", "q", "quorum", {}, "plain")
    key = wire.DELIVERY_LIMIT.key
    merged = merge(queue, PolicyPlan("u", "q", "^q$", 1, {key: "25"}), PolicyPlan("o", "o", "^q$", 1, {key: "-1"}))
    assert merged.settings[key].value == 25


@pytest.mark.parametrize("row", [r for r in wire.ROWS if r.policy], ids=lambda r: r.key)
def test_the_config_checks_a_policy_value_by_its_row(row: wire.WireKey):
    p = Problems()
    accepted = policy_value(p, "v", row.key, values(row)[0])
    assert (accepted, p.items) == (values(row)[0], [])
    wrong = {"integer": "soon", "name": "123", "choice": "true", "age": "7 days"}.get(row.type)
    if wrong is not None:
        policy_value(p, "v", row.key, wrong)
        assert [path for path, _ in p.items] == ["v"]


@pytest.mark.parametrize("row", [r for r in wire.ROWS if r.queue_argument], ids=lambda r: r.key)
def test_the_config_checks_a_queue_argument_by_its_row(row: wire.WireKey):
    p = Problems()
    valid: Any = {"integer": 5, "name": "a5", "boolean": True}.get(row.type, row.choices[0] if row.choices else "")
    arguments = {row.argument: valid}
    if row is not wire.QUEUE_TYPE:
        arguments[wire.QUEUE_TYPE.argument] = "classic"
    assert parse_queue_arguments(p, "a", arguments, "classic" if row is not wire.QUEUE_TYPE else valid) == arguments
    wrong = {"integer": "soon", "choice": "sometimes"}.get(row.type)
    if wrong is not None:
        parse_queue_arguments(p, "a", {**arguments, row.argument: wrong}, "classic")
        assert [path for path, _ in p.items] == [f"a.{row.argument}"]


def stack(version: str, definition: dict[str, Any], kind: str = "policies") -> dict[str, Any]:
    policy = {"name": "theirs", "pattern": "^elsewhere$", "definition": definition}
    return {"broker": {"version": version},
            "vhosts": [vhost_config(queues=[RETRYABLE | {"type": "classic"}], **{kind: [policy]})]}


@pytest.mark.parametrize(("row", "kind"), [
    *((r, "policies") for r in wire.ROWS if r.policy and r.since),
    *((r, "operator_policies") for r in wire.ROWS if r.operator_policy and r.operator_since)],
    ids=lambda x: x if isinstance(x, str) else x.key)
def test_a_key_a_broker_version_does_not_take_is_refused_for_it_and_taken_from_its_since(row: wire.WireKey,
                                                                                        kind: str):
    since = row.operator_since if kind == "operator_policies" else row.since
    assert since is not None
    definition: dict[str, Any] = {row.key: values(row)[1]}
    if row is wire.DELAYED_RETRY_TYPE:
        definition[wire.DELAYED_RETRY_MIN.key] = "100"     # 4.3 takes a delayed-retry-type only with a minimum
    major, minor, patch = since.minimum
    older = since.refused_by or ((major, minor, patch - 1) if patch else (major, minor - 1, 99))
    config = load_stack_config(stack(".".join(map(str, since.minimum)), definition, kind))
    path = f"vhosts[shop].{kind}[theirs].definition.{row.key}"
    assert path not in [p for p, _ in version_problems(config, since.minimum)]
    assert path in [p for p, _ in version_problems(config, older)]
