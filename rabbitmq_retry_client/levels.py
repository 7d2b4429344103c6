"""Strategy `levels`, from the contract alone: how long retry n waits, and the routing key that makes the
shared delay levels hold a copy that long.

A copy published to level k's exchange passes level k, then each level below it, through its TTL queue
(`delay_unit_ms × 2^k`) when bit k of its delay is 1, past it when 0, and finally reaches the queue named
after the bits. It is published to the highest level whose bit is 1 (`delay_exchanges[k]`): the levels above
would only pass it down, one topic routing step each (a 1 s retry in levels up to a day skips 16 of them).
A contract without `delay_exchanges` names only the top level, `delay_exchange`, which also works. The key
always has `delay_words` bit words (more than there are levels), so a stack that adds or removes top levels
never moves the bit a waiting copy is routed by.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable, Mapping
from typing import Any

Uniform = Callable[[float, float], float]
"""`uniform(low, high)`: a number from [low, high], as `random.uniform`; tests pass a fixed choice."""


def retry_delay_ms(contract: Mapping[str, Any], attempt: int, random: Uniform = _random.uniform) -> int:
    """Milliseconds retry `attempt` (1 = the retry after the first failure) waits before the levels round it
    up to whole units: `min(max_ms, ceil(min(max_ms, initial_ms × multiplier^(attempt-1)) × uniform(1 - jitter,
    1 + jitter)))`: rounded up (a retry may come late, never early), and never above `max_ms`, which is what the
    user set as the longest wait (at the cap the jitter only shortens)."""
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt}")
    backoff = contract["backoff"]
    try:
        base = min(backoff["max_ms"], backoff["initial_ms"] * backoff["multiplier"] ** (attempt - 1))
    except OverflowError:  # a float multiplier to a large power: long past max_ms
        base = backoff["max_ms"]
    jitter = backoff["jitter"]
    return min(backoff["max_ms"], math.ceil(base * (random(1 - jitter, 1 + jitter) if jitter else 1)))


def delay_units(contract: Mapping[str, Any], delay_ms: float) -> int:
    """`ceil(delay_ms / delay_unit_ms)`, capped at the longest delay the levels hold (`2^delay_levels - 1`)."""
    if delay_ms < 0:
        raise ValueError(f"a delay cannot be negative, got {delay_ms} ms")
    units = math.ceil(delay_ms / contract["delay_unit_ms"]) if isinstance(delay_ms, float) \
        else -(-delay_ms // contract["delay_unit_ms"])  # exact for any int
    return min(units, 2 ** contract["delay_levels"] - 1)


def delay_exchange(contract: Mapping[str, Any], delay_ms: float) -> str:
    """The exchange to publish a copy that should wait `delay_ms` to: the level of its highest 1 bit (level 0
    for a delay of 0 units), or the top level when the contract lists no `delay_exchanges`."""
    exchanges = contract.get("delay_exchanges")
    if not exchanges:
        return str(contract["delay_exchange"])
    return str(exchanges[max(delay_units(contract, delay_ms).bit_length() - 1, 0)])


def delay_routing_key(contract: Mapping[str, Any], delay_ms: float) -> str:
    """The routing key of a copy that should wait `delay_ms` in the levels, then reach the contract's queue:
    the delay in units as `delay_words` binary digits, most significant first, each followed by '.', then
    the queue name. Unit 1000 ms, 5000 ms, queue `orders.billing`: 25 × `0.`, then `1.0.1.orders.billing`."""
    bits = format(delay_units(contract, delay_ms), f"0{contract['delay_words']}b")
    return "".join(f"{bit}." for bit in bits) + contract["queue"]
