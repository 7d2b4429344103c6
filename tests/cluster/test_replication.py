"""The replication factor on a three-node cluster (issue 24 point 3): a quorum queue declared with
`quorum_group_size` N, the way `pulumi up` declares it (tests/support/mirror.py), has exactly N members on N
distinct nodes, and so has every queue a retryable queue owns; without the key a quorum queue has a member on
every node. A size above the running nodes is declared with one member per node, and doctor warns about it,
naming the key and the node count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from components.config.load import load_stack_config
from tests.support.cluster import Cluster
from tests.support.deploy import Deployer, throwaway_vhost
from tests.support.doctor import planned_objects
from tests.support.retrying import retryable_queue
from tools.lib import doctor

CONFIG: dict[str, Any] = {
    "exchanges": [{"name": "in", "type": "direct"}],
    "queues": [{**retryable_queue("two", "quorum", ["1s", "5s"], 2), "quorum_group_size": 2},
               {"name": "three", "type": "quorum", "quorum_group_size": 3},
               {"name": "unset", "type": "quorum"},
               {"name": "four", "type": "quorum", "quorum_group_size": 4}],
}
EXPECTED_MEMBERS = {"two": 2, "two.wait.1": 2, "two.wait.2": 2, "two.error": 2, "three": 3, "unset": 3, "four": 3}
"""Members per queue on a three-node cluster: the size asked for, every node without one, and at most the nodes."""


@pytest.fixture
def vhost(cluster: Cluster) -> Iterator[str]:
    """A fresh `replication-…` vhost that the test's topology creates; deleted afterwards with everything in it."""
    with throwaway_vhost(cluster.answering(), "replication") as name:
        yield name


def test_a_quorum_group_size_sets_the_members_of_the_queue_and_of_every_queue_it_owns(
        cluster: Cluster, vhost: str) -> None:
    Deployer(cluster.node(1).broker, vhost)(CONFIG)
    queues = {q["name"]: q for q in cluster.queues(vhost)}
    node_names = {n.name for n in cluster.nodes}
    assert {name: len(q["members"]) for name, q in queues.items()} == EXPECTED_MEMBERS
    for name, queue in queues.items():
        assert len(set(queue["members"])) == len(queue["members"]) and set(queue["members"]) <= node_names, name
        assert queue["arguments"].get("x-quorum-initial-group-size") == (
            None if name == "unset" else 4 if name == "four" else EXPECTED_MEMBERS[name]), name

    config = load_stack_config({"vhosts": [{"name": vhost, **CONFIG}]})
    broker = cluster.node(1).broker
    facts = doctor.read_facts(broker.client(), [vhost])
    warnings = [w for w in doctor.diagnose(config, planned_objects(config), facts).warnings
                if "quorum_group_size" in w]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"vhosts[{vhost}].queues[four].quorum_group_size asks for 4 replicas of quorum queue 'four'"), warnings
    assert "a cluster with 3 running nodes" in warnings[0]
