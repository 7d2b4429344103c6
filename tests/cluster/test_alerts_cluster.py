"""The generated quorum rules on the real Prometheus (scripts/prometheus.sh), which scrapes every node of the
cluster: killing the node that leads a retryable quorum queue fires `members_offline` for it, and bringing the node
back resolves it. Asserts firing and
resolving, never how fast."""

from __future__ import annotations

import time
from typing import Any

import pytest

from components.config.load import load_stack_config
from components.plan.alert_rules import rule_file, stack_rules
from components.pulumi.stack_resources import plan_stack
from tests.support import prometheus
from tests.support.cluster import Cluster
from tests.support.deploy import Deployer
from tests.support.retrying import retryable_queue

WITHIN = 180
"""Seconds an alert is given to fire or resolve (scrape 2s, stats tick 5s, `for: 0s`, a node's boot)."""


@pytest.fixture(scope="module", autouse=True)
def running_prometheus() -> None:
    prometheus.ensure()


def test_a_killed_leader_fires_members_offline_and_its_return_resolves_it(cluster: Cluster, vhost: str) -> None:
    config: dict[str, Any] = {"name": vhost, "exchanges": [{"name": "in", "type": "direct"}],
                              "queues": [retryable_queue("work", "quorum", ["100ms"], 1, routing_key="work")]}
    Deployer(cluster.node(1).broker, vhost)(config)
    assert cluster.leader(vhost, "work").index == 1
    stack = load_stack_config({"vhosts": [config], "alerts": {
        "selector": {"broker": f"cluster-{cluster.version}"}, "members_offline": {"for": "0s", "window": "30m"},
        "no_leader": {"for": "1m"}}})
    rules = rule_file(stack_rules("cluster-test", stack.alerts, [p for _, p in plan_stack(stack, "shovel")]))
    offline = {"alertname": "RabbitmqRetryQuorumMembersOffline", "vhost": vhost, "queue": "work"}
    members = ("/api/v1/query?query=count%28%7B__name__%3D~%22rabbitmq_detailed_raft_term%28_total%29%3F%22%2C"
               f"vhost%3D%22{vhost}%22%2Cqueue%3D%22work%22%7D%29")

    def reporting() -> int:
        result = prometheus.get(members)["result"]
        return int(result[0]["value"][1]) if result else 0

    with prometheus.loaded(vhost, rules):
        prometheus.wait(lambda: reporting() == 3, WITHIN, "Prometheus sees the three members of work")
        time.sleep(5)  # a few evaluations remember three members (the rule compares with the most seen)
        assert prometheus.alerts(**offline) == []
        cluster.kill(1)
        prometheus.wait(lambda: bool(prometheus.firing(**offline)), WITHIN, "members_offline fires")
        assert float(prometheus.firing(**offline)[0]["value"]) == 2
        cluster.start(1)
        prometheus.wait(lambda: not prometheus.alerts(**offline), WITHIN, "members_offline resolves")
