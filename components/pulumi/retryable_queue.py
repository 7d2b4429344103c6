"""RetryableQueue: one queue with delayed retries and an error (parking) queue, as its strategy plans them."""

import functools
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict, cast

import pulumi

from ..config.load import check_queue_levels, load_queue
from ..model import naming
from ..model.plan_types import RetryablePlan
from ..model.problems import ConfigError
from ..model.stack_config import Queue
from ..plan import layout
from ..plan.paths import inventory, retryable_path
from ..plan.planner import plan_retryable
from ..strategies import strategy_of
from .args_to_config import load_typed
from .args_types import QueueSpec, RetryContract
from .arguments import PROTECT_QUEUES, RETAIN_ERROR_QUEUES, Option, check_args, input_string, instance_of, mapping_or
from .delay_levels import DelayLevels
from .foreign import accepts_other_languages
from .resources import Scope, declare_guarded

TYPE_TOKEN = "rabbitmq-retry:index:RetryableQueue"


class RetryableQueueArgs(TypedDict):
    """Checked at run time too: an unknown, missing or mistyped key is a ConfigError naming it."""

    vhost: pulumi.Input[str]
    """Vhost of every object. Immutable: changing it replaces them all (queued messages are lost)."""
    queue: NotRequired[QueueSpec]
    """The queue, in the stack file's queues[] shape, with a retry block. It decides names and how many resources
    exist."""
    protect_queues: NotRequired[bool]
    """Protect every queue: Pulumi refuses to delete or replace them."""
    retain_error_queues: NotRequired[bool]
    """retain_on_delete on the error queue: removing the component leaves parked messages on the broker."""


class RetryableQueuePythonArgs(RetryableQueueArgs):
    """Python only: what no other language can send, objects of this package (not in the package schema)."""

    plan: NotRequired[RetryablePlan]
    """Instead of `queue`: the queue as a vhost's plan has it (`VhostPlan.retryables`), as the Vhost component
    passes it, so that it is planned once."""
    delay_levels: NotRequired[DelayLevels]
    """Strategy `levels` only, and required for it: the DelayLevels component of the vhost. The queue retries
    through its levels, computes its contract from them, and its delivery binding waits for their delivery
    exchange."""


OPTIONS = (
    Option("vhost", input_string, missing='the vhost of every object, e.g. "payments"'),
    Option("queue", mapping_or(Queue, "queues[]")),
    Option("plan", instance_of(RetryablePlan, "a RetryablePlan (VhostPlan.retryables)")),
    PROTECT_QUEUES,
    RETAIN_ERROR_QUEUES,
    Option("delay_levels", instance_of(DelayLevels, "the DelayLevels component of the queue's vhost")),
)
QUEUE_EXAMPLE = '{"name": "billing", "retry": {"delays": ["5s", "1m"]}}'


def _plan(where: str, checked: Mapping[str, Any]) -> RetryablePlan:
    """The plan given, or the queue's own, planned once with the levels of the DelayLevels component given."""
    levels: DelayLevels | None = checked.get("delay_levels")
    if "plan" not in checked and "queue" not in checked:
        raise ConfigError([(f"{where}.queue", f"missing; the queue in the stack config's queues[] shape, e.g. "
                            f"{QUEUE_EXAMPLE}")])
    if "plan" in checked and "queue" in checked:
        raise ConfigError([(f"{where}.plan", "the plan holds the queue; pass one of queue and plan")])
    if "plan" in checked:
        plan: RetryablePlan = checked["plan"]
        queue = plan.config
    else:
        queue = checked["queue"]
        config = levels.plan.config if levels is not None else None
        if not isinstance(queue, Queue):
            queue = load_typed(functools.partial(load_queue, delay_levels=config, levels_path=f"{where}.delay_levels"),
                               queue, QueueSpec, f"{where}.queue")
        elif config is not None:
            check_queue_levels(queue, f"{where}.queue", config, f"{where}.delay_levels")
    if queue.retry is None:
        raise ConfigError([(f"{where}.queue.retry", "missing; a retryable queue needs retry.delays, e.g. [1s, 10s]")])
    uses_levels = strategy_of(queue.retry).USES_DELAY_LEVELS
    if uses_levels and levels is None:
        raise ConfigError([(f"{where}.delay_levels", f"missing; retry.strategy {queue.retry.strategy} retries through "
                            "the vhost's delay levels: pass its DelayLevels component")])
    if not uses_levels and levels is not None:
        raise ConfigError([(f"{where}.delay_levels", f"the queue's retry.strategy is {queue.retry.strategy}, which "
                            "has no delay levels; remove delay_levels")])
    if "plan" in checked:
        if levels is not None and plan.delay_levels != levels.plan.config:
            raise ConfigError([(f"{where}.delay_levels", "not the levels the plan was made with; pass the DelayLevels "
                                "component of the plan's vhost")])
        return plan
    return plan_retryable(queue, f"{where}.queue", None if levels is None else levels.plan.config)


def _levels_of_vhost(where: str, vhost: object, levels: DelayLevels | None) -> DelayLevels | None:
    """The DelayLevels component a queue retries through, refused when it is in another vhost."""
    if levels is not None and isinstance(vhost, str) and isinstance(levels.vhost, str) and vhost != levels.vhost:
        raise ConfigError([(f"{where}.delay_levels", f'the DelayLevels component is in vhost "{levels.vhost}", '
                            f'not "{vhost}"; pass the one of vhost "{vhost}"')])
    return levels


class RetryableQueue(pulumi.ComponentResource):
    """Input queue `Q`, direct exchange `Q.retry`, wait queues `Q.wait.<n>` (TTL by policy),
    fanout `Q.requeue` bound only to `Q`, and `Q.error` exchange and queue for parked messages. With
    `retry.strategy: native` only `Q` (its delays in its policy) and `Q.error`: the message waits in `Q`.
    With `levels` `Q`, `Q.error` and `Q`'s binding to the delivery exchange of its `delay_levels`."""

    queue_name: pulumi.Output[str]
    """The input queue consumers read from."""
    retry_exchange: pulumi.Output[str | None]
    """Direct exchange of the wait tiers: publish with a tier's routing key to retry after its delay
    (None for strategies native and levels)."""
    wait_queues: pulumi.Output[list[str]]
    """Wait queues, tier 1 first (none for strategies native and levels), then those a migration drains."""
    error_exchange: pulumi.Output[str]
    """Fanout exchange to park a message that is out of retries."""
    error_queue: pulumi.Output[str]
    """Where parked messages wait for a person."""
    contract: pulumi.Output[RetryContract]
    """The retry contract: vhost, queue, how to retry (strategy and its exchanges and delays), max retries,
    attempt header, error path."""

    @accepts_other_languages(RetryableQueueArgs, "RetryableQueue")
    def __init__(self, name: str, args: RetryableQueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        where = f"RetryableQueue({name})"
        checked = check_args(where, args, OPTIONS)
        plan = _plan(where, checked)
        vhost = checked["vhost"]
        levels = _levels_of_vhost(where, vhost, checked.get("delay_levels"))
        super().__init__(TYPE_TOKEN, name, None, opts)
        self.plan: RetryablePlan = plan
        """What it registers (not an output: Python only)."""
        scope = Scope(self, vhost, protect_queues=checked.get("protect_queues", False),
                      retain_error_queues=checked.get("retain_error_queues", False))
        if levels is not None:
            scope.names[("Exchange", naming.DELIVERY_EXCHANGE)] = levels.delivery_exchange
        declare_guarded(scope, name, layout.RETRYABLE_QUEUE, plan, opts, lambda vhost_name: inventory(vhost_name, [
            retryable_path(plan, levels.plan if levels is not None else None)]))

        retry_exchange = strategy_of(plan.retry).retry_exchange(plan)
        self.queue_name = scope.names[("Queue", plan.config.name)]
        self.retry_exchange = (scope.names[("Exchange", retry_exchange)] if retry_exchange is not None
                               else pulumi.Output.from_input(None))
        self.wait_queues = pulumi.Output.all(*(scope.names[("Queue", t.queue)] for t in (*plan.tiers, *plan.draining)))
        self.error_exchange = scope.names[("Exchange", plan.error_exchange)]
        self.error_queue = scope.names[("Queue", plan.error_queue)]
        self.contract = pulumi.Output.from_input(vhost).apply(lambda v: cast(RetryContract, plan.contract(v)))
        self.register_outputs({
            "queue_name": self.queue_name,
            "retry_exchange": self.retry_exchange,
            "wait_queues": self.wait_queues,
            "error_exchange": self.error_exchange,
            "error_queue": self.error_queue,
            "contract": self.contract,
        })
