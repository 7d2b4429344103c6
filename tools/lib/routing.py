"""Where RabbitMQ routes a message in a vhost snapshot: a small, pure model of its exchanges.

`make adopt` follows a dead-lettered message with it, exactly, to recognise a retry loop (tools/lib/recognise.py)
and to know which objects each loop's route uses. Modelled: the default exchange (a queue by its name), direct,
fanout, topic (`*` one word, `#` zero or more) and headers exchanges (`x-match` all, any, all-with-x, any-with-x),
exchange-to-exchange bindings, and the `CC`/`BCC` headers a publisher may set (more routing keys). Not followed:
an alternate exchange (where a message that no binding routes goes instead: such a route reaches no queue here, so
it is never taken for a loop); a plugin's exchange type routes partly, so a route through one is never exact.

A routing key may be a topic pattern standing for every key it matches (what a queue bound with `orders.#` may
receive); a destination is then reached for *every* such key (`Route.queues`) or for *some* only
(`Route.partly`), and a route with any partial destination is ambiguous. Headers unknown to the caller (None)
make a headers binding partial unless it matches whatever the headers are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from tools.lib.snapshot import Snapshot

DEFAULT = ""
"""The default exchange: every queue is bound to it by its name."""


@dataclass(frozen=True)
class Message:
    """What routing looks at: the routing key(s) and the headers (None: not known)."""

    routing_keys: tuple[str, ...]
    headers: Mapping[str, Any] | None = None

    @classmethod
    def published(cls, routing_key: str, headers: Mapping[str, Any] | None = None) -> Message:
        """As a publisher sends it: its key plus the keys of its `CC` and `BCC` headers."""
        extra = [k for name in ("CC", "BCC") for k in ((headers or {}).get(name) or ()) if isinstance(k, str)]
        return cls((routing_key, *extra), headers)

    def dead_lettered(self, routing_key: str | None) -> Message:
        """After dead-lettering: the queue's dead-letter routing key when it sets one (CC/BCC dropped), else the
        message's own keys."""
        return self if routing_key is None else Message((routing_key,), self.headers)


@dataclass(frozen=True)
class Route:
    """The queues a message reaches: for every key the message's keys stand for, or only for some (ambiguous);
    and every exchange and binding (indexes into `Snapshot.bindings`) on the way."""

    queues: frozenset[str] = frozenset()
    partly: frozenset[str] = frozenset()
    exchanges: frozenset[str] = frozenset()
    bindings: frozenset[int] = frozenset()

    @property
    def ambiguous(self) -> bool:
        return bool(self.partly)


@cache
def _words(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("."))


def topic_covers(binding: str, key: str) -> bool:
    """Whether every key that `key` stands for matches the topic binding key `binding` (conservative: False when
    unsure)."""
    return _covers(_words(binding), _words(key))


@cache
def _covers(p: tuple[str, ...], k: tuple[str, ...]) -> bool:
    if not p:
        return not k
    if p[0] == "#":
        return _covers(p[1:], k) or (bool(k) and _covers(p, k[1:]))
    if not k or k[0] == "#":
        return False
    if p[0] == "*" or p[0] == k[0]:
        return _covers(p[1:], k[1:])
    return False


def topic_overlaps(binding: str, key: str) -> bool:
    """Whether some key that `key` stands for matches the topic binding key `binding`."""
    return _overlaps(_words(binding), _words(key))


@cache
def _overlaps(p: tuple[str, ...], k: tuple[str, ...]) -> bool:
    if not p and not k:
        return True
    if p and p[0] == "#":
        return _overlaps(p[1:], k) or (bool(k) and _overlaps(p, k[1:]))
    if k and k[0] == "#":
        return _overlaps(p, k[1:]) or (bool(p) and _overlaps(p[1:], k))
    if not p or not k:
        return False
    if p[0] == "*" or k[0] == "*" or p[0] == k[0]:
        return _overlaps(p[1:], k[1:])
    return False


def _literal(key: str) -> bool:
    return not {"*", "#"} & set(_words(key))


def _headers_match(arguments: Mapping[str, Any], headers: Mapping[str, Any] | None) -> bool | None:
    """A headers binding against the message's headers: True, False, or None when the headers are unknown and the
    binding does not match whatever they are."""
    mode = str(arguments.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    wanted = {k: v for k, v in arguments.items() if k != "x-match" and (with_x or not k.startswith("x-"))}
    if mode.startswith("all") and not wanted:
        return True
    if mode.startswith("any") and not wanted:
        return False
    if headers is None:
        return None

    hits = [name in headers and (value is None or headers[name] == value) for name, value in wanted.items()]
    return all(hits) if mode.startswith("all") else any(hits)


def _binding_matches(kind: str, binding: Mapping[str, Any], key: str, headers: Mapping[str, Any] | None) -> bool | None:
    """True: every key `key` stands for is routed by this binding; None: some are; False: none."""
    bound = str(binding.get("routing_key") or "")
    if kind == "fanout":
        return True
    if kind == "headers":
        return _headers_match(binding.get("arguments") or {}, headers)
    if kind == "topic":
        return True if topic_covers(bound, key) else None if topic_overlaps(bound, key) else False
    if kind == "direct":
        if _literal(key):
            return bound == key
        return None if topic_overlaps(key, bound) else False
    return None  # a plugin's exchange type (x-consistent-hash, x-delayed-message …): not modelled


def route(snapshot: Snapshot, exchange: str, message: Message) -> Route:
    """Where `message`, published to `exchange`, goes (an exchange that does not exist routes nowhere)."""
    queues: set[str] = set()
    partly: set[str] = set()
    exchanges: set[str] = set()
    used: set[int] = set()

    def walk(source: str, key: str, certain: bool, seen: frozenset[str]) -> None:
        if source == DEFAULT:
            if _literal(key):
                if key in snapshot.queues:
                    (queues if certain else partly).add(key)
            else:
                partly.update(q for q in snapshot.queues if topic_overlaps(key, q))
            return
        info = snapshot.exchanges.get(source)
        if info is None or source in seen:
            return
        exchanges.add(source)
        kind = str(info.get("type") or "direct")
        for i, b in enumerate(snapshot.bindings):
            if b.get("source") != source:
                continue
            match = _binding_matches(kind, b, key, message.headers)
            if match is False:
                continue
            used.add(i)
            sure = certain and match is True
            destination = str(b.get("destination"))
            if b.get("destination_type") == "exchange":
                walk(destination, key, sure, seen | {source})
            elif destination in snapshot.queues:
                (queues if sure else partly).add(destination)

    for key in message.routing_keys:
        walk(exchange, key, True, frozenset())
    return Route(frozenset(queues), frozenset(partly - queues), frozenset(exchanges), frozenset(used))


def arrival_keys(snapshot: Snapshot, queue: str) -> tuple[str, ...]:
    """The routing keys a message reaching `queue` may carry, as patterns: each binding's key (a topic or direct
    one), `#` through a fanout or headers binding or from another exchange, and its own name when it is bound from
    no exchange (its producers publish to it by name through the default exchange)."""
    keys: list[str] = []
    for b in snapshot.bindings:
        if b.get("destination") != queue or b.get("destination_type") != "queue":
            continue
        kind = str((snapshot.exchanges.get(str(b.get("source"))) or {}).get("type") or "")
        keys.append(str(b.get("routing_key") or "") if kind in ("direct", "topic") else "#")
    return tuple(dict.fromkeys(keys)) or (queue,)
