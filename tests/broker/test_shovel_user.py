"""Each stack's shovel user on real brokers (3.10.8 and 4.3.6): named after the Pulumi project and stack
(`naming.shovel_user`), with the plan's least-privilege permissions and the URI `naming.shovel_uri` builds, it moves
messages; and two stacks migrating on one broker do not disturb each other: the first to finish deletes its own
user, and the other's shovel keeps moving. (With one user for every stack, that deletion closed the other stack's
shovel connections.) The user, permissions and shovel are declared over the management API with the plan's values,
the body the provider sends (docs/provider.md); each test runs in a vhost of its own, `shu-<random>`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from components.config.load import load_vhost
from components.model import naming
from components.model.plan_types import VhostPlan
from components.plan.planner import plan_vhost
from tests.support.admin import wait_for
from tests.support.amqp import channel
from tests.support.deploy import throwaway_vhost
from tests.support.environment import missing
from tests.support.mirror import Broker, call, esc, get

PASSWORD = "pa ss/wörd:@"
"""Characters the URI must escape."""


@pytest.fixture
def shu_vhost(broker: Broker) -> Iterator[str]:
    if get(broker, "shovels") is None:
        missing(f"{broker.name}: the shovel plugin is not enabled (scripts/brokers.sh ensure enables it)")
    with throwaway_vhost(broker, "shu") as name:
        call(broker, "PUT", f"vhosts/{esc(name)}", {})
        yield name


def stack_plan(vhost: str, stack: str, prefix: str) -> VhostPlan:
    """Stack `stack` moving its plain queue `<prefix>.src` (classic) to `<prefix>.dst` (quorum)."""
    config: dict[str, Any] = {
        "name": vhost,
        "queues": [{"name": f"{prefix}.src", "type": "classic"}, {"name": f"{prefix}.dst", "type": "quorum"}],
        "migrations": [{"name": f"{prefix}-to-quorum", "move": {"from": f"{prefix}.src", "to": f"{prefix}.dst"},
                        "step": "move"}],
    }
    return plan_vhost(load_vhost(config, "vhosts[0]"), "vhosts[0]", naming.shovel_user("rabbitmq-retry", stack))


def apply_shovels(broker: Broker, vhost: str, plan: VhostPlan) -> str:
    """What `pulumi up` creates for the plan's move: its queues, the stack's shovel user, its permissions in the
    vhost, then the shovel. Returns the user's name."""
    [grant] = plan.shovel_permissions
    with channel(broker, vhost) as opened:
        for queue in plan.queues:
            opened.queue_declare(queue.name, durable=True, arguments=queue.arguments)
    call(broker, "PUT", f"users/{esc(grant.user)}", {"password": PASSWORD, "tags": ""})
    call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(grant.user)}",
         {"configure": grant.configure.regex, "write": grant.write.regex, "read": grant.read.regex})
    uri = naming.shovel_uri(grant.user, PASSWORD, broker.amqp_port, vhost)
    for s in plan.shovels:
        assert s.user == grant.user
        call(broker, "PUT", f"parameters/shovel/{esc(vhost)}/{esc(s.name)}", {"value": {
            "src-uri": [uri], "dest-uri": [uri], "ack-mode": s.ack_mode, "src-protocol": "amqp091",
            "dest-protocol": "amqp091", "src-queue": s.source, "dest-queue": s.destination, "reconnect-delay": 1,
            "src-delete-after": s.source_delete_after}})
    return grant.user


def publish(broker: Broker, vhost: str, queue: str, count: int, start: int = 0) -> None:
    with channel(broker, vhost) as opened:
        for i in range(start, start + count):
            opened.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)


def depth(broker: Broker, vhost: str, queue: str) -> int:
    with channel(broker, vhost, confirms=False) as opened:
        return int(opened.queue_declare(queue, passive=True).method.message_count)


def moved(broker: Broker, vhost: str, prefix: str, count: int) -> bool:
    return depth(broker, vhost, f"{prefix}.src") == 0 and depth(broker, vhost, f"{prefix}.dst") == count


def test_two_stacks_shovel_users_move_their_own_queues_and_one_finishing_leaves_the_other_moving(
        broker: Broker, shu_vhost: str):
    run = uuid.uuid4().hex[:8]
    first, second = stack_plan(shu_vhost, f"orders-{run}", "a"), stack_plan(shu_vhost, f"billing-{run}", "b")
    users = []
    try:
        for plan, prefix in ((first, "a"), (second, "b")):
            users.append(apply_shovels(broker, shu_vhost, plan))
            publish(broker, shu_vhost, f"{prefix}.src", 3)
        assert users == [f"rabbitmq-retry-shovel.rabbitmq-retry.orders-{run}",
                         f"rabbitmq-retry-shovel.rabbitmq-retry.billing-{run}"]
        for prefix in ("a", "b"):
            wait_for(lambda p=prefix: moved(broker, shu_vhost, p, 3), 60, f"stack {prefix}'s shovel to move 3")

        # The second stack retires its move: its shovel and its user go (`pulumi up` deletes both).
        for s in second.shovels:
            call(broker, "DELETE", f"parameters/shovel/{esc(shu_vhost)}/{esc(s.name)}")
        call(broker, "DELETE", f"users/{esc(users.pop())}")

        publish(broker, shu_vhost, "a.src", 2, start=3)
        wait_for(lambda: moved(broker, shu_vhost, "a", 5), 60, "the first stack's shovel to keep moving")
        [state] = [s["state"] for s in get(broker, f"shovels/{esc(shu_vhost)}") or []]
        assert state == "running"
    finally:
        for user in users:
            call(broker, "DELETE", f"users/{esc(user)}")
