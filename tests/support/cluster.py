"""The three-node clusters of scripts/clusters.sh for the tests under tests/cluster: which nodes there are (the
script says, so ports live in one place), killing a node with kill -9 and bringing it back, and waiting until
every quorum queue of a vhost has all its members online again.

Clusters come from RABBITMQ_CLUSTERS ("3.10,4.3" by default): the versions whose clusters the script runs.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rabbitmq_retry_client.management import ManagementError
from tests.support.admin import wait_for
from tests.support.deploy import tls_settings
from tests.support.mirror import Broker, MirrorError, call, esc

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS_SH = ROOT / "scripts" / "clusters.sh"
DEFAULT_CLUSTERS = "3.10,4.3"
REJOIN_S = 300.0
"""Generous bound for a restarted node to boot, rejoin and bring its quorum members back (measured 7-20 s)."""


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    """Erlang node name, as the management API reports leaders and members (c310n1@localhost)."""
    broker: Broker
    """This node's AMQP and management endpoints."""
    tls: Broker | None = None
    """Its AMQPS and HTTPS endpoints, on a cluster with TLS listeners (scripts/clusters.sh TLS_CLUSTERS)."""

    def amqp_url(self, vhost: str = "/") -> str:
        return (f"amqp://{self.broker.username}:{self.broker.password}@{self.broker.host}:{self.broker.amqp_port}/"
                f"{esc(vhost).replace('/', '%2F')}")


@dataclass(frozen=True)
class Cluster:
    version: str
    nodes: tuple[Node, ...]

    def node(self, index: int) -> Node:
        return self.nodes[index - 1]

    def by_name(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def urls(self, *order: int, vhost: str = "/") -> list[str]:
        """AMQP URLs of the nodes in `order` (default 1, 2, 3): what a client of the cluster is given."""
        return [self.node(i).amqp_url(vhost) for i in order or range(1, len(self.nodes) + 1)]

    def answering(self) -> Broker:
        """The management endpoint of the first node that answers (a test may have one down)."""
        for node in self.nodes:
            try:
                call(node.broker, "GET", "overview")
            except (OSError, ManagementError, MirrorError):
                continue
            return node.broker
        raise AssertionError(f"no node of the {self.version} cluster answers")

    def problem(self) -> str | None:
        """Why the cluster is not three running nodes that see each other, or None."""
        for node in self.nodes:
            try:
                running = [n["name"] for n in call(node.broker, "GET", "nodes")[1] if n.get("running")]
            except (OSError, ManagementError, MirrorError) as error:
                return f"RabbitMQ {self.version} cluster node {node.name} ({node.broker.management_url}): {error}"
            if len(running) != len(self.nodes):
                return f"RabbitMQ {self.version} cluster node {node.name} sees only {sorted(running)} running"
        return None

    def script(self, *args: str, timeout: float = REJOIN_S) -> str:
        result = subprocess.run([str(CLUSTERS_SH), *args], capture_output=True, text=True, timeout=timeout,
                                check=False)
        if result.returncode != 0:
            raise AssertionError(f"scripts/clusters.sh {' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result.stdout

    def kill(self, index: int) -> None:
        """kill -9 the node's process (returns once it is gone)."""
        self.script("kill-node", self.version, str(index), timeout=60)

    def start(self, index: int) -> None:
        """Start the node and wait until every node sees it running."""
        self.script("start-node", self.version, str(index))

    def restart_stopped(self) -> None:
        """Start every node that does not answer (a test that failed half-way leaves the next one a full cluster)."""
        for node in self.nodes:
            try:
                call(node.broker, "GET", "overview")
            except (OSError, ManagementError, MirrorError):
                self.start(node.index)

    def queues(self, vhost: str) -> list[dict[str, Any]]:
        return list(call(self.answering(), "GET", f"queues/{esc(vhost)}")[1])

    def await_members_online(self, vhost: str, timeout: float = REJOIN_S) -> None:
        """Until every quorum queue of the vhost has each of its members online."""
        def all_online() -> bool:
            quorum = [q for q in self.queues(vhost) if q.get("type") == "quorum"]
            return all(sorted(q.get("online") or []) == sorted(q.get("members") or []) and len(q["members"]) ==
                       len(self.nodes) for q in quorum)

        wait_for(all_online, timeout, f"every quorum queue of {vhost} with all members online", interval=0.5)

    def leader(self, vhost: str, queue: str) -> Node:
        info = call(self.answering(), "GET", f"queues/{esc(vhost)}/{esc(queue)}")[1]
        return self.by_name(str(info["leader"]))


def configured_clusters(username: str = "guest", password: str = "guest") -> list[Cluster]:
    """The clusters of RABBITMQ_CLUSTERS, their nodes as scripts/clusters.sh lists them."""
    clusters = []
    for version in filter(None, (v.strip() for v in os.environ.get("RABBITMQ_CLUSTERS", DEFAULT_CLUSTERS).split(","))):
        listed = subprocess.run([str(CLUSTERS_SH), "nodes", version], capture_output=True, text=True, check=True,
                                timeout=30).stdout
        nodes = []
        for line in listed.splitlines():
            index, name, amqp, management, _pid_file, amqps, https = line.split()
            tls = None if amqps == "-" else Broker(f"{version}-n{index}-tls", "127.0.0.1", int(amqps), int(https),
                                                   username, password, tls=tls_settings())
            nodes.append(Node(int(index), name, Broker(f"{version}-n{index}", "127.0.0.1", int(amqp),
                                                       int(management), username, password), tls))
        clusters.append(Cluster(version, tuple(nodes)))
    return clusters
