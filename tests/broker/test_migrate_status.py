"""`make migrate-status` on real brokers (3.10.8 and 4.3.6): a move's old queues read by passive declare, its shovels'
state, and the next step, through each step of a small migration. The shovel here is declared over the management
API as the stack declares it (same user-less URI shape aside: it connects as guest), to move real messages.
Each test runs in a vhost of its own, `mig-<random>`, deleted afterwards."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from components.config.load import load_vhost
from components.model.naming import shovel_user
from components.plan.planner import plan_vhost
from rabbitmq_retry_client.depth import BrokerAccess, DepthReader
from tests.support.admin import wait_for
from tests.support.amqp import channel
from tests.support.deploy import throwaway_vhost
from tests.support.environment import missing
from tests.support.mirror import Broker, call, esc, get
from tools.lib.evaluation import MigrationInfo, infos
from tools.lib.migrate_status import Status, status

CONFIG: dict[str, Any] = {
    "queues": [{"name": "orders", "type": "classic", "retry": {"delays": ["1s"]}},
               {"name": "orders.q", "type": "quorum", "retry": {"delays": ["1s"]}}],
    "migrations": [{"name": "orders-to-quorum", "move": {"from": "orders", "to": "orders.q"}, "step": "move"}],
}


@pytest.fixture
def mig_vhost(broker: Broker) -> Iterator[str]:
    with throwaway_vhost(broker, "mig") as name:
        call(broker, "PUT", f"vhosts/{esc(name)}", {})
        yield name


def migration(vhost: str, step: str) -> MigrationInfo:
    """The migration as the plan has it (`make migrate-status` reads the same)."""
    config = {**copy.deepcopy(CONFIG), "name": vhost}
    config["migrations"][0]["step"] = step
    if step == "retire":
        config["queues"].pop(0)
    planned = plan_vhost(load_vhost(config, "vhosts[0]"), "vhosts[0]", shovel_user("rabbitmq-retry", "dev"))
    [info] = infos([("x", planned)])
    return info


def read_status(broker: Broker, vhost: str, step: str) -> Status:
    reader = DepthReader(BrokerAccess(broker.management_url, broker.username, broker.password, broker.amqp_port))
    return status(migration(vhost, step), reader.read, lambda v: get(broker, f"shovels/{esc(v)}") or [], "dev")


def declare(broker: Broker, vhost: str, queue: str, queue_type: str, messages: int = 0) -> None:
    with channel(broker, vhost) as opened:
        opened.queue_declare(queue, durable=True, arguments={"x-queue-type": queue_type})
        for i in range(messages):
            opened.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)


def shovel(broker: Broker, vhost: str, name: str, source: str, destination: str) -> None:
    uri = f"amqp://{broker.username}:{broker.password}@localhost:{broker.amqp_port}/{esc(vhost)}"
    call(broker, "PUT", f"parameters/shovel/{esc(vhost)}/{esc(name)}", {"value": {
        "src-uri": [uri], "dest-uri": [uri], "src-protocol": "amqp091", "dest-protocol": "amqp091",
        "src-queue": source, "dest-queue": destination, "ack-mode": "on-confirm", "src-delete-after": "never"}})


def test_a_move_reads_not_yet_then_drained_then_retired(broker: Broker, mig_vhost: str):
    if get(broker, "shovels") is None:
        missing(f"{broker.name}: the shovel plugin is not enabled (scripts/brokers.sh ensure enables it)")
    for queue, queue_type, messages in (("orders", "classic", 5), ("orders.wait.1", "classic", 0),
                                        ("orders.error", "classic", 2), ("orders.q", "quorum", 0),
                                        ("orders.q.error", "quorum", 0)):
        declare(broker, mig_vhost, queue, queue_type, messages)

    before = read_status(broker, mig_vhost, "move")
    assert [(q, d.messages if d else None) for q, d in before.depths] == [
        ("orders", 5), ("orders.wait.1", 0), ("orders.error", 2)]
    assert before.shovels == (("rabbitmq-retry.migrate.orders-to-quorum", "missing"),
                              ("rabbitmq-retry.migrate.orders-to-quorum.error", "missing"))
    assert before.next_step == ("step move not applied yet: shovel rabbitmq-retry.migrate.orders-to-quorum is not on "
                                "the broker; apply it with `pulumi up --stack dev`")

    shovel(broker, mig_vhost, "rabbitmq-retry.migrate.orders-to-quorum", "orders", "orders.q")
    shovel(broker, mig_vhost, "rabbitmq-retry.migrate.orders-to-quorum.error", "orders.error", "orders.q.error")
    drained = wait_for(lambda: (s := read_status(broker, mig_vhost, "move")).next_step.startswith("drained") and s,
                       60, "the shovels to drain the old queues", interval=0.5)
    assert drained.next_step == ("drained: remove orders from vhosts[0].queues and set step: retire in a commit")
    assert {state for _, state in drained.shovels} == {"running"}

    for name in ("rabbitmq-retry.migrate.orders-to-quorum", "rabbitmq-retry.migrate.orders-to-quorum.error"):
        call(broker, "DELETE", f"parameters/shovel/{esc(mig_vhost)}/{esc(name)}")
    waiting = read_status(broker, mig_vhost, "retire")
    assert [q for q, _ in waiting.depths] == ["orders", "orders.error", "orders.wait.1"]
    assert waiting.next_step.startswith("retire not applied yet: `orders`, `orders.error`, `orders.wait.1` still on "
                                        "the broker (`pulumi up --stack dev` deletes them)")
    for queue in ("orders", "orders.error", "orders.wait.1"):
        call(broker, "DELETE", f"queues/{esc(mig_vhost)}/{esc(queue)}")
    assert read_status(broker, mig_vhost, "retire").next_step == "retired: the entry may be removed"
    with channel(broker, mig_vhost) as opened:
        assert opened.queue_declare("orders.q", passive=True).method.message_count == 5
        assert opened.queue_declare("orders.q.error", passive=True).method.message_count == 2
