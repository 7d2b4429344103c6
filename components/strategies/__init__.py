"""The retry strategies, by name: one module each, all implementing `base.Strategy`.

A new strategy is a module here, listed in `STRATEGIES`; nothing else in the components chooses between
strategies (docs/development.md: Adding a strategy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rabbitmq_retry_client.contract import DEFAULT_STRATEGY

from ..model import naming
from ..model.fields import ABSENT, INVALID, Invalid, Problems, choice, mapping, optional
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


@dataclass(frozen=True)
class QueueRetry:
    """A queue's `retry` block as its strategy sees the queue (`parse_queue_retry`)."""

    retry: Retry | Invalid | None
    """The block parsed; INVALID also when the strategy does not run on the queue's type; None without one."""
    owned_queues: tuple[str, ...]
    owned_exchanges: tuple[str, ...]
    """What the queue owns by its strategy: itself and its error queue, wait queues, exchanges."""
    names_fit: bool
    """Every derived name fits RabbitMQ's 255 bytes."""
    delivery_limit: int | Invalid | None
    """A quorum queue's limit (`delivery_limit_of` for a retryable one); None for a classic queue."""


def parse_queue_retry(p: Problems, path: str, name: str | Invalid, queue_type: object, raw: object,
                      written_limit: int | Invalid | None, default_limit: int) -> QueueRetry:
    """The queue `name` at `path` with its `retry` block (`raw`; ABSENT without one), as the strategy it names sees
    it, in the parse stage's one call of the strategies: the block parsed (`parse_retry`), refused on a queue type
    its strategy does not run on, what the queue owns by it, and its delivery limit by the strategy's rule (a plain
    quorum queue's: the limit written, else `default_limit`)."""
    retry = None if raw is ABSENT else parse_retry(p, f"{path}.retry", raw)
    if not isinstance(name, str) or not isinstance(retry, Retry):
        return QueueRetry(retry, (name,) if isinstance(name, str) else (), (), True,
                          _plain_limit(queue_type, written_limit, default_limit))
    strategy = strategy_of(retry)
    queues, exchanges = strategy.owned_names(name, retry)
    fit = _names_fit(p, path, (*queues, *exchanges))
    if isinstance(queue_type, str) and not strategy.check_queue(p, path, name, queue_type):
        return QueueRetry(INVALID, (name,), (), fit, None)
    limit = (delivery_limit_of(p, f"{path}.delivery_limit", written_limit, retry, default_limit)
             if queue_type == "quorum" and written_limit is not INVALID else None)
    return QueueRetry(retry, tuple(queues), tuple(exchanges), fit, limit)


def _plain_limit(queue_type: object, written: int | Invalid | None, default: int) -> int | Invalid | None:
    """A plain quorum queue's delivery limit: the one written, else the default; None for a classic queue."""
    return (written or default) if queue_type == "quorum" else None


def _names_fit(p: Problems, path: str, names: tuple[str, ...]) -> bool:
    """Whether every name a queue derives fits RabbitMQ's 255 bytes; the first too long is a problem at its name."""
    too_long = next((n for n in names if naming.byte_length(n) > naming.MAX_NAME_BYTES), None)
    if too_long is not None:
        p.add(f"{path}.name", f'derived name "{too_long[:40]}…" is over 255 bytes; shorten the queue name')
    return too_long is None


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
