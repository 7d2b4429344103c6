"""The generated alerting rules on a real Prometheus (scripts/prometheus.sh) scraping the real brokers'
rabbitmq_prometheus (scripts/brokers.sh): a stack applied the provider's way, its rules loaded as `make alerts`
writes them (scoped to the broker by `alerts.selector`), and alerts read from Prometheus's `/api/v1/alerts`.

- a message the client parks makes `parked` fire for its queue; `rabbitmq-retry parked redrive` resolves it;
- messages waiting in an input queue whose consumer stopped make `no_consumer` fire; while it consumes, nothing;
- retry copies stranded in a wait tier (entered while a policy overrode its TTL) make `not_draining` fire;
  `rabbitmq-retry stuck redrive`, the command its annotation names, resolves it;
- a message past its quorum queue's delivery limit, jammed as a dead-letter RabbitMQ cannot forward, makes
  `dead_letters_jammed` fire, and it keeps firing until it is released (on 4.3.6 by a purge; on 3.10.8, where a
  purge leaves it, no release is tried here).

Each asserts firing and resolving, never how fast (`make bench` measures that)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest

from components.config.load import load_stack_config
from components.plan.alert_rules import rule_file, stack_rules
from components.pulumi.stack_resources import plan_stack
from rabbitmq_retry_client import PermanentError, RetryingConsumer
from rabbitmq_retry_client.cli import main
from tests.broker.test_delivery_limit import _deploy as with_delivery_limit
from tests.broker.test_delivery_limit import _jammed, _settles
from tests.support import prometheus
from tests.support.admin import version
from tests.support.amqp import channel, drain, message_counts, next_message, parameters
from tests.support.mirror import Broker
from tests.support.retrying import publish_ids, retryable_queue, run_consumers, strand_in_tier

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

STILL_FIRING_S = 30
"""Seconds a jammed dead-letter is watched after its alert fired: it stays firing, with nothing done."""
FIRES_WITHIN = 120
"""Seconds an alert is given to fire or resolve: far above scrape (2s) + the stats tick (5s) + `for`."""
ALERTS = {"selector": {}, "parked": {"for": "0s"}, "no_consumer": {"for": "0s"},
          "not_draining": {"for": "0s", "window": "10s"}, "dead_letters_jammed": {"for": "0s"}}


@pytest.fixture(scope="module", autouse=True)
def running_prometheus() -> None:
    prometheus.ensure()


def rules_for(broker: Broker, vhost_config: dict[str, Any]) -> dict[str, Any]:
    """The rules the stack holding `vhost_config` exports, scoped to `broker`'s series (label `broker`)."""
    config = load_stack_config({"vhosts": [vhost_config], "alerts": {**ALERTS, "selector": {"broker": broker.name}}})
    return rule_file(stack_rules("alerts-test", config.alerts, [p for _, p in plan_stack(config, "shovel")]))


@pytest.fixture
def work(broker: Broker, deploy: Deployer, vhost: str) -> Iterator[dict[str, Any]]:
    """Queue `work` (quorum, `tiers`) applied to the broker, its rules loaded in Prometheus."""
    config = {"name": vhost, "exchanges": [{"name": "in", "type": "topic"}],
              "queues": [retryable_queue("work", "quorum", ["100ms"], 1, routing_key="#")]}
    deployment = deploy(config)
    with prometheus.loaded(vhost, rules_for(broker, config)):
        yield {"vhost": vhost, "contracts": deployment.contracts}


def test_a_parked_message_fires_the_error_queue_alert_and_a_redrive_resolves_it(
        broker: Broker, work: dict[str, Any], tmp_path: Path) -> None:
    vhost = work["vhost"]
    parked = {"alertname": "RabbitmqRetryMessagesParked", "vhost": vhost, "queue": "work"}
    query = "/api/v1/query?query=rabbitmq_detailed_queue_messages%7Bvhost%3D%22" + vhost + "%22%7D"
    prometheus.wait(lambda: bool(prometheus.get(query)["result"]), FIRES_WITHIN, "Prometheus scrapes the queues")
    assert prometheus.alerts(**parked) == [], "nothing is parked yet"

    def failing(body: bytes, properties: pika.BasicProperties) -> None:
        raise PermanentError("bad payload")

    publish_ids(broker, vhost, "in", ["m1"], routing_key="x")
    consumer = RetryingConsumer(parameters(broker, vhost), work["contracts"]["work"], failing, "republish")
    run_consumers([consumer], lambda: consumer.parked >= 1, timeout=60)
    assert message_counts(broker, vhost, ["work.error"]) == {"work.error": 1}

    prometheus.wait(lambda: bool(prometheus.firing(**parked)), FIRES_WITHIN, "the parked alert fires")
    alert = prometheus.firing(**parked)[0]
    assert alert["labels"]["strategy"] == "tiers" and alert["labels"]["stack"] == "alerts-test"
    assert alert["annotations"]["command"].startswith(f"rabbitmq-retry parked list --stack alerts-test --vhost {vhost} "
                                                      "--queue work")

    contracts = tmp_path / "contracts.json"
    contracts.write_text(json.dumps({vhost: work["contracts"]}))
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"
    assert main(["--url", url, "parked", "redrive", "--contract", str(contracts), "--queue", "work",
                 "--to-queue"]) == 0
    prometheus.wait(lambda: not prometheus.alerts(**parked), FIRES_WITHIN, "the parked alert resolves after a redrive")


def test_messages_waiting_for_a_stopped_consumer_fire_the_no_consumer_alert(
        broker: Broker, work: dict[str, Any]) -> None:
    vhost = work["vhost"]
    rule = {"alertname": "RabbitmqRetryNoConsumer", "vhost": vhost, "queue": "work"}
    connection = pika.BlockingConnection(parameters(broker, vhost))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume("work", lambda ch, method, props, body: None)  # holds one, never acks
    publish_ids(broker, vhost, "in", [f"m{n}" for n in range(5)], routing_key="x")
    stop = threading.Event()
    # Let the consumer's connection answer heartbeats while Prometheus scrapes a consumer and 4 ready messages.
    pump = threading.Thread(target=lambda: [connection.process_data_events(0.2) for _ in iter(stop.is_set, True)])
    pump.start()
    try:
        query = ("rabbitmq_detailed_queue_consumers%7Bqueue%3D%22work%22%2Cvhost%3D%22" + vhost + "%22%7D")
        prometheus.wait(lambda: any(r["value"][1] == "1" for r in prometheus.get(f"/api/v1/query?query={query}")[
            "result"]), FIRES_WITHIN, "Prometheus sees the consumer")
        prometheus.wait(lambda: any(float(r["value"][1]) >= 4 for r in prometheus.get(
            "/api/v1/query?query=rabbitmq_detailed_queue_messages_ready%7Bqueue%3D%22work%22%2Cvhost%3D%22" + vhost
            + "%22%7D")["result"]), FIRES_WITHIN, "Prometheus sees the ready messages")
        assert prometheus.alerts(**rule) == [], "a queue with a consumer does not alert"
    finally:
        stop.set()
        pump.join()
    connection.close()  # the consumer stops; its unacknowledged message is ready again
    prometheus.wait(lambda: bool(prometheus.firing(**rule)), FIRES_WITHIN, "the no-consumer alert fires")
    assert float(prometheus.firing(**rule)[0]["value"]) == 5


def amqp_url(broker: Broker) -> str:
    return f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"


def test_retries_stranded_in_a_wait_tier_fire_not_draining_and_stuck_redrive_resolves_it(
        broker: Broker, work: dict[str, Any], tmp_path: Path) -> None:
    vhost, contract = work["vhost"], work["contracts"]["work"]
    rule = {"alertname": "RabbitmqRetryWaitNotDraining", "vhost": vhost, "watched_queue": "work.wait.1"}
    ids = [f"s{n}" for n in range(10)]
    strand_in_tier(broker, vhost, contract, ids)
    prometheus.wait(lambda: bool(prometheus.firing(**rule)), FIRES_WITHIN, "not_draining fires for the tier")
    command = prometheus.firing(**rule)[0]["annotations"]["command_contract"]
    assert command.endswith(f"rabbitmq-retry stuck redrive --contract contracts.alerts-test.json --vhost {vhost} "
                            "--queue work --tier work.wait.1")

    contracts = tmp_path / "contracts.alerts-test.json"
    contracts.write_text(json.dumps({vhost: work["contracts"]}))
    assert main(["--url", amqp_url(broker), "stuck", "redrive", "--contract", str(contracts), "--vhost", vhost,
                 "--queue", "work", "--tier", "work.wait.1"]) == 0
    prometheus.wait(lambda: not prometheus.alerts(**rule), FIRES_WITHIN, "not_draining resolves after the redrive")
    assert sorted(p.message_id for p, _ in drain(broker, vhost, "work")) == ids


def test_a_message_jammed_past_its_delivery_limit_keeps_dead_letters_jammed_firing_until_released(
        broker: Broker, deploy: Deployer, vhost: str) -> None:
    deployment = with_delivery_limit(deploy, delivery_limit=1)
    wait = deployment.contracts["q"]["tiers"][0]["queue"]
    config = {"name": vhost, "queues": [{"name": "q", "type": "quorum",
                                         "retry": {"delays": ["200ms"], "max_retries": 3}}]}
    rule = {"alertname": "RabbitmqRetryDeadLettersJammed", "vhost": vhost, "watched_queue": wait}
    with prometheus.loaded(vhost, rules_for(broker, config)):
        with channel(broker, vhost) as opened:
            opened.basic_publish("", "q", b"jams", pika.BasicProperties(delivery_mode=2), mandatory=True)
            for _ in range(2):  # two returns: past delivery-limit 1, dead-lettered into the tier, where it jams
                delivery = next_message(opened, "q", timeout=20)
                assert delivery is not None
                opened.basic_reject(delivery[0].delivery_tag, requeue=True)
            _settles(broker, vhost, {wait: _jammed(wait)}, opened)
        prometheus.wait(lambda: bool(prometheus.firing(**rule)), FIRES_WITHIN, "dead_letters_jammed fires")
        assert prometheus.firing(**rule)[0]["value"] == "1e+00"
        time.sleep(STILL_FIRING_S)
        assert prometheus.firing(**rule), "nothing resolves it but its release"
        if version(broker) < (4,):
            return  # 3.10.8: a purge leaves it (docs/strategies.md); no release of it is proven here
        with channel(broker, vhost) as opened:
            opened.queue_purge(wait)  # 4.x: a purge deletes it
        prometheus.wait(lambda: not prometheus.alerts(**rule), FIRES_WITHIN, "dead_letters_jammed resolves")
