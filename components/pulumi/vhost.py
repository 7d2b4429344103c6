"""Vhost: everything one vhost of the stack config declares."""

import functools
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi

from ..config.load import load_vhost
from ..model import naming
from ..model.key_paths import entry_path
from ..model.names import names
from ..model.plan_types import DelayLevelsPlan, RetryablePlan, VhostPlan
from ..model.problems import ConfigError, TopologyError
from ..model.stack_config import Vhost as VhostConfig
from ..plan import layout
from ..plan.checks import check_logical_names, check_vhost, stale_policies
from ..plan.paths import inventory, vhost_paths
from ..plan.planner import plan_vhost
from .args_to_config import load_typed
from .args_types import RetryContract, VhostSpec
from .arguments import (
    PROTECT_QUEUES,
    RETAIN_ERROR_QUEUES,
    Option,
    check_args,
    instance_of,
    mapping_or,
    non_empty_string,
    passwords,
)
from .delay_levels import DelayLevels, DelayLevelsPythonArgs
from .foreign import accepts_other_languages, hosted
from .resources import BUILDERS, Scope, ShovelAccess, close_path_guard, declare_children, open_path_guard
from .retryable_queue import RetryableQueue, RetryableQueuePythonArgs
from .stack_resources import stack_shovel_user

TYPE_TOKEN = "rabbitmq-retry:index:Vhost"


class VhostArgs(TypedDict):
    """Checked at run time too: an unknown, missing or mistyped key is a ConfigError naming it."""

    vhost: NotRequired[VhostSpec]
    """The vhost, in the stack file's vhosts[] shape. It decides every name."""
    protect_queues: NotRequired[bool]
    """Protect every queue (and the vhost itself when this stack creates it)."""
    retain_error_queues: NotRequired[bool]
    """retain_on_delete on every error queue."""
    passwords: NotRequired[dict[str, pulumi.Input[str]]]
    """Password of each application and operator user, by user name; pass secrets."""


class VhostPythonArgs(VhostArgs):
    """Python only: what no other language can send, objects of this package (not in the package schema)."""

    plan: NotRequired[VhostPlan]
    """Instead of `vhost`: its plan, already checked with the rest of the stack (`stack.plan_stack`), so that
    a program plans and checks every vhost once."""
    shovel_access: NotRequired[ShovelAccess]
    """The stack's shovel user (`stack.declare_shovel_user`): required when a migration of the vhost moves a
    queue; its shovels connect as that user."""
    config_path: NotRequired[str]
    """Where `vhost` stands in the caller's own config (e.g. `vhosts[shop]`), for the key paths of checks
    and warnings; default `Vhost(<name>).vhost`."""


OPTIONS = (
    Option("vhost", mapping_or(VhostConfig, "vhosts[]")),
    Option("plan", instance_of(VhostPlan, "a VhostPlan (stack.plan_stack)")),
    PROTECT_QUEUES,
    RETAIN_ERROR_QUEUES,
    Option("passwords", passwords),
    Option("config_path", non_empty_string),
    Option("shovel_access", instance_of(ShovelAccess, "a ShovelAccess (stack.declare_shovel_user)")),
)


class Vhost(pulumi.ComponentResource):
    """A vhost (created unless `existing`; `/` never is) with its exchanges, plain queues, retryable
    queues, bindings, policies, operator policies and application users (with their limits, `user_limits.py`)."""

    vhost_name: pulumi.Output[str]
    """The vhost's name; an output of the VHost resource when this stack creates it."""
    queues: pulumi.Output[list[str]]
    """Every queue this component declares, retry machinery and shared delay levels included."""
    retry_contracts: pulumi.Output[dict[str, RetryContract]]
    """Retry contract of each retryable queue, by queue name."""

    @accepts_other_languages(VhostArgs, "Vhost")
    def __init__(self, name: str, args: VhostArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        where = f"Vhost({name})"
        checked = check_args(where, args, OPTIONS)
        self.plan: VhostPlan = _plan(where, name, checked)
        # The path guard its children wait for, its retryable queues' and delay levels' included (docs/guard.md).
        self.path_guard: pulumi.Resource | None = None
        config = self.plan.config
        passwords = checked.get("passwords") or {}
        if isinstance(passwords, pulumi.Output):
            whole = passwords
            passwords = {g.user: whole.apply(functools.partial(_password, where, g.user))
                         for g in self.plan.permissions}
        if missing := [g.user for g in self.plan.permissions if g.user not in passwords]:
            raise ConfigError([(f"{where}.passwords", f"no password for {names(missing)}; pass a secret "
                                "per application user")])
        shovel_access: ShovelAccess | None = checked.get("shovel_access")
        if self.plan.shovels and shovel_access is None:
            raise _no_shovel_access(where, self.plan)
        super().__init__(TYPE_TOKEN, name, None, opts)
        for warning in stale_policies(self.plan):
            pulumi.log.warn(warning.message, resource=self)
        scope = Scope(self, config.name, protect_queues=checked.get("protect_queues", False),
                      retain_error_queues=checked.get("retain_error_queues", False), passwords=passwords,
                      shovel_access=shovel_access)
        if shovel_access is not None and self.plan.shovels:
            scope.names[("User", self.plan.shovels[0].user)] = pulumi.Output.from_input(shovel_access.user)
        paths = inventory(config.name, vhost_paths(self.plan))

        def declare_guard(scope: Scope, logical_name: str, guard: layout.GuardEntry) -> None:
            if guard.opens:
                open_path_guard(scope, logical_name, paths)
                self.path_guard = scope.guard
            else:
                close_path_guard(scope, logical_name, paths)
        retryables: dict[str, RetryableQueue] = {}
        delay_levels: list[DelayLevels] = []

        def declare_delay_levels(scope: Scope, logical_name: str, plan: DelayLevelsPlan) -> None:
            """The shared delay levels: a component of their own, whose exchanges the `levels` queues are bound
            from and the applications' topic permissions name."""
            args: DelayLevelsPythonArgs = {"vhost": scope.vhost, "plan": plan, "protect_queues": scope.protect_queues}
            component = DelayLevels(logical_name, args, opts=scope.options())
            delay_levels.append(component)
            for exchange in plan.exchanges:
                scope.add("Exchange", exchange.name, component)
            scope.add("Exchange", naming.DELIVERY_EXCHANGE, component, component.delivery_exchange)

        def declare_retryable(scope: Scope, logical_name: str, plan: RetryablePlan) -> None:
            """Retryable queues are components of their own, given their plan (and the vhost's delay levels when
            they retry through them); their input queues are bound here, to the vhost's exchanges, like plain
            queues, and topic permissions wait for their exchanges."""
            args: RetryableQueuePythonArgs = {"vhost": scope.vhost, "plan": plan,
                                              "protect_queues": scope.protect_queues,
                                              "retain_error_queues": scope.retain_error_queues}
            if plan.delay_levels is not None:
                args["delay_levels"] = delay_levels[0]
            component = RetryableQueue(logical_name, args, opts=scope.options())
            retryables[plan.config.name] = component
            scope.add("Queue", plan.config.name, component, component.queue_name)
            # A migration's shovel moves its error queue's parked messages too.
            scope.add("Queue", plan.error_queue, component, component.error_queue)
            for exchange in plan.exchanges:
                scope.add("Exchange", exchange.name, component)

        declare_children(scope, name, layout.VHOST, self.plan, {**BUILDERS, "RetryableQueue": declare_retryable,
                                                                "DelayLevels": declare_delay_levels,
                                                                "Stash": declare_guard})

        self.vhost_name = pulumi.Output.from_input(scope.vhost)
        self.queues = pulumi.Output.all(
            *(scope.names[("Queue", q.name)] for q in self.plan.queues),
            *(pulumi.Output.all(r.queue_name, r.wait_queues, r.error_queue) for r in retryables.values()),
            *(levels.queues for levels in delay_levels),
        ).apply(_flatten)
        self.retry_contracts = pulumi.Output.all(*(r.contract for r in retryables.values())).apply(
            lambda contracts: {c["queue"]: c for c in contracts})
        self.register_outputs({
            "vhost_name": self.vhost_name,
            "queues": self.queues,
            "retry_contracts": self.retry_contracts,
        })


def _plan(where: str, name: str, checked: Mapping[str, Any]) -> VhostPlan:
    """The plan given, or the vhost's own, planned and checked once."""
    if "plan" not in checked and "vhost" not in checked:
        raise ConfigError([(f"{where}.vhost", "missing; the vhost in the stack config's vhosts[] shape, e.g. "
                            '{"name": "shop", "queues": [...]}')])
    if "plan" in checked and "vhost" in checked:
        raise ConfigError([(f"{where}.plan", "the plan holds the vhost; pass one of vhost and plan")])
    if "plan" in checked:
        if "config_path" in checked:
            raise ConfigError([(f"{where}.config_path", "the plan carries its key paths; remove config_path")])
        plan: VhostPlan = checked["plan"]
        return plan
    config = checked["vhost"]
    if not isinstance(config, VhostConfig):
        config = load_typed(load_vhost, config, VhostSpec, f"{where}.vhost")
    plan = plan_vhost(config, checked.get("config_path", f"{where}.vhost"), stack_shovel_user())
    if problems := check_vhost(plan) + check_logical_names([(name, plan)]):
        raise TopologyError(f'vhost "{config.name}"', problems)
    return plan


def _no_shovel_access(where: str, plan: VhostPlan) -> ConfigError:
    """Step move of a migration without the stack's shovel user. Only a Python program can pass one: from another
    language the problem is the step, said at the migration (the schema has no `shovel_access`)."""
    migration = plan.shovels[0].migration
    if not hosted():
        return ConfigError([(f"{where}.shovel_access", f"missing; migration {migration} moves a queue with shovels, "
                             "which connect as the stack's shovel user: pass stack.declare_shovel_user(...)")])
    index = next(m.index for m in plan.config.migrations if m.name == migration)
    at = entry_path(f"{where}.vhost", "migrations", plan.config.migrations, index)
    return ConfigError([(f"{at}.step", f"migration {migration} moves a queue with "
                         "shovels, which connect as a shovel user only a Python program passes (shovel_access): "
                         "carry out step move from a Python stack; step retire and the drains need none")])


def _password(where: str, user: str, passwords: Mapping[str, str]) -> str:
    """One user's password out of a map that arrived as one Output; when it lacks the user, the deployment fails
    with the error a map of known keys gets before anything is registered."""
    if user not in passwords:
        raise ConfigError([(f"{where}.passwords", f"no password for {user}; pass a secret per application user")])
    return passwords[user]


def _flatten(items: list[Any]) -> list[str]:
    flat: list[str] = []
    for item in items:
        if isinstance(item, list):
            flat.extend(_flatten(item))
        else:
            flat.append(item)
    return flat
