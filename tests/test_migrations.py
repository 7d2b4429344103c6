"""Migrations (`vhosts[].migrations[]`): what each entry is allowed to say, what the plan keeps, adds and retires in
each step, what the contract tells consumers, and what the components register (under mocks)."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import pytest

from components import Vhost
from components.config.load import load_stack_config, load_vhost
from components.config.passwords import password_problems
from components.model import naming
from components.model.plan_types import SHOVEL_ACK_MODE, SHOVEL_DELETE_AFTER, VhostPlan
from components.model.problems import ConfigError
from components.plan.planner import plan_vhost
from components.pulumi.resources import ShovelAccess
from tests.conftest import of_type, vhost_config
from tools.lib.mockrun import record

EVENTS = [{"exchange": "events", "routing_key": "order.created"}]
SHOVEL_USER = "rabbitmq-retry-shovel.rabbitmq-retry.test"
"""The shovel user of stack `test` of project `rabbitmq-retry`, which tools.lib.mockrun runs the components as."""


def before() -> dict[str, Any]:
    """A vhost before a migration: `orders` (classic, tiers) takes the application's publishes."""
    config = vhost_config()
    config["queues"][0]["type"] = "classic"
    return config


def moving(step: str = "move", successor: dict[str, Any] | None = None) -> dict[str, Any]:
    """`orders` moving to the quorum queue `orders.q`, its bindings moved there (step move), or gone (retire)."""
    config = before()
    old = config["queues"][0]
    old.pop("bindings")
    new = successor or {"name": "orders.q", "type": "quorum", "retry": {"delays": ["1s", "10s", "1m"],
                                                                       "max_retries": 5}}
    config["queues"].append({**new, "bindings": EVENTS})
    if step == "retire":
        config["queues"].remove(old)
    config["migrations"] = [{"name": "orders-to-quorum", "move": {"from": "orders", "to": "orders.q"}, "step": step}]
    return config


def draining_tiers(step: str = "drain") -> dict[str, Any]:
    config = before()
    config["queues"][0]["retry"]["delays"] = ["1s"]
    config["migrations"] = [{"name": "orders-drop-tiers", "drain_tiers": {"queue": "orders",
                                                                           "delays": ["1s", "10s", "1m"]},
                             "step": step}]
    return config


def levels_vhost(max_delay: str) -> dict[str, Any]:
    return {"name": "shop", "queues": [{"name": "jobs", "retry": {"strategy": "levels", "max_retries": 3}}],
            "delay_levels": {"max_delay": max_delay}}


def plan(config: dict[str, Any], shovel_user: str = SHOVEL_USER) -> VhostPlan:
    return plan_vhost(load_vhost(config, "vhosts[0]"), "vhosts[0]", shovel_user)


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as error:
        load_vhost(config, "vhosts[0]")
    return error.value.problems


def entries(vhost: VhostPlan, queue: str | None = None) -> dict[tuple[str, str], Any]:
    """Every planned entry of one retryable queue (or of the delay levels), by (kind, logical key)."""
    if queue is None:
        assert vhost.delay_levels is not None
        owner: Any = vhost.delay_levels
    else:
        owner = next(r for r in vhost.retryables if r.config.name == queue)
    return {(kind, e.key): e for kind in ("queues", "exchanges", "bindings", "policies")
            for e in getattr(owner, kind)}


def without_sources(entry: Any) -> Any:
    """An entry as the provider receives it: the config key paths the checks name are not inputs."""
    return dataclasses.replace(entry, sources={}) if hasattr(entry, "sources") else entry


# --- config ---------------------------------------------------------------------------------------------------


def test_a_move_names_its_key_path_when_the_old_queue_still_has_bindings():
    config = moving()
    config["queues"][0]["bindings"] = EVENTS
    [(path, message)] = problems(config)
    assert path == "vhosts[0].queues[orders].bindings"
    assert "publishes would reach both queues and the shovel would duplicate them" in message
    assert message.endswith("move its bindings to orders.q")


def test_step_retire_refuses_the_old_queue_still_in_queues():
    config = moving()
    config["migrations"][0]["step"] = "retire"
    [(path, message)] = problems(config)
    assert (path, message) == ("vhosts[0].queues[orders]", "remove queue orders from vhosts[0].queues: step retire of "
                                                      "migration orders-to-quorum deletes it once empty")


def test_step_move_refuses_an_old_queue_missing_from_queues_and_a_successor_that_is_not_declared():
    config = moving("retire")
    config["migrations"][0]["step"] = "move"
    config["migrations"][0]["move"]["to"] = "orders.z"
    paths = [path for path, _ in problems(config)]
    assert paths == ["vhosts[0].migrations[orders-to-quorum].move.to",
                     "vhosts[0].migrations[orders-to-quorum].move.from"]


@pytest.mark.parametrize(("change", "path", "words"), [
    ({"name": "Orders"}, "vhosts[0].migrations[Orders].name", "lower-case letters, digits and dashes"),
    ({"step": "drain"}, "vhosts[0].migrations[orders-to-quorum].step", "is not one of move, retire"),
    ({"drain_levels": {"max_delay": "1d"}}, "vhosts[0].migrations[orders-to-quorum]",
                                            "exactly one of move, drain_tiers"),
    ({"move": {"from": "orders",
                       "to": "orders"}}, "vhosts[0].migrations[orders-to-quorum].move.to",
                                         "is the queue it moves from"),
    ({"move": {"from": "orders"}}, "vhosts[0].migrations[orders-to-quorum].move.to", "missing"),
    ({"move": {"from": "orders",
                       "to": "orders.q",
                             "via": "x"}}, "vhosts[0].migrations[orders-to-quorum].move.via", "unknown key"),
])
def test_each_bad_entry_is_refused_at_its_key_path(change, path, words):
    config = moving()
    config["migrations"][0].update(change)
    found = problems(config)
    assert any(p == path and words in m for p, m in found), found


def test_step_is_required_and_says_where_to_start():
    config = moving()
    del config["migrations"][0]["step"]
    assert problems(config) == [("vhosts[0].migrations[orders-to-quorum].step",
                                 "missing; move then retire (start with step: move)")]


def test_two_migrations_may_not_share_a_name_or_move_one_queue_twice():
    config = moving()
    config["queues"].append({"name": "orders.r", "retry": {"delays": ["1s"]}})
    config["migrations"].append({"name": "orders-to-quorum", "move": {"from": "orders", "to": "orders.r"},
                                 "step": "move"})
    paths = [path for path, _ in problems(config)]
    assert paths == ["vhosts[0].migrations[1].name", "vhosts[0].migrations[1].move.from"]


def test_a_chain_in_the_same_step_is_refused():
    config = moving()
    config["queues"][-1].pop("bindings")
    config["queues"].append({"name": "orders.r", "bindings": EVENTS, "retry": {"delays": ["1s"]}})
    config["migrations"].append({"name": "q-to-r", "move": {"from": "orders.q", "to": "orders.r"}, "step": "move"})
    [(path, message)] = problems(config)
    assert path == "vhosts[0].migrations[orders-to-quorum].move.to"
    assert "finish this migration (step retire) before starting that one" in message


def test_a_retryable_queue_moves_only_to_a_retryable_successor_its_parked_messages_can_reach():
    [(path, message)] = problems(moving(successor={"name": "orders.q"}))
    assert path == "vhosts[0].migrations[orders-to-quorum].move.to"
    assert "give orders.q a retry block" in message


def test_drain_tiers_needs_more_tiers_before_than_now():
    config = draining_tiers()
    config["migrations"][0]["drain_tiers"]["delays"] = ["5s"]
    [(path, message)] = problems(config)
    assert path == "vhosts[0].migrations[orders-drop-tiers].drain_tiers.delays"
    assert "nothing to drain" in message


def test_drain_tiers_delays_written_alone_are_suggested_as_a_list():
    config = draining_tiers()
    config["migrations"][0]["drain_tiers"]["delays"] = "1m"
    assert problems(config) == [("vhosts[0].migrations[orders-drop-tiers].drain_tiers.delays",
                                 "expected a list, got str; write delays: [1m]")]


def test_drain_tiers_of_a_queue_without_tiers_points_to_a_move():
    config = draining_tiers()
    config["migrations"][0]["drain_tiers"]["queue"] = "audit"
    [(path, message)] = problems(config)
    assert path == "vhosts[0].migrations[orders-drop-tiers].drain_tiers.queue"
    assert "a change of strategy is a move" in message


def test_drain_levels_needs_more_levels_before_than_now():
    config = levels_vhost("1d")
    config["migrations"] = [{"name": "levels-down", "drain_levels": {"max_delay": "1h"}, "step": "drain"}]
    [(path, message)] = problems(config)
    assert path == "vhosts[0].migrations[levels-down].drain_levels.max_delay"
    assert "nothing to drain" in message


def test_the_shovel_user_needs_a_password_while_a_queue_moves_and_no_application_may_take_its_name():
    config = load_stack_config({"vhosts": [moving()]})
    [(path, message)] = password_problems(config, {})
    assert path == "vhosts[shop].migrations[orders-to-quorum]"
    assert message.startswith("no password for the stack's shovel user")
    assert "'rabbitmq-retry:passwords.rabbitmq-retry-shovel'" in message
    assert password_problems(config, {"rabbitmq-retry-shovel": "s"}) == []
    assert password_problems(load_stack_config({"vhosts": [moving("retire")]}), {}) == []
    for taken in ("rabbitmq-retry-shovel", "rabbitmq-retry-shovel.rabbitmq-retry.prod"):
        clash = moving()
        clash["applications"] = [{"user": taken, "consumes": ["orders.q"]}]
        with pytest.raises(ConfigError) as error:
            load_stack_config({"vhosts": [clash]})
        assert [p for p, _ in error.value.problems] == [f"vhosts[shop].applications[{taken}].user"]
    other = moving()
    other["applications"] = [{"user": "rabbitmq-retry-shovelling", "consumes": ["orders.q"]}]
    load_stack_config({"vhosts": [other]})


def test_a_leftover_shovel_password_is_refused_once_no_migration_needs_it():
    with pytest.raises(ConfigError) as error:
        load_stack_config({"vhosts": [before()], "passwords": {"rabbitmq-retry-shovel": "s"}})
    assert error.value.problems == [("passwords.rabbitmq-retry-shovel", "the shovel user's password, and no "
                                     "migration of this stack needs it any more; remove it: pulumi config rm --path "
                                     "'rabbitmq-retry:passwords.rabbitmq-retry-shovel'")]
    load_stack_config({"vhosts": [moving("retire")], "passwords": {"rabbitmq-retry-shovel": "s"}})


# --- plan -----------------------------------------------------------------------------------------------------


def test_step_move_keeps_every_object_of_the_old_queue_byte_identical():
    old, new = entries(plan(before()), "orders"), entries(plan(moving()), "orders")
    assert old == new


def test_step_move_adds_two_shovels_on_confirm_never_self_deleting_and_least_privilege_permissions():
    vhost = plan(moving())
    assert [(s.name, s.source, s.destination) for s in vhost.shovels] == [
        ("rabbitmq-retry.migrate.orders-to-quorum", "orders", "orders.q"),
        ("rabbitmq-retry.migrate.orders-to-quorum.error", "orders.error", "orders.q.error")]
    assert {(s.ack_mode, s.source_delete_after) for s in vhost.shovels} == {(SHOVEL_ACK_MODE, SHOVEL_DELETE_AFTER)}
    assert (SHOVEL_ACK_MODE, SHOVEL_DELETE_AFTER) == ("on-confirm", "never")
    [grant] = vhost.shovel_permissions
    assert (grant.key, grant.user, grant.read.regex, grant.write.regex, grant.configure.regex) == (
        "permissions-rabbitmq-retry-shovel", SHOVEL_USER, r"^(orders|orders\.error)$", r"^amq\.default$",
        r"^(orders\.q|orders\.q\.error)$")
    # The names each regex allows, as planned (what the review reads, never the regexes).
    assert (grant.read.names, grant.write.names, grant.configure.names) == (
        ("orders", "orders.error"), ("amq.default",), ("orders.q", "orders.q.error"))
    [migration] = vhost.migrations
    assert migration.old_queues == ("orders", "orders.wait.1", "orders.wait.2", "orders.wait.3", "orders.error")


def test_a_plain_old_queue_moves_with_one_shovel():
    config = before()
    config["queues"][1].pop("bindings")
    config["queues"].append({"name": "audit.q", "type": "quorum", "bindings": [{"exchange": "events",
                                                                                "routing_key": "#"}]})
    config["migrations"] = [{"name": "audit-to-quorum", "move": {"from": "audit", "to": "audit.q"}, "step": "move"}]
    assert [s.name for s in plan(config).shovels] == ["rabbitmq-retry.migrate.audit-to-quorum"]


def test_step_retire_drops_the_old_queue_the_shovels_and_the_permissions():
    vhost = plan(moving("retire"))
    assert not vhost.shovels and not vhost.shovel_permissions
    assert [r.config.name for r in vhost.retryables] == ["orders.q"]
    assert vhost.migrations[0].old_queues == ("orders", "orders.error")


def test_step_retire_with_delay_levels_binds_the_successor_for_the_old_queues_key():
    config = levels_vhost("1h")
    config["queues"] = [{"name": "jobs.q", "retry": {"strategy": "levels", "max_retries": 3}}]
    config["migrations"] = [{"name": "jobs-renamed", "move": {"from": "jobs", "to": "jobs.q"}, "step": "retire"}]
    [binding] = [b for b in plan(config).bindings if b.key == "migration-jobs-renamed-delivery-binding"]
    assert (binding.source, binding.destination, binding.routing_key) == (
        naming.DELIVERY_EXCHANGE, "jobs.q", naming.delivery_pattern("jobs"))


def test_drain_tiers_keeps_the_removed_tiers_exactly_as_the_old_config_planned_them_out_of_the_contract():
    old, draining = plan(before()), plan(draining_tiers())
    kept = {k: v for k, v in entries(old, "orders").items() if ".wait.2" in getattr(v, "name", "")
            or ".wait.3" in getattr(v, "name", "") or k[1].startswith(("wait-2", "wait-3"))}
    assert len(kept) == 6  # two wait queues, their policies and their bindings
    now = entries(draining, "orders")
    assert {k: without_sources(now[k]) for k in kept} == {k: without_sources(v) for k, v in kept.items()}
    assert [t["routing_key"] for t in draining.retryables[0].contract("shop")["tiers"]] == ["wait.1"]
    assert draining.migrations[0].old_queues == ("orders.wait.2", "orders.wait.3")
    policy = now[("policies", "wait-3-policy")]
    assert policy.sources == {"message-ttl": "vhosts[0].migrations[orders-drop-tiers].drain_tiers.delays[2]"}


def test_drain_tiers_retire_drops_the_tiers():
    vhost = plan(draining_tiers("retire"))
    assert [q.name for q in vhost.retryables[0].queues] == ["orders", "orders.wait.1", "orders.error"]
    assert vhost.migrations[0].old_queues == ("orders.wait.2", "orders.wait.3")


def test_drain_levels_keeps_the_levels_above_the_new_max_delay_byte_identical():
    old = entries(plan(levels_vhost("1d")))
    config = levels_vhost("1h")
    config["migrations"] = [{"name": "levels-to-1h", "drain_levels": {"max_delay": "1d"}, "step": "drain"}]
    draining = plan(config)
    assert entries(draining) == old
    assert draining.delay_levels is not None and draining.delay_levels.config.levels == 12
    assert len(draining.retryables[0].contract("shop")["delay_exchanges"]) == 12  # type: ignore[arg-type]
    assert draining.migrations[0].old_queues == tuple(naming.delay_level(k) for k in range(12, 17))
    config["migrations"][0]["step"] = "retire"
    assert entries(plan(config)) == entries(plan(levels_vhost("1h")))


def test_a_plan_without_migrations_is_unchanged():
    vhost = plan(before())
    assert vhost.migrations == () and vhost.shovel_permissions == () and vhost.shovels == ()


# --- contract -------------------------------------------------------------------------------------------------


def test_during_a_move_both_contracts_say_so_and_other_contracts_do_not():
    vhost = plan(moving())
    contracts = {r.config.name: r.contract("shop") for r in vhost.retryables}
    assert contracts["orders"]["migration"] == {"name": "orders-to-quorum", "step": "move", "successor": "orders.q"}
    assert contracts["orders.q"]["migration"] == {"name": "orders-to-quorum", "step": "move",
                                                  "predecessor": "orders", "drains_by": "shovel"}
    assert "migration" not in plan(before()).retryables[0].contract("shop")


# --- components (mocks) ---------------------------------------------------------------------------------------

SHOVEL = "rabbitmq:index/shovel:Shovel"
PERMISSIONS = "rabbitmq:index/permissions:Permissions"
QUEUE = "rabbitmq:index/queue:Queue"


def record_moving(**extra: Any) -> list[Any]:
    access = ShovelAccess(SHOVEL_USER, "pa ss/word", 5673)
    return record(lambda: Vhost("shop", {"vhost": moving(), "shovel_access": access, **extra}), reveal_secrets=True)


def test_the_vhost_registers_each_shovel_after_its_queues_and_the_shovel_users_permissions():
    resources = record_moving()
    shovels = of_type(resources, SHOVEL)
    assert sorted(shovels) == ["shop-shovel-orders-to-quorum", "shop-shovel-orders-to-quorum-error"]
    shovel = shovels["shop-shovel-orders-to-quorum"]
    info = shovel.inputs["info"]
    assert (info["sourceQueue"], info["destinationQueue"], info["ackMode"], info["sourceDeleteAfter"]) == (
        "orders", "orders.q", "on-confirm", "never")
    assert info["sourceUri"] == info["destinationUri"] == \
        "amqp://rabbitmq-retry-shovel.rabbitmq-retry.test:pa%20ss%2Fword@localhost:5673/shop"
    urns = {r.name: r.urn for r in resources}
    assert urns["shop-permissions-rabbitmq-retry-shovel"] in shovel.dependencies
    # Depending on a component is depending on each of its children: the queues of both RetryableQueues.
    assert {urns["shop-orders.q-input"], urns["shop-orders-input"]} <= set(shovel.dependencies)
    error_shovel = shovels["shop-shovel-orders-to-quorum-error"]
    assert {urns["shop-orders.q-error"], urns["shop-orders-error"],
            urns["shop-permissions-rabbitmq-retry-shovel"]} <= set(error_shovel.dependencies)
    assert of_type(resources, PERMISSIONS)["shop-permissions-rabbitmq-retry-shovel"].inputs["user"] == SHOVEL_USER


def test_the_shovel_uris_are_secrets():
    resources = record(lambda: Vhost("shop", {"vhost": moving(), "shovel_access": ShovelAccess(
        SHOVEL_USER, "pa ss/word")}))
    info = of_type(resources, SHOVEL)["shop-shovel-orders-to-quorum"].inputs["info"]
    assert "pa ss" not in repr(info) and "word" not in repr(info)


def test_every_queue_of_a_migration_keeps_its_guard_hook():
    queues = of_type(record_moving(), QUEUE)
    assert queues and all(r.hooks.get("before_delete") for r in queues.values())


def test_a_vhost_that_moves_a_queue_needs_the_shovel_access():
    with pytest.raises(ConfigError) as error:
        record(lambda: Vhost("shop", {"vhost": moving()}))
    assert error.value.problems[0][0] == "Vhost(shop).shovel_access"


def test_step_move_registers_every_resource_of_the_old_queue_with_the_urn_and_inputs_it_had():
    """All but its application binding, which the user moved to the successor."""
    old = {r.urn: r.inputs for r in record(lambda: Vhost("shop", {"vhost": before()}))
           if r.name.startswith("shop-orders") and "binding-orders-events" not in r.name}
    new = {r.urn: r.inputs for r in record_moving() if r.urn in old}
    assert len(old) > 10 and new == old


def test_a_copy_of_the_config_is_not_changed_by_planning():
    config = moving()
    snapshot = copy.deepcopy(config)
    plan(config)
    assert config == snapshot


# --- preview-time checks --------------------------------------------------------------------------------------


def test_the_planned_shovels_pass_the_checks_and_a_lossy_or_dangling_one_does_not():
    from components.plan.checks import (
        SHOVEL_ACK_MODE,
        SHOVEL_DELETES_ITSELF,
        SHOVEL_NOT_GRANTED,
        SHOVEL_QUEUE_NOT_PLANNED,
        check_vhost,
    )

    vhost = plan(moving())
    assert check_vhost(vhost) == []
    [migration] = vhost.migrations
    lossy = dataclasses.replace(migration.shovels[0], ack_mode="no-ack", source_delete_after="queue-length",
                                destination="orders.z")
    broken = dataclasses.replace(vhost, migrations=(dataclasses.replace(migration, shovels=(lossy,)),))
    found = check_vhost(broken)
    assert [p.code for p in found] == [SHOVEL_QUEUE_NOT_PLANNED, SHOVEL_ACK_MODE, SHOVEL_DELETES_ITSELF,
                                       SHOVEL_NOT_GRANTED]
    assert [p.message.split(": ", 1)[1].split(";")[0] for p in found] == [
        'its destination queue "orders.z" is not planned in this vhost',
        "ack-mode no-ack can lose messages",
        "src-delete-after queue-length may delete the shovel before its source is drained (rabbitmq-server#14636)",
        f'its user "{SHOVEL_USER}" may not read "orders" or declare "orders.z"']


def test_the_contracts_during_a_move_are_valid_for_the_schema_and_the_client():
    from jsonschema import Draft202012Validator

    from rabbitmq_retry_client import contract as client

    validator = Draft202012Validator(client.SCHEMA)
    for retryable in plan(moving()).retryables:
        contract = retryable.contract("shop")
        assert list(validator.iter_errors(contract)) == []
        assert client.validate(contract) == contract
    broken = {**plan(moving()).retryables[0].contract("shop"), "migration": {"name": "x", "step": "drain"}}
    assert list(validator.iter_errors(broken))


# --- the program (stack level) --------------------------------------------------------------------------------


def write_stack(root: Any, vhost: dict[str, Any], stack: str = "mig", **top: Any) -> None:
    import yaml

    config = {"rabbitmq-retry:vhosts": [vhost], **{f"rabbitmq-retry:{k}": v for k, v in top.items()}}
    (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))


def test_two_stacks_migrating_on_one_broker_connect_as_shovel_users_of_their_own(program_copy):
    """Users are broker-wide: a shared one would have each stack's `pulumi up` overwrite the other's password, and
    the first stack to finish its migrations delete the user the other's shovels still use."""
    from tools.lib.mockrun import record_program

    users = {}
    for stack in ("orders-prod", "billing-prod"):
        write_stack(program_copy, moving(), stack=stack)
        resources = record_program(stack, program_copy, reveal_secrets=True)
        [user] = [r for r in resources if r.type == "rabbitmq:index/user:User"]
        permissions = of_type(resources, PERMISSIONS)["shop-permissions-rabbitmq-retry-shovel"]
        uri = of_type(resources, SHOVEL)["shop-shovel-orders-to-quorum"].inputs["info"]["sourceUri"]
        assert permissions.inputs["user"] == user.inputs["name"] and uri.startswith(f"amqp://{user.inputs['name']}:")
        assert user.name == "user-rabbitmq-retry-shovel"  # one logical name: a stack has one shovel user
        users[stack] = user.inputs["name"]
    assert users == {"orders-prod": "rabbitmq-retry-shovel.rabbitmq-retry.orders-prod",
                     "billing-prod": "rabbitmq-retry-shovel.rabbitmq-retry.billing-prod"}


def test_the_shovel_user_is_named_after_the_project_and_the_stack_and_passed_into_the_plan():
    assert naming.shovel_user("shop", "prod") == "rabbitmq-retry-shovel.shop.prod"
    first, second = plan(moving(), naming.shovel_user("shop", "prod")), plan(moving(), naming.shovel_user("shop", "qa"))
    assert {s.user for s in first.shovels} == {first.shovel_permissions[0].user} == {"rabbitmq-retry-shovel.shop.prod"}
    assert second.shovel_permissions[0].user == "rabbitmq-retry-shovel.shop.qa"
    # The same logical keys (a stack has one shovel user): only the user's name differs.
    assert first.shovel_permissions[0].key == second.shovel_permissions[0].key
    with pytest.raises(ValueError, match="shovel user"):
        plan_vhost(load_vhost(moving(), "vhosts[0]"), "vhosts[0]")
    assert plan_vhost(load_vhost(moving("retire"), "vhosts[0]"), "vhosts[0]").shovels == ()


def test_the_program_registers_one_shovel_user_for_the_stack_and_the_amqp_port_in_the_uris(program_copy):
    from tools.lib.mockrun import record_program

    write_stack(program_copy, moving(), amqp_port=5673)  # a preview: the password is a placeholder
    resources = record_program("mig", program_copy, reveal_secrets=True)
    [user] = [r for r in resources if r.type == "rabbitmq:index/user:User"]
    assert (user.name, user.inputs["name"], user.inputs["tags"]) == ("user-rabbitmq-retry-shovel",
                                                                       "rabbitmq-retry-shovel.rabbitmq-retry.mig", [])
    assert "rabbitmq-retry:index:Vhost" not in user.urn  # the stack's, not a vhost's
    shovel = of_type(resources, SHOVEL)["shop-shovel-orders-to-quorum"]
    assert re.fullmatch(r"amqp://rabbitmq-retry-shovel\.rabbitmq-retry\.mig:[^@:/]+@localhost:5673/shop",
                        shovel.inputs["info"]["sourceUri"])
    permissions = of_type(resources, PERMISSIONS)["shop-permissions-rabbitmq-retry-shovel"]
    assert permissions.inputs["user"] == "rabbitmq-retry-shovel.rabbitmq-retry.mig"


def test_pulumi_up_refuses_a_move_without_the_shovel_users_password(program_copy):
    from tools.lib.mockrun import record_program

    write_stack(program_copy, moving())
    with pytest.raises(Exception) as error:
        record_program("mig", program_copy, preview=False)
    assert ("vhosts[shop].migrations[orders-to-quorum]", "no password for the stack's shovel user, which this "
            "migration's shovels connect as: `pulumi config set --secret --path "
            "'rabbitmq-retry:passwords.rabbitmq-retry-shovel' <password>`") in error.value.problems  # type: ignore


def test_step_retire_registers_no_shovel_user_and_binds_the_successor_for_stragglers(program_copy):
    from tools.lib.mockrun import record_program

    config = levels_vhost("1h")
    config["queues"] = [{"name": "jobs.q", "retry": {"strategy": "levels", "max_retries": 3}}]
    config["migrations"] = [{"name": "jobs-renamed", "move": {"from": "jobs", "to": "jobs.q"}, "step": "retire"}]
    write_stack(program_copy, config)
    resources = record_program("mig", program_copy)
    assert not [r for r in resources if r.type in ("rabbitmq:index/user:User", SHOVEL)]
    binding = of_type(resources, "rabbitmq:index/binding:Binding")["shop-migration-jobs-renamed-delivery-binding"]
    assert (binding.inputs["source"], binding.inputs["destination"], binding.inputs["routingKey"]) == (
        naming.DELIVERY_EXCHANGE, "jobs.q", naming.delivery_pattern("jobs"))
