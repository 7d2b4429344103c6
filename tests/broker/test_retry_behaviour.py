"""How messages move through a deployed retry topology, driven by examples/retry_client.py.

Issue behaviours: (1) a rejected message comes back after tier 1's delay; (2) a retry reaches only the
queue that failed, not the other queues bound to the same exchange; (3) republish mode steps through
the tiers and parks after max_retries, exactly once, with its headers; (4) reject mode counts attempts
from the broker's x-death on every broker and parks after max_retries; (6) nothing is lost under
volume, with random failures, tiers and parking, and (quorum, 4.3) across a broker restart.

Delays are a few hundred ms to keep each broker's run short. Measured figures are printed (`pytest -s`).
"""

from __future__ import annotations

import random
import statistics
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pika.spec import BasicProperties

from examples.retry_client import Handler, Mode, Publisher, RetryingConsumer, rejected_attempts
from tests.support.amqp import channel, message_count
from tests.support.amqp import parameters as _params
from tests.support.mirror import Broker

if TYPE_CHECKING:
    from tests.broker.conftest import Deployer

ROOT = Path(__file__).resolve().parents[2]
BROKERS_SH = ROOT / "scripts" / "brokers.sh"

# Lateness of a redelivery after its tier's TTL, measured on 3.10.8 and 4.3.6 (classic and quorum, up to
# 30 messages in flight, 200-500 ms tiers): medians 2-9 ms, worst 29 ms (4.3 quorum). The bounds leave
# room for a loaded machine; a message must never come back early (beyond clock resolution).
EARLY_MS = 5
LATE_MS = 250
LATE_MEDIAN_MS = 60


_channel = partial(channel, confirms=False)
_count = message_count


def _drain(broker: Broker, vhost: str, queue: str) -> list[tuple[BasicProperties, bytes]]:
    """Every message in `queue`, removed."""
    messages = []
    with _channel(broker, vhost) as channel:
        while True:
            method, properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return messages
            messages.append((properties, body))


def _retryable(name: str, queue_type: str, delays: list[str], max_retries: int, exchange: str = "in",
               routing_key: str = "") -> dict[str, Any]:
    binding: dict[str, Any] = {"exchange": exchange}
    if routing_key:
        binding["routing_key"] = routing_key
    return {"name": name, "type": queue_type, "bindings": [binding],
            "retry": {"delays": delays, "max_retries": max_retries}}


def _run(consumers: list[RetryingConsumer], until: Callable[[], bool], timeout: float) -> None:
    """Run every consumer in its own thread (own connection) until `until()` or the timeout; re-raise
    the first consumer error."""
    deadline = time.monotonic() + timeout
    errors: list[BaseException] = []

    def stop() -> bool:
        return bool(errors) or until() or time.monotonic() > deadline

    def work(consumer: RetryingConsumer) -> None:
        try:
            consumer.run(until=stop)
        except BaseException as error:  # reported in the test's thread below
            errors.append(error)
        finally:
            consumer.close()

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 60)
    if errors:
        raise errors[0]


class Recorder:
    """A handler that fails a planned number of times per message and records every delivery."""

    def __init__(self, failures: Callable[[str], int]) -> None:
        self.failures = failures
        self.lock = threading.Lock()
        self.deliveries: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
        self.succeeded: list[str] = []

    def __call__(self, body: bytes, properties: BasicProperties) -> None:
        message_id = str(properties.message_id)
        with self.lock:
            self.deliveries[message_id].append((time.monotonic(), dict(properties.headers or {})))
            attempt = len(self.deliveries[message_id])
        if attempt <= self.failures(message_id):
            raise RuntimeError(f"planned failure {attempt} of {message_id}")
        with self.lock:
            self.succeeded.append(message_id)

    def gaps_ms(self, message_id: str) -> list[float]:
        times = [t for t, _ in self.deliveries[message_id]]
        return [(b - a) * 1000 for a, b in pairwise(times)]


def _figures(label: str, values: list[float]) -> str:
    return (f"{label}: n={len(values)} min={min(values):.0f} median={statistics.median(values):.0f} "
            f"max={max(values):.0f} ms")


def _publish_all(broker: Broker, vhost: str, exchange: str, ids: list[str], routing_key: str = "") -> None:
    with Publisher(_params(broker, vhost)) as publisher:
        for message_id in ids:
            publisher.publish(exchange, routing_key, message_id.encode(), message_id, {"app": "test"})


# --- 1. timing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_rejected_message_comes_back_after_tier_one_delay(broker: Broker, deploy: Deployer, queue_type: str) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [_retryable("timed", queue_type, ["300ms", "1s"], 1)]})
    contract = deployment.contracts["timed"]
    ids = [f"t{i}" for i in range(30)]
    recorder = Recorder(lambda _: 1)
    consumer = RetryingConsumer(_params(broker, deployment.vhost), contract, recorder, "reject")
    _publish_all(broker, deployment.vhost, "in", ids)
    _run([consumer], lambda: consumer.processed >= len(ids), timeout=20)

    assert consumer.processed == len(ids) and consumer.retried == len(ids) and consumer.parked == 0
    gaps = [gap for i in ids for gap in recorder.gaps_ms(i)]
    print(f"\n[{broker.name} {queue_type}] tier 1 = 300 ms; " + _figures("redelivered after", gaps))
    assert len(gaps) == len(ids)
    assert min(gaps) >= 300 - EARLY_MS
    assert max(gaps) <= 300 + LATE_MS
    assert statistics.median(gaps) <= 300 + LATE_MEDIAN_MS


# --- 2. isolation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reject", "republish"])
def test_retry_reaches_only_the_failing_queue(broker: Broker, deploy: Deployer, mode: Mode) -> None:
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [_retryable("fine", "classic", ["200ms"], 2),
                                    _retryable("flaky", "classic", ["200ms"], 2)]})
    params = _params(broker, deployment.vhost)
    ids = [f"i{i}" for i in range(5)]
    fine, flaky = Recorder(lambda _: 0), Recorder(lambda _: 1)
    fine_consumer = RetryingConsumer(params, deployment.contracts["fine"], fine, mode)
    flaky_consumer = RetryingConsumer(params, deployment.contracts["flaky"], flaky, mode)
    _publish_all(broker, deployment.vhost, "in", ids)
    _run([flaky_consumer], lambda: flaky_consumer.processed >= len(ids), timeout=15)
    fine_consumer.run(idle_timeout=0.5)  # everything the fine queue received meanwhile
    fine_consumer.close()

    assert flaky_consumer.retried == len(ids) and flaky_consumer.processed == len(ids)
    assert {i: len(d) for i, d in flaky.deliveries.items()} == dict.fromkeys(ids, 2)
    assert {i: len(d) for i, d in fine.deliveries.items()} == dict.fromkeys(ids, 1)
    assert fine_consumer.retried == 0
    with _channel(broker, deployment.vhost) as channel:
        leftovers = {q: _count(channel, q) for q in ("fine", "fine.wait.1", "fine.error", "flaky", "flaky.wait.1",
                                                    "flaky.error")}
    assert leftovers == dict.fromkeys(leftovers, 0)
    print(f"\n[{broker.name} {mode}] flaky saw each message twice, fine once: no retry leaked")


# --- 3. stepped back-off ----------------------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_republish_steps_through_the_tiers_then_parks_once(broker: Broker, deploy: Deployer, queue_type: str) -> None:
    delays, max_retries = [200, 300, 500], 5
    deployment = deploy({"exchanges": [{"name": "in", "type": "topic"}],
                         "queues": [_retryable("stepped", queue_type, [f"{d}ms" for d in delays], max_retries,
                                               routing_key="order.*")]})
    contract = deployment.contracts["stepped"]
    ids = [f"s{i}" for i in range(5)]
    recorder = Recorder(lambda _: 10**6)
    consumer = RetryingConsumer(_params(broker, deployment.vhost), contract, recorder, "republish")
    started = datetime.now(UTC)
    with Publisher(_params(broker, deployment.vhost)) as publisher:
        for message_id in ids:
            publisher.publish("in", "order.created", message_id.encode(), message_id, {"app": "test"},
                              content_type="text/plain")
    _run([consumer], lambda: consumer.parked >= len(ids), timeout=30)
    consumer.run(idle_timeout=0.7)  # nothing else may come back
    consumer.close()

    expected = [delays[min(n, len(delays)) - 1] for n in range(1, max_retries + 1)]  # 200 300 500 500 500
    lateness: dict[int, list[float]] = defaultdict(list)
    for message_id in ids:
        deliveries = recorder.deliveries[message_id]
        assert len(deliveries) == max_retries + 1
        assert [h.get("retry-count") for _, h in deliveries] == [None, *range(1, max_retries + 1)]
        for n, (gap, delay) in enumerate(zip(recorder.gaps_ms(message_id), expected, strict=True), start=1):
            lateness[n].append(gap)
            assert delay - EARLY_MS <= gap <= delay + LATE_MS, f"attempt {n} of {message_id} waited {gap:.0f} ms"
    print(f"\n[{broker.name} {queue_type}] expected waits {expected} ms")
    for n, gaps in lateness.items():
        print("  " + _figures(f"wait before attempt {n + 1}", gaps))

    parked = _drain(broker, deployment.vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == ids, "each message parked exactly once"
    for properties, body in parked:
        headers = properties.headers or {}
        assert body == properties.message_id.encode()
        assert properties.delivery_mode == 2 and properties.content_type == "text/plain"
        assert headers["attempts"] == max_retries + 1
        assert headers["error-queue"] == "stepped"
        assert headers["error-reason"].startswith("RuntimeError: planned failure")
        assert headers["original-exchange"] == "in" and headers["original-routing-key"] == "order.created"
        assert headers["app"] == "test"
        first = datetime.fromisoformat(headers["first-failure-at"].replace("Z", "+00:00"))
        assert started - timedelta(seconds=1) <= first <= started + timedelta(seconds=5)
        # No dead-letter history is copied; a quorum error queue adds its own delivery counters on delivery.
        broker_added = {k for k in headers if k.startswith("x-")} - {"x-delivery-count", "x-acquired-count"}
        assert "retry-count" not in headers and not broker_added, str(headers)
    with _channel(broker, deployment.vhost) as channel:
        leftovers = {q: _count(channel, q) for q in ["stepped", *(t["queue"] for t in contract["tiers"])]}
    assert leftovers == dict.fromkeys(leftovers, 0)


# --- 4. reject mode counts from x-death ----------------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_reject_mode_counts_attempts_from_x_death_and_parks(broker: Broker, deploy: Deployer, queue_type: str) -> None:
    max_retries = 3
    deployment = deploy({"exchanges": [{"name": "in", "type": "direct"}],
                         "queues": [_retryable("plain", queue_type, ["200ms", "2s"], max_retries,
                                               routing_key="job")]})
    contract = deployment.contracts["plain"]
    ids = [f"r{i}" for i in range(5)]
    recorder = Recorder(lambda _: 10**6)
    consumer = RetryingConsumer(_params(broker, deployment.vhost), contract, recorder, "reject")
    started = datetime.now(UTC)
    _publish_all(broker, deployment.vhost, "in", ids, routing_key="job")
    _run([consumer], lambda: consumer.parked >= len(ids), timeout=20)
    consumer.run(idle_timeout=0.7)
    consumer.close()

    gaps = []
    for message_id in ids:
        deliveries = recorder.deliveries[message_id]
        seen = [rejected_attempts(headers, "plain") for _, headers in deliveries]
        assert seen == list(range(max_retries + 1)), f"{message_id}: x-death counts {seen}"
        gaps += recorder.gaps_ms(message_id)
    # Reject mode always routes to tier 1: every wait is tier 1's, never the 2 s of tier 2.
    assert all(200 - EARLY_MS <= gap <= 200 + LATE_MS for gap in gaps)
    print(f"\n[{broker.name} {queue_type}] x-death counts seen 0..{max_retries}; " + _figures("waits", gaps))

    parked = _drain(broker, deployment.vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == ids
    for properties, _ in parked:
        headers = properties.headers or {}
        assert headers["attempts"] == max_retries + 1
        assert headers["original-exchange"] == "in" and headers["original-routing-key"] == "job"
        assert headers["error-queue"] == "plain" and headers["error-reason"].startswith("RuntimeError")
        # x-death's time has whole seconds.
        first = datetime.fromisoformat(headers["first-failure-at"].replace("Z", "+00:00"))
        assert started - timedelta(seconds=1) <= first <= started + timedelta(seconds=5)
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
def test_no_message_is_lost(broker: Broker, deploy: Deployer, queue_type: str, mode: Mode, restart: bool) -> None:
    if restart and broker.name != "4.3":
        pytest.skip("the restart sub-case runs on the 4.3 broker only")
    if restart and not BROKERS_SH.exists():
        pytest.skip("scripts/brokers.sh is missing: cannot restart the broker")
    max_retries = 3
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}],
                         "queues": [_retryable("bulk", queue_type, ["200ms", "400ms"], max_retries)]})
    contract = deployment.contracts["bulk"]
    rng = random.Random(20240611)
    # 0..4 failures: 4 is more than max_retries, so about a seventh of the messages are parked.
    plan = {f"m{i:04d}": rng.choice([0, 0, 1, 1, 2, 3, 4]) for i in range(NO_LOSS_MESSAGES)}
    recorder = Recorder(plan.__getitem__)
    params = _params(broker, deployment.vhost)

    def slow_handler(body: bytes, properties: BasicProperties) -> None:
        if restart:
            time.sleep(0.005)  # keep messages in flight while the broker goes down
        recorder(body, properties)

    handler: Handler = slow_handler
    consumers = [RetryingConsumer(params, contract, handler, mode, reconnect_timeout=180, publish_failure_pause=0.2)
                 for _ in range(NO_LOSS_CONSUMERS)]
    started = time.monotonic()
    _publish_all(broker, deployment.vhost, "in", list(plan))

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
    _run(consumers, lambda: settled() >= NO_LOSS_MESSAGES and not (restart and restarter.is_alive()),
         timeout=240)
    if restart:
        restarter.join()
    # Stragglers: duplicates redelivered after the restart, or anything still in a wait queue (the
    # stopped consumers gave their prefetched messages back, so one consumer sees them all).
    consumers[0].run(idle_timeout=1.0)
    consumers[0].close()
    elapsed = time.monotonic() - started

    parked_ids = [str(p.message_id) for p, _ in _drain(broker, deployment.vhost, contract["error_queue"])]
    processed, parked, published = set(recorder.succeeded), set(parked_ids), set(plan)
    lost = published - processed - parked
    duplicates = (len(recorder.succeeded) - len(processed)) + (len(parked_ids) - len(parked))
    both = processed & parked
    with _channel(broker, deployment.vhost) as channel:
        leftovers = {q: _count(channel, q) for q in ["bulk", *(t["queue"] for t in contract["tiers"])]}
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


# --- delivery limit ---------------------------------------------------------------------------------

def test_a_message_that_keeps_crashing_consumers_is_parked_before_the_delivery_limit(
        broker: Broker, deploy: Deployer) -> None:
    """Consumers that die holding a message return it; the broker's own limit would jam it in a
    dead-letter cycle (tests/broker/test_delivery_limit.py), so the client parks it first."""
    queue = _retryable("crashy", "quorum", ["200ms"], 1)
    deployment = deploy({"exchanges": [{"name": "in", "type": "fanout"}], "queues": [{**queue, "delivery_limit": 2}]})
    contract = deployment.contracts["crashy"]
    assert contract["delivery_limit"] == 2
    _publish_all(broker, deployment.vhost, "in", ["poison"])
    for _ in range(2):  # two consumer crashes: the connection closes with the message unacked
        with _channel(broker, deployment.vhost) as channel:
            deadline = time.monotonic() + 5
            while channel.basic_get("crashy")[0] is None:
                assert time.monotonic() < deadline, "the message did not come back after a crash"
                time.sleep(0.05)
    handled = Recorder(lambda _: 0)
    consumer = RetryingConsumer(_params(broker, deployment.vhost), contract, handled, "reject")
    _run([consumer], lambda: consumer.parked >= 1, timeout=15)

    parked = _drain(broker, deployment.vhost, "crashy.error")
    assert consumer.parked == 1 and consumer.processed == 0, "the handler must not see it again"
    assert [p.headers["error-reason"] for p, _ in parked] == ["x-delivery-count 2 reached the delivery limit 2"]
    with _channel(broker, deployment.vhost) as channel:
        assert _count(channel, "crashy") == 0 and _count(channel, "crashy.wait.1") == 0
