"""What a consumer counts and times, handed to a `Metrics` object a user exports from (Prometheus, StatsD, logs).

Both consumers (`RetryingConsumer`, `aio.AsyncRetryingConsumer`) call it: `handled` after each handler call with
its duration, `retried` once a retry is on its way (a reject sent, or a copy confirmed), `parked` once the parking
copy is confirmed. The threaded consumer calls `handled` from its handler thread, the others from its own thread:
an implementation must be thread-safe (prometheus_client's metrics are). docs/contract.md ("Metrics")
has a Prometheus example.
"""

from __future__ import annotations


class Metrics:
    """Receives a consumer's events per queue; this base class ignores them, a subclass overrides what it needs."""

    def handled(self, queue: str, seconds: float, failed: bool) -> None:
        """A handler call of `queue`'s consumer returned (`failed`: it raised) after `seconds`."""

    def retried(self, queue: str) -> None:
        """A failed delivery of `queue` was sent on to its retry."""

    def parked(self, queue: str, permanent: bool) -> None:
        """A delivery of `queue` was parked in its error queue (`permanent`: at once, by a PermanentError)."""


NO_METRICS = Metrics()
"""The default: nothing is recorded."""
