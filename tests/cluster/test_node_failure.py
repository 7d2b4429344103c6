"""Node failures on three-node clusters (issue 24 point 2): with messages in flight through every strategy at once
(`tiers` consumed in reject mode and in republish mode, `levels`, and `native` on 4.3), all on quorum queues,
kill -9 one node, bring it back after DOWN_S, and check what is always true:

- nothing lost: every message published was handled successfully or parked;
- nothing delivered before its delay: a retry's first delivery comes at least the attempt's delay after the
  first delivery of the attempt before it;
- nothing stuck: once the node is back every queue but the error queues is empty and no quorum queue holds a
  pending dead letter (`messages_dlx`);
- duplicates are counted and reported, not forbidden: at-least-once dead-lettering and a lost confirm both
  deliver again (the broker measured 17-47 per kill before these tests existed).

Where leaders are is chosen, not left to chance: the cluster nodes place a queue's leader on the node that
declares it (scripts/clusters.sh sets `queue_leader_locator = client-local`), so the test applies the wait
tiers and delay levels through node 2 and everything else through node 1, and the consumers connect to node 3
first (their URL list is 3, 1, 2). One test per failure: node 1 (leads every input queue), node 2 (leads every
wait tier and delay level), node 3 (the consumers' node: they reconnect to another one).

Each scenario prints one line (and appends it as JSON to $CLUSTER_REPORT when set) with the duplicates, the
longest pause in each queue's deliveries and the time from the kill until everything settled:
bench/results/2026-11-24-cluster-recovery.md collects them. They are figures, never test bounds. On 3.10 a
killed input-queue leader stalls at-least-once dead-lettering for about 180 s (docs/clusters.md), so these tests
wait up to SETTLE_S.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from pika.spec import BasicProperties

from rabbitmq_retry_client import Mode, RetryingConsumer
from rabbitmq_retry_client.contract import strategy_of
from tests.support.admin import queue_info, wait_for
from tests.support.amqp import drain, message_counts
from tests.support.cluster import Cluster
from tests.support.deploy import Deployer, Deployment
from tests.support.mirror import Broker, apply
from tests.support.retrying import Recorder, consumer_of, publish_ids, retryable_queue, run_consumers
from tools.lib.engine import QUEUE, VHOST

EARLY_MS = 5
"""Clock tolerance for "never early" (the handler takes the times; see tests/broker/test_retry_behaviour.py)."""
MAX_RETRIES = 3
PER_QUEUE = 250
"""Messages per strategy; 0..4 planned failures each, so about a seventh are parked."""
DOWN_S = 15.0
"""How long the killed node stays down."""
SETTLE_S = 480.0
"""Generous bound for everything to settle; 3.10's dead-letter stall alone is about 180 s."""
INPUTS_ON, WAITS_ON, CONSUMERS_ON = 1, 2, 3
REJOIN_TIMEOUT = 400.0
"""Joining a thread that restarts a node (the restart is bounded by tests/support/cluster.py's REJOIN_S)."""
RETURN_S = 120.0
"""Bound for a message a dead connection held unacked to come back once its node is back (a bound, not a figure)."""


@dataclass
class Loop:
    """One retryable queue under test, its consumer and what it saw."""

    queue: str
    mode: Mode
    contract: dict[str, Any]
    plan: dict[str, int]
    recorder: Recorder
    consumer: RetryingConsumer

    def retry_delay_ms(self, attempt: int) -> int:
        """The least the broker holds the retry of `attempt` (1 = the first delivery failed)."""
        contract = self.contract
        if strategy_of(contract) == "native":
            return int(min(contract["min_delay_ms"] * attempt, contract["max_delay_ms"]))
        if strategy_of(contract) == "tiers" and self.mode == "reject":
            return int(contract["tiers"][0]["delay_ms"])  # every rejected attempt waits in tier 1
        return self.consumer.policy.retry_route(attempt)[2]


def topology(version: str) -> dict[str, Any]:
    """Every strategy the version runs, each queue bound to direct exchange `in` by its own name."""
    levels = {"name": "levels", "type": "quorum", "bindings": [{"exchange": "in", "routing_key": "levels"}],
              "retry": {"strategy": "levels", "max_retries": MAX_RETRIES,
                        "backoff": {"initial": "200ms", "multiplier": 2, "max": "800ms", "jitter": 0}}}
    queues = [retryable_queue(name, "quorum", ["300ms", "600ms"], MAX_RETRIES, routing_key=name)
              for name in ("tiers-reject", "tiers-republish")]
    queues.append(levels)
    if version != "3.10":
        queues.append({"name": "native", "type": "quorum", "bindings": [{"exchange": "in", "routing_key": "native"}],
                       "retry": {"strategy": "native", "min_delay": "200ms", "max_delay": "500ms",
                                 "max_retries": MAX_RETRIES}})
    return {"exchanges": [{"name": "in", "type": "direct"}], "queues": queues,
            "delay_levels": {"unit": "100ms", "max_delay": "1s", "type": "quorum"}}


def waiting_queue(name: str) -> bool:
    return ".wait." in name or name.startswith("rabbitmq-retry.delay.")


def deploy_placed(cluster: Cluster, vhost: str, waits_apart: bool) -> Deployment:
    """Apply the topology like `pulumi up` through node INPUTS_ON, so that it leads every queue; with
    `waits_apart` the wait tiers and delay levels are applied through node WAITS_ON first (their leaders land
    there; the second apply leaves existing queues as they are)."""
    deployment = Deployer(cluster.node(INPUTS_ON).broker, vhost).record(topology(cluster.version))
    if waits_apart:
        waits = [r for r in deployment.resources
                 if r.type == VHOST or (r.type == QUEUE and waiting_queue(r.inputs["name"]))]
        apply(cluster.node(WAITS_ON).broker, waits)
    apply(cluster.node(INPUTS_ON).broker, deployment.resources)
    for queue in cluster.queues(vhost):
        expected = WAITS_ON if waits_apart and waiting_queue(queue["name"]) else INPUTS_ON
        assert cluster.leader(vhost, queue["name"]).index == expected, f"{queue['name']} is led by {queue['leader']}"
    return deployment


def loops(cluster: Cluster, deployment: Deployment, kind: str = "threaded") -> list[Loop]:
    """A consumer of `kind` (CONSUMER_KINDS) per retryable queue (tiers-reject in reject mode), connecting to node
    CONSUMERS_ON first."""
    rng = random.Random(f"{cluster.version}-{deployment.vhost}")
    urls = cluster.urls(CONSUMERS_ON, *(i for i in (1, 2, 3) if i != CONSUMERS_ON))
    made = []
    for queue, contract in sorted(deployment.contracts.items()):
        mode: Mode = "reject" if queue == "tiers-reject" else "republish"
        plan = {f"{queue}-{i:04d}": rng.choice([0, 0, 1, 1, 2, 3, 4]) for i in range(PER_QUEUE)}
        recorder = Recorder(plan.__getitem__)
        loop = Loop(queue, mode, contract, plan, recorder,
                    consumer_of(kind, urls, contract, recorder, mode, reconnect_timeout=SETTLE_S,
                                publish_failure_pause=0.2))
        made.append(loop)
    return made


def slowed(loop: Loop) -> None:
    """The loop's handler takes 2 ms more: messages stay in flight while the node dies."""
    def handler(body: bytes, properties: BasicProperties) -> None:
        time.sleep(0.002)
        loop.recorder(body, properties)

    loop.consumer.handler = handler


def quiet(cluster: Cluster, vhost: str, error_queues: set[str]) -> bool:
    """Every queue but the error queues empty (ready and unacked: a message in a consumer's hands or whose copy
    awaits its confirm counts) and no pending dead letter, per the management API."""
    for queue in cluster.queues(vhost):
        if queue.get("messages_dlx"):
            return False
        if queue["name"] not in error_queues and queue.get("messages"):
            return False
    return True


def accounted(cluster: Cluster, vhost: str, running: list[Loop]) -> bool:
    """As many outcomes as messages in every loop: distinct successes plus what its error queue holds. Not the
    planned outcomes nor the consumer's counters: the recorder counts a duplicate delivery as an attempt (a
    message may succeed one attempt early), and on 4.3 the broker parks by itself a message whose consumer
    died once too often (its delivery limit)."""
    parked = {q["name"]: int(q.get("messages") or 0) for q in cluster.queues(vhost)}
    return all(len(set(loop.recorder.succeeded)) + parked.get(loop.contract["error_queue"], 0) >= len(loop.plan)
               for loop in running)


def held(broker: Broker, vhost: str, queue: str = "work.error") -> int:
    """Messages of `queue` checked out to a consumer or a basic.get not yet settled (management statistics, which lag
    a few seconds)."""
    return int(queue_info(broker, vhost, queue).get("messages_unacknowledged") or 0)


def report(cluster: Cluster, scenario: str, figures: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    line = {"cluster": cluster.version, "scenario": scenario, **figures}
    with capsys.disabled():
        print(f"\n[cluster {cluster.version} {scenario}] {json.dumps(figures)}")
    if path := os.environ.get("CLUSTER_REPORT"):
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def never_early(loop: Loop) -> list[str]:
    """Retries whose first delivery came before the attempt's delay had passed since the attempt before."""
    early = []
    for message_id, deliveries in loop.recorder.deliveries.items():
        first_at: dict[int, float] = {}
        for delivery in deliveries:
            attempt = loop.consumer.policy.attempt(delivery.headers)
            first_at.setdefault(attempt, delivery.monotonic)
        for attempt in sorted(first_at):
            if attempt > 1 and attempt - 1 in first_at:
                waited = (first_at[attempt] - first_at[attempt - 1]) * 1000
                if waited < loop.retry_delay_ms(attempt - 1) - EARLY_MS:
                    early.append(f"{message_id} attempt {attempt} after {waited:.0f} ms")
    return early


def longest_pause_s(loop: Loop, after: float, retries_only: bool) -> float:
    """The longest gap between consecutive deliveries (or retries: attempt 2 and later) from `after` on (the
    kill) to the last one, in seconds: how long the loop stood still."""
    times = sorted(d.monotonic for deliveries in loop.recorder.deliveries.values() for d in deliveries
                   if d.monotonic >= after and not (retries_only and loop.consumer.policy.attempt(d.headers) == 1))
    return round(max((b - a for a, b in pairwise([after, *times])), default=0.0), 1)


@pytest.mark.parametrize(("victim", "waits_apart", "kind"), [
    (INPUTS_ON, True, "threaded"), (WAITS_ON, True, "threaded"), (CONSUMERS_ON, True, "threaded"),
    (INPUTS_ON, False, "threaded"), (CONSUMERS_ON, True, "asyncio")],
    ids=["input-queue-leader", "wait-and-level-leader", "consumers-node", "leader-of-inputs-and-waits",
         "consumers-node-asyncio"])
def test_a_killed_node_loses_nothing_delivers_nothing_early_and_leaves_nothing_stuck(
        cluster: Cluster, vhost: str, victim: int, waits_apart: bool, kind: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The last case is the placement a stack gets when one node declares everything (3.x's default leader
    locator): the node that dies leads both a queue and the queue it dead-letters into."""
    deployment = deploy_placed(cluster, vhost, waits_apart)
    running = loops(cluster, deployment, kind)
    for loop in running:
        slowed(loop)
    publisher = cluster.node(INPUTS_ON).broker
    for loop in running:
        publish_ids(publisher, vhost, "in", list(loop.plan), routing_key=loop.queue)
    total = sum(len(loop.plan) for loop in running)
    error_queues = {loop.contract["error_queue"] for loop in running}
    victim_address = f"127.0.0.1:{cluster.node(victim).broker.amqp_port}"
    events: dict[str, Any] = {}

    def settled() -> int:
        return sum(len(set(loop.recorder.succeeded)) + loop.consumer.parked for loop in running)

    def fail_a_node() -> None:
        while settled() < total // 4:
            time.sleep(0.01)
        events["settled_before_kill"] = settled()
        events["killed_at"] = time.monotonic()
        cluster.kill(victim)
        if victim == CONSUMERS_ON:
            # While their node is down the consumers must reach another one (else they would only be waiting
            # for it to come back).
            try:
                wait_for(lambda: all(loop.consumer.connected_to not in (None, victim_address) for loop in running),
                         DOWN_S * 2, "every consumer connected to another node", interval=0.02)
            except AssertionError as error:  # the node comes back regardless; the test fails on it below
                events["no_failover"] = str(error)
            events["reconnected_to"] = sorted({str(loop.consumer.connected_to) for loop in running})
            events["reconnected_after_s"] = round(time.monotonic() - events["killed_at"], 1)
        time.sleep(max(0.0, DOWN_S - (time.monotonic() - events["killed_at"])))
        cluster.start(victim)
        events["back_at"] = time.monotonic()

    failing = threading.Thread(target=fail_a_node, daemon=True)
    failing.start()
    last_look = [0.0]

    def finished() -> bool:
        if failing.is_alive() or time.monotonic() - last_look[0] < 2:
            return False
        last_look[0] = time.monotonic()
        return accounted(cluster, vhost, running) and quiet(cluster, vhost, error_queues)

    run_consumers([loop.consumer for loop in running], finished, timeout=SETTLE_S)
    failing.join(timeout=REJOIN_TIMEOUT)
    ended = time.monotonic()
    unsettled = {q["name"]: (q.get("messages"), q.get("messages_dlx")) for q in cluster.queues(vhost)
                 if q.get("messages") or q.get("messages_dlx")}
    cluster.await_members_online(vhost)

    waiting = [q["name"] for q in cluster.queues(vhost) if q["name"] not in error_queues]
    leftovers = message_counts(publisher, vhost, waiting)
    with contextlib.suppress(AssertionError):  # asserted below, after the figures are reported
        wait_for(lambda: quiet(cluster, vhost, error_queues), 60, "no pending dead letters")
    stuck = {q["name"]: q["messages_dlx"] for q in cluster.queues(vhost) if q.get("messages_dlx")}
    figures: dict[str, Any] = {"published": total, "pending_dead_letters_at_the_end": stuck,
                               "settled_before_kill": events.get("settled_before_kill"),
                               "down_s": round(events["back_at"] - events["killed_at"], 1) if "back_at" in events
                               else None,
                               "settled_after_kill_s": round(ended - events.get("killed_at", ended), 1),
                               "at_the_end": unsettled,
                               "queues": {}}
    if "reconnected_to" in events:
        figures["reconnected_to"] = events["reconnected_to"]
        figures["reconnected_after_s"] = events["reconnected_after_s"]
    problems: list[str] = []
    for loop in running:
        parked_ids = [str(p.message_id) for p, _ in drain(publisher, vhost, loop.contract["error_queue"])]
        processed, parked = set(loop.recorder.succeeded), set(parked_ids)
        lost = set(loop.plan) - processed - parked
        duplicates = (len(loop.recorder.succeeded) - len(processed)) + (len(parked_ids) - len(parked))
        redelivered = sum(len(d) for d in loop.recorder.deliveries.values()) - sum(
            min(len(d), loop.plan[i] + 1) for i, d in loop.recorder.deliveries.items())
        figures["queues"][loop.queue] = {
            "lost": len(lost), "duplicates": duplicates, "extra_deliveries": redelivered,
            "processed_and_parked": len(processed & parked), "reconnects": loop.consumer.reconnects,
            "parked_by_client": loop.consumer.parked,
            "parked_by_broker": max(0, len(parked_ids) - loop.consumer.parked),
            "longest_pause_s": longest_pause_s(loop, events.get("killed_at", 0.0), retries_only=False),
            "longest_retry_pause_s": longest_pause_s(loop, events.get("killed_at", 0.0), retries_only=True)}
        if lost:
            problems.append(f"{loop.queue}: lost {len(lost)}: {sorted(lost)[:5]}")
        if early := never_early(loop):
            problems.append(f"{loop.queue}: {len(early)} retries early: {early[:5]}")
        if victim == CONSUMERS_ON and loop.consumer.reconnects < 1:
            problems.append(f"{loop.queue}: the consumer never saw its node die")
    leads = "inputs and waits" if not waits_apart else {INPUTS_ON: "inputs", WAITS_ON: "waits",
                                                         CONSUMERS_ON: "consumers' node"}[victim]
    scenario = f"kill node {victim} ({cluster.node(victim).name}, {leads})"
    report(cluster, scenario + (" asyncio" if kind == "asyncio" else ""), figures, capsys)

    assert "killed_at" in events and "back_at" in events, f"the node was not killed and restarted: {events}"
    assert "no_failover" not in events, f"the consumers did not reach another node while theirs was down: {events}"
    assert not problems, problems
    assert leftovers == dict.fromkeys(leftovers, 0), f"left in queues: {leftovers}"
    assert not stuck, f"pending dead letters: {stuck}"
    if victim == CONSUMERS_ON:
        assert victim_address not in figures["reconnected_to"]


# --- parking and a redrive with a node killed mid-way ------------------------------------------------------

def test_parking_and_a_redrive_with_a_node_killed_midway_lose_nothing(
        cluster: Cluster, vhost: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A consumer parks every message while the node leading the input and error queues dies; then a redrive
    (the library's, as `rabbitmq-retry parked redrive` runs it by default, with every node's URL) is cut by
    killing the node it is connected to, and run again: each message is parked or back in its queue, or both
    (a duplicate), never neither."""
    from rabbitmq_retry_client import ParkedQueue, PermanentError, Selection

    config = {"exchanges": [{"name": "in", "type": "direct"}],
              "queues": [retryable_queue("work", "quorum", ["100ms"], 1, routing_key="work")]}
    deployment = Deployer(cluster.node(1).broker, vhost)(config)
    contract = deployment.contracts["work"]
    ids = [f"p{i:04d}" for i in range(600)]

    def failing(body: bytes, properties: BasicProperties) -> None:
        time.sleep(0.002)
        raise PermanentError("bad payload")

    consumer = RetryingConsumer(cluster.urls(3, 1, 2), contract, failing, "republish", reconnect_timeout=SETTLE_S)
    publish_ids(cluster.node(1).broker, vhost, "in", ids, routing_key="work")
    killed: dict[str, float] = {}

    def kill_leader() -> None:
        while consumer.parked < len(ids) // 4:
            time.sleep(0.01)
        killed["parking"] = consumer.parked
        cluster.kill(1)
        time.sleep(DOWN_S)
        cluster.start(1)

    killer = threading.Thread(target=kill_leader, daemon=True)
    killer.start()
    survivor = cluster.node(2).broker

    def parked_count() -> int:
        return message_counts(survivor, vhost, ["work.error"])["work.error"]

    run_consumers([consumer], lambda: not killer.is_alive() and parked_count() >= len(ids) and
                  message_counts(survivor, vhost, ["work"])["work"] == 0, timeout=SETTLE_S)
    killer.join(timeout=REJOIN_TIMEOUT)
    cluster.await_members_online(vhost)

    # The redrive connects to node 3 first; node 3 dies once a third has moved; a second run finishes.
    runs = 0
    cut: dict[str, int] = {}

    def cut_redrive() -> None:
        wait_for(lambda: message_counts(survivor, vhost, ["work"])["work"] >= len(ids) // 3, 120,
                 "a third redriven")
        cut["moved"] = message_counts(survivor, vhost, ["work"])["work"]
        cluster.kill(3)

    cutter = threading.Thread(target=cut_redrive, daemon=True)
    cutter.start()
    errors = []
    deadline = time.monotonic() + 120
    while True:
        runs += 1
        try:
            with ParkedQueue(cluster.urls(3, 1, 2), contract, connect_timeout=30) as parked:
                parked.redrive(Selection(), rate=100 if runs == 1 else 2000)
        except Exception as error:
            # The cut run: its connection dies with its node. Then, while the queue elects a new leader, 4.3
            # refuses a basic.get with 541 "nodedown" (closing the connection): an operator runs it again.
            errors.append(f"{type(error).__name__}: {error}")
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
            continue
        # A message the cut run held unacked comes back to the error queue only once the queue has dealt with
        # the dead connection, possibly after a later run passed it (measured on 4.3): run again until empty.
        if message_counts(survivor, vhost, ["work.error"])["work.error"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    cutter.join(timeout=180)
    cluster.start(3)
    cluster.await_members_online(vhost)
    back_at = time.monotonic()
    # What the cut run held unacked stays checked out to its dead connection until the queue has dealt with it:
    # on 4.3.6 only after that connection's node is back, and not always by the time its members are online
    # (measured: a message came back after this test had drained the queues). So, as an operator would, redrive
    # what comes back until every message has moved. Past RETURN_S it waits only while the error queue still holds
    # messages checked out to a dead connection (its unacknowledged count, which the broker keeps until it hands
    # them back), up to SETTLE_S; a message missing after that is lost.
    moved: list[str] = []
    returned_late = 0
    last_return_s = 0.0
    while True:
        if (late := message_counts(survivor, vhost, ["work.error"])["work.error"]):
            runs += 1
            returned_late += late
            last_return_s = time.monotonic() - back_at
            with ParkedQueue(cluster.urls(1, 2, 3), contract, connect_timeout=30) as parked:
                parked.redrive(Selection(), rate=2000)
        moved += [str(p.message_id) for p, _ in drain(survivor, vhost, "work")]
        waited = time.monotonic() - back_at
        if set(moved) >= set(ids) or waited > SETTLE_S or (waited > RETURN_S and not held(survivor, vhost)):
            break
        time.sleep(1)

    still_parked = [str(p.message_id) for p, _ in drain(survivor, vhost, "work.error")]
    lost = set(ids) - set(still_parked) - set(moved)
    duplicates = len(still_parked) + len(moved) - len(set(still_parked) | set(moved))
    report(cluster, "parking and redrive, nodes killed", {
        "messages": len(ids), "parked_before_kill": killed.get("parking"), "parked_duplicates":
        consumer.parked - len(ids), "moved_before_cut": cut.get("moved"), "redrive_runs": runs,
        "redrive_errors": errors, "parked_again_once_the_node_was_back": returned_late,
        "last_returned_s_after_the_node_was_back": round(last_return_s, 1), "held_at_the_end": held(survivor, vhost),
        "still_parked": len(still_parked), "moved": len(set(moved)),
        "lost": len(lost), "duplicates": duplicates}, capsys)
    assert "parking" in killed and "moved" in cut and errors, (killed, cut, errors)
    assert not lost, sorted(lost)[:10]
    assert set(moved) == set(ids), "redrives run until none is left moved every message back"
    assert set(still_parked) <= set(moved), "what is still parked is a duplicate of a message that moved"
