"""Strategy `tiers` (the default): fixed TTL wait queues, one per delay.

A rejected message dead-letters from `Q` through the direct exchange `Q.retry` to the first wait queue
`Q.wait.1`; a consumer in republish mode publishes a retry there with a later tier's routing key. When its TTL
(the tier's delay, in the wait queue's policy) is over, the wait queue dead-letters it to the fanout
`Q.requeue`, bound to `Q` only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from ..model import naming, wire
from ..model.fields import ABSENT, INVALID, Invalid, Problems, duration, integer, items, optional
from ..model.plan_types import (
    BindingPlan,
    ExchangePlan,
    PlannedBy,
    QueuePlan,
    RetryablePlan,
    Tier,
    TopicGrant,
    adopt,
    error_policies,
    error_queue_plans,
    limit_sources,
    queue_limits,
    queue_policy,
    queue_type_arguments,
    quorum_dead_lettering,
    reconciliation,
)
from ..model.problems import Problem
from ..model.stack_config import MAX_RETRIES_CEILING, DelayLevels, Queue, Retry
from .base import Route
from .common import contract_of, parse_error_queue

PLANNER = cast("PlannedBy", sys.modules[__name__])  # each plan it makes records it (`planned_by`)

NAME = "tiers"
RETRY_KEYS = ("delays",)
USES_DELAY_LEVELS = False
DELIVERY_LIMIT_IS_MAX_RETRIES = False
MIN_BROKER_VERSION = None
FEATURE_FLAG = None
RETRY_PATH_STRAYS = "retry-path-strays"
"""`Problem.code`: a retry does not return to exactly its own queue."""
TIER_MISROUTED = "tier-misrouted"
"""`Problem.code`: a tier's routing key does not reach exactly its wait queue."""


@dataclass(frozen=True, kw_only=True)
class TiersRetry(Retry):
    strategy: ClassVar[str] = NAME
    delays_ms: tuple[int, ...]
    """One wait queue per delay, strictly increasing."""


def parse_delays(p: Problems, path: str, raw: object) -> tuple[int, ...] | Invalid:
    """Strictly increasing durations, one per wait tier."""
    if raw is ABSENT:
        p.add(path, "missing; list one delay per wait tier, e.g. [1s, 10s, 1m]")
        return INVALID
    if raw is None:
        p.add(path, "null; list one delay per wait tier, e.g. [1s, 10s, 1m]")
        return INVALID
    written = items(p, path, raw, scalars=True)
    if not written and isinstance(raw, Sequence) and not isinstance(raw, str):
        p.add(path, "empty; list at least one delay, e.g. [10s]")
    delays = [duration(p, f"{path}[{i}]", value) for i, value in enumerate(written)]
    for i in range(1, len(delays)):
        before, after = delays[i - 1], delays[i]
        if before is not INVALID and after is not INVALID and after <= before:
            p.add(f"{path}[{i}]", f'"{written[i]}" is not longer than the delay before it; '
                  "delays must be strictly increasing")
    if not delays or INVALID in delays:
        return INVALID
    return tuple(d for d in delays if d is not INVALID)


def parse_retry(p: Problems, path: str, data: Mapping[str, Any]) -> TiersRetry | Invalid:
    """`delays` (required) and `max_retries` (default: one per tier)."""
    written = data.get("delays", ABSENT)
    delays = parse_delays(p, f"{path}.delays", written)
    if written is ABSENT or written is None:
        return INVALID
    tiers = len(written) if isinstance(written, Sequence) and not isinstance(written, (str, bytes)) else 0
    max_retries = optional(data, "max_retries",
                           lambda v: integer(p, f"{path}.max_retries", v, 1, MAX_RETRIES_CEILING), tiers)
    retention, error_max_length = parse_error_queue(p, path, data)
    if delays is INVALID or max_retries is INVALID or retention is INVALID or error_max_length is INVALID:
        return INVALID
    return TiersRetry(delays_ms=delays, max_retries=max_retries, error_retention_ms=retention,
                      error_max_length=error_max_length)


def check_queue(p: Problems, path: str, name: str, queue_type: str) -> bool:
    """Any queue name and type will do."""
    return True


def owned_names(queue: str, retry: Retry) -> tuple[list[str], list[str]]:
    """(queues, exchanges) a retryable queue `queue` owns, input first."""
    tiers = len(retry.delays_ms) if isinstance(retry, TiersRetry) else 0
    return naming.derived_queue_names(queue, tiers), naming.derived_exchange_names(queue)


def plan(queue: Queue, retry: TiersRetry, path: str, levels: DelayLevels | None,
         imports: tuple[str, ...]) -> RetryablePlan[TiersRetry]:
    """Input queue, retry exchange, one wait queue per tier, requeue exchange, error exchange and queue.
    `path`: the queue's config key path, named by the checks."""
    name, qtype = queue.name, queue.queue_type
    tiers = tuple(Tier(n, delay, naming.wait_queue(name, n), naming.wait_routing_key(n))
                  for n, delay in enumerate(retry.delays_ms, start=1))
    retry_x, requeue_x = naming.retry_exchange(name), naming.requeue_exchange(name)
    input_queue = QueuePlan(naming.INPUT_KEY, name, qtype, {
        **queue_type_arguments(queue),
        wire.DEAD_LETTER_EXCHANGE.argument: retry_x,
        wire.DEAD_LETTER_ROUTING_KEY.argument: tiers[0].routing_key,
        **quorum_dead_lettering(qtype),
    }, "input")
    wait_queues = tuple(QueuePlan(naming.wait_key(t.number), t.queue, qtype, {
        **queue_type_arguments(queue),
        wire.DEAD_LETTER_EXCHANGE.argument: requeue_x,
        **quorum_dead_lettering(qtype),
    }, "wait") for t in tiers)
    error, error_exchange, error_binding = error_queue_plans(queue)
    exchanges = (ExchangePlan(naming.RETRY_EXCHANGE_KEY, retry_x, "direct"),
                 ExchangePlan(naming.REQUEUE_EXCHANGE_KEY, requeue_x, "fanout"),
                 error_exchange)
    bindings = (
        *(BindingPlan(naming.wait_binding_key(t.number), retry_x, t.queue, t.routing_key) for t in tiers),
        # The requeue exchange is bound to this queue only: a retry never reaches other queues
        # bound to the same source exchange.
        BindingPlan(naming.REQUEUE_BINDING_KEY, requeue_x, name),
        error_binding,
    )
    policies = [queue_policy(naming.wait_policy_key(t.number), t.queue, queue.policy_priority,
                             {wire.MESSAGE_TTL.key: str(t.delay_ms), **reconciliation(queue.target_group_size)},
                             {wire.MESSAGE_TTL.key: f"{path}.retry.delays[{t.number - 1}]",
                              wire.TARGET_GROUP_SIZE.key: f"{path}.quorum_group_size"})
                for t in tiers]
    if limits := queue_limits(queue):
        policies.insert(0, queue_policy(naming.QUEUE_POLICY_KEY, name, queue.policy_priority, limits,
                                        limit_sources(path, queue)))
    policies += error_policies(queue, retry, path)
    return RetryablePlan(config=queue, retry=retry, planned_by=PLANNER,
                         tiers=tiers,
                         queues=adopt((input_queue, *wait_queues, error), "queue", imports),
                         exchanges=adopt(exchanges, "exchange", imports),
                         bindings=adopt(bindings, "binding", imports),
                         policies=adopt(tuple(policies), "policy", imports))


def consumer_exchanges(plan: RetryablePlan[Any]) -> tuple[str, ...]:
    """Retries in republish mode go to the retry exchange; parking to the error exchange."""
    return (plan.retry_exchange, plan.error_exchange)


def redrive_exchanges(plan: RetryablePlan[Any]) -> tuple[str, ...]:
    """An operator may redrive a parked message to `Q.requeue`, which reaches only `Q`."""
    return (plan.requeue_exchange,)


def topic_permissions(own: Iterable[RetryablePlan[Any]]) -> tuple[TopicGrant, ...]:
    """No topic exchange of its own to guard."""
    return ()


def retry_exchange(plan: RetryablePlan[Any]) -> str | None:
    return plan.retry_exchange


def contract(plan: RetryablePlan[TiersRetry], vhost: str) -> dict[str, object]:
    """Names no strategy: `tiers` is the contract schema's default, and the clients that predate strategies read
    every contract so."""
    return contract_of(plan, vhost, {
        "retry_exchange": plan.retry_exchange,
        "reject_routes_to": plan.tiers[0].routing_key,
        "tiers": [{"routing_key": t.routing_key, "queue": t.queue, "delay_ms": t.delay_ms} for t in plan.tiers],
    })


REVIEWED_CONTRACT_KEYS = frozenset({"tiers", "reject_routes_to", "retry_exchange"})
"""A consumer never acts on `reject_routes_to` (the broker dead-letters a reject to the first tier itself)."""


def contract_breaks(old: Mapping[str, Any], new: Mapping[str, Any],
                    kept: Mapping[str, str] | None = None) -> list[str]:
    """A removed tier strands the republished retries still routed to it (from the step retire of the drain that
    keeps it, if one does: until then it stays bound); a moved retry exchange fails them."""
    breaks = []
    new_keys = {t["routing_key"] for t in new.get("tiers", [])}
    for tier in old.get("tiers", []):
        if tier["routing_key"] in new_keys:
            continue
        key, exchange = tier["routing_key"], new.get("retry_exchange")
        lost = "lose those messages (no queue is bound to that key; the exchange drops them)"
        if (migration := (kept or {}).get(tier.get("queue", ""))) is not None:
            breaks.append(f"tier {key} removed: migration {migration} keeps it bound until its step retire, so "
                          f"consumers in republish mode that still publish retries with routing key {key} to "
                          f"{exchange} reach it and wait as before until then; from that step on they {lost}: "
                          "redeploy them with the new contract before it")
        else:
            breaks.append(f"tier {key} removed: consumers in republish mode that still publish retries with routing "
                          f"key {key} to {exchange} {lost}")
    if old.get("retry_exchange") != new.get("retry_exchange"):
        breaks.append(f"retry exchange {old.get('retry_exchange')} → {new.get('retry_exchange')}: consumers still "
                      f"publishing retries to {old.get('retry_exchange')} fail once it is deleted (channel error 404 "
                      "NOT_FOUND)")
    return breaks


def path_problems(plan: RetryablePlan[Any], route: Route) -> list[Problem]:
    """A retry returns to exactly `Q` (through `Q.requeue`), and each tier's routing key reaches exactly its
    wait queue."""
    queue = plan.config.name
    problems = []
    requeue = route(plan.requeue_exchange, None)
    if requeue != {queue}:
        problems.append(Problem("", RETRY_PATH_STRAYS, f'retry path of "{queue}" returns to {sorted(requeue or [])} '
                                f'instead of exactly "{queue}"; remove other bindings from "{plan.requeue_exchange}"'))
    for tier in plan.tiers:
        reached = route(plan.retry_exchange, tier.routing_key)
        if reached != {tier.queue}:
            problems.append(Problem("", TIER_MISROUTED, f'"{plan.retry_exchange}" routes {tier.routing_key} to '
                                    f'{sorted(reached or [])} instead of exactly "{tier.queue}"'))
    return problems

