"""What a retry strategy is: the one interface every module of `strategies/` implements.

A strategy owns everything that differs between strategies: its `retry` block (config type and parser), the
objects it plans for a retryable queue, the contract a consumer follows and the paths the preview checks.
Everything else (the vhost, plain queues, policies, permissions, the components) is strategy-free and asks the
strategy through this interface; `strategies/__init__.py` maps names to modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..model.fields import Invalid, Problems
from ..model.plan_types import PlannedBy, RetryablePlan, TopicGrant
from ..model.problems import Problem
from ..model.stack_config import DelayLevels, Queue, Retry

Route = Callable[[str, str | None], set[str] | None]
"""Queues a message published to an exchange with a routing key reaches in the planned topology (None when
it cannot be known); `checks.route` bound to one vhost's graph."""
Version = tuple[int, int, int]


@dataclass(frozen=True)
class FeatureFlag:
    """A RabbitMQ feature flag a strategy's queues need enabled on the brokers that have it."""

    name: str
    since: Version
    """The first version that has the flag; an older broker has no such flag to enable (and is refused by
    `MIN_BROKER_VERSION` if it cannot run the strategy)."""
    needed_for: str
    """What of the strategy needs it, as `make doctor` says it."""


class Strategy(PlannedBy, Protocol):
    """A module of `strategies/`; its functions are documented there. What each plan asks of it after (`PlannedBy`:
    `consumer_exchanges`, `redrive_exchanges`, `contract`) is entered through the plan."""

    NAME: str
    """`retry.strategy` in the config and `strategy` in the contract."""
    RETRY_KEYS: tuple[str, ...]
    """The `retry` keys only this strategy takes (`max_retries`, `error_*` belong to every strategy)."""
    USES_DELAY_LEVELS: bool
    """Its queues retry through the vhost's shared delay levels (a DelayLevels component)."""
    DELIVERY_LIMIT_IS_MAX_RETRIES: bool
    """The quorum queue's delivery limit is `max_retries` (the broker parks past it); otherwise the limit is a
    backstop above `max_retries + 1`."""
    MIN_BROKER_VERSION: tuple[Version, str] | None
    """The first RabbitMQ version that runs it, and what it needs from that version (None: every version the
    project supports)."""
    FEATURE_FLAG: FeatureFlag | None
    """The feature flag its queues need enabled (`make doctor` checks it on the live broker), if any."""

    def parse_retry(self, p: Problems, path: str, data: Mapping[str, Any]) -> Retry | Invalid: ...

    def check_queue(self, p: Problems, path: str, name: str, queue_type: str) -> bool: ...

    def owned_names(self, queue: str, retry: Retry) -> tuple[list[str], list[str]]: ...

    def plan(self, queue: Queue, retry: Any, path: str, levels: DelayLevels | None,
             imports: tuple[str, ...]) -> RetryablePlan[Any]: ...

    def topic_permissions(self, own: Iterable[RetryablePlan[Any]]) -> tuple[TopicGrant, ...]: ...

    def retry_exchange(self, plan: RetryablePlan[Any]) -> str | None: ...

    def path_problems(self, plan: RetryablePlan[Any], route: Route) -> list[Problem]: ...

    REVIEWED_CONTRACT_KEYS: frozenset[str]
    """The keys of its contract that `contract_breaks` judges, or that its consumers do not act on; the review
    judges the keys every strategy shares."""

    def contract_breaks(self, old: Mapping[str, Any], new: Mapping[str, Any],
                        kept: Mapping[str, str] | None = None) -> list[str]:
        """What a change of its contract (`old` → `new`, same strategy) means to a reviewer: how consumers still
        running on `old` break under `new`, one sentence each, for `REVIEWED_CONTRACT_KEYS` only. `kept`: the
        queues and exchanges that left the contract but a migration in step drain still declares as before, each
        with that migration's name: what routes there breaks only at the migration's step retire."""
        ...
