"""RetryableQueue: one queue with delayed retries through TTL wait tiers and an error (parking) queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi

from . import layout, naming
from .arguments import PROTECT_QUEUES, RETAIN_ERROR_QUEUES, Option, check_args, input_string, mapping_or
from .config import ConfigError, Queue, load_queue
from .plan import RetryablePlan, plan_retryable
from .resources import Scope, declare_children

TYPE_TOKEN = "rabbitmq-retry:index:RetryableQueue"


class RetryableQueueArgs(TypedDict):
    """Checked at run time too: an unknown, missing or mistyped key is a ConfigError naming it."""

    vhost: pulumi.Input[str]
    """Vhost of every object. Immutable: changing it replaces them all (queued messages are lost)."""
    queue: Queue | Mapping[str, Any]
    """The queue, parsed or in the stack config's `queues[]` shape, with a `retry` block.
    Plain: it decides names and how many resources exist."""
    protect_queues: NotRequired[bool]
    """`protect` every queue: Pulumi refuses to delete or replace them."""
    retain_error_queues: NotRequired[bool]
    """`retain_on_delete` on the error queue: removing the component leaves parked messages on the broker."""
    delay_levels: NotRequired[Mapping[str, Any]]
    """Strategy `levels` only, when `queue` is a mapping: the vhost's `delay_levels` (default 1s up to 1d)."""
    delivery_exchange: NotRequired[pulumi.Input[str]]
    """Strategy `levels` only: the DelayLevels component's `delivery_exchange` output, so that the queue's
    delivery binding waits for it (a plain name binds to an exchange declared elsewhere)."""


OPTIONS = (
    Option("vhost", input_string, missing='the vhost of every object, e.g. "payments"'),
    Option("queue", mapping_or(Queue, "queues[]"),
           missing='the queue in the stack config\'s queues[] shape, e.g. {"name": "billing", '
                   '"retry": {"delays": ["5s", "1m"]}}'),
    PROTECT_QUEUES,
    RETAIN_ERROR_QUEUES,
    Option("delay_levels", mapping_or(dict, "delay_levels")),
    Option("delivery_exchange", input_string),
)


class RetryableQueue(pulumi.ComponentResource):
    """Input queue `Q`, direct exchange `Q.retry`, wait queues `Q.wait.<n>` (TTL by policy),
    fanout `Q.requeue` bound only to `Q`, and `Q.error` exchange and queue for parked messages. With
    `retry.strategy: native` only `Q` (its delays in its policy) and `Q.error`: the message waits in `Q`.
    With `levels` `Q`, `Q.error` and `Q`'s binding to the vhost's delivery exchange (see DelayLevels)."""

    queue_name: pulumi.Output[str]
    """The input queue consumers read from."""
    retry_exchange: pulumi.Output[str | None]
    """Direct exchange of the wait tiers: publish with a tier's routing key to retry after its delay
    (None for strategies native and levels)."""
    wait_queues: pulumi.Output[list[str]]
    """Wait queues, tier 1 first (none for strategies native and levels)."""
    error_exchange: pulumi.Output[str]
    """Fanout exchange to park a message that is out of retries."""
    error_queue: pulumi.Output[str]
    """Where parked messages wait for a person."""
    contract: pulumi.Output[dict[str, Any]]
    """The retry contract: vhost, queue, how to retry (strategy and its exchanges and delays), max retries,
    attempt header, error path."""

    def __init__(self, name: str, args: RetryableQueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        where = f"RetryableQueue({name})"
        checked = check_args(where, args, OPTIONS)
        queue = checked["queue"]
        if not isinstance(queue, Queue):
            queue = load_queue(queue, f"{where}.queue", delay_levels=checked.get("delay_levels"))
        elif "delay_levels" in checked:
            raise ConfigError([(f"{where}.delay_levels", "a parsed queue carries its delay levels; remove it")])
        if queue.retry is None:
            raise ConfigError([(f"{where}.queue.retry",
                                "missing; a retryable queue needs retry.delays, e.g. [1s, 10s]")])
        if "delivery_exchange" in checked and queue.retry.strategy != "levels":
            raise ConfigError([(f"{where}.delivery_exchange", "the queue's retry.strategy is not levels; remove "
                                "delivery_exchange")])
        super().__init__(TYPE_TOKEN, name, None, opts)
        self.plan: RetryablePlan = plan_retryable(queue)
        vhost = checked["vhost"]
        scope = Scope(self, vhost, protect_queues=checked.get("protect_queues", False),
                      retain_error_queues=checked.get("retain_error_queues", False))
        if self.plan.strategy == "levels":
            scope.names[("Exchange", naming.DELIVERY_EXCHANGE)] = pulumi.Output.from_input(
                checked.get("delivery_exchange", naming.DELIVERY_EXCHANGE))
        declare_children(scope, name, layout.RETRYABLE_QUEUE, self.plan)

        self.queue_name = scope.names[("Queue", queue.name)]
        self.retry_exchange = (scope.names[("Exchange", self.plan.retry_exchange)] if self.plan.strategy == "tiers"
                               else pulumi.Output.from_input(None))
        self.wait_queues = pulumi.Output.all(*(scope.names[("Queue", t.queue)] for t in self.plan.tiers))
        self.error_exchange = scope.names[("Exchange", self.plan.error_exchange)]
        self.error_queue = scope.names[("Queue", self.plan.error_queue)]
        self.contract = pulumi.Output.from_input(vhost).apply(self.plan.contract)
        self.register_outputs({
            "queue_name": self.queue_name,
            "retry_exchange": self.retry_exchange,
            "wait_queues": self.wait_queues,
            "error_exchange": self.error_exchange,
            "error_queue": self.error_queue,
            "contract": self.contract,
        })
