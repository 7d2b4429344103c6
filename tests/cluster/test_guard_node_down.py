"""The guards on a cluster with a node down (3.10.8 and 4.3.6): a queue that cannot answer is never read as empty.

A classic queue lives on one node. With that node down, the other nodes answer a passive declare with 404 ("home
node … is down or inaccessible"), the same code as for a queue that does not exist; read as "no queue", the guard
would let `pulumi up` delete it, and what it held would be gone when the node came back. The guard must refuse
instead, and the queue must still hold its messages once the node is back. The same for a path: the path guard
refuses a change whose queue it cannot read.
"""

from __future__ import annotations

import pika
import pytest

from components.pulumi.guard import GuardError, check_queue_delete, path_refusal
from rabbitmq_retry_client.depth import BrokerAccess, DepthError, DepthReader
from tests.support.admin import wait_for
from tests.support.amqp import channel
from tests.support.cluster import REJOIN_S, Cluster
from tests.support.mirror import call, esc

HELD = 4


def reader(cluster: Cluster, index: int) -> DepthReader:
    broker = cluster.node(index).broker
    return DepthReader(BrokerAccess(broker.management_url, broker.username, broker.password, broker.amqp_port))


def test_a_classic_queue_whose_node_is_down_is_refused_not_read_as_missing(cluster: Cluster, vhost: str):
    home = cluster.node(3)
    call(home.broker, "PUT", f"vhosts/{esc(vhost)}", {})
    with channel(home.broker, vhost) as opened:  # a classic queue lives on the node that declared it
        opened.queue_declare("orders.wait.1", durable=True, arguments={"x-queue-type": "classic"})
        for i in range(HELD):
            opened.basic_publish("", "orders.wait.1", f"m{i}".encode(), pika.BasicProperties(delivery_mode=2),
                                 mandatory=True)
    assert reader(cluster, 1).read(vhost, "orders.wait.1").messages == HELD

    cluster.kill(3)
    with pytest.raises(DepthError, match=r"passive declare of 'orders.wait.1'.*404"):
        reader(cluster, 1).read(vhost, "orders.wait.1")
    with pytest.raises(GuardError, match=r'refusing to delete queue "orders.wait.1" .*cannot prove it is empty'):
        check_queue_delete(vhost, "orders.wait.1", reader(cluster, 1).read, frozenset(), warn=lambda _: None)
    inventory = {"vhost": vhost, "paths": [{"path": "orders", "queues": ["orders.wait.1"],
                                           "parts": {"Queue orders.wait.1": "a"},
                                           "needs": {"orders.wait.1": ["Queue orders.wait.1"]}}]}
    why = path_refusal(inventory, None, reader(cluster, 1).read, frozenset())
    assert why is not None and '"orders.wait.1" cannot be read' in why

    cluster.start(3)

    def answers() -> bool:
        try:
            return reader(cluster, 1).read(vhost, "orders.wait.1") is not None
        except DepthError:
            return False
    wait_for(answers, REJOIN_S, "the queue to answer again once its node is back", interval=1.0)
    assert reader(cluster, 1).read(vhost, "orders.wait.1").messages == HELD
