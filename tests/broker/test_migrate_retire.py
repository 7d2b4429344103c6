"""Retiring an adopted runtime topology through its migration (`move.external`, `make migrate-retire`), on real
3.10 and 4.3 brokers: the adopted stack applied the provider's way (`tests/support/mirror.py`, shovels included),
what waits moved by the shovels, the old queue unbound only where its successor is bound, and every deletion
refused while it would lose a message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from components.config.load import load_vhost
from components.pulumi.resources import ShovelAccess
from rabbitmq_retry_client.depth import BrokerAccess
from tests.support.amqp import channel, message_counts
from tests.support.deploy import throwaway_vhost
from tests.support.mirror import Broker, apply, apply_update, call, esc
from tools.lib.adopt import adopt, record_vhost
from tools.lib.migrate_retire import DELETE_QUEUE, UNBIND, Found, plan, retire
from tools.lib.migrate_retire import Broker as RetireBroker
from tools.lib.snapshot import Snapshot, read_live

SNEAKERS_TTL_MS = 600_000
"""Messages waiting in `mailer-retry` stay there for the whole test: its delete must be refused."""
ARRIVAL_S = 20.0
"""Generous bound for the shovels to move a few messages (an eventual condition, not a figure)."""


@pytest.fixture
def runtime_vhost(broker: Broker) -> Iterator[str]:
    with throwaway_vhost(broker, "ado") as name:
        call(broker, "PUT", f"vhosts/{esc(name)}", {})
        call(broker, "PUT", f"permissions/{esc(name)}/{esc(broker.username)}",
             {"configure": ".*", "write": ".*", "read": ".*"})
        yield name


def _publish(broker: Broker, vhost: str, exchange: str, key: str, count: int, tag: str) -> None:
    with channel(broker, vhost) as ch:
        for n in range(count):
            ch.basic_publish(exchange, key, f"{tag}-{n}".encode(), pika.BasicProperties(delivery_mode=2),
                             mandatory=True)


def declare_sneakers(broker: Broker, vhost: str) -> None:
    """Sneakers 2.x `Maxretry#initialize` for `mailer`, as the worker runs it at start-up."""
    with channel(broker, vhost) as ch:
        for name in ("mailer-retry", "mailer-error", "mailer-retry-requeue"):
            ch.exchange_declare(name, "topic", durable=True)
        ch.queue_declare("mailer-retry", durable=True, arguments={"x-dead-letter-exchange": "mailer-retry-requeue",
                                                                  "x-message-ttl": SNEAKERS_TTL_MS})
        ch.queue_bind("mailer-retry", "mailer-retry", "#")
        ch.queue_declare("mailer-error", durable=True)
        ch.queue_bind("mailer-error", "mailer-error", "#")
        ch.queue_declare("mailer", durable=True, arguments={"x-dead-letter-exchange": "mailer-retry"})
        ch.queue_bind("mailer", "mailer-retry-requeue", "#")
        ch.exchange_declare("events", "topic", durable=True)
        ch.queue_bind("mailer", "events", "mail.#")


def _snapshot(broker: Broker, vhost: str) -> Snapshot:
    return read_live(broker.client(), vhost)


def _found(config: dict[str, Any], name: str) -> Found:
    model = load_vhost(config, "vhosts[0]")
    return Found(model.name, next(m for m in model.migrations if m.name == name))


def _retire_broker(broker: Broker, vhost: str) -> RetireBroker:
    return RetireBroker(BrokerAccess(broker.management_url, broker.username, broker.password, broker.amqp_port),
                        vhost)


def _until(condition: Any, timeout: float = ARRIVAL_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return bool(condition())


def _step(config: dict[str, Any], step: str) -> dict[str, Any]:
    return {**config, "migrations": [{**m, "step": step} for m in config["migrations"]]}


def test_an_adopted_sneakers_queue_moves_by_shovel_and_retires_only_once_empty(
        broker: Broker, runtime_vhost: str, shovel_user: ShovelAccess) -> None:
    vhost = runtime_vhost
    declare_sneakers(broker, vhost)
    _publish(broker, vhost, "events", "mail.welcome", 3, "mail")
    _publish(broker, vhost, "mailer-retry", "mail.retry", 2, "retrying")
    _publish(broker, vhost, "mailer-error", "mail.failed", 2, "parked")

    adoption = adopt(_snapshot(broker, vhost))
    config = {k: v for k, v in adoption.vhost.items() if k != "import"}
    [migration] = adoption.vhost["migrations"]
    assert migration == {"name": "adopt-mailer", "step": "move", "move": {
        "from": "mailer", "to": "mailer.v2", "external": {
            "error_queue": "mailer-error", "queues": ["mailer-retry"],
            "exchanges": ["mailer-retry", "mailer-retry-requeue", "mailer-error"]}}}

    # Step move: `pulumi up` creates mailer.v2 beside, bound like mailer, and the two shovels.
    moving = record_vhost(adoption.vhost, shovel_user, reveal_secrets=True)
    apply(broker, moving)
    assert _until(lambda: message_counts(broker, vhost, ["mailer.v2", "mailer.v2.error"]) ==
                  {"mailer.v2": 3, "mailer.v2.error": 2}), "the shovels did not move what waited"
    assert message_counts(broker, vhost, ["mailer", "mailer-error", "mailer-retry"]) == {
        "mailer": 0, "mailer-error": 0, "mailer-retry": 2}

    # make migrate-retire in step move: unbind mailer where mailer.v2 is bound the same way; read-only first.
    found = _found(config, "adopt-mailer")
    actions = plan(found, _snapshot(broker, vhost))
    assert [(a.kind, a.binding and a.binding["source"], a.refused) for a in actions] == [(UNBIND, "events", None)]
    lines: list[str] = []
    assert retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), False, lines.append)
    assert "read-only" in lines[0] and lines[1].endswith("would do")
    assert any(b["destination"] == "mailer" and b["source"] == "events" for b in _snapshot(broker, vhost).bindings)
    lines.clear()
    assert retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append)
    assert lines[1] == "1. unbind events → mailer ('mail.#'): done", lines
    _publish(broker, vhost, "events", "mail.after", 1, "after")
    assert _until(lambda: message_counts(broker, vhost, ["mailer.v2"]) == {"mailer.v2": 4})
    assert message_counts(broker, vhost, ["mailer"]) == {"mailer": 0}, "the old queue still receives publishes"

    # Step retire: `pulumi up` removes the shovels; mailer-retry still holds 2 messages (their TTL is 10 minutes).
    retiring = _step(config, "retire")
    apply_update(broker, moving, record_vhost(retiring, shovel_user, reveal_secrets=True))
    found = _found(retiring, "adopt-mailer")
    lines.clear()
    assert not retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append)
    assert lines[1].startswith("1. delete queue mailer-retry if empty and unused: refused: mailer-retry holds 2 "
                               "ready"), lines
    assert lines[-1].startswith("Stopped at the first refusal")
    assert message_counts(broker, vhost, ["mailer-retry", "mailer", "mailer-error"]) == {
        "mailer-retry": 2, "mailer": 0, "mailer-error": 0}, "a refused retire changed something"

    # The broker's own refusal (no depth read first): queue.delete(if_empty, if_unused) keeps the messages.
    with _retire_broker(broker, vhost).connect() as writer:
        answer = writer.delete_queue("mailer-retry", quorum=False)
    assert answer is not None and answer[0] == 406 and "not empty" in answer[1]
    assert message_counts(broker, vhost, ["mailer-retry"]) == {"mailer-retry": 2}

    # Once the waits are over (here: moved by hand to the successor), the retire finishes.
    with channel(broker, vhost) as ch:
        for _ in range(2):
            method, properties, body = ch.basic_get("mailer-retry")
            assert method is not None
            ch.basic_publish("", "mailer.v2", body, properties, mandatory=True)
            ch.basic_ack(method.delivery_tag)
    lines.clear()
    assert retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append), lines
    assert lines[1:7] == [
        "1. delete queue mailer-retry if empty and unused: done", "2. delete queue mailer if empty and unused: done",
        "3. delete queue mailer-error if empty and unused: done", "4. delete exchange mailer-retry if unused: done",
        "5. delete exchange mailer-retry-requeue if unused: done", "6. delete exchange mailer-error if unused: done"]
    left = _snapshot(broker, vhost)
    assert not {"mailer", "mailer-retry", "mailer-error"} & set(left.queues)
    assert not {"mailer-error", "mailer-retry", "mailer-retry-requeue"} & set(left.exchanges)
    assert message_counts(broker, vhost, ["mailer.v2", "mailer.v2.error"]) == {"mailer.v2": 6, "mailer.v2.error": 2}
    # Running it again finds everything gone and changes nothing.
    lines.clear()
    assert retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append)
    assert all(line.endswith("already gone") for line in lines[1:7]), lines


def test_the_old_queue_is_not_unbound_where_the_successor_is_not_bound(broker: Broker, runtime_vhost: str) -> None:
    vhost = runtime_vhost
    declare_sneakers(broker, vhost)
    config = {"name": vhost, "existing": True, "exchanges": [{"name": "events", "type": "topic"}],
              "queues": [{"name": "mailer.v2", "retry": {"delays": ["1m"], "max_retries": 5}}],
              "migrations": [{"name": "adopt-mailer", "step": "move",
                              "move": {"from": "mailer", "to": "mailer.v2", "external": True}}]}
    with channel(broker, vhost) as ch:
        ch.queue_declare("mailer.v2", durable=True, arguments={"x-queue-type": "classic"})
    lines: list[str] = []
    found = _found(config, "adopt-mailer")
    assert not retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append)
    assert "refused: the successor mailer.v2 is not bound from exchange events with routing key mail.#" in lines[1]
    assert any(b["destination"] == "mailer" and b["source"] == "events" for b in _snapshot(broker, vhost).bindings)


def test_a_quorum_old_queue_is_deleted_only_once_empty(broker: Broker, runtime_vhost: str) -> None:
    """RabbitMQ refuses queue.delete's if-empty and if-unused on quorum queues (540 NOT_IMPLEMENTED, which closes
    the connection): such a queue is read first and deleted only when it holds nothing."""
    vhost = runtime_vhost
    with channel(broker, vhost) as ch:
        ch.queue_declare("ledger", durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare("ledger.v2", durable=True, arguments={"x-queue-type": "quorum"})
    _publish(broker, vhost, "", "ledger", 1, "entry")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused, channel(broker, vhost) as ch:
        ch.queue_delete("ledger", if_empty=True)
    assert refused.value.reply_code == 540
    config = {"name": vhost, "existing": True, "queues": [{"name": "ledger.v2", "type": "quorum"}],
              "migrations": [{"name": "adopt-ledger", "step": "retire",
                              "move": {"from": "ledger", "to": "ledger.v2", "external": True}}]}
    found = _found(config, "adopt-ledger")
    assert [a.kind for a in plan(found, _snapshot(broker, vhost))] == [DELETE_QUEUE]
    lines: list[str] = []
    assert not retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append)
    assert "refused: ledger holds 1 ready" in lines[1], lines
    assert message_counts(broker, vhost, ["ledger"]) == {"ledger": 1}
    with channel(broker, vhost) as ch:
        ch.queue_purge("ledger")
    lines.clear()
    assert retire(found, _snapshot(broker, vhost), _retire_broker(broker, vhost), True, lines.append), lines
    assert lines[1] == "1. delete queue ledger if empty and unused: done"
    assert "ledger" not in _snapshot(broker, vhost).queues


def test_an_old_queue_producers_still_publish_to_by_name_is_not_deleted(broker: Broker, runtime_vhost: str) -> None:
    """TaskBunny-style producers publish to the default exchange with the queue's name as key: once the old queue is
    deleted those publishes are unroutable. While the management API sees publishes into it, it is kept, even empty."""
    vhost = runtime_vhost
    with channel(broker, vhost) as ch:
        ch.queue_declare("ledger", durable=True, arguments={"x-queue-type": "classic"})
        ch.queue_declare("ledger.v2", durable=True, arguments={"x-queue-type": "classic"})
    config = {"name": vhost, "existing": True, "queues": [{"name": "ledger.v2", "type": "classic"}],
              "migrations": [{"name": "adopt-ledger", "step": "retire",
                              "move": {"from": "ledger", "to": "ledger.v2", "external": True}}]}
    found = _found(config, "adopt-ledger")
    retire_broker = _retire_broker(broker, vhost)

    def produce_and_consume() -> None:  # a producer by name and a consumer that keeps the queue empty
        with channel(broker, vhost) as ch:
            for n in range(10):
                ch.basic_publish("", "ledger", f"entry-{n}".encode(), pika.BasicProperties(delivery_mode=2),
                                 mandatory=True)
                method, _, _ = ch.basic_get("ledger", auto_ack=True)
                assert method is not None
                time.sleep(0.2)

    deadline = time.monotonic() + 30
    while retire_broker.publish_rate("ledger") == 0 and time.monotonic() < deadline:
        produce_and_consume()
    assert retire_broker.publish_rate("ledger") > 0, "the management API never reported the publishes"
    lines: list[str] = []
    assert not retire(found, _snapshot(broker, vhost), retire_broker, True, lines.append)
    assert lines[1].startswith("1. delete queue ledger if empty and unused: refused: ledger is empty but still "
                               "receives messages"), lines
    assert "ledger" in _snapshot(broker, vhost).queues
    # Once nothing arrives any more, it goes.
    assert _until(lambda: retire_broker.publish_rate("ledger") == 0, 30)
    lines.clear()
    assert retire(found, _snapshot(broker, vhost), retire_broker, True, lines.append), lines
    assert "ledger" not in _snapshot(broker, vhost).queues
