"""Vhost: everything one vhost of the stack config declares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_rabbitmq as rabbitmq

from .checks import TopologyError, check_logical_names, check_vhost, stale_policies
from .config import ConfigError, load_vhost
from .config import Vhost as VhostConfig
from .plan import VHOST_KEY, VhostPlan, plan_vhost
from .resources import declare_binding, declare_exchange, declare_policy, declare_queue
from .retryable_queue import RetryableQueue

TYPE_TOKEN = "rabbitmq-retry:index:Vhost"


class VhostArgs(TypedDict):
    vhost: VhostConfig | Mapping[str, Any]
    """The vhost, parsed or in the stack config's `vhosts[]` shape. Plain: it decides every name."""
    protect_queues: NotRequired[bool]
    """`protect` every queue (and the vhost itself when this stack creates it)."""
    retain_error_queues: NotRequired[bool]
    """`retain_on_delete` on every error queue."""
    passwords: NotRequired[Mapping[str, pulumi.Input[str]]]
    """Password of each application user, by user name; pass secrets (`Config.require_secret`)."""


class Vhost(pulumi.ComponentResource):
    """A vhost (created unless `existing`; `/` never is) with its exchanges, plain queues, retryable
    queues, bindings and policies."""

    vhost_name: pulumi.Output[str]
    """The vhost's name; an output of the VHost resource when this stack creates it."""
    queues: pulumi.Output[list[str]]
    """Every queue this component declares, retry machinery included."""
    retry_contracts: pulumi.Output[dict[str, dict[str, Any]]]
    """Retry contract of each retryable queue, by queue name."""

    def __init__(self, name: str, args: VhostArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        config = args["vhost"]
        if not isinstance(config, VhostConfig):
            config = load_vhost(config, f"Vhost({name}).vhost")
        self.plan: VhostPlan = plan_vhost(config)
        if problems := check_vhost(self.plan) + check_logical_names([(name, self.plan)]):
            raise TopologyError(f'vhost "{config.name}"', problems)
        passwords = args.get("passwords") or {}
        if missing := [g.user for g in self.plan.permissions if g.user not in passwords]:
            raise ConfigError([(f"Vhost({name}).passwords", f"no password for {', '.join(missing)}; pass a secret "
                                "per application user")])
        super().__init__(TYPE_TOKEN, name, None, opts)
        for warning in stale_policies(self.plan):
            pulumi.log.warn(warning, resource=self)
        protect = bool(args.get("protect_queues"))
        child = pulumi.ResourceOptions(parent=self)
        queue_opts = pulumi.ResourceOptions(parent=self, protect=True if protect else None)

        vhost: pulumi.Input[str] = config.name
        if not config.existing:
            # Deleting a vhost deletes every queue in it: it is protected like a queue.
            limits = config.limits
            vhost = rabbitmq.VHost(
                f"{name}-{VHOST_KEY}", name=config.name, default_queue_type=config.default_queue_type,
                max_connections=None if limits.max_connections is None else str(limits.max_connections),
                max_queues=None if limits.max_queues is None else str(limits.max_queues),
                opts=queue_opts).name

        exchanges = {e.name: declare_exchange(name, e, vhost, child) for e in self.plan.exchanges}
        policies = {p.name: declare_policy(name, p, vhost, child) for p in self.plan.policies}
        queues = {q.name: declare_queue(name, q, vhost, queue_opts, policies.get(q.name)) for q in self.plan.queues}
        retryables = {
            r.config.name: RetryableQueue(f"{name}-{r.config.name}", {
                "vhost": vhost,
                "queue": r.config,
                "protect_queues": protect,
                "retain_error_queue": bool(args.get("retain_error_queues")),
            }, opts=child)
            for r in self.plan.retryables
        }
        # Retryable input queues are bound here, to the vhost's exchanges, like plain queues.
        exchange_names = {key: exchange.name for key, exchange in exchanges.items()}
        queue_names = {**{key: q.name for key, q in queues.items()},
                       **{key: r.queue_name for key, r in retryables.items()}}
        for binding in self.plan.bindings:
            declare_binding(name, binding, vhost, exchange_names, queue_names, child)

        for policy in self.plan.operator_policies:
            rabbitmq.OperatorPolicy(f"{name}-{policy.key}", name=policy.name, vhost=vhost, policy=(
                rabbitmq.OperatorPolicyPolicyArgs(pattern=policy.pattern, priority=policy.priority,
                                                  apply_to=policy.apply_to, definition=dict(policy.definition))),
                opts=child)
        # 4.3 refuses topic permissions on an exchange that does not exist yet.
        declared: dict[str, pulumi.Resource] = {**exchanges, **{
            x.name: retryables[r.config.name] for r in self.plan.retryables for x in r.exchanges}}
        for grant in self.plan.permissions:
            user = rabbitmq.User(f"{name}-{grant.user_key}", name=grant.user,
                                 password=pulumi.Output.secret(passwords[grant.user]), tags=[], opts=child)
            rabbitmq.Permissions(f"{name}-{grant.key}", user=user.name, vhost=vhost,
                                 permissions=rabbitmq.PermissionsPermissionsArgs(
                                     configure=grant.configure, write=grant.write, read=grant.read), opts=child)
            if grant.topic:
                rabbitmq.TopicPermissions(f"{name}-{grant.topic_key}", user=user.name, vhost=vhost, permissions=[
                    rabbitmq.TopicPermissionsPermissionArgs(exchange=t.exchange, write=t.write, read=t.read)
                    for t in grant.topic], opts=pulumi.ResourceOptions(
                        parent=self, depends_on=[declared[t.exchange] for t in grant.topic if t.exchange in declared]))

        self.vhost_name = pulumi.Output.from_input(vhost)
        self.queues = pulumi.Output.all(
            *(q.name for q in queues.values()),
            *(pulumi.Output.all(r.queue_name, r.wait_queues, r.error_queue) for r in retryables.values()),
        ).apply(_flatten)
        self.retry_contracts = pulumi.Output.all(*(r.contract for r in retryables.values())).apply(
            lambda contracts: {c["queue"]: c for c in contracts})
        self.register_outputs({
            "vhost_name": self.vhost_name,
            "queues": self.queues,
            "retry_contracts": self.retry_contracts,
        })


def _flatten(items: list[Any]) -> list[str]:
    flat: list[str] = []
    for item in items:
        if isinstance(item, list):
            flat.extend(_flatten(item))
        else:
            flat.append(item)
    return flat
