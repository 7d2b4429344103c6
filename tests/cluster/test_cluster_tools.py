"""`make doctor`, `make drift` and `pulumi up` (the provider's requests, tests/support/mirror.py) against a
cluster (issue 24 points 3 and 4): doctor reports the nodes, the quorum members online and 3.x's dead-letter
stall; with the node behind the endpoint down, doctor and drift say so in one line naming that endpoint (never a
traceback); with a majority of the nodes down, doctor blocks naming them, and a quorum queue cannot be declared:
3.10 refuses it (`cluster_not_formed`, naming the node), 4.3 answers only after its own timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from components.config.load import load_stack_config
from tests.support.admin import STATS_S, wait_for
from tests.support.cluster import ROOT, Cluster
from tests.support.deploy import Deployer
from tests.support.doctor import planned_objects
from tests.support.mirror import MirrorError, apply
from tests.support.retrying import retryable_queue
from tools.lib import doctor

CONFIG: dict[str, Any] = {"exchanges": [{"name": "in", "type": "direct"}],
                          "queues": [retryable_queue("work", "quorum", ["1s"], 2, routing_key="work")]}


def diagnose(cluster: Cluster, index: int, vhost: str) -> tuple[doctor.LiveFacts, doctor.Diagnosis]:
    config = load_stack_config({"vhosts": [{"name": vhost, **CONFIG}]})
    broker = cluster.node(index).broker
    facts = doctor.read_facts(broker.client(), [vhost])
    return facts, doctor.diagnose(config, planned_objects(config), facts)


def tool(name: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    """`python -m tools.<name> --stack prod --endpoint …`, as `make <name>` runs it, with the credentials a stack
    other than dev must be given (docs/tls.md: no guest/guest fallback)."""
    env = {**os.environ, "RABBITMQ_USERNAME": "guest", "RABBITMQ_PASSWORD": "guest"}
    return subprocess.run([sys.executable, "-m", f"tools.{name}", "--stack", "prod", "--endpoint", endpoint],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env)


def test_doctor_reports_the_cluster_and_a_node_down_and_names_an_endpoint_that_is_down(
        cluster: Cluster, vhost: str) -> None:
    Deployer(cluster.node(1).broker, vhost)(CONFIG)
    # A node's record carries its version once the management agent has sampled it: right after `make test`'s
    # `clusters.sh ensure` restarted or re-enabled plugins on a node, it may not yet (seen in a CI run).
    def with_versions() -> tuple[doctor.LiveFacts, doctor.Diagnosis] | None:
        found = diagnose(cluster, 1, vhost)
        return found if all(n.version for n in found[0].nodes) else None
    facts, found = wait_for(with_versions, STATS_S, "every node's record to carry its version", interval=0.5)
    assert [(n.name, n.running) for n in facts.nodes] == [(n.name, True) for n in cluster.nodes]
    assert {n.version.rsplit(".", 1)[0] for n in facts.nodes} == {cluster.version}
    assert facts.quorum and all(len(q.members) == 3 and set(q.online) == set(q.members) for q in facts.quorum)
    assert (doctor.DEAD_LETTER_STALL in found.warnings) == (cluster.version == "3.10")
    assert not [w for w in found.warnings if "single node" in w or "not running" in w or "members online" in w]
    assert found.status == 0, found.blocking

    down = cluster.node(3)
    cluster.kill(3)
    # The management API sees each queue's members go offline one queue after another: wait for all of them.
    facts, found = wait_for(lambda: (d := diagnose(cluster, 1, vhost)) and d[0].quorum and len(
        [w for w in d[1].warnings if "members online" in w]) == len(d[0].quorum) and d, 60,
        "doctor to see every quorum queue's member offline")
    assert [(n.name, n.running) for n in facts.nodes if not n.running] == [(down.name, False)]
    assert any(w.startswith(f"cluster node {down.name} is not running") for w in found.warnings)
    offline = [w for w in found.warnings if w.endswith(f"members online ({down.name} offline)")]
    assert len(offline) == len(facts.quorum) and all(": 2 of 3 members online" in w for w in offline)
    assert found.status == 0, found.blocking

    for name in ("doctor", "drift"):
        result = tool(name, down.broker.management_url)
        assert result.returncode == 1, result
        assert "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith(
            f"error: the management API at {down.broker.management_url} refuses connections"), result.stderr
    cluster.start(3)


def test_with_a_majority_down_doctor_blocks_and_a_quorum_queue_cannot_be_declared(
        cluster: Cluster, vhost: str, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = Deployer(cluster.node(1).broker, vhost).record(CONFIG)
    cluster.kill(2)
    cluster.kill(3)
    _, found = diagnose(cluster, 1, vhost)
    assert found.status == 2
    names = f"{cluster.node(2).name}, {cluster.node(3).name}"
    assert found.blocking[0].startswith(f"only 1 of 3 cluster nodes run ({names} down): without a majority")

    started = time.monotonic()
    with pytest.raises((MirrorError, OSError)) as refused:
        apply(cluster.node(1).broker, deployment.resources)
    took = time.monotonic() - started
    with capsys.disabled():
        print(f"\n[cluster {cluster.version}] `pulumi up` with a majority down, after {took:.1f} s: {refused.value}")
    if cluster.version == "3.10":
        assert isinstance(refused.value, MirrorError) and "cluster_not_formed" in str(refused.value)
        assert cluster.node(1).name in str(refused.value), "the broker names the node"
    cluster.start(2)
    cluster.start(3)
