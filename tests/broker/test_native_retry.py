"""Strategy `native` on a real broker: RabbitMQ 4.3's delayed retry of quorum queues.

Pinned here (RabbitMQ 4.3.6): after the n-th `basic.reject(requeue=true)` the broker keeps the message in
the queue for `min(min × n, max)` before it delivers it again, with `x-delivery-count` n; with
`delivery-limit` = max_retries the message is delivered 1 + max_retries times, and the broker dead-letters
the one after (reason `delivery_limit`) through the queue's dead-letter exchange, the error exchange.
RabbitMQ before 4.3.1 refuses the policy keys, so the same stack cannot be applied to 3.10: the preview
check (`broker.version`) and `make doctor` refuse it first (tests/test_capabilities.py, this file).

Never early, counts, order and nothing lost are asserted; how late is not (a shared, noisy machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from components.config.load import load_stack_config
from components.model.problems import ConfigError
from rabbitmq_retry_client.parked import ParkedQueue, Selection
from tests.support.admin import version, wait_for_queue
from tests.support.amqp import channel, drain, message_counts, parameters
from tests.support.doctor import planned_objects
from tests.support.mirror import Broker
from tests.support.retrying import fail_every_attempt, publish_ids
from tools.lib import doctor

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

ROOT = Path(__file__).resolve().parents[2]
EARLY_MS = 5
"""Clock tolerance for "never early" (the handler takes the time; see test_retry_behaviour.py)."""
MIN_MS, MAX_MS, MAX_RETRIES = 200, 500, 4


def native_queue(name: str) -> dict[str, Any]:
    return {"exchanges": [{"name": "in", "type": "topic"}],
            "queues": [{"name": name, "type": "quorum", "bindings": [{"exchange": "in", "routing_key": "order.*"}],
                        "retry": {"strategy": "native", "min_delay": f"{MIN_MS}ms", "max_delay": f"{MAX_MS}ms",
                                  "max_retries": MAX_RETRIES}}]}


def needs_native(broker: Broker) -> None:
    if version(broker) < (4, 3, 1):
        pytest.skip(f"{broker.name} predates RabbitMQ 4.3.1's delayed retry")


def test_rejected_attempts_come_back_at_the_linear_delays_then_the_client_parks_each_once(
        broker: Broker, deploy: Deployer, consumer_kind: str) -> None:
    needs_native(broker)
    deployment = deploy(native_queue("linear"))
    contract = deployment.contracts["linear"]
    assert contract["strategy"] == "native" and contract["delivery_limit"] == MAX_RETRIES
    ids = [f"n{i}" for i in range(5)]
    recorder = fail_every_attempt(broker, deployment.vhost, contract, ids, "in", "order.created", idle_s=1.5,
                                  kind=consumer_kind)

    for message_id in ids:
        deliveries = recorder.deliveries[message_id]
        assert len(deliveries) == MAX_RETRIES + 1, message_id
        assert [d.headers.get("x-delivery-count") for d in deliveries] == [None, *range(1, MAX_RETRIES + 1)]
        for n, gap in enumerate(recorder.gaps_ms(message_id), start=1):
            delay = min(MIN_MS * n, MAX_MS)
            assert gap >= delay - EARLY_MS, f"retry {n} of {message_id} came after {gap:.0f} ms, before {delay} ms"
    parked = drain(broker, deployment.vhost, contract["error_queue"])
    assert sorted(p.message_id for p, _ in parked) == ids, "each message parked exactly once"
    for properties, _ in parked:
        headers = properties.headers or {}
        assert headers["attempts"] == MAX_RETRIES + 1 and headers["error-queue"] == "linear"
        assert headers["original-exchange"] == "in" and headers["original-routing-key"] == "order.created"
        # Nothing written at the first failure survives a native retry: the time is the last failure's.
        assert "first-failure-at" not in headers and str(headers["last-failure-at"]).endswith("Z")
    assert message_counts(broker, deployment.vhost, ["linear"]) == {"linear": 0}


def test_past_max_retries_the_broker_itself_parks_a_message_nothing_lost(broker: Broker, deploy: Deployer) -> None:
    """A consumer that only ever rejects (or keeps crashing): the delivery limit dead-letters the message,
    at least once, into the error queue."""
    needs_native(broker)
    deployment = deploy(native_queue("limited"))
    ids = [f"b{i}" for i in range(3)]
    publish_ids(broker, deployment.vhost, "in", ids, routing_key="order.created")
    seen: dict[str, list[int | None]] = {i: [] for i in ids}
    with channel(broker, deployment.vhost, confirms=False) as opened:
        for method, properties, _ in opened.consume("limited", inactivity_timeout=5):
            if method is None:
                break
            seen[str(properties.message_id)].append((properties.headers or {}).get("x-delivery-count"))
            opened.basic_reject(method.delivery_tag, requeue=True)
        opened.cancel()
    assert seen == {i: [None, *range(1, MAX_RETRIES + 1)] for i in ids}
    assert message_counts(broker, deployment.vhost, ["limited"]) == {"limited": 0}
    # The operator's tools read the broker's x-death; a redrive goes to `limited.requeue`, bound to `limited` alone.
    with ParkedQueue(parameters(broker, deployment.vhost), deployment.contracts["limited"]) as parked:
        (group,) = parked.summary()
        assert (group.count, group.routing_key) == (len(ids), "order.created")
        assert group.reason == "delivery_limit: parked by the broker past the delivery limit"
        outcome = parked.redrive(Selection())
        assert outcome.moved == len(ids) and outcome.destinations == {("limited.requeue", "order.created"): len(ids)}
    back = drain(broker, deployment.vhost, "limited")
    assert sorted(p.message_id for p, _ in back) == ids
    assert message_counts(broker, deployment.vhost, ["limited.error"]) == {"limited.error": 0}


# --- the same stack on a broker that cannot run it ------------------------------------------------------------


def _doctor(broker: Broker, vhost: str, vhost_config: dict[str, Any], **top: Any) -> doctor.Diagnosis:
    config = load_stack_config({"vhosts": [{"name": vhost, **vhost_config}], **top})
    endpoint = broker.client()
    return doctor.diagnose(config, planned_objects(config), doctor.read_facts(endpoint, [vhost]))


def test_doctor_refuses_native_below_4_3_1_and_passes_it_on_4_3(broker: Broker, vhost: str) -> None:
    found = _doctor(broker, vhost, native_queue("linear"))
    if version(broker) < (4, 3, 1):
        assert found.status == 2
        assert [b for b in found.blocking
                if b.startswith(f"vhosts[{vhost}].queues[linear].retry.strategy: strategy native")]
    else:
        assert found.blocking == [] and found.status == 0


def test_preview_refuses_native_for_the_broker_s_own_version_when_it_predates_4_3_1(broker: Broker) -> None:
    live = ".".join(map(str, version(broker)))
    stack = {"broker": {"version": live}, "vhosts": [{"name": "v", **native_queue("linear")}]}
    if version(broker) >= (4, 3, 1):
        assert load_stack_config(stack).broker_version == version(broker)
        return
    with pytest.raises(ConfigError) as error:
        load_stack_config(stack)
    assert [path for path, _ in error.value.problems] == ["vhosts[v].queues[linear].retry.strategy"]


def test_doctor_finds_an_existing_queue_that_the_plan_declares_differently(broker: Broker, deploy: Deployer) -> None:
    """A tiers queue already on the broker, then a stack that declares it native: `pulumi up` would fail
    with 400 "inequivalent arg" (and a replacement would lose its messages)."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "topic"}],
                         "queues": [{"name": "linear", "type": "quorum", "bindings": [{"exchange": "in"}],
                                     "retry": {"delays": ["1s"], "max_retries": 2}}]})
    found = _doctor(broker, deployment.vhost, native_queue("linear"))
    conflicts = [b for b in found.blocking if b.startswith("queue 'linear' ")]
    assert len(conflicts) == 1 and "inequivalent arg" in conflicts[0] and found.status == 2


def test_a_new_delay_reaches_a_waiting_message_in_place(broker: Broker, deploy: Deployer) -> None:
    """Editing min_delay, max_delay and max_retries updates only q's policy; the queue and a message in it stay."""
    needs_native(broker)
    before = deploy(native_queue("edited"))
    publish_ids(broker, before.vhost, "in", ["kept"], routing_key="order.created")
    changed = native_queue("edited")
    changed["queues"][0]["retry"] = {"strategy": "native", "min_delay": "300ms", "max_delay": "1s", "max_retries": 6}
    after = deploy.update(before, changed)
    assert {(s.op, s.type.rsplit(":", 1)[-1]) for s in after.steps if s.custom and s.op != "same"} == {
        ("update", "Policy")}
    policy = wait_for_queue(broker, after.vhost, "edited",
                            lambda q: (q.get("effective_policy_definition") or {}).get("delayed-retry-min") == 300,
                            "edited to report the new delayed-retry-min")["effective_policy_definition"]
    assert (policy["delayed-retry-max"], policy["delivery-limit"]) == (1000, 6)
    assert [p.message_id for p, _ in drain(broker, after.vhost, "edited")] == ["kept"]


def test_make_doctor_exits_2_for_a_native_stack_below_4_3_1_and_0_from_it(broker: Broker, vhost: str,
                                                                          tmp_path: Path) -> None:
    stack = {"config": {"rabbitmq-retry:vhosts": [{"name": vhost, **native_queue("linear")}]}}
    (tmp_path / "Pulumi.native.yaml").write_text(yaml.safe_dump(stack))
    run = subprocess.run([sys.executable, "-m", "tools.doctor", "--stack", "native", "--root", str(tmp_path),
                          "--endpoint", broker.management_url], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "RABBITMQ_USERNAME": broker.username,
                              "RABBITMQ_PASSWORD": broker.password}, check=False)
    if version(broker) < (4, 3, 1):
        assert run.returncode == 2, run.stdout + run.stderr
        assert "## Blocking" in run.stdout and "strategy native (the delayed-retry-* policy keys): needs" in run.stdout
    else:
        assert run.returncode == 0, run.stdout + run.stderr
        assert "**Nothing blocking**" in run.stdout
