"""The replication settings of quorum queues beyond the queue argument: RabbitMQ 4's `target-group-size` policy key
(membership reconciliation) for a stack whose `broker.version` is 4.x, and the quorum group size of a vhost's shared
delay levels (`delay_levels.quorum_group_size`). Both are planned from the config alone; their broker side is
tests/cluster/test_group_size.py."""

from __future__ import annotations

from typing import Any

import pytest

from components.config.load import load_stack_config
from components.model.problems import ConfigError
from components.pulumi.stack_resources import plan_stack
from tests.conftest import vhost_config
from tests.support.doctor import planned_objects
from tests.test_doctor_cluster import facts
from tools.lib import doctor

LEVELS_QUEUE = {"name": "jobs", "type": "quorum", "bindings": [{"exchange": "events", "routing_key": "job"}],
                "retry": {"strategy": "levels", "max_retries": 3, "backoff": {"initial": "1s", "max": "8s"}}}
NATIVE_QUEUE = {"name": "mail", "type": "quorum", "bindings": [{"exchange": "events", "routing_key": "mail"}],
                "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "5s", "max_retries": 3}}
TIERS_QUEUE = {"name": "orders", "type": "quorum", "bindings": [{"exchange": "events", "routing_key": "order"}],
               "retry": {"delays": ["1s", "10s"], "max_retries": 3}}
PLAIN_QUEUE = {"name": "audit", "type": "quorum"}


def stack(version: str | None, *, group_size: int | None = 2, levels: dict[str, Any] | None = None,
          queues: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Tiers, levels and plain quorum queues (and `native` where the version takes it), sized by the defaults."""
    native = [NATIVE_QUEUE] if version is not None and version.startswith("4.3") else []
    raw: dict[str, Any] = {"vhosts": [vhost_config(queues=queues or [TIERS_QUEUE, LEVELS_QUEUE, *native,
                                                                    PLAIN_QUEUE])]}
    if levels is not None:
        raw["vhosts"][0]["delay_levels"] = levels
    if group_size is not None:
        raw["defaults"] = {"quorum_group_size": group_size}
    if version is not None:
        raw["broker"] = {"version": version}
    return raw


def policies(raw: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Definition of every policy the stack plans, by policy name (delay levels included)."""
    [(_, plan)] = plan_stack(load_stack_config(raw))
    found = {p.name: dict(p.definition) for p in plan.policies}
    for retryable in plan.retryables:
        found.update({p.name: dict(p.definition) for p in retryable.policies})
    assert plan.delay_levels is not None
    found.update({p.name: dict(p.definition) for p in plan.delay_levels.policies})
    return found


def test_on_a_4_x_broker_every_quorum_queue_with_a_group_size_has_it_as_its_target_group_size() -> None:
    planned = policies(stack("4.3.6"))
    # Input queues, wait tiers, error queues, the plain queue, the delay levels and their undeliverable queue.
    assert {name for name, definition in planned.items() if definition.get("target-group-size") == "2"} == set(
        planned)
    assert planned["orders.wait.1"] == {"message-ttl": "1000", "target-group-size": "2"}
    assert planned["orders.error"]["delivery-limit"] and planned["mail"]["delayed-retry-type"] == "failed"
    assert len([name for name in planned if name.startswith("rabbitmq-retry.delay.")]) >= 3


def test_the_key_comes_from_its_own_config_key_path() -> None:
    [(_, plan)] = plan_stack(load_stack_config(stack("4.3.6", group_size=None, queues=[
        {**TIERS_QUEUE, "quorum_group_size": 3}, LEVELS_QUEUE], levels={"quorum_group_size": 2})))
    [orders] = [r for r in plan.retryables if r.config.name == "orders"]
    own = "vhosts[shop].queues[orders].quorum_group_size"
    assert {p.name: p.sources.get("target-group-size") for p in orders.policies} == {
        "orders": own, "orders.wait.1": own, "orders.wait.2": own, "orders.error": own}
    assert plan.delay_levels is not None
    assert {p.sources["target-group-size"] for p in plan.delay_levels.policies} == {
        "vhosts[shop].delay_levels.quorum_group_size"}
    assert all(p.definition["target-group-size"] == "2" for p in plan.delay_levels.policies)
    [jobs] = [r for r in plan.retryables if r.config.name == "jobs"]
    # `jobs` sets no size of its own and the defaults none: its policies are as before.
    assert all("target-group-size" not in p.definition for p in jobs.policies)


@pytest.mark.parametrize("version", [None, "3.10.8", "3.13.7"])
def test_without_a_4_x_broker_version_no_policy_carries_it(version: str | None) -> None:
    """3.10.8 refuses the key (HTTP 400, measured); without broker.version the stack must run on either broker."""
    assert all("target-group-size" not in d for d in policies(stack(version)).values())


def test_without_a_group_size_a_4_x_stack_plans_what_it_planned_before() -> None:
    queues = [TIERS_QUEUE, LEVELS_QUEUE, PLAIN_QUEUE]
    assert policies(stack("4.3.6", group_size=None, queues=queues)) == policies(stack(None, group_size=None,
                                                                                      queues=queues))


def test_a_4_x_version_only_adds_policy_keys_never_changes_a_queue() -> None:
    """A policy update in place: the queues' arguments (what would replace them) are the same with and without it."""
    def arguments(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        [(_, plan)] = plan_stack(load_stack_config(raw))
        assert plan.delay_levels is not None
        return {q.name: dict(q.arguments) for q in (*plan.queues, *plan.delay_levels.queues,
                                                    *(q for r in plan.retryables for q in r.queues))}
    queues = [TIERS_QUEUE, LEVELS_QUEUE, PLAIN_QUEUE]
    assert arguments(stack("4.3.6", queues=queues)) == arguments(stack("3.10.8", queues=queues)) == arguments(
        stack(None, queues=queues))


def test_an_unmeasured_4_x_version_is_warned_about() -> None:
    from components.config.capabilities import version_warnings
    config = load_stack_config(stack("4.1.2"))
    warnings = [w for w in version_warnings(config, config.broker_version) if "target-group-size" in w]
    assert warnings and all("4.1.2 was not measured" in w for w in warnings)
    assert any(w.startswith("vhosts[shop].delay_levels.quorum_group_size: ") for w in warnings)


def test_the_delay_levels_take_the_default_group_size_or_their_own() -> None:
    def level_arguments(raw: dict[str, Any]) -> set[Any]:
        [(_, plan)] = plan_stack(load_stack_config(raw))
        assert plan.delay_levels is not None
        return {q.arguments.get("x-quorum-initial-group-size") for q in plan.delay_levels.queues}

    assert level_arguments(stack(None, group_size=None)) == {None}
    assert level_arguments(stack(None, group_size=2)) == {2}
    assert level_arguments(stack(None, group_size=2, levels={"quorum_group_size": 3})) == {3}
    assert level_arguments(stack(None, group_size=None, levels={"quorum_group_size": 1})) == {1}
    # Classic levels ignore a default, as classic queues do.
    assert level_arguments(stack(None, group_size=2, levels={"type": "classic"})) == {None}


def test_a_group_size_on_classic_levels_or_below_one_is_refused_with_its_key_path() -> None:
    with pytest.raises(ConfigError) as refused:
        load_stack_config(stack(None, levels={"type": "classic", "quorum_group_size": 2}))
    assert [path for path, _ in refused.value.problems] == ["vhosts[shop].delay_levels.quorum_group_size"]
    assert "quorum-only" in refused.value.problems[0][1]
    with pytest.raises(ConfigError) as zero:
        load_stack_config(stack(None, levels={"quorum_group_size": 0}))
    assert [path for path, _ in zero.value.problems] == ["vhosts[shop].delay_levels.quorum_group_size"]


def test_doctor_warns_when_the_delay_levels_ask_for_more_replicas_than_running_nodes() -> None:
    def group_warnings(raw: dict[str, Any], running: tuple[bool, ...]) -> list[str]:
        config = load_stack_config(raw)
        return [w for w in doctor.diagnose(config, planned_objects(config), facts("4.3.6", running)).warnings
                if "delay_levels.quorum_group_size" in w]

    raw = stack(None, group_size=None, queues=[LEVELS_QUEUE], levels={"quorum_group_size": 3})
    [warning] = group_warnings(raw, (True, True, False))
    assert warning.startswith("vhosts[shop].delay_levels.quorum_group_size asks for 3 replicas of the delay level "
                              "queues in vhost 'shop'")
    assert "a cluster with 2 running nodes" in warning and "lower it to 2 or run at least 3 nodes" in warning
    assert not group_warnings(raw, (True, True, True))
    inherited = stack(None, group_size=5, queues=[LEVELS_QUEUE])
    [from_defaults] = group_warnings(inherited, (True, True, True))
    assert "(or defaults.quorum_group_size, which it inherits) asks for 5" in from_defaults
