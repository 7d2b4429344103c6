"""The mirror fails where `pulumi up` would fail, and converges where it would converge."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pulumi_rabbitmq as rabbitmq
import pytest

from tests.support.amqp import channel, message_count
from tests.support.mirror import Broker, MirrorError, apply, apply_update, call, destroy, esc, get, read_back
from tools.lib.mockrun import Registered, record

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

CONFIG: dict[str, Any] = {
    "exchanges": [{"name": "orders", "type": "topic"}],
    "queues": [
        {"name": "billing", "type": "quorum", "bindings": [{"exchange": "orders", "routing_key": "order.#"}],
         "retry": {"delays": ["1s", "10s"], "error_retention": "1h"}},
        {"name": "audit", "type": "classic", "bindings": [{"exchange": "orders", "routing_key": "#"}],
         "max_length": 1000},
    ],
}


def _raw(vhost: str, **queue: Any) -> Callable[[], None]:
    """A VHost and one Queue declared with pulumi_rabbitmq directly, bypassing the components."""
    def program() -> None:
        created = rabbitmq.VHost("v", name=vhost)
        rabbitmq.Queue("q", name="q", vhost=created.name, settings=rabbitmq.QueueSettingsArgs(**queue))
    return program


def _raw_policy(vhost: str, definition: dict[str, str]) -> list[Registered]:
    def program() -> None:
        created = rabbitmq.VHost("v", name=vhost)
        rabbitmq.Policy("p", name="p", vhost=created.name, policy=rabbitmq.PolicyPolicyArgs(
            pattern="^q$", priority=1, apply_to="queues", definition=definition))
    return record(program)


@pytest.mark.parametrize("ttl", ["60000", 60000], ids=["string", "python-int"])
def test_string_typed_queue_argument_is_refused_like_pulumi_up(broker: Broker, vhost: str, ttl: Any) -> None:
    # `settings.arguments` is map<string>: the bridge stringifies a Python int, so both fail alike.
    resources = record(_raw(vhost, durable=True, arguments={"x-queue-type": "classic", "x-message-ttl": ttl}))
    with pytest.raises(MirrorError) as failure:
        apply(broker, resources)
    assert failure.value.status == 400
    assert "x-message-ttl" in failure.value.reason
    assert str(failure.value).startswith("Error 400 (bad_request): ")
    assert get(broker, f"queues/{esc(vhost)}/q") is None


def test_typed_argument_through_arguments_json_is_accepted(broker: Broker, vhost: str) -> None:
    resources = record(_raw(vhost, durable=True, arguments_json='{"x-queue-type": "classic", "x-message-ttl": 60000}'))
    apply(broker, resources)
    assert get(broker, f"queues/{esc(vhost)}/q")["arguments"]["x-message-ttl"] == 60000
    assert read_back(broker, resources) == []


def test_non_durable_quorum_queue_is_refused(broker: Broker, vhost: str) -> None:
    # `durable` left unset: the provider's default is false.
    resources = record(_raw(vhost, arguments_json='{"x-queue-type": "quorum"}'))
    with pytest.raises(MirrorError) as failure:
        apply(broker, resources)
    assert failure.value.status == 400
    assert "durable" in failure.value.reason
    print(f"\n[{broker.name}] {failure.value}")


def test_apply_twice_is_a_no_op(broker: Broker, deploy: Deployer) -> None:
    first = deploy(CONFIG)
    assert read_back(broker, first.resources) == []
    before = call(broker, "GET", f"definitions/{esc(first.vhost)}")[1]
    apply(broker, first.resources)  # every PUT is idempotent and the binding POSTs land on the same keys
    again = deploy.update(first, CONFIG)
    assert {s.op for s in again.steps} == {"same"}
    assert read_back(broker, again.resources) == []
    after = call(broker, "GET", f"definitions/{esc(first.vhost)}")[1]
    for kind in ("queues", "exchanges", "bindings", "policies"):
        assert _sorted(after[kind]) == _sorted(before[kind]), kind


def _sorted(items: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(item.items())) for item in items)


def test_deleting_what_is_missing_succeeds(broker: Broker, vhost: str, deploy: Deployer) -> None:
    deployment = deploy(CONFIG)
    call(broker, "DELETE", f"queues/{esc(vhost)}/audit")
    assert any("audit" in line and "gone" in line for line in read_back(broker, deployment.resources))
    destroy(broker, deployment.resources)  # the audit queue and its binding are already gone: 404 = success
    assert get(broker, f"vhosts/{esc(vhost)}") is None
    destroy(broker, deployment.resources)  # everything is gone now, vhost included


def test_policy_definition_digits_become_integers_and_007_never_converges(broker: Broker, vhost: str) -> None:
    resources = _raw_policy(vhost, {"max-length": "007", "dead-letter-exchange": "dlx", "message-ttl": "1000"})
    apply(broker, resources)
    definition = get(broker, f"policies/{esc(vhost)}/p")["definition"]
    assert definition == {"max-length": 7, "dead-letter-exchange": "dlx", "message-ttl": 1000}
    differences = read_back(broker, resources)
    assert len(differences) == 1
    assert "policy.definition.max-length" in differences[0] and "update in place" in differences[0]


def test_policy_update_is_a_put_in_place(broker: Broker, vhost: str) -> None:
    old = _raw_policy(vhost, {"message-ttl": "1000"})
    apply(broker, old)
    steps = apply_update(broker, old, _raw_policy(vhost, {"message-ttl": "2000"}))
    assert [s.op for s in steps if s.op != "same"] == ["update"]
    assert get(broker, f"policies/{esc(vhost)}/p")["definition"] == {"message-ttl": 2000}


def test_replaced_queue_loses_its_messages(broker: Broker, vhost: str) -> None:
    old = record(_raw(vhost, durable=True, arguments_json='{"x-queue-type": "classic"}'))
    apply(broker, old)
    with channel(broker, vhost) as opened:
        opened.basic_publish("", "q", b"kept?")
        assert message_count(opened, "q") == 1
        new = record(_raw(vhost, durable=True, arguments_json='{"x-queue-type": "quorum"}'))
        steps = apply_update(broker, old, new)
        assert [(s.op, s.delete_before_replace) for s in steps if s.op != "same"] == [("replace", True)]
        assert message_count(opened, "q") == 0


def _access(vhost: str, user: str, generation: int) -> list[Registered]:
    """VHost with limits, User, Permissions, TopicPermissions and OperatorPolicy: the in-place kinds."""
    def program() -> None:
        created = rabbitmq.VHost("v", name=vhost, description=f"gen {generation}", max_queues=str(100 + generation))
        account = rabbitmq.User("u", name=user, password=f"secret-{generation}",
                                tags=["management"] if generation else [])
        rabbitmq.Permissions("p", user=account.name, vhost=created.name,
                             permissions=rabbitmq.PermissionsPermissionsArgs(
                                 configure="^$", write=f"^w{generation}$", read=".*"))
        rabbitmq.TopicPermissions("t", user=account.name, vhost=created.name, permissions=[
            rabbitmq.TopicPermissionsPermissionArgs(exchange="amq.topic", write=f"^k{generation}$", read=".*")])
        rabbitmq.OperatorPolicy("o", name="cap", vhost=created.name, policy=rabbitmq.OperatorPolicyPolicyArgs(
            pattern=".*", priority=1, apply_to="queues", definition={"max-length": str(1000 + generation)}))
    return record(program)


def test_access_resources_apply_update_in_place_and_read_back_clean(broker: Broker, vhost: str) -> None:
    user = f"{vhost}-user"
    try:
        first = _access(vhost, user, 0)
        apply(broker, first)
        assert read_back(broker, first) == []
        assert get(broker, f"operator-policies/{esc(vhost)}/cap")["definition"] == {"max-length": 1000}
        second = _access(vhost, user, 1)
        steps = apply_update(broker, first, second)
        assert sorted(s.name for s in steps if s.op == "update") == ["o", "p", "t", "u", "v"]
        assert not [s for s in steps if s.op in ("replace", "create", "delete")]
        assert read_back(broker, second) == []
        assert get(broker, f"vhost-limits/{esc(vhost)}")[0]["value"] == {"max-queues": 101}
        assert get(broker, f"permissions/{esc(vhost)}/{esc(user)}")["write"] == "^w1$"
        assert [p["write"] for p in get(broker, f"topic-permissions/{esc(vhost)}/{esc(user)}")] == ["^k1$"]
        assert read_back(broker, first) != []  # the old program would be updated back
        destroy(broker, second)
        assert get(broker, f"users/{esc(user)}") is None
    finally:
        call(broker, "DELETE", f"users/{esc(user)}")
