"""The effective-policy checks, grounded on both brokers: the merge the checks compute is the one RabbitMQ
reports, and each refused case, applied anyway (the check switched off), really loses or breaks
messages; an accepted operator policy loses nothing."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import NackError

from components.config.load import load_vhost
from components.plan.checks import _graph, check_vhost
from components.plan.effective import merge, winners
from components.plan.planner import plan_vhost
from tests.broker.test_delivery_limit import EMPTY, STATS_S, _jammed, _settles
from tests.support.amqp import channel as _channel
from tests.support.amqp import message_count, returned_by_crashed_readers
from tests.support.mirror import Broker, esc, get
from tests.support.problems import messages

if TYPE_CHECKING:
    from tests.broker.conftest import Deployer, Deployment

TTL_MS = 300
QUIET_S = 2.5
"""How long a message must stay away to count as gone: 8 TTLs."""


def _problems(vhost: str, config: Mapping[str, Any]) -> list[str]:
    return messages(check_vhost(plan_vhost(load_vhost({"name": vhost, **config}, "vhost"))))


def _apply_anyway(deploy: Deployer, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any],
                  refused: str) -> Deployment:
    """Apply `config` although the checks refuse it (they must, with a problem starting with `refused`)."""
    problems = _problems(deploy.vhost, config)
    assert any(problem.startswith(refused) for problem in problems), problems
    monkeypatch.setattr("components.pulumi.vhost.check_vhost", lambda *args, **kwargs: [])
    return deploy(config)


def _in_force(broker: Broker, vhost: str, queue: str, key: str, value: Any) -> None:
    """Wait until the broker reports `key: value` in `queue`'s effective policy definition."""
    deadline = time.monotonic() + STATS_S
    while (get(broker, f"queues/{esc(vhost)}/{esc(queue)}").get("effective_policy_definition") or {}).get(key) \
            != value:
        assert time.monotonic() < deadline, f"{queue}: {key} {value} not in force after {STATS_S}s"
        time.sleep(0.2)


def _publish(channel: BlockingChannel, exchange: str, routing_key: str, body: bytes) -> None:
    channel.basic_publish(exchange, routing_key, body, pika.BasicProperties(delivery_mode=2), mandatory=True)


def _publish_confirmed(channel: BlockingChannel, queue: str, count: int) -> tuple[list[bytes], list[bytes]]:
    """Publish `count` messages to `queue` with confirms: (confirmed bodies, bodies the broker nacked)."""
    confirmed, refused = [], []
    for n in range(count):
        body = f"m{n}".encode()
        try:
            _publish(channel, "", queue, body)
        except NackError:
            refused.append(body)
        else:
            confirmed.append(body)
    return confirmed, refused


def _take(channel: BlockingChannel, queue: str) -> int:
    """The delivery tag of the next message `queue` delivers (within QUIET_S)."""
    deadline = time.monotonic() + QUIET_S
    while (method := channel.basic_get(queue)[0]) is None:
        assert time.monotonic() < deadline, f"nothing in {queue} within {QUIET_S}s"
        time.sleep(0.02)
    return int(method.delivery_tag)


def _drain(channel: BlockingChannel, queue: str, quiet_s: float = QUIET_S) -> list[bytes]:
    """Take (and ack) whatever `queue` delivers until it delivers nothing for `quiet_s`."""
    bodies: list[bytes] = []
    deadline = time.monotonic() + quiet_s
    while time.monotonic() < deadline:
        method, _, body = channel.basic_get(queue)
        if method is None:
            time.sleep(0.05)
            continue
        channel.basic_ack(method.delivery_tag)
        bodies.append(body)
        deadline = time.monotonic() + quiet_s
    return bodies


def test_the_merge_the_checks_compute_is_the_one_the_broker_reports(
        broker: Broker, deploy: Deployer, monkeypatch: pytest.MonkeyPatch) -> None:
    """User policy vs operator policy (lower value wins), and a policy skipped for a queue type whose
    refused key it carries (delivery-limit on classic queues)."""
    config = {
        "queues": [{"name": "q", "type": "quorum", "retry": {"delays": ["1s"], "max_retries": 1}},
                   {"name": "c", "type": "classic", "max_length": 10, "retry": {"delays": ["1s"]}},
                   {"name": "audit", "type": "classic"}],
        "policies": [{"name": "audit-limits", "pattern": "^audit$", "definition": {"max-length": 50,
                                                                                   "delivery-limit": 3}}],
        "operator_policies": [
            {"name": "ops", "pattern": ".*", "definition": {"message-ttl": 600, "max-length": 5, "delivery-limit": 4}},
            {"name": "ops-classic", "pattern": "^c", "definition": {"max-length": 7}}],
    }
    deployment = _apply_anyway(deploy, monkeypatch, config, "vhost.operator_policies[ops].definition.message-ttl")
    plan = plan_vhost(load_vhost(deployment.config, "vhost"))
    graph = _graph(plan, ())
    expected = {}
    for name, queue in graph.queues.items():
        policy = winners(graph.policies.matching_queue(queue))[0]
        operator = winners(graph.operator_policies.matching_queue(queue))[0]
        # The broker reports the policies' merge; queue arguments are not part of it.
        merged = merge(queue.__class__(queue.key, name, queue.queue_type, {}, queue.role), policy, operator)
        expected[name] = (policy and policy.name, operator and operator.name,
                          {key: setting.value for key, setting in merged.settings.items()})
    assert expected["audit"] == (None, None, {})          # delivery-limit: neither policy applies
    assert expected["q"][2] == {"delivery-limit": 4, "message-ttl": 600, "max-length": 5}
    deadline = time.monotonic() + STATS_S
    while True:
        reported = {}
        for name in expected:
            stats = get(broker, f"queues/{esc(deployment.vhost)}/{esc(name)}")
            reported[name] = (stats.get("policy") or None, stats.get("operator_policy") or None,
                              stats.get("effective_policy_definition") or {})
        if reported == expected or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert reported == expected


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_an_operator_ttl_on_every_queue_loses_waiting_and_parked_messages(
        broker: Broker, deploy: Deployer, monkeypatch: pytest.MonkeyPatch, queue_type: str) -> None:
    config = {"queues": [{"name": "q", "type": queue_type, "retry": {"delays": ["60s"]}}],
              "operator_policies": [{"name": "ttl", "pattern": ".*", "definition": {"message-ttl": TTL_MS}}]}
    deployment = _apply_anyway(deploy, monkeypatch, config, "vhost.operator_policies[ttl].definition.message-ttl: "
                                                            f'message-ttl {TTL_MS} reaches input queue "q"')
    contract = deployment.contracts["q"]
    _in_force(broker, deployment.vhost, "q", "message-ttl", TTL_MS)
    with _channel(broker, deployment.vhost) as channel:
        _publish(channel, "", "q", b"waiting")
        _publish(channel, contract["error_exchange"], "", b"parked")
        time.sleep(QUIET_S)         # nobody consumes: the waiting message only meets TTLs
        assert _drain(channel, "q") == []
        assert _drain(channel, contract["error_queue"], 0.5) == []
        assert message_count(channel, contract["tiers"][0]["queue"]) == 0


def test_a_lower_operator_ttl_shortens_a_wait_tier(
        broker: Broker, deploy: Deployer, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"queues": [{"name": "q", "type": "quorum", "retry": {"delays": ["30m"]}}],
              "operator_policies": [{"name": "ttl", "pattern": r"\.wait\.", "definition": {"message-ttl": TTL_MS}}]}
    deployment = _apply_anyway(deploy, monkeypatch, config, "vhost.operator_policies[ttl].definition.message-ttl: "
                                                            f'message-ttl {TTL_MS} on wait queue "q.wait.1"')
    _in_force(broker, deployment.vhost, "q.wait.1", "message-ttl", TTL_MS)
    with _channel(broker, deployment.vhost) as channel:
        _publish(channel, "", "q", b"retried")
        channel.basic_reject(_take(channel, "q"), requeue=False)    # retry: 30 minutes in tier 1, planned
        assert _drain(channel, "q") == [b"retried"], "the retry did not come back within seconds"


def test_an_operator_delivery_limit_at_max_retries_plus_one_jams_messages(
        broker: Broker, deploy: Deployer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both brokers: a fresh message returned max_retries + 2 times is dead-lettered (delivery_limit)
    into the wait tier, whose way back is a cycle: it jams (tests/broker/test_delivery_limit.py)."""
    config = {"queues": [{"name": "q", "type": "quorum", "retry": {"delays": [f"{TTL_MS}ms"], "max_retries": 1}}],
              "operator_policies": [{"name": "limit", "pattern": "^q$", "definition": {"delivery-limit": 2}}]}
    deployment = _apply_anyway(deploy, monkeypatch, config, "vhost.operator_policies[limit].definition.delivery-limit: "
                                                            'delivery-limit 2 on quorum queue "q"')
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    _in_force(broker, vhost, "q", "delivery-limit", 2)
    with _channel(broker, vhost) as channel:
        _publish(channel, "", "q", b"fresh")
        for _ in range(3):                          # the third return is over the operator's limit of 2
            channel.basic_reject(_take(channel, "q"), requeue=True)
        _settles(broker, vhost, {"q": EMPTY, wait: _jammed(wait)}, channel)


def test_an_operator_max_length_without_reject_publish_drops_waiting_messages(
        broker: Broker, deploy: Deployer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Classic queue, drop-head: the oldest message goes round the retry loop unseen, pushes the next one
    out when it returns, and is dropped the second time round (a cycle with no rejection)."""
    config = {"queues": [{"name": "q", "type": "classic", "retry": {"delays": [f"{TTL_MS}ms"]}}],
              "operator_policies": [{"name": "length", "pattern": "^q$", "definition": {"max-length": 1}}]}
    deployment = _apply_anyway(deploy, monkeypatch, config, "vhost.operator_policies[length].definition.max-length: "
                                                            'max-length 1 on input queue "q"')
    _in_force(broker, deployment.vhost, "q", "max-length", 1)
    with _channel(broker, deployment.vhost) as channel:
        _publish(channel, "", "q", b"first")
        _publish(channel, "", "q", b"second")
        time.sleep(QUIET_S)                        # nobody consumes
        assert len(_drain(channel, "q")) == 1, "both messages survived"


def test_an_operator_max_length_on_quorum_queues_refuses_publishes_and_loses_nothing(
        broker: Broker, deploy: Deployer) -> None:
    config = {"queues": [{"name": "q", "type": "quorum", "retry": {"delays": [f"{TTL_MS}ms"]}}],
              "operator_policies": [{"name": "length", "pattern": "^q", "definition": {"max-length": 1}}]}
    assert _problems(deploy.vhost, config) == []
    deployment = deploy(config)
    _in_force(broker, deployment.vhost, "q", "max-length", 1)
    with _channel(broker, deployment.vhost) as channel:
        confirmed, refused = _publish_confirmed(channel, "q", 5)
        assert refused                      # reject-publish: the publisher knows (quorum queues refuse once over)
        for _ in confirmed:                 # every confirmed message retried once, through the limited wait tier
            channel.basic_reject(_take(channel, "q"), requeue=False)
        assert sorted(_drain(channel, "q")) == confirmed



def test_an_operator_max_length_on_a_classic_queue_with_its_own_max_length_refuses_publishes_and_loses_nothing(
        broker: Broker, deploy: Deployer) -> None:
    """The fix preview offers on every broker (3.10.8 refuses overflow in an operator policy): the queue's own
    max_length, whose policy carries overflow reject-publish, which the broker keeps under the operator's lower
    max-length."""
    config = {"queues": [{"name": "q", "type": "classic", "max_length": 1000, "retry": {"delays": [f"{TTL_MS}ms"]}}],
              "operator_policies": [{"name": "length", "pattern": "^q$", "definition": {"max-length": 2}}]}
    unfixed = {**config, "queues": [{k: v for k, v in config["queues"][0].items() if k != "max_length"}]}
    assert any('set max_length on queue "q"' in problem for problem in _problems(deploy.vhost, unfixed))
    assert _problems(deploy.vhost, config) == []
    deployment = deploy(config)
    _in_force(broker, deployment.vhost, "q", "max-length", 2)
    _in_force(broker, deployment.vhost, "q", "overflow", "reject-publish")
    with _channel(broker, deployment.vhost) as channel:
        confirmed, refused = _publish_confirmed(channel, "q", 4)
        assert refused, "the operator's max-length refused nothing"
        assert sorted(_drain(channel, "q")) == confirmed, "a confirmed message left the queue unseen"
        assert _drain(channel, "q.wait.1", quiet_s=0.5) == []

# --- the quorum error queue's delivery limit -------------------------------------------------------------

def test_a_parked_message_survives_any_number_of_crashed_readers(broker: Broker, deploy: Deployer) -> None:
    """A quorum error queue has nowhere to dead-letter: RabbitMQ 4's default delivery limit (20) drops a
    message returned that often (shown on a queue without our policy); ours sets it out of reach."""
    deployment = deploy({"queues": [{"name": "q", "type": "quorum", "retry": {"delays": ["1s"]}},
                                    {"name": "bare", "type": "quorum"}]})
    vhost = deployment.vhost
    _in_force(broker, vhost, "q.error", "delivery-limit", 1_000_000)
    # `bare` is a plain quorum queue: its policy sets our default limit (20) explicitly on 3.10 and 4.x.
    _in_force(broker, vhost, "bare", "delivery-limit", 20)
    with _channel(broker, vhost) as publisher:
        _publish(publisher, "q.error", "", b"parked")
        _publish(publisher, "", "bare", b"plain")
    assert returned_by_crashed_readers(broker, vhost, "q.error", 25)
    assert not returned_by_crashed_readers(broker, vhost, "bare", 25), "the limit of 20 did not drop it"
