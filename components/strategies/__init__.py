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


def strategy_named(name: str) -> Strategy:
    return STRATEGIES[name]


def strategy_of(retry: Retry) -> Strategy:
    return STRATEGIES[retry.strategy]


__all__ = ["DEFAULT", "STRATEGIES", "Strategy", "strategy_named", "strategy_of"]
