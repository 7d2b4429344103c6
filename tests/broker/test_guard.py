"""The queue guard's logic on real brokers (3.10.8 and 4.3.6): what `components/pulumi/guard.py`'s before-delete hook
decides, from what `rabbitmq_retry_client/depth.py` reads, for each way a queue can hold messages.

The engine calling the hook cannot run here (no Pulumi CLI); these tests call the hook's own code, the way the
engine's callback does (`guard_queue_delete` with the `ResourceHookArgs` of a queue), or its decision directly.
Each test runs in a vhost of its own, `guard-<random>`, deleted afterwards.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest
from pulumi.runtime.config import set_all_config

from components.pulumi.guard import QUEUE_GUARD, GuardError, check_queue_delete, guard_queue_delete, queue_key
from rabbitmq_retry_client.depth import BrokerAccess, DepthReader, QueueDepth
from tests.support.admin import STATS_S, version, wait_for
from tests.support.amqp import channel, parameters
from tests.support.deploy import Deployer
from tests.support.mirror import Broker, call, esc, get
from tools.lib.mockrun import Registered

QUORUM_JAMMED = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
                 "x-dead-letter-exchange": "guard-missing-exchange"}
"""A quorum queue that dead-letters at-least-once to an exchange that does not exist: what it dead-letters stays
with its dead-letter worker (`messages_dlx`), retried, neither delivered nor dropped."""


@pytest.fixture
def guard_vhost(broker: Broker) -> Iterator[str]:
    name = f"guard-{uuid.uuid4().hex[:10]}"
    call(broker, "PUT", f"vhosts/{esc(name)}", {})
    try:
        yield name
    finally:
        call(broker, "DELETE", f"vhosts/{esc(name)}")


def reader(broker: Broker) -> DepthReader:
    """As the hook reads: the management endpoint and credentials only; the AMQP port from /api/overview."""
    return DepthReader(BrokerAccess(broker.management_url, broker.username, broker.password))


def declare(broker: Broker, vhost: str, queue: str, messages: int = 0, arguments: dict[str, str] | None = None) -> None:
    with channel(broker, vhost) as opened:
        opened.queue_declare(queue, durable=True, arguments=arguments or {"x-queue-type": "classic"})
        for i in range(messages):
            opened.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)


def refusal_of(broker: Broker, vhost: str, queue: str, allowed: frozenset[str] = frozenset()) -> str | None:
    try:
        check_queue_delete(vhost, queue, reader(broker).read, allowed, warn=lambda _: None)
    except GuardError as error:
        return str(error)
    return None


def reject_each(broker: Broker, vhost: str, queue: str, count: int, requeue: bool) -> None:
    """Take `count` messages of the queue and reject each (dead-lettered, or with requeue back to the queue)."""
    with channel(broker, vhost, confirms=False) as opened:
        for _ in range(count):
            method, _, _ = opened.basic_get(queue)
            assert method is not None
            opened.basic_reject(method.delivery_tag, requeue=requeue)


def read_until(broker: Broker, vhost: str, queue: str, expected: dict[str, int]) -> QueueDepth:
    """The management API's counts are sampled: read until they report `expected` (an eventual condition)."""
    def check() -> QueueDepth | None:
        depth = reader(broker).read(vhost, queue)
        assert depth is not None
        return depth if all(getattr(depth, key) == value for key, value in expected.items()) else None
    return wait_for(check, STATS_S, f"{queue} to report {expected}", interval=0.5)


def test_a_classic_queue_with_ready_messages_is_refused_and_left_as_it_was(broker: Broker, guard_vhost: str):
    declare(broker, guard_vhost, "orders", messages=3)
    refused = refusal_of(broker, guard_vhost, "orders")
    assert refused is not None
    assert f'queue "orders" in vhost "{guard_vhost}"' in refused and "3 messages (3 ready, 0 unacknowledged" in refused
    assert "Drain it first" in refused and f'"{guard_vhost}/orders"' in refused and "delete_with_messages" in refused
    with channel(broker, guard_vhost, confirms=False) as opened:
        assert opened.queue_declare("orders", passive=True).method.message_count == 3


def test_a_queue_whose_consumer_holds_unacknowledged_messages_is_refused(broker: Broker, guard_vhost: str):
    declare(broker, guard_vhost, "orders", messages=2)
    with pika.BlockingConnection(parameters(broker, guard_vhost)) as connection:
        held = connection.channel()
        held.basic_qos(prefetch_count=10)
        held.basic_consume("orders", lambda *_: None, auto_ack=False)
        connection.process_data_events(time_limit=0.5)
        depth = read_until(broker, guard_vhost, "orders", {"ready": 0, "unacknowledged": 2})
        assert depth.consumers == 1
        refused = refusal_of(broker, guard_vhost, "orders")
    assert refused is not None and "2 messages (0 ready, 2 unacknowledged (1 consumer)" in refused


def test_a_quorum_queue_with_pending_dead_letters_is_refused(broker: Broker, guard_vhost: str):
    declare(broker, guard_vhost, "payments", messages=2, arguments=QUORUM_JAMMED)
    reject_each(broker, guard_vhost, "payments", 2, requeue=False)
    depth = read_until(broker, guard_vhost, "payments", {"ready": 0, "unacknowledged": 0, "dead_letters": 2})
    assert depth.queue_type == "quorum"
    refused = refusal_of(broker, guard_vhost, "payments")
    assert refused is not None and "2 messages (0 ready, 0 unacknowledged, 2 pending dead letters)" in refused


def test_a_quorum_queue_with_messages_waiting_for_a_native_delayed_retry_is_refused(broker: Broker, guard_vhost: str):
    """4.3: rejected messages waiting for their delayed retry are not in the passive declare's count; the guard
    counts them from the queue's record (`messages_delayed`, sampled: read until it reports them)."""
    if version(broker) < (4, 3, 1):
        pytest.skip(f"{broker.name} predates RabbitMQ 4.3.1's delayed retry")
    declare(broker, guard_vhost, "native", messages=2, arguments={
        "x-queue-type": "quorum", "x-delayed-retry-type": "all", "x-delayed-retry-min": 60000,
        "x-delayed-retry-max": 60000})
    reject_each(broker, guard_vhost, "native", 2, requeue=True)
    depth = read_until(broker, guard_vhost, "native", {"ready": 0, "unacknowledged": 0, "delayed": 2})
    assert depth.messages == 2
    refused = refusal_of(broker, guard_vhost, "native")
    assert refused is not None and "2 messages (0 ready, 0 unacknowledged, 0 pending dead letters, 2 waiting for " \
        "a delayed retry)" in refused


def test_an_empty_or_missing_queue_may_be_deleted_and_reading_creates_nothing(broker: Broker, guard_vhost: str):
    declare(broker, guard_vhost, "empty", arguments={"x-queue-type": "quorum"})
    assert refusal_of(broker, guard_vhost, "empty") is None
    assert refusal_of(broker, guard_vhost, "never-declared") is None
    assert get(broker, f"queues/{esc(guard_vhost)}/never-declared") is None
    assert refusal_of(broker, f"{guard_vhost}-missing", "orders") is None  # its vhost is gone, and it with it
    assert get(broker, f"vhosts/{esc(guard_vhost)}-missing") is None


def test_the_escape_hatch_lets_a_listed_queue_go_with_its_messages_and_only_that_one(broker: Broker,
                                                                                       guard_vhost: str):
    declare(broker, guard_vhost, "orders", messages=1)
    declare(broker, guard_vhost, "invoices", messages=1)
    allowed = frozenset({queue_key(guard_vhost, "orders")})
    warnings: list[str] = []
    check_queue_delete(guard_vhost, "orders", reader(broker).read, allowed, warn=warnings.append)
    assert len(warnings) == 1 and "1 messages (1 ready" in warnings[0] and "delete_with_messages" in warnings[0]
    assert refusal_of(broker, guard_vhost, "invoices", allowed) is not None


def test_an_unreachable_broker_is_refused_unless_the_queue_is_listed(broker: Broker):
    for access in (BrokerAccess("http://127.0.0.1:1", broker.username, broker.password),  # management down
                   BrokerAccess(broker.management_url, broker.username, broker.password, amqp_port=1)):  # AMQP down
        with pytest.raises(GuardError, match=r'refusing to delete queue "orders" in vhost "shop": cannot prove it is '
                                             r"empty .*(refuses connections|Connection refused)"):
            check_queue_delete("shop", "orders", DepthReader(access).read, frozenset(), warn=lambda _: None)
        warnings: list[str] = []
        check_queue_delete("shop", "orders", DepthReader(access).read, frozenset({"shop/orders"}), warn=warnings.append)
        assert len(warnings) == 1 and "unread" in warnings[0]


@pytest.fixture
def provider_environment(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The provider's settings as `pulumi up` hands them over: environment variables, no stack config."""
    monkeypatch.setenv("RABBITMQ_ENDPOINT", broker.management_url)
    monkeypatch.setenv("RABBITMQ_USERNAME", broker.username)
    monkeypatch.setenv("RABBITMQ_PASSWORD", broker.password)
    set_all_config({}, [])
    try:
        yield
    finally:
        set_all_config({}, [])


def test_the_hook_reads_the_queue_the_engine_names_and_the_stack_config_waives_it(
        broker: Broker, guard_vhost: str, provider_environment: None):
    import pulumi

    declare(broker, guard_vhost, "orders", messages=4)
    args = pulumi.ResourceHookArgs(
        urn="urn:pulumi:dev::rabbitmq-retry::rabbitmq:index/queue:Queue::shop-orders", id=f"orders@{guard_vhost}",
        name="shop-orders", type="rabbitmq:index/queue:Queue",
        old_inputs={"name": "orders", "vhost": guard_vhost, "settings": {"durable": True}},
        old_outputs={"name": "orders", "vhost": guard_vhost, "id": f"orders@{guard_vhost}"})
    with pytest.raises(GuardError, match=r'queue "orders" in vhost "guard-\w+": it holds 4 messages'):
        guard_queue_delete(args)
    set_all_config({"rabbitmq-retry:delete_with_messages": json.dumps([f"{guard_vhost}/orders"])}, [])
    guard_queue_delete(args)
    set_all_config({"rabbitmq-retry:delete_with_messages": json.dumps(f"{guard_vhost}/orders")}, [])
    with pytest.raises(GuardError, match="expected a list"):
        guard_queue_delete(args)


def test_the_review_reads_what_each_deleted_or_replaced_queue_holds_now_and_creates_nothing(
        broker: Broker, guard_vhost: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tools.lib import engine
    from tools.lib.queue_guard import review_section

    declare(broker, guard_vhost, "orders", messages=3)
    declare(broker, guard_vhost, "orders.wait.1")
    steps = [engine.Step(op, f"urn:{name}", engine.QUEUE, name, {"name": name, "vhost": guard_vhost},
                         None if op == "delete" else {"name": name, "vhost": guard_vhost})
             for op, name in (("replace", "orders"), ("replace", "orders.wait.1"), ("delete", "never-declared"))]
    monkeypatch.delenv("RABBITMQ_USERNAME", raising=False)
    monkeypatch.setenv("RABBITMQ_PASSWORD", broker.password)
    section = review_section(steps, (), None, broker.client())
    lines = [line for line in section.markdown.splitlines() if line.startswith("- ")]
    assert lines == [f"- `{guard_vhost}` / `orders` (replace): holds **3** messages now (3 ready, 0 unacknowledged)",
                     "- 1 other queue holds no message now", "- 1 queue is not on the broker"]
    assert get(broker, f"queues/{esc(guard_vhost)}/never-declared") is None
    assert review_section(steps, (), None, None).markdown == ""


def test_a_replacement_applied_the_providers_way_stops_at_the_guard_and_goes_through_once_waived(
        broker: Broker, guard_vhost: str):
    """classic → quorum of a retryable queue holding 5 messages, applied as `pulumi up` would (tests/support/mirror.py),
    with the engine's part, running each deleted queue's before-delete hooks, done here: the guard stops the
    replacement before the queue is deleted, and the messages stay; listed in delete_with_messages, it goes through
    and they are lost."""
    deploy = Deployer(broker, guard_vhost)
    before = deploy({"queues": [{"name": "orders", "type": "classic", "retry": {"delays": ["1s"]}}]})
    with channel(broker, guard_vhost) as opened:
        for i in range(5):
            opened.basic_publish("", "orders", f"m{i}".encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)
    quorum = {"queues": [{"name": "orders", "type": "quorum", "retry": {"delays": ["1s"]}}]}

    def guard(allowed: frozenset[str]) -> Callable[[Registered], None]:
        def before_delete(record: Registered) -> None:
            assert record.hooks["before_delete"] == [QUEUE_GUARD]
            check_queue_delete(record.inputs["vhost"], record.inputs["name"], reader(broker).read, allowed,
                               warn=lambda _: None)
        return before_delete

    with pytest.raises(GuardError, match=r'queue "orders" in vhost "guard-\w+": it holds 5 messages'):
        deploy.update(before, quorum, before_delete=guard(frozenset()))
    assert get(broker, f"queues/{esc(guard_vhost)}/orders")["type"] == "classic"
    with channel(broker, guard_vhost, confirms=False) as opened:
        assert opened.queue_declare("orders", passive=True).method.message_count == 5

    deploy.update(before, quorum, before_delete=guard(frozenset({f"{guard_vhost}/orders"})))
    assert get(broker, f"queues/{esc(guard_vhost)}/orders")["type"] == "quorum"
    with channel(broker, guard_vhost, confirms=False) as opened:
        assert opened.queue_declare("orders", passive=True).method.message_count == 0
