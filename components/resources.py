"""Plan entries to `pulumi_rabbitmq` resources, one to one, with the provider's traps closed.

Shared by the components; see ../shared/notes/provider.md for why each input is set as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_rabbitmq as rabbitmq

from .plan import BindingPlan, ExchangePlan, PolicyPlan, QueuePlan


def declare_queue(component: str, queue: QueuePlan, vhost: pulumi.Input[str],
                  opts: pulumi.ResourceOptions, policy: rabbitmq.Policy | None = None) -> rabbitmq.Queue:
    """`policy` is created first: a wait queue that received a message before its TTL policy
    existed would keep that message forever (a policy never changes the expiry of queued messages)."""
    if policy is not None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy]))
    return rabbitmq.Queue(
        f"{component}-{queue.key}",
        name=queue.name,
        vhost=vhost,
        settings=rabbitmq.QueueSettingsArgs(
            durable=True,  # the provider defaults to false; quorum queues and RabbitMQ 4.3 refuse that
            auto_delete=False,
            # Typed values only survive through arguments_json; x-queue-type is always present so
            # that RabbitMQ 4 reading it back does not plan a replacement on every `pulumi up`.
            arguments_json=queue.arguments_json,
        ),
        opts=opts,
    )


def declare_exchange(component: str, exchange: ExchangePlan, vhost: pulumi.Input[str],
                     opts: pulumi.ResourceOptions) -> rabbitmq.Exchange:
    return rabbitmq.Exchange(
        f"{component}-{exchange.key}",
        name=exchange.name,
        vhost=vhost,
        settings=rabbitmq.ExchangeSettingsArgs(type=exchange.type, durable=True, auto_delete=False),
        opts=opts,
    )


def declare_binding(component: str, binding: BindingPlan, vhost: pulumi.Input[str],
                    exchange_names: Mapping[str, pulumi.Output[str]], queue_names: Mapping[str, pulumi.Output[str]],
                    opts: pulumi.ResourceOptions) -> rabbitmq.Binding:
    """Source and destination are resource outputs when declared in this stack, so that a replaced
    queue or exchange replaces its bindings too (the broker drops them with it)."""
    source: pulumi.Input[str] = binding.source if binding.source_external else exchange_names[binding.source]
    return rabbitmq.Binding(
        f"{component}-{binding.key}",
        vhost=vhost,
        source=source,
        destination=queue_names[binding.destination],
        destination_type="queue",
        routing_key=binding.routing_key,
        arguments_json=binding.arguments_json,
        opts=opts,
    )


def declare_policy(component: str, policy: PolicyPlan, vhost: pulumi.Input[str],
                   opts: pulumi.ResourceOptions) -> rabbitmq.Policy:
    return rabbitmq.Policy(
        f"{component}-{policy.key}",
        name=policy.name,
        vhost=vhost,
        policy=rabbitmq.PolicyPolicyArgs(
            pattern=policy.pattern,
            priority=policy.priority,
            apply_to=policy.apply_to,
            definition=dict(policy.definition),
        ),
        opts=opts,
    )
