"""The client package's pure parts (rabbitmq_retry_client), without a broker: which contract it picks,
what it refuses (an unknown strategy included), how it cuts an error reason, what a retried, parked or
redriven copy carries over, which parked messages a filter selects, what the command refuses before
connecting, and strategy `levels` (its contract, back-off, routing key, and the consumer's retries and
parking through a recording channel), and copies in flight: settled on the broker's answers in any order, the
in-flight bound, `run()` settling them all (docs/contract.md; docs/operations.md: Parked messages)."""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from jsonschema import Draft202012Validator
from pika.spec import BasicProperties

from components.config.load import load_vhost
from components.plan.planner import plan_vhost
from rabbitmq_retry_client import SUPPORTED_STRATEGIES, ContractError, PermanentError, RetryingConsumer, load_contract
from rabbitmq_retry_client import stack_output as stack_output_of
from rabbitmq_retry_client.cli import UsageError, duration, main, parser, urls
from rabbitmq_retry_client.connection import BrokerRefusedError, BrokerUnreachableError, connect, hosts
from rabbitmq_retry_client.connection import parameters as _parameters
from rabbitmq_retry_client.consumer import DEFAULT_PREFETCH
from rabbitmq_retry_client.contract import SCHEMA
from rabbitmq_retry_client.handler_thread import HandlerThread
from rabbitmq_retry_client.headers import (
    MAX_REASON_BYTES,
    copy_properties,
    deaths,
    parse_utc,
    redriven_headers,
    rejected_attempts,
    truncate,
    utc_iso,
    without_broker_headers,
)
from rabbitmq_retry_client.levels import delay_routing_key, delay_units, retry_delay_ms
from rabbitmq_retry_client.parked import Parked, ParkedQueue, Selection
from rabbitmq_retry_client.policies import NativePolicy, RejectPolicy, RepublishPolicy
from rabbitmq_retry_client.settlements import Settlements
from rabbitmq_retry_client.strategies import BEHAVIOURS, Mode, behaviour_of, check_covers
from tests.conftest import ROOT, vhost_config


def contract(vhost: str = "shop", queue: str = "orders", **changes: Any) -> dict[str, Any]:
    """A valid contract as the stack exports it (see components/plan/planner.py)."""
    value: dict[str, Any] = {
        "vhost": vhost, "queue": queue, "queue_type": "quorum", "retry_exchange": f"{queue}.retry",
        "reject_routes_to": "wait.1",
        "tiers": [{"routing_key": "wait.1", "queue": f"{queue}.wait.1", "delay_ms": 1000},
                  {"routing_key": "wait.2", "queue": f"{queue}.wait.2", "delay_ms": 10000}],
        "max_retries": 5, "delivery_limit": 25, "attempt_header": "retry-count",
        "error_exchange": f"{queue}.error", "error_queue": f"{queue}.error",
    }
    value.update(changes)
    return value


def stack_output() -> dict[str, dict[str, dict[str, Any]]]:
    """`pulumi stack output retry_contracts --json`: {vhost: {queue: contract}}; `orders` is in two vhosts."""
    return {"shop": {"orders": contract("shop", "orders"), "billing": contract("shop", "billing")},
            "test": {"orders": contract("test", "orders")}}


def _problems(source: dict[str, Any]) -> str:
    with pytest.raises(ValueError, match="invalid retry contract") as error:
        load_contract(source)
    return str(error.value)


# --- contract selection -----------------------------------------------------------------------------

def test_the_contract_the_program_exports_is_accepted_unchanged() -> None:
    exported = plan_vhost(load_vhost(vhost_config(), "vhost")).retryables[0].contract("shop")
    assert load_contract(exported) == exported


def test_a_single_contract_is_taken_as_it_is() -> None:
    assert load_contract(contract()) == contract()


def test_the_queue_picks_one_contract_of_the_stack_output() -> None:
    assert load_contract(stack_output(), queue="billing") == contract("shop", "billing")


def test_the_vhost_picks_between_queues_of_the_same_name() -> None:
    assert load_contract(stack_output(), queue="orders", vhost="test") == contract("test", "orders")


def test_an_ambiguous_choice_fails_instead_of_guessing() -> None:
    with pytest.raises(ValueError) as error:
        load_contract(stack_output(), queue="orders")
    assert str(error.value) == ("several contracts match queue='orders' vhost=None; name one with --queue (and "
                                "--vhost), or see every error queue with `rabbitmq-retry parked summary`; "
                                "available: shop/billing, shop/orders, test/orders")


def test_a_queue_not_in_the_contracts_names_the_available_ones() -> None:
    with pytest.raises(ValueError) as error:
        load_contract(stack_output(), queue="shipping")
    assert str(error.value) == ("no contract matches queue='shipping' vhost=None; "
                                "available: shop/billing, shop/orders, test/orders")


def test_a_single_contract_for_another_queue_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^no contract matches queue='billing' vhost=None; available: shop/orders$"):
        load_contract(contract(), queue="billing")


def test_no_contract_at_all_says_none_are_available() -> None:
    with pytest.raises(ValueError, match=r"^no contract matches queue=None vhost=None; available: none$"):
        load_contract({"shop": {}})


def test_a_contract_file_is_read_from_a_path_or_a_string(tmp_path: Path) -> None:
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps(stack_output()))
    assert load_contract(path, queue="billing") == contract("shop", "billing")
    assert load_contract(str(path), queue="orders", vhost="shop") == contract("shop", "orders")


def test_the_consumers_first_line_shows_each_delay_as_the_stack_file_writes_it() -> None:
    tiers = contract(tiers=[{"routing_key": "wait.1", "queue": "orders.wait.1", "delay_ms": 1000.0},
                            {"routing_key": "wait.2", "queue": "orders.wait.2", "delay_ms": 7_200_000}])
    assert behaviour_of(tiers).describe(tiers, "republish") == "republish mode; tiers wait.1=1s, wait.2=2h"

def test_pulumi_floats_become_whole_numbers() -> None:
    source = contract(max_retries=5.0, delivery_limit=25.0,
                      tiers=[{"routing_key": "wait.1", "queue": "orders.wait.1", "delay_ms": 200.0}])
    loaded = load_contract(source)
    assert (loaded["max_retries"], loaded["delivery_limit"], loaded["tiers"][0]["delay_ms"]) == (5, 25, 200)
    assert all(type(v) is int for v in (loaded["max_retries"], loaded["tiers"][0]["delay_ms"]))


def test_the_loaded_contract_is_independent_of_the_callers_dict() -> None:
    source = contract()
    loaded = load_contract(source)
    loaded["tiers"][0]["delay_ms"] = 1
    loaded["max_retries"] = 0
    assert source == contract()


# --- contract validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["vhost", "queue_type", "reject_routes_to", "attempt_header", "error_exchange",
                                 "error_queue"])
def test_a_missing_text_field_is_named(key: str) -> None:
    source = contract()
    del source[key]
    assert _problems(source) == f"invalid retry contract for 'orders': {key}: missing (a string)"


@pytest.mark.parametrize(("key", "value", "kind"), [
    ("max_retries", "5", "integer"),
    ("max_retries", True, "integer"),  # a bool is an int to Python, never a retry budget
    ("max_retries", 2.5, "integer"),
    ("max_retries", None, "integer"),
    ("retry_exchange", 7, "string"),
    ("vhost", b"shop", "string"),
])
def test_a_field_of_the_wrong_type_is_named(key: str, value: Any, kind: str) -> None:
    assert _problems(contract(**{key: value})) == (
        f"invalid retry contract for 'orders': {key}: {value!r} is not of type '{kind}'")


def test_tiers_that_are_not_a_list_are_named() -> None:
    assert _problems(contract(tiers=None)) == (
        "invalid retry contract for 'orders': tiers: None is not of type 'array'")


def test_a_contract_needs_at_least_one_tier() -> None:
    assert _problems(contract(tiers=[])) == "invalid retry contract for 'orders': tiers: [] should be non-empty"


@pytest.mark.parametrize(("tier", "problem"), [
    ({"routing_key": "wait.1"}, "tiers[1].delay_ms: missing (an integer)"),
    ({"delay_ms": 1000}, "tiers[1].routing_key: missing (a string)"),
    ({"routing_key": "wait.1", "delay_ms": "1000"}, "tiers[1].delay_ms: '1000' is not of type 'integer'"),
    ({"routing_key": "wait.1", "delay_ms": 1000.5}, "tiers[1].delay_ms: 1000.5 is not of type 'integer'"),
    ({"routing_key": 1, "delay_ms": 1000}, "tiers[1].routing_key: 1 is not of type 'string'"),
    ("wait.1", "tiers[1]: 'wait.1' is not of type 'object'"),
])
def test_each_tier_needs_a_routing_key_and_a_whole_delay(tier: Any, problem: str) -> None:
    tiers = [{"routing_key": "wait.1", "delay_ms": 1000}, tier]
    assert _problems(contract(tiers=tiers)) == f"invalid retry contract for 'orders': {problem}"


def test_every_problem_is_reported_at_once() -> None:
    source = contract(max_retries="many", tiers=[{"routing_key": "wait.1"}])
    del source["error_queue"]
    assert _problems(source) == ("invalid retry contract for 'orders': error_queue: missing (a string); "
                                 "max_retries: 'many' is not of type 'integer'; "
                                 "tiers[0].delay_ms: missing (an integer)")


def test_delivery_limit_is_optional() -> None:
    source = contract()
    del source["delivery_limit"]
    assert load_contract(source) == source


def test_the_consumer_validates_its_contract_and_mode_before_connecting() -> None:
    def handler(body: bytes, properties: BasicProperties) -> None:
        pass

    with pytest.raises(ValueError, match=r"^mode must be one of reject, republish, got 'requeue'$"):
        RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), handler, "requeue")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^invalid retry contract for 'orders': tiers: \[\] should be non-empty$"):
        RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(tiers=[]), handler)
    nameless = contract()
    del nameless["queue"]
    with pytest.raises(ValueError, match=r"^invalid retry contract for None: queue: missing \(a string\)$"):
        RetryingConsumer("amqp://127.0.0.1:1/%2F", nameless, handler)
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(vhost="test"), handler, "republish")
    assert (consumer.queue, consumer.mode, consumer._params[0].virtual_host) == ("orders", "republish", "test")


# --- connection parameters ----------------------------------------------------------------------

def test_the_contracts_vhost_replaces_the_urls_and_the_callers_parameters_stay_as_they_were() -> None:
    assert _parameters("amqp://u:p@broker:5673/%2F", "shop").virtual_host == "shop"
    assert _parameters("amqp://u:p@broker:5673/other").virtual_host == "other"
    given = pika.ConnectionParameters("broker", 5673, "/")
    assert _parameters(given, "shop").virtual_host == "shop"
    assert given.virtual_host == "/"


# --- several hosts (a cluster) --------------------------------------------------------------------

def test_several_hosts_keep_their_order_and_each_gets_the_contracts_vhost() -> None:
    given = pika.ConnectionParameters("c", 5694, "/")
    listed = hosts(["amqp://u:p@a:5692/%2F", "amqp://u:p@b:5693/other", given], "shop")
    assert [(p.host, p.port, p.virtual_host) for p in listed] == [("a", 5692, "shop"), ("b", 5693, "shop"),
                                                                 ("c", 5694, "shop")]
    assert given.virtual_host == "/"
    assert [p.host for p in hosts("amqp://u:p@a:5692/%2F")] == ["a"]
    with pytest.raises(ValueError, match="no broker given"):
        hosts([])


def test_every_connect_and_reconnect_hands_pika_all_hosts_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """pika's BlockingConnection tries a list of parameters in order and takes the first that accepts; the
    consumer must give it the whole list each time (the cluster tests prove the failover on real nodes)."""
    from rabbitmq_retry_client import connection as module

    tried: list[list[tuple[str, int]]] = []

    def fake_connection(params: Any) -> Any:
        tried.append([(p.host, p.port) for p in params])
        raise pika.exceptions.AMQPConnectionError("refused")

    monkeypatch.setattr(module, "BlockingConnection", fake_connection)
    with pytest.raises(BrokerUnreachableError, match=r"^broker unreachable at a:5692, b:5693 vhost 'shop' as u: "):
        connect(hosts(["amqp://u:p@a:5692/%2F", "amqp://u:p@b:5693/%2F"], "shop"), timeout=0.5, interval=0.2,
                sleep=lambda _: None)
    assert len(tried) >= 2 and all(attempt == [("a", 5692), ("b", 5693)] for attempt in tried)


def test_the_command_takes_urls_repeated_or_comma_separated_and_from_the_environment() -> None:
    assert urls(["amqp://a", "amqp://b, amqp://c"], "amqp://ignored") == ["amqp://a", "amqp://b", "amqp://c"]
    assert urls(None, "amqp://a,amqp://b") == ["amqp://a", "amqp://b"]
    assert urls(None, None) == ["amqp://guest:guest@127.0.0.1:5672/%2F"]
    with pytest.raises(UsageError, match="an empty URL"):
        urls(["amqp://a,,amqp://b"], None)


def test_the_command_names_every_host_when_none_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", "amqp://guest:guest@127.0.0.1:1/%2F,amqp://guest:guest@127.0.0.1:2/%2F", "parked", "list",
            "--contract", _contract_file(tmp_path), "--queue", "billing", "--connect-timeout", "0"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: broker unreachable at 127.0.0.1:1, 127.0.0.1:2 vhost "
                                                   "'shop' as guest: Connection refused")


# --- error reason truncation --------------------------------------------------------------------

def test_a_reason_within_the_limit_is_kept_whole() -> None:
    reason = "é" * (MAX_REASON_BYTES // 2)  # exactly 1024 bytes
    assert truncate(reason) == reason


def test_a_reason_over_the_limit_is_cut_to_the_limit_with_an_ellipsis() -> None:
    reason = "x" * (MAX_REASON_BYTES + 1)
    cut = truncate(reason)
    assert cut == "x" * (MAX_REASON_BYTES - 3) + "..."
    assert len(cut.encode()) == MAX_REASON_BYTES


@pytest.mark.parametrize(("character", "kept"), [("é", 1), ("€", 1), ("€", 2), ("🐇", 1), ("🐇", 2), ("🐇", 3)])
def test_a_multi_byte_character_at_the_cut_is_dropped_whole(character: str, kept: int) -> None:
    """`kept` bytes of the character would fit before the cut: none of them may be left behind."""
    assert kept < len(character.encode())
    head = "a" * (MAX_REASON_BYTES - 3 - kept)
    cut = truncate(head + character + "tail")
    assert cut == head + "..."
    assert len(cut.encode()) <= MAX_REASON_BYTES


def test_a_multi_byte_character_that_fits_exactly_before_the_cut_is_kept() -> None:
    head = "a" * (MAX_REASON_BYTES - 3 - len("€".encode()))
    assert truncate(head + "€" + "tail") == head + "€..."


def test_the_limit_can_be_chosen() -> None:
    assert truncate("ab€cd", limit=7) == "ab€cd"
    assert truncate("ab€cde", limit=7) == "ab..."
    assert truncate("abcd€f", limit=7) == "abcd..."


# --- broker headers -----------------------------------------------------------------------------

X_DEATH = [
    {"queue": "orders", "reason": "rejected", "count": 2, "exchange": "events", "routing-keys": ["order.created"]},
    {"queue": "orders.wait.1", "reason": "expired", "count": 2, "exchange": "orders.retry"},
    {"queue": "billing", "reason": "rejected", "count": 7},
    {"queue": "orders", "reason": "delivery_limit", "count": 1},
]


def test_deaths_are_the_entries_of_the_queue_and_reason() -> None:
    assert deaths({"x-death": X_DEATH}, "orders") == [X_DEATH[0]]
    assert deaths({"x-death": X_DEATH}, "orders", "delivery_limit") == [X_DEATH[3]]
    assert deaths({"x-death": X_DEATH}, "orders.wait.1", "expired") == [X_DEATH[1]]
    assert deaths({"x-death": X_DEATH}, "shipping") == []


def test_rejected_attempts_count_only_the_queues_rejections() -> None:
    assert rejected_attempts({"x-death": X_DEATH}, "orders") == 2
    assert rejected_attempts({"x-death": X_DEATH}, "billing") == 7
    assert rejected_attempts({"x-death": X_DEATH}, "orders.wait.1") == 0


@pytest.mark.parametrize("headers", [None, {}, {"x-death": None}, {"x-death": []}, {"retry-count": 3}])
def test_a_message_without_x_death_has_no_rejected_attempts(headers: dict[str, Any] | None) -> None:
    assert rejected_attempts(headers, "orders") == 0


def test_x_death_fields_may_arrive_as_bytes_and_malformed_entries_count_nothing() -> None:
    entries = [{"queue": b"orders", "reason": b"rejected", "count": b"3"},
               {"queue": "orders", "reason": "rejected", "count": "not a number"},
               {"queue": "orders", "reason": "rejected"},
               "garbage"]
    assert rejected_attempts({"x-death": entries}, "orders") == 3


def test_a_copy_drops_the_brokers_history_and_delivery_counters_and_keeps_the_rest() -> None:
    headers = {
        "x-death": X_DEATH, "x-first-death-queue": "orders", "x-first-death-reason": "rejected",
        "x-first-death-exchange": "events", "x-last-death-queue": "orders.wait.1",
        "x-last-death-reason": "expired", "x-last-death-exchange": "orders.retry",
        "x-delivery-count": 3, "x-acquired-count": 4,
        "retry-count": 2, "app": "shop", "x-custom": "kept", "first-failure-at": "2026-01-01T00:00:00.000Z",
    }
    original = copy.deepcopy(headers)
    assert without_broker_headers(headers) == {"retry-count": 2, "app": "shop", "x-custom": "kept",
                                               "first-failure-at": "2026-01-01T00:00:00.000Z"}
    assert headers == original


def test_no_headers_give_an_empty_copy() -> None:
    assert without_broker_headers(None) == {}


# --- properties ---------------------------------------------------------------------------------

def test_a_copy_keeps_the_properties_persistent_without_expiration_or_user_id() -> None:
    original = BasicProperties(
        content_type="application/json", content_encoding="gzip", headers={"x-death": X_DEATH, "app": "shop"},
        delivery_mode=1, priority=4, correlation_id="corr-1", reply_to="replies", expiration="60000",
        message_id="m-1", timestamp=1_700_000_000, type="order.created", user_id="billing-app", app_id="shop",
        cluster_id="c",
    )
    copied = copy_properties(original, {"retry-count": 1})
    assert (copied.content_type, copied.content_encoding, copied.priority, copied.correlation_id,
            copied.reply_to, copied.message_id, copied.timestamp, copied.type, copied.app_id) == (
        "application/json", "gzip", 4, "corr-1", "replies", "m-1", 1_700_000_000, "order.created", "shop")
    assert copied.delivery_mode == 2
    assert copied.headers == {"retry-count": 1}
    assert (copied.expiration, copied.user_id) == (None, None)
    assert original.expiration == "60000" and original.headers == {"x-death": X_DEATH, "app": "shop"}


def test_a_copy_of_bare_properties_is_still_persistent() -> None:
    copied = copy_properties(BasicProperties(), {})
    assert (copied.delivery_mode, copied.headers, copied.message_id, copied.expiration) == (2, {}, None, None)


# --- timestamps ---------------------------------------------------------------------------------

def test_timestamps_are_utc_with_milliseconds_and_a_z() -> None:
    moment = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)
    assert utc_iso(moment) == "2026-03-01T12:30:05.123Z"
    assert utc_iso(moment.astimezone(timezone(timedelta(hours=5, minutes=30)))) == "2026-03-01T12:30:05.123Z"


def test_the_current_time_is_used_by_default() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    stamped = datetime.fromisoformat(utc_iso().replace("Z", "+00:00"))
    assert stamped.tzinfo is not None and stamped >= before


def test_the_current_time_follows_the_clock_to_the_millisecond() -> None:
    """Now is written once per millisecond and reused within it: it still moves with the clock."""
    first = utc_iso()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first)
    time.sleep(0.002)
    later = utc_iso()
    assert later > first and utc_iso(datetime.fromisoformat(later.replace("Z", "+00:00"))) == later


# --- strategy -------------------------------------------------------------------------------------

def test_a_contract_without_a_strategy_is_followed_as_tiers() -> None:
    assert "strategy" not in contract() and load_contract(contract()) == contract()


def test_the_tiers_strategy_named_explicitly_is_accepted() -> None:
    assert load_contract(contract(strategy="tiers"))["strategy"] == "tiers"


def test_an_unknown_strategy_is_refused_by_name_before_anything_else() -> None:
    with pytest.raises(ContractError) as error:
        load_contract(contract(strategy="exponential", tiers=[]))
    assert str(error.value) == (
        "retry contract for 'orders' uses strategy 'exponential', which this client does not support "
        "(supported: tiers, native, levels); upgrade rabbitmq-retry or follow docs/contract.md by hand")


def test_the_consumer_refuses_an_unknown_strategy_before_connecting() -> None:
    with pytest.raises(ContractError, match="strategy 'exponential'"):
        RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(strategy="exponential"), lambda body, props: None)


def test_a_permanent_failure_is_an_exception_the_handler_raises() -> None:
    assert issubclass(PermanentError, Exception)
    with pytest.raises(ValueError, match=r"^handler_timeout must be positive seconds or None, got 0$"):
        RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), lambda body, props: None, handler_timeout=0)


def test_whatever_the_handler_raises_is_a_failed_attempt_and_its_thread_serves_the_next_delivery() -> None:
    """SystemExit or KeyboardInterrupt in the handler's thread is a failed attempt (retried), never a success (an
    ack would drop a message whose handler never finished) and never the end of that thread (the consumer would
    wait for an outcome forever)."""
    def handler(body: bytes, properties: BasicProperties) -> None:
        if body == b"exit":
            raise SystemExit(3)
        if body == b"interrupt":
            raise KeyboardInterrupt
        if body == b"fail":
            raise ValueError("bad")

    worker = HandlerThread(handler)
    outcomes = []
    for body in (b"exit", b"ok", b"interrupt", b"fail", b"ok"):
        worker.submit(body, BasicProperties())
        outcomes.append(worker.outcome(timeout=5))
    worker.retire()
    assert [(finished, type(error).__name__) for finished, error in outcomes] == [
        (True, "SystemExit"), (True, "NoneType"), (True, "KeyboardInterrupt"), (True, "ValueError"), (True, "NoneType")]


def test_a_handler_still_running_has_no_outcome_yet() -> None:
    release = threading.Event()

    def slow(body: bytes, properties: BasicProperties) -> None:
        release.wait(5)

    worker = HandlerThread(slow)
    worker.submit(b"slow", BasicProperties())
    assert worker.outcome(timeout=0.05) == (False, None)
    release.set()
    assert worker.outcome(timeout=5) == (True, None)
    worker.retire()


# --- redriven copies ------------------------------------------------------------------------------

PARKED_HEADERS = {
    "error-reason": "RuntimeError: boom", "error-queue": "orders", "original-exchange": "events",
    "original-routing-key": "order.created", "attempts": 6, "first-failure-at": "2026-01-01T00:00:00.000Z",
    "permanent": True, "retry-count": 5, "x-delivery-count": 2, "x-death": X_DEATH, "app": "shop",
}


def test_a_redriven_copy_has_a_full_budget_keeps_its_origin_and_counts_redrives() -> None:
    moment = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert redriven_headers(PARKED_HEADERS, "retry-count", moment) == {
        "original-exchange": "events", "original-routing-key": "order.created", "app": "shop",
        "redriven-count": 1, "redriven-at": "2026-03-01T12:00:00.000Z"}
    again = redriven_headers({**PARKED_HEADERS, "redriven-count": 2}, "retry-count", moment)
    assert again["redriven-count"] == 3


def test_a_malformed_redriven_count_starts_again_at_one() -> None:
    assert redriven_headers({"redriven-count": b"many"}, "retry-count")["redriven-count"] == 1


# --- parked selection -----------------------------------------------------------------------------

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def parked(reason: str = "RuntimeError: boom", age: timedelta | None = timedelta(hours=1),
           **headers: Any) -> Parked:
    values: dict[str, Any] = {"error-reason": reason, **headers}
    if age is not None:
        values["first-failure-at"] = utc_iso(NOW - age)
    return Parked(1, BasicProperties(headers=values), b"body")


def test_no_criterion_selects_everything_and_is_not_a_filter() -> None:
    assert Selection().matches(parked(age=None), NOW) and not Selection().filtered


def test_the_reason_is_searched_not_anchored() -> None:
    selection = Selection(reason=re.compile("Timeout"))
    assert selection.filtered
    assert selection.matches(parked("requests.Timeout: read timed out"), NOW)
    assert not selection.matches(parked("ValueError: bad payload"), NOW)


@pytest.mark.parametrize(("age", "older", "newer", "selected"), [
    (timedelta(hours=3), timedelta(hours=2), None, True),
    (timedelta(hours=2), timedelta(hours=2), None, True),
    (timedelta(hours=1), timedelta(hours=2), None, False),
    (timedelta(minutes=5), None, timedelta(minutes=15), True),
    (timedelta(minutes=15), None, timedelta(minutes=15), False),
    (timedelta(hours=1), timedelta(minutes=30), timedelta(hours=2), True),
    (None, timedelta(minutes=1), None, False),
    (None, None, timedelta(days=1), False),
])
def test_age_is_measured_from_the_first_failure(age: timedelta | None, older: timedelta | None,
                                                 newer: timedelta | None, selected: bool) -> None:
    assert Selection(older_than=older, newer_than=newer).matches(parked(age=age), NOW) is selected


def test_a_native_message_s_age_is_measured_from_its_last_failure() -> None:
    """Strategy native parks with `last-failure-at` (no consumer can know its first failure): `--older-than` and
    `--newer-than` select it by that."""
    native = Parked(1, BasicProperties(headers={"last-failure-at": utc_iso(NOW - timedelta(hours=3))}), b"")
    assert native.first_failure_at == NOW - timedelta(hours=3)
    assert Selection(older_than=timedelta(hours=2)).matches(native, NOW)
    assert not Selection(newer_than=timedelta(hours=2)).matches(native, NOW)


def test_a_limit_alone_is_a_filter() -> None:
    assert Selection(limit=10).filtered


def test_parked_fields_read_bytes_headers_and_tolerate_missing_ones() -> None:
    message = Parked(1, BasicProperties(headers={"original-routing-key": b"a.b", "redriven-count": 2,
                                                 "first-failure-at": "garbage"}), b"")
    assert (message.reason, message.original_routing_key, message.original_exchange, message.first_failure_at,
            message.redriven_count) == ("", "a.b", None, None, 2)


# --- the command ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("90s", timedelta(seconds=90)), ("15m", timedelta(minutes=15)), ("2h", timedelta(hours=2)),
    ("7d", timedelta(days=7)), ("1h30m", timedelta(minutes=90)), ("500ms", timedelta(milliseconds=500)),
])
def test_durations_of_the_age_filters(text: str, expected: timedelta) -> None:
    assert duration(text) == expected


@pytest.mark.parametrize("text", ["", "10", "1 h", "h", "10x", "-5m"])
def test_a_malformed_duration_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="is not a duration"):
        duration(text)


def _contract_file(tmp_path: Path) -> str:
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps(stack_output()))
    return str(path)


@pytest.mark.parametrize("extra", [[], ["--yes"]])
def test_purge_without_a_filter_or_all_refuses_before_connecting(tmp_path: Path, extra: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", "amqp://guest:guest@127.0.0.1:1/%2F", "parked", "purge", "--contract", _contract_file(tmp_path),
            "--queue", "billing", *extra]
    assert main(argv) == 2
    assert capsys.readouterr().err == ("rabbitmq-retry: error: refusing to purge every parked message: give a "
                                       "filter (--reason, --older-than, --newer-than, --limit) or --all\n")


def test_purge_with_a_filter_still_needs_yes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", "amqp://guest:guest@127.0.0.1:1/%2F", "parked", "purge", "--contract", _contract_file(tmp_path),
            "--queue", "billing", "--reason", "x"]
    assert main(argv) == 2
    assert "add --yes" in capsys.readouterr().err


def test_an_ambiguous_contract_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parked", "list", "--contract", _contract_file(tmp_path), "--queue", "orders"]) == 1
    assert capsys.readouterr().err == ("error: several contracts match queue='orders' vhost=None; name one with "
                                       "--queue (and --vhost), or see every error queue with `rabbitmq-retry parked "
                                       "summary`; available: shop/billing, shop/orders, test/orders\n")


@pytest.mark.parametrize("command", [["consume", "--queue", "orders.invoices"], ["parked", "summary"]])
def test_a_missing_contract_file_is_one_line_naming_the_command_that_writes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    missing = tmp_path / "contracts.dev.json"
    assert main([*command, "--contract", str(missing)]) == 1
    assert capsys.readouterr().err == (f"error: {missing}: no such file; write it with `make contracts STACK=dev` in "
                                       "the project (or `pulumi stack output retry_contracts --json > "
                                       f"{missing}`)\n")


def test_a_contract_file_that_is_not_json_says_to_write_it_again(tmp_path: Path) -> None:
    broken = tmp_path / "mine.json"
    broken.write_text("{")
    with pytest.raises(ContractError, match=r"mine\.json: not a contract file \(.*\); write it again with "
                       r"`make contracts STACK=<stack>`$"):
        load_contract(broken)


# --- an unreachable broker --------------------------------------------------------------------------

def test_an_unreachable_broker_is_one_warning_with_the_reason_then_one_error(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    naps: list[float] = []
    with pytest.raises(BrokerUnreachableError) as error:
        connect(_parameters("amqp://guest:guest@127.0.0.1:1/%2F"), timeout=3, interval=0.2, sleep=naps.append)
    assert len(naps) >= 1
    warnings = [r.getMessage() for r in caplog.records if r.name == "rabbitmq_retry_client"]
    assert warnings == ["broker unreachable at 127.0.0.1:1 vhost '/' as guest: Connection refused; "
                        "retrying every 0 s for up to 3 s"]
    assert str(error.value).startswith("broker unreachable at 127.0.0.1:1 vhost '/' as guest: Connection refused "
                                       "(gave up after ")
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"


def test_the_command_prints_one_line_for_an_unreachable_broker(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", "amqp://guest:guest@127.0.0.1:1/%2F", "parked", "list", "--contract", _contract_file(tmp_path),
            "--queue", "billing", "--connect-timeout", "0"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: broker unreachable at 127.0.0.1:1 vhost 'shop' as guest: "
                                                   "Connection refused")


@pytest.mark.parametrize(("error", "expected"), [
    (pika.exceptions.ProbableAuthenticationError(
        "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN'"),
     "login refused by 127.0.0.1:5672 for user 'guest' (403 ACCESS_REFUSED): check the user and password in --url "
     "or $RABBITMQ_URL"),
    (pika.exceptions.ProbableAccessDeniedError("ConnectionClosedByBroker: (530) 'NOT_ALLOWED - vhost shop not found'"),
     "vhost 'shop' refused by 127.0.0.1:5672 for user 'guest' (530 NOT_ALLOWED - vhost shop not found): check that "
     "the vhost exists and that the user has permissions on it"),
])
def test_a_refused_login_or_vhost_fails_at_once_with_what_to_check(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception, expected: str) -> None:
    """403 and 530 are permanent: no "broker unreachable … retrying every 1 s", no second attempt."""
    attempts: list[object] = []

    def refused(params: object) -> None:
        attempts.append(params)
        raise error

    monkeypatch.setattr("rabbitmq_retry_client.connection.BlockingConnection", refused)
    naps: list[float] = []
    with pytest.raises(BrokerRefusedError) as raised:
        connect(_parameters("amqp://guest:guest@127.0.0.1:5672/shop"), timeout=30, sleep=naps.append)
    assert str(raised.value) == expected
    assert len(attempts) == 1 and naps == [] and not caplog.records


def test_a_vhost_that_is_down_while_the_broker_restarts_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[object] = []

    def down_then_up(params: object) -> str:
        attempts.append(params)
        if len(attempts) == 1:
            raise pika.exceptions.ProbableAccessDeniedError(
                "ConnectionClosedByBroker: (530) 'NOT_ALLOWED - vhost shop is down'")
        return "connected"

    monkeypatch.setattr("rabbitmq_retry_client.connection.BlockingConnection", down_then_up)
    naps: list[float] = []
    assert connect(_parameters("amqp://guest:guest@127.0.0.1:5672/shop"), timeout=30, sleep=naps.append) == \
        "connected"  # type: ignore[comparison-overlap]
    assert len(attempts) == 2 and len(naps) == 1


def test_url_works_before_or_after_the_command() -> None:
    after = ["parked", "list", "--contract", "c.json", "--url", "amqp://after/%2F"]
    assert parser().parse_args(after).url == ["amqp://after/%2F"]
    assert parser().parse_args(["--url", "amqp://before/%2F", *after[:-2]]).url == ["amqp://before/%2F"]
    assert parser().parse_args(["--url", "amqp://before/%2F", *after]).url == ["amqp://after/%2F"], "the later wins"
    assert parser().parse_args(["publish", "--exchange", "x", "--url", "amqp://after/%2F"]).url == ["amqp://after/%2F"]
    nodes = ["parked", "list", "--contract", "c.json", "--url", "amqp://a/%2F", "--url", "amqp://b/%2F,amqp://c/%2F"]
    assert urls(parser().parse_args(nodes).url, None) == ["amqp://a/%2F", "amqp://b/%2F", "amqp://c/%2F"]


def test_publish_takes_its_vhost_from_the_url_unless_vhost_is_given() -> None:
    """No silent default vhost: the one the URL names (`%2F` is `/`), or --vhost."""
    args = parser().parse_args(["publish", "--exchange", "orders", "--url", "amqp://127.0.0.1:1/sales"])
    assert args.vhost is None and hosts(urls(args.url, None), args.vhost)[0].virtual_host == "sales"
    args = parser().parse_args(["publish", "--exchange", "orders", "--vhost", "shop"])
    assert hosts(urls(args.url, None), args.vhost)[0].virtual_host == "shop"


# --- make contracts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_make_contracts_writes_the_plans_contracts_in_the_stack_outputs_shape(stack: str, tmp_path: Path) -> None:
    from components.config.load import load_stack_config
    from components.config.pulumi_yaml import load
    from tools import contracts as make_contracts

    output = tmp_path / f"contracts.{stack}.json"
    assert make_contracts.main(["--stack", stack, "--output", str(output)]) == 0
    written = json.loads(output.read_text())
    raw = {key.partition(":")[2]: value for key, value in load(ROOT / f"Pulumi.{stack}.yaml").items()
           if str(key).startswith("rabbitmq-retry:") and not str(key).endswith(":passwords")}
    config = load_stack_config(raw)
    planned = {v.name: {r.config.name: r.contract(v.name) for r in plan_vhost(v).retryables} for v in config.vhosts}
    assert written == planned
    for vhost, queues in written.items():
        for queue in queues:
            assert load_contract(output, queue=queue, vhost=vhost) == planned[vhost][queue]


# --- contracts from `pulumi stack output` ---------------------------------------------------------------

def _fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """A `pulumi` on PATH that records its arguments and runs `script`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/argv"\n{script}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tmp_path / "argv"


def test_the_stack_option_reads_pulumi_stack_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "out.json").write_text(json.dumps(stack_output()))
    argv = _fake_pulumi(tmp_path, monkeypatch, f'cat "{tmp_path}/out.json"')
    assert load_contract(stack_output_of("prod"), queue="billing") == contract("shop", "billing")
    assert argv.read_text().split() == ["stack", "output", "retry_contracts", "--json", "--stack", "prod"]


def test_a_failing_pulumi_is_one_error_with_its_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pulumi(tmp_path, monkeypatch, 'echo "error: no stack named \'prod\' found" >&2; exit 255')
    with pytest.raises(ContractError) as error:
        stack_output_of("prod")
    assert str(error.value) == ("`stack output retry_contracts --json --stack prod` failed: "
                                "error: no stack named 'prod' found")


def test_without_the_pulumi_cli_the_error_says_to_pass_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ContractError, match=r"^the Pulumi CLI is not installed; pass --contract FILE instead"):
        stack_output_of("dev")


# --- strategy levels: the contract ------------------------------------------------------------------

def levels_contract(**changes: Any) -> dict[str, Any]:
    """A valid `strategy: levels` contract, the example in docs/contract.md (The retry contract)."""
    value: dict[str, Any] = {
        "strategy": "levels", "vhost": "shop", "queue": "orders.billing", "queue_type": "quorum",
        "delay_exchange": "rabbitmq-retry.delay.16",
        "delay_exchanges": [f"rabbitmq-retry.delay.{k}" for k in range(17)],
        "delay_unit_ms": 1000, "delay_words": 28, "delay_levels": 17, "max_delay_ms": 86400000,
        "routing_key_format": "delay in units (ceil(delay_ms / delay_unit_ms)) as delay_words binary digits, most "
                              "significant first, each followed by '.', then the queue name",
        "backoff": {"initial_ms": 1000, "multiplier": 2.0, "max_ms": 3600000, "jitter": 0.2},
        "max_retries": 8, "delivery_limit": 28, "attempt_header": "retry-count",
        "error_exchange": "orders.billing.error", "error_queue": "orders.billing.error",
    }
    value.update(changes)
    return value


def levels_backoff(**changes: Any) -> dict[str, Any]:
    return levels_contract(backoff={**levels_contract()["backoff"], **changes})


def _levels_problems(source: dict[str, Any]) -> str:
    return _problems(source).removeprefix("invalid retry contract for 'orders.billing': ")


def test_a_levels_contract_is_accepted_whole_numbers_included() -> None:
    assert load_contract({"shop": {"orders.billing": levels_contract()}}) == levels_contract()
    assert load_contract(levels_contract(delivery_limit=None, queue_type="classic"))["delivery_limit"] is None
    loaded = load_contract(levels_backoff(initial_ms=500.0, multiplier=1, jitter=0))
    assert loaded["backoff"] == {"initial_ms": 500, "multiplier": 1, "max_ms": 3600000, "jitter": 0}
    assert type(loaded["backoff"]["initial_ms"]) is int


@pytest.mark.parametrize(("key", "kind"), [
    ("delay_exchange", "a string"), ("delay_unit_ms", "an integer"), ("delay_words", "an integer"),
    ("delay_levels", "an integer"), ("max_delay_ms", "an integer"), ("backoff", "an object"),
    ("max_retries", "an integer"), ("attempt_header", "a string"), ("error_exchange", "a string"),
    ("error_queue", "a string"),
])
def test_a_missing_levels_field_is_named(key: str, kind: str) -> None:
    source = levels_contract()
    del source[key]
    assert _levels_problems(source) == f"{key}: missing ({kind})"


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("backoff", "1s", "backoff: '1s' is not of type 'object'"),
    ("delay_exchange", None, "delay_exchange: None is not of type 'string'"),
    ("delay_unit_ms", "1000", "delay_unit_ms: '1000' is not of type 'integer'"),
    ("delay_unit_ms", 0.5, "delay_unit_ms: 0.5 is not of type 'integer'"),
    ("delay_unit_ms", 0, "delay_unit_ms: 0 is less than the minimum of 1"),
    ("delay_unit_ms", -1000, "delay_unit_ms: -1000 is less than the minimum of 1"),
    ("delay_words", True, "delay_words: True is not of type 'integer'"),
    ("delay_levels", 0, "delay_levels: 0 is less than the minimum of 1"),
    ("delay_levels", 29, "delay_levels: 29 is more than delay_words (28)"),
    ("delay_words", 16, "delay_levels: 17 is more than delay_words (16)"),
])
def test_a_wrong_levels_field_is_named(key: str, value: Any, problem: str) -> None:
    assert _levels_problems(levels_contract(**{key: value})) == problem


@pytest.mark.parametrize(("changes", "problem"), [
    ({"initial_ms": None}, "backoff.initial_ms: None is not of type 'integer'"),
    ({"initial_ms": 1.5}, "backoff.initial_ms: 1.5 is not of type 'integer'"),
    ({"max_ms": "1h"}, "backoff.max_ms: '1h' is not of type 'integer'"),
    ({"max_ms": True}, "backoff.max_ms: True is not of type 'integer'"),
    ({"initial_ms": -1}, "backoff.initial_ms: -1 is less than the minimum of 0"),
    ({"multiplier": None}, "backoff.multiplier: None is not of type 'number'"),
    ({"multiplier": "2"}, "backoff.multiplier: '2' is not of type 'number'"),
    ({"multiplier": True}, "backoff.multiplier: True is not of type 'number'"),
    ({"multiplier": float("inf")}, "backoff.multiplier: inf is not of type 'number'"),
    ({"multiplier": 0.5}, "backoff.multiplier: 0.5 is less than the minimum of 1"),
    ({"multiplier": 0}, "backoff.multiplier: 0 is less than the minimum of 1"),
    ({"jitter": None}, "backoff.jitter: None is not of type 'number'"),
    ({"jitter": float("nan")}, "backoff.jitter: nan is not of type 'number'"),
    ({"jitter": -0.1}, "backoff.jitter: -0.1 is less than the minimum of 0"),
    ({"jitter": 1.0}, "backoff.jitter: 1 is greater than or equal to the maximum of 1"),
])
def test_a_wrong_backoff_field_is_named_with_its_path(changes: dict[str, Any], problem: str) -> None:
    assert _levels_problems(levels_backoff(**changes)) == problem


@pytest.mark.parametrize("changes", [{"multiplier": 1}, {"jitter": 0}, {"jitter": 0.99}, {"initial_ms": 0}])
def test_the_backoff_bounds_themselves_are_accepted(changes: dict[str, Any]) -> None:
    assert load_contract(levels_backoff(**changes))["backoff"] == levels_backoff(**changes)["backoff"]


def test_the_levels_may_fill_every_word() -> None:
    every = [f"rabbitmq-retry.delay.{k}" for k in range(28)]
    assert load_contract(levels_contract(delay_levels=28, delay_exchange=every[-1],
                                         delay_exchanges=every))["delay_levels"] == 28


def test_every_levels_problem_is_reported_at_once() -> None:
    source = levels_contract(delay_unit_ms=0, delay_levels=40, backoff={"multiplier": 0.5, "jitter": 2})
    del source["delay_exchange"]
    assert _levels_problems(source) == (
        "delay_exchange: missing (a string); backoff.initial_ms: missing (an integer); backoff.max_ms: missing "
        "(an integer); backoff.jitter: 2 is greater than or equal to the maximum of 1; backoff.multiplier: 0.5 is "
        "less than the minimum of 1; delay_unit_ms: 0 is less than the minimum of 1; delay_levels: 40 is more than "
        "delay_words (28)")


# --- strategy levels: routing key and back-off ------------------------------------------------------

def _key(units: int, words: int = 28, queue: str = "orders.billing") -> str:
    """An independent spelling of the expected key: `units` in `words` binary words, then the queue."""
    return "".join(f"{(units >> bit) & 1}." for bit in reversed(range(words))) + queue


def test_the_key_of_levels_md_for_five_seconds_in_units_of_one_second() -> None:
    assert delay_routing_key(levels_contract(), 5000) == (
        "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.orders.billing")


@pytest.mark.parametrize(("delay_ms", "units"), [
    (0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (1200, 2), (1200.0, 2), (2000, 2), (5000, 5), (5000.5, 6),
])
def test_a_delay_is_rounded_up_to_whole_units(delay_ms: float, units: int) -> None:
    assert delay_units(levels_contract(), delay_ms) == units
    assert delay_routing_key(levels_contract(), delay_ms) == _key(units)


def test_no_delay_is_all_zero_words_and_one_unit_is_the_last_word() -> None:
    assert delay_routing_key(levels_contract(), 0) == "0." * 28 + "orders.billing"
    assert delay_routing_key(levels_contract(), 1000) == "0." * 27 + "1.orders.billing"


def test_a_delay_past_the_top_level_is_capped_at_every_level_set() -> None:
    top = 2 ** 17 - 1  # 17 levels of 1 s: 36 h 24 min 31 s
    assert delay_units(levels_contract(), top * 1000) == top
    assert delay_units(levels_contract(), top * 1000 + 1) == top
    assert delay_routing_key(levels_contract(), 10 ** 12) == "0." * 11 + "1." * 17 + "orders.billing"
    assert delay_routing_key(levels_contract(delay_levels=3, delay_unit_ms=250), 60_000) == _key(7)


def test_the_key_always_has_delay_words_bit_words_whatever_the_levels() -> None:
    for levels in (1, 5, 17, 28):
        key = delay_routing_key(levels_contract(delay_levels=levels, queue="q"), 3000)
        assert key.split(".")[:-1] == list(format(min(3, 2 ** levels - 1), "028b"))
    assert delay_routing_key(levels_contract(delay_words=4, delay_levels=4, queue="a.b"), 9000) == "1.0.0.1.a.b"


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^a delay cannot be negative, got -1 ms$"):
        delay_routing_key(levels_contract(), -1)


def _never(low: float, high: float) -> float:
    raise AssertionError("no jitter, no random draw")


def test_without_jitter_the_backoff_multiplies_from_initial_up_to_max() -> None:
    contract = levels_backoff(initial_ms=1000, multiplier=2, max_ms=10000, jitter=0)
    assert [retry_delay_ms(contract, n, random=_never) for n in range(1, 8)] == [
        1000, 2000, 4000, 8000, 10000, 10000, 10000]
    slow = levels_backoff(initial_ms=300, multiplier=1.5, max_ms=1000, jitter=0)
    assert [retry_delay_ms(slow, n, random=_never) for n in range(1, 5)] == [300, 450, 675, 1000]
    flat = levels_backoff(initial_ms=700, multiplier=1, max_ms=5000, jitter=0)
    assert {retry_delay_ms(flat, n, random=_never) for n in range(1, 20)} == {700}


def test_jitter_draws_a_factor_around_one_and_rounds_up() -> None:
    contract = levels_backoff(initial_ms=1000, multiplier=2, max_ms=10000, jitter=0.2)
    draws: list[tuple[float, float]] = []

    def low(a: float, b: float) -> float:
        draws.append((a, b))
        return a

    assert [retry_delay_ms(contract, n, random=low) for n in (1, 2, 5)] == [800, 1600, 8000]
    assert draws == [(0.8, 1.2)] * 3
    # Never above max_ms: at the cap the jitter only shortens a delay.
    assert [retry_delay_ms(contract, n, random=lambda a, b: b) for n in (1, 2, 4, 5)] == [1200, 2400, 9600, 10000]
    assert retry_delay_ms(contract, 1, random=lambda a, b: 0.9001) == 901  # 900.1 ms: never earlier


def test_jittered_delays_stay_within_their_bounds() -> None:
    import random

    contract = levels_backoff(initial_ms=1000, multiplier=3, max_ms=60000, jitter=0.25)
    rng = random.Random(11)
    for attempt in range(1, 9):
        base = min(60000, 1000 * 3 ** (attempt - 1))
        delays = {retry_delay_ms(contract, attempt, random=rng.uniform) for _ in range(200)}
        assert min(delays) >= base * 0.75 and max(delays) <= min(60000, math.ceil(base * 1.25))
        assert len(delays) > 20, "the factor is drawn, not fixed"


def test_a_huge_attempt_is_the_maximum_and_attempt_zero_is_refused() -> None:
    contract = levels_backoff(initial_ms=1000, multiplier=10.5, max_ms=60000, jitter=0)
    assert retry_delay_ms(contract, 5000) == 60000
    with pytest.raises(ValueError, match=r"^attempt must be 1 or more, got 0$"):
        retry_delay_ms(contract, 0)


# --- strategy levels: the consumer ----------------------------------------------------------------

class RecordingChannel:
    """One of a consumer's channels, recording every call in order (publish, ack, nack, reject) in `calls`, which
    the consuming and the confirm channel of a test share (pass the other's). As the confirm channel it plays
    the broker the way pika delivers its answers: to the callbacks the consumer registered on `_impl`
    (confirm_delivery, add_on_return_callback, add_on_close_callback), with a frame per basic.ack or basic.nack.
    `outcome` answers each publish at once ("ack", "nack", "return": a basic.return then its ack, "close": the
    broker closes the channel with a 404); None leaves the answers to the test (`confirm`, `refuse`,
    `give_back`, `close_by_broker`), and `on_flush` runs while the consumer waits for them."""

    def __init__(self, outcome: str | None = "ack", calls: list[tuple[Any, ...]] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = [] if calls is None else calls
        self.outcome = outcome
        self.is_open = True
        self.published: list[tuple[str, str, bytes, BasicProperties]] = []
        """Publish sequence number n is published[n - 1]."""
        self.on_flush: Callable[[], None] | None = None
        self.deliveries: list[tuple[Any, BasicProperties, bytes]] = []
        """What `consume` yields, as the consuming channel; then nothing (None) until the consumer stops."""
        self._impl = self
        self._ack_nack: Callable[[Any], None] | None = None
        self._returns: list[Callable[..., None]] = []
        self._closes: list[Callable[..., None]] = []

    # pika's Channel, as `_impl`
    def confirm_delivery(self, ack_nack_callback: Callable[[Any], None],
                         callback: Callable[[Any], None] | None = None) -> None:
        self._ack_nack = ack_nack_callback
        if callback is not None:
            callback(pika.frame.Method(1, pika.spec.Confirm.SelectOk()))

    def add_on_return_callback(self, callback: Callable[..., None]) -> None:
        self._returns.append(callback)

    def add_on_close_callback(self, callback: Callable[..., None]) -> None:
        self._closes.append(callback)

    def reopen(self) -> None:
        """A new channel: open, no callbacks, publish numbers from 1 again."""
        self.is_open, self.published, self._ack_nack, self._returns, self._closes = True, [], None, [], []

    # pika's BlockingChannel
    def consume(self, queue: str, inactivity_timeout: float | None = None) -> Iterator[tuple[Any, Any, Any]]:
        while self.deliveries:
            yield self.deliveries.pop(0)
        while True:
            yield None, None, None

    def cancel(self) -> None:
        self.calls.append(("cancel",))

    def basic_qos(self, prefetch_count: int) -> None:
        pass

    def _flush_output(self, *waiters: Callable[[], bool]) -> None:
        if self.on_flush is not None:
            self.on_flush()

    def basic_publish(self, exchange: str, routing_key: str, body: bytes, properties: BasicProperties,
                      mandatory: bool = False) -> None:
        if not self.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.calls.append(("publish", exchange, routing_key, body, properties.headers, mandatory))
        self.published.append((exchange, routing_key, body, properties))
        number = len(self.published)
        if self.outcome == "ack":
            self.confirm(number)
        elif self.outcome == "nack":
            self.refuse(number)
        elif self.outcome == "return":
            self.give_back(number)
            self.confirm(number)
        elif self.outcome == "close":
            self.close_by_broker(404, f"NOT_FOUND - no exchange '{exchange}' in vhost 'shop'")

    def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self.calls.append(("ack", delivery_tag, "multiple") if multiple else ("ack", delivery_tag))

    def basic_nack(self, delivery_tag: int, requeue: bool) -> None:
        self.calls.append(("nack", delivery_tag, requeue))

    def basic_reject(self, delivery_tag: int, requeue: bool) -> None:
        self.calls.append(("reject", delivery_tag, requeue))

    # the broker's answers
    def confirm(self, number: int, multiple: bool = False) -> None:
        assert self._ack_nack is not None, "confirms were never enabled"
        self._ack_nack(pika.frame.Method(1, pika.spec.Basic.Ack(delivery_tag=number, multiple=multiple)))

    def refuse(self, number: int, multiple: bool = False) -> None:
        assert self._ack_nack is not None, "confirms were never enabled"
        self._ack_nack(pika.frame.Method(1, pika.spec.Basic.Nack(delivery_tag=number, multiple=multiple)))

    def give_back(self, number: int) -> None:
        """A basic.return of publish `number` (no queue bound for its key): it names the message, not the number."""
        exchange, routing_key, body, properties = self.published[number - 1]
        returned = pika.spec.Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange=exchange,
                                          routing_key=routing_key)
        wire = BasicProperties(message_id=properties.message_id, headers=copy.deepcopy(properties.headers))
        for callback in self._returns:
            callback(self, returned, wire, body)

    def close_by_broker(self, code: int, text: str) -> None:
        self.is_open = False
        for callback in self._closes:
            callback(self, pika.exceptions.ChannelClosedByBroker(code, text))


class FakeIoloop:
    """pika's I/O loop, as `_impl.ioloop`: a timer of `call_later(0, …)` runs once the loop has dispatched what it
    read, here at the connection's next `process_data_events` or when a test calls `run_timers`."""

    def __init__(self) -> None:
        self.timers: list[Callable[[], None]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self.timers.append(callback)

    def run_timers(self) -> None:
        due, self.timers = self.timers, []
        for callback in due:
            callback()


class FakeConnection:
    """The consumer's connection around a RecordingChannel: every channel it opens is that channel (a closed
    one is opened again); pauses and I/O are recorded or run the channel's `on_flush`, then the I/O loop's timers."""

    def __init__(self, channel: RecordingChannel) -> None:
        self.channel_ = channel
        self.is_open = True
        self.slept: list[float] = []
        self.ioloop = FakeIoloop()
        self._impl = self

    def channel(self) -> RecordingChannel:
        self.channel_.reopen()
        return self.channel_

    def process_data_events(self, time_limit: float | None = 0) -> None:
        if self.channel_.on_flush is not None:
            self.channel_.on_flush()
        self.ioloop.run_timers()

    def sleep(self, duration: float) -> None:
        self.slept.append(duration)

    def call_later(self, delay: float, callback: Callable[[], None]) -> int:
        return 1

    def remove_timeout(self, timeout_id: int) -> None:
        pass


def _consumer(contract: dict[str, Any], handler: Any, channel: RecordingChannel, mode: str = "reject",
              prefetch: int = 10) -> RetryingConsumer:
    """A consumer whose connection is a FakeConnection around the confirm channel `channel` (no pause after a
    refused copy)."""
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract, handler, mode,  # type: ignore[arg-type]
                                prefetch, publish_failure_pause=0)
    consumer._connection = FakeConnection(channel)  # type: ignore[assignment]
    return consumer


def _method(tag: int = 7) -> pika.spec.Basic.Deliver:
    return pika.spec.Basic.Deliver(delivery_tag=tag, exchange="billing", routing_key="order.created")


def _deliver(contract: dict[str, Any], handler: Any, headers: dict[str, Any] | None = None, mode: str = "reject",
             channel: RecordingChannel | None = None) -> tuple[RetryingConsumer, list[tuple[Any, ...]]]:
    """One delivery of message m-1 (first published to `billing` with key `order.created` unless its headers
    say otherwise) through the consumer's handling, on recording channels instead of a broker: `channel`
    confirms the copies (by default at once), a second one consumes; both record in one list."""
    channel = channel or RecordingChannel()
    consumer = _consumer(contract, handler, channel, mode)
    consuming = RecordingChannel(calls=channel.calls)
    delivery = (_method(), BasicProperties(message_id="m-1", headers=headers), b"body")
    consumer._handle_buffered(consuming, delivery, 1)  # type: ignore[arg-type]
    return consumer, channel.calls


def _fails(body: bytes, properties: BasicProperties) -> None:
    raise RuntimeError("boom")


STEADY = levels_backoff(initial_ms=1000, multiplier=2, max_ms=3600000, jitter=0)
"""A levels contract without jitter: retry n waits exactly 2^(n-1) s."""


def test_the_retry_route_of_a_levels_queue_is_the_level_of_the_delay_s_highest_bit_with_the_backoffs_key() -> None:
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", STEADY, _fails)
    assert [consumer.policy.retry_route(n) for n in (1, 3)] == [
        ("rabbitmq-retry.delay.0", _key(1), 1000), ("rabbitmq-retry.delay.2", _key(4), 4000)]
    three = [f"rabbitmq-retry.delay.{k}" for k in range(3)]
    capped = RetryingConsumer("amqp://127.0.0.1:1/%2F", levels_contract(
        delay_levels=3, delay_exchange=three[-1], delay_exchanges=three), _fails)
    assert capped.policy.retry_route(8) == ("rabbitmq-retry.delay.2", _key(7), 7000)  # waits 7 s, not 128 s
    # A contract from before `delay_exchanges` names the top level only: every copy starts there.
    older = RetryingConsumer("amqp://127.0.0.1:1/%2F", {k: v for k, v in STEADY.items() if k != "delay_exchanges"},
                             _fails)
    assert [older.policy.retry_route(n) for n in (1, 3)] == [
        ("rabbitmq-retry.delay.16", _key(1), 1000), ("rabbitmq-retry.delay.16", _key(4), 4000)]
    tiers = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), _fails, "republish")
    assert [tiers.policy.retry_route(n) for n in (1, 2, 9)] == [
        ("orders.retry", "wait.1", 1000), ("orders.retry", "wait.2", 10000), ("orders.retry", "wait.2", 10000)]


@pytest.mark.parametrize(("strategy", "mode", "policy"), [
    ("tiers", "reject", RejectPolicy), ("tiers", "republish", RepublishPolicy),
    ("levels", "reject", RepublishPolicy), ("levels", "republish", RepublishPolicy),
    ("native", "reject", NativePolicy), ("native", "republish", NativePolicy),
])
def test_how_a_strategy_retries_follows_from_what_its_contract_schema_carries(strategy: str, mode: Mode,
                                                                               policy: type) -> None:
    """A `retry_call` means the broker retries; `reject_routes_to` lets a reject dead-letter to the first tier; levels,
    like native, ignores the mode."""
    source = {"levels": STEADY, "tiers": contract(),
              "native": {**contract(), "strategy": "native", "retry_call": "basic.reject(requeue=true)",
                         "min_delay_ms": 1000, "max_delay_ms": 5000}}[strategy]
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", source, _fails, mode)  # type: ignore[arg-type]
    assert type(consumer.policy) is policy


def test_the_client_follows_exactly_the_strategies_the_contract_schema_names() -> None:
    assert set(BEHAVIOURS) == set(SUPPORTED_STRATEGIES)
    with pytest.raises(ImportError, match=r"names strategies \['fourth', .*give each one a StrategyBehaviour"):
        check_covers((*SUPPORTED_STRATEGIES, "fourth"))


def test_a_strategy_the_broker_retries_has_no_retry_copy_to_route() -> None:
    native = {**contract(), "strategy": "native", "retry_call": "basic.reject(requeue=true)",
              "min_delay_ms": 1000, "max_delay_ms": 5000}
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", native, _fails)
    with pytest.raises(ValueError, match="strategy native publishes no retry copies"):
        consumer.policy.retry_route(1)


def test_without_a_mode_a_tiers_consumer_takes_the_contract_s_republish_or_reject_for_a_single_tier() -> None:
    """docs/contract.md, "Which mode": republish follows every tier; reject would wait tier 1's delay each time,
    which is the same only with one tier."""
    stepped = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), _fails)
    assert (stepped.mode, type(stepped.policy)) == ("republish", RepublishPolicy)
    single = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(tiers=contract()["tiers"][:1]), _fails)
    assert (single.mode, type(single.policy)) == ("reject", RejectPolicy)
    chosen = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), _fails, "reject")
    assert (chosen.mode, type(chosen.policy)) == ("reject", RejectPolicy)
    _, calls = _deliver(contract(), _fails, mode=None)  # type: ignore[arg-type]
    assert [c[0] for c in calls] == ["publish", "ack"] and calls[0][1:3] == ("orders.retry", "wait.1")


def test_a_first_failure_is_published_to_the_levels_confirmed_then_acked() -> None:
    consumer, calls = _deliver(STEADY, _fails, {"app": "shop", "x-delivery-count": 0})
    assert [c[0] for c in calls] == ["publish", "ack"] and calls[1] == ("ack", 7)
    _, exchange, key, body, headers, mandatory = calls[0]
    assert (exchange, key, body, mandatory) == ("rabbitmq-retry.delay.0", _key(1), b"body", True)
    assert {k: v for k, v in headers.items() if k != "first-failure-at"} == {
        "app": "shop", "original-exchange": "billing", "original-routing-key": "order.created", "retry-count": 1}
    assert headers["first-failure-at"].endswith("Z")
    assert (consumer.retried, consumer.parked) == (1, 0)


def test_a_later_failure_counts_its_own_header_and_keeps_the_recorded_origin() -> None:
    """Delivered from rabbitmq-retry.delay.deliver: x-death and the delivery itself are not the origin."""
    earlier = {"retry-count": 3, "original-exchange": "billing", "original-routing-key": "order.created",
               "first-failure-at": "2026-01-01T00:00:00.000Z",
               "x-death": [{"queue": "rabbitmq-retry.delay.2", "reason": "expired", "count": 1}]}
    _, calls = _deliver(levels_backoff(jitter=0), _fails, earlier)
    assert calls[0][1:3] == ("rabbitmq-retry.delay.3", _key(8))  # retry 4 waits 8 s: level 3 only
    assert calls[0][4] == {"retry-count": 4, "original-exchange": "billing", "original-routing-key": "order.created",
                           "first-failure-at": "2026-01-01T00:00:00.000Z"}
    assert calls[1] == ("ack", 7)


def test_past_max_retries_a_levels_message_is_parked_without_its_counter() -> None:
    earlier = {"retry-count": 8, "original-exchange": "billing", "original-routing-key": "order.created",
               "first-failure-at": "2026-01-01T00:00:00.000Z"}
    consumer, calls = _deliver(STEADY, _fails, earlier)
    assert [c[0] for c in calls] == ["publish", "ack"]
    _, exchange, key, _, headers, mandatory = calls[0]
    assert (exchange, key, mandatory) == ("orders.billing.error", "order.created", True)
    assert headers == {"original-exchange": "billing", "original-routing-key": "order.created",
                       "first-failure-at": "2026-01-01T00:00:00.000Z", "error-reason": "RuntimeError: boom",
                       "error-queue": "orders.billing", "attempts": 9}
    assert (consumer.retried, consumer.parked) == (0, 1)


def test_a_permanent_failure_of_a_levels_message_is_parked_at_once() -> None:
    def bad(body: bytes, properties: BasicProperties) -> None:
        raise PermanentError("not an order")

    consumer, calls = _deliver(STEADY, bad, {"retry-count": 2, "first-failure-at": "2026-01-01T00:00:00.000Z"})
    assert calls[0][1] == "orders.billing.error"
    assert {k: calls[0][4][k] for k in ("attempts", "permanent", "first-failure-at", "error-reason")} == {
        "attempts": 3, "permanent": True, "first-failure-at": "2026-01-01T00:00:00.000Z",
        "error-reason": "PermanentError: not an order"}
    assert "retry-count" not in calls[0][4] and calls[1] == ("ack", 7)
    assert (consumer.permanent, consumer.parked, consumer.retried) == (1, 1, 0)


@pytest.mark.parametrize("outcome", ["return", "nack", "close"])
def test_a_refused_retry_copy_requeues_the_original_instead_of_acking_it(outcome: str) -> None:
    """Unroutable (a basic.return, then the ack), nacked, or its channel closed (404): nack with requeue."""
    consumer, calls = _deliver(STEADY, _fails, channel=RecordingChannel(outcome))
    assert [c[0] for c in calls] == ["publish", "nack"] and calls[1] == ("nack", 7, True)
    assert (consumer.retried, consumer.requeued, consumer.in_flight()) == (0, 1, 0)


def test_a_success_is_acked_and_nothing_is_published() -> None:
    consumer, calls = _deliver(STEADY, lambda body, properties: None)
    assert calls == [("ack", 7)] and consumer.processed == 1


def test_tiers_republish_still_publishes_to_the_attempts_tier() -> None:
    _, calls = _deliver(contract(), _fails, {"retry-count": 1}, mode="republish")
    assert calls[0][1:3] == ("orders.retry", "wait.2") and calls[0][4]["retry-count"] == 2
    _, calls = _deliver(contract(), _fails, mode="reject")
    assert calls == [("reject", 7, False)]


# --- redrive: to the failing queue alone, every strategy -----------------------------------------------

def native_contract() -> dict[str, Any]:
    return {**contract(queue="orders.billing"), "strategy": "native", "retry_call": "basic.reject(requeue=true)",
            "min_delay_ms": 1000, "max_delay_ms": 5000}


def test_a_redrive_reaches_the_failing_queue_alone_by_default_whatever_the_strategy() -> None:
    message = parked(**{"original-exchange": "billing", "original-routing-key": "order.created"})
    levels_queue = ParkedQueue("amqp://127.0.0.1:1/%2F", levels_contract())
    # Level 0 with a zero delay: the delivery exchange routes it to exactly orders.billing.
    assert levels_queue.destination(message) == ("rabbitmq-retry.delay.0", "0." * 28 + "orders.billing")
    for source in (contract(queue="orders.billing"), native_contract()):
        assert ParkedQueue("amqp://127.0.0.1:1/%2F", source).destination(message) == \
            ("orders.billing.requeue", "order.created")
    for queue in (levels_queue, ParkedQueue("amqp://127.0.0.1:1/%2F", native_contract())):
        assert queue.reaches(*queue.destination(message), to_original=False) == "queue 'orders.billing' only"
        assert queue.destination(message, to_original=True) == ("billing", "order.created")
        assert queue.reaches("billing", "order.created", to_original=True) == (
            "every queue bound to exchange 'billing' for routing key 'order.created', not only 'orders.billing'")


def test_a_message_without_its_original_exchange_can_still_be_redriven_to_its_queue() -> None:
    queue = ParkedQueue("amqp://127.0.0.1:1/%2F", native_contract())
    message = parked()
    assert queue.destination(message) == ("orders.billing.requeue", "")
    with pytest.raises(ValueError, match="has no original-exchange header; redrive it without --to-original-exchange"):
        queue.destination(message, to_original=True)


def test_redrive_takes_either_route_but_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_status:
        main(["parked", "redrive", "--contract", "x.json", "--to-queue", "--to-original-exchange"])
    assert exit_status.value.code == 2
    assert "not allowed with argument --to-queue" in capsys.readouterr().err


# --- confirms in flight: several copies unanswered at once ---------------------------------------------

def _fail_each(consumer: RetryingConsumer, consuming: RecordingChannel, tags: list[int],
               headers: dict[str, Any] | None = None) -> None:
    """A failing delivery per tag (message m-<tag>, unless all share `headers`' message), handled in order."""
    for tag in tags:
        properties = BasicProperties(message_id="m-1" if headers else f"m-{tag}", headers=dict(headers or {}))
        consumer._handle_buffered(consuming, (_method(tag), properties, b"body"), 1)  # type: ignore[arg-type]


def _in_flight(outcome: str | None = None, prefetch: int = 10, contract: dict[str, Any] | None = None,
               mode: str = "republish") -> tuple[RetryingConsumer, RecordingChannel, RecordingChannel]:
    """A consumer whose confirm channel answers only when the test says so, and its consuming channel."""
    confirming = RecordingChannel(outcome)
    consumer = _consumer(contract or STEADY, _fails, confirming, mode, prefetch)
    return consumer, confirming, RecordingChannel(calls=confirming.calls)


def _settlements(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The acks and nacks in `calls` as the broker applies them, one per delivery: a multiple ack of tag T settles
    every delivery up to T not settled before (these tests deliver tags 1, 2, 3…)."""
    settled: list[tuple[Any, ...]] = []
    for call in calls:
        if call[:1] == ("ack",) and call[2:] == ("multiple",):
            done = {c[1] for c in settled}
            settled += [("ack", tag) for tag in range(1, call[1] + 1) if tag not in done]
        elif call[0] in ("ack", "nack"):
            settled.append(call)
    return settled


def test_copies_in_flight_are_not_waited_for_and_a_return_in_the_middle_requeues_only_its_original() -> None:
    consumer, broker, consuming = _in_flight()
    _fail_each(consumer, consuming, [1, 2, 3, 4])
    assert [c[0] for c in broker.calls] == ["publish"] * 4, "nothing settled before the broker answered"
    assert (consumer.in_flight(), consumer.retried) == (4, 0)
    broker.give_back(2)  # a basic.return names the message, not its number; then one ack covers 1 and 2
    broker.confirm(2, multiple=True)
    broker.confirm(4)  # out of order: 3 is still unanswered
    consumer._settle()
    assert _settlements(broker.calls) == [("ack", 1), ("nack", 2, True), ("ack", 4)]
    assert (consumer.retried, consumer.requeued, consumer.in_flight()) == (2, 1, 1)
    broker.confirm(3)
    consumer._settle()
    assert _settlements(broker.calls)[3:] == [("ack", 3)]
    assert (consumer.retried, consumer.requeued, consumer.in_flight()) == (3, 1, 0)


def test_a_nack_in_the_middle_requeues_only_its_original_and_a_multiple_nack_all_it_covers() -> None:
    consumer, broker, consuming = _in_flight()
    _fail_each(consumer, consuming, [1, 2, 3, 4, 5])
    broker.refuse(2)
    broker.confirm(3, multiple=True)  # 1 and 3; 2 was answered already
    broker.refuse(5, multiple=True)  # 4 and 5
    consumer._settle()
    assert _settlements(broker.calls) == [("nack", 2, True), ("ack", 1), ("ack", 3), ("nack", 4, True),
                                          ("nack", 5, True)]
    assert (consumer.retried, consumer.requeued, consumer.in_flight()) == (2, 3, 0)


def test_a_return_is_matched_to_its_copy_by_content_when_copies_share_the_message_id() -> None:
    """Attempts 3 and 4 of one message both go to tier 2's key: the returned copy is told apart by its headers."""
    consumer, broker, consuming = _in_flight(contract=contract())
    origin = {"original-exchange": "billing", "original-routing-key": "order.created",
              "first-failure-at": "2026-01-01T00:00:00.000Z"}
    _fail_each(consumer, consuming, [1], {**origin, "retry-count": 2})
    _fail_each(consumer, consuming, [2], {**origin, "retry-count": 3})
    assert [c[2] for c in broker.calls] == ["wait.2", "wait.2"]
    broker.give_back(2)
    broker.confirm(2, multiple=True)
    consumer._settle()
    assert _settlements(broker.calls) == [("ack", 1), ("nack", 2, True)]


def test_a_return_that_matches_no_copy_in_flight_requeues_every_original_in_flight() -> None:
    """Never acked on a guess: a duplicate at worst."""
    consumer, broker, consuming = _in_flight()
    _fail_each(consumer, consuming, [1, 2])
    broker.published[0] = ("elsewhere", "x", b"other", BasicProperties(message_id="m-9"))
    broker.give_back(1)
    broker.confirm(2, multiple=True)
    consumer._settle()
    assert _settlements(broker.calls) == [("nack", 1, True), ("nack", 2, True)]


def test_a_confirm_channel_closed_mid_flight_requeues_every_original_in_flight_and_pauses_once() -> None:
    consumer, broker, consuming = _in_flight()
    consumer.publish_failure_pause = 1.0
    _fail_each(consumer, consuming, [1, 2, 3])
    broker.confirm(1)
    broker.close_by_broker(404, "NOT_FOUND - no exchange 'rabbitmq-retry.delay.16' in vhost 'shop'")
    consumer._settle()
    assert _settlements(broker.calls) == [("ack", 1), ("nack", 2, True), ("nack", 3, True)]
    assert (consumer.retried, consumer.requeued, consumer.in_flight()) == (1, 2, 0)
    assert consumer._connection.slept == [1.0]  # type: ignore[union-attr]
    # The next copy goes out on a new confirm channel, numbered from 1 again; the consuming one never closed.
    _fail_each(consumer, consuming, [4])
    broker.confirm(1)
    consumer._settle()
    assert _settlements(broker.calls)[3:] == [("ack", 4)] and consumer.retried == 2


def test_the_copies_in_flight_are_bounded_by_the_prefetch_and_the_consumer_waits_for_confirms_at_the_bound() -> None:
    consumer, broker, consuming = _in_flight(prefetch=2)
    assert consumer.max_in_flight == 2
    seen: list[int] = []

    def broker_answers_the_oldest() -> None:
        seen.append(consumer.in_flight())
        answered = {c[1] for c in _settlements(broker.calls)}
        unanswered = [n for n in range(1, len(broker.published) + 1) if n not in answered]
        if unanswered:
            broker.confirm(unanswered[0])

    broker.on_flush = broker_answers_the_oldest
    _fail_each(consumer, consuming, [1])
    _fail_each(consumer, consuming, [2])
    # It waited at 2 in flight until 1 was confirmed and acked; the confirm of 2, which came in the I/O pass that
    # sent that ack, was settled within that pass (`_settle_in_io`), not left for a later delivery.
    assert [c[:2] for c in broker.calls][2:] == [("ack", 1), ("ack", 2)] and consumer.in_flight() == 0
    _fail_each(consumer, consuming, [3])
    assert [c[0] for c in broker.calls][4:] == ["publish"] and consumer.in_flight() == 1
    assert max(seen) == 2 and consumer.retried == 2


def test_confirms_that_arrive_while_the_consumer_waits_for_deliveries_are_settled_after_that_read() -> None:
    """A consumer whose prefetch is held by originals waiting for their copies' confirms receives no delivery until
    it acks them: the confirms of one read are settled right after the I/O loop dispatched it, with one multiple
    ack, not when a delivery next comes (none can)."""
    consumer, broker, consuming = _in_flight(prefetch=10)
    _fail_each(consumer, consuming, [1, 2, 3])
    loop = consumer._connection.ioloop  # type: ignore[union-attr]
    assert _settlements(broker.calls) == [] and loop.timers == []
    broker.confirm(2, multiple=True)
    broker.confirm(3)
    assert len(loop.timers) == 1, "one settling per read, however many answers it brought"
    assert _settlements(broker.calls) == [], "nothing settles inside the read itself"
    loop.run_timers()
    assert [c for c in broker.calls if c[0] == "ack"] == [("ack", 3, "multiple")] and consumer.in_flight() == 0
    assert consumer.retried == 3
    _fail_each(consumer, consuming, [4])
    broker.close_by_broker(404, "NOT_FOUND - no exchange 'rabbitmq-retry.delay.0' in vhost 'shop'")
    loop.run_timers()
    assert _settlements(broker.calls)[3:] == [("nack", 4, True)] and consumer.requeued == 1
    assert consumer._connection.slept == [], "no pause inside the I/O loop"  # type: ignore[union-attr]
    consumer.publish_failure_pause = 0.5
    consumer._settle()
    assert consumer._connection.slept == [0.5], "the pause owed is taken by the next settle"  # type: ignore[union-attr]


def test_a_new_connection_settles_its_confirms_after_each_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A settling due on a lost connection's I/O loop never runs: the new connection must not wait for it."""
    from rabbitmq_retry_client import consumer as module

    consumer, broker, consuming = _in_flight()
    consumer._connection.is_open = False  # type: ignore[union-attr]
    consumer._answer_scheduled = True
    monkeypatch.setattr(module, "connect", lambda params, timeout: FakeConnection(broker))
    consumer._connect()
    assert consumer._answer_scheduled is False
    _fail_each(consumer, consuming, [1])
    broker.confirm(1)
    consumer._connection.ioloop.run_timers()  # type: ignore[union-attr]
    assert _settlements(broker.calls) == [("ack", 1)]


@pytest.mark.parametrize("stop", ["max_messages", "idle_timeout", "until", "stop"])
def test_run_returns_only_after_every_copy_in_flight_is_settled(stop: str) -> None:
    """Then the consumer is cancelled: the acks come before it, so no original is left unsettled."""
    consumer, broker, consuming = _in_flight(prefetch=10)
    consumer._channel = consuming  # type: ignore[assignment]
    consuming.deliveries = [(_method(tag), BasicProperties(message_id=f"m-{tag}", headers={}), b"body")
                            for tag in (1, 2, 3)]
    answered: list[int] = []

    def broker_answers_one_by_one() -> None:
        if len(answered) < len(broker.published):
            answered.append(len(answered) + 1)
            broker.confirm(answered[-1])

    broker.on_flush = broker_answers_one_by_one
    handled = len(consuming.deliveries)
    if stop == "stop":
        def stops_at_the_third(body: bytes, properties: BasicProperties) -> None:
            if properties.message_id == "m-3":
                consumer.stop()
            raise RuntimeError("boom")

        consumer.handler = stops_at_the_third
    arguments = {"max_messages": {"max_messages": 3}, "idle_timeout": {"idle_timeout": 0.05},
                 "until": {"until": lambda: len([c for c in broker.calls if c[0] == "publish"]) >= 3},
                 "stop": {}}[stop]
    assert consumer.run(**arguments) == handled
    assert [c[0] for c in broker.calls] == ["publish"] * 3 + ["ack"] * 3 + ["cancel"]
    assert (consumer.retried, consumer.in_flight()) == (3, 0)


# --- strategy native: the consumer ----------------------------------------------------------------

NATIVE = contract(queue="orders.billing", strategy="native", retry_call="basic.reject(requeue=true)",
                  min_delay_ms=1000, max_delay_ms=5000, delivery_limit=5)
"""max_retries 5 = delivery_limit: 1 + 5 attempts, the broker parks only past them."""


def test_a_native_failure_with_retries_left_is_rejected_with_requeue_even_at_the_delivery_limit() -> None:
    """x-delivery-count 4 is attempt 5; x-delivery-count 5 (= delivery_limit) is attempt 6, the last one: it
    runs, it is not parked before the handler."""
    for deliveries in (None, 4):
        _, calls = _deliver(NATIVE, _fails, None if deliveries is None else {"x-delivery-count": deliveries})
        assert calls == [("reject", 7, True)]
    handled: list[int] = []
    _, calls = _deliver(NATIVE, lambda body, props: handled.append(1), {"x-delivery-count": 5})
    assert handled == [1] and calls == [("ack", 7)]


def test_a_native_message_out_of_retries_is_parked_with_last_failure_at_not_first_failure_at() -> None:
    """Nothing written at the first failure survives a native retry (the broker redelivers the message unchanged):
    the parking copy says when the last failure was, and says it under its own name."""
    consumer, calls = _deliver(NATIVE, _fails, {"app": "shop", "x-delivery-count": 5, "x-acquired-count": 6})
    assert [c[0] for c in calls] == ["publish", "ack"]
    _, exchange, key, _, headers, mandatory = calls[0]
    assert (exchange, key, mandatory) == ("orders.billing.error", "order.created", True)
    assert {k: v for k, v in headers.items() if k != "last-failure-at"} == {
        "app": "shop", "original-exchange": "billing", "original-routing-key": "order.created",
        "error-reason": "RuntimeError: boom", "error-queue": "orders.billing", "attempts": 6}
    assert headers["last-failure-at"].endswith("Z") and parse_utc(headers["last-failure-at"]) is not None
    assert (consumer.retried, consumer.parked) == (0, 1)


# --- the copies' headers against the contract's schema ---------------------------------------------

def _headers_schema(name: str) -> Draft202012Validator:
    return Draft202012Validator({**SCHEMA["$defs"][name], "$defs": SCHEMA["$defs"]})


@pytest.mark.parametrize("source", [contract(), STEADY, NATIVE], ids=["tiers", "levels", "native"])
def test_every_parking_copy_has_the_headers_the_schema_defines(source: dict[str, Any]) -> None:
    """Out of retries, and a permanent failure at once: contract.schema.json's `parking_headers` (first-failure-at
    for tiers and levels, last-failure-at for native) describe what the reference client writes."""
    def permanent(body: bytes, properties: BasicProperties) -> None:
        raise PermanentError("x" * 2000)

    counter = "x-delivery-count" if source is NATIVE else "retry-count"
    for handler, headers in ((_fails, {counter: source["max_retries"]}), (permanent, None)):
        _, calls = _deliver(source, handler, headers, mode="republish")
        assert calls[0][1] == source["error_exchange"]
        parked_headers = calls[0][4]
        assert list(_headers_schema("parking_headers").iter_errors(parked_headers)) == [], parked_headers
        assert len(parked_headers["error-reason"].encode()) <= MAX_REASON_BYTES


@pytest.mark.parametrize("source", [contract(), STEADY], ids=["tiers", "levels"])
def test_every_retry_copy_has_the_headers_the_schema_defines(source: dict[str, Any]) -> None:
    _, calls = _deliver(source, _fails, {"retry-count": 1, "first-failure-at": "2026-01-01T00:00:00.000Z"},
                        mode="republish")
    assert list(_headers_schema("retry_headers").iter_errors(calls[0][4])) == [], calls[0][4]


def test_publish_says_which_exchange_and_key_reached_no_queue(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """An unroutable test message is one line naming the vhost, exchange and routing key, not pika's exception."""
    class NoQueueBound:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __enter__(self) -> NoQueueBound:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def publish(self, *args: Any, **kwargs: Any) -> None:
            raise pika.exceptions.UnroutableError([])

    monkeypatch.setattr("rabbitmq_retry_client.cli.Publisher", NoQueueBound)
    status = main(["publish", "--exchange", "orders", "--routing-key", "order.created", "--count", "3",
                   "--url", "amqp://guest:guest@127.0.0.1:5672/shop"])
    assert status == 1
    assert capsys.readouterr().err.strip() == (
        "error: message 1 of 3 came back unroutable: no queue of vhost 'shop' is bound to exchange 'orders' for "
        "routing key 'order.created', and nothing more was published; check --exchange, --routing-key and --vhost")


def test_the_default_prefetch_is_250_in_the_consumer_and_the_command_and_bounds_the_copies_in_flight() -> None:
    # 250: Spring AMQP's default, inside RabbitMQ's 100-300 range for throughput (bench/README.md measures 10 against
    # it); a consumer that wants fairer sharing behind a slow handler sets a smaller one.
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), lambda body, properties: None)
    assert consumer.prefetch == DEFAULT_PREFETCH == 250 and consumer.max_in_flight == 250
    arguments = ["consume", "--contract", "c.json", "--queue", "orders"]
    assert parser().parse_args(arguments).prefetch == 250
    assert parser().parse_args([*arguments, "--prefetch", "10"]).prefetch == 10


def test_the_client_refuses_whatever_the_shipped_schema_refuses_minimums_and_nested_values_included() -> None:
    """A consumer in another language validates against contract.schema.json: the client accepts no more than that."""
    with pytest.raises(ContractError) as error:
        load_contract({**native_contract(), "max_retries": 0, "max_delay_ms": -5})
    assert str(error.value) == ("invalid retry contract for 'orders.billing': max_delay_ms: -5 is less than the "
                                "minimum of 1; max_retries: 0 is less than the minimum of 1")
    tiers = contract()
    tiers["tiers"] = [{**tiers["tiers"][0], "delay_ms": -1}, *tiers["tiers"][1:]]
    with pytest.raises(ContractError, match=r"tiers\[0\]\.delay_ms: -1 is less than the minimum of 0"):
        load_contract(tiers)


class _Buffer:
    """pika 1.x's buffer of deliveries already received for a BlockingChannel's consumer (`pending_events`)."""

    def __init__(self, *tags: int) -> None:
        from collections import deque
        from types import SimpleNamespace

        self.pending_events = deque(SimpleNamespace(method=_method(tag), body=f"m-{tag}".encode(),
                                                    properties=BasicProperties(message_id=f"m-{tag}"))
                                    for tag in tags)


def _buffered_channel(calls: list[tuple[Any, ...]], *tags: int) -> RecordingChannel:
    consuming = RecordingChannel(calls=calls)
    consuming._queue_consumer_generator = _Buffer(*tags)  # type: ignore[attr-defined]
    return consuming


def test_deliveries_already_received_run_back_to_back_in_the_worker_and_are_settled_in_order() -> None:
    seen: list[str] = []

    def handler(body: bytes, properties: BasicProperties) -> None:
        seen.append(str(properties.message_id))
        if properties.message_id == "m-3":
            raise RuntimeError("boom")

    channel = RecordingChannel()
    consumer = _consumer(contract(), handler, channel)
    consuming = _buffered_channel(channel.calls, 3, 4, 5)
    first = (_method(2), BasicProperties(message_id="m-2"), b"m-2")
    assert consumer._handle_buffered(consuming, first, None) == 4  # type: ignore[arg-type]
    assert seen == ["m-2", "m-3", "m-4", "m-5"]
    assert channel.calls == [("ack", 2), ("reject", 3, False), ("ack", 4), ("ack", 5)]
    assert (consumer.processed, consumer.retried) == (3, 1)
    assert not consuming._queue_consumer_generator.pending_events  # type: ignore[attr-defined]

    # `room` (what max_messages leaves) and stop() bound a batch: the rest stays for the consume loop.
    consuming = _buffered_channel(channel.calls, 7, 8, 9)
    assert consumer._handle_buffered(consuming, first, 2) == 2  # type: ignore[arg-type]
    assert [e.method.delivery_tag for e in consuming._queue_consumer_generator.pending_events] == [8, 9]  # type: ignore[attr-defined]
    consumer.stop()  # stopping: not even the delivery in hand is started; it goes back to the queue
    assert consumer._handle_buffered(consuming, first, None) == 0  # type: ignore[arg-type]
    assert channel.calls[-1] == ("nack", 2, True)
    assert len(consuming._queue_consumer_generator.pending_events) == 2  # type: ignore[attr-defined]


def test_a_batch_left_on_an_error_retires_its_worker_so_no_outcome_is_taken_for_another_delivery() -> None:
    release = threading.Event()
    seen: list[str] = []

    def handler(body: bytes, properties: BasicProperties) -> None:
        release.wait(5)
        seen.append(str(properties.message_id))
        if properties.message_id == "m-2":
            raise RuntimeError("boom")

    channel = RecordingChannel()
    consumer = _consumer(contract(), handler, channel)
    consuming = _buffered_channel(channel.calls, 3, 4)

    def broken(delivery_tag: int, requeue: bool) -> None:
        raise pika.exceptions.ChannelWrongStateError("Channel is closed.")

    # The first delivery's reject fails while the outcomes of 3 and 4 are owed (acks wait for the batch's end).
    consuming.basic_reject = broken  # type: ignore[method-assign]
    release.set()
    first = (_method(2), BasicProperties(message_id="m-2"), b"m-2")
    with pytest.raises(pika.exceptions.ChannelWrongStateError):
        consumer._handle_buffered(consuming, first, None)  # type: ignore[arg-type]
    assert consumer._worker is None, "the next delivery gets a new worker"
    ninth = (_method(9), BasicProperties(message_id="m-9"), b"m-9")
    consumer._handle_buffered(RecordingChannel(calls=channel.calls), ninth, 1)  # type: ignore[arg-type]
    assert channel.calls[-1] == ("ack", 9) and consumer.processed == 1


def test_with_a_handler_timeout_each_delivery_is_handed_over_and_timed_alone() -> None:
    channel = RecordingChannel()
    consumer = RetryingConsumer("amqp://127.0.0.1:1/%2F", contract(), lambda body, properties: None, "reject", 10,
                                publish_failure_pause=0, handler_timeout=5.0)
    consumer._connection = FakeConnection(channel)  # type: ignore[assignment]
    consuming = _buffered_channel(channel.calls, 3, 4)
    first = (_method(2), BasicProperties(message_id="m-2"), b"m-2")
    assert consumer._handle_buffered(consuming, first, None) == 1  # type: ignore[arg-type]
    assert channel.calls == [("ack", 2)]
    assert len(consuming._queue_consumer_generator.pending_events) == 2  # type: ignore[attr-defined]


def test_a_stop_during_a_batch_finishes_the_handler_running_and_requeues_the_deliveries_not_started() -> None:
    seen: list[str] = []
    channel = RecordingChannel()

    def handler(body: bytes, properties: BasicProperties) -> None:
        seen.append(str(properties.message_id))
        consumer.stop()  # as from another thread or a signal, while this handler runs

    consumer = _consumer(contract(), handler, channel)
    consuming = _buffered_channel(channel.calls, 3, 4)
    first = (_method(2), BasicProperties(message_id="m-2"), b"m-2")
    assert consumer._handle_buffered(consuming, first, None) == 1  # type: ignore[arg-type]
    assert seen == ["m-2"]
    assert channel.calls == [("ack", 2), ("nack", 3, True), ("nack", 4, True)]
    assert consumer.processed == 1


def test_confirmed_originals_are_acked_together_only_from_the_oldest_unsettled_delivery() -> None:
    channel = RecordingChannel()
    settlements = Settlements(channel)
    for tag in range(1, 7):
        settlements.delivered(tag)
    settlements.settled(2)  # a success, acked alone when it was handled
    for tag in (1, 3, 5):
        settlements.ack_later(tag)
    # 1 and 3 are every unsettled delivery up to 3; 4 is not confirmed, so 5 cannot be covered by a multiple ack.
    assert settlements.flush() == [(3, True), (5, False)]
    assert settlements.flush() == [], "what was flushed is not asked for again"
    settlements.ack_later(6)
    assert settlements.flush() == [(6, False)], "4 is still unsettled before 6"
    settlements.ack_later(4)
    assert settlements.flush() == [(4, False)]


def test_a_delivery_tag_out_of_sequence_turns_the_multiple_ack_off_for_the_channel() -> None:
    channel = RecordingChannel()
    settlements = Settlements(channel)
    for tag in (1, 2, 4, 5):  # 3 was taken some other way: a multiple ack could settle it unseen
        settlements.delivered(tag)
    for tag in (1, 2, 4, 5):
        settlements.ack_later(tag)
    assert settlements.flush() == [(1, False), (2, False), (4, False), (5, False)]


def test_a_run_of_confirmed_copies_acks_its_originals_with_one_multiple_ack() -> None:
    consumer, broker, consuming = _in_flight()
    _fail_each(consumer, consuming, [1, 2, 3, 4])
    broker.confirm(4, multiple=True)
    consumer._settle()
    assert [c for c in broker.calls if c[0] in ("ack", "nack")] == [("ack", 4, "multiple")]
    assert (consumer.retried, consumer.in_flight()) == (4, 0)


def test_the_successes_of_a_batch_are_acked_together_and_a_reject_keeps_its_place_among_them() -> None:
    def handler(body: bytes, properties: BasicProperties) -> None:
        if properties.message_id == "m-3":
            raise RuntimeError("boom")

    channel = RecordingChannel()
    consumer = _consumer(contract(), handler, channel)
    consuming = _buffered_channel(channel.calls, 2, 3, 4, 5)
    first = (_method(1), BasicProperties(message_id="m-1"), b"m-1")
    assert consumer._handle_buffered(consuming, first, None) == 5  # type: ignore[arg-type]
    # 1 and 2 leave before the reject of 3; 4 and 5 as one multiple ack once the batch is handled.
    assert channel.calls == [("ack", 2, "multiple"), ("reject", 3, False), ("ack", 5, "multiple")]
    assert (consumer.processed, consumer.retried) == (4, 1)
