"""Parked messages: what is in a retryable queue's error queue, and moving it back (or away); and the messages
stuck in a wait tier, moved on the same way (`StuckTiers`).

Every operation reads the error queue with `basic.get` and manual acks, at most as many messages as the
queue held when it began (so a redriven message that fails again and is parked anew is not read twice).
A message it acts on is settled one by one: a redrive publishes the copy with publisher confirms and
`mandatory`, and acks the parked original only after the broker confirmed the copy (at-least-once: a
crash in between leaves both, never neither). Every message it does not act on stays unacknowledged
until the end and is then returned with one `basic.nack(requeue=True, multiple=True)`: a classic queue
puts them back where they were; a quorum queue may put them back in another order (3.10 and 4.3 both
do). `nack` (not `reject`) does not count toward a quorum queue's `delivery-limit` on 4.3; on 3.10 a
quorum queue counts it, but error queues have no limit there.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.connection import Parameters
from pika.spec import BasicProperties

from . import headers as h
from .connection import ConnectionParams, connect, hosts, quiet_pika
from .contract import validate
from .management import TlsSettings
from .strategies import behaviour_of

LIMIT_REASON = "delivery_limit"
REQUEUE_SUFFIX = ".requeue"
"""`Q.requeue`, the fanout exchange bound only to `Q` (strategies `tiers` and `native`)."""


@dataclass(frozen=True)
class Parked:
    """One parked message as read from the error queue."""

    delivery_tag: int
    properties: BasicProperties
    body: bytes

    @property
    def headers(self) -> Mapping[str, Any]:
        return self.properties.headers or {}

    @property
    def _limit_death(self) -> Mapping[str, Any]:
        """The broker's `x-death` entry when it parked the message itself past the delivery limit (strategy
        native), which carries no parking headers; {} otherwise."""
        entries = self.headers.get("x-death") or []
        return next((e for e in entries if isinstance(e, Mapping) and h.text(e.get("reason")) == LIMIT_REASON), {})

    @property
    def reason(self) -> str:
        if h.ERROR_REASON not in self.headers and self._limit_death:
            return f"{LIMIT_REASON}: parked by the broker past the delivery limit"
        return h.text(self.headers.get(h.ERROR_REASON, ""))

    @property
    def original_exchange(self) -> str | None:
        value = self.headers.get(h.ORIGINAL_EXCHANGE, self._limit_death.get("exchange"))
        return None if value is None else h.text(value)

    @property
    def original_routing_key(self) -> str:
        keys = self._limit_death.get("routing-keys") or [""]
        return h.text(self.headers.get(h.ORIGINAL_ROUTING_KEY, keys[0]))

    @property
    def first_failure_at(self) -> datetime | None:
        """`first-failure-at`; for strategy `native`, which cannot record it, `last-failure-at` (docs/contract.md)."""
        return h.parse_utc(self.headers.get(h.FIRST_FAILURE_AT, self.headers.get(h.LAST_FAILURE_AT)))

    @property
    def redriven_count(self) -> int:
        return h.counter(self.headers.get(h.REDRIVEN_COUNT))


@dataclass(frozen=True)
class Selection:
    """Which parked messages an operation acts on; every given criterion must hold."""

    reason: re.Pattern[str] | None = None
    """Searched (not anchored) in `error-reason`."""
    older_than: timedelta | None = None
    """`first-failure-at` at least this long ago (a message without one is not selected)."""
    newer_than: timedelta | None = None
    """`first-failure-at` less than this long ago (a message without one is not selected)."""
    limit: int | None = None
    """At most this many messages."""

    @property
    def filtered(self) -> bool:
        return self.reason is not None or self.older_than is not None or self.newer_than is not None \
            or self.limit is not None

    def matches(self, message: Parked, now: datetime) -> bool:
        if self.reason is not None and not self.reason.search(message.reason):
            return False
        if self.older_than is not None or self.newer_than is not None:
            first = message.first_failure_at
            if first is None:
                return False
            if self.older_than is not None and now - first < self.older_than:
                return False
            if self.newer_than is not None and now - first >= self.newer_than:
                return False
        return True


@dataclass
class Group:
    """Parked messages with the same reason and original routing key."""

    reason: str
    routing_key: str
    count: int = 0
    oldest: datetime | None = None
    redriven: int = 0
    """Messages of the group that were redriven before (`redriven-count` > 0) and parked again."""


@dataclass
class Outcome:
    """What a redrive or purge did: `seen` messages read, `selected` matched, `moved`/`deleted` settled."""

    seen: int = 0
    selected: int = 0
    moved: int = 0
    deleted: int = 0
    redriven_before: int = 0
    """Selected messages that had been redriven before (`redriven-count` > 0)."""
    destinations: dict[tuple[str, str], int] = field(default_factory=dict)


class _Reader:
    """basic.get over an error queue, at most as many messages as it held at the start (the larger of a
    passive declare's count and the first get's), so a message parked meanwhile is not read."""

    def __init__(self, channel: BlockingChannel, queue: str) -> None:
        self.channel, self.queue = channel, queue
        self.total = int(channel.queue_declare(queue, passive=True).method.message_count)
        self.read = self.acked = 0
        self.left = 0
        """Messages behind the last one read, as the broker counted them then."""

    @property
    def held(self) -> int:
        return self.read - self.acked

    def __iter__(self) -> Iterator[Parked]:
        while self.read < self.total or self.read == 0:
            method, properties, body = self.channel.basic_get(self.queue, auto_ack=False)
            if method is None:
                self.left = 0
                return
            if self.read == 0:
                self.total = max(self.total, int(method.message_count) + 1)
            self.read, self.left = self.read + 1, int(method.message_count)
            yield Parked(method.delivery_tag, properties, body)

    def ack(self, message: Parked) -> None:
        self.channel.basic_ack(message.delivery_tag)
        self.acked += 1


class ParkedQueue:
    """The error queue of one contract, on a connection of its own (the contract's vhost)."""

    def __init__(self, connection_params: ConnectionParams, contract: Mapping[str, Any],
                 connect_timeout: float = 10.0, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 tls: TlsSettings | None = None) -> None:
        self.contract = validate(contract)
        self.queue: str = self.contract["error_queue"]
        self.input_queue: str = self.contract["queue"]
        self.requeue_exchange = self.input_queue + REQUEUE_SUFFIX
        self._params: list[Parameters] = hosts(connection_params, self.contract["vhost"], tls)
        self._connect_timeout = connect_timeout
        self._now = now
        self._connection: BlockingConnection | None = None

    def __enter__(self) -> Self:
        quiet_pika()
        self._connection = connect(self._params, self._connect_timeout)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._connection is not None and self._connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                self._connection.close()
        self._connection = None

    def _channel(self, confirms: bool = False) -> BlockingChannel:
        assert self._connection is not None, "use ParkedQueue as a context manager"
        channel = self._connection.channel()
        if confirms:
            channel.confirm_delivery()
        return channel

    def count(self) -> int:
        """Ready messages in the error queue (a passive declare)."""
        channel = self._channel()
        try:
            return int(channel.queue_declare(self.queue, passive=True).method.message_count)
        finally:
            with contextlib.suppress(pika.exceptions.AMQPError):
                channel.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[_Reader]:
        """The messages of the error queue, each held unacknowledged; whatever the caller did not ack is
        returned to the queue when the block ends (or the connection closes)."""
        reader = _Reader(self._channel(), self.queue)
        try:
            yield reader
        finally:
            if reader.channel.is_open:
                reader.channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
                self._settle(reader.channel, reader.held + reader.left)
                reader.channel.close()

    def _settle(self, channel: BlockingChannel, expected: int, timeout: float = 5.0) -> None:
        """Wait (up to `timeout`) until the queue counts the messages just returned: the broker requeues
        asynchronously, and the next command, often a moment later, must see them all."""
        deadline = time.monotonic() + timeout
        while int(channel.queue_declare(self.queue, passive=True).method.message_count) < expected:
            if time.monotonic() > deadline:
                return
            assert self._connection is not None
            self._connection.sleep(0.02)

    def selected(self, selection: Selection) -> Iterator[Parked]:
        """The selected messages, read-only: all of them go back when the iteration ends."""
        with self._reading() as reader:
            yield from self._choose(reader, selection, Outcome())

    def _choose(self, reader: _Reader, selection: Selection, outcome: Outcome) -> Iterator[Parked]:
        """The messages of `reader` that `selection` takes, counted in `outcome` (`seen`, `selected`); stops
        reading at the limit."""
        now = self._now()
        messages = iter(reader)
        while selection.limit is None or outcome.selected < selection.limit:
            message = next(messages, None)
            if message is None:
                return
            outcome.seen += 1
            if selection.matches(message, now):
                outcome.selected += 1
                yield message

    def summary(self, selection: Selection = Selection()) -> list[Group]:
        """Counts grouped by error reason and original routing key, most first, with the oldest
        `first-failure-at` of each group."""
        groups: dict[tuple[str, str], Group] = {}
        for message in self.selected(selection):
            group = groups.setdefault((message.reason, message.original_routing_key),
                                      Group(message.reason, message.original_routing_key))
            group.count += 1
            group.redriven += message.redriven_count > 0
            first = message.first_failure_at
            if first is not None and (group.oldest is None or first < group.oldest):
                group.oldest = first
        return sorted(groups.values(), key=lambda g: (-g.count, g.reason, g.routing_key))

    def queue_route(self) -> tuple[str, str | None]:
        """(exchange, routing key) that reaches the input queue `Q` and no other queue; a routing key of None
        keeps the message's original one (a fanout exchange ignores it): as the contract's strategy routes it
        (`strategies.StrategyBehaviour.queue_route`)."""
        return behaviour_of(self.contract).queue_route(self.contract, self.requeue_exchange)

    def reaches(self, exchange: str, routing_key: str, to_original: bool) -> str:
        """Which queues a copy published to `exchange` with `routing_key` reaches, in words."""
        if not to_original:
            return f"queue {self.input_queue!r} only"
        return (f"every queue bound to exchange {exchange!r} for routing key {routing_key!r}, "
                f"not only {self.input_queue!r}")

    def destination(self, message: Parked, to_original: bool = False) -> tuple[str, str]:
        """(exchange, routing key) a redrive publishes to: the route to `Q` alone (`queue_route`), or with
        `to_original` the exchange and routing key the message was first published with, which reach every
        queue bound there."""
        if not to_original:
            queue_exchange, routing_key = self.queue_route()
            return queue_exchange, message.original_routing_key if routing_key is None else routing_key
        exchange = message.original_exchange
        if exchange is None:
            raise ValueError(f"parked message {message.properties.message_id!r} has no {h.ORIGINAL_EXCHANGE} "
                             "header; redrive it without --to-original-exchange")
        if exchange == "":
            raise ValueError(f"parked message {message.properties.message_id!r} was published to the default "
                             "exchange, which no application or operator may publish to; redrive it without "
                             "--to-original-exchange")
        return exchange, message.original_routing_key

    def oldest(self) -> Parked | None:
        """The message at the head of the error queue, the first parked of those still there (None when empty):
        read with one basic.get and returned at once."""
        with self._reading() as reader:
            reader.total = min(reader.total, 1)
            return next(iter(reader), None)

    def redrive(self, selection: Selection, *, to_original: bool = False, dry_run: bool = False,
                rate: float | None = None, progress: Callable[[Parked, str, str], None] | None = None,
                outcome: Outcome | None = None) -> Outcome:
        """Send the selected messages back with a full retry budget, at most `rate` a second: publish the
        copy (confirmed, mandatory), then ack the parked original. `dry_run` only counts them. The copy reaches
        `Q` alone (`queue_route`) unless `to_original`: then every queue bound to its original exchange.
        `outcome`: counted into as it goes, so that a caller still knows what moved when the connection is lost
        halfway (every message not acked by then goes back to the error queue: nothing is lost)."""
        return self._move(selection, Outcome() if outcome is None else outcome,
                          lambda message: self.destination(message, to_original),
                          lambda message: h.redriven_headers(message.headers, self.contract["attempt_header"]),
                          dry_run=dry_run, rate=rate, progress=progress)

    def _move(self, selection: Selection, outcome: Outcome, route: Callable[[Parked], tuple[str, str]],
              headers: Callable[[Parked], dict[str, Any]], *, dry_run: bool, rate: float | None,
              progress: Callable[[Parked, str, str], None] | None) -> Outcome:
        """Each selected message of the queue read (`_reading`) published to `route(message)` with `headers(message)`
        (confirmed, mandatory), then its original acked, at most `rate` a second; `dry_run` only counts them. What is
        not acked when a publish fails or the connection is lost goes back to the queue read: nothing is lost."""
        publisher = None if dry_run else self._channel(confirms=True)
        pace = _Pace(rate)
        try:
            with self._reading() as reader:
                for message in self._choose(reader, selection, outcome):
                    outcome.redriven_before += message.redriven_count > 0
                    exchange, routing_key = route(message)
                    key = (exchange, routing_key)
                    outcome.destinations[key] = outcome.destinations.get(key, 0) + 1
                    if publisher is None:
                        continue
                    assert self._connection is not None
                    pace.wait(self._connection)
                    copy = h.copy_properties(message.properties, headers(message))
                    publisher.basic_publish(exchange, routing_key, message.body, copy, mandatory=True)
                    reader.ack(message)
                    outcome.moved += 1
                    if progress is not None:
                        progress(message, exchange, routing_key)
        finally:
            if publisher is not None and publisher.is_open:
                publisher.close()
        return outcome

    def purge(self, selection: Selection, *, everything: bool = False, dry_run: bool = False) -> Outcome:
        """Delete the selected parked messages (get, then ack each), or with `everything` the whole queue
        (queue.purge). Refuses an unfiltered selection without `everything`."""
        outcome = Outcome()
        if everything:
            if selection.filtered:
                raise ValueError("--all purges the whole error queue; it takes no filter")
            if dry_run:
                outcome.selected = outcome.seen = self.count()
                return outcome
            channel = self._channel()
            try:
                purged = int(channel.queue_purge(self.queue).method.message_count)
                outcome.deleted = outcome.selected = outcome.seen = purged
            finally:
                channel.close()
            return outcome
        if not selection.filtered:
            raise ValueError("refusing to purge every parked message without --all; give a filter "
                             "(--reason, --older-than, --newer-than, --limit) or --all")
        with self._reading() as reader:
            for message in self._choose(reader, selection, outcome):
                if not dry_run:
                    reader.ack(message)
                    outcome.deleted += 1
        return outcome


class StuckTiers(ParkedQueue):
    """The wait tiers of one `tiers` contract, on a connection of its own (the contract's vhost), for the messages
    stuck there (the `not_draining` runbook, docs/alerts.md).

    A message takes the TTL its wait tier has when it enters: one that entered while a policy overrode the tier's
    `message-ttl` has none, and stays there after the override is gone, where no TTL ever expires it. `move` sends
    each message a tier held when it began to the input queue alone, through the route a parked message's redrive
    takes (`Q.requeue`), as if its wait were over, by the same confirmed move as a redrive. Its headers stay (its
    attempt counter too), but for the broker's own (`x-death`, delivery counters): a copy is a new message."""

    def tiers(self, only: str | None = None) -> list[str]:
        """The wait queues of the contract, shortest delay first, or the one named `only` (its queue or routing key);
        ValueError for a contract without wait tiers or a tier it does not have."""
        tiers: Sequence[Mapping[str, Any]] = self.contract.get("tiers") or []
        if not tiers:
            raise ValueError(f"queue {self.input_queue!r} has no wait tiers (strategy "
                             f"{self.contract.get('strategy', 'tiers')!r}): nothing waits in a queue of its own")
        chosen = [t["queue"] for t in tiers if only in (None, t["queue"], t["routing_key"])]
        if not chosen:
            raise ValueError(f"queue {self.input_queue!r} has no wait tier {only!r}; its tiers: "
                             + ", ".join(t["queue"] for t in tiers))
        return chosen

    def move(self, tier: str, *, dry_run: bool = False, rate: float | None = None) -> Outcome:
        """Move every message `tier` (a wait queue) held when it began to the input queue alone; `dry_run` counts
        them. Messages left unacknowledged (a failed publish, a lost connection) go back to the tier."""
        self.queue = tier  # what `_reading` reads
        return self._move(Selection(), Outcome(), self.destination,
                          lambda message: h.without_broker_headers(message.headers),
                          dry_run=dry_run, rate=rate, progress=None)


class _Pace:
    """At most `rate` moves a second (None: no limit)."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 1.0 / rate if rate else 0.0
        self.next_at = time.monotonic()

    def wait(self, connection: BlockingConnection) -> None:
        """Sleep until the next move is due, servicing the connection's heartbeats meanwhile."""
        if not self.interval:
            return
        delay = self.next_at - time.monotonic()
        if delay > 0:
            connection.sleep(delay)
        self.next_at = max(self.next_at, time.monotonic()) + self.interval
