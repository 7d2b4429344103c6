"""Messages stuck in a wait tier, sent on to their next attempt (the `not_draining` runbook, docs/alerts.md).

A message takes the TTL its wait tier has when it enters: one that entered while a policy overrode the tier's
`message-ttl` has none, and stays there after the override is gone, where no TTL ever expires it. `stuck redrive`
moves each message a tier held when it began to the input queue alone, through the route a parked message's
redrive takes (`Q.requeue`), as if its wait were over: the copy is published with confirms and `mandatory`, and the
original acked only after its confirm (a crash in between leaves both, never neither). Its headers stay (its attempt
counter too), but for the broker's own (`x-death`, delivery counters): a copy is a new message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import headers as h
from .parked import Outcome, Parked, ParkedQueue, Selection


@dataclass(frozen=True)
class Moved:
    """What `StuckTiers.redrive` did in one tier."""

    queue: str
    outcome: Outcome


class StuckTiers(ParkedQueue):
    """The wait tiers of one `tiers` contract, on a connection of its own (the contract's vhost)."""

    def tiers(self, only: str | None = None) -> list[str]:
        """The wait queues of the contract, or the one named `only` (its queue or routing key); ValueError for a
        contract without wait tiers or a tier it does not have."""
        tiers: Sequence[Mapping[str, Any]] = self.contract.get("tiers") or []
        if not tiers:
            raise ValueError(f"queue {self.input_queue!r} has no wait tiers (strategy "
                             f"{self.contract.get('strategy', 'tiers')!r}): nothing waits in a queue of its own")
        chosen = [t["queue"] for t in tiers if only in (None, t["queue"], t["routing_key"])]
        if not chosen:
            raise ValueError(f"queue {self.input_queue!r} has no wait tier {only!r}; its tiers: "
                             + ", ".join(t["queue"] for t in tiers))
        return chosen

    def move(self, tier: str, *, dry_run: bool = False, rate: float | None = None,
             progress: Callable[[Parked, str, str], None] | None = None) -> Outcome:
        """Move every message `tier` (a wait queue) held when it began to the input queue alone; `dry_run` counts
        them. Messages left unacknowledged (a failed publish, a lost connection) go back to the tier."""
        self.queue = tier  # what `_reading` reads
        selection, outcome = Selection(), Outcome()
        interval = 1.0 / rate if rate else 0.0
        publisher = None if dry_run else self._channel(confirms=True)
        exchange, fixed_key = self.queue_route()
        next_at = time.monotonic()
        try:
            with self._reading() as reader:
                for message in self._choose(reader, selection, outcome):
                    routing_key = message.original_routing_key if fixed_key is None else fixed_key
                    outcome.destinations[(exchange, routing_key)] = \
                        outcome.destinations.get((exchange, routing_key), 0) + 1
                    if publisher is None:
                        continue
                    if interval:
                        if (delay := next_at - time.monotonic()) > 0:
                            assert self._connection is not None
                            self._connection.sleep(delay)
                        next_at = max(next_at, time.monotonic()) + interval
                    copy = h.copy_properties(message.properties, h.without_broker_headers(message.headers))
                    publisher.basic_publish(exchange, routing_key, message.body, copy, mandatory=True)
                    reader.ack(message)
                    outcome.moved += 1
                    if progress is not None:
                        progress(message, exchange, routing_key)
        finally:
            if publisher is not None and publisher.is_open:
                publisher.close()
        return outcome

    def redrive_all(self, only: str | None = None, *, dry_run: bool = False,
                    rate: float | None = None) -> Iterator[Moved]:
        """`move` each tier (or the one named `only`), shortest delay first."""
        for queue in self.tiers(only):
            yield Moved(queue, self.move(queue, dry_run=dry_run, rate=rate))
