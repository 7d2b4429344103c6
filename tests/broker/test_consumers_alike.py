"""Both consumers, the threaded RetryingConsumer and the asyncio AsyncRetryingConsumer, on the same topology: a
connection killed by the broker (the management API closes it) loses nothing, a parked message redriven gets a
full retry budget, and each reports its retries, parkings and handler time to a `Metrics` object.

The rest of the behaviour suite (never early, each tier, parked once, no loss across a broker restart, native,
levels) runs both through the `consumer_kind` fixture in test_retry_behaviour.py, test_native_retry.py and
test_levels_retry.py.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from pika.spec import BasicProperties

from rabbitmq_retry_client import Metrics
from rabbitmq_retry_client.parked import ParkedQueue, Selection
from tests.support.admin import wait_for
from tests.support.amqp import drain, message_counts, parameters
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import (
    Recorder,
    consumer_of,
    fail_every_attempt,
    publish_ids,
    retryable_queue,
    run_consumers,
)

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

MESSAGES = 600
MAX_RETRIES = 3


def _close_connections(broker: Broker, vhost: str, at_least: int) -> int:
    """Close every client connection of `vhost` through the management API, as an operator would, once it lists
    `at_least` of them; how many were closed."""
    def listed() -> list[dict[str, Any]] | None:
        connections = call(broker, "GET", f"vhosts/{esc(vhost)}/connections")[1] or []
        return connections if len(connections) >= at_least else None

    connections = wait_for(listed, 30, f"{at_least} connections of {vhost} listed")
    for connection in connections:
        call(broker, "DELETE", f"connections/{esc(connection['name'])}")
    return len(connections)


def test_connections_closed_by_the_broker_mid_run_lose_nothing(broker: Broker, deploy: Deployer,
                                                                consumer_kind: str) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("cut", "quorum", ["200ms", "400ms"], MAX_RETRIES)]})
    contract = deployment.contracts["cut"]
    rng = random.Random(46)
    plan = {f"k{i:04d}": rng.choice([0, 0, 1, 2, 4]) for i in range(MESSAGES)}
    recorder = Recorder(plan.__getitem__)

    def slow(body: bytes, properties: BasicProperties) -> None:
        time.sleep(0.002)  # keeps deliveries and copies in flight when the connections close
        recorder(body, properties)

    params = parameters(broker, deployment.vhost)
    consumers = [consumer_of(consumer_kind, params, contract, slow, "republish", reconnect_timeout=60,
                             publish_failure_pause=0.1) for _ in range(2)]
    publish_ids(broker, deployment.vhost, "in", list(plan))
    closed: list[int] = []

    def settled() -> int:
        return sum(c.processed + c.parked for c in consumers)

    def cut_midway() -> None:
        while settled() < MESSAGES // 3:
            time.sleep(0.01)
        # The API's list lags: a connection already gone can stand for one not listed yet, so close again until
        # every consumer has lost one (and reconnected), while the run still has work left.
        while any(c.reconnects == 0 for c in consumers) and settled() < MESSAGES:
            closed.append(_close_connections(broker, deployment.vhost, at_least=2))
            time.sleep(1.0)

    cutter = threading.Thread(target=cut_midway, daemon=True)
    cutter.start()
    run_consumers(consumers, lambda: settled() >= MESSAGES and not cutter.is_alive(), timeout=180)
    consumers[0].run(idle_timeout=1.0)  # duplicates of originals whose settlement the cut lost, if any
    consumers[0].close()

    drained = drain(broker, deployment.vhost, contract["error_queue"])
    parked = {str(p.message_id) for p, _ in drained}
    processed = set(recorder.succeeded)
    assert closed and closed[0] >= 2, "the consumers' connections were closed"
    assert all(c.reconnects >= 1 for c in consumers), "every consumer lost its connection mid-run and came back"
    assert not set(plan) - processed - parked, "lost"
    # A settlement the cut lost makes a duplicate, whose extra deliveries count as attempts to the recorder: such
    # a message may be both processed and parked (at least once), never neither.
    assert parked - processed == {i for i, failures in plan.items() if failures > MAX_RETRIES} - processed
    leftovers = message_counts(broker, deployment.vhost, ["cut", *(t["queue"] for t in contract["tiers"])])
    assert leftovers == dict.fromkeys(leftovers, 0)


def test_a_parked_message_redriven_comes_back_with_a_full_retry_budget(broker: Broker, deploy: Deployer,
                                                                      consumer_kind: str) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "direct"}],
                         "queues": [retryable_queue("again", "classic", ["100ms", "200ms"], 2, routing_key="job")]})
    contract = deployment.contracts["again"]
    ids = [f"r{i}" for i in range(4)]
    fail_every_attempt(broker, deployment.vhost, contract, ids, "in", "job", idle_s=0.5, kind=consumer_kind)
    with ParkedQueue(parameters(broker, deployment.vhost), contract) as parked:
        assert parked.redrive(Selection()).moved == len(ids)

    # Fails once more, is retried once, then succeeds: a parked copy kept no attempt count.
    recorder = Recorder(lambda _: 1)
    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), contract, recorder)
    run_consumers([consumer], lambda: len(recorder.succeeded) >= len(ids), timeout=60)
    assert sorted(recorder.succeeded) == ids and consumer.parked == 0
    for message_id in ids:
        first, retry = recorder.deliveries[message_id]
        assert "retry-count" not in first.headers and first.headers["redriven-count"] == 1
        assert retry.headers["retry-count"] == 1 and retry.headers["original-routing-key"] == "job"


class _Recording(Metrics):
    def __init__(self) -> None:
        self.events: Counter[tuple[str, str]] = Counter()
        self.seconds: list[float] = []
        self.lock = threading.Lock()

    def handled(self, queue: str, seconds: float, failed: bool) -> None:
        with self.lock:
            self.events[(queue, "failed" if failed else "succeeded")] += 1
            self.seconds.append(seconds)

    def retried(self, queue: str) -> None:
        with self.lock:
            self.events[(queue, "retried")] += 1

    def parked(self, queue: str, permanent: bool) -> None:
        with self.lock:
            self.events[(queue, "permanent" if permanent else "parked")] += 1


def test_each_consumer_reports_retries_parkings_and_handler_time_per_queue(broker: Broker, deploy: Deployer,
                                                                          consumer_kind: str) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("measured", "classic", ["100ms"], 1)]})
    contract = deployment.contracts["measured"]
    plan = {"ok": 0, "once": 1, "never": 9}
    recorder = Recorder(plan.__getitem__)

    def handler(body: bytes, properties: BasicProperties) -> None:
        time.sleep(0.01)
        recorder(body, properties)

    metrics = _Recording()
    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), contract, handler, metrics=metrics)
    publish_ids(broker, deployment.vhost, "in", list(plan))
    run_consumers([consumer], lambda: consumer.processed + consumer.parked >= len(plan), timeout=60)
    # ok: 1 success; once: a failure, a retry, a success; never: two failures, a retry, parked.
    assert metrics.events == Counter({("measured", "succeeded"): 2, ("measured", "failed"): 3,
                                      ("measured", "retried"): 2, ("measured", "parked"): 1})
    assert len(metrics.seconds) == 5 and min(metrics.seconds) >= 0.01


def test_a_single_yes_from_until_stops_the_consumer(broker: Broker, deploy: Deployer, consumer_kind: str) -> None:
    """`run_consumers` and the cluster tests ask `until()` from every consumer and answer yes once per look."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("asked", "classic", ["100ms"], 1)]})
    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), deployment.contracts["asked"],
                           Recorder(lambda _: 0))
    answers = iter([False, False, True])

    def once() -> bool:
        return next(answers, False)

    consumer.run(until=once)  # returns: a consumer that asked again would get no forever
    consumer.close()
    assert next(answers, None) is None
