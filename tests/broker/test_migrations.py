"""Migrations end to end on real brokers (3.10.8 and 4.3.6): issue 23's "How it is shown".

For each change kind a migration carries (classic → quorum, quorum → classic, a rename, a removed delay tier,
a lowered `delay_levels.max_delay`, and the strategy switches tiers ↔ levels, tiers ↔ native on 4.3) the test:
- deploys the "before" stack, then fills it while nothing consumes: messages in the input queue, a copy waiting in
  every wait tier or delay level (or, native, delayed inside the queue), and parked messages in the error queue;
- runs a producer publishing with confirms and a consumer following the contract (`rabbitmq_retry_client`)
  through every step, the consumer failing some first attempts so that retries keep flowing;
- applies each step the way `pulumi up` would (recorded under mocks, applied through tests/support/mirror.py
  with the engine's part, each deleted queue's before-delete hook, done here): before → move/drain → wait until
  the old objects are empty (depth by passive declare; `make migrate-status` must then say "drained", and
  "retired" once retire is applied) → retire → the migration entry removed;
- asserts at the end: nothing lost (every confirmed publish and every prefilled message handled, every parked one
  in the successor's error queue), duplicates counted and bounded by what the switched consumer held, nothing
  delivered before its delay, the old objects (queues, shovels, the shovel user) gone, and no drift between the
  broker and the final recording (tools/lib/drift.py).

Isolation on shared brokers: each test works in its own vhost `mvi-<random>`, and its stack's shovel user is
named `mvi-shovel-<random>` instead of the product's per-stack name (`components.model.naming.shovel_user`, patched for
the test), so that concurrent runs on one broker never share a broker-wide user.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pika
import pytest

from components.config.load import load_stack_config
from components.model import naming
from components.pulumi.stack_resources import plan_stack
from rabbitmq_retry_client import RetryingConsumer
from rabbitmq_retry_client.depth import BrokerAccess, DepthReader
from rabbitmq_retry_client.levels import delay_exchange, delay_routing_key
from rabbitmq_retry_client.strategies import behaviour_of
from tests.support.admin import version, wait_for
from tests.support.amqp import channel, drain, parameters
from tests.support.hooks import ProgramHooks
from tests.support.mirror import Broker, apply, apply_update, esc, get
from tests.support.retrying import Recorder, publish_ids
from tests.support.stack import Stack, record_stack, stack_vhost
from tools.lib import engine
from tools.lib.drift import findings
from tools.lib.evaluation import infos
from tools.lib.migrate_status import status as migration_status
from tools.lib.snapshot import read_live

EARLY_MS = 5
"""Clock tolerance for "never early": the times are taken by the test and the handler, not by the broker."""
DRAIN_S = 60.0
"""Bound for the old objects to empty (the longest wait here is 3 s): a timeout, not a figure."""
PREFETCH = 10


# ---------------------------------------------------------------- the stack, recorded and applied


def old_objects_empty(broker: Broker, vhost: str, queues: set[str]) -> bool:
    """Every queue in `queues` holds nothing: ready (passive declare), unacknowledged, pending dead letters,
    waiting for a native delayed retry (the last three sampled by the management API)."""
    reader = DepthReader(BrokerAccess(broker.management_url, broker.username, broker.password))
    for queue in sorted(queues):
        depth = reader.read(vhost, queue)
        if depth is not None and depth.messages:
            return False
    return True


STATS_INTERVAL_S = 5.0
"""RabbitMQ's default `collect_statistics_interval`: how late the management API may report a message."""


def drained(broker: Broker, vhost: str, queues: set[str], quiet_s: float) -> None:
    """Wait until the old objects read empty and stay so for `quiet_s`: a message a consumer rejected just before
    it moved to the successor shows in no count for up to a statistics interval while it waits for a native delayed
    retry (the passive declare leaves it out), then returns after at most max_delay."""
    empty_since: list[float] = []

    def settled() -> bool:
        if not old_objects_empty(broker, vhost, queues):
            empty_since.clear()
            return False
        empty_since[:] = empty_since or [time.monotonic()]
        return time.monotonic() - empty_since[0] >= quiet_s

    wait_for(settled, DRAIN_S, f"the old objects {sorted(queues)} to empty", interval=0.25)


def next_step(broker: Broker, vhost: str, stack: Stack) -> str:
    """What `make migrate-status` says comes next for the stack's one migration, read from the broker."""
    config = load_stack_config({"vhosts": [stack.config]})
    [info] = infos(plan_stack(config))
    reader = DepthReader(BrokerAccess(broker.management_url, broker.username, broker.password, broker.amqp_port))
    return migration_status(info, reader.read, lambda v: get(broker, f"shovels/{esc(v)}") or [], "test").next_step


# ---------------------------------------------------------------- traffic


class Producer(threading.Thread):
    """Publishes `p-<n>` to the application exchange with confirms, a few at a time, until stopped; `confirmed` is
    every id the broker confirmed."""

    def __init__(self, broker: Broker, vhost: str, exchange: str) -> None:
        super().__init__(daemon=True)
        self.broker, self.vhost, self.exchange = broker, vhost, exchange
        self.confirmed: list[str] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stopping.is_set():
                batch = [f"p-{n + i}" for i in range(5)]
                publish_ids(self.broker, self.vhost, self.exchange, batch)
                self.confirmed += batch
                n += len(batch)
                self.stopping.wait(0.2)
        except BaseException as error:  # reported by stop()
            self.error = error

    def stop(self) -> list[str]:
        self.stopping.set()
        self.join(60)
        if self.error is not None:
            raise self.error
        return self.confirmed


class Consuming:
    """A RetryingConsumer of one contract in a thread, sharing one Recorder across switches."""

    def __init__(self, broker: Broker, vhost: str, contract: dict[str, Any], recorder: Recorder) -> None:
        self.consumer = RetryingConsumer(parameters(broker, vhost), contract, recorder, prefetch=PREFETCH)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.consumer.run()
        except BaseException as error:  # reported by stop()
            self.error = error
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.consumer.stop()
        self.thread.join(60)
        if self.error is not None:
            raise self.error


def fails_first(message_id: str) -> int:
    """Every fourth producer message fails its first attempt: retries keep flowing through every step."""
    return 1 if message_id.startswith("p-") and int(message_id[2:]) % 4 == 0 else 0


@dataclass
class Waiting:
    """Prefilled messages: id → (monotonic time from which it waits, its wait in ms)."""

    delayed: dict[str, tuple[float, int]] = field(default_factory=dict)


def fill_tiers(broker: Broker, vhost: str, contract: dict[str, Any], prefix: str, waiting: Waiting) -> None:
    """A copy in every wait tier, routed and headed as the consumer retries attempt n."""
    behaviour = behaviour_of(contract)
    with channel(broker, vhost) as opened:
        for attempt in range(1, len(contract["tiers"]) + 1):
            exchange, key, wait_ms = behaviour.retry_route(contract, attempt)
            message_id = f"{prefix}-tier-{attempt}"
            waiting.delayed[message_id] = (time.monotonic(), wait_ms)
            opened.basic_publish(exchange, key, message_id.encode(), pika.BasicProperties(
                delivery_mode=2, message_id=message_id, headers={contract["attempt_header"]: attempt}),
                mandatory=True)


def fill_levels(broker: Broker, vhost: str, contract: dict[str, Any], prefix: str, waiting: Waiting) -> None:
    """A copy in every delay level: delays of 1, 2, 4, … units, and the longest the levels hold."""
    unit, levels = contract["delay_unit_ms"], contract["delay_levels"]
    delays = sorted({unit * 2 ** k for k in range(levels)} | {unit * (2 ** levels - 1)})
    with channel(broker, vhost) as opened:
        for delay in delays:
            message_id = f"{prefix}-level-{delay}"
            waiting.delayed[message_id] = (time.monotonic(), delay)
            opened.basic_publish(delay_exchange(contract, delay), delay_routing_key(contract, delay),
                                 message_id.encode(), pika.BasicProperties(
                                     delivery_mode=2, message_id=message_id, headers={contract["attempt_header"]: 1}),
                                 mandatory=True)


def fill_native(broker: Broker, vhost: str, contract: dict[str, Any], prefix: str, waiting: Waiting) -> None:
    """Messages delayed inside the quorum queue: delivered once and rejected with requeue, as a native consumer
    fails them; the broker holds each for min_delay before it is delivered again."""
    ids = [f"{prefix}-native-{i}" for i in range(3)]
    publish_ids(broker, vhost, "", ids, routing_key=contract["queue"])
    with channel(broker, vhost, confirms=False) as opened:
        for _ in ids:
            method, properties, _ = opened.basic_get(contract["queue"])
            assert method is not None
            waiting.delayed[str(properties.message_id)] = (time.monotonic(), contract["min_delay_ms"])
            opened.basic_reject(method.delivery_tag, requeue=True)


FILLS: dict[str, Callable[[Broker, str, dict[str, Any], str, Waiting], None]] = {
    "tiers": fill_tiers, "levels": fill_levels, "native": fill_native}


def fill_error_queue(broker: Broker, vhost: str, queue: str, prefix: str) -> list[str]:
    ids = [f"{prefix}-parked-{i}" for i in range(3)]
    publish_ids(broker, vhost, "", ids, routing_key=queue)
    return ids


# ---------------------------------------------------------------- the scenarios


def tiers(name: str, queue_type: str, delays: tuple[str, ...] = ("1s", "2s"), **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": queue_type, "retry": {"delays": list(delays), "max_retries": 3}, **extra}


def levels(name: str, queue_type: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": queue_type, "retry": {
        "strategy": "levels", "max_retries": 3,
        "backoff": {"initial": "1s", "multiplier": 2, "max": "2s", "jitter": 0}}, **extra}


def native(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": "quorum", "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "2s",
                                                      "max_retries": 3}, **extra}


BINDINGS = [{"exchange": "in"}]
LEVELS = {"unit": "500ms", "max_delay": "3s"}


@dataclass(frozen=True)
class Scenario:
    """A migration: the queue configs before and after (the vhost gets delay levels beside a levels queue)."""

    old: dict[str, Any]
    new: dict[str, Any] | None
    """The successor (a move), or None for a drain."""
    needs_native: bool = False

    def vhost(self, queues: list[dict[str, Any]], migrations: list[dict[str, Any]] | None = None,
              delay_levels: dict[str, Any] | None = None) -> dict[str, Any]:
        config: dict[str, Any] = {"exchanges": [{"name": "in", "type": "fanout"}], "queues": queues}
        if any(q["retry"].get("strategy") == "levels" for q in queues):  # delay_levels only beside a levels queue
            config["delay_levels"] = delay_levels or LEVELS
        if migrations:
            config["migrations"] = migrations
        return config


def move(old: dict[str, Any], new: dict[str, Any], **extra: Any) -> Scenario:
    return Scenario(old, new, **extra)


SCENARIOS = {
    "classic-to-quorum": move(tiers("orders", "classic"), tiers("orders.q", "quorum")),
    "quorum-to-classic": move(tiers("orders", "quorum"), tiers("orders.c", "classic")),
    "rename": move(tiers("orders", "classic"), tiers("orders.v2", "classic")),
    "tiers-to-levels": move(tiers("orders", "quorum"), levels("orders.l", "quorum")),
    "levels-to-tiers": move(levels("orders", "classic"), tiers("orders.t", "classic")),
    "tiers-to-native": move(tiers("orders", "quorum"), native("orders.n"), needs_native=True),
    "native-to-tiers": move(native("orders"), tiers("orders.t", "quorum"), needs_native=True),
}


@pytest.fixture
def vhost(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with stack_vhost(broker, monkeypatch, "mvi") as name:
        yield name


@dataclass
class Run:
    """What a scenario did, for the assertions."""

    recorder: Recorder
    expected: set[str]
    parked: list[str]
    parked_found: set[str]
    waiting: Waiting
    stacks: list[Stack]
    gone: set[str]
    retire_steps: list[engine.Step]
    in_flight: int
    """The bound on duplicates: what the switched consumer held (its prefetch) and what was published while the
    apply of step move had both queues bound."""
    first_delay_ms: int
    """The shortest first retry of the contracts in force: no retry may come sooner after a failure."""


@dataclass(frozen=True)
class Steps:
    """The vhost config of each commit of a migration: before it, its first step (move or drain), retire, and the
    entry removed; the queue consumers follow before and after."""

    before: dict[str, Any]
    step: dict[str, Any]
    retire: dict[str, Any]
    final: dict[str, Any]
    old: str
    new: str


def move_steps(scenario: Scenario) -> Steps:
    assert scenario.new is not None
    old, new = scenario.old, scenario.new
    entry = {"name": "orders-moves", "move": {"from": old["name"], "to": new["name"]}}
    successor = {**new, "bindings": BINDINGS}
    return Steps(scenario.vhost([{**old, "bindings": BINDINGS}]),
                 scenario.vhost([old, successor], [{**entry, "step": "move"}]),
                 scenario.vhost([successor], [{**entry, "step": "retire"}]),
                 scenario.vhost([successor]), old["name"], new["name"])


def first_retry_ms(contract: dict[str, Any]) -> int:
    """How long the first retry of `contract` waits (tier 1, the levels' initial back-off, native's min_delay)."""
    if contract.get("strategy") == "native":
        return int(contract["min_delay_ms"])
    return behaviour_of(contract).retry_route(contract, 1)[2]


def run_steps(broker: Broker, vhost: str, steps: Steps) -> Run:
    """Deploy `before`, fill it, and carry the migration through with traffic (see the module docstring)."""
    before, stepped, retiring, final = (record_stack(broker, vhost, c)
                                        for c in (steps.before, steps.step, steps.retire, steps.final))
    apply(broker, before.resources)

    # The migration starts with messages waiting everywhere the old queue keeps them, and nobody consuming.
    old_contract = before.contracts[steps.old]
    inputs = [f"input-{i}" for i in range(5)]
    publish_ids(broker, vhost, "in", inputs)
    waiting = Waiting()
    FILLS[old_contract.get("strategy", "tiers")](broker, vhost, old_contract, "old", waiting)
    parked = fill_error_queue(broker, vhost, naming.error_queue(steps.old), "old")

    recorder = Recorder(fails_first)
    producer = Producer(broker, vhost, "in")
    producer.start()
    consuming = Consuming(broker, vhost, old_contract, recorder)
    time.sleep(0.5)

    hooks = ProgramHooks(broker)
    published_before = len(producer.confirmed)
    apply_update(broker, before.resources, stepped.resources, hooks.before_delete, hooks.before_update)
    # Step move creates the successor's bindings before it deletes the old queue's: what is published meanwhile
    # reaches both queues, and the shovel brings the old copy on (a duplicate, never a loss).
    in_flight = len(producer.confirmed) - published_before + 5
    assert hooks.queues_checked() == [], f"the first step deleted {hooks.queues_checked()}"
    # The consumer restarts with the new contract: the successor (a move; the shovel drains the old queue), or the
    # same queue with fewer tiers or levels (a drain; what waits in the others returns on time).
    consuming.stop()
    new_contract = stepped.contracts[steps.new]
    consuming = Consuming(broker, vhost, new_contract, recorder)
    gone = before.queues() - retiring.queues()
    native_source = old_contract.get("strategy") == "native"
    assert not next_step(broker, vhost, stepped).startswith("step move not applied yet")
    drained(broker, vhost, gone, STATS_INTERVAL_S + old_contract.get("max_delay_ms", 0) / 1000 if native_source
            else 1.0)
    assert next_step(broker, vhost, stepped).startswith("drained: "), "migrate-status disagrees: not drained"
    retire_steps = apply_update(broker, stepped.resources, retiring.resources, hooks.before_delete, hooks.before_update)
    assert sorted(hooks.queues_checked()) == sorted(gone)
    assert any(event == "before_update" for event, _ in hooks.path_guards_run()), "retire ran without the path guard"
    assert next_step(broker, vhost, retiring).startswith("retired: ")
    apply_update(broker, retiring.resources, final.resources, hooks.before_delete, hooks.before_update)

    confirmed = producer.stop()
    expected = set(inputs) | set(waiting.delayed) | set(confirmed)
    wait_for(lambda: expected <= set(recorder.succeeded), DRAIN_S, "every message handled")
    consuming.stop()
    parked_found = {str(p.message_id) for p, _ in drain(broker, vhost, naming.error_queue(steps.new))}
    return Run(recorder, expected, parked, parked_found, waiting, [before, stepped, retiring, final], gone,
               retire_steps, in_flight=PREFETCH + in_flight,
               first_delay_ms=min(first_retry_ms(old_contract), first_retry_ms(new_contract)))


def assert_lossless(broker: Broker, vhost: str, run: Run) -> None:
    recorder = run.recorder
    lost = run.expected - set(recorder.succeeded)
    assert not lost, f"lost: {sorted(lost)}"
    assert set(run.parked) <= run.parked_found, f"parked messages lost: {sorted(set(run.parked) - run.parked_found)}"
    handled: dict[str, int] = {}
    for message_id in recorder.succeeded:
        handled[message_id] = handled.get(message_id, 0) + 1
    duplicates = {m: n - 1 for m, n in handled.items() if n > 1}
    assert sum(duplicates.values()) <= run.in_flight, f"duplicates: {duplicates} (bound {run.in_flight})"
    print(f"\n{broker.name}: {len(run.expected)} messages, 0 lost, {sum(duplicates.values())} duplicates "
          f"(bound {run.in_flight})")
    for message_id, (since, wait_ms) in run.waiting.delayed.items():
        first = recorder.deliveries[message_id][0].monotonic
        assert (first - since) * 1000 >= wait_ms - EARLY_MS, (
            f"{message_id} delivered {(first - since) * 1000:.0f} ms after it started waiting {wait_ms} ms")
    for message_id in run.expected:
        if not fails_first(message_id) or message_id in duplicates:
            continue
        # Only the first delivery of a message fails (Recorder counts deliveries per id), so every later delivery of
        # a message handled once is its retry, which waited at least the first retry's delay. (A duplicated message's
        # copies cannot be told apart: a 4.3 quorum queue counts a copy returned by a consumer that left as it counts
        # a native retry; duplicates are counted and bounded above.)
        failed, *later = recorder.deliveries[message_id]
        for retry in later:
            waited = (retry.monotonic - failed.monotonic) * 1000
            assert waited >= run.first_delay_ms - EARLY_MS, (
                f"{message_id} retried {waited:.0f} ms after its failure: "
                f"{[((d.monotonic - failed.monotonic) * 1000, d.headers) for d in later]}")
    for queue in run.gone:
        assert get(broker, f"queues/{esc(vhost)}/{esc(queue)}") is None, f"{queue} is still on the broker"
    assert (get(broker, f"parameters/shovel/{esc(vhost)}") or []) == []
    shovel_users = {r.inputs["name"] for stack in run.stacks for r in stack.resources if r.type == engine.USER}
    for user in shovel_users:
        assert get(broker, f"users/{esc(user)}") is None, f"shovel user {user} is still on the broker"
    endpoint = broker.client()
    assert findings(run.stacks[-1].resources, {vhost: read_live(endpoint, vhost)}, broker.username) == []


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_a_move_loses_nothing_delivers_nothing_early_and_leaves_no_old_object(broker: Broker, vhost: str, kind: str):
    scenario = SCENARIOS[kind]
    if scenario.needs_native and version(broker) < (4, 3, 1):
        pytest.skip(f"strategy native needs RabbitMQ 4.3.1's delayed retry; {broker.name} predates it")
    assert_lossless(broker, vhost, run_steps(broker, vhost, move_steps(scenario)))


def drain_tiers_steps(queue_type: str) -> Steps:
    """`orders` loses its 2 s and 3 s tiers: step drain keeps them out of the contract until they are empty."""
    scenario = Scenario(tiers("orders", queue_type), None)
    full = {**tiers("orders", queue_type, ("1s", "2s", "3s")), "bindings": BINDINGS}
    short = {**tiers("orders", queue_type, ("1s",)), "bindings": BINDINGS}
    entry = {"name": "orders-drop-tiers", "drain_tiers": {"queue": "orders", "delays": ["1s", "2s", "3s"]}}
    return Steps(scenario.vhost([full]), scenario.vhost([short], [{**entry, "step": "drain"}]),
                 scenario.vhost([short], [{**entry, "step": "retire"}]), scenario.vhost([short]), "orders", "orders")


def drain_levels_steps(queue_type: str) -> Steps:
    """`delay_levels.max_delay` lowered from 3 s to 1 s (3 levels of 500 ms units to 2): step drain keeps the top
    level out of the contract until it is empty."""
    backoff = {"initial": "500ms", "multiplier": 2, "max": "1s", "jitter": 0}
    queue = {**levels("orders", queue_type), "bindings": BINDINGS}
    queue["retry"] = {**queue["retry"], "backoff": backoff}
    scenario = Scenario(queue, None)
    high, low = {**LEVELS, "type": queue_type}, {**LEVELS, "max_delay": "1s", "type": queue_type}
    entry = {"name": "levels-down", "drain_levels": {"max_delay": "3s"}}
    return Steps(scenario.vhost([queue], delay_levels=high),
                 scenario.vhost([queue], [{**entry, "step": "drain"}], delay_levels=low),
                 scenario.vhost([queue], [{**entry, "step": "retire"}], delay_levels=low),
                 scenario.vhost([queue], delay_levels=low), "orders", "orders")


@pytest.mark.parametrize("kind", ["drain_tiers", "drain_levels"])
def test_a_drain_loses_nothing_delivers_nothing_early_and_leaves_no_old_object(broker: Broker, vhost: str, kind: str):
    steps = drain_tiers_steps("classic") if kind == "drain_tiers" else drain_levels_steps("quorum")
    run = run_steps(broker, vhost, steps)
    assert run.gone, "the drain retired nothing"
    assert_lossless(broker, vhost, run)
