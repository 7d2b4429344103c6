"""A redrive reaches the failing queue alone, whatever the strategy (issue 22, item 4).

`push` and `email` are both bound to the fanout exchange `notifications`; only `push` fails. `rabbitmq-retry
parked redrive` of `push` must not re-send e-mails: by default each copy goes where only `push` is bound
(`push.requeue` for tiers and native, level 0 with a zero delay for levels), and the command says which queue
it reaches. `--to-original-exchange` is the explicit way to republish to `notifications`, and it says that the
copy reaches every queue bound there. Strategy native runs on RabbitMQ 4.3.1 and later only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pika.spec import BasicProperties

from rabbitmq_retry_client import PermanentError, RetryingConsumer
from rabbitmq_retry_client.cli import main
from tests.support.admin import version
from tests.support.amqp import message_counts, parameters
from tests.support.mirror import Broker
from tests.support.retrying import publish_ids, run_consumers

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

RETRY: dict[str, dict[str, Any]] = {
    "tiers": {"delays": ["100ms"], "max_retries": 1},
    "levels": {"strategy": "levels", "max_retries": 1,
               "backoff": {"initial": "100ms", "multiplier": 2, "max": "400ms", "jitter": 0}},
    "native": {"strategy": "native", "min_delay": "100ms", "max_retries": 1},
}
PARKED = 6


def _fails_for_good(body: bytes, properties: BasicProperties) -> None:
    raise PermanentError("push gateway refused the token")


def _config(strategy: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "exchanges": [{"name": "notifications", "type": "fanout"}],
        "queues": [{"name": "push", "type": "quorum", "bindings": [{"exchange": "notifications"}],
                    "retry": RETRY[strategy]},
                   {"name": "email", "type": "quorum", "bindings": [{"exchange": "notifications"}]}],
    }
    if strategy == "levels":
        config["delay_levels"] = {"unit": "100ms", "max_delay": "1s", "type": "quorum"}
    return config


@pytest.mark.parametrize("strategy", sorted(RETRY))
def test_a_redrive_reaches_the_failing_queue_alone_and_says_so(
        broker: Broker, deploy: Deployer, strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if strategy == "native" and version(broker) < (4, 3, 1):
        pytest.skip(f"{broker.name} predates RabbitMQ 4.3.1's delayed retry")
    deployment = deploy(_config(strategy))
    vhost = deployment.vhost
    publish_ids(broker, vhost, "notifications", [f"n{i}" for i in range(PARKED)])
    consumer = RetryingConsumer(parameters(broker, vhost), deployment.contracts["push"], _fails_for_good, "reject")
    run_consumers([consumer], lambda: consumer.parked >= PARKED, timeout=60)
    queues = ["push", "push.error", "email"]
    assert message_counts(broker, vhost, queues) == {"push": 0, "push.error": PARKED, "email": PARKED}

    contracts = tmp_path / "contracts.json"
    contracts.write_text(json.dumps({vhost: deployment.contracts}))
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"

    def redrive(*args: str) -> str:
        assert main(["--url", url, "parked", "redrive", "--contract", str(contracts), "--queue", "push", *args]) == 0
        return capsys.readouterr().out

    dry = redrive("--dry-run")
    assert "would move 6 (0 redriven before): 6 to exchange " in dry
    assert dry.rstrip().endswith("reaching queue 'push' only"), dry
    assert message_counts(broker, vhost, queues) == {"push": 0, "push.error": PARKED, "email": PARKED}

    assert "reaching queue 'push' only" in redrive("--limit", "2")
    assert message_counts(broker, vhost, queues) == {"push": 2, "push.error": PARKED - 2, "email": PARKED}, \
        "the redriven copies reached push alone: email's depth is unchanged"

    out = redrive("--limit", "1", "--to-original-exchange")
    assert "reaching every queue bound to exchange 'notifications' for routing key '', not only 'push'" in out
    assert message_counts(broker, vhost, queues) == {"push": 3, "push.error": PARKED - 3, "email": PARKED + 1}
    print(f"\n[{broker.name} {strategy}] {dry.strip()}")
