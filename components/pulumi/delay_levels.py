"""DelayLevels: a vhost's shared delay levels, through which every queue of strategy `levels` retries."""

from typing import NotRequired, TypedDict

import pulumi

from ..config.load import load_delay_levels
from ..model import naming
from ..model.plan_types import DelayLevelsPlan
from ..model.problems import ConfigError
from ..model.stack_config import DelayLevels as DelayLevelsConfig
from ..plan import layout
from ..plan.paths import delay_levels_path, inventory
from ..strategies.levels import plan_delay_levels
from .args_types import DelayLevelsSpec
from .arguments import PROTECT_QUEUES, Option, check_args, input_string, instance_of, mapping_or
from .foreign import accepts_other_languages
from .resources import Scope, declare_guarded

TYPE_TOKEN = "rabbitmq-retry:index:DelayLevels"


class DelayLevelsArgs(TypedDict):
    """Checked at run time too: an unknown, missing or mistyped key is a ConfigError naming it."""

    vhost: pulumi.Input[str]
    """Vhost of every object. Immutable: changing it replaces them all (waiting messages are lost)."""
    delay_levels: NotRequired[DelayLevelsSpec]
    """In the stack file's delay_levels shape (unit, max_delay, type); default 1s up to 1d, quorum."""
    protect_queues: NotRequired[bool]
    """Protect every level queue: Pulumi refuses to delete or replace them."""


class DelayLevelsPythonArgs(DelayLevelsArgs):
    """Python only: what no other language can send, objects of this package (not in the package schema)."""

    plan: NotRequired[DelayLevelsPlan]
    """Instead of `delay_levels`: the levels as a vhost's plan has them (`VhostPlan.delay_levels`), as the Vhost
    component passes them, so that they are planned once."""


OPTIONS = (
    Option("vhost", input_string, missing='the vhost of every object, e.g. "payments"'),
    Option("delay_levels", mapping_or(DelayLevelsConfig, "delay_levels")),
    Option("plan", instance_of(DelayLevelsPlan, "a DelayLevelsPlan (VhostPlan.delay_levels)")),
    PROTECT_QUEUES,
)


class DelayLevels(pulumi.ComponentResource):
    """Level k (0 ≤ k < levels): topic exchange and queue `rabbitmq-retry.delay.<k>`, holding a message
    `unit × 2^k` (TTL by policy), then passing it one level down; after level 0, topic exchange
    `rabbitmq-retry.delay.deliver` routes it to the queue its routing key names. A Vhost component declares one
    when a queue has strategy `levels`; declare one yourself only beside RetryableQueues of your own, and hand
    it to each of them (RetryableQueue's `delay_levels`)."""

    delivery_exchange: pulumi.Output[str]
    """Where a message whose delay is over goes; each `levels` queue is bound to it."""
    delay_exchange: pulumi.Output[str]
    """The top level: where a consumer publishes a delayed copy (the contract's `delay_exchange`)."""
    queues: pulumi.Output[list[str]]
    """The level queues, level 0 first, then the undeliverable queue."""
    undeliverable_queue: pulumi.Output[str]
    """Where a copy goes whose queue has no delivery binding when its delay is over (the delivery exchange's
    alternate exchange): inspect it, never leave it growing."""

    @accepts_other_languages(DelayLevelsArgs, "DelayLevels")
    def __init__(self, name: str, args: DelayLevelsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        where = f"DelayLevels({name})"
        checked = check_args(where, args, OPTIONS)
        if "plan" in checked:
            if "delay_levels" in checked:
                raise ConfigError([(f"{where}.delay_levels", "the plan holds the levels; pass one of plan and "
                                    "delay_levels")])
            plan: DelayLevelsPlan = checked["plan"]
        else:
            config = checked.get("delay_levels", {})
            if not isinstance(config, DelayLevelsConfig):
                config = load_delay_levels(config, f"{where}.delay_levels")
            if config.levels < 1:
                raise ConfigError([(f"{where}.delay_levels", "no level: max_delay must be at least unit")])
            plan = plan_delay_levels(config)
        super().__init__(TYPE_TOKEN, name, None, opts)
        self.plan: DelayLevelsPlan = plan
        """What it registers; a `levels` RetryableQueue computes its contract from these levels (Python only)."""
        self.vhost: pulumi.Input[str] = checked["vhost"]
        """The vhost it was given (Python only)."""
        scope = Scope(self, checked["vhost"], protect_queues=checked.get("protect_queues", False))
        declare_guarded(scope, name, layout.DELAY_LEVELS, self.plan, opts,
                        lambda vhost: inventory(vhost, [delay_levels_path(self.plan)]))
        self.delivery_exchange = scope.names[("Exchange", naming.DELIVERY_EXCHANGE)]
        self.delay_exchange = scope.names[("Exchange", self.plan.top_exchange)]
        self.queues = pulumi.Output.all(*(scope.names[("Queue", q.name)] for q in self.plan.queues))
        self.undeliverable_queue = scope.names[("Queue", naming.UNDELIVERABLE)]
        self.register_outputs({
            "delivery_exchange": self.delivery_exchange,
            "delay_exchange": self.delay_exchange,
            "queues": self.queues,
            "undeliverable_queue": self.undeliverable_queue,
        })
