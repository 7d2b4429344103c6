"""Plan entries to `pulumi_rabbitmq` resources, one to one, with the provider's traps closed.

Every resource the components register is declared here: one builder per kind of `layout.py`, called by
`declare_children` in the layout's order. Why each input is set as it is: docs/provider.md and the comments below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_rabbitmq as rabbitmq

from ..model import naming
from ..model.plan_types import (
    BindingPlan,
    ExchangePlan,
    PermissionPlan,
    PolicyPlan,
    QueuePlan,
    ShovelPlan,
    UserLimitsPlan,
)
from ..model.stack_config import Vhost as VhostConfig
from ..plan.layout import Slot, children
from ..user_limits import UserLimits
from .guard import guarded, path_guard

DEFAULT_AMQP_PORT = 5672


@dataclass(frozen=True)
class ShovelAccess:
    """How the shovels of a stack connect: as the stack's one shovel user, to the broker it deploys to."""

    user: pulumi.Input[str]
    """The shovel user's name, an output of its User resource (so that shovels wait for it)."""
    password: pulumi.Input[str]
    amqp_port: int = DEFAULT_AMQP_PORT
    """`rabbitmq-retry:amqp_port`: the broker's AMQP port as its shovels reach it (they run on the broker)."""


@dataclass
class Scope:
    """The children of one component: what they share, and what is declared so far. A child refers to an
    earlier one through its resource, never by a plain name, so that replacing one replaces the other."""

    component: pulumi.ComponentResource
    vhost: pulumi.Input[str]
    """Becomes the VHost resource's name output once this component creates it."""
    protect_queues: bool = False
    retain_error_queues: bool = False
    passwords: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    shovel_access: ShovelAccess | None = None
    """The shovel user, for a vhost with a migration that moves a queue."""
    names: dict[tuple[str, str], pulumi.Output[str]] = field(default_factory=dict)
    """(kind, physical name) → the name output of what declares it, for inputs that name it."""
    resources: dict[tuple[str, str], pulumi.Resource] = field(default_factory=dict)
    """(kind, physical name) → the resource (or nested component) that declares it, to depend on."""
    guard: pulumi.Resource | None = None
    """The path guard every child waits for (`open_path_guard`): its update, which refuses a change that would
    delete a part of a path holding messages, comes before any child is touched."""
    declared: list[pulumi.Resource] = field(default_factory=list)
    """Every child declared so far, for the removal guard to depend on (`close_path_guard`)."""

    def add(self, kind: str, name: str, resource: pulumi.Resource, output: pulumi.Output[str] | None = None) -> None:
        self.resources[(kind, name)] = resource
        self.record(resource)
        if output is not None:
            self.names[(kind, name)] = output

    def record(self, resource: pulumi.Resource) -> None:
        if all(resource is not r for r in self.declared):
            self.declared.append(resource)

    def broker_provider(self) -> pulumi.ProviderResource | None:
        """The explicit `rabbitmq` provider the children inherit (the component's `provider`/`providers` option, or
        its parent's), None for the default provider: the guards read the queues on its broker."""
        return self.component.get_provider("rabbitmq:index/queue:Queue")

    def _after_guard(self, depends_on: list[pulumi.Resource] | None) -> list[pulumi.Resource] | None:
        return depends_on if self.guard is None else [self.guard, *(depends_on or ())]

    def options(self, *, depends_on: list[pulumi.Resource] | None = None,
                import_id: str | None = None) -> pulumi.ResourceOptions:
        """`import_id`: adopt the object the broker already holds (config `vhosts[].import`); once it is in
        the stack's state the option changes nothing and may be removed."""
        return pulumi.ResourceOptions(parent=self.component, depends_on=self._after_guard(depends_on),
                                      import_=import_id)

    def queue_options(self, *, error_queue: bool = False, depends_on: list[pulumi.Resource] | None = None,
                      import_id: str | None = None) -> pulumi.ResourceOptions:
        """`protect` (Pulumi refuses to delete or replace) every queue, and the vhost that holds them;
        `retain_on_delete` on error queues, so that removing a component leaves parked messages."""
        return pulumi.ResourceOptions(
            parent=self.component, depends_on=self._after_guard(depends_on),
            protect=True if self.protect_queues else None,
            retain_on_delete=True if error_queue and self.retain_error_queues else None, import_=import_id)

    def guarded_queue_options(self, *, error_queue: bool = False, depends_on: list[pulumi.Resource] | None = None,
                              import_id: str | None = None) -> pulumi.ResourceOptions:
        """`queue_options`, and the guard (`guard.py`): the engine's delete of the queue (alone, or as the first
        step of its replacement) fails while the queue holds messages."""
        return pulumi.ResourceOptions.merge(
            self.queue_options(error_queue=error_queue, depends_on=depends_on, import_id=import_id),
            pulumi.ResourceOptions(hooks=guarded(self.broker_provider())))


Builder = Callable[[Scope, str, Any], None]
"""Declares the child `logical name` of one plan entry in a scope, and records it there."""


def declare_vhost(scope: Scope, logical_name: str, vhost: VhostConfig) -> None:
    # Deleting a vhost deletes every queue in it: it is protected like a queue.
    limits = vhost.limits
    resource = rabbitmq.VHost(
        logical_name, name=vhost.name, default_queue_type=vhost.default_queue_type,
        max_connections=None if limits.max_connections is None else str(limits.max_connections),
        max_queues=None if limits.max_queues is None else str(limits.max_queues),
        opts=scope.queue_options())
    scope.record(resource)
    scope.vhost = resource.name


def declare_queue(scope: Scope, logical_name: str, queue: QueuePlan) -> None:
    """The queue's policy is created first: a wait queue that received a message before its TTL policy
    existed would keep that message forever (a policy never changes the expiry of queued messages)."""
    policy = scope.resources.get(("Policy", queue.name))
    resource = rabbitmq.Queue(
        logical_name,
        name=queue.name,
        vhost=scope.vhost,
        settings=rabbitmq.QueueSettingsArgs(
            durable=True,  # the provider defaults to false; quorum queues and RabbitMQ 4.3 refuse that
            auto_delete=False,
            # Typed values only survive through arguments_json; x-queue-type is always present so
            # that RabbitMQ 4 reading it back does not plan a replacement on every `pulumi up`.
            arguments_json=queue.arguments_json,
        ),
        opts=scope.guarded_queue_options(error_queue=queue.role == "error", depends_on=[policy] if policy else None,
                                         import_id=queue.import_id),
    )
    scope.add("Queue", queue.name, resource, resource.name)


def declare_exchange(scope: Scope, logical_name: str, exchange: ExchangePlan) -> None:
    resource = rabbitmq.Exchange(
        logical_name,
        name=exchange.name,
        vhost=scope.vhost,
        settings=rabbitmq.ExchangeSettingsArgs(type=exchange.type, durable=True, auto_delete=False,
                                               arguments=dict(exchange.arguments) or None),
        opts=scope.options(import_id=exchange.import_id),
    )
    scope.add("Exchange", exchange.name, resource, resource.name)


def declare_binding(scope: Scope, logical_name: str, binding: BindingPlan) -> None:
    """Source and destination are resource outputs when declared in this stack, so that a replaced
    queue or exchange replaces its bindings too (the broker drops them with it)."""
    source = binding.source if binding.source_external else scope.names[("Exchange", binding.source)]
    destination_kind = "Queue" if binding.destination_type == "queue" else "Exchange"
    scope.record(rabbitmq.Binding(
        logical_name,
        vhost=scope.vhost,
        source=source,
        destination=scope.names[(destination_kind, binding.destination)],
        destination_type=binding.destination_type,
        routing_key=binding.routing_key,
        arguments_json=binding.arguments_json,
        opts=scope.options(import_id=binding.import_id),
    ))


def _policy_fields(policy: PolicyPlan) -> dict[str, Any]:
    """The `policy` block of a Policy or an OperatorPolicy."""
    return {"pattern": policy.pattern, "priority": policy.priority, "apply_to": policy.apply_to,
            "definition": dict(policy.definition)}


def declare_policy(scope: Scope, logical_name: str, policy: PolicyPlan) -> None:
    resource = rabbitmq.Policy(logical_name, name=policy.name, vhost=scope.vhost,
                               policy=rabbitmq.PolicyPolicyArgs(**_policy_fields(policy)),
                               opts=scope.options(import_id=policy.import_id))
    scope.add("Policy", policy.name, resource)


def declare_operator_policy(scope: Scope, logical_name: str, policy: PolicyPlan) -> None:
    scope.record(rabbitmq.OperatorPolicy(logical_name, name=policy.name, vhost=scope.vhost,
                                         policy=rabbitmq.OperatorPolicyPolicyArgs(**_policy_fields(policy)),
                                         opts=scope.options(import_id=policy.import_id)))


def declare_user(scope: Scope, logical_name: str, grant: PermissionPlan) -> None:
    """The password is made a secret whatever the caller passed: it never shows in a preview or an output."""
    resource = rabbitmq.User(logical_name, name=grant.user, password=pulumi.Output.secret(scope.passwords[grant.user]),
                             tags=[], opts=scope.options())
    scope.add("User", grant.user, resource, resource.name)


def declare_permissions(scope: Scope, logical_name: str, grant: PermissionPlan) -> None:
    resource = rabbitmq.Permissions(
        logical_name,
        user=scope.names[("User", grant.user)],
        vhost=scope.vhost,
        permissions=rabbitmq.PermissionsPermissionsArgs(configure=grant.configure.regex, write=grant.write.regex,
                                                        read=grant.read.regex),
        opts=scope.options(),
    )
    scope.add("Permissions", grant.user, resource)


def shovel_uri(access: ShovelAccess, vhost: pulumi.Input[str]) -> pulumi.Output[str]:
    """The shovels' source and destination URI (`naming.shovel_uri`), a secret: it holds the shovel user's
    password, which must never show in a preview, a recording or a review."""
    return pulumi.Output.secret(pulumi.Output.all(access.user, access.password, vhost).apply(
        lambda values: naming.shovel_uri(values[0], values[1], access.amqp_port, values[2])))


def declare_shovel(scope: Scope, logical_name: str, shovel: ShovelPlan) -> None:
    """A migration's shovel: created after its destination queue (a shovel whose destination is missing
    declares it as a classic queue), its source queue and the shovel user's permissions. Every input forces
    replacement (docs/provider.md); the stack removes it by config, never by the shovel deleting itself."""
    if scope.shovel_access is None:
        raise ValueError(f"shovel {shovel.name}: the vhost has no shovel access")
    uri = shovel_uri(scope.shovel_access, scope.vhost)
    scope.record(rabbitmq.Shovel(
        logical_name,
        name=shovel.name,
        vhost=scope.vhost,
        info=rabbitmq.ShovelInfoArgs(
            source_uri=uri,
            destination_uri=uri,
            source_queue=shovel.source if shovel.external_source else scope.names[("Queue", shovel.source)],
            destination_queue=scope.names[("Queue", shovel.destination)],
            ack_mode=shovel.ack_mode,
            source_delete_after=shovel.source_delete_after,
        ),
        opts=scope.options(depends_on=[
            scope.resources[("Queue", shovel.destination)],
            *(() if shovel.external_source else (scope.resources[("Queue", shovel.source)],)),  # not the stack's
            scope.resources[("Permissions", shovel.user)]]),
    ))


def declare_topic_permissions(scope: Scope, logical_name: str, grant: PermissionPlan) -> None:
    """RabbitMQ 4.3 refuses topic permissions on an exchange that does not exist yet: they wait for
    each exchange of this stack they name (an external one is the user's to create first)."""
    scope.record(rabbitmq.TopicPermissions(
        logical_name,
        user=scope.names[("User", grant.user)],
        vhost=scope.vhost,
        permissions=[rabbitmq.TopicPermissionsPermissionArgs(exchange=t.exchange, write=t.write.regex,
                                                             read=t.read.regex) for t in grant.topic],
        opts=scope.options(depends_on=[scope.resources[("Exchange", t.exchange)] for t in grant.topic
                                       if ("Exchange", t.exchange) in scope.resources]),
    ))


def declare_user_limits(scope: Scope, logical_name: str, limits: UserLimitsPlan) -> None:
    """A dynamic resource (pulumi-rabbitmq has none for user limits: `user_limits.py`), set once its user exists
    and given the User's name output, so that a replaced user gets its limits again."""
    scope.record(UserLimits(logical_name, scope.names[("User", limits.user)], limits.limits, opts=scope.options()))


BUILDERS: dict[str, Builder] = {
    "VHost": declare_vhost,
    "Queue": declare_queue,
    "Exchange": declare_exchange,
    "Binding": declare_binding,
    "Policy": declare_policy,
    "OperatorPolicy": declare_operator_policy,
    "User": declare_user,
    "Permissions": declare_permissions,
    "TopicPermissions": declare_topic_permissions,
    "Shovel": declare_shovel,
    "UserLimits": declare_user_limits,
}
"""The builder of each `pulumi_rabbitmq` kind of the layouts; nested components bring their own."""


def declare_children(scope: Scope, component: str, layout: Iterable[Slot[Any]], plan: Any,
                     builders: Mapping[str, Builder] = BUILDERS) -> None:
    """Every child of `layout` for `plan`, in the layout's order, named after the component `component`."""
    for slot, logical_name, entry in children(component, layout, plan):
        builders[slot.kind](scope, logical_name, entry)


def declare_guarded(scope: Scope, component: str, layout: Iterable[Slot[Any]], plan: Any,
                    opts: pulumi.ResourceOptions | None, paths: Callable[[str], Mapping[str, Any]]) -> None:
    """`declare_children` of a RetryableQueue or DelayLevels component: within a Vhost the Vhost's path guards guard
    them; used on its own, the component guards its path itself, `paths` making its inventory from the vhost's
    name (`paths.inventory`)."""
    scope.guard = getattr(opts.parent, "path_guard", None) if opts is not None else None
    if scope.guard is not None:
        declare_children(scope, component, layout, plan)
        return
    inventory = pulumi.Output.from_input(scope.vhost).apply(paths)
    open_path_guard(scope, naming.logical_name(component, naming.PATH_GUARD_KEY), inventory)
    declare_children(scope, component, layout, plan)
    close_path_guard(scope, naming.logical_name(component, naming.REMOVAL_GUARD_KEY), inventory)


def open_path_guard(scope: Scope, logical_name: str, inventory: pulumi.Input[Mapping[str, Any]]) -> None:
    """The component's path guard, declared before its other children, each of which waits for it: an update that
    deletes or replaces a part of a path it lists is refused by its `before_update` hook (`guard.py`) before
    the engine touches any child. A Stash: it stores the inventory (`paths.inventory`) and nothing else."""
    scope.guard = pulumi.Stash(logical_name, input=inventory,
                               opts=pulumi.ResourceOptions(parent=scope.component, hooks=pulumi.ResourceHookBinding(
                                   before_update=[path_guard(scope.broker_provider())])))


def close_path_guard(scope: Scope, logical_name: str, inventory: pulumi.Input[Mapping[str, Any]]) -> None:
    """The component's removal guard, declared after its other children and waiting for all of them: when the
    component goes, the engine deletes it first (dependents before what they depend on), and its `before_delete`
    hook refuses while a path it lists holds messages, before any other child is deleted."""
    pulumi.Stash(logical_name, input=inventory,
                 opts=pulumi.ResourceOptions(parent=scope.component, depends_on=list(scope.declared),
                                             hooks=pulumi.ResourceHookBinding(
                                                 before_delete=[path_guard(scope.broker_provider())])))
