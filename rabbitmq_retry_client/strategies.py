"""What each retry strategy of the contract means to a consumer, in one object per strategy.

The consumers, the CLI and the parked-message tools ask `behaviour_of(contract)` which retry policy follows it,
where a retry is published, how to describe it and which route reaches the queue alone, instead of comparing
strategy names. The strategies are the ones the contract schema names (`contract.SUPPORTED_STRATEGIES`): a schema
that names a strategy this table lacks (or the reverse) fails at import, so a new strategy cannot be half-followed.

How a strategy retries is read from its part of the schema where the schema says it: a contract that carries a
`retry_call` is retried by that call to the broker; one that carries `reject_routes_to` can be retried by a
plain reject that the queue dead-letters; any other is retried by publishing a copy that waits. This package
cannot import the components (it installs without Pulumi), so it keeps its own table.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from .contract import SCHEMA, SUPPORTED_STRATEGIES, RetryContract, strategy_of
from .durations import format_duration
from .levels import delay_exchange, delay_routing_key, delay_units, retry_delay_ms
from .policies import NativePolicy, RejectPolicy, RepublishPolicy, RetryPolicy

Mode = Literal["reject", "republish"]
MODES: tuple[Mode, ...] = ("reject", "republish")
"""The consumer's modes; only a strategy whose contract can be retried by a dead-lettering reject (`tiers`)
tells them apart."""


def contract_mode(contract: Mapping[str, Any]) -> Mode:
    """The mode a `tiers` contract prescribes: "republish" (attempt n waits in tier min(n, len(tiers))), or
    "reject" when it has a single tier, where both wait the same and reject mode publishes nothing. A reject-mode
    consumer of a contract with more tiers would wait tier 1's delay every time."""
    return "reject" if len(contract.get("tiers") or []) == 1 else "republish"


class StrategyBehaviour:
    """One strategy as a consumer follows it; subclasses say where a copy goes and how to describe it."""

    name: ClassVar[str]

    def policy(self, contract: RetryContract, mode: Mode) -> RetryPolicy:
        """The retry policy that follows a contract of this strategy in `mode`, from what the contract carries (see
        the module docstring): native's, reject mode's or republish mode's."""
        spec = SCHEMA["$defs"][self.name]
        route = functools.partial(self.retry_route, contract)
        if "retry_call" in spec["properties"]:
            return NativePolicy(contract, route)
        if "reject_routes_to" in spec["required"] and mode == "reject":
            return RejectPolicy(contract, route)
        return RepublishPolicy(contract, route)

    def retry_route(self, contract: Mapping[str, Any], attempt: int) -> tuple[str, str, int]:
        """(exchange, routing key, wait in ms) of the copy that retries `attempt`, for a strategy whose retries
        are published copies."""
        raise ValueError(f"strategy {self.name} publishes no retry copies: the broker retries ({contract['queue']})")

    def describe(self, contract: Mapping[str, Any], mode: Mode) -> str:
        """How a consumer in `mode` retries, in a few words for a person."""
        raise NotImplementedError

    def queue_route(self, contract: Mapping[str, Any], requeue_exchange: str) -> tuple[str, str | None]:
        """(exchange, routing key) that reaches the input queue alone, for a redrive to it; None keeps the
        message's own routing key. `Q.requeue`, the fanout exchange bound to `Q` alone."""
        return requeue_exchange, None


class Tiers(StrategyBehaviour):
    name = "tiers"

    def retry_route(self, contract: Mapping[str, Any], attempt: int) -> tuple[str, str, int]:
        """The attempt's tier: `tiers[min(attempt, len(tiers)) - 1]`."""
        tiers = contract["tiers"]
        tier = tiers[min(attempt, len(tiers)) - 1]
        return contract["retry_exchange"], tier["routing_key"], tier["delay_ms"]

    def describe(self, contract: Mapping[str, Any], mode: Mode) -> str:
        tiers = ", ".join(f"{t['routing_key']}={format_duration(t['delay_ms'])}" for t in contract["tiers"])
        return f"{mode} mode; tiers {tiers}"


class Native(StrategyBehaviour):
    name = "native"

    def describe(self, contract: Mapping[str, Any], mode: Mode) -> str:
        return (f"native delayed retry ({contract['retry_call']}, {format_duration(contract['min_delay_ms'])} × "
                f"attempt, at most {format_duration(contract['max_delay_ms'])})")


class Levels(StrategyBehaviour):
    name = "levels"

    def retry_route(self, contract: Mapping[str, Any], attempt: int) -> tuple[str, str, int]:
        """The delay levels holding the copy for the attempt's back-off, rounded up to whole units."""
        delay = retry_delay_ms(contract, attempt)
        return (delay_exchange(contract, delay), delay_routing_key(contract, delay),
                delay_units(contract, delay) * contract["delay_unit_ms"])

    def queue_route(self, contract: Mapping[str, Any], requeue_exchange: str) -> tuple[str, str | None]:
        """Level 0 with a zero delay: the delivery exchange routes it to exactly the contract's queue (a levels
        queue has no `Q.requeue`)."""
        return delay_exchange(contract, 0), delay_routing_key(contract, 0)

    def describe(self, contract: Mapping[str, Any], mode: Mode) -> str:
        backoff = contract["backoff"]
        return (f"delay levels via {contract['delay_exchange']} (back-off {format_duration(backoff['initial_ms'])} "
                f"× {backoff['multiplier']}^(attempt-1), at most {format_duration(backoff['max_ms'])}, "
                f"jitter {backoff['jitter']})")


BEHAVIOURS: Mapping[str, StrategyBehaviour] = {b.name: b for b in (Tiers(), Native(), Levels())}
"""Each strategy the contract schema names, by name."""


def check_covers(strategies: Iterable[str], behaviours: Mapping[str, StrategyBehaviour] = BEHAVIOURS) -> None:
    """ImportError unless `behaviours` follows exactly the schema's `strategies`."""
    if set(behaviours) != set(strategies):
        raise ImportError(f"the contract schema names strategies {sorted(strategies)} but the client follows "
                          f"{sorted(behaviours)}: give each one a StrategyBehaviour in "
                          "rabbitmq_retry_client/strategies.py")


check_covers(SUPPORTED_STRATEGIES)


def behaviour_of(contract: Mapping[str, Any]) -> StrategyBehaviour:
    """The behaviour of a validated contract's strategy (`contract.validate` refuses any other)."""
    return BEHAVIOURS[strategy_of(contract)]
