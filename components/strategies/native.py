"""Strategy `native`: RabbitMQ 4.3's delayed retry of quorum queues.

A rejected message (`basic.reject(requeue=true)`) waits in the input queue itself, `min(min_delay × n,
max_delay)` before its n-th redelivery; past the delivery limit (`max_retries`) the broker dead-letters it, at
least once, to the error exchange. Besides `Q`, only `Q.error` and `Q.requeue` exist: the fanout exchange bound to
`Q` alone, where an operator redrives a parked message so that it reaches `Q` and no other queue bound to the
exchange it was first published to.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from rabbitmq_retry_client.contract import NATIVE_RETRY_CALL

from ..model import naming, wire
from ..model.fields import INVALID, Invalid, Problems, integer, optional
from ..model.plan_types import (
    BindingPlan,
    ExchangePlan,
    PlannedBy,
    RetryablePlan,
    TopicGrant,
    adopt,
    error_policies,
    error_queue_plans,
    limit_sources,
    parking_input_queue,
    queue_limits,
    queue_policy,
)
from ..model.problems import Problem
from ..model.stack_config import MAX_RETRIES_CEILING, DelayLevels, Queue, Retry
from .base import FeatureFlag, Route
from .common import contract_of, parse_error_queue, positive_duration

PLANNER = cast("PlannedBy", sys.modules[__name__])  # each plan it makes records it (`planned_by`)

NAME = "native"
RETRY_KEYS = ("min_delay", "max_delay")
USES_DELAY_LEVELS = False
DELIVERY_LIMIT_IS_MAX_RETRIES = True
MIN_BROKER_VERSION = (wire.NATIVE_DELAYED_RETRY.minimum, "strategy native (the delayed-retry-* policy keys)")
"""RabbitMQ 4.3.0 refuses the `delayed-retry-*` policy keys; 4.3.1 is the first version that takes them."""
FEATURE_FLAG = FeatureFlag("rabbitmq_4.3.0", (4, 3, 0), "strategy native (RabbitMQ 4.3's delayed retry)")
"""The 4.3 series' own flag: a cluster upgraded from 4.2 keeps it disabled until an operator enables it."""
RETRY_CALL = NATIVE_RETRY_CALL
"""The only call RabbitMQ 4.3 counts toward the delivery limit and delays: `basic.nack(requeue=true)` is a
"return" that neither counts nor waits, so a nack loop never ends (the contract's schema fixes it)."""
ATTEMPT_HEADER = "x-delivery-count"
"""Set by the broker on a redelivery: the failed deliveries so far (absent on the first delivery)."""
REDRIVE_PATH_STRAYS = "redrive-path-strays"
"""`Problem.code`: a redrive does not reach exactly its own queue."""


@dataclass(frozen=True, kw_only=True)
class NativeRetry(Retry):
    strategy: ClassVar[str] = NAME
    min_delay_ms: int
    """The delay after the first failure; the n-th waits `min(n × min, max)`."""
    max_delay_ms: int
    """The cap of the linear delay (default: `min_delay`)."""


def parse_retry(p: Problems, path: str, data: Mapping[str, Any]) -> NativeRetry | Invalid:
    """The broker waits `min(min_delay × n, max_delay)` before the n-th redelivery and dead-letters past
    `max_retries`, the input queue's delivery limit."""
    if "min_delay" not in data:
        p.add(f"{path}.min_delay", "missing; strategy native needs the delay after the first failure, e.g. 1s")
    if "max_retries" not in data:
        p.add(f"{path}.max_retries", "missing; strategy native needs it (it is the input queue's delivery limit)")
    min_delay = optional(data, "min_delay", lambda v: positive_duration(p, f"{path}.min_delay", v), INVALID)
    max_delay = optional(data, "max_delay", lambda v: positive_duration(p, f"{path}.max_delay", v), min_delay)
    max_retries = optional(data, "max_retries",
                           lambda v: integer(p, f"{path}.max_retries", v, 1, MAX_RETRIES_CEILING), INVALID)
    retention, error_max_length = parse_error_queue(p, path, data)
    if isinstance(min_delay, int) and isinstance(max_delay, int) and max_delay < min_delay:
        p.add(f"{path}.max_delay", f"{data.get('max_delay')!r} is shorter than min_delay {data.get('min_delay')!r}; "
              "the delay grows from min_delay up to max_delay")
        return INVALID
    if (isinstance(min_delay, int) and isinstance(max_delay, int) and isinstance(max_retries, int)
            and retention is not INVALID and error_max_length is not INVALID):
        return NativeRetry(max_retries=max_retries, error_retention_ms=retention, error_max_length=error_max_length,
                           min_delay_ms=min_delay, max_delay_ms=max_delay)
    return INVALID


def check_queue(p: Problems, path: str, name: str, queue_type: str) -> bool:
    """Quorum queues only: classic queues have no delayed retry."""
    if queue_type == "classic":
        p.add(f"{path}.retry.strategy", "native is RabbitMQ's delayed retry of quorum queues; set type: quorum "
              "or use strategy tiers for a classic queue")
        return False
    return True


def owned_names(queue: str, retry: Retry) -> tuple[list[str], list[str]]:
    """The message waits in `Q` itself: only the error queue and exchange, and the redrive exchange besides."""
    return naming.derived_queue_names(queue, 0), [naming.requeue_exchange(queue), naming.error_exchange(queue)]


def plan(queue: Queue, retry: NativeRetry, path: str, levels: DelayLevels | None,
         imports: tuple[str, ...]) -> RetryablePlan[NativeRetry]:
    """The delays and the limit live in the queue's policy, so editing them never replaces the queue. Integers
    only: a string `delayed-retry-min` silently turns the feature off, and the provider sends digit strings as
    integers."""
    error, error_exchange, error_binding = error_queue_plans(queue)
    input_queue = parking_input_queue(queue)
    requeue_x = naming.requeue_exchange(queue.name)
    # A redrive's only route to `Q` alone: `Q.requeue` is bound to nothing else.
    requeue_exchange = ExchangePlan(naming.REQUEUE_EXCHANGE_KEY, requeue_x, "fanout")
    requeue_binding = BindingPlan(naming.REQUEUE_BINDING_KEY, requeue_x, queue.name)
    definition = {**queue_limits(queue), wire.DELAYED_RETRY_TYPE.key: "failed",
                  wire.DELAYED_RETRY_MIN.key: str(retry.min_delay_ms),
                  wire.DELAYED_RETRY_MAX.key: str(retry.max_delay_ms)}
    sources = {**limit_sources(path, queue), wire.DELIVERY_LIMIT.key: f"{path}.retry.max_retries",
               wire.DELAYED_RETRY_TYPE.key: f"{path}.retry.strategy",
               wire.DELAYED_RETRY_MIN.key: f"{path}.retry.min_delay",
               wire.DELAYED_RETRY_MAX.key: f"{path}.retry.max_delay"}
    policies = (queue_policy(naming.QUEUE_POLICY_KEY, queue.name, queue.policy_priority, definition, sources),
                *error_policies(queue, retry, path))
    return RetryablePlan(config=queue, retry=retry, planned_by=PLANNER,
                         tiers=(), queues=adopt((input_queue, error), "queue", imports),
                         exchanges=adopt((requeue_exchange, error_exchange), "exchange", imports),
                         bindings=adopt((requeue_binding, error_binding), "binding", imports),
                         policies=adopt(policies, "policy", imports))


def consumer_exchanges(plan: RetryablePlan[Any]) -> tuple[str, ...]:
    """The broker retries: a consumer publishes only to park."""
    return (plan.error_exchange,)


def redrive_exchanges(plan: RetryablePlan[Any]) -> tuple[str, ...]:
    """An operator redrives a parked message to `Q.requeue`, which reaches only `Q`."""
    return (plan.requeue_exchange,)


def topic_permissions(own: Iterable[RetryablePlan[Any]]) -> tuple[TopicGrant, ...]:
    """No topic exchange of its own to guard."""
    return ()


def retry_exchange(plan: RetryablePlan[Any]) -> str | None:
    return None


def contract(plan: RetryablePlan[NativeRetry], vhost: str) -> dict[str, object]:
    return contract_of(plan, vhost, {"retry_call": RETRY_CALL, "min_delay_ms": plan.retry.min_delay_ms,
                                     "max_delay_ms": plan.retry.max_delay_ms}, NAME, ATTEMPT_HEADER)


REVIEWED_CONTRACT_KEYS = frozenset({"min_delay_ms", "max_delay_ms"})
"""The delays are the broker's: a consumer only makes the retry call."""


def contract_breaks(old: Mapping[str, Any], new: Mapping[str, Any],
                    kept: Mapping[str, str] | None = None) -> list[str]:
    """Nothing of its own breaks a running consumer."""
    return []


def path_problems(plan: RetryablePlan[Any], route: Route) -> list[Problem]:
    """The message waits in its own queue: only the redrive path to check, which reaches exactly `Q`."""
    reached = route(plan.requeue_exchange, None)
    if reached != {plan.config.name}:
        return [Problem("", REDRIVE_PATH_STRAYS, f'redrive path of "{plan.config.name}" reaches '
                        f'{sorted(reached or [])} instead of exactly "{plan.config.name}"; remove other bindings from '
                        f'"{plan.requeue_exchange}"')]
    return []
