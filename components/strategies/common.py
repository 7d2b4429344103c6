"""What every strategy's module shares: parsing its `retry` block's error queue keys and positive delays, the keys
of a contract every strategy writes, and reading contract values for a reviewer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import naming
from ..model.durations import format_duration
from ..model.fields import INVALID, Invalid, Problems, duration, integer, optional
from ..model.plan_types import RetryablePlan


def parse_error_queue(p: Problems, path: str, data: Mapping[str, Any]) -> tuple[int | Invalid | None,
                                                                              int | Invalid | None]:
    """`error_retention` and `error_max_length`, which every strategy takes."""
    retention = optional(data, "error_retention", lambda v: duration(p, f"{path}.error_retention", v), None)
    error_max_length = optional(data, "error_max_length", lambda v: integer(p, f"{path}.error_max_length", v, 1),
                                None)
    return retention, error_max_length


def contract_of(plan: RetryablePlan[Any], vhost: str, own: Mapping[str, object], strategy: str | None = None,
                attempt_header: str = naming.ATTEMPT_HEADER) -> dict[str, object]:
    """A queue's contract: `strategy` (none for the schema's default), where the queue is, the strategy's `own` keys,
    then its limits, its attempt header and its error path, in the order every contract has them."""
    return {**({"strategy": strategy} if strategy is not None else {}), "vhost": vhost, "queue": plan.config.name,
            "queue_type": plan.config.queue_type, **own, "max_retries": plan.retry.max_retries,
            "delivery_limit": plan.config.delivery_limit, "attempt_header": attempt_header,
            "error_exchange": plan.error_exchange, "error_queue": plan.error_queue}


REDEPLOY = "consumers written for the old value must be redeployed before this is applied"
"""What any other change of a contract's value means to its running consumers."""


def contract_number(value: Any) -> float | None:
    """A number of a contract (Pulumi carries them as floats); None for anything else, a boolean included."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def contract_ms(value: Any) -> str:
    """`1s`: a contract's milliseconds as a reviewer reads them, as the stack file writes a duration."""
    number = contract_number(value)
    return format_duration(number) if number is not None else str(value)


def positive_duration(p: Problems, path: str, value: object) -> int | Invalid:
    """A delay RabbitMQ takes as `delayed-retry-min`/`-max`: a whole, positive number of milliseconds."""
    parsed = duration(p, path, value)
    if parsed is not INVALID and parsed < 1:
        p.add(path, f"{value!r} is not positive; RabbitMQ needs at least 1ms")
        return INVALID
    return parsed
