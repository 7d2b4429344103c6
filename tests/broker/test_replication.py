"""`quorum_group_size` on the single-node brokers (issue 24 point 3): both take `x-quorum-initial-group-size` as
the provider declares it, a size of 3 gives the queue one member (RabbitMQ does not refuse a size above the
nodes it has), and doctor warns so, naming the key and the node count. The three-node clusters:
tests/cluster/test_replication.py.
"""

from __future__ import annotations

from components.config.load import load_stack_config
from tests.support.deploy import Deployer
from tests.support.doctor import planned_objects
from tests.support.mirror import Broker, call, esc
from tools.lib import doctor

CONFIG = {"queues": [{"name": "replicated", "type": "quorum", "quorum_group_size": 3}]}


def test_a_single_node_declares_a_group_of_3_with_one_member_and_doctor_warns(broker: Broker, deploy: Deployer,
                                                                               vhost: str) -> None:
    deploy(CONFIG)
    queue = call(broker, "GET", f"queues/{esc(vhost)}/replicated")[1]
    assert queue["arguments"]["x-quorum-initial-group-size"] == 3
    assert len(queue["members"]) == 1

    config = load_stack_config({"vhosts": [{"name": vhost, **CONFIG}]})
    facts = doctor.read_facts(broker.client(), [vhost])
    [warning] = [w for w in doctor.diagnose(config, planned_objects(config), facts).warnings
                 if "quorum_group_size" in w]
    assert warning.startswith(f"vhosts[{vhost}].queues[replicated].quorum_group_size asks for 3 replicas of quorum "
                              "queue 'replicated'")
    assert "the broker is a single-node broker" in warning
