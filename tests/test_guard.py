"""The queue guard without a broker: which resources the program binds to it (under Pulumi's mocks), its
config keys, and its decision from a depth reader that is told what to answer. The broker side is
tests/broker/test_guard.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config.stack_settings import parse_amqp_port, parse_delete_with_messages
from components.plan.paths import changed_parts
from components.pulumi.guard import (
    PATH_GUARD,
    QUEUE_GUARD,
    GuardError,
    check_queue_delete,
    path_refusal,
    queue_key,
    refusal,
)
from rabbitmq_retry_client.depth import DepthError, QueueDepth, amqp_listener
from tests.conftest import ROOT
from tests.support import recordings
from tools.lib.mockrun import RecordingMonitor, record, record_program

QUEUE = "rabbitmq:index/queue:Queue"
STASH = "pulumi:index:Stash"


def assert_path_guards(registered: list[Any]) -> None:
    """Each component that owns paths has two path guards: one every other custom child waits for (checked before it
    is updated), and one that waits for every other custom child (checked before it is deleted)."""
    guards = [r for r in registered if r.type == STASH]
    opening = [r for r in guards if r.hooks == {"before_update": [PATH_GUARD]}]
    closing = [r for r in guards if r.hooks == {"before_delete": [PATH_GUARD]}]
    assert opening and len(opening) == len(closing) == len(guards) / 2
    customs = [r for r in registered if r.custom and r.type != STASH]
    parent_of = {r.urn: r.parent for r in registered}

    def under(record: Any, component: str) -> bool:
        return record.parent == component or parent_of.get(record.parent) == component

    for guard in opening:
        assert all(guard.urn in r.dependencies for r in customs if under(r, guard.parent))
    for guard in closing:
        assert all(r.urn in guard.dependencies for r in customs if under(r, guard.parent))


def depth(ready: int = 0, unacknowledged: int = 0, dead_letters: int = 0, consumers: int = 0,
          queue_type: str = "classic") -> QueueDepth:
    return QueueDepth("shop", "orders", ready, unacknowledged, dead_letters, consumers, queue_type)


@pytest.fixture
def hooks_registered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each resource hook the program registers with the (mock) engine, which refuses a name twice."""
    names: list[str] = []
    registering = RecordingMonitor.RegisterResourceHook

    def register(self: RecordingMonitor, request: Any) -> Any:
        names.append(request.name)
        return registering(self, request)

    monkeypatch.setattr(RecordingMonitor, "RegisterResourceHook", register)
    return names


@pytest.mark.parametrize("stack", recordings.STACKS)
def test_every_queue_of_the_stack_and_nothing_else_is_bound_to_the_one_guard(stack: str, hooks_registered: list[str]):
    root = recordings.program_copy()
    try:
        registered = record_program(stack, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    queues = [r for r in registered if r.type == QUEUE]
    assert queues
    assert all(r.hooks == {"before_delete": [QUEUE_GUARD]} for r in queues)
    assert_path_guards(registered)
    assert all(r.hooks == {} for r in registered if r.type not in (QUEUE, STASH))
    assert hooks_registered == [QUEUE_GUARD, PATH_GUARD]


@pytest.mark.parametrize("name", sorted(recordings.STANDALONE))
def test_components_used_on_their_own_bind_their_queues_to_one_guard(name: str, hooks_registered: list[str]):
    registered = record(recordings.STANDALONE[name])
    assert [r.hooks for r in registered if r.type == QUEUE] == [{"before_delete": [QUEUE_GUARD]}] * sum(
        r.type == QUEUE for r in registered) != []
    assert_path_guards(registered)
    assert all(r.hooks == {} for r in registered if r.type not in (QUEUE, STASH))
    assert sorted(hooks_registered) == sorted([QUEUE_GUARD, PATH_GUARD])


def test_a_stack_that_declares_no_queue_still_registers_the_guard(program_copy: Path, hooks_registered: list[str]):
    """Queues removed from the config are bound to the hook in the state: the engine cannot delete them unless the
    program registers it (`hook … was not registered`)."""
    (program_copy / "Pulumi.empty.yaml").write_text("config:\n  rabbitmq-retry:vhosts: []\n")
    assert not [r for r in record_program("empty", program_copy) if r.type == QUEUE]
    assert hooks_registered == [QUEUE_GUARD, PATH_GUARD]


def test_the_escape_hatch_is_a_list_of_distinct_vhost_slash_queue():
    assert parse_delete_with_messages(None) == (frozenset(), [])
    assert parse_delete_with_messages(["shop/orders", "//orders", "a/b/c"]) == (
        frozenset({"shop/orders", "//orders", "a/b/c"}), [])
    _, problems = parse_delete_with_messages("shop/orders")
    assert problems and problems[0][0] == "delete_with_messages" and "expected a list" in problems[0][1]
    _, problems = parse_delete_with_messages(["orders", "shop/", "/orders", 3, "shop/orders", "shop/orders"])
    assert [path for path, _ in problems] == [f"delete_with_messages[{i}]" for i in (0, 1, 2, 3, 5)]
    assert "listed twice" in problems[-1][1]
    assert queue_key("/", "orders") == "//orders"


def test_the_amqp_port_is_a_port_number():
    assert parse_amqp_port(None) == (None, [])
    assert parse_amqp_port(5671) == (5671, [])
    for wrong in (0, 70000, "5671", True):
        assert parse_amqp_port(wrong)[1][0][0] == "amqp_port"


def test_the_guard_refuses_whatever_kind_of_message_the_queue_holds():
    for held, text in ((depth(ready=1), "1 message (1 ready, 0 unacknowledged)"),
                       (depth(unacknowledged=2, consumers=1), "2 messages (0 ready, 2 unacknowledged (1 consumer))"),
                       (depth(dead_letters=3, queue_type="quorum"),
                        "3 messages (0 ready, 0 unacknowledged, 3 pending dead letters)")):
        refused = refusal("shop", "orders", held, frozenset())
        assert refused is not None and text in refused, refused
        assert 'queue "orders" in vhost "shop"' in refused and '"shop/orders"' in refused
    assert refusal("shop", "orders", depth(), frozenset()) is None
    assert refusal("shop", "orders", None, frozenset()) is None
    assert refusal("shop", "orders", depth(ready=5), frozenset({"shop/orders"})) is None
    assert refusal("shop", "orders", depth(ready=5), frozenset({"other/orders", "shop/order"})) is not None


def test_a_reader_that_cannot_tell_is_a_refusal_unless_the_queue_is_listed():
    def unreachable(vhost: str, queue: str) -> QueueDepth | None:
        raise DepthError("management API at http://rabbit:15672 unreachable: timed out")

    with pytest.raises(GuardError, match=r"cannot prove it is empty .*timed out"):
        check_queue_delete("shop", "orders", unreachable, frozenset(), warn=lambda _: None)
    warnings: list[str] = []
    check_queue_delete("shop", "orders", unreachable, frozenset({"shop/orders"}), warn=warnings.append)
    assert len(warnings) == 1
    check_queue_delete("shop", "orders", lambda v, q: depth(ready=7), frozenset({"shop/orders"}), warn=warnings.append)
    assert len(warnings) == 2 and "7 messages" in warnings[1]


def test_the_amqp_listener_follows_the_endpoint_scheme():
    listeners = [{"protocol": "clustering", "port": 25672}, {"protocol": "amqp", "port": 5672},
                 {"protocol": "amqp/ssl", "port": 5671}, {"protocol": "http", "port": 15672}]
    assert amqp_listener(listeners, tls=False) == (5672, False)
    assert amqp_listener(listeners, tls=True) == (5671, True)
    assert amqp_listener(listeners[:2], tls=True) is None  # an https endpoint never leads to plain AMQP
    assert amqp_listener([{"protocol": "http", "port": 15672}], tls=False) is None


def test_a_bad_escape_hatch_fails_the_preview_with_its_key(program_copy: Path):
    dev = (ROOT / "Pulumi.dev.yaml").read_text()
    (program_copy / "Pulumi.guard.yaml").write_text(dev.replace(
        "config:\n", "config:\n  rabbitmq-retry:delete_with_messages: shop/orders\n  rabbitmq-retry:amqp_port: x\n", 1))
    with pytest.raises(pulumi.RunError) as error:
        record_program("guard", program_copy)
    assert [path for path, _ in error.value.problems] == ["delete_with_messages", "amqp_port"]  # type: ignore[attr-defined]


def test_an_entry_naming_no_queue_of_the_stack_is_warned_about(program_copy: Path, monkeypatch: pytest.MonkeyPatch):
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warnings.append(message))
    dev = (ROOT / "Pulumi.dev.yaml").read_text()
    entries = json.dumps(["shop/orders.billing", "shop/gone"])
    (program_copy / "Pulumi.guard.yaml").write_text(dev.replace(
        "config:\n", f"config:\n  rabbitmq-retry:delete_with_messages: '{entries}'\n", 1))
    registered = record_program("guard", program_copy)
    assert any(r.type == QUEUE and r.inputs["name"] == "orders.billing" for r in registered)
    listed = [w for w in warnings if "delete_with_messages" in w]
    assert len(listed) == 1 and '"shop/gone"' in listed[0]


def test_the_registered_hook_reads_the_queue_the_engine_names_and_refuses_when_the_broker_is_down(
        monkeypatch: pytest.MonkeyPatch):
    """What the engine's callback runs (the hook's coroutine), with the provider's settings from the environment
    and only the provider's ID to name the queue (`name@vhost`)."""
    import asyncio

    from pulumi.runtime.config import set_all_config

    from components.pulumi.guard import queue_guard

    monkeypatch.setenv("RABBITMQ_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("RABBITMQ_USERNAME", "deployer")
    monkeypatch.setenv("RABBITMQ_PASSWORD", "secret")
    set_all_config({}, [])
    args = pulumi.ResourceHookArgs(urn="urn:pulumi:dev::p::rabbitmq:index/queue:Queue::q", id="orders.billing@shop",
                                   name="q", type=QUEUE)
    with pytest.raises(GuardError, match=r'^refusing to delete queue "orders.billing" in vhost "shop": cannot prove '
                                         r"it is empty \(the management API at http://127.0.0.1:1 refuses connections"):
        asyncio.run(queue_guard().callback(args))
    monkeypatch.delenv("RABBITMQ_ENDPOINT")
    with pytest.raises(GuardError, match=r"cannot prove it is empty \(no management endpoint: set rabbitmq:endpoint"):
        asyncio.run(queue_guard().callback(args))
    set_all_config({"rabbitmq-retry:delete_with_messages": json.dumps(["shop/orders.billing"])}, [])
    try:
        asyncio.run(queue_guard().callback(args))  # listed: allowed unread, with a warning
    finally:
        set_all_config({}, [])


# --- the path guard: nothing on a retry path is deleted while anything on it holds a message ---------------


def inventory(*paths: tuple[str, dict[str, list[str]], dict[str, str]]) -> dict[str, Any]:
    return {"vhost": "shop", "paths": [{"path": name, "queues": list(needs), "parts": parts, "needs": needs}
                                       for name, needs, parts in paths]}


WAY_BACK = ["Exchange orders.requeue", "Binding orders.requeue → orders", "Queue orders"]
ORDERS = ("orders",
          {"orders": ["Queue orders"], "orders.wait.1": ["Queue orders.wait.1", *WAY_BACK],
           "orders.wait.2": ["Queue orders.wait.2", *WAY_BACK], "orders.error": ["Queue orders.error"]},
          {"Queue orders": "a", "Queue orders.wait.1": "b", "Queue orders.wait.2": "b2", "Queue orders.error": "e",
           "Exchange orders.requeue": "c", "Binding orders.requeue → orders": "d"})


def reader(held: dict[str, int]) -> Any:
    return lambda vhost, queue: depth(ready=held.get(queue, 0))


def without(path: tuple[str, dict[str, list[str]], dict[str, str]], *parts: str) -> tuple[Any, ...]:
    name, needs, owned = path
    return (name, {q: n for q, n in needs.items() if f"Queue {q}" not in parts},
            {p: f for p, f in owned.items() if p not in parts})


def test_a_path_that_only_grows_is_not_read():
    grown = ("orders", {**ORDERS[1], "orders.wait.3": ["Queue orders.wait.3", *WAY_BACK]},
             {**ORDERS[2], "Queue orders.wait.3": "f"})
    assert changed_parts(inventory(ORDERS), inventory(grown)) == {}
    assert path_refusal(inventory(ORDERS), inventory(grown), reader({"orders.wait.1": 5}), frozenset()) is None


def test_deleting_the_way_back_of_a_wait_queue_that_holds_messages_is_refused_naming_the_queue():
    """The retire of issue 31: the requeue exchange would go while `orders.wait.1` holds 20 messages."""
    why = path_refusal(inventory(ORDERS), inventory(), reader({"orders.wait.1": 20}), frozenset())
    assert why is not None and '"orders.wait.1" holds 20 messages' in why and "Exchange orders.requeue" in why
    assert "shop/<queue>" not in why and "delete_with_messages" in why
    unbound = without(ORDERS, "Binding orders.requeue → orders")
    why = path_refusal(inventory(ORDERS), inventory(unbound), reader({"orders.wait.1": 20}), frozenset())
    assert why is not None and "needs `Binding orders.requeue → orders`, which this update would delete" in why


def test_a_replaced_input_queue_is_refused_while_a_wait_tier_holds_its_way_back_not_for_parked_messages():
    replaced = ("orders", ORDERS[1], {**ORDERS[2], "Queue orders": "quorum"})
    assert changed_parts(inventory(ORDERS), inventory(replaced)) == {"orders": ["Queue orders"]}
    assert path_refusal(inventory(ORDERS), inventory(replaced), reader({"orders.error": 1}), frozenset()) is None
    why = path_refusal(inventory(ORDERS), inventory(replaced), reader({"orders.wait.2": 1}), frozenset())
    assert why is not None and '"orders.wait.2" holds 1 message ' in why


def test_an_empty_wait_tier_removed_from_a_busy_queue_goes_through():
    """A drain migration's retire on a live queue: the other tiers, the input and the error queue hold messages, but
    none needs what goes."""
    drained = without(ORDERS, "Queue orders.wait.2")
    busy = reader({"orders": 100, "orders.wait.1": 7, "orders.error": 3})
    assert path_refusal(inventory(ORDERS), inventory(drained), busy, frozenset()) is None
    why = path_refusal(inventory(ORDERS), inventory(drained), reader({"orders.wait.2": 2}), frozenset())
    assert why is not None and '"orders.wait.2" holds 2 messages' in why


def test_an_empty_path_may_go_and_every_holding_queue_must_be_listed_to_waive_it():
    assert path_refusal(inventory(ORDERS), inventory(), reader({}), frozenset()) is None
    held = reader({"orders": 3, "orders.wait.1": 2})
    assert path_refusal(inventory(ORDERS), inventory(), held, frozenset({"shop/orders"})) is not None  # input alone
    assert path_refusal(inventory(ORDERS), inventory(), held, frozenset({"shop/orders", "shop/orders.wait.1"})) is None


def test_a_path_that_cannot_be_read_is_refused():
    def unreadable(vhost: str, queue: str) -> QueueDepth | None:
        raise DepthError("management API at http://rabbit:15672 unreachable")
    why = path_refusal(inventory(ORDERS), None, unreadable, frozenset())
    assert why is not None and "cannot be read (management API at http://rabbit:15672 unreachable)" in why


def test_a_vhost_moved_elsewhere_touches_every_path():
    moved = {**inventory(ORDERS), "vhost": "shop2"}
    assert changed_parts(inventory(ORDERS), moved) == {"orders": sorted(ORDERS[2])}


def test_what_a_planned_wait_tier_needs_is_its_dead_letter_route_back_and_a_consumers_queue_only_itself():
    from components.config.load import load_vhost
    from components.plan.paths import vhost_paths
    from components.plan.planner import plan_vhost

    plan = plan_vhost(load_vhost({"name": "shop", "exchanges": [{"name": "in", "type": "topic"}], "queues": [
        {"name": "orders", "bindings": [{"exchange": "in", "routing_key": "o.#"}],
         "retry": {"delays": ["5s", "1m"], "max_retries": 3}}]}, "vhost"))
    [path] = [p for p in vhost_paths(plan) if p.name == "orders"]
    assert path.needs["orders"] == ("Queue orders",) and path.needs["orders.error"] == ("Queue orders.error",)
    back = path.needs["orders.wait.1"]
    assert back[0] == "Queue orders.wait.1" and "Queue orders" in back and any(p.startswith("Exchange ") for p in back)
    assert not any(p.startswith("Binding in →") for part in path.needs.values() for p in part)
    assert not any(p.startswith("Binding in →") for p in path.parts)  # the application's binding is no part


@pytest.mark.parametrize("stack", recordings.STACKS)
def test_the_first_up_after_the_upgrade_only_creates_the_path_guards(stack: str):
    """A stack applied before the path guards existed: the same program now adds two Stash resources per component
    and a dependency on the path guard to every child. The engine diffs inputs, not dependencies, so nothing but the
    guards is created, updated or replaced (that run is guarded by the queue guard alone)."""
    from dataclasses import replace

    from tools.lib import engine

    root = recordings.program_copy()
    try:
        now = record_program(stack, root, preview=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    guards = {r.urn for r in now if r.type == STASH}
    before = [replace(r, dependencies=[d for d in r.dependencies if d not in guards]) for r in now
              if r.urn not in guards]
    steps = [s for s in engine.diff(before, now) if s.op != "same"]
    assert guards and {(s.op, s.urn) for s in steps} == {("create", urn) for urn in guards}
