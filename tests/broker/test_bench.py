"""`make bench`'s P1 and P2 on tiny inputs against each broker, so they cannot rot: the results file for the
broker has every section, a row per strategy and delay that ran, a reason for every one skipped, and its
plots. How late or how fast is never asserted (bench/results/ has the figures)."""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from bench import accuracy, aio_floor, floor, peers, report, throughput
from bench.__main__ import QUEUE_TYPES, QUICK, Progress, broker_file, p1_runs
from bench.strategies import P1_STRATEGIES
from tests.support import retrying
from tests.support.admin import version
from tests.support.amqp import drain, message_counts, parameters
from tests.support.deploy import Deployer
from tests.support.environment import missing
from tests.support.mirror import Broker
from tests.test_bench import table_rows

TINY = accuracy.Delays(8, (50, 100), (50, 100), 2, 10)


def test_p1_and_p2_on_tiny_inputs_write_the_broker_s_results_file(broker: Broker, tmp_path: Path) -> None:
    context = report.Context("2026-01-02", "2026-01-02 03:04 UTC", "make bench", True, report.machine(), "test")
    tiny = replace(QUICK, plan=TINY, p2_messages=10, floor_messages=10)
    path = broker_file(broker, context, tmp_path, tiny, ["p1", "p2"], Progress())
    assert path is not None
    live = ".".join(map(str, version(broker)))
    assert path.name == f"2026-01-02-rabbitmq-{live}.md"
    text = path.read_text()
    assert f"| broker | RabbitMQ {live}, Erlang " in text and "## P1: delay accuracy" in text
    assert "## P2: retry throughput" in text and "## P2 against the broker's floor" in text
    floor_rows = table_rows(text, "## P2 against the broker's floor")
    assert {(r[0], r[1]) for r in floor_rows} == {
        (t, f"`{row}`") for t in QUEUE_TYPES for row in (*floor.ROWS, *floor.PARTS)
        if row != "native" or (t == "quorum" and version(broker) >= (4, 3, 1))}
    assert "## P1 over 1 round(s): our worst p99 against each peer's worst" in text
    for plot in ("p1", "p2"):
        assert f"![P{plot[1]}" in text and (tmp_path / f"2026-01-02-rabbitmq-{live}-{plot}.png").stat().st_size > 0

    p1 = text.split("## P1", 1)[1].split("## P2", 1)[0].split("## P1 on the", 1)[0]
    skipped = set(re.findall(r"^- `([^`]+)` skipped: \S", p1, re.MULTILINE))
    measured = set(re.findall(r"^\| `([^`]+)` \| [\d,]+ \| [\d,]+ \|", p1, re.MULTILINE))
    peer_names = {"kombu", "kombu (classic)", *(d.name for d in peers.DRAMATIQ)}
    ours_on_classic = {f"{s.name} (classic)" for s, queue_type in p1_runs() if queue_type == "classic"}
    assert ours_on_classic == {"tiers (classic)", "levels (classic)"}, "native runs on quorum queues only"
    assert skipped | measured == {s.name for s in P1_STRATEGIES} | ours_on_classic | peer_names
    assert not skipped & measured
    assert {"tiers", "seed-003"} | ours_on_classic | peer_names <= measured, \
        "tiers, ours on classic queues, the anchor and every peer run on every broker"
    assert ("native" in skipped) == (version(broker) < (4, 3, 1))
    assert "Seed 003's anchor: worst p99" in p1 and "Peers' worst p99: " in p1
    if version(broker) >= (4, 0, 0):
        assert "## P1 on the three-node 4.3 cluster" in text, "beside the single node, or why not"
    peers_p2 = text.split("## P2 beside the peers", 1)[1].split("## Targets", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (classic|quorum) \| [\w_]+ \| `([^`]+)` \|", peers_p2, re.MULTILINE)
    assert {(p, r) for p, _, r in rows} == {("250", loop.row) for loop in peers.LOOPS}, "quick: at 250 only"
    assert "## Targets, from the figures above" in text and "`levels` ÷ kombu, broker CPU per delayed copy" in text
    assert (tmp_path / f"2026-01-02-rabbitmq-{live}-p2-peers.png").stat().st_size > 0

    p2 = text.split("## P2", 1)[1]
    rows = re.findall(r"^\| (\d+) \| (classic|quorum) \| `([^`]+)` \| ([\d,]+) \|", p2, re.MULTILINE)
    skipped_p2 = re.findall(r"^- (classic|quorum) `([^`]+)` skipped: \S", p2, re.MULTILINE)
    expected = {(t, "plain" if s is None else s.row(m)) for t in QUEUE_TYPES for s, m in throughput.ROWS}
    for prefetch in throughput.PREFETCHES:
        assert {(t, r) for p, t, r, _ in rows if p == str(prefetch)} | set(skipped_p2) == expected, prefetch
    for _, _, row, deliveries in rows:
        assert int(deliveries.replace(",", "")) == 10 * (throughput.FAILURES + 1), f"{row}: plain delivers as often"


def test_publish_ids_confirms_every_message_in_order_and_raises_for_one_the_broker_refuses(
        broker: Broker, deploy: Deployer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrying, "PUBLISH_WINDOW", 7)  # several windows, the last one partial
    deployment = deploy({"exchanges": [{"name": "in", "type": "direct"}], "queues": [
        {"name": "q", "type": "quorum", "bindings": [{"exchange": "in", "routing_key": "q"}]}]})
    ids = [f"m{i:03d}" for i in range(30)]
    retrying.publish_ids(broker, deployment.vhost, "in", ids, routing_key="q")
    assert [body.decode() for _, body in drain(broker, deployment.vhost, "q")] == ids
    with pytest.raises(UnroutableError):
        retrying.publish_ids(broker, deployment.vhost, "in", ["x1", "x2"], routing_key="no-queue")
    with pytest.raises(ChannelClosedByBroker, match="NOT_FOUND"):
        retrying.publish_ids(broker, deployment.vhost, "missing", ids)


def test_p1_on_the_4_3_cluster_runs_our_strategies_on_replicated_quorum_queues_or_says_why_not() -> None:
    from bench import cluster

    result = cluster.p1("4.3", TINY, lambda _: None)
    if result.skipped:  # a cluster that is down is reported, never started or repaired by the benchmark
        assert result.skipped.startswith(("the cluster is not healthy", "RABBITMQ_CLUSTERS", "scripts/clusters.sh"))
        missing(result.skipped)
    assert [o.strategy for o in result.outcomes] == list(cluster.STRATEGIES)
    assert result.members == {s.name: 3 for s in cluster.STRATEGIES}, "a member on each of the three nodes"
    assert "3 of 3 nodes running" in result.nodes
    for outcome in result.outcomes:
        per_message = TINY.native_retries if outcome.strategy.per_attempt else 1
        assert not outcome.skipped and sum(s.count for s in outcome.stats) == TINY.messages * per_message, \
            f"{outcome.strategy.name}: every message timed"


def test_the_hand_wired_loops_lose_nothing_and_retry_each_failing_message_once(broker: Broker) -> None:
    """Every row's hand-wired loop (and each part's variant) on the program's topology, each queue type: every
    message delivered twice (once for plain), every first delivery retried, nothing left in any queue."""
    with ExitStack() as stack:
        for queue_type in QUEUE_TYPES:
            for target in floor.prepare(stack, broker, version(broker), queue_type):
                if target.skipped:
                    assert target.row == "native" and (queue_type == "classic" or version(broker) < (4, 3, 1))
                    continue
                assert target.contract is not None
                messages = 12
                if target.row == floor.ASYNCIO:  # the bare aio-pika loop, and the one carrying our copy's headers
                    for loop in (aio_floor.bare, aio_floor.carrying):
                        retrying.publish_ids(broker, target.vhost, "in", [f"f{i:05d}" for i in range(messages)])
                        deliveries, retries, _ = loop(parameters(broker, target.vhost), target.contract, messages,
                                                      prefetch=5)
                        assert (deliveries, retries) == (2 * messages, messages), (queue_type, loop)
                        queues = [target.contract["queue"], *(t["queue"] for t in target.contract["tiers"])]
                        assert set(message_counts(broker, target.vhost, queues).values()) == {0}, (queue_type, loop)
                    continue
                plain = target.row in floor.PLAIN_ROWS
                ids = [f"f{i:05d}" for i in range(2 * messages if plain else messages)]
                loops = [floor.loop_of(broker, target, messages, prefetch=5, kind=floor.PART_KINDS.get(target.row))]
                if target.row == floor.REPUBLISH:  # its third side, the loop carrying our copy's headers
                    loops.append(floor.loop_of(broker, target, messages, prefetch=5,
                                               kind=floor.PART_KINDS[floor.HEADERS]))
                for loop in loops:
                    retrying.publish_ids(broker, target.vhost, "in", ids)
                    loop.run(timeout=60)
                    assert loop.deliveries == dict.fromkeys(ids, 1 if plain else 2), (queue_type, target.row)
                    assert loop.retries == (0 if plain else messages)
                    tiers = [] if plain else target.contract.get("tiers") or []
                    queues = [target.contract["queue"], *(t["queue"] for t in tiers)]
                    assert set(message_counts(broker, target.vhost, queues).values()) == {0}, (queue_type, loop.kind)
