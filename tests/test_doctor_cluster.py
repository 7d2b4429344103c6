"""`make doctor` on a cluster, on facts as the management API reports them (the same on real clusters:
tests/cluster/test_cluster_tools.py): nodes and what runs, quorum members online, the flag and plugin the
stack relies on, quorum queues a single node cannot replicate, and 3.x's dead-letter stall."""

from __future__ import annotations

from typing import Any

from components.config.load import load_stack_config
from tests.conftest import RETRYABLE, vhost_config
from tests.support.doctor import planned_objects
from tools.lib import doctor
from tools.lib.doctor import DEAD_LETTER_STALL, LiveFacts, NodeFacts, QuorumMembers

QUORUM_RETRY = {**RETRYABLE, "type": "quorum"}
NODES = ("n1@h", "n2@h", "n3@h")


def facts(version: str, running: tuple[bool, ...] = (True, True, True), flags: dict[str, str] | None = None,
          plugins: tuple[str, ...] = ("rabbitmq_management",), quorum: tuple[QuorumMembers, ...] = ()) -> LiveFacts:
    nodes = tuple(NodeFacts(name, up, version if up else "") for name, up in zip(NODES, running, strict=False))
    return LiveFacts(version, plugins, {"quorum_queue": "enabled", "stream_queue": "enabled", **(flags or {})},
                     "deployer", ("administrator",), nodes=nodes, quorum=quorum)


def diagnosis(live: LiveFacts, queue: dict[str, Any] = QUORUM_RETRY) -> doctor.Diagnosis:
    config = load_stack_config({"vhosts": [vhost_config(queues=[queue])]})
    return doctor.diagnose(config, planned_objects(config), live)


def test_a_3_x_cluster_states_the_dead_letter_stall_and_4_x_does_not():
    assert DEAD_LETTER_STALL in diagnosis(facts("3.10.8")).warnings
    assert DEAD_LETTER_STALL not in diagnosis(facts("4.3.6")).warnings
    # Only where the broker dead-letters quorum queues at-least-once: classic queues never stall so.
    assert DEAD_LETTER_STALL not in diagnosis(facts("3.10.8"), {**RETRYABLE, "type": "classic"}).warnings


def test_a_single_node_cannot_replicate_the_stacks_quorum_queues():
    single = facts("4.3.6", running=(True,))
    [warning] = [w for w in diagnosis(single).warnings if "single node" in w]
    assert warning.startswith("the broker is a single node (n1@h): the stack's quorum queues have one member each")
    assert not [w for w in diagnosis(single, {**RETRYABLE, "type": "classic"}).warnings if "single node" in w]
    assert not [w for w in diagnosis(facts("4.3.6")).warnings if "single node" in w]


def test_a_node_down_warns_and_a_majority_down_blocks_naming_the_nodes():
    one_down = diagnosis(facts("4.3.6", running=(True, True, False)))
    assert one_down.status == 0
    assert any(w.startswith("cluster node n3@h is not running") for w in one_down.warnings)
    two_down = diagnosis(facts("3.10.8", running=(True, False, False)))
    assert two_down.status == 2
    assert two_down.blocking[0].startswith("only 1 of 3 cluster nodes run (n2@h, n3@h down): without a majority")
    assert "cluster_not_formed" in two_down.blocking[0]


def test_quorum_members_offline_are_named_per_queue():
    members = QuorumMembers("shop", "orders", NODES, NODES[:2])
    found = diagnosis(facts("4.3.6", running=(True, True, False), quorum=(members, QuorumMembers("shop", "audit",
                                                                                                NODES, NODES))))
    assert "quorum queue 'orders' in vhost 'shop': 2 of 3 members online (n3@h offline)" in found.warnings
    assert not [w for w in found.warnings if "'audit'" in w]


def test_3_x_needs_the_stream_queue_flag_for_at_least_once_dead_lettering():
    found = diagnosis(facts("3.10.8", flags={"stream_queue": "disabled"}))
    assert found.blocking == ["feature flag stream_queue is disabled, and the stack uses at-least-once dead-lettering "
                              "of quorum queues (RabbitMQ 3.x): `rabbitmqctl enable_feature_flag stream_queue`"]
    assert diagnosis(facts("4.3.6", flags={"stream_queue": "disabled"})).blocking == []


def test_the_report_lists_nodes_members_the_flag_and_the_shovel_plugin():
    live = facts("3.10.8", running=(True, True, False),
                 quorum=(QuorumMembers("shop", "orders", NODES, NODES[:2]),))
    text = doctor.render("prod", "http://n1:15672", live, diagnosis(live))
    assert ("- cluster of 3 nodes, 2 running: n1@h (running, 3.10.8), n2@h (running, 3.10.8), n3@h (DOWN)"
            in text.splitlines())
    assert "- quorum queues in the stack's vhosts: 1, 0 with every member online; members per queue: 3" in text
    assert "- feature flag stream_queue: enabled (RabbitMQ 3.x needs it for at-least-once dead-lettering)" in text
    assert "- plugin rabbitmq_shovel: not enabled" in text
    shovel = facts("4.3.6", plugins=("rabbitmq_management", "rabbitmq_shovel"))
    assert "- plugin rabbitmq_shovel: enabled" in doctor.render("prod", "u", shovel, diagnosis(shovel))


def test_a_group_size_above_the_running_nodes_warns_naming_the_key_and_the_node_count():
    """Single node, three nodes with one down, and a size inherited from defaults; never at or below the count."""
    def group_warnings(live: LiveFacts, raw: dict[str, Any]) -> list[str]:
        config = load_stack_config(raw)
        return [w for w in doctor.diagnose(config, planned_objects(config), live).warnings
                if "quorum_group_size" in w]

    asks_three = {"vhosts": [vhost_config(queues=[{**QUORUM_RETRY, "quorum_group_size": 3}])]}
    [single] = group_warnings(facts("3.10.8", running=(True,)), asks_three)
    assert single.startswith("vhosts[shop].queues[orders].quorum_group_size asks for 3 replicas of quorum queue "
                             "'orders'")
    assert "the broker is a single-node broker" in single and "at most 1 member," in single
    [one_down] = group_warnings(facts("4.3.6", running=(True, True, False)), asks_three)
    assert "a cluster with 2 running nodes" in one_down and "lower it to 2 or run at least 3 nodes" in one_down
    assert not group_warnings(facts("4.3.6"), asks_three)
    inherited = {"defaults": {"quorum_group_size": 5}, "vhosts": [vhost_config(queues=[QUORUM_RETRY])]}
    [from_defaults] = group_warnings(facts("4.3.6"), inherited)
    assert from_defaults.startswith("vhosts[shop].queues[orders].quorum_group_size (or defaults.quorum_group_size, "
                                    "which "
                                    "it inherits) asks for 5 replicas")
    assert not group_warnings(facts("4.3.6", running=(True,)), {"vhosts": [vhost_config(queues=[QUORUM_RETRY])]})


def test_declared_migrations_need_the_shovel_plugin_and_its_management_plugin():
    """Without rabbitmq_shovel a migration's shovels cannot run (blocking, naming the key and the command); without
    rabbitmq_shovel_management they run unseen (a warning); without migrations neither plugin is asked for."""
    paths = ["vhosts[0].migrations"]
    blocking, warnings = doctor.shovel_findings(paths, facts("4.3.6"))
    assert warnings == [] and len(blocking) == 1
    assert blocking[0].startswith("vhosts[0].migrations: the stack declares migrations, which move messages with "
                                  "shovels, but the plugin rabbitmq_shovel is not enabled")
    assert blocking[0].endswith("`rabbitmq-plugins enable rabbitmq_shovel rabbitmq_shovel_management` on every node "
                                "(online, no restart)")
    blocking, [warning] = doctor.shovel_findings(paths, facts("4.3.6", plugins=("rabbitmq_shovel",)))
    assert blocking == [] and "rabbitmq_shovel_management is not enabled" in warning
    both = facts("3.10.8", plugins=("rabbitmq_shovel", "rabbitmq_shovel_management"))
    assert doctor.shovel_findings(paths, both) == ([], [])
    assert doctor.shovel_findings([], facts("4.3.6")) == ([], [])
    assert doctor.migrations_of(load_stack_config({"vhosts": [vhost_config(queues=[QUORUM_RETRY])]})) == []


def test_doctor_finds_the_migrations_of_a_stack_and_blocks_them_without_the_shovel_plugin():
    queues = [{**RETRYABLE, "type": "classic"}, {**QUORUM_RETRY, "name": "orders.q", "bindings": []}]
    raw = vhost_config(queues=queues)
    raw["queues"][0].pop("bindings", None)
    raw["migrations"] = [{"name": "to-quorum", "move": {"from": queues[0]["name"], "to": "orders.q"}, "step": "move"}]
    config = load_stack_config({"vhosts": [raw]})
    assert doctor.migrations_of(config) == ["vhosts[shop].migrations"]
    found = doctor.diagnose(config, planned_objects(config), facts("4.3.6"))
    assert [b for b in found.blocking if b.startswith("vhosts[shop].migrations: the stack declares migrations")]


def test_doctor_blocks_a_migration_whose_shovels_would_connect_to_a_port_the_broker_does_not_listen_on():
    """A broker listening for AMQP on 5673 (the local 4.3): shovels to the default 5672 would reach another broker,
    or nothing, and never move a message."""
    from dataclasses import replace

    queues = [{**RETRYABLE, "type": "classic"}, {**QUORUM_RETRY, "name": "orders.q", "bindings": []}]
    raw = vhost_config(queues=queues)
    raw["queues"][0].pop("bindings", None)
    raw["migrations"] = [{"name": "to-quorum", "move": {"from": queues[0]["name"], "to": "orders.q"}, "step": "move"}]
    config = load_stack_config({"vhosts": [raw]})
    live = replace(facts("4.3.6", plugins=("rabbitmq_shovel", "rabbitmq_shovel_management")), amqp_ports=(5673,))
    [refusal] = [b for b in doctor.diagnose(config, planned_objects(config), live).blocking if "AMQP port" in b]
    assert refusal.startswith("vhosts[shop].migrations: the migrations' shovels connect to the broker's own AMQP port "
                              "(rabbitmq-retry:amqp_port is unset: 5672), but the broker listens for AMQP on 5673")
    assert refusal.endswith("`pulumi config set --path rabbitmq-retry:amqp_port 5673`")
    assert not [b for b in doctor.diagnose(config, planned_objects(config), live, 5673).blocking
                if "AMQP port" in b]
    # Step retire has no shovel: nothing to check.
    raw["migrations"][0]["step"] = "retire"
    raw["queues"].pop(0)
    retired = load_stack_config({"vhosts": [raw]})
    assert not [b for b in doctor.diagnose(retired, planned_objects(retired), live).blocking
                if "AMQP port" in b]
