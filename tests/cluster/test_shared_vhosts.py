"""Whole vhosts on a shared cluster (issue 24 point 5), on both three-node clusters, the stack applied through one
node's management API the way `pulumi up` applies it (tests/support/mirror.py; user limits through their dynamic
provider's own methods): the vhost's limits and an application user's limits bind the whole cluster, whichever
node a client connects to; quorum queues count toward `max_queues`. And the replication keys beyond the queue
argument: `delay_levels.quorum_group_size` sizes the shared level queues, and with a 4.x `broker.version` every
sized queue's policy carries `target-group-size`, which 4.3.6 applies (3.10.8 refuses the key: its stacks never get
it). No node is stopped here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pika
import pika.exceptions
import pytest

from components.config.load import load_stack_config
from tests.conftest import record_vhost
from tests.support.admin import wait_for
from tests.support.amqp import parameters
from tests.support.cluster import Cluster, Node
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.mirror import apply, call, esc, user_limits_provider
from tests.support.retrying import retryable_queue

PASSWORD = "cl2-cluster-password"
TRACKED_S = 15.0
"""Bound for the cluster to count a new connection on every node (RabbitMQ tracks them asynchronously)."""


@pytest.fixture
def vhost(cluster: Cluster) -> Iterator[str]:
    """A fresh `cl2-…` vhost the test's topology creates; deleted afterwards with everything in it."""
    with throwaway_vhost(cluster.answering(), "cl2") as name:
        yield name


def connect(node: Node, vhost: str, user: str | None = None) -> pika.BlockingConnection:
    password = None if user is None else PASSWORD
    return pika.BlockingConnection(parameters(node.broker, vhost, user, password))


def refused(node: Node, vhost: str, user: str | None = None) -> bool:
    """Whether the node refuses one more connection now (one it accepts is closed again at once)."""
    try:
        connect(node, vhost, user).close()
    except pika.exceptions.AMQPConnectionError:
        return True
    return False


def test_a_vhosts_connection_limit_counts_the_connections_of_every_node(cluster: Cluster, vhost: str) -> None:
    Deployer(cluster.node(1).broker, vhost)({"queues": [{"name": "jobs", "type": "quorum"}],
                                              "limits": {"max_connections": 2}})
    with ExitStack() as open_connections:
        open_connections.enter_context(connect(cluster.node(2), vhost))
        open_connections.enter_context(connect(cluster.node(3), vhost))
        for node in cluster.nodes:  # two open, on two other nodes: the third is refused wherever it goes
            wait_for(lambda node=node: refused(node, vhost), TRACKED_S,  # type: ignore[misc]
                     f"node {node.name} to refuse a third connection to {vhost}", interval=0.5)
    wait_for(lambda: not refused(cluster.node(1), vhost), TRACKED_S, "a connection once the two are closed",
             interval=0.5)


def test_a_vhosts_queue_limit_counts_quorum_queues_declared_through_any_node(cluster: Cluster, vhost: str) -> None:
    """The stack's own quorum queue is one of the two; a second, declared through node 2, is the last."""
    Deployer(cluster.node(1).broker, vhost)({"queues": [{"name": "jobs", "type": "quorum"}],
                                              "limits": {"max_queues": 2}})
    with connect(cluster.node(2), vhost) as connection:
        connection.channel().queue_declare("second", durable=True, arguments={"x-queue-type": "quorum"})
    with connect(cluster.node(3), vhost) as connection, pytest.raises(pika.exceptions.ChannelClosedByBroker) as full:
        connection.channel().queue_declare("third", durable=True, arguments={"x-queue-type": "quorum"})
    assert full.value.reply_code == 406 and "queue limit" in full.value.reply_text
    assert sorted(q["name"] for q in cluster.queues(vhost)) == ["jobs", "second"]


@pytest.fixture
def app_user(cluster: Cluster) -> Iterator[str]:
    """The name of an application user the test's stack creates; deleted afterwards (its limits with it)."""
    name = f"cl2-app-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        call(cluster.answering(), "DELETE", f"users/{esc(name)}")


def test_a_users_connection_limit_set_through_one_node_refuses_it_on_the_others(
        cluster: Cluster, vhost: str, app_user: str) -> None:
    Deployer(cluster.node(1).broker, vhost)(
        {"queues": [{"name": "jobs", "type": "quorum"}],
         "applications": [{"user": app_user, "consumes": ["jobs"], "limits": {"max_connections": 1}}]},
        passwords={app_user: PASSWORD})
    for node in cluster.nodes:  # every node reads the limit set through node 1
        assert user_limits_provider(node.broker).live(app_user) == {"max-connections": 1}
    with connect(cluster.node(2), vhost, app_user):
        for node in (cluster.node(1), cluster.node(3)):
            wait_for(lambda node=node: refused(node, vhost, app_user), TRACKED_S,  # type: ignore[misc]
                     f"node {node.name} to refuse {app_user}'s second connection", interval=0.5)
    # The guest user is not limited by another user's limit.
    assert not refused(cluster.node(3), vhost)


def _apply_stack(cluster: Cluster, raw_vhost: dict[str, Any], version: str) -> None:
    """The vhost of a stack file whose `broker.version` is `version`, recorded and applied through node 1."""
    config = load_stack_config({"broker": {"version": version}, "vhosts": [raw_vhost]})
    apply(cluster.node(1).broker, record_vhost(config.vhosts[0], name="t", reveal_secrets=True))  # type: ignore[arg-type]


def test_group_sizes_of_the_delay_levels_and_4_x_target_group_size(cluster: Cluster, vhost: str) -> None:
    levels_queue = {**retryable_queue("jobs", "quorum", [], 3), "quorum_group_size": 2,
                    "retry": {"strategy": "levels", "max_retries": 3, "backoff": {"initial": "1s", "max": "4s"}}}
    raw = {"name": vhost, "exchanges": [{"name": "in", "type": "direct"}],
           "queues": [levels_queue, {**retryable_queue("orders", "quorum", ["1s"], 2), "quorum_group_size": 2}],
           "delay_levels": {"unit": "1s", "max_delay": "4s", "quorum_group_size": 2}}
    version = "4.3.6" if cluster.version == "4.3" else "3.10.8"
    _apply_stack(cluster, raw, version)
    time.sleep(1)  # policies apply to queues asynchronously
    queues = {q["name"]: q for q in cluster.queues(vhost)}
    levels = [name for name in queues if name.startswith("rabbitmq-retry.")]
    assert levels and all(len(queues[name]["members"]) == 2 for name in levels), {
        name: queues[name]["members"] for name in levels}
    assert all(len(q["members"]) == 2 for q in queues.values())

    def targets() -> dict[str, Any]:
        return {name: (call(cluster.answering(), "GET", f"queues/{esc(vhost)}/{esc(name)}")[1]
                       .get("effective_policy_definition") or {}).get("target-group-size") for name in queues}

    expected = 2 if cluster.version == "4.3" else None
    wait_for(lambda: set(targets().values()) == {expected}, 30.0, f"target-group-size {expected} on every queue",
             interval=0.5)
