"""The components under Pulumi's mocks: every plan entry becomes exactly one resource with exact inputs."""

from __future__ import annotations

import json

import pytest

from components import ConfigError, RetryableQueue, Vhost
from components.config.load import load_vhost
from components.plan import layout
from components.plan.planner import plan_vhost
from components.pulumi.resources import BUILDERS, ShovelAccess
from tests.conftest import RETRYABLE, of_type, record_vhost, vhost_config
from tests.support.problems import problems_of
from tools.lib.mockrun import Registered, record

QUEUE = "rabbitmq:index/queue:Queue"
EXCHANGE = "rabbitmq:index/exchange:Exchange"
BINDING = "rabbitmq:index/binding:Binding"
POLICY = "rabbitmq:index/policy:Policy"
VHOST = "rabbitmq:index/vHost:VHost"


def test_every_plan_entry_is_registered_once_with_exact_inputs():
    raw = vhost_config()
    plan = plan_vhost(load_vhost(raw, "v"))
    resources = record_vhost(raw)
    queues, exchanges = of_type(resources, QUEUE), of_type(resources, EXCHANGE)
    expected_queues = [*plan.queues, *(q for r in plan.retryables for q in r.queues)]
    assert len(queues) == len(expected_queues)
    for queue in expected_queues:
        owner = "shop" if queue.role == "plain" else "shop-orders"
        registered = queues[f"{owner}-{queue.key}"]
        assert registered.inputs == {
            "name": queue.name, "vhost": "shop",
            "settings": {"durable": True, "autoDelete": False, "argumentsJson": queue.arguments_json},
        }
        assert json.loads(registered.inputs["settings"]["argumentsJson"])["x-queue-type"] == "quorum"
    expected_exchanges = [*plan.exchanges, *(e for r in plan.retryables for e in r.exchanges)]
    assert {(r.inputs["name"], r.inputs["settings"]["type"], r.inputs["settings"]["durable"])
            for r in exchanges.values()} == {(e.name, e.type, True) for e in expected_exchanges}
    assert len(exchanges) == len(expected_exchanges)


def test_typed_arguments_reach_the_provider_as_json_numbers():
    raw = vhost_config(exchanges=[{"name": "h", "type": "headers"}],
                       queues=[{"name": "q", "bindings": [{"exchange": "h", "arguments": {"x-match": "all", "n": 3}}]}])
    (binding,) = of_type(record_vhost(raw), BINDING).values()
    assert json.loads(binding.inputs["argumentsJson"]) == {"n": 3, "x-match": "all"}
    assert "arguments" not in binding.inputs


def test_policies_carry_anchored_patterns_and_string_values():
    policies = of_type(record_vhost(), POLICY)
    wait_2 = policies["shop-orders-wait-2-policy"].inputs
    assert wait_2 == {"name": "orders.wait.2", "vhost": "shop", "policy": {
        "pattern": r"^orders\.wait\.2$", "priority": 10, "applyTo": "queues", "definition": {"message-ttl": "10000"}}}
    # 20 plus max_retries (5): on RabbitMQ 4 every retry counts toward the limit.
    assert policies["shop-orders-policy"].inputs["policy"]["definition"] == {"delivery-limit": "25"}


def test_bindings_wire_config_and_retry_paths():
    bindings = of_type(record_vhost(), BINDING)
    assert {(b.inputs["source"], b.inputs["destination"], b.inputs.get("routingKey")) for b in bindings.values()} == {
        ("events", "orders", "order.created"), ("events", "audit", "#"),
        ("orders.retry", "orders.wait.1", "wait.1"), ("orders.retry", "orders.wait.2", "wait.2"),
        ("orders.retry", "orders.wait.3", "wait.3"), ("orders.requeue", "orders", ""),
        ("orders.error", "orders.error", "")}
    assert all(b.inputs["destinationType"] == "queue" and b.inputs["vhost"] == "shop" for b in bindings.values())


def test_children_are_parented_and_named_after_their_component():
    resources = record_vhost()
    by_urn = {r.urn: r for r in resources}
    for r in resources:
        if r.type in ("pulumi:pulumi:Stack", "rabbitmq-retry:index:Vhost"):
            continue
        parent = by_urn[r.parent]
        assert r.name.startswith(f"{parent.name}-"), (r.urn, parent.urn)
    assert {by_urn[r.parent].type for r in resources if r.type == "rabbitmq-retry:index:RetryableQueue"} == {
        "rabbitmq-retry:index:Vhost"}


def test_wait_queues_are_created_after_their_ttl_policy():
    resources = record_vhost()
    policies = {r.inputs["name"]: r.urn for r in of_type(resources, POLICY).values()}
    queues = {r.inputs["name"]: r for r in of_type(resources, QUEUE).values()}
    # One wait queue per delay of RETRYABLE, named: a renamed or missing wait queue fails here instead of
    # leaving nothing to check.
    assert len(RETRYABLE["retry"]["delays"]) == 3
    for wait in ("orders.wait.1", "orders.wait.2", "orders.wait.3"):
        assert policies[wait] in queues[wait].dependencies, wait


def test_protect_reaches_every_queue_and_the_vhost_only():
    resources = record_vhost(protect_queues=True, retain_error_queues=True)
    protected = {r.type for r in resources if r.protect}
    assert protected == {QUEUE, VHOST}
    assert all(r.protect for r in of_type(resources, QUEUE).values())
    retained = [r.inputs["name"] for r in resources if r.retain_on_delete]
    assert retained == ["orders.error"]


def test_nothing_is_protected_by_default():
    assert not any(r.protect or r.retain_on_delete for r in record_vhost())


def test_an_existing_vhost_is_referenced_not_created():
    resources = record_vhost(vhost_config(name="/"))
    assert not of_type(resources, VHOST)
    assert {r.inputs["vhost"] for r in of_type(resources, QUEUE).values()} == {"/"}


def test_outputs_publish_the_retry_contract():
    resources = record_vhost()
    (vhost,) = [r for r in resources if r.type == "rabbitmq-retry:index:Vhost"]
    (retryable,) = [r for r in resources if r.type == "rabbitmq-retry:index:RetryableQueue"]
    contract = vhost.outputs["retry_contracts"]["orders"]
    assert contract["retry_exchange"] == "orders.retry" and contract["error_queue"] == "orders.error"
    assert [t["delay_ms"] for t in contract["tiers"]] == [1000, 10000, 60000]
    assert retryable.outputs["contract"] == contract
    assert retryable.outputs["wait_queues"] == ["orders.wait.1", "orders.wait.2", "orders.wait.3"]
    assert retryable.outputs["queue_name"] == "orders" and retryable.outputs["error_exchange"] == "orders.error"
    assert vhost.outputs["queues"] == ["audit", "orders", "orders.wait.1", "orders.wait.2", "orders.wait.3",
                                       "orders.error"]


def test_retryable_queue_can_be_used_on_its_own():
    resources = record(lambda: RetryableQueue("billing", {
        "vhost": "payments", "queue": {"name": "billing", "type": "classic", "retry": {"delays": ["5s", "1m"]}}}))
    names = sorted(r.name for r in resources if r.custom)
    assert names == sorted(["billing-input", "billing-wait-1", "billing-wait-2", "billing-error",
                            "billing-retry-exchange", "billing-requeue-exchange", "billing-error-exchange",
                            "billing-wait-1-binding", "billing-wait-2-binding", "billing-requeue-binding",
                            "billing-error-binding", "billing-wait-1-policy", "billing-wait-2-policy",
                            # Used on its own, it guards its path itself (docs/guard.md).
                            "billing-path-guard", "billing-removal-guard"])


def test_a_standalone_component_reports_config_errors_with_their_path():
    with pytest.raises(ConfigError) as error:
        RetryableQueue("billing", {"vhost": "v", "queue": {"name": "billing", "retry": {"delays": ["soon"]}}})
    assert error.value.problems == [
        ("RetryableQueue(billing).queue.retry.delays[0]",
         '"soon" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)')]


def test_the_retry_block_is_required_for_a_retryable_queue():
    plain = {key: value for key, value in RETRYABLE.items() if key != "retry"}
    with pytest.raises(ConfigError) as error:
        RetryableQueue("q", {"vhost": "v", "queue": plain})
    assert error.value.problems == [
        ("RetryableQueue(q).queue.retry", "missing; a retryable queue needs retry.delays, e.g. [1s, 10s]")]


# --- one layout ----------------------------------------------------------------------------------------

EVERY_KIND = vhost_config(
    name="every-kind",
    policies=[{"name": "lazy", "pattern": "^archive$", "definition": {"max-length": 100}}],
    operator_policies=[{"name": "cap", "pattern": ".*", "definition": {"max-length": 1000}}],
    queues=[{**RETRYABLE, "max_length": 10, "retry": {**RETRYABLE["retry"], "error_retention": "168h"}},
            {"name": "audit", "max_length": 5,
             "bindings": [{"exchange": "events", "routing_key": "#"}, {"exchange": "amq.topic", "external": True}]},
            {"name": "payments", "bindings": [{"exchange": "events", "routing_key": "payment.#"}],
             "retry": {"strategy": "levels", "max_retries": 3}}, {"name": "old-audit"}, {"name": "old-audit.q"}],
    applications=[{"user": "app", "consumes": ["orders", "payments"], "publishes": ["events"],
                   "topic_permissions": [{"exchange": "events", "write": ".*"}], "limits": {"max_connections": 10}}],
    migrations=[{"name": "audit-renamed", "move": {"from": "old-audit", "to": "old-audit.q"}, "step": "move"}])


def chain_and_name(resource: Registered) -> tuple[str, str, str]:
    """(parent type chain, kind, logical name), as `layout.logical_names` lists them."""
    types = resource.urn.split("::")[2].split("$")
    return "$".join(t.rsplit(":", 1)[-1] for t in types[:-1]), types[-1].rsplit(":", 1)[-1], resource.name


def test_the_components_register_exactly_the_layout():
    """What the URN clash check (`layout.logical_names`) sees is what the components register: no more, no less."""
    user = "rabbitmq-retry-shovel.x.y"
    resources = record(lambda: Vhost("every-kind", {"vhost": EVERY_KIND, "passwords": {"app": "pw"},
                                                    "shovel_access": ShovelAccess(user, "pw")}))
    expected = layout.logical_names("every-kind", plan_vhost(load_vhost(EVERY_KIND, "v"), "v", user))
    assert sorted(chain_and_name(r) for r in resources if r.type != "pulumi:pulumi:Stack") == sorted(expected)
    # The config reaches every row of every table, so no row goes unchecked.
    assert {kind for _, kind, _ in expected} == {slot.kind for table in (layout.VHOST, *layout.NESTED.values())
                                                 for slot in table} | {"Vhost"}


def test_every_kind_of_the_layout_has_one_builder():
    kinds = [slot.kind for table in (layout.VHOST, *layout.NESTED.values()) for slot in table]
    # The Vhost declares its path guards (Stash) itself, around the other children.
    assert set(kinds) == set(BUILDERS) | set(layout.NESTED) | {"Stash"}


# --- args are as strict as the stack file ----------------------------------------------------------------

BILLING = {"name": "billing", "retry": {"delays": ["5s"]}}


def test_an_unknown_key_is_an_error_not_ignored():
    """`protect` is the stack file's key; here it would have left every queue unprotected."""
    assert problems_of(lambda: RetryableQueue("billing", {"vhost": "v", "queue": BILLING, "protect": True})) == [
        ("RetryableQueue(billing).protect", "unknown key (allowed: delay_levels, plan, protect_queues, queue, "
                                            "retain_error_queues, vhost)")]
    assert problems_of(lambda: Vhost("shop", {"vhost": vhost_config(), "protect": True})) == [
        ("Vhost(shop).protect",
         "unknown key (allowed: config_path, passwords, plan, protect_queues, retain_error_queues, shovel_access, "
         "vhost)")]


def test_the_old_option_name_is_refused_with_the_new_one():
    assert problems_of(lambda: RetryableQueue("billing", {"vhost": "v", "queue": BILLING,
                                                          "retain_error_queue": True})) == [
        ("RetryableQueue(billing).retain_error_queue", "renamed to retain_error_queues")]


@pytest.mark.parametrize("missing", ["vhost", "queue"])
def test_a_missing_required_key_is_named(missing):
    args = {key: value for key, value in {"vhost": "v", "queue": BILLING}.items() if key != missing}
    ((path, message),) = problems_of(lambda: RetryableQueue("billing", args))
    assert path == f"RetryableQueue(billing).{missing}" and message.startswith("missing; ")


def test_a_vhost_component_needs_its_vhost():
    ((path, message),) = problems_of(lambda: Vhost("shop", {"protect_queues": True}))
    assert path == "Vhost(shop).vhost" and message.startswith("missing; the vhost in the stack config's vhosts[] shape")


@pytest.mark.parametrize("option", ["protect_queues", "retain_error_queues"])
@pytest.mark.parametrize("value", ["yes", 1, None])
def test_options_are_booleans_on_both_components(option, value):
    expected = f"expected true or false, got {value!r}"
    assert problems_of(lambda: RetryableQueue("billing", {"vhost": "v", "queue": BILLING, option: value})) == [
        (f"RetryableQueue(billing).{option}", expected)]
    assert problems_of(lambda: Vhost("shop", {"vhost": vhost_config(), option: value})) == [
        (f"Vhost(shop).{option}", expected)]


def test_wrong_types_are_named_all_at_once():
    assert problems_of(lambda: RetryableQueue("billing", {"vhost": 3, "queue": ["billing"]})) == [
        ("RetryableQueue(billing).vhost", "expected a string or a pulumi Output, got int"),
        ("RetryableQueue(billing).queue", "expected a mapping in the stack config's queues[] shape, got list")]
    assert problems_of(lambda: Vhost("shop", {"vhost": vhost_config(), "passwords": ["pw"]})) == [
        ("Vhost(shop).passwords", "expected a mapping of application user to password, got list")]
    assert problems_of(lambda: RetryableQueue("billing", "billing")) == [
        ("RetryableQueue(billing)", "args must be a mapping of vhost, queue, plan, protect_queues, "
                                    "retain_error_queues, delay_levels; got str")]


def test_retain_error_queues_has_one_name_on_both_components():
    resources = record(lambda: RetryableQueue("billing", {"vhost": "v", "queue": BILLING, "protect_queues": True,
                                                          "retain_error_queues": True}))
    assert [r.inputs["name"] for r in resources if r.retain_on_delete] == ["billing.error"]
    assert all(r.protect for r in of_type(resources, QUEUE).values())


def every_strategy_vhost() -> dict:
    """The vhost of `tests/recordings/Pulumi.every.yaml`: every strategy, delay levels, users."""
    import yaml

    from tests.support.recordings import RECORDINGS

    stack = yaml.safe_load((RECORDINGS / "Pulumi.every.yaml").read_text(encoding="utf-8"))
    return stack["config"]["rabbitmq-retry:vhosts"][0]


def comparable(resources: list[Registered]) -> list[tuple[str, str, str]]:
    return sorted((r.urn, json.dumps(r.inputs, sort_keys=True), json.dumps(r.outputs, sort_keys=True))
                  for r in resources)


def test_a_vhost_given_its_plan_registers_it_without_planning_or_checking_again(monkeypatch):
    """One plan per program run: the stack plans and checks every vhost, and the components register it."""
    from components.plan import checks
    from components.plan import planner as plan
    from components.pulumi import vhost
    from components.strategies import STRATEGIES

    raw = every_strategy_vhost()
    passwords = {"billing-app": "pw", "parked-ops": "pw"}
    planned = plan_vhost(load_vhost(raw, "vhosts[0]"), "vhosts[0]")
    on_its_own = record(lambda: Vhost("shop", {"vhost": raw, "config_path": "vhosts[0]", "passwords": passwords}))

    def refuse(*args, **kwargs):
        raise AssertionError("planned or checked again")

    for module in (vhost, plan, checks):
        for name in ("plan_vhost", "plan_retryable", "check_vhost", "check_logical_names"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)
    for strategy in STRATEGIES.values():
        monkeypatch.setattr(strategy, "plan", refuse)
    given = record(lambda: Vhost("shop", {"plan": planned, "passwords": passwords}))
    assert comparable(given) == comparable(on_its_own)
    assert {r.type for r in given} >= {"rabbitmq-retry:index:RetryableQueue", "rabbitmq-retry:index:DelayLevels"}


def test_a_vhost_used_on_its_own_plans_each_retryable_queue_once(monkeypatch):
    from components.strategies import STRATEGIES

    planned: list[str] = []
    for strategy in STRATEGIES.values():
        def counting(queue, *args, _plan=strategy.plan, **kwargs):
            planned.append(queue.name)
            return _plan(queue, *args, **kwargs)

        monkeypatch.setattr(strategy, "plan", counting)
    raw = every_strategy_vhost()
    record(lambda: Vhost("shop", {"vhost": raw, "passwords": {"billing-app": "pw", "parked-ops": "pw"}}))
    retryable = [q["name"] for q in raw["queues"] if "retry" in q]
    assert len(retryable) >= 3 and sorted(planned) == sorted(retryable)
