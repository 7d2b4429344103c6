"""Strategy `levels` on real brokers (3.10 and 4.3, classic and quorum level queues): a delay chosen per
message through the vhost's shared binary delay levels.

A delayed copy is published to the top level's exchange with the delay's bits and the queue's name in its
routing key; it waits in the level of each set bit, highest first, and the delivery exchange hands it back to
exactly its queue. Asserted: delays chosen in reverse order arrive in delay order, never early, none lost,
none duplicated; the client retries through the levels and parks after `max_retries`; raising `max_delay`
adds levels on top, replaces nothing and keeps every waiting message on time; an application can delay a
message only back to its own queue. How late is measured by `bench`, not asserted here.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from rabbitmq_retry_client import Publisher, RetryingConsumer
from rabbitmq_retry_client.levels import delay_routing_key
from tests.support.amqp import channel, drain, message_counts, parameters, returned_by_crashed_readers
from tests.support.mirror import Broker, call, esc, read_back
from tests.support.retrying import Recorder, fail_every_attempt, publish_ids, run_consumers
from tools.lib.drift import findings
from tools.lib.snapshot import read_live

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

EARLY_MS = 5
"""Clock tolerance for "never early": the times are taken by the test, not by the broker."""
UNIT = "100ms"
QUEUE_TYPES = ("classic", "quorum")


def levels_config(queue_type: str, max_delay: str = "3s", backoff: dict[str, Any] | None = None,
                  max_retries: int = 3, applications: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Two levels queues on one topic exchange (`billing`, `shipping`), level queues of `queue_type`."""
    retry = {"strategy": "levels", "max_retries": max_retries,
             "backoff": backoff or {"initial": "200ms", "multiplier": 2, "max": "800ms", "jitter": 0}}
    return {
        "exchanges": [{"name": "in", "type": "topic"}],
        "queues": [{"name": name, "type": queue_type, "bindings": [{"exchange": "in", "routing_key": f"{name}.*"}],
                    "retry": retry} for name in ("billing", "shipping")],
        "delay_levels": {"unit": UNIT, "max_delay": max_delay, "type": queue_type},
        **({"applications": applications} if applications else {}),
    }


def publish_delayed(broker: Broker, vhost: str, contract: dict[str, Any], delays_ms: list[int],
                    prefix: str) -> dict[str, tuple[float, int]]:
    """One confirmed, mandatory copy per delay, in the order given: message id → (monotonic publish time, delay)."""
    sent: dict[str, tuple[float, int]] = {}
    with Publisher(parameters(broker, vhost)) as publisher:
        for i, delay in enumerate(delays_ms):
            message_id = f"{prefix}{i}-{delay}"
            sent[message_id] = (time.monotonic(), delay)
            publisher.publish(contract["delay_exchange"], delay_routing_key(contract, delay), message_id.encode(),
                              message_id, {"app": "test"})
    return sent


def receive(broker: Broker, vhost: str, queue: str, count: int, timeout: float) -> list[tuple[str, float]]:
    """(message id, monotonic arrival time) of the first `count` messages consumed from `queue`, in order."""
    arrived: list[tuple[str, float]] = []
    deadline = time.monotonic() + timeout
    with channel(broker, vhost, confirms=False) as opened:
        for method, properties, _ in opened.consume(queue, inactivity_timeout=0.05):
            if method is not None:
                arrived.append((str(properties.message_id), time.monotonic()))
                opened.basic_ack(method.delivery_tag)
            if len(arrived) >= count or time.monotonic() > deadline:
                break
        opened.cancel()
    return arrived


def level_queues(contract: dict[str, Any]) -> list[str]:
    return [f"rabbitmq-retry.delay.{k}" for k in range(contract["delay_levels"])]


def assert_on_time(sent: dict[str, tuple[float, int]], arrived: list[tuple[str, float]]) -> None:
    """Each message exactly once, none before its delay, in the order of their delays."""
    assert sorted(message_id for message_id, _ in arrived) == sorted(sent), "each message exactly once"
    for message_id, at in arrived:
        published, delay = sent[message_id]
        waited = (at - published) * 1000
        assert waited >= delay - EARLY_MS, f"{message_id} arrived after {waited:.0f} ms, before its {delay} ms"
    delays = [sent[message_id][1] for message_id, _ in arrived]
    assert delays == sorted(delays), f"arrival order by delay: {delays}"


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_delays_chosen_in_reverse_order_arrive_in_delay_order_never_early_none_lost(
        broker: Broker, deploy: Deployer, queue_type: str) -> None:
    """Longest first, so a single delay queue (seed 003's) would hold every short one behind the long one at its
    head. 100 ms units, 5 levels (up to 3.1 s): the delays use 1 to 5 bits and are 400 ms or more apart."""
    deployment = deploy(levels_config(queue_type))
    contract = deployment.contracts["billing"]
    assert contract["strategy"] == "levels" and contract["delay_levels"] == 5
    assert contract["delay_exchange"] == "rabbitmq-retry.delay.4"
    delays = [3100, 2500, 1900, 1500, 700, 300, 0]
    sent = publish_delayed(broker, deployment.vhost, contract, delays, "r")
    arrived = receive(broker, deployment.vhost, "billing", len(delays), timeout=30)
    assert_on_time(sent, arrived)
    # The other queue of the same levels got nothing; the levels are empty again.
    assert message_counts(broker, deployment.vhost, ["shipping", *level_queues(contract)]) == dict.fromkeys(
        ["shipping", *level_queues(contract)], 0)


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_the_client_retries_through_the_levels_at_its_backoff_then_parks_each_message_once(
        broker: Broker, deploy: Deployer, queue_type: str, consumer_kind: str) -> None:
    """Backoff 200, 400, 800 ms (no jitter), max_retries 3: four deliveries, the gaps never shorter than the
    backoff, then one parked copy with the attempts and the origin; nothing left anywhere else."""
    deployment = deploy(levels_config(queue_type))
    contract = deployment.contracts["billing"]
    ids = [f"c{i}" for i in range(6)]
    recorder = fail_every_attempt(broker, deployment.vhost, contract, ids, "in", "billing.created",
                                  kind=consumer_kind)
    for message_id in ids:
        deliveries = recorder.deliveries[message_id]
        assert len(deliveries) == 1 + 3, message_id
        assert [d.headers.get("retry-count") for d in deliveries] == [None, 1, 2, 3]
        for n, (gap, backoff) in enumerate(zip(recorder.gaps_ms(message_id), (200, 400, 800), strict=True), 1):
            assert gap >= backoff - EARLY_MS, f"retry {n} of {message_id} came after {gap:.0f} ms, before {backoff}"
    parked = drain(broker, deployment.vhost, "billing.error")
    assert sorted(p.message_id for p, _ in parked) == ids, "each message parked exactly once"
    for properties, _ in parked:
        headers = properties.headers or {}
        assert headers["attempts"] == 4 and headers["original-exchange"] == "in"
        assert headers["original-routing-key"] == "billing.created"
    left = ["billing", "shipping", "shipping.error", *level_queues(contract)]
    assert message_counts(broker, deployment.vhost, left) == dict.fromkeys(left, 0)


def test_with_jitter_no_retry_comes_back_before_its_lower_bound(broker: Broker, deploy: Deployer) -> None:
    """Jitter 0.5 on 400 ms: every retry waits at least 200 ms (rounded up to whole units, never down)."""
    deployment = deploy(levels_config("quorum", backoff={"initial": "400ms", "multiplier": 1, "max": "400ms",
                                                         "jitter": 0.5}, max_retries=2))
    contract = deployment.contracts["billing"]
    ids = [f"j{i}" for i in range(10)]
    recorder = Recorder(lambda _: 2)
    consumer = RetryingConsumer(parameters(broker, deployment.vhost), contract, recorder)
    publish_ids(broker, deployment.vhost, "in", ids, routing_key="billing.created")
    run_consumers([consumer], lambda: len(recorder.succeeded) >= len(ids), timeout=60)
    consumer.close()
    assert sorted(recorder.succeeded) == ids
    gaps = [gap for message_id in ids for gap in recorder.gaps_ms(message_id)]
    assert len(gaps) == 2 * len(ids) and min(gaps) >= 200 - EARLY_MS, sorted(gaps)[:3]


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_raising_max_delay_adds_levels_on_top_and_keeps_every_waiting_message_on_time(
        broker: Broker, deploy: Deployer, queue_type: str) -> None:
    """1.5 s (4 levels) → 6 s (6 levels) while messages wait in every level: the update only creates the two new
    levels; no queue, exchange, binding or policy is replaced, updated or deleted, and the waiting messages
    arrive on time. A copy published after it may wait up to the new maximum."""
    before = deploy(levels_config(queue_type, max_delay="1500ms", backoff={"initial": "200ms", "max": "1200ms",
                                                                           "jitter": 0}))
    old = before.contracts["billing"]
    assert old["delay_levels"] == 4
    sent = publish_delayed(broker, before.vhost, old, [1500, 1100, 800, 400], "w")
    after = deploy.update(before, levels_config(queue_type, max_delay="6s", backoff={"initial": "200ms",
                                                                                     "max": "5s", "jitter": 0}))
    changed = {(step.op, step.type.rsplit(":", 1)[-1]) for step in after.steps if step.custom and step.op != "same"}
    # The path guards' inventories grow (an update of their Stash: nothing on the broker, nothing to refuse).
    assert changed <= {("create", "Queue"), ("create", "Exchange"), ("create", "Binding"), ("create", "Policy"),
                       ("update", "Stash")}, \
        changed
    assert sorted(step.name for step in after.steps if step.op == "create" and step.type.endswith("Queue")) == [
        "t-delay-levels-level-4", "t-delay-levels-level-5"]
    new = after.contracts["billing"]
    assert (new["delay_levels"], new["delay_exchange"]) == (6, "rabbitmq-retry.delay.5")
    sent |= publish_delayed(broker, after.vhost, new, [5000], "n")
    arrived = receive(broker, after.vhost, "billing", len(sent), timeout=40)
    assert_on_time(sent, arrived)


def test_an_application_can_delay_a_message_only_back_to_its_own_queue(broker: Broker, deploy: Deployer) -> None:
    """The top level routes any key; the derived topic permission keeps an application's keys to its queues."""
    suffix = uuid.uuid4().hex[:8]
    users = {"billing": f"levels-billing-{suffix}", "shipping": f"levels-shipping-{suffix}"}
    passwords = {user: f"pw-{user}" for user in users.values()}
    try:
        deployment = deploy(levels_config("quorum", applications=[{"user": users[q], "consumes": [q]}
                                                                 for q in ("billing", "shipping")]),
                            passwords=passwords)
        contract = deployment.contracts["billing"]
        as_billing = parameters(broker, deployment.vhost, users["billing"], passwords[users["billing"]])
        with Publisher(as_billing) as publisher:
            publisher.publish(contract["delay_exchange"], delay_routing_key(contract, 200), b"own", "own", {})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused, Publisher(as_billing) as publisher:
            other = {**contract, "queue": "shipping"}
            publisher.publish(contract["delay_exchange"], delay_routing_key(other, 200), b"other", "other", {})
        assert refused.value.reply_code == 403
        arrived = receive(broker, deployment.vhost, "billing", 1, timeout=10)
        assert [message_id for message_id, _ in arrived] == ["own"]
        assert message_counts(broker, deployment.vhost, ["shipping"]) == {"shipping": 0}
    finally:
        for user in users.values():
            call(broker, "DELETE", f"users/{esc(user)}")


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_a_copy_whose_queue_is_gone_when_its_delay_is_over_is_kept_as_undeliverable(
        broker: Broker, deploy: Deployer, queue_type: str) -> None:
    """The queue is deleted while its copies wait: the delivery exchange routes them nowhere, and its alternate
    exchange keeps them in `rabbitmq-retry.delay.undeliverable` instead of the broker dropping them."""
    deployment = deploy(levels_config(queue_type))
    contract = deployment.contracts["billing"]
    sent = publish_delayed(broker, deployment.vhost, contract, [900, 300], "u")
    call(broker, "DELETE", f"queues/{esc(deployment.vhost)}/billing")
    undeliverable = "rabbitmq-retry.delay.undeliverable"
    arrived = receive(broker, deployment.vhost, undeliverable, len(sent), timeout=20)
    assert sorted(message_id for message_id, _ in arrived) == sorted(sent)
    assert message_counts(broker, deployment.vhost, level_queues(contract)) == dict.fromkeys(level_queues(contract), 0)


def test_a_quorum_undeliverable_copy_survives_any_number_of_crashed_readers(broker: Broker, deploy: Deployer) -> None:
    """The undeliverable queue has nowhere to dead-letter, like an error queue: its policy puts RabbitMQ 4's
    default delivery limit (20, which would drop the copy) out of reach. The same 25 returns drop a message from
    a quorum queue with a limit of 20 (declared beside it), so the returns do count."""
    deployment = deploy(levels_config("quorum"))
    vhost, undeliverable = deployment.vhost, "rabbitmq-retry.delay.undeliverable"
    deadline = time.monotonic() + 30
    while (call(broker, "GET", f"queues/{esc(vhost)}/{esc(undeliverable)}")[1]
           .get("effective_policy_definition") or {}).get("delivery-limit") != 1_000_000:
        assert time.monotonic() < deadline, "the undeliverable queue's delivery-limit policy is not in force"
        time.sleep(0.2)
    with channel(broker, vhost) as publisher:
        publisher.queue_declare("limited", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 20})
        publisher.basic_publish(undeliverable, "billing", b"kept", pika.BasicProperties(message_id="kept"))
        publisher.basic_publish("", "limited", b"dropped", pika.BasicProperties(message_id="dropped"))
    assert returned_by_crashed_readers(broker, vhost, undeliverable, 25)
    assert not returned_by_crashed_readers(broker, vhost, "limited", 25), "25 returns did not reach a limit of 20"


def test_the_levels_topology_reads_back_as_applied_and_shows_no_drift(broker: Broker, deploy: Deployer) -> None:
    """Exchange-to-exchange bindings, the alternate exchange argument and the derived topic permission read back
    exactly as the program declared them: a second `pulumi up` changes nothing and `make drift` finds nothing."""
    suffix = uuid.uuid4().hex[:8]
    user = f"levels-drift-{suffix}"
    try:
        deployment = deploy(levels_config("quorum", applications=[{"user": user, "consumes": ["billing"]}]),
                            passwords={user: "pw"})
        assert read_back(broker, deployment.resources) == []
        endpoint = broker.client()
        snapshot = read_live(endpoint, deployment.vhost)
        assert findings(deployment.resources, {deployment.vhost: snapshot}, broker.username) == []
    finally:
        call(broker, "DELETE", f"users/{esc(user)}")


def test_after_max_delay_grows_a_consumer_on_the_old_contract_still_delays_as_its_application_user(
        broker: Broker, deploy: Deployer) -> None:
    """Its old top level is a lower level now, and the application is granted every level: its copies are
    accepted and come back on time until it is redeployed with the new contract."""
    user = f"levels-old-{uuid.uuid4().hex[:8]}"
    applications = [{"user": user, "consumes": ["billing"]}]
    backoff = {"initial": "200ms", "max": "1200ms", "jitter": 0}
    try:
        before = deploy(levels_config("quorum", "1500ms", backoff, applications=applications), passwords={user: "pw"})
        deploy.update(before, levels_config("quorum", "6s", {**backoff, "max": "5s"}, applications=applications),
                      passwords={user: "pw"})
        old = before.contracts["billing"]
        sent: dict[str, tuple[float, int]] = {}
        with Publisher(parameters(broker, before.vhost, user, "pw")) as publisher:
            for delay in (1400, 300):
                sent[f"old-{delay}"] = (time.monotonic(), delay)
                publisher.publish(old["delay_exchange"], delay_routing_key(old, delay), b"x", f"old-{delay}", {})
        assert_on_time(sent, receive(broker, before.vhost, "billing", len(sent), timeout=20))
    finally:
        call(broker, "DELETE", f"users/{esc(user)}")
