"""The program's stack-wide steps, between reading the settings (`program_settings.read_stack_settings`) and the
Vhost components: plan every vhost once and check them, register the queue guard's hooks, declare the shovel user,
and hand each application its password."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

import pulumi
import pulumi_rabbitmq as rabbitmq

from ..config.passwords import moves_queues, password_command
from ..config.stack_settings import DELETE_WITH_MESSAGES, StackSettings
from ..model import naming
from ..model.key_paths import with_paths
from ..model.keys import NAMESPACE
from ..model.naming import vhost_key
from ..model.plan_types import VhostPlan
from ..model.problems import TopologyError
from ..model.stack_config import StackConfig
from ..plan.checks import check_logical_names, check_vhost
from ..plan.layout import stack_children
from ..plan.planner import plan_vhost
from .boundary import reported
from .guard import path_guard, queue_guard, unplanned_entries
from .resources import DEFAULT_AMQP_PORT, ShovelAccess


def stack_shovel_user() -> str:
    """The user this stack's shovels connect as: its own, named after the Pulumi project and stack
    (`naming.shovel_user`)."""
    return naming.shovel_user(pulumi.get_project(), pulumi.get_stack())


@reported
def plan_stack(config: StackConfig, shovel_user: str | None = None) -> list[tuple[str, VhostPlan]]:
    """(Vhost component name, plan) of every vhost, planned and checked once, before any component exists, so
    that problems carry the stack file's key paths and two vhosts' URNs cannot clash. The Vhost components
    register these plans as they are. `shovel_user`: the stack's shovel user; default this program's own
    (`stack_shovel_user()`), which a tool running outside the program passes for the stack it looks at."""
    user = shovel_user or stack_shovel_user()
    plans = [(vhost_key(v.name), plan_vhost(v, at, user))
             for at, v in with_paths("", "vhosts", config.vhosts)]
    topology = [problem for _, plan in plans for problem in check_vhost(plan)]
    if problems := topology + check_logical_names(plans):
        raise TopologyError("the stack", problems)
    return plans


@reported
def register_guard(plans: list[tuple[str, VhostPlan]], allowed: frozenset[str]) -> None:
    """Register the queue guard's hook whatever the stack declares: queues deleted by this update (their vhost
    removed from the config included) are bound to it in the state, and the engine cannot delete them without it.
    Warn about each `delete_with_messages` entry (`allowed`) that names no queue of the stack: right only for a queue
    this update removes, and a forgotten waiver otherwise."""
    queue_guard()
    path_guard()
    for entry in unplanned_entries(allowed, [plan for _, plan in plans]):
        pulumi.log.warn(f'{NAMESPACE}:{DELETE_WITH_MESSAGES} lists "{entry}", which this stack does not declare: it '
                        "lets `pulumi up` delete that queue with its messages only if this update removes it; remove "
                        "the entry once that is done")


@reported
def declare_shovel_user(plans: list[tuple[str, VhostPlan]], passwords: Mapping[str, pulumi.Input[str]],
                        amqp_port: int | None = None) -> ShovelAccess | None:
    """The stack's one shovel user (no tags), named as the plans name it (`stack_shovel_user`), when a migration of
    any vhost moves a queue; each such vhost grants it least-privilege permissions of its own. Its password is
    `passwords.rabbitmq-retry-shovel`; the AMQP port its shovels connect to is `amqp_port` (the stack's
    `rabbitmq-retry:amqp_port`, default 5672). None when no migration needs it: then the user leaves the plan, and
    `pulumi up` deletes it (another stack's shovel user, named after its own stack, is not this one's to touch)."""
    registered = stack_children(plans)
    if not registered:
        return None
    name = next(grant.user for _, plan in plans for grant in plan.shovel_permissions)
    user = rabbitmq.User(registered[0][1], name=name,
                         password=pulumi.Output.secret(passwords[naming.SHOVEL_USER]), tags=[])
    return ShovelAccess(user.name, passwords[naming.SHOVEL_USER], amqp_port or DEFAULT_AMQP_PORT)


def _secret(password: object, who: str, user: str) -> pulumi.Output[str]:
    """`password` as a secret; when it is not a non-empty string, a random placeholder that nobody knows, with a
    warning naming `who` it is missing for and the command that sets `user`'s."""
    if not isinstance(password, str) or not password:
        pulumi.log.warn(f"no password for {who}: this preview uses a placeholder and `pulumi up` will refuse; set it "
                        f"with {password_command(user)}")
        password = secrets.token_urlsafe(32)
    return pulumi.Output.secret(password)


@reported
def application_passwords(settings: StackSettings) -> dict[str, pulumi.Output[str]]:
    """Each application or operator user's password as a secret. In a preview a missing one is a random
    placeholder that nobody knows, with a warning: `pulumi up` refuses it (`read_stack_settings`)."""
    config, written = settings.config, settings.passwords
    passwords = written if isinstance(written, Mapping) else {}
    result = {}
    for vhost in config.vhosts:
        for user, path in vhost.user_paths():
            kind = "application" if path.startswith("applications") else "operator"
            result[user] = _secret(passwords.get(user), f'{kind} user "{user}"', user)
    if moves_queues(config):
        result[naming.SHOVEL_USER] = _secret(passwords.get(naming.SHOVEL_USER),
                                             f'the shovel user "{stack_shovel_user()}" of the migrations',
                                             naming.SHOVEL_USER)
    return result
