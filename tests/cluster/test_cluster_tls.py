"""A three-node cluster over TLS (scripts/clusters.sh gives the 4.3 cluster AMQPS and HTTPS listeners beside the
plain ones): the topology applied over HTTPS through one node, a consumer given the three nodes as AMQPS URLs with
the CA file and the client certificate, the `rabbitmq-retry` command with comma-separated AMQPS URLs, and `make
doctor` against a node's HTTPS endpoint seeing the three nodes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rabbitmq_retry_client import RetryingConsumer
from tests.support.cluster import Cluster
from tests.support.deploy import Deployer
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import Recorder, publish_ids, retryable_queue, run_consumers

ROOT = Path(__file__).resolve().parents[2]


def tls_nodes(cluster: Cluster) -> list[Broker]:
    nodes = [n.tls for n in cluster.nodes if n.tls is not None]
    if len(nodes) != len(cluster.nodes):
        pytest.skip(f"the {cluster.version} cluster has no TLS listeners (scripts/clusters.sh TLS_CLUSTERS)")
    return nodes


def amqps_url(node: Broker, vhost: str) -> str:
    return f"amqps://{node.username}:{node.password}@{node.host}:{node.amqp_port}/{esc(vhost)}"


def test_a_consumer_given_the_nodes_as_amqps_urls_works(cluster: Cluster, vhost: str) -> None:
    nodes = tls_nodes(cluster)
    deployment = Deployer(nodes[0], vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                           "queues": [retryable_queue("jobs", "quorum", ["200ms"], 2)]})
    publish_ids(nodes[1], vhost, "in", ["a", "b", "c"])  # through another node, over AMQPS
    recorder = Recorder(lambda message_id: 1 if message_id == "a" else 0)
    consumer = RetryingConsumer([amqps_url(n, vhost) for n in nodes], deployment.contracts["jobs"], recorder,
                                tls=nodes[0].tls)
    run_consumers([consumer], lambda: consumer.processed >= 3, timeout=60)
    assert (consumer.processed, consumer.retried) == (3, 1)
    assert call(nodes[2], "GET", f"queues/{esc(vhost)}/jobs")[1]["type"] == "quorum"


def test_the_command_and_doctor_reach_the_cluster_over_tls(cluster: Cluster, vhost: str) -> None:
    nodes = tls_nodes(cluster)
    Deployer(nodes[0], vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                              "queues": [{"name": "jobs", "type": "quorum", "bindings": [{"exchange": "in"}]}]})
    tls = nodes[0].tls
    assert tls is not None
    flags = ["--cacert-file", str(tls.cacert_file), "--clientcert-file", str(tls.clientcert_file),
             "--clientkey-file", str(tls.clientkey_file)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RABBITMQ_USERNAME": "guest", "RABBITMQ_PASSWORD": "guest"}
    done = subprocess.run([sys.executable, "-m", "rabbitmq_retry_client", "publish", "--exchange", "in", "--count",
                           "2", "--url", ",".join(amqps_url(n, vhost) for n in nodes), *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    doctor = subprocess.run([sys.executable, "-m", "tools.doctor", "--stack", "dev", "--endpoint",
                             nodes[1].management_url, *flags], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=env)
    assert "error:" not in doctor.stderr, doctor.stderr
    assert f"- TLS: verified with {tls.cacert_file}" in doctor.stdout
    assert "- cluster of 3 nodes, 3 running: " in doctor.stdout, doctor.stdout
