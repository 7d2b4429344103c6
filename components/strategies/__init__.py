"""The retry strategies, by name: one module each, all implementing `base.Strategy`.

A new strategy is a module here, listed in `STRATEGIES`; nothing else in the components chooses between
strategies (docs/development.md: Adding a strategy).
"""

from __future__ import annotations

from collections.abc import Mapping

from rabbitmq_retry_client.contract import DEFAULT_STRATEGY

from ..model import naming
from ..model.fields import INVALID, Invalid, Problems, choice, mapping, optional
from ..model.keys import RETRY_KEYS
from ..model.stack_config import DelayLevels, Retry
from . import levels, native, tiers
from .base import Strategy

STRATEGIES: Mapping[str, Strategy] = {module.NAME: module for module in (tiers, levels, native)}
"""`retry.strategy`: `tiers` (fixed TTL wait queues, the default), `levels` (a delay per message through the
vhost's shared binary delay levels) or `native` (RabbitMQ 4.3's delayed retry of quorum queues)."""


def parse_retry(p: Problems, path: str, raw: object) -> Retry | Invalid:
    """A queue's `retry` block, parsed by the strategy it names (default `tiers`); keys of another strategy are
    refused."""
    data = mapping(p, path, raw, RETRY_KEYS)
    if data is INVALID:
        return INVALID
    name = optional(data, "strategy", lambda v: choice(p, f"{path}.strategy", v, tuple(STRATEGIES)), DEFAULT_STRATEGY)
    if name is INVALID:
        return INVALID
    for other in STRATEGIES.values():
        for key in other.RETRY_KEYS:
            if name != other.NAME and key in data:
                p.add(f"{path}.{key}", f"belongs to strategy {other.NAME}, not {name}; remove it or set "
                      f"{path}.strategy: {other.NAME}")
    return STRATEGIES[name].parse_retry(p, path, data)


def check_retryable(p: Problems, path: str, name: str, queue_type: object,
                    retry: Retry | Invalid | None) -> tuple[Retry | Invalid | None, tuple[list[str], list[str]], bool]:
    """The queue `name` at `path` with its parsed `retry` block, as its strategy sees it: the block (refused when the
    strategy does not run on `queue_type`), the queues and exchanges the queue owns, and whether every derived name
    fits RabbitMQ's 255 bytes."""
    if not isinstance(retry, Retry):
        return retry, ([name], []), True
    strategy = strategy_of(retry)
    queues, exchanges = strategy.owned_names(name, retry)
    too_long = next((n for n in (*queues, *exchanges) if naming.byte_length(n) > naming.MAX_NAME_BYTES), None)
    if too_long is not None:
        p.add(f"{path}.name", f'derived name "{too_long[:40]}…" is over 255 bytes; shorten the queue name')
    if isinstance(queue_type, str) and not strategy.check_queue(p, path, name, queue_type):
        return INVALID, ([name], []), too_long is None
    return retry, (queues, exchanges), too_long is None


def fits_delay_levels(p: Problems, path: str, retry: Retry, delay_levels: DelayLevels, levels_path: str) -> bool:
    """Whether the queue's retries fit in the vhost's delay levels (only a `levels` queue retries through them)."""
    return not isinstance(retry, levels.LevelsRetry) or levels.check_backoff_fits(p, path, retry, delay_levels,
                                                                                  levels_path)


def delivery_limit_problem(retry: Retry, limit: object) -> str | None:
    """Why `limit` is no delivery limit for a retryable quorum queue of `retry`, else None: the one rule, said by the
    parser of a written `delivery_limit` (`delivery_limit_of`) and by the checks of the limit every policy leaves in
    effect. A strategy whose broker parks a message past the limit needs exactly `max_retries`; the others need it
    above `max_retries + 1`, the deliveries a message that fails every attempt gets (a negative limit is none)."""
    if strategy_of(retry).DELIVERY_LIMIT_IS_MAX_RETRIES:
        return None if limit == retry.max_retries else (
            f"is not retry.max_retries ({retry.max_retries}): with strategy {retry.strategy} it is the number of "
            "retries before the broker parks a message")
    if isinstance(limit, int) and 0 <= limit <= retry.max_retries + 1:
        return (f"is not above max_retries + 1 ({retry.max_retries + 1}): on RabbitMQ 4 each retry counts toward it, "
                "and a message over it jams in a dead-letter cycle")
    return None


def delivery_limit_of(p: Problems, path: str, written: int | None, retry: Retry, default: int) -> int | Invalid:
    """The delivery limit of a retryable quorum queue, by the rule of `delivery_limit_problem`: `max_retries` for a
    strategy whose broker parks a message past it (one written is refused), else the limit written, or unset
    `default` (`defaults.delivery_limit`) + `max_retries`: on RabbitMQ 4 every plain retry counts toward the limit
    for the message's whole life."""
    if strategy_of(retry).DELIVERY_LIMIT_IS_MAX_RETRIES:
        if written is not None:
            p.add(path, f"strategy {retry.strategy} sets the delivery limit to retry.max_retries (the broker parks a "
                  "message past it); remove delivery_limit and set retry.max_retries instead")
            return INVALID
        return retry.max_retries
    if written is None:
        return default + retry.max_retries
    if (problem := delivery_limit_problem(retry, written)) is not None:
        p.add(path, f"{written} {problem}; raise it or leave it unset (default: defaults.delivery_limit + max_retries)")
        return INVALID
    return written


def strategy_of(retry: Retry) -> Strategy:
    return STRATEGIES[retry.strategy]
