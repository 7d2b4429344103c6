"""How messages move through a deployed retry topology, driven by rabbitmq_retry_client.

Issue behaviours: (1) a rejected message comes back through tier 1, never before its delay; (2) a retry
reaches only the queue that failed, not the other queues bound to the same exchange; (3) republish mode
steps through the tiers and parks after max_retries, exactly once, with its headers; (4) reject mode
counts attempts from the broker's x-death on every broker and parks after max_retries; (6) nothing is
lost under volume, with random failures, tiers and parking, and (quorum, 4.3) across a broker restart; copies
refused while others are in flight (a missing exchange, an unroutable key) requeue their originals, never ack them.

These tests assert what is always true: never early, which tier (from the broker's x-death), order,
counts, nothing lost, nothing doubled. How late a message comes back depends on the machine's load and
is measured by `python -m bench.retry_timing`, never asserted here. Delays are a few hundred ms to keep
each broker's run short; the run timeouts are generous bounds for an eventual condition.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pika.spec import BasicProperties

from bench import retry_timing
from rabbitmq_retry_client import Handler, Mode, PermanentError, RetryingConsumer
from rabbitmq_retry_client.headers import rejected_attempts
from rabbitmq_retry_client.policies import Decision, Delivered
from tests.support.admin import wait_for
from tests.support.amqp import channel, drain, message_counts, next_message, parameters
from tests.support.mirror import Broker
from tests.support.retrying import Delivery, Recorder, consumer_of, publish_ids, retryable_queue, run_consumers

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

ROOT = Path(__file__).resolve().parents[2]
BROKERS_SH = ROOT / "scripts" / "brokers.sh"

EARLY_MS = 5
"""Clock tolerance for "never early": a delivery's time is taken in the handler, the wait's start after
the previous one returned (measured: at most 1 ms before the TTL)."""
BROKER_CLOCK = timedelta(seconds=1)
"""x-death's `time` is the broker's clock in whole seconds."""


def _deaths(delivery: Delivery) -> set[tuple[str, str]]:
    """(queue, reason) of each x-death entry the broker wrote on this delivery."""
    return {(str(e["queue"]), str(e["reason"])) for e in delivery.headers.get("x-death") or []}


def _first_failure_at(headers: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(headers["first-failure-at"]).replace("Z", "+00:00"))


# --- 1. back after tier 1 ---------------------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_rejected_message_comes_back_through_tier_one_never_before_its_delay(
        broker: Broker, deploy: Deployer, queue_type: str, consumer_kind: str) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("timed", queue_type, ["300ms", "1s"], 1)]})
    contract = deployment.contracts["timed"]
    ids = [f"t{i}" for i in range(30)]
    recorder = Recorder(lambda _: 1)
    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), contract, recorder, "reject")
    publish_ids(broker, deployment.vhost, "in", ids)
    run_consumers([consumer], lambda: consumer.processed >= len(ids), timeout=60)

    assert (consumer.processed, consumer.retried, consumer.parked) == (len(ids), len(ids), 0)
    assert sorted(recorder.succeeded) == sorted(ids)
    for message_id in ids:
        first, second = recorder.deliveries[message_id]
        assert _deaths(first) == set()
        assert _deaths(second) == {("timed", "rejected"), ("timed.wait.1", "expired")}, message_id
        [gap] = recorder.gaps_ms(message_id)
        assert gap >= 300 - EARLY_MS, f"{message_id} came back {300 - gap:.0f} ms before tier 1's 300 ms"


# --- 2. isolation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reject", "republish"])
def test_retry_reaches_only_the_failing_queue(broker: Broker, deploy: Deployer, mode: Mode) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("fine", "classic", ["200ms"], 2),
                                    retryable_queue("flaky", "classic", ["200ms"], 2)]})
    params = parameters(broker, deployment.vhost)
    ids = [f"i{i}" for i in range(5)]
    fine, flaky = Recorder(lambda _: 0), Recorder(lambda _: 1)
    fine_consumer = RetryingConsumer(params, deployment.contracts["fine"], fine, mode)
    flaky_consumer = RetryingConsumer(params, deployment.contracts["flaky"], flaky, mode)
    publish_ids(broker, deployment.vhost, "in", ids)
    run_consumers([flaky_consumer], lambda: flaky_consumer.processed >= len(ids), timeout=30)
    fine_consumer.run(idle_timeout=0.5)  # everything the fine queue received meanwhile
    fine_consumer.close()

    assert flaky_consumer.retried == len(ids) and flaky_consumer.processed == len(ids)
    assert {i: len(d) for i, d in flaky.deliveries.items()} == dict.fromkeys(ids, 2)
    assert {i: len(d) for i, d in fine.deliveries.items()} == dict.fromkeys(ids, 1)
    assert fine_consumer.retried == 0
    leftovers = message_counts(broker, deployment.vhost,
                               ["fine", "fine.wait.1", "fine.error", "flaky", "flaky.wait.1", "flaky.error"])
    assert leftovers == dict.fromkeys(leftovers, 0)


# --- 3. stepped back-off ----------------------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_republish_steps_through_the_tiers_then_parks_once(broker: Broker, deploy: Deployer, queue_type: str,
                                                           consumer_kind: str) -> None:
    delays, max_retries = [200, 300, 500], 5
    deployment = deploy({"exchanges": [{"name": "in", "type": "topic"}],
                         "queues": [retryable_queue("stepped", queue_type, [f"{d}ms" for d in delays], max_retries,
                                                    routing_key="order.*")]})
    contract = deployment.contracts["stepped"]
    ids = [f"s{i}" for i in range(5)]
    recorder = Recorder(lambda _: 10**6)
    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), contract, recorder, "republish")
    publish_ids(broker, deployment.vhost, "in", ids, routing_key="order.created", content_type="text/plain")
    run_consumers([consumer], lambda: consumer.parked >= len(ids), timeout=60)
    consumer.run(idle_timeout=0.7)  # nothing else may come back
    consumer.close()

    # Attempt n waits in tier min(n, 3): 200 300 500 500 500 ms. Each copy carries only the x-death of the
    # tier it waited in (the client drops the history), so the broker names the tier.
    steps = [contract["tiers"][min(n, len(delays)) - 1] for n in range(1, max_retries + 1)]
    for message_id in ids:
        deliveries = recorder.deliveries[message_id]
        assert len(deliveries) == max_retries + 1, message_id
        assert [d.headers.get("retry-count") for d in deliveries] == [None, *range(1, max_retries + 1)]
        assert [_deaths(d) for d in deliveries[1:]] == [{(t["queue"], "expired")} for t in steps], message_id
        for n, (gap, tier) in enumerate(zip(recorder.gaps_ms(message_id), steps, strict=True), start=1):
            assert gap >= tier["delay_ms"] - EARLY_MS, (
                f"attempt {n + 1} of {message_id} came after {gap:.0f} ms, before {tier['queue']}'s "
                f"{tier['delay_ms']} ms")

    parked = drain(broker, deployment.vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == ids, "each message parked exactly once"
    for properties, body in parked:
        headers = properties.headers or {}
        assert body == properties.message_id.encode()
        assert properties.delivery_mode == 2 and properties.content_type == "text/plain"
        assert headers["attempts"] == max_retries + 1
        assert headers["error-queue"] == "stepped"
        assert headers["error-reason"] == f"RuntimeError: planned failure {max_retries + 1} of {properties.message_id}"
        assert headers["original-exchange"] == "in" and headers["original-routing-key"] == "order.created"
        assert headers["app"] == "test"
        # Recorded at the first failure: after the first delivery began, before the second.
        first, second = recorder.deliveries[properties.message_id][:2]
        assert first.at - timedelta(milliseconds=EARLY_MS) <= _first_failure_at(headers) <= second.at
        # No dead-letter history is copied; a quorum error queue adds its own delivery counters on delivery.
        broker_added = {k for k in headers if k.startswith("x-")} - {"x-delivery-count", "x-acquired-count"}
        assert "retry-count" not in headers and not broker_added, str(headers)
    leftovers = message_counts(broker, deployment.vhost, ["stepped", *(t["queue"] for t in contract["tiers"])])
    assert leftovers == dict.fromkeys(leftovers, 0)


# --- 4. reject mode counts from x-death ----------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_reject_mode_counts_attempts_from_x_death_and_parks(broker: Broker, deploy: Deployer, queue_type: str,
                                                            consumer_kind: str) -> None:
    max_retries = 3
    deployment = deploy({"exchanges": [{"name": "in", "type": "direct"}],
                         "queues": [retryable_queue("plain", queue_type, ["200ms", "2s"], max_retries,
                                                    routing_key="job")]})
    contract = deployment.contracts["plain"]
    ids = [f"r{i}" for i in range(5)]
    recorder = Recorder(lambda _: 10**6)
    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), contract, recorder, "reject")
    publish_ids(broker, deployment.vhost, "in", ids, routing_key="job")
    run_consumers([consumer], lambda: consumer.parked >= len(ids), timeout=60)
    consumer.run(idle_timeout=0.7)
    consumer.close()

    for message_id in ids:
        deliveries = recorder.deliveries[message_id]
        seen = [rejected_attempts(d.headers, "plain") for d in deliveries]
        assert seen == list(range(max_retries + 1)), f"{message_id}: x-death counts {seen}"
        # Reject mode always routes to tier 1: every wait is in plain.wait.1, never in tier 2.
        assert all(_deaths(d) == {("plain", "rejected"), ("plain.wait.1", "expired")} for d in deliveries[1:])
        assert min(recorder.gaps_ms(message_id)) >= 200 - EARLY_MS, message_id

    parked = drain(broker, deployment.vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == ids
    for properties, _ in parked:
        headers = properties.headers or {}
        assert headers["attempts"] == max_retries + 1
        assert headers["original-exchange"] == "in" and headers["original-routing-key"] == "job"
        assert headers["error-queue"] == "plain" and headers["error-reason"].startswith("RuntimeError")
        # x-death's time of the first rejection, in the broker's whole seconds.
        first, second = recorder.deliveries[properties.message_id][:2]
        assert first.at - BROKER_CLOCK <= _first_failure_at(headers) <= second.at + BROKER_CLOCK
        assert "x-death" not in headers
    assert consumer.retried == len(ids) * max_retries and consumer.processed == 0


# --- 6. no loss ---------------------------------------------------------------------------------------

NO_LOSS_MESSAGES = 2000
NO_LOSS_CONSUMERS = 4


def _restart_4_3() -> None:
    """Restart the 4.3 broker with scripts/brokers.sh (waits until AMQP and management answer)."""
    result = subprocess.run([str(BROKERS_SH), "restart", "4.3"], capture_output=True, text=True, timeout=300,
                            check=False)
    if result.returncode != 0:
        pytest.fail(f"scripts/brokers.sh restart 4.3 failed: {result.stdout}{result.stderr}", pytrace=False)


@pytest.mark.parametrize(("queue_type", "mode", "restart"), [
    ("classic", "republish", False),
    ("classic", "reject", False),
    ("quorum", "republish", False),
    ("quorum", "reject", False),
    ("quorum", "republish", True),
], ids=["classic-republish", "classic-reject", "quorum-republish", "quorum-reject", "quorum-republish-restart"])
def test_no_message_is_lost(broker: Broker, deploy: Deployer, queue_type: str, mode: Mode, restart: bool,
                            consumer_kind: str) -> None:
    if restart and broker.name != "4.3":
        pytest.skip("the restart sub-case runs on the 4.3 broker only")
    if restart and not BROKERS_SH.exists():
        pytest.skip("scripts/brokers.sh is missing: cannot restart the broker")
    max_retries = 3
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("bulk", queue_type, ["200ms", "400ms"], max_retries)]})
    contract = deployment.contracts["bulk"]
    rng = random.Random(20240611)
    # 0..4 failures: 4 is more than max_retries, so about a seventh of the messages are parked.
    plan = {f"m{i:04d}": rng.choice([0, 0, 1, 1, 2, 3, 4]) for i in range(NO_LOSS_MESSAGES)}
    recorder = Recorder(plan.__getitem__)
    params = parameters(broker, deployment.vhost)

    def slow_handler(body: bytes, properties: BasicProperties) -> None:
        if restart:
            time.sleep(0.005)  # keep messages in flight while the broker goes down
        recorder(body, properties)

    handler: Handler = slow_handler
    consumers = [consumer_of(consumer_kind, params, contract, handler, mode, reconnect_timeout=180,
                             publish_failure_pause=0.2)
                 for _ in range(NO_LOSS_CONSUMERS)]
    started = time.monotonic()
    publish_ids(broker, deployment.vhost, "in", list(plan))

    def settled() -> int:
        return sum(c.processed + c.parked for c in consumers)

    restarted_at: list[int] = []
    if restart:
        def restart_midway() -> None:
            while settled() < NO_LOSS_MESSAGES // 4 and time.monotonic() - started < 60:
                time.sleep(0.01)
            restarted_at.append(settled())
            _restart_4_3()

        restarter = threading.Thread(target=restart_midway, daemon=True)
        restarter.start()
    run_consumers(consumers, lambda: settled() >= NO_LOSS_MESSAGES and not (restart and restarter.is_alive()),
         timeout=240)
    if restart:
        restarter.join()
    # Stragglers: duplicates redelivered after the restart, or anything still in a wait queue (the
    # stopped consumers gave their prefetched messages back, so one consumer sees them all).
    consumers[0].run(idle_timeout=1.0)
    consumers[0].close()
    elapsed = time.monotonic() - started

    parked_ids = [str(p.message_id) for p, _ in drain(broker, deployment.vhost, contract["error_queue"])]
    processed, parked, published = set(recorder.succeeded), set(parked_ids), set(plan)
    lost = published - processed - parked
    duplicates = (len(recorder.succeeded) - len(processed)) + (len(parked_ids) - len(parked))
    both = processed & parked
    leftovers = message_counts(broker, deployment.vhost, ["bulk", *(t["queue"] for t in contract["tiers"])])
    totals = Counter({name: sum(getattr(c, name) for c in consumers)
                      for name in ("processed", "retried", "parked", "requeued", "reconnects")})
    print(f"\n[{broker.name} {queue_type} {mode}{' restart' if restart else ''}] {len(published)} published in "
          f"{elapsed:.1f}s: processed {len(processed)}, parked {len(parked)}, lost {len(lost)}, "
          f"duplicates {duplicates} (processed and parked: {len(both)}); deliveries "
          f"{sum(len(d) for d in recorder.deliveries.values())}; counters {dict(totals)}"
          + (f"; restart began after {restarted_at[0]} settled" if restarted_at else ""))

    assert not lost, f"lost {len(lost)}: {sorted(lost)[:10]}"
    assert processed | parked == published
    assert leftovers == dict.fromkeys(leftovers, 0)
    if restart:
        assert totals["reconnects"] >= 1, "the consumers never saw the restart"
    else:
        assert duplicates == 0 and not both
        assert parked == {i for i, failures in plan.items() if failures > max_retries}


# --- copies in flight when the confirm channel dies ----------------------------------------------------

POISONED = {"f05", "f17", "f18"}
"""Their first copy goes to an exchange that does not exist (the broker closes the confirm channel: 404), or
with a routing key nothing is bound to (a basic.return, then its ack)."""


@pytest.mark.parametrize("poison", ["missing-exchange", "unroutable"])
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_copies_refused_mid_flight_requeue_their_originals_lose_nothing_and_ack_nothing_early(
        broker: Broker, deploy: Deployer, queue_type: str, poison: str, caplog: pytest.LogCaptureFixture) -> None:
    """Copies go out without waiting for their confirms; among them a few the broker refuses. A missing exchange
    kills the confirm channel: every copy in flight on it has its original requeued (the poisoned ones had no
    copy at all: never acked). An unroutable copy is returned: exactly its original is requeued, the others
    in flight around it are acked. The consuming channel stays open, and every message still reaches its handler
    through a confirmed retry: the handler fails every delivery without `retry-count`, so a success proves the
    copy existed."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("flight", queue_type, ["200ms"], 3)]})
    ids = [f"f{i:02d}" for i in range(40)]
    deliveries: dict[str, list[Any]] = {i: [] for i in ids}
    succeeded: list[str] = []

    def handler(body: bytes, properties: BasicProperties) -> None:
        message_id, attempt = str(properties.message_id), (properties.headers or {}).get("retry-count")
        deliveries[message_id].append(attempt)
        if not attempt:
            raise RuntimeError(f"first attempt of {message_id}")
        succeeded.append(message_id)

    consumer = RetryingConsumer(parameters(broker, deployment.vhost), deployment.contracts["flight"], handler,
                                "republish", prefetch=10, publish_failure_pause=0.05)
    route, fail = consumer.policy.retry_route, consumer.policy.on_failure
    poisoned: list[str] = []
    retrying: list[str] = []

    def tracking(delivered: Delivered, reason: Any, *, permanent: bool = False) -> Decision:
        retrying.append(str(delivered.message_id))
        return fail(delivered, reason, permanent=permanent)

    def poisoning_route(attempt: int) -> tuple[str, str, int]:
        # The delivery being retried (handlers of deliveries already received run back to back before any is
        # settled, so the last one handled need not be it).
        message_id = retrying[-1]
        if message_id in POISONED and message_id not in poisoned:
            poisoned.append(message_id)
            return ("no-such-exchange", "wait.1", 200) if poison == "missing-exchange" else (
                "flight.retry", "nowhere", 200)
        return route(attempt)

    consumer.policy.retry_route = poisoning_route
    consumer.policy.on_failure = tracking  # type: ignore[method-assign]
    publish_ids(broker, deployment.vhost, "in", ids)
    with caplog.at_level(logging.ERROR, logger="rabbitmq_retry_client"):
        run_consumers([consumer], lambda: set(succeeded) >= set(ids), timeout=60)
        consumer.run(idle_timeout=0.7)  # the duplicates of copies confirmed too late, if any
    consumer.close()

    requeued = [str(r.args[0]) for r in caplog.records if str(r.msg).startswith("could not publish")]
    print(f"\n[{broker.name} {queue_type}] requeued {len(requeued)} originals: {requeued}; retried "
          f"{consumer.retried}, processed {consumer.processed}")
    assert sorted(poisoned) == sorted(POISONED)
    assert set(succeeded) == set(ids), f"lost: {sorted(set(ids) - set(succeeded))}"
    assert set(requeued) >= POISONED and consumer.requeued == len(requeued)
    for message_id in POISONED:  # requeued as it was, failed again, then retried through a real copy
        assert deliveries[message_id][:2] == [None, None] and deliveries[message_id][-1] == 1, deliveries[message_id]
    # Only an original requeued while its copy was in flight may succeed twice (a duplicate, never a loss).
    twice = {i for i in ids if succeeded.count(i) > 1}
    assert twice <= set(requeued), twice
    assert consumer.retried == len(ids), "one confirmed retry per message: a refused one is not counted"
    assert consumer.processed == len(succeeded) and consumer.reconnects == 0
    if poison == "unroutable":  # the channel stayed open: only the returned copies' originals were requeued
        assert sorted(requeued) == sorted(POISONED) and not twice
    leftovers = message_counts(broker, deployment.vhost, ["flight", "flight.wait.1", "flight.error"])
    assert leftovers == dict.fromkeys(leftovers, 0)


# --- delivery limit ---------------------------------------------------------------------------------

def test_a_message_that_keeps_crashing_consumers_is_parked_before_the_delivery_limit(
        broker: Broker, deploy: Deployer) -> None:
    """Consumers that die holding a message return it; the broker's own limit would jam it in a
    dead-letter cycle (tests/broker/test_delivery_limit.py), so the client parks it first."""
    queue = retryable_queue("crashy", "quorum", ["200ms"], 1)
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}], "queues": [{**queue, "delivery_limit": 3}]})
    contract = deployment.contracts["crashy"]
    assert contract["delivery_limit"] == 3  # the lowest the config takes for max_retries 1
    publish_ids(broker, deployment.vhost, "in", ["poison"])
    for _ in range(3):  # three consumer crashes: the connection closes with the message unacked
        with channel(broker, deployment.vhost) as crashing:
            assert next_message(crashing, "crashy", timeout=30) is not None, "the message did not come back"
    handled = Recorder(lambda _: 0)
    consumer = RetryingConsumer(parameters(broker, deployment.vhost), contract, handled, "reject")
    run_consumers([consumer], lambda: consumer.parked >= 1, timeout=30)

    parked = drain(broker, deployment.vhost, "crashy.error")
    assert consumer.parked == 1 and consumer.processed == 0, "the handler must not see it again"
    assert [p.headers["error-reason"] for p, _ in parked] == ["x-delivery-count 3 reached the delivery limit 3"]
    assert message_counts(broker, deployment.vhost, ["crashy", "crashy.wait.1"]) == {"crashy": 0, "crashy.wait.1": 0}


# --- the timing benchmark -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reject", "republish"])
def test_the_timing_benchmark_runs(broker: Broker, mode: Mode) -> None:
    """bench/retry_timing.py on two messages, so it cannot rot; its figures are not asserted."""
    steps = retry_timing.measure(broker, "classic", mode, messages=2)
    expected = {"reject": [("timed.wait.1", 300)] * 2,
                "republish": [("timed.wait.1", 200), ("timed.wait.2", 300), ("timed.wait.3", 500),
                              ("timed.wait.3", 500)]}[mode]
    assert [(s.attempt, s.tier, s.delay_ms, len(s.lateness_ms)) for s in steps] == [
        (n, tier, delay, 2) for n, (tier, delay) in enumerate(expected, start=2)]
    assert retry_timing.render(steps).count("\n") == len(steps) + 1


# --- handlers: permanent failures, deadlines, heartbeats, stopping ----------------------------------------

@pytest.mark.parametrize("mode", ["reject", "republish"])
def test_a_permanent_failure_is_parked_at_once_without_a_retry(broker: Broker, deploy: Deployer, mode: Mode,
                                                                consumer_kind: str) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "direct"}],
                         "queues": [retryable_queue("strict", "quorum", ["200ms"], 3, routing_key="job")]})
    contract = deployment.contracts["strict"]
    ids = [f"x{i}" for i in range(5)]
    recorder = Recorder(lambda _: 0)

    def refuse(body: bytes, properties: BasicProperties) -> None:
        recorder(body, properties)
        raise PermanentError(f"malformed {properties.message_id}")

    consumer = consumer_of(consumer_kind, parameters(broker, deployment.vhost), contract, refuse, mode)
    publish_ids(broker, deployment.vhost, "in", ids, routing_key="job")
    run_consumers([consumer], lambda: consumer.parked >= len(ids), timeout=30)
    consumer.run(idle_timeout=0.5)  # nothing comes back
    consumer.close()

    assert (consumer.parked, consumer.permanent, consumer.retried, consumer.processed) == (len(ids), len(ids), 0, 0)
    assert {i: len(d) for i, d in recorder.deliveries.items()} == dict.fromkeys(ids, 1)
    parked = drain(broker, deployment.vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == ids
    for properties, _ in parked:
        headers = properties.headers or {}
        assert headers["permanent"] is True and headers["attempts"] == 1
        assert headers["error-reason"] == f"PermanentError: malformed {properties.message_id}"
        assert headers["original-exchange"] == "in" and headers["original-routing-key"] == "job"
    assert message_counts(broker, deployment.vhost, ["strict", "strict.wait.1"]) == {"strict": 0, "strict.wait.1": 0}


def test_the_handler_runs_in_one_worker_thread_for_every_delivery(broker: Broker, deploy: Deployer) -> None:
    """Not a thread per delivery: a handler may keep per-thread state (a database connection) across deliveries."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("steady", "classic", ["50ms"], 2)]})
    recorder = Recorder(lambda _: 1)
    threads: set[int] = set()

    def handler(body: bytes, properties: BasicProperties) -> None:
        threads.add(threading.get_ident())
        recorder(body, properties)

    consumer = RetryingConsumer(parameters(broker, deployment.vhost), deployment.contracts["steady"], handler,
                                "republish")
    publish_ids(broker, deployment.vhost, "in", [f"s{i}" for i in range(5)])
    run_consumers([consumer], lambda: consumer.processed >= 5, timeout=30)
    assert (consumer.retried, consumer.processed) == (5, 5)
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_a_handler_past_its_deadline_fails_the_attempt_and_the_message_is_retried(
        broker: Broker, deploy: Deployer) -> None:
    """The abandoned handler keeps its thread; the retry runs in a new worker thread."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("slow", "classic", ["200ms"], 2)]})
    recorder = Recorder(lambda _: 0)
    release = threading.Event()
    threads: list[int] = []

    def slow_first_time(body: bytes, properties: BasicProperties) -> None:
        first = not recorder.deliveries.get(str(properties.message_id))
        threads.append(threading.get_ident())
        recorder(body, properties)
        if first:
            release.wait(30)  # far past the deadline; released at the end of the test

    consumer = RetryingConsumer(parameters(broker, deployment.vhost), deployment.contracts["slow"], slow_first_time,
                                "republish", handler_timeout=0.5)
    publish_ids(broker, deployment.vhost, "in", ["late"])
    try:
        run_consumers([consumer], lambda: consumer.processed >= 1, timeout=30)
    finally:
        release.set()
    assert (consumer.timed_out, consumer.retried, consumer.processed, consumer.parked) == (1, 1, 1, 0)
    second = recorder.deliveries["late"][1]
    assert second.headers["retry-count"] == 1
    assert len(threads) == 2 and threads[0] != threads[1]


def test_a_handler_longer_than_the_heartbeat_keeps_its_connection(broker: Broker, deploy: Deployer) -> None:
    """The handler runs in a worker thread while the consumer's thread answers heartbeats: a 1 s heartbeat
    (the broker closes a connection after two missed ones) does not drop a 4 s handler's connection."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("long", "quorum", ["200ms"], 1)]})
    recorder = Recorder(lambda _: 0)

    def long_handler(body: bytes, properties: BasicProperties) -> None:
        time.sleep(4)
        recorder(body, properties)

    params = parameters(broker, deployment.vhost)
    params.heartbeat = 1
    consumer = RetryingConsumer(params, deployment.contracts["long"], long_handler, "reject")
    publish_ids(broker, deployment.vhost, "in", ["long-1"])
    run_consumers([consumer], lambda: consumer.processed >= 1, timeout=60)
    assert (consumer.processed, consumer.reconnects, consumer.retried) == (1, 0, 0)
    assert recorder.succeeded == ["long-1"]
    assert message_counts(broker, deployment.vhost, ["long"]) == {"long": 0}


def test_stop_settles_the_delivery_in_hand_and_returns_the_prefetched_ones(broker: Broker, deploy: Deployer) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("graceful", "classic", ["200ms"], 1)]})
    ids = [f"g{i}" for i in range(5)]
    recorder = Recorder(lambda _: 0)
    started, release = threading.Event(), threading.Event()

    def blocking(body: bytes, properties: BasicProperties) -> None:
        started.set()
        release.wait(30)
        recorder(body, properties)

    consumer = RetryingConsumer(parameters(broker, deployment.vhost), deployment.contracts["graceful"], blocking,
                                "reject", prefetch=10)
    publish_ids(broker, deployment.vhost, "in", ids)
    runner = threading.Thread(target=consumer.run, daemon=True)
    runner.start()
    assert started.wait(30), "no delivery reached the handler"
    consumer.stop()
    release.set()
    runner.join(30)
    consumer.close()
    assert not runner.is_alive()
    assert (consumer.processed, recorder.succeeded) == (1, [ids[0]])
    wait_for(lambda: message_counts(broker, deployment.vhost, ["graceful"])["graceful"] == len(ids) - 1, 30,
             "the four prefetched, unhandled messages back in the queue")
    assert sorted(str(p.message_id) for p, _ in drain(broker, deployment.vhost, "graceful")) == ids[1:]


def test_the_consume_command_stops_on_sigterm_and_says_what_it_did(broker: Broker, deploy: Deployer,
                                                                  tmp_path: Path) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [retryable_queue("cli", "classic", ["200ms"], 1)]})
    contracts = tmp_path / "contracts.json"
    contracts.write_text(json.dumps({deployment.vhost: deployment.contracts}))
    publish_ids(broker, deployment.vhost, "in", [f"c{i}" for i in range(3)])
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"
    command = [sys.executable, "-m", "rabbitmq_retry_client", "--url", url, "consume", "--contract", str(contracts),
               "--queue", "cli", "--fail-rate", "0"]
    consume = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: message_counts(broker, deployment.vhost, ["cli"])["cli"] == 0, 30, "the three delivered")
    finally:
        consume.send_signal(signal.SIGTERM)
        stdout, stderr = consume.communicate(timeout=30)
    assert consume.returncode == 0, stderr
    assert "signal SIGTERM: finishing the delivery in hand, then stopping" in stdout
    last = stdout.rstrip().splitlines()[-1]
    assert last.endswith(", retried 0, parked 0 (0 permanent), requeued 0"), stdout
    processed = int(last.split()[1].rstrip(","))
    # Each message was handled and acked, or returned unhandled: none is lost or left unacknowledged.
    wait_for(lambda: processed + message_counts(broker, deployment.vhost, ["cli"])["cli"] == 3, 30,
             "every message acked or back in the queue")
