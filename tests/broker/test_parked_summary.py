"""What an alert points to, at scale (issue 36): `rabbitmq-retry parked summary` over every error queue of a
contract file, `parked list` reading at most `--limit` messages (each held unacknowledged while it is read), and a
redrive whose connection is lost halfway, which says how many moved and that running it again finishes the job."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest

from rabbitmq_retry_client import PermanentError, RetryingConsumer
from rabbitmq_retry_client.cli import main
from tests.support.admin import wait_for
from tests.support.amqp import message_counts, parameters
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import publish_ids, retryable_queue, run_consumers

if TYPE_CHECKING:
    from tests.support.deploy import Deployer


def _park(broker: Broker, vhost: str, contracts: dict[str, Any], queue: str, count: int, reason: str) -> None:
    def failing(body: bytes, properties: pika.BasicProperties) -> None:
        raise PermanentError(reason)

    publish_ids(broker, vhost, "in", [f"{queue}-{n:04d}" for n in range(count)], routing_key=queue)
    consumer = RetryingConsumer(parameters(broker, vhost), contracts[queue], failing, "republish", prefetch=50)
    run_consumers([consumer], lambda: consumer.parked >= count, timeout=240)


@pytest.fixture
def parked(broker: Broker, deploy: Deployer, vhost: str, tmp_path: Path) -> dict[str, Any]:
    """`a` with 300 parked messages, `b` with 20, `c` with none; the contract file of all three."""
    deployment = deploy({"exchanges": [{"name": "in", "type": "direct"}],
                         "queues": [retryable_queue(q, "quorum", ["100ms"], 1, routing_key=q) for q in "abc"]})
    _park(broker, vhost, deployment.contracts, "a", 300, "ValueError: bad payload")
    _park(broker, vhost, deployment.contracts, "b", 20, "KeyError: 'customer'")
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps({vhost: deployment.contracts}))
    url = f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F"
    return {"file": str(path), "url": url, "vhost": vhost}


def test_summary_covers_every_error_queue_of_the_file(broker: Broker, parked: dict[str, Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", parked["url"], "parked", "list", "--contract", parked["file"]]) == 1
    assert "parked summary" in capsys.readouterr().err  # several contracts: the error names the command that fits
    started = time.time()
    assert main(["--url", parked["url"], "parked", "summary", "--contract", parked["file"], "--json",
                 "--limit", "100"]) == 0
    rows = {r["queue"]: r for r in json.loads(capsys.readouterr().out)}
    assert {q: (r["parked"], r["read"], r["reasons"]) for q, r in rows.items()} == {
        "a": (300, 100, {"PermanentError: ValueError: bad payload": 100}),
        "b": (20, 20, {"PermanentError: KeyError: 'customer'": 20}),
        "c": (0, 0, {})}
    assert rows["a"]["oldest_first_failure_at"] is not None and rows["c"]["oldest_first_failure_at"] is None
    assert time.mktime(time.strptime(rows["a"]["oldest_first_failure_at"][:19], "%Y-%m-%dT%H:%M:%S")) - \
        time.timezone <= started
    assert message_counts(broker, parked["vhost"], ["a.error", "b.error"]) == {"a.error": 300, "b.error": 20}


def test_list_reads_at_most_its_limit_and_says_so(broker: Broker, parked: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", parked["url"], "parked", "list", "--contract", parked["file"], "--queue", "a",
                 "--limit", "50"]) == 0
    out = capsys.readouterr().out
    assert f"50 parked in {parked['vhost']}/a.error: the first 50 of 300 read (--limit 50" in out
    assert message_counts(broker, parked["vhost"], ["a.error"]) == {"a.error": 300}


def test_a_redrive_cut_by_a_lost_connection_says_what_moved_and_to_run_it_again(
        broker: Broker, parked: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    vhost = parked["vhost"]

    def cut() -> None:
        def redriving() -> list[str]:
            return [c["name"] for c in call(broker, "GET", f"vhosts/{esc(vhost)}/connections")[1]]
        wait_for(lambda: bool(redriving()), 30, "the redrive's connection")
        time.sleep(1.0)  # some have moved, at 50 a second
        for name in redriving():
            call(broker, "DELETE", f"connections/{esc(name)}")

    cutter = threading.Thread(target=cut)
    cutter.start()
    command = ["--url", parked["url"], "parked", "redrive", "--contract", parked["file"], "--queue", "a",
               "--rate", "50"]
    assert main(command) == 1
    cutter.join()
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "the connection was lost after " in err
    assert "run the same command again once the node is back to move the rest" in err
    moved = int(err.split("the connection was lost after ", 1)[1].split(" ", 1)[0])
    assert 0 < moved < 300
    assert main([*command[:-2], "--rate", "1000"]) == 0
    assert message_counts(broker, vhost, ["a.error"]) == {"a.error": 0}
    assert message_counts(broker, vhost, ["a"])["a"] >= 300  # every one back in `a` (one in flight may be twice)
