"""`rabbitmq-retry stuck redrive` (the `not_draining` runbook, docs/alerts.md) on 3.10.8 and 4.3.6: retry copies that
entered a wait tier while a policy overrode its TTL stay there after the override is gone; the command sends every
one on to its queue, none lost, none twice, its attempt header kept."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rabbitmq_retry_client.cli import main
from tests.support.amqp import drain, message_counts
from tests.support.mirror import Broker
from tests.support.retrying import retryable_queue, strand_in_tier

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

DELAYS = ["1s", "2s"]
STUCK_FOR = 4.0
"""Seconds the stranded copies are watched: twice the longest delay, none leaves the tier."""


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_copies_stranded_in_a_tier_without_ttl_all_reach_their_queue_once(
        broker: Broker, deploy: Deployer, vhost: str, queue_type: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = {"name": vhost, "exchanges": [{"name": "in", "type": "topic"}],
              "queues": [retryable_queue("work", queue_type, DELAYS, 3, routing_key="#")]}
    contract = deploy(config).contracts["work"]
    ids = [f"m{n:02}" for n in range(25)]
    tier = strand_in_tier(broker, vhost, contract, ids)
    time.sleep(STUCK_FOR)
    assert message_counts(broker, vhost, ["work", tier]) == {"work": 0, tier: len(ids)}, "stranded: no TTL expires them"

    contracts = tmp_path / "contracts.json"
    contracts.write_text(json.dumps({vhost: {"work": contract}}))
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"
    assert main(["--url", url, "stuck", "redrive", "--contract", str(contracts), "--queue", "work", "--dry-run"]) == 0
    assert f"{vhost}/{tier}: read {len(ids)}, would move {len(ids)} to queue 'work' only" in capsys.readouterr().out
    assert message_counts(broker, vhost, [tier]) == {tier: len(ids)}, "a dry run moves nothing"

    assert main(["--url", url, "stuck", "redrive", "--contract", str(contracts), "--queue", "work"]) == 0
    out = capsys.readouterr().out
    assert f"{vhost}/{tier}: read {len(ids)}, moved {len(ids)} to queue 'work' only (exchange 'work.requeue')" in out
    assert f"{vhost}/work.wait.2: read 0, moved 0" in out
    arrived = drain(broker, vhost, "work")
    assert sorted(properties.message_id for properties, _ in arrived) == ids, "every one, once"
    assert {properties.headers[contract["attempt_header"]] for properties, _ in arrived} == {1}
    assert message_counts(broker, vhost, [tier, "work.wait.2", "work.error"]) == {tier: 0, "work.wait.2": 0,
                                                                                   "work.error": 0}


def test_a_contract_without_wait_tiers_or_an_unknown_tier_is_an_error(
        broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    contract = {"vhost": "/", "queue": "work", "error_exchange": "work.error", "error_queue": "work.error",
                "attempt_header": "retry-count", "max_retries": 3, "queue_type": "classic",
                "retry_exchange": "work.retry", "reject_routes_to": "wait.1",
                "tiers": [{"routing_key": "wait.1", "queue": "work.wait.1", "delay_ms": 1000}]}
    contracts = tmp_path / "contract.json"
    contracts.write_text(json.dumps(contract))
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"
    assert main(["--url", url, "stuck", "redrive", "--contract", str(contracts), "--tier", "wait.7"]) == 1
    error = capsys.readouterr().err
    assert "error: ValueError: queue 'work' has no wait tier 'wait.7'; its tiers: work.wait.1" in error
