"""What the deployed topology looks like on real brokers, and what changing it does to queued messages.

Issue behaviours: (5) quorum queues dead-letter at-least-once and carry the configured policy;
(7) applying is idempotent (a refresh finds nothing, RabbitMQ 4's x-queue-type trap included);
(8) delays change in place, nothing is lost, and the transition is measured; (9) no 4.x-only
setting is used (tests/test_program.py, which needs no broker), and delivery-limit is an explicit integer
policy that works on 3.10 and 4.x (with one version difference and one loss, pinned by the last two tests).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi_rabbitmq as rabbitmq
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.conftest import dev_vhost_config, work_queue_config
from tests.support.admin import STATS_S, version, wait_for
from tests.support.amqp import Delivery, next_message
from tests.support.amqp import channel as _channel
from tests.support.amqp import message_count as _count
from tests.support.mirror import Broker, apply, esc, get, read_back
from tools.lib.mockrun import record

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

ROOT = Path(__file__).resolve().parents[2]


ARRIVAL_S = 15.0
"""Generous bound for a message to show up (an eventual condition, not a figure)."""


def _next(channel: BlockingChannel, queue: str, or_in: str | None = None) -> Delivery | None:
    """The next message of `queue` (unacked); None as soon as `or_in` holds one."""
    delivery = next_message(channel, queue, ARRIVAL_S, give_up=None if or_in is None else
                            lambda: _count(channel, or_in) > 0)
    assert delivery is not None or (or_in is not None and _count(channel, or_in) > 0), (
        f"no message in {queue}" + (f" or {or_in}" if or_in else "") + f" within {ARRIVAL_S}s")
    return delivery


# (5) --------------------------------------------------------------------------------------------

def test_quorum_dead_lettering_is_at_least_once_with_the_configured_policy(broker: Broker, deploy: Deployer) -> None:
    deployment = deploy(work_queue_config("quorum", ["1s", "5s"], delivery_limit=7))
    v = esc(deployment.vhost)
    wanted_dlx = {"work": "work.retry", "work.wait.1": "work.requeue", "work.wait.2": "work.requeue"}
    for queue, dlx in wanted_dlx.items():
        arguments = get(broker, f"queues/{v}/{esc(queue)}")["arguments"]
        assert arguments["x-queue-type"] == "quorum"
        assert arguments["x-dead-letter-strategy"] == "at-least-once", queue
        assert arguments["x-overflow"] == "reject-publish", queue  # without it: silently at-most-once
        assert arguments["x-dead-letter-exchange"] == dlx, queue
    assert get(broker, f"queues/{v}/work")["arguments"]["x-dead-letter-routing-key"] == "wait.1"
    assert get(broker, f"policies/{v}/work")["definition"] == {"delivery-limit": 7}  # an integer, not "7"

    wanted = {"work": {"delivery-limit": 7}, "work.wait.1": {"message-ttl": 1000}, "work.wait.2": {"message-ttl": 5000}}

    def effective() -> dict[str, tuple[Any, Any]] | None:
        # Queue stats (and with them the effective policy) are emitted every few seconds.
        seen = {q["name"]: (q.get("policy"), q.get("effective_policy_definition")) for q in get(broker, f"queues/{v}")}
        return seen if all(seen.get(name, (None, None))[1] for name in wanted) else None

    started = time.monotonic()
    seen = wait_for(effective, STATS_S, "the effective policies in the queue stats")
    print(f"\n[{broker.name}] effective policies visible after {time.monotonic() - started:.1f}s: {seen}")
    for name, definition in wanted.items():
        assert seen[name] == (name, definition)


# (7) --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_applying_the_dev_topology_is_idempotent(broker: Broker, deploy: Deployer, queue_type: str) -> None:
    config = dev_vhost_config(queue_type)
    first = deploy(config)
    queues = get(broker, f"queues/{esc(first.vhost)}")
    planned = sorted(r.inputs["name"] for r in first.resources if r.type == "rabbitmq:index/queue:Queue")
    # 15 of the retryable and plain queues, then orders.refunds (levels), its error queue, 12 levels, undeliverable
    assert sorted(q["name"] for q in queues) == planned and len(planned) == 30
    assert {q["arguments"]["x-queue-type"] for q in queues} == {queue_type}
    assert read_back(broker, first.resources) == []  # on 4.x: the injected x-queue-type matches the program's
    apply(broker, first.resources)
    second = deploy.update(first, config)
    assert {s.op for s in second.steps} == {"same"}
    assert read_back(broker, second.resources) == []


def test_a_queue_without_x_queue_type_reads_back_different_on_4x(broker: Broker, vhost: str) -> None:
    def program() -> None:
        created = rabbitmq.VHost("v", name=vhost)
        rabbitmq.Queue("q", name="q", vhost=created.name, settings=rabbitmq.QueueSettingsArgs(
            durable=True, arguments_json='{"x-max-length": 10}'))
    resources = record(program)
    apply(broker, resources)
    differences = read_back(broker, resources)
    print(f"\n[{broker.name}] read back: {differences}")
    if version(broker) >= (4, 0):
        assert len(differences) == 1
        assert "settings.argumentsJson.x-queue-type" in differences[0]
        assert "'classic'" in differences[0] and "(replace)" in differences[0]  # every `pulumi up` replaces it
    else:
        assert differences == []


# (8) --------------------------------------------------------------------------------------------

def _reject_into_retry(channel: BlockingChannel, queue: str, body: str) -> float:
    """Publish to the input queue, take it back and reject it (requeue=False): it dead-letters to tier 1."""
    channel.basic_publish("", queue, body.encode())
    method, _, got = _next(channel, queue) or (None, None, b"")
    assert got == body.encode()
    channel.basic_reject(method.delivery_tag, requeue=False)
    return time.monotonic()


def _arrivals(channel: BlockingChannel, queue: str, expected: int, timeout: float) -> dict[str, float]:
    """Consume and ack `queue` until `expected` distinct bodies arrived or `timeout` s passed: body → when."""
    arrived: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    for method, _, body in channel.consume(queue, inactivity_timeout=0.02):
        if method is not None:
            arrived.setdefault(body.decode(), time.monotonic())
            channel.basic_ack(method.delivery_tag)
        if len(arrived) >= expected or time.monotonic() > deadline:
            break
    channel.cancel()
    return arrived


EARLY_S = 0.05
"""Clock tolerance for "never early": the entry time is taken after basic.reject returns (measured on
3.10.8 and 4.3.6: once 1 ms "early"). How late messages leave is not asserted (bench/retry_timing.py)."""


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_delay_change_is_in_place_and_loses_nothing(broker: Broker, deploy: Deployer, queue_type: str) -> None:
    old_delays, new_delays = (6.0, 8.0), (1.0, 3.0)
    before = deploy(work_queue_config(queue_type, ["6s", "8s"]))
    contract = before.contracts["work"]
    assert [t["delay_ms"] for t in contract["tiers"]] == [6000, 8000]
    with _channel(broker, before.vhost) as channel:
        entered = {f"old-{i}": _reject_into_retry(channel, "work", f"old-{i}") for i in range(4)}
        for i in range(3):  # a consumer's second retry: published straight to tier 2
            channel.basic_publish(contract["retry_exchange"], "wait.2", f"tier2-{i}".encode())
            entered[f"tier2-{i}"] = time.monotonic()
        wait_for(lambda: _count(channel, "work.wait.1") == 4 and _count(channel, "work.wait.2") == 3, ARRIVAL_S,
                 "4 messages in wait.1 and 3 in wait.2")

        after = deploy.update(before, work_queue_config(queue_type, ["1s", "3s"]))
        moved = sorted((s.name, s.op, tuple(s.changed)) for s in after.steps if s.op != "same")
        assert moved == [("t-work-wait-1-policy", "update", ("policy.definition.message-ttl",)),
                         ("t-work-wait-2-policy", "update", ("policy.definition.message-ttl",))]
        assert not [s for s in after.steps if s.op in ("replace", "delete")]
        # The old messages still wait when the new one enters: it queues behind them.
        assert (_count(channel, "work.wait.1"), _count(channel, "work.wait.2")) == (4, 3)
        assert get(broker, f"policies/{esc(after.vhost)}/work.wait.1")["definition"] == {"message-ttl": 1000}

        entered["new-0"] = _reject_into_retry(channel, "work", "new-0")  # TTL 1 s, behind 6 s messages
        arrived = _arrivals(channel, "work", expected=len(entered), timeout=max(old_delays) + 60)
        assert sorted(arrived) == sorted(entered), "messages lost"
        assert sum(_count(channel, q) for q in ("work", "work.wait.1", "work.wait.2", "work.error")) == 0

    waited = {body: arrived[body] - entered[body] for body in entered}
    print(f"\n[{broker.name} {queue_type}] waited: " + ", ".join(f"{b}={w:.3f}s" for b, w in sorted(waited.items())))
    for body, wait in waited.items():
        if body.startswith("old-"):  # queued under the 6 s policy: keep 6 s, not the new 1 s
            assert wait >= old_delays[0] - EARLY_S, body
        elif body.startswith("tier2-"):  # queued under the 8 s policy: keep 8 s although tier 2 is now 3 s
            assert wait >= old_delays[1] - EARLY_S, body
    # Head-of-line: the new 1 s message leaves only after the old ones it queued behind, never before its 1 s.
    assert waited["new-0"] >= new_delays[0] - EARLY_S
    assert arrived["new-0"] >= max(arrived[f"old-{i}"] for i in range(4))


# (9) --------------------------------------------------------------------------------------------

def test_delivery_limit_is_enforced_on_every_broker(broker: Broker, deploy: Deployer) -> None:
    """A consumer that dies holding the message (channel closed, no ack) uses up a delivery; after
    `delivery-limit` returns the message dead-letters to tier 1 on 3.10 as on 4.x."""
    deployment = deploy(work_queue_config("quorum", ["60s"], delivery_limit=3))  # the lowest the config allows here
    assert get(broker, f"policies/{esc(deployment.vhost)}/work")["definition"] == {"delivery-limit": 3}
    with _channel(broker, deployment.vhost) as publisher:
        publisher.basic_publish("", "work", b"poison")
        deliveries = 0
        for _ in range(6):
            consumer = publisher.connection.channel()
            if _next(consumer, "work", or_in="work.wait.1") is None:
                break
            deliveries += 1
            consumer.close()  # the consumer "crashes": the unacked message is returned
        _, properties, body = _next(publisher, "work.wait.1") or (None, None, b"")
    print(f"\n[{broker.name}] deliveries before dead-lettering: {deliveries}")
    assert deliveries == 4  # limit 3: the fourth return exceeds it
    assert body == b"poison"
    assert properties.headers["x-first-death-reason"] == "delivery_limit"


def test_requeue_by_nack_counts_towards_delivery_limit_only_before_4x(broker: Broker, deploy: Deployer) -> None:
    """Explicit version difference: 4.x counts `basic.nack(requeue=True)` in x-acquired-count, not in
    the delivery count, so only a reject without requeue (the retry contract) leaves the loop there."""
    deployment = deploy(work_queue_config("quorum", ["60s"], delivery_limit=3))
    with _channel(broker, deployment.vhost) as channel:
        channel.basic_publish("", "work", b"requeued")
        for _ in range(4):
            message = _next(channel, "work", or_in="work.wait.1")
            if message is None:
                break
            channel.basic_nack(message[0].delivery_tag, requeue=True)
        expected = (1, 0) if version(broker) >= (4, 0) else (0, 1)
        time.sleep(0.3)  # a quiet moment in which 4.x must not dead-letter it either

        def settled() -> tuple[int, int] | None:
            counts = (_count(channel, "work"), _count(channel, "work.wait.1"))
            return counts if counts == expected else None

        # 3.10 dead-letters asynchronously: wait (an eventual condition) rather than sample once.
        seen = wait_for(settled, ARRIVAL_S, f"(work, wait.1) == {expected}")
    print(f"\n[{broker.name}] after 4 nack(requeue=True) with delivery-limit 3: (work, wait.1) = {seen}")
