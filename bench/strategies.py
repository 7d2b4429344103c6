"""The strategies the benchmark compares, one small entry each: how to configure it, how a message is given a
delay, and which brokers and queue types run it.

- `tiers`: one wait queue per delay; a message is given delay d by publishing it to the queue's retry exchange
  with the routing key of the tier whose delay is d (the republish path of the contract).
- `levels` (docs/strategies.md): shared binary delay levels per vhost; a message is given
  delay d by publishing it to the exchange of the level of its highest 1 bit (the top level for older
  contracts) with `ceil(d / unit)` as 28 binary words, then the queue.
- `native`: RabbitMQ 4.3's delayed retry of quorum queues; the delay is the broker's, `min(n × min, max)` after
  the n-th `basic.reject(requeue=true)`: it cannot be chosen per message, only per attempt.
- `seed-003` (the anchor, not ours): ONE delay queue without consumers; each message carries its own
  `expiration` and the queue dead-letters to the destination. A long expiration at the head blocks every
  shorter one behind it.

A strategy the config parser (or the client) refuses is skipped with the reason: `levels` is refused until it
lands on main, and then runs from the same entry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.config.load import load_vhost
from components.model import wire
from components.model.problems import ConfigError
from rabbitmq_retry_client.levels import delay_exchange

EXCHANGE = "in"
"""Every benchmark vhost has one fanout exchange, `in`, that the measured queue is bound to."""
QUEUE = "bench"
"""The measured (destination) queue."""
ANCHOR_DELAY_QUEUE = "bench.delay"
"""Seed 003's single delay queue (declared by the benchmark, not by the program)."""


@dataclass(frozen=True)
class Strategy:
    """One entry. `ours`: a strategy of this project (held to the P1 target); `per_attempt`: its delay is set by
    the attempt number (native), not chosen per message."""

    name: str
    how: str
    """How a message is given a delay, for the results file."""
    queue_types: tuple[str, ...] = ("classic", "quorum")
    min_version: tuple[int, ...] = (3, 10, 0)
    ours: bool = True
    per_attempt: bool = False
    p2_modes: tuple[str | None, ...] = (None,)
    """The client modes P2 runs it in (tiers: reject and republish; None: the strategy's only way)."""

    def unsupported(self, version: Sequence[int], queue_type: str) -> str | None:
        """Why this broker version or queue type cannot run it, or None."""
        if queue_type not in self.queue_types:
            return f"{self.name} runs on {' and '.join(self.queue_types)} queues only, not {queue_type}"
        if tuple(version) < self.min_version:
            return (f"{self.name} needs RabbitMQ {'.'.join(map(str, self.min_version))} or later; this broker is "
                    f"{'.'.join(map(str, version))}")
        return None

    def row(self, mode: str | None) -> str:
        return self.name if mode is None else f"{self.name} ({mode})"


TIERS = Strategy("tiers", "published to the queue's retry exchange with the routing key of the tier of that delay "
                 "(the contract's republish path), wait queue TTL = the tier's delay",
                 p2_modes=("reject", "republish"))
LEVELS = Strategy("levels", "published to the exchange of the delay level of its highest 1 bit (as the client "
                  "does) with ceil(delay / unit) as 28 binary words, then the queue name (the contract's "
                  "routing_key_format); it passes the levels of its 1 bits, each a queue with TTL unit × 2^k")
NATIVE = Strategy("native", "consumed and rejected with basic.reject(requeue=true); RabbitMQ delivers it again after "
                  "min(n × min_delay, max_delay) for the n-th rejection: the delay is the attempt's, so each "
                  "message is measured at every attempt", queue_types=("quorum",), min_version=(4, 3, 1),
                  per_attempt=True)
KOMBU = Strategy("kombu", "kombu's native delayed delivery (Celery's default on quorum queues): its 28 topic "
                 "exchanges and level queues of 2^k s declared by kombu, the queue bound to its delivery exchange by "
                 "kombu; published to `celery_delayed_27` with kombu's `calculate_routing_key(seconds, queue)`: every "
                 "copy enters at level 27 and is routed through every level down to 0, waiting in those of its 1 "
                 "bits", ours=False)
SEED_003 = Strategy("seed-003", "published to ONE delay queue with its own per-message expiration = the delay; the "
                    "queue has no consumer and dead-letters to the destination (head-of-line blocking)", ours=False)

P1_STRATEGIES = (TIERS, LEVELS, NATIVE, SEED_003)


def _ms(value: int) -> str:
    return f"{value}ms"


def plain_config(queue_type: str) -> dict[str, Any]:
    """Plain consume's vhost config (without its name): QUEUE of `queue_type` bound to the fanout EXCHANGE."""
    return {"exchanges": [{"name": EXCHANGE, "type": "fanout"}],
            "queues": [{"name": QUEUE, "type": queue_type, "bindings": [{"exchange": EXCHANGE}]}]}


def vhost_config(strategy: Strategy, queue_type: str, delays_ms: Sequence[int], max_retries: int,
                 unit_ms: int = 100) -> dict[str, Any]:
    """The vhost config (without its name) that deploys `strategy` for `QUEUE` of `queue_type`.

    `delays_ms`: tiers: the tiers; levels: the backoff's steps (initial, then × 2 up to the last; delays are
    chosen per message anyway) with levels of `unit_ms` up to 2 × the longest; native: [min_delay, max_delay];
    seed-003: unused (QUEUE is a plain queue, the delay queue is declared by `declare_anchor`)."""
    config = plain_config(queue_type)
    queue = config["queues"][0]
    extra: dict[str, Any] = {}
    if strategy is TIERS:
        queue["retry"] = {"delays": [_ms(d) for d in delays_ms], "max_retries": max_retries}
    elif strategy is LEVELS:
        extra["delay_levels"] = {"unit": _ms(unit_ms), "max_delay": _ms(2 * max(delays_ms)), "type": queue_type}
        queue["retry"] = {"strategy": "levels", "max_retries": max_retries,
                          "backoff": {"initial": _ms(delays_ms[0]), "multiplier": 2, "max": _ms(max(delays_ms)),
                                      "jitter": 0}}
    elif strategy is NATIVE:
        queue["retry"] = {"strategy": "native", "min_delay": _ms(delays_ms[0]), "max_delay": _ms(delays_ms[-1]),
                          "max_retries": max_retries}
    return {**config, **extra}


def refused(config: Mapping[str, Any]) -> str | None:
    """The config parser's objection to a vhost config (e.g. `levels` before it lands), or None."""
    try:
        load_vhost({"name": "bench", **config}, "vhost")
    except ConfigError as error:
        return " ".join(str(error).split())
    return None


def client_refusal(contract: Mapping[str, Any]) -> str | None:
    """rabbitmq_retry_client's objection to a contract (a strategy it does not follow yet), or None."""
    from rabbitmq_retry_client.contract import ContractError, validate

    try:
        validate(contract)
    except ContractError as error:
        return str(error)
    return None


def levels_routing_key(contract: Mapping[str, Any], delay_ms: int) -> str:
    """The routing key of a levels contract for `delay_ms` (design: units = ceil(delay / unit), capped at
    2^levels - 1, as `delay_words` binary digits, most significant first, each followed by '.', then the queue)."""
    units = min(math.ceil(delay_ms / contract["delay_unit_ms"]), 2 ** contract["delay_levels"] - 1)
    words = int(contract["delay_words"])
    return "".join(f"{(units >> (words - 1 - i)) & 1}." for i in range(words)) + contract["queue"]


def route(strategy: Strategy, contract: Mapping[str, Any], delay_ms: int) -> tuple[str, str, str | None]:
    """(exchange, routing key, per-message expiration) that gives a message `delay_ms` in `strategy`."""
    if strategy is TIERS:
        tier = next((t for t in contract["tiers"] if t["delay_ms"] == delay_ms), None)
        if tier is None:
            raise ValueError(f"no tier of {delay_ms} ms in {[t['delay_ms'] for t in contract['tiers']]}")
        return contract["retry_exchange"], tier["routing_key"], None
    if strategy is LEVELS:
        return delay_exchange(contract, delay_ms), levels_routing_key(contract, delay_ms), None
    if strategy is SEED_003:
        return "", ANCHOR_DELAY_QUEUE, str(delay_ms)
    if strategy is KOMBU:
        if delay_ms % 1000:
            raise ValueError(f"kombu: delays in whole seconds only, not {delay_ms} ms")
        from kombu.transport.native_delayed_delivery import calculate_routing_key, level_name

        return level_name(27), calculate_routing_key(delay_ms // 1000, QUEUE), None
    raise ValueError(f"{strategy.name}: the delay is the broker's, per attempt, not chosen per message")


def anchor_arguments(queue_type: str) -> dict[str, Any]:
    """Seed 003's delay queue: dead-letters every expired message to QUEUE through the default exchange."""
    return {wire.QUEUE_TYPE.argument: queue_type, wire.DEAD_LETTER_EXCHANGE.argument: "",
            wire.DEAD_LETTER_ROUTING_KEY.argument: QUEUE}
