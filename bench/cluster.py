"""P1 (delay accuracy) of our strategies on a three-node cluster beside the single node of the same version, so
what replicating quorum queues costs in lateness is a figure of the same run.

The cluster is scripts/clusters.sh's (tests/support/cluster.py: RABBITMQ_CLUSTERS); the benchmark publishes to and
consumes from node 1, and the broker places the queues' leaders. Its queues are quorum queues with a member on
every node (checked after deployment and stated in the results). A cluster that does not answer with three
running nodes is skipped with the reason, never started or repaired here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench import accuracy
from bench.strategies import LEVELS, NATIVE, QUEUE, TIERS
from tests.support.admin import parse_version
from tests.support.cluster import configured_clusters
from tests.support.mirror import call, esc

STRATEGIES = (TIERS, LEVELS, NATIVE)


@dataclass(frozen=True)
class ClusterP1:
    """P1 of our strategies on the cluster of `version`, or why it was skipped."""

    version: str
    nodes: str = ""
    """How the cluster was when measured (nodes running, versions)."""
    outcomes: tuple[accuracy.Outcome, ...] = ()
    members: dict[str, int] | None = None
    """Members of QUEUE's quorum queue per strategy, read after deployment."""
    skipped: str = ""


def p1(series: str, plan: accuracy.Delays, progress: Callable[[str], None]) -> ClusterP1:
    """P1 of TIERS, LEVELS and NATIVE (quorum) on the cluster of `series` (e.g. "4.3")."""
    try:
        cluster = next((c for c in configured_clusters() if c.version == series), None)
    except (OSError, ValueError) as error:  # the script is missing or lists nothing usable
        return ClusterP1(series, skipped=f"scripts/clusters.sh does not list the {series} cluster: {error}")
    if cluster is None:
        return ClusterP1(series, skipped=f"RABBITMQ_CLUSTERS does not name {series}")
    if problem := cluster.problem():
        return ClusterP1(series, skipped=f"the cluster is not healthy: {problem}")
    broker = cluster.node(1).broker
    running = [n for n in call(broker, "GET", "nodes")[1] if n.get("running")]
    version = parse_version(call(broker, "GET", "overview")[1]["rabbitmq_version"])
    nodes = (f"{len(running)} of {len(cluster.nodes)} nodes running ({', '.join(sorted(n['name'] for n in running))})"
             f", RabbitMQ {'.'.join(map(str, version))}; client on node 1 (AMQP {broker.host}:{broker.amqp_port})")
    outcomes = []
    members: dict[str, int] = {}
    for strategy in STRATEGIES:
        progress(f"cluster {series} P1 {strategy.name} (quorum, {plan.messages} messages) …")

        def deployed_members(vhost: str, name: str = strategy.name) -> None:
            members[name] = len(call(broker, "GET", f"queues/{esc(vhost)}/{esc(QUEUE)}")[1].get("members") or [])

        outcome = accuracy.measure(broker, version, strategy, "quorum", plan, on_deployed=deployed_members)
        outcomes.append(outcome)
        progress(f"cluster {series} P1 {strategy.name}: " + (f"skipped: {outcome.skipped}" if outcome.skipped else
                 "p99 " + ", ".join(f"{s.delay_ms} ms {s.percentile(99):.1f}" for s in outcome.stats)))
    return ClusterP1(series, nodes, tuple(outcomes), members)


def series_of(version: Sequence[int]) -> str:
    return f"{version[0]}.{version[1]}"
