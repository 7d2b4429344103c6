"""The routing model `make adopt` follows dead-lettered messages with (tools/lib/routing.py): each exchange type as
RabbitMQ routes, exchange-to-exchange bindings, CC/BCC, and keys that stand for several (a binding's pattern)."""

from __future__ import annotations

from typing import Any

import pytest

from tools.lib.routing import Message, arrival_keys, route, topic_covers, topic_overlaps
from tools.lib.snapshot import Snapshot


def _snapshot(exchanges: dict[str, str], bindings: list[tuple[str, str, str]], queues: tuple[str, ...] = (),
              arguments: dict[int, dict[str, Any]] | None = None, to_exchange: tuple[int, ...] = ()) -> Snapshot:
    """Bindings (source, destination, key); `to_exchange`: indexes of exchange-to-exchange ones."""
    named = set(queues) | {d for i, (_, d, _) in enumerate(bindings) if i not in to_exchange}
    return Snapshot("v", "test", queues={q: {"name": q, "arguments": {}} for q in named},
                    exchanges={x: {"name": x, "type": t} for x, t in exchanges.items()},
                    bindings=[{"source": s, "destination": d, "routing_key": k,
                               "destination_type": "exchange" if i in to_exchange else "queue",
                               "arguments": (arguments or {}).get(i, {})} for i, (s, d, k) in enumerate(bindings)])


@pytest.mark.parametrize(("binding", "key", "covers", "overlaps"), [
    ("a.*.c", "a.b.c", True, True), ("a.#", "a", True, True), ("a.#", "a.b.c", True, True),
    ("#", "anything.at.all", True, True), ("a.*", "a.b.c", False, False), ("*.b", "a.b", True, True),
    ("a.#", "a.*", True, True), ("a.*", "a.#", False, True), ("#.x", "a.#", False, True), ("b.#", "a.#", False, False),
    ("my-app.mailer", "my-app.mailer-digest", False, False)])
def test_topic_keys_match_as_rabbitmq_matches_them(binding: str, key: str, covers: bool, overlaps: bool) -> None:
    assert (topic_covers(binding, key), topic_overlaps(binding, key)) == (covers, overlaps)


SHARED = _snapshot({"retry": "topic"}, [("retry", "mailer.retry", "mailer.send"),
                                        ("retry", "digest.retry", "mailer.digest")])


def test_a_topic_exchange_routes_each_key_to_its_own_queue_only() -> None:
    assert route(SHARED, "retry", Message(("mailer.send",))).queues == {"mailer.retry"}
    assert route(SHARED, "retry", Message(("mailer.digest",))).queues == {"digest.retry"}
    assert route(SHARED, "retry", Message(("mailer.*",))).partly == {"mailer.retry", "digest.retry"}


def test_direct_fanout_and_the_default_exchange() -> None:
    snapshot = _snapshot({"d": "direct", "f": "fanout"}, [("d", "q1", "k"), ("f", "q2", "ignored")], ("q3",))
    assert route(snapshot, "d", Message(("k",))).queues == {"q1"}
    assert route(snapshot, "d", Message(("other",))).queues == set()
    assert route(snapshot, "d", Message(("#",))).partly == {"q1"}
    assert route(snapshot, "f", Message(("whatever",))).queues == {"q2"}
    assert route(snapshot, "", Message(("q3",))).queues == {"q3"}
    assert route(snapshot, "missing", Message(("k",))) == route(snapshot, "", Message(("nothing",)))


def test_headers_exchanges_match_all_or_any_and_unknown_headers_are_partial() -> None:
    snapshot = _snapshot({"h": "headers"}, [("h", "all", ""), ("h", "any", ""), ("h", "everything", "")],
                         arguments={0: {"x-match": "all", "a": 1, "b": 2}, 1: {"x-match": "any", "a": 1, "b": 2},
                                    2: {"x-match": "all"}})
    assert route(snapshot, "h", Message(("",), {"a": 1, "b": 2})).queues == {"all", "any", "everything"}
    assert route(snapshot, "h", Message(("",), {"a": 1})).queues == {"any", "everything"}
    unknown = route(snapshot, "h", Message(("",)))
    assert (unknown.queues, unknown.partly) == ({"everything"}, {"all", "any"})


def test_exchange_to_exchange_bindings_are_followed_and_cycles_end() -> None:
    snapshot = _snapshot({"a": "topic", "b": "direct"}, [("a", "b", "x.#"), ("b", "q", "x.y"), ("b", "a", "x.y")],
                         to_exchange=(0, 2))
    followed = route(snapshot, "a", Message(("x.y",)))
    assert (followed.queues, followed.exchanges, followed.bindings) == ({"q"}, {"a", "b"}, {0, 1, 2})


def test_cc_and_bcc_add_keys_and_a_dead_letter_key_replaces_them() -> None:
    published = Message.published("mailer.send", {"CC": ["mailer.digest"], "BCC": ["audit"]})
    assert published.routing_keys == ("mailer.send", "mailer.digest", "audit")
    assert route(SHARED, "retry", published).queues == {"mailer.retry", "digest.retry"}
    assert route(SHARED, "retry", published.dead_lettered("mailer.send")).queues == {"mailer.retry"}
    assert published.dead_lettered(None) == published


def test_a_queue_s_messages_arrive_with_its_bindings_keys_or_its_name() -> None:
    snapshot = _snapshot({"t": "topic", "f": "fanout"}, [("t", "q", "a.#"), ("f", "p", "")], ("alone",))
    assert arrival_keys(snapshot, "q") == ("a.#",)
    assert arrival_keys(snapshot, "p") == ("#",)
    assert arrival_keys(snapshot, "alone") == ("alone",)
