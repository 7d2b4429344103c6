"""The contract for consumers in other languages, shown: examples/node-consumer (Node.js, amqplib), written from
docs/contract.md alone, passes the behaviour checks the Python client passes (test_retry_behaviour.py,
test_levels_retry.py, test_native_retry.py) on both brokers: the number of attempts, never early, each message
parked once with every parking header of its documented AMQP type, nothing lost. `tiers` runs in republish mode
(the mode docs/contract.md prescribes), `levels` on 3.10 and 4.3, `native` on 4.3 only.

The consumer runs as a subprocess with the stack output on stdin and prints one JSON line per event; the test
stops it with SIGTERM once every message is settled and nothing else came back for a while.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pika
import pika.data
import pytest
from jsonschema import Draft202012Validator

from rabbitmq_retry_client.contract import SCHEMA
from tests.broker.test_levels_retry import levels_config
from tests.broker.test_native_retry import MAX_MS, MAX_RETRIES, MIN_MS, native_queue, needs_native
from tests.support.admin import wait_for
from tests.support.amqp import channel, message_counts
from tests.support.deploy import Deployer, Deployment
from tests.support.environment import missing
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import publish_ids, retryable_queue

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "node-consumer"
EARLY_MS = 5
"""Clock tolerance for "never early" (times taken by the consumer; see test_retry_behaviour.py)."""
QUIET_S = 1.5
"""How long nothing may come back after the last message settled (longer than any delay below)."""
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
PARKING_HEADERS = Draft202012Validator({**SCHEMA["$defs"]["parking_headers"], "$defs": SCHEMA["$defs"]})
"""The parking headers as rabbitmq_retry_client/contract.schema.json defines them."""
SIGNED_32 = b"I"
"""The AMQP field type of the counters we write (docs/contract.md, Header types)."""


@pytest.fixture
def node() -> str:
    """The node binary, with the example's pinned amqplib installed (scripts/setup.sh)."""
    binary = shutil.which("node")
    if binary is None or not (EXAMPLE / "node_modules" / "amqplib").is_dir():
        missing("node or examples/node-consumer/node_modules is missing: run scripts/setup.sh")
    return str(binary)


@pytest.fixture
def contract_deploy(broker: Broker) -> Iterator[Deployer]:
    """`deploy` in a vhost of this test's own (`contract-…`), deleted afterwards."""
    vhost = f"contract-{uuid.uuid4().hex[:12]}"
    try:
        yield Deployer(broker, vhost)
    finally:
        call(broker, "DELETE", f"vhosts/{esc(vhost)}")


class NodeConsumer:
    """examples/node-consumer/main.js as a subprocess; `events` are its JSON lines, as they arrive."""

    def __init__(self, node: str, broker: Broker, deployment: Deployment, queue: str, *args: str) -> None:
        url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}"
        self.process = subprocess.Popen(
            [node, "main.js", "--url", url, "--queue", queue, "--vhost", deployment.vhost, *args], cwd=EXAMPLE,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({deployment.vhost: deployment.contracts}))
        self.process.stdin.close()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.wait_for(lambda: self.of("ready"), 30, "the consumer to start")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.lock:
                self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]

    def wait_for(self, check: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.process.poll() is not None:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"the node consumer exited ({self.process.returncode}): {stderr}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; events: {self.events[-5:]}")
            time.sleep(0.05)

    def settle(self, ids: list[str], timeout: float = 60) -> None:
        """Wait until each message was acked or parked, then `QUIET_S` more with nothing new; stop it."""
        self.wait_for(lambda: {e["id"] for e in self.of("acked") + self.of("parked")} >= set(ids), timeout,
                      "every message acked or parked")
        seen = -1
        while seen != len(self.events):
            seen = len(self.events)
            time.sleep(QUIET_S)
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)
        self.reader.join(10)
        stderr = self.process.stderr.read() if self.process.stderr else ""
        assert self.process.returncode == 0, stderr
        assert self.of("stopped"), "no graceful stop"

    def deliveries(self, message_id: str) -> list[dict[str, Any]]:
        return [e for e in self.of("delivery") if e["id"] == message_id]

    def gaps_ms(self, message_id: str) -> list[float]:
        times = [e["ms"] for e in self.deliveries(message_id)]
        return [b - a for a, b in pairwise(times)]


@contextmanager
def field_types() -> Iterator[list[dict[str, bytes]]]:
    """Record the AMQP field type (`I`, `l`, `S`, `t`, …) of every header pika decodes meanwhile: pika gives
    every integer type back as an int, and the contract names the type."""
    tables: list[dict[str, bytes]] = []
    original = pika.data.decode_table

    def decode_table(encoded: bytes, offset: int) -> tuple[dict[str, Any], int]:
        result: dict[str, Any] = {}
        kinds: dict[str, bytes] = {}
        size = int.from_bytes(encoded[offset:offset + 4], "big")
        offset += 4
        limit = offset + size
        while offset < limit:
            key, offset = pika.data.decode_short_string(encoded, offset)
            kinds[key] = encoded[offset:offset + 1]
            result[key], offset = pika.data.decode_value(encoded, offset)
        tables.append(kinds)
        return result, offset

    pika.data.decode_table = decode_table  # type: ignore[assignment]
    try:
        yield tables
    finally:
        pika.data.decode_table = original  # type: ignore[assignment]


def parked_messages(broker: Broker, vhost: str, queue: str) -> list[tuple[pika.BasicProperties, dict[str, bytes]]]:
    """Every parked message, removed, with the AMQP field type of each of its headers."""
    messages = []
    with field_types() as tables, channel(broker, vhost, confirms=False) as opened:
        while True:
            method, properties, _ = opened.basic_get(queue, auto_ack=True)
            if method is None:
                break
            headers = properties.headers or {}
            kinds = next(t for t in reversed(tables) if set(t) == set(headers))
            messages.append((properties, kinds))
    return messages


def assert_parked(properties: pika.BasicProperties, kinds: dict[str, bytes], *, queue: str, attempts: int,
                  reason: str, exchange: str, routing_key: str, strategy: str, permanent: bool = False) -> None:
    """The parking headers of docs/contract.md, each of its type; the message's own headers kept; no counter."""
    headers = properties.headers or {}
    assert list(PARKING_HEADERS.iter_errors(headers)) == [], headers
    assert (headers["attempts"], kinds["attempts"]) == (attempts, SIGNED_32), headers
    assert (headers["error-reason"], kinds["error-reason"]) == (reason, b"S")
    assert len(headers["error-reason"].encode()) <= 1024
    assert (headers["error-queue"], kinds["error-queue"]) == (queue, b"S")
    assert (headers["original-exchange"], kinds["original-exchange"]) == (exchange, b"S")
    assert (headers["original-routing-key"], kinds["original-routing-key"]) == (routing_key, b"S")
    time_header = "last-failure-at" if strategy == "native" else "first-failure-at"
    assert ISO_UTC.match(headers[time_header]) and kinds[time_header] == b"S", headers
    assert ({"first-failure-at", "last-failure-at"} - {time_header}).isdisjoint(headers), headers
    if permanent:
        assert (headers["permanent"], kinds["permanent"]) == (True, b"t")
    else:
        assert "permanent" not in headers
    assert headers["app"] == "test" and properties.delivery_mode == 2
    # No attempt counter and no dead-letter history; a quorum error queue adds its own delivery counters.
    assert "retry-count" not in headers
    assert not {k for k in headers if k.startswith("x-")} - {"x-delivery-count", "x-acquired-count"}, headers


def assert_each_parked_once(broker: Broker, vhost: str, contract: dict[str, Any], failing: list[str], *,
                             attempts: int, routing_key: str) -> dict[str, pika.BasicProperties]:
    """`failing` parked out of retries and "bad" parked as a permanent failure at its first attempt, each exactly
    once with every parking header; the parked messages (removed from the error queue) by message id."""
    parked = parked_messages(broker, vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == sorted([*failing, "bad"]), "each parked exactly once"
    strategy = contract.get("strategy", "tiers")
    for properties, kinds in parked:
        message_id = properties.message_id
        permanent = message_id == "bad"
        assert_parked(properties, kinds, queue=contract["queue"], attempts=1 if permanent else attempts,
                      reason=f"PermanentError: malformed {message_id}" if permanent
                      else f"Error: planned failure {attempts} of {message_id}",
                      exchange="in", routing_key=routing_key, strategy=strategy, permanent=permanent)
    return {p.message_id: p for p, _ in parked}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def wall(event: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(event["at"] / 1000).astimezone()


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_tiers_in_republish_mode(broker: Broker, contract_deploy: Deployer, node: str, queue_type: str) -> None:
    delays, max_retries = [200, 300, 500], 4
    deployment = contract_deploy({"exchanges": [{"name": "in", "type": "topic"}],
                                  "queues": [retryable_queue("stepped", queue_type, [f"{d}ms" for d in delays],
                                                             max_retries, routing_key="order.*")]})
    contract = deployment.contracts["stepped"]
    failing, fine = [f"s{i}" for i in range(4)], ["ok0", "ok1", "ok2"]
    plan = {"ok0": 0, "ok1": 1, "ok2": max_retries, "bad": "permanent"}
    consumer = NodeConsumer(node, broker, deployment, "stepped", "--fail", "always", "--fail-plan", json.dumps(plan))
    ids = [*failing, *fine, "bad"]
    publish_ids(broker, deployment.vhost, "in", ids, routing_key="order.created")
    consumer.settle(ids)

    steps = [contract["tiers"][min(n, len(delays)) - 1] for n in range(1, max_retries + 1)]
    for message_id in failing + fine:
        deliveries = consumer.deliveries(message_id)
        runs = max_retries + 1 if message_id in failing else plan[message_id] + 1
        assert len(deliveries) == runs, message_id
        assert [d["headers"].get("retry-count") for d in deliveries] == [None, *range(1, runs)]
        for n, (gap, tier) in enumerate(zip(consumer.gaps_ms(message_id), steps, strict=False), start=1):
            assert gap >= tier["delay_ms"] - EARLY_MS, f"retry {n} of {message_id}: {gap:.0f} ms < {tier['delay_ms']}"
    assert sorted(e["id"] for e in consumer.of("acked")) == fine, "each success acked once"
    assert [len(consumer.deliveries("bad"))] == [1]

    parked = assert_each_parked_once(broker, deployment.vhost, contract, failing, attempts=max_retries + 1,
                                     routing_key="order.created")
    for message_id in failing:  # recorded at the first failure: after the first delivery began, before the second
        first, second = consumer.deliveries(message_id)[:2]
        assert wall(first) - timedelta(milliseconds=EARLY_MS) <= utc(parked[message_id].headers["first-failure-at"]) \
            <= wall(second)
    queues = ["stepped", "stepped.error", *(t["queue"] for t in contract["tiers"])]
    assert message_counts(broker, deployment.vhost, queues) == dict.fromkeys(queues, 0), "nothing left anywhere"


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_levels(broker: Broker, contract_deploy: Deployer, node: str, queue_type: str) -> None:
    """Backoff 200, 400, 800 ms (no jitter), max_retries 3, as the Python client's check."""
    deployment = contract_deploy(levels_config(queue_type))
    contract = deployment.contracts["billing"]
    failing, fine = [f"c{i}" for i in range(4)], ["ok1", "ok3"]
    consumer = NodeConsumer(node, broker, deployment, "billing", "--fail", "always",
                            "--fail-plan", json.dumps({"ok1": 1, "ok3": 3, "bad": "permanent"}))
    publish_ids(broker, deployment.vhost, "in", [*failing, *fine, "bad"], routing_key="billing.created")
    consumer.settle([*failing, *fine, "bad"])

    for message_id in failing + fine:
        deliveries = consumer.deliveries(message_id)
        runs = {"ok1": 2, "ok3": 4}.get(message_id, 4)
        assert [d["headers"].get("retry-count") for d in deliveries] == [None, *range(1, runs)], message_id
        for n, (gap, backoff) in enumerate(zip(consumer.gaps_ms(message_id), (200, 400, 800), strict=False), 1):
            assert gap >= backoff - EARLY_MS, f"retry {n} of {message_id} came after {gap:.0f} ms, before {backoff}"
    assert sorted(e["id"] for e in consumer.of("acked")) == fine and len(consumer.deliveries("bad")) == 1
    assert_each_parked_once(broker, deployment.vhost, contract, failing, attempts=4, routing_key="billing.created")
    left = ["billing", "shipping", "shipping.error", *(f"rabbitmq-retry.delay.{k}"
                                                      for k in range(contract["delay_levels"]))]
    assert message_counts(broker, deployment.vhost, left) == dict.fromkeys(left, 0)


def test_native(broker: Broker, contract_deploy: Deployer, node: str) -> None:
    """basic.reject(requeue=true) while retries are left: 1 + max_retries deliveries at the linear delays, then
    the consumer parks the message itself (with `last-failure-at`: nothing from the first failure survives)."""
    needs_native(broker)
    deployment = contract_deploy(native_queue("linear"))
    contract = deployment.contracts["linear"]
    failing, fine = [f"n{i}" for i in range(4)], ["ok2"]
    consumer = NodeConsumer(node, broker, deployment, "linear", "--fail", "always", "--fail-plan",
                            json.dumps({"ok2": 2, "bad": "permanent"}))
    publish_ids(broker, deployment.vhost, "in", [*failing, *fine, "bad"], routing_key="order.created")
    consumer.settle([*failing, *fine, "bad"])

    for message_id in failing:
        deliveries = consumer.deliveries(message_id)
        assert [d["headers"].get("x-delivery-count") for d in deliveries] == [None, *range(1, MAX_RETRIES + 1)]
        for n, gap in enumerate(consumer.gaps_ms(message_id), start=1):
            delay = min(MIN_MS * n, MAX_MS)
            assert gap >= delay - EARLY_MS, f"retry {n} of {message_id} came after {gap:.0f} ms, before {delay} ms"
    assert len(consumer.deliveries("ok2")) == 3 and [e["id"] for e in consumer.of("acked")] == fine
    # Parked by the consumer, with its headers: not by the broker's delivery limit (assert_parked: no x-death).
    assert_each_parked_once(broker, deployment.vhost, contract, failing, attempts=MAX_RETRIES + 1,
                            routing_key="order.created")
    assert message_counts(broker, deployment.vhost, ["linear", "linear.error"]) == {"linear": 0, "linear.error": 0}


NACK_LOOP = """
const amqp = require('amqplib');
(async () => {
  const [url, vhost, queue, times] = process.argv.slice(1);
  const u = new URL(url);
  const connection = await amqp.connect({hostname: u.hostname, port: Number(u.port), username: u.username,
    password: u.password, vhost});
  const channel = await connection.createChannel();
  const counts = [];
  while (counts.length < Number(times)) {
    const message = await channel.get(queue, {noAck: false});
    if (message === false) { await new Promise((r) => setTimeout(r, 20)); continue; }
    counts.push(message.properties.headers['x-delivery-count'] ?? null);
    channel.nack(message);  // amqplib's defaults: requeue=true
  }
  await connection.close();
  process.stdout.write(JSON.stringify(counts));
})();
"""


def test_native_amqplib_s_default_nack_never_counts_so_it_never_waits_nor_parks(
        broker: Broker, contract_deploy: Deployer, node: str) -> None:
    """docs/contract.md, strategy native: amqplib's `nack(message)` requeues by default, and RabbitMQ 4.3 neither
    delays nor counts a basic.nack: 3 × delivery_limit nacks later the message is still delivered as a first
    delivery (no `x-delivery-count`), still in the queue, never parked."""
    needs_native(broker)
    deployment = contract_deploy(native_queue("looping"))
    publish_ids(broker, deployment.vhost, "in", ["loop"], routing_key="order.created")
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}"
    times = 3 * MAX_RETRIES
    run = subprocess.run([node, "-e", NACK_LOOP, url, deployment.vhost, "looping", str(times)], cwd=EXAMPLE,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [None] * times
    wait_for(lambda: message_counts(broker, deployment.vhost, ["looping", "looping.error"]) == {
        "looping": 1, "looping.error": 0}, 10, "the message back in the queue, not parked")
