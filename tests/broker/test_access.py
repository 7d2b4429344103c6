"""Application users on real brokers: each can do exactly its job and is refused everything else.

One vhost config: two retryable queues (quorum `orders.billing`, classic `orders.shipping`), a plain
queue (`audit`), two applications, an operator policy that caps `orders.billing` below our own
`max_length` policy, and vhost limits. Each app user (no tags, permissions derived by the program):
- CAN publish to its exchanges, consume its queues, retry (stepped republish to its queue's retry
  exchange, plain reject) and park (publish to its error exchange), driven by rabbitmq_retry_client;
- CANNOT declare, delete, purge (another app's queue) or bind, consume another app's queues or any
  error queue, publish anywhere else, or use the management API.
Every AMQP refusal closes the channel (403 ACCESS_REFUSED), so each attempt gets a fresh channel.

Also: the operator policy is in force, the vhost limits are enforced, and a `policymaker` provider user
can apply the topology but not vhosts, limits, operator policies, users or permissions.
Measured outcomes are printed (`pytest -s`).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import BasicProperties

from components import Vhost
from rabbitmq_retry_client import Publisher, RetryingConsumer
from tests.support.admin import STATS_S, version, wait_for_queue
from tests.support.amqp import drain, message_counts, parameters
from tests.support.mirror import Broker, MirrorError, apply, call, destroy, esc, get, read_back
from tools.lib.mockrun import record

if TYPE_CHECKING:
    from tests.support.deploy import Deployer, Deployment

QUEUE = "rabbitmq:index/queue:Queue"
PASSWORDS = {"billing": "billing-secret-1", "shipping": "shipping-secret-2"}
MAX_CONNECTIONS = 6
OPERATOR_MAX_LENGTH = 5
OUR_MAX_LENGTH = 100
ACCESS_REFUSED = (403, "ACCESS_REFUSED")


QUEUE_COUNT = 8
"""Queues of the config: orders.billing (+2 wait, error), orders.shipping (+1 wait, error), audit."""


def _config(billing: str, shipping: str) -> dict[str, Any]:
    return {
        "exchanges": [{"name": "shop.orders", "type": "topic"}, {"name": "shop.payments", "type": "topic"}],
        "queues": [
            {"name": "orders.billing", "type": "quorum", "max_length": OUR_MAX_LENGTH,
             "bindings": [{"exchange": "shop.orders", "routing_key": "order.#"}],
             "retry": {"delays": ["200ms", "400ms"], "max_retries": 2}},
            {"name": "orders.shipping", "type": "classic",
             "bindings": [{"exchange": "shop.orders", "routing_key": "order.#"}],
             "retry": {"delays": ["200ms"], "max_retries": 1}},
            {"name": "audit", "type": "classic", "bindings": [{"exchange": "shop.orders", "routing_key": "#"},
                                                              {"exchange": "shop.payments", "routing_key": "#"}]},
        ],
        "operator_policies": [{"name": "cap-billing", "pattern": r"^orders\.billing$",
                               "definition": {"max-length": OPERATOR_MAX_LENGTH}}],
        "limits": {"max_connections": MAX_CONNECTIONS, "max_queues": QUEUE_COUNT},
        "applications": [
            {"user": billing, "publishes": ["shop.payments"], "consumes": ["orders.billing"],
             "topic_permissions": [{"exchange": "shop.payments", "write": r"^payment\.", "read": ".*"}]},
            {"user": shipping, "publishes": ["shop.orders"], "consumes": ["orders.shipping", "audit"]},
        ],
    }


@dataclass
class Apps:
    """The deployed vhost and its two application users."""

    broker: Broker
    deployment: Deployment
    billing: str
    shipping: str

    @property
    def vhost(self) -> str:
        return self.deployment.vhost

    def password(self, user: str) -> str:
        return PASSWORDS["billing" if user == self.billing else "shipping"]

    def params(self, user: str) -> pika.ConnectionParameters:
        return parameters(self.broker, self.vhost, user, self.password(user))

    def api(self, user: str) -> Broker:
        """The broker's management API as `user`."""
        return dataclasses.replace(self.broker, username=user, password=self.password(user))


@pytest.fixture
def apps(broker: Broker, vhost: str, deploy: Deployer) -> Iterator[Apps]:
    """The topology applied as `pulumi up` would, then the applications added by a second `pulumi up`
    (the usual rollout). Users are broker-wide, so they are deleted afterwards."""
    billing, shipping = f"{vhost}-billing", f"{vhost}-shipping"
    config = _config(billing, shipping)
    try:
        # In one from-scratch `pulumi up`, TopicPermissions may be created before its exchange, which 4.3
        # refuses (400 no_such_exchange; 3.10 accepts it): pinned in tests/test_access.py.
        topology = deploy({key: value for key, value in config.items() if key != "applications"})
        deployment = deploy.update(topology, config,
                                   passwords={billing: PASSWORDS["billing"], shipping: PASSWORDS["shipping"]})
        assert len([r for r in deployment.resources if r.type == QUEUE]) == QUEUE_COUNT
        yield Apps(broker, deployment, billing, shipping)
    finally:
        for user in (billing, shipping):
            call(broker, "DELETE", f"users/{esc(user)}")


@dataclass(frozen=True)
class Outcome:
    """What the broker did with one AMQP operation."""

    reply_code: int | None = None
    reply_text: str = ""

    @property
    def refused(self) -> bool:
        return (self.reply_code, self.reply_text.split(" ", 1)[0]) == ACCESS_REFUSED

    def __str__(self) -> str:
        return "allowed" if self.reply_code is None else f"{self.reply_code} {self.reply_text}"


def attempt(connection: BlockingConnection, action: Callable[[BlockingChannel], object]) -> Outcome:
    """Run `action` on a fresh confirm-mode channel: a publish waits for its confirm, so a refused
    publish is reported here and not on some later call."""
    channel = connection.channel()
    channel.confirm_delivery()
    try:
        action(channel)
    except pika.exceptions.ChannelClosedByBroker as error:
        return Outcome(error.reply_code, error.reply_text)
    finally:
        if channel.is_open:
            channel.close()
    return Outcome()


def _always_fail(body: bytes, properties: BasicProperties) -> None:
    raise RuntimeError("handler failed on purpose")


def _run_until_parked(consumer: RetryingConsumer, parked: int, timeout: float = 15.0) -> None:
    """Consume until `parked` messages were parked or `timeout` passed; the caller checks the counters."""
    deadline = time.monotonic() + timeout
    try:
        consumer.run(until=lambda: consumer.parked >= parked or time.monotonic() > deadline)
    finally:
        consumer.close()


# --- what each application can do ---------------------------------------------------------------

def test_users_have_no_tags_and_exactly_the_derived_permissions(apps: Apps) -> None:
    v = esc(apps.vhost)
    for user in (apps.billing, apps.shipping):
        tags = get(apps.broker, f"users/{esc(user)}")["tags"]
        assert tags in ("", []), f"{user} has tags {tags!r}; application users must have none"
    billing = get(apps.broker, f"permissions/{v}/{esc(apps.billing)}")
    assert (billing["configure"], billing["write"], billing["read"]) == (
        "^$", r"^(orders\.billing\.error|orders\.billing\.retry|shop\.payments)$", r"^(orders\.billing)$")
    shipping = get(apps.broker, f"permissions/{v}/{esc(apps.shipping)}")
    assert (shipping["configure"], shipping["write"], shipping["read"]) == (
        "^$", r"^(orders\.shipping\.error|orders\.shipping\.retry|shop\.orders)$", r"^(audit|orders\.shipping)$")
    topic = get(apps.broker, f"topic-permissions/{v}/{esc(apps.billing)}")
    assert [(t["exchange"], t["write"], t["read"]) for t in topic] == [("shop.payments", r"^payment\.", ".*")]


def test_each_application_publishes_consumes_retries_and_parks(apps: Apps) -> None:
    contracts = apps.deployment.contracts
    # Publish to the granted exchanges: mandatory and confirmed, so a refusal or a miss would raise.
    with Publisher(apps.params(apps.shipping)) as publisher:
        publisher.publish("shop.orders", "order.created", b"order 1", "order-1")
    with Publisher(apps.params(apps.billing)) as publisher:
        publisher.publish("shop.payments", "payment.done", b"payment 1", "payment-1")

    # billing: stepped republish to orders.billing.retry (wait.1, wait.2), then park on orders.billing.error.
    billing = RetryingConsumer(apps.params(apps.billing), contracts["orders.billing"], _always_fail, "republish",
                               reconnect=False)
    _run_until_parked(billing, 1)
    assert (billing.retried, billing.parked, billing.requeued) == (2, 1, 0), (
        f"billing-app could not retry and park (a refused publish shows as requeued): retried={billing.retried} "
        f"parked={billing.parked} requeued={billing.requeued}")

    # shipping: plain reject (the broker dead-letters to tier 1, no permission needed), then park.
    shipping = RetryingConsumer(apps.params(apps.shipping), contracts["orders.shipping"], _always_fail, "reject",
                                reconnect=False)
    _run_until_parked(shipping, 1)
    assert (shipping.retried, shipping.parked, shipping.requeued) == (1, 1, 0), (
        f"shipping-app could not reject and park: retried={shipping.retried} parked={shipping.parked} "
        f"requeued={shipping.requeued}")

    # shipping also consumes the plain queue: both publishes reached it.
    with pika.BlockingConnection(apps.params(apps.shipping)) as connection:
        channel = connection.channel()
        got = []
        while (delivery := channel.basic_get("audit"))[0] is not None:
            method, properties, _ = delivery
            channel.basic_ack(method.delivery_tag)
            got.append(properties.message_id)
    assert sorted(got) == ["order-1", "payment-1"]

    parked = {queue: [(p.message_id, (p.headers or {}).get("error-queue"), (p.headers or {}).get("attempts"))
                      for p, _ in drain(apps.broker, apps.vhost, f"{queue}.error")]
              for queue in ("orders.billing", "orders.shipping")}
    assert parked == {"orders.billing": [("order-1", "orders.billing", 3)],
                      "orders.shipping": [("order-1", "orders.shipping", 2)]}
    assert message_counts(apps.broker, apps.vhost, ["orders.billing", "orders.shipping", "audit"]) == {
        "orders.billing": 0, "orders.shipping": 0, "audit": 0}


def test_a_consumer_can_check_and_purge_its_own_queue(broker: Broker, apps: Apps) -> None:
    """Pinned RabbitMQ rules, not choices of ours: `read` allows queue.purge, and any permission on a
    queue allows a passive declare (4.3; before 4.2.6 none was needed, so 3.10 lets any user probe)."""
    with pika.BlockingConnection(apps.params(apps.billing)) as billing:
        own = attempt(billing, lambda ch: ch.queue_declare("orders.billing", passive=True))
        assert not own.refused, f"billing-app cannot passively declare its own queue: {own}"
        exchange = attempt(billing, lambda ch: ch.exchange_declare("shop.payments", "topic", passive=True))
        assert not exchange.refused, f"billing-app cannot passively declare its publish exchange: {exchange}"
        purge = attempt(billing, lambda ch: ch.queue_purge("orders.billing"))
        assert not purge.refused, f"read permission no longer allows purging one's own queue: {purge}"
        other = attempt(billing, lambda ch: ch.queue_declare("orders.shipping", passive=True))
    print(f"\n[{broker.name}] passive declare of another app's queue: {other}")
    if version(broker) >= (4, 2, 6):
        assert other.refused, f"billing-app could probe another app's queue on {broker.name}: {other}"
    else:
        assert not other.refused, f"3.x checks no permission on a passive declare: {other}"


# --- what each application cannot do ------------------------------------------------------------

def test_applications_cannot_change_the_topology(broker: Broker, apps: Apps) -> None:
    seen: dict[str, Outcome] = {}
    with pika.BlockingConnection(apps.params(apps.billing)) as billing:
        seen["declare a queue"] = o = attempt(billing, lambda ch: ch.queue_declare("billing.scratch", durable=True))
        assert o.refused, f"billing-app declared a queue: {o}"
        seen["re-declare its own queue"] = o = attempt(billing, lambda ch: ch.queue_declare(
            "orders.billing", durable=True, arguments={"x-queue-type": "quorum"}))
        assert o.refused, f"billing-app re-declared its own queue (configure is ^$): {o}"
        seen["declare an exchange"] = o = attempt(billing, lambda ch: ch.exchange_declare("billing.x", "fanout"))
        assert o.refused, f"billing-app declared an exchange: {o}"
        seen["delete its own queue"] = o = attempt(billing, lambda ch: ch.queue_delete("orders.billing"))
        assert o.refused, f"billing-app deleted its own queue: {o}"
        seen["delete another app's queue"] = o = attempt(billing, lambda ch: ch.queue_delete("orders.shipping"))
        assert o.refused, f"billing-app deleted another app's queue: {o}"
        seen["purge another app's queue"] = o = attempt(billing, lambda ch: ch.queue_purge("orders.shipping"))
        assert o.refused, f"billing-app purged another app's queue: {o}"
        seen["purge its own error queue"] = o = attempt(billing, lambda ch: ch.queue_purge("orders.billing.error"))
        assert o.refused, f"billing-app purged its parked messages: {o}"
        seen["bind its queue"] = o = attempt(billing, lambda ch: ch.queue_bind("orders.billing", "shop.payments", "#"))
        assert o.refused, f"billing-app bound its queue to an exchange: {o}"
        seen["unbind its queue"] = o = attempt(billing, lambda ch: ch.queue_unbind(
            "orders.billing", "shop.orders", "order.#"))
        assert o.refused, f"billing-app unbound its queue: {o}"
        seen["bind exchange to exchange"] = o = attempt(billing, lambda ch: ch.exchange_bind(
            "orders.billing.error", "shop.payments", "#"))
        assert o.refused, f"billing-app bound its error exchange to an exchange: {o}"
    with pika.BlockingConnection(apps.params(apps.shipping)) as shipping:
        seen["shipping: declare a queue"] = o = attempt(shipping, lambda ch: ch.queue_declare("s.scratch"))
        assert o.refused, f"shipping-app declared a queue: {o}"
        seen["shipping: delete the plain queue it consumes"] = o = attempt(
            shipping, lambda ch: ch.queue_delete("audit"))
        assert o.refused, f"shipping-app deleted the plain queue it consumes: {o}"
        seen["shipping: bind the plain queue"] = o = attempt(shipping, lambda ch: ch.queue_bind(
            "audit", "shop.orders", "secret.#"))
        assert o.refused, f"shipping-app bound the plain queue it consumes: {o}"
    _report(broker, seen)


def test_applications_cannot_read_other_queues(broker: Broker, apps: Apps) -> None:
    seen: dict[str, Outcome] = {}
    with pika.BlockingConnection(apps.params(apps.billing)) as billing:
        seen["consume another app's queue"] = o = attempt(billing, lambda ch: ch.basic_consume(
            "orders.shipping", lambda *_: None))
        assert o.refused, f"billing-app consumed shipping-app's queue: {o}"
        seen["get from another app's queue"] = o = attempt(billing, lambda ch: ch.basic_get("orders.shipping"))
        assert o.refused, f"billing-app got a message from shipping-app's queue: {o}"
        seen["consume another app's error queue"] = o = attempt(billing, lambda ch: ch.basic_consume(
            "orders.shipping.error", lambda *_: None))
        assert o.refused, f"billing-app consumed shipping-app's error queue: {o}"
        seen["consume another app's plain queue"] = o = attempt(billing, lambda ch: ch.basic_consume(
            "audit", lambda *_: None))
        assert o.refused, f"billing-app consumed shipping-app's plain queue: {o}"
        seen["consume its own error queue"] = o = attempt(billing, lambda ch: ch.basic_consume(
            "orders.billing.error", lambda *_: None))
        assert o.refused, f"billing-app consumed its own error queue (parked messages are for operators): {o}"
        seen["consume its own wait queue"] = o = attempt(billing, lambda ch: ch.basic_get("orders.billing.wait.1"))
        assert o.refused, f"billing-app took a message out of its wait tier: {o}"
    with pika.BlockingConnection(apps.params(apps.shipping)) as shipping:
        seen["shipping: consume another app's queue"] = o = attempt(shipping, lambda ch: ch.basic_consume(
            "orders.billing", lambda *_: None))
        assert o.refused, f"shipping-app consumed billing-app's queue: {o}"
        seen["shipping: consume another app's error queue"] = o = attempt(shipping, lambda ch: ch.basic_consume(
            "orders.billing.error", lambda *_: None))
        assert o.refused, f"shipping-app consumed billing-app's error queue: {o}"
    _report(broker, seen)


def test_applications_cannot_publish_where_not_granted(broker: Broker, apps: Apps) -> None:
    seen: dict[str, Outcome] = {}

    def publish(exchange: str, routing_key: str) -> Callable[[BlockingChannel], object]:
        return lambda ch: ch.basic_publish(exchange, routing_key, b"x", mandatory=True)

    with pika.BlockingConnection(apps.params(apps.billing)) as billing:
        seen["publish to an exchange not granted"] = o = attempt(billing, publish("shop.orders", "order.created"))
        assert o.refused, f"billing-app published to shop.orders: {o}"
        seen["publish to another app's retry exchange"] = o = attempt(billing, publish(
            "orders.shipping.retry", "wait.1"))
        assert o.refused, f"billing-app published to shipping-app's retry exchange: {o}"
        seen["publish to another app's error exchange"] = o = attempt(billing, publish("orders.shipping.error", ""))
        assert o.refused, f"billing-app published to shipping-app's error exchange: {o}"
        seen["publish to its own requeue exchange"] = o = attempt(billing, publish("orders.billing.requeue", ""))
        assert o.refused, f"billing-app skipped the wait tiers through its requeue exchange: {o}"
        seen["publish to the default exchange"] = o = attempt(billing, publish("", "orders.shipping"))
        assert o.refused, f"billing-app published straight into a queue through the default exchange: {o}"
        seen["publish to amq.topic"] = o = attempt(billing, publish("amq.topic", "anything"))
        assert o.refused, f"billing-app published to amq.topic: {o}"
        seen["publish a routing key its topic permissions exclude"] = o = attempt(billing, publish(
            "shop.payments", "refund.done"))
        assert o.refused, f"billing-app published refund.done although its topic write is ^payment\\.: {o}"
    with pika.BlockingConnection(apps.params(apps.shipping)) as shipping:
        seen["shipping: publish to another app's retry exchange"] = o = attempt(shipping, publish(
            "orders.billing.retry", "wait.1"))
        assert o.refused, f"shipping-app published to billing-app's retry exchange: {o}"
        seen["shipping: publish to an exchange not granted"] = o = attempt(shipping, publish(
            "shop.payments", "payment.done"))
        assert o.refused, f"shipping-app published to shop.payments: {o}"
    _report(broker, seen)


def test_application_users_cannot_use_the_management_api(broker: Broker, apps: Apps) -> None:
    v = esc(apps.vhost)
    requests: list[tuple[str, str, Any]] = [
        ("GET", "overview", None),
        ("GET", f"queues/{v}/orders.billing", None),
        ("PUT", f"queues/{v}/billing.scratch", {"durable": True}),
        ("DELETE", f"queues/{v}/orders.billing", None),
        ("DELETE", f"queues/{v}/orders.billing/contents", None),
        ("POST", f"exchanges/{v}/shop.payments/publish",
         {"properties": {}, "routing_key": "payment.x", "payload": "x", "payload_encoding": "string"}),
    ]
    for user in (apps.billing, apps.shipping):
        for method, path, body in requests:
            with pytest.raises(MirrorError) as error:
                call(apps.api(user), method, path, body)
            assert error.value.status == 401, f"{user}: {method} /api/{path} answered {error.value}, not 401"
    print(f"\n[{broker.name}] management API for application users: 401 {error.value.reason}")


def _report(broker: Broker, seen: dict[str, Outcome]) -> None:
    print(f"\n[{broker.name}] refused:")
    for what, outcome in seen.items():
        print(f"  {what}: {outcome}")


# --- operator policy and vhost limits ------------------------------------------------------------

def test_the_operator_policy_caps_the_queue_below_our_policy(broker: Broker, apps: Apps) -> None:
    assert get(broker, f"policies/{esc(apps.vhost)}/orders.billing")["definition"]["max-length"] == OUR_MAX_LENGTH
    started = time.monotonic()
    info = wait_for_queue(broker, apps.vhost, "orders.billing", lambda stats: stats.get("operator_policy") ==
                          "cap-billing" and bool(stats.get("effective_policy_definition")),
                          "the operator policy in the queue stats", timeout=STATS_S)
    print(f"\n[{broker.name}] operator policy shown after {time.monotonic() - started:.1f}s: "
          f"{info['effective_policy_definition']}")
    assert info["policy"] == "orders.billing"
    assert info["effective_policy_definition"]["max-length"] == OPERATOR_MAX_LENGTH
    assert info["effective_policy_definition"]["overflow"] == "reject-publish"

    # The shipping app's orders reach orders.billing (quorum, reject-publish) and two uncapped queues. A quorum
    # queue rejects only once it is over its limit: it takes max-length + 1 (3.10 and 4.3 alike), then nacks.
    accepted = 0
    with Publisher(apps.params(apps.shipping)) as publisher:
        for n in range(OPERATOR_MAX_LENGTH + 5):
            try:
                publisher.publish("shop.orders", "order.created", f"order {n}", f"order-{n}")
            except pika.exceptions.NackError:
                break
            accepted += 1
    counts = message_counts(apps.broker, apps.vhost, ["orders.billing", "orders.shipping"])
    print(f"[{broker.name}] acked before the first nack: {accepted}; queue lengths: {counts}")
    assert accepted == OPERATOR_MAX_LENGTH + 1, f"expected a nack after {OPERATOR_MAX_LENGTH + 1} acks, got {accepted}"
    assert counts["orders.billing"] == OPERATOR_MAX_LENGTH + 1, "operator max-length 5 not enforced (ours is 100)"
    # A nack means "some queue refused it", not "no queue has it": the uncapped queue kept the nacked one.
    assert counts["orders.shipping"] == accepted + 1


def test_vhost_limits_are_enforced(broker: Broker, apps: Apps) -> None:
    limits = get(broker, f"vhost-limits/{esc(apps.vhost)}")[0]["value"]
    assert limits == {"max-connections": MAX_CONNECTIONS, "max-queues": QUEUE_COUNT}
    connections: list[BlockingConnection] = []
    try:
        for _ in range(MAX_CONNECTIONS):
            connections.append(pika.BlockingConnection(apps.params(apps.shipping)))
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as error:
            connections.append(pika.BlockingConnection(apps.params(apps.billing)))
        print(f"\n[{broker.name}] connection {MAX_CONNECTIONS + 1}: {error.value}")
        assert "(530)" in str(error.value) and "connection limit" in str(error.value), (
            f"a connection over max_connections was not refused with 530 NOT_ALLOWED: {error.value}")
    finally:
        for connection in connections:
            if connection.is_open:
                connection.close()
    with pika.BlockingConnection(parameters(broker, apps.vhost)) as admin:
        full = attempt(admin, lambda ch: ch.queue_declare("one.more", durable=True))
    print(f"\n[{broker.name}] queue {QUEUE_COUNT + 1}: {full}")
    assert full.reply_code == 406 and "limit" in full.reply_text, f"a queue over max_queues was declared: {full}"


# --- the provider's own user -------------------------------------------------------------------

def test_a_policymaker_provider_user_applies_the_topology_but_not_vhosts_or_access(
        broker: Broker, vhost: str) -> None:
    """A `policymaker` user with full permissions on an existing vhost is enough for queues, exchanges,
    bindings and policies; vhosts, limits, operator policies, users and permissions need `administrator`."""
    user, password = f"{vhost}-provider", uuid.uuid4().hex
    call(broker, "PUT", f"vhosts/{esc(vhost)}", {})
    call(broker, "PUT", f"users/{esc(user)}", {"password": password, "tags": "policymaker"})
    call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(user)}", {"configure": ".*", "write": ".*", "read": ".*"})
    provider = dataclasses.replace(broker, username=user, password=password)
    try:
        topology = {"name": vhost, "existing": True, "exchanges": [{"name": "shop.orders", "type": "topic"}],
                    "queues": [{"name": "orders.billing", "max_length": 10,
                                "bindings": [{"exchange": "shop.orders", "routing_key": "order.#"}],
                                "retry": {"delays": ["1s"]}},
                               {"name": "audit", "type": "classic",
                                "bindings": [{"exchange": "shop.orders", "routing_key": "#"}]}],
                    "policies": [{"name": "audit-cap", "pattern": "^audit$", "definition": {"max-length": 1000}}]}
        resources = record(lambda: Vhost("t", {"vhost": topology}))
        apply(provider, resources)  # `pulumi up` as the policymaker
        assert read_back(provider, resources) == [], "a refresh as the policymaker would plan changes"
        assert {q["name"] for q in get(broker, f"queues/{esc(vhost)}")} == {
            "orders.billing", "orders.billing.wait.1", "orders.billing.error", "audit"}

        v, u = esc(vhost), esc(user)
        refused = {
            "create a vhost": ("PUT", f"vhosts/{v}-other", {}),
            "update the vhost": ("PUT", f"vhosts/{v}", {"description": "", "tags": "", "tracing": False}),
            "set vhost limits": ("PUT", f"vhost-limits/{v}/max-queues", {"value": 100}),
            "create an operator policy": ("PUT", f"operator-policies/{v}/cap", {
                "pattern": ".*", "apply-to": "queues", "priority": 0, "definition": {"max-length": 5}}),
            "create a user": ("PUT", f"users/{u}-app", {"password": "x", "tags": ""}),
            "set permissions": ("PUT", f"permissions/{v}/{u}", {"configure": ".*", "write": ".*", "read": ".*"}),
            "set topic permissions": ("PUT", f"topic-permissions/{v}/{u}",
                                      {"exchange": "shop.orders", "write": ".*", "read": ".*"}),
            "delete the vhost": ("DELETE", f"vhosts/{v}", None),
        }
        for what, (method, path, body) in refused.items():
            with pytest.raises(MirrorError) as error:
                call(provider, method, path, body)
            assert error.value.status == 401, f"policymaker could {what}: {error.value}"
        print(f"\n[{broker.name}] policymaker refused: {', '.join(refused)} (401 {error.value.reason})")
        destroy(provider, resources)  # `pulumi destroy` as the policymaker
        assert get(broker, f"queues/{esc(vhost)}") == []
    finally:
        call(broker, "DELETE", f"users/{esc(user)}")
        call(broker, "DELETE", f"users/{esc(user)}-app")
        call(broker, "DELETE", f"vhosts/{esc(vhost)}-other")
