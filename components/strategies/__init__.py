"""The retry strategies, by name: one module each, all implementing `base.Strategy`.

A new strategy is a module here, listed in `STRATEGIES`; nothing else in the components chooses between
strategies (docs/development.md: Adding a strategy).
"""

from __future__ import annotations

from collections.abc import Mapping

from rabbitmq_retry_client.contract import DEFAULT_STRATEGY

from ..model.stack_config import Retry
from . import levels, native, tiers
from .base import Strategy

STRATEGIES: Mapping[str, Strategy] = {module.NAME: module for module in (tiers, levels, native)}
"""`retry.strategy`: `tiers` (fixed TTL wait queues, the default), `levels` (a delay per message through the
vhost's shared binary delay levels) or `native` (RabbitMQ 4.3's delayed retry of quorum queues)."""
DEFAULT = DEFAULT_STRATEGY
"""The strategy of a `retry` block that names none, as of a contract that names none (the contract's schema)."""


def delivery_limit_problem(retry: Retry, limit: object) -> str | None:
    """Why `limit` is no delivery limit for a retryable quorum queue of `retry`, else None: the one rule, said by the
    parser of a written `delivery_limit` and by the checks of the limit every policy leaves in effect. A strategy
    whose broker parks a message past the limit needs exactly `max_retries`; the others need it above
    `max_retries + 1`, the deliveries a message that fails every attempt gets (a negative limit is none)."""
    if strategy_of(retry).DELIVERY_LIMIT_IS_MAX_RETRIES:
        return None if limit == retry.max_retries else (
            f"is not retry.max_retries ({retry.max_retries}): with strategy {retry.strategy} it is the number of "
            "retries before the broker parks a message")
    if isinstance(limit, int) and 0 <= limit <= retry.max_retries + 1:
        return (f"is not above max_retries + 1 ({retry.max_retries + 1}): on RabbitMQ 4 each retry counts toward it, "
                "and a message over it jams in a dead-letter cycle")
    return None


def strategy_named(name: str) -> Strategy:
    return STRATEGIES[name]


def strategy_of(retry: Retry) -> Strategy:
    return STRATEGIES[retry.strategy]


__all__ = ["DEFAULT", "STRATEGIES", "Strategy", "delivery_limit_problem", "strategy_named", "strategy_of"]
