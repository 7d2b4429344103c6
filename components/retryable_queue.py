"""RetryableQueue: one queue with delayed retries through TTL wait tiers and an error (parking) queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi

from .config import ConfigError, Queue, load_queue
from .plan import RetryablePlan, plan_retryable
from .resources import declare_binding, declare_exchange, declare_policy, declare_queue

TYPE_TOKEN = "rabbitmq-retry:index:RetryableQueue"


class RetryableQueueArgs(TypedDict):
    vhost: pulumi.Input[str]
    """Vhost of every object. Immutable: changing it replaces them all (queued messages are lost)."""
    queue: Queue | Mapping[str, Any]
    """The queue, parsed or in the stack config's `queues[]` shape, with a `retry` block.
    Plain: it decides names and how many resources exist."""
    protect_queues: NotRequired[bool]
    """`protect` every queue: Pulumi refuses to delete or replace them."""
    retain_error_queue: NotRequired[bool]
    """`retain_on_delete` on the error queue: removing the component leaves parked messages on the broker."""


class RetryableQueue(pulumi.ComponentResource):
    """Input queue `Q`, direct exchange `Q.retry`, wait queues `Q.wait.<n>` (TTL by policy),
    fanout `Q.requeue` bound only to `Q`, and `Q.error` exchange and queue for parked messages."""

    queue_name: pulumi.Output[str]
    """The input queue consumers read from."""
    retry_exchange: pulumi.Output[str]
    """Direct exchange of the wait tiers: publish with a tier's routing key to retry after its delay."""
    wait_queues: pulumi.Output[list[str]]
    """Wait queues, tier 1 first."""
    error_exchange: pulumi.Output[str]
    """Fanout exchange to park a message that is out of retries."""
    error_queue: pulumi.Output[str]
    """Where parked messages wait for a person."""
    contract: pulumi.Output[dict[str, Any]]
    """The retry contract: vhost, queue, retry exchange, tiers, max retries, attempt header, error path."""

    def __init__(self, name: str, args: RetryableQueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        queue = args["queue"]
        if not isinstance(queue, Queue):
            queue = load_queue(queue, f"RetryableQueue({name}).queue")
        if queue.retry is None:
            raise ConfigError([(f"RetryableQueue({name}).queue.retry",
                                "missing; a retryable queue needs retry.delays, e.g. [1s, 10s]")])
        super().__init__(TYPE_TOKEN, name, None, opts)
        self.plan: RetryablePlan = plan_retryable(queue)
        vhost = args["vhost"]
        child = pulumi.ResourceOptions(parent=self)
        queue_opts = pulumi.ResourceOptions(parent=self, protect=True if args.get("protect_queues") else None)
        error_opts = pulumi.ResourceOptions.merge(
            queue_opts, pulumi.ResourceOptions(retain_on_delete=True if args.get("retain_error_queue") else None))

        policies = {p.name: declare_policy(name, p, vhost, child) for p in self.plan.policies}
        queues = {q.name: declare_queue(name, q, vhost, error_opts if q.role == "error" else queue_opts,
                                        policies.get(q.name)) for q in self.plan.queues}
        exchanges = {e.name: declare_exchange(name, e, vhost, child) for e in self.plan.exchanges}
        exchange_names = {key: exchange.name for key, exchange in exchanges.items()}
        queue_names = {key: q.name for key, q in queues.items()}
        for binding in self.plan.bindings:
            declare_binding(name, binding, vhost, exchange_names, queue_names, child)

        self.queue_name = queues[queue.name].name
        self.retry_exchange = exchanges[self.plan.retry_exchange].name
        self.wait_queues = pulumi.Output.all(*(queues[t.queue].name for t in self.plan.tiers))
        self.error_exchange = exchanges[self.plan.error_exchange].name
        self.error_queue = queues[self.plan.error_queue].name
        self.contract = pulumi.Output.from_input(vhost).apply(self.plan.contract)
        self.register_outputs({
            "queue_name": self.queue_name,
            "retry_exchange": self.retry_exchange,
            "wait_queues": self.wait_queues,
            "error_exchange": self.error_exchange,
            "error_queue": self.error_queue,
            "contract": self.contract,
        })
