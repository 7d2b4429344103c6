"""Messages stuck in a wait tier, sent on to their next attempt (the `not_draining` runbook, docs/alerts.md).

A message takes the TTL its wait tier has when it enters: one that entered while a policy overrode the tier's
`message-ttl` has none, and stays there after the override is gone, where no TTL ever expires it. `stuck redrive`
moves each message a tier held when it began to the input queue alone, through the route a parked message's
redrive takes (`Q.requeue`), as if its wait were over: the copy is published with confirms and `mandatory`, and the
original acked only after its confirm (a crash in between leaves both, never neither). Its headers stay (its attempt
counter too), but for the broker's own (`x-death`, delivery counters): a copy is a new message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import headers as h
from .parked import Outcome, Parked, ParkedQueue, Selection


class StuckTiers(ParkedQueue):
    """The wait tiers of one `tiers` contract, on a connection of its own (the contract's vhost)."""

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
        exchange, fixed_key = self.queue_route()

        def route(message: Parked) -> tuple[str, str]:
            return exchange, message.original_routing_key if fixed_key is None else fixed_key

        def headers(message: Parked) -> dict[str, Any]:
            return h.without_broker_headers(message.headers)

        return self._move(Selection(), Outcome(), route, headers, dry_run=dry_run, rate=rate, progress=None)
