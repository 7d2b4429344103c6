"""What a parsed stack config is: frozen dataclasses and their defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from . import wire
from .alerts import AlertsConfig
from .key_paths import with_paths

QUEUE_TYPES = wire.QUEUE_TYPES
EXCHANGE_TYPES = ("direct", "topic", "fanout", "headers")
X_MATCH = ("all", "any", "all-with-x", "any-with-x")
APPLY_TO = ("queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all")
MAX_AGE = r"[0-9]+[YMDhms]"
"""A stream's `max-age`: a count and a unit (years, months, days, hours, minutes, seconds), e.g. `7D`."""
DEFAULT_QUEUE_TYPE = "quorum"
DEFAULT_POLICY_PRIORITY = 10
DEFAULT_DELIVERY_LIMIT = 20
"""RabbitMQ 4's default, set explicitly so that 3.10 and 4.x behave alike."""
MAX_RETRIES_CEILING = 10_000
MAX_MESSAGE_TTL_MS = 2**32 - 1
"""The longest `message-ttl` RabbitMQ takes."""


@dataclass(frozen=True)
class Binding:
    exchange: str
    routing_key: str = ""
    arguments: Mapping[str, str | int | bool] = field(default_factory=dict)
    external: bool = False
    """The exchange is declared outside this stack (e.g. `amq.topic`)."""


@dataclass(frozen=True)
class DelayLevels:
    """A vhost's shared delay levels (`delay_levels`): level k holds a message `unit × 2^k`."""

    unit_ms: int = 1000
    max_delay_ms: int = 86_400_000
    queue_type: str = DEFAULT_QUEUE_TYPE
    policy_priority: int = DEFAULT_POLICY_PRIORITY
    quorum_group_size: int | None = None
    """Quorum only: `x-quorum-initial-group-size` of every level queue and of the undeliverable queue
    (`delay_levels.quorum_group_size`, else `defaults.quorum_group_size`); like a queue's, a queue argument."""
    target_group_size: int | None = None
    """As `Queue.target_group_size`: `quorum_group_size` when `broker.version` is 4.x, in the levels' policies."""

    @property
    def levels(self) -> int:
        """How many levels it takes to wait up to `max_delay`: level k waits `unit × 2^k`, so they hold up to
        `2^levels - 1` units, which reach `max_delay` rounded up to whole units (a client rounds a delay up and
        caps it there: with `max_delay // unit` a `max_delay` of 90s in 1m units would cut a 72s retry to 60s)."""
        return (-(-self.max_delay_ms // self.unit_ms)).bit_length()


@dataclass(frozen=True, kw_only=True)
class Retry:
    """What the `retry` block of every strategy holds. Each strategy has its own subclass, in its module
    (`components/strategies/`), with the fields only it takes; `strategy` names it."""

    strategy: ClassVar[str]
    max_retries: int
    error_retention_ms: int | None = None
    error_max_length: int | None = None


@dataclass(frozen=True)
class Queue:
    name: str
    queue_type: str
    policy_priority: int
    bindings: tuple[Binding, ...] = ()
    max_length: int | None = None
    delivery_limit: int | None = None
    """Quorum only; always set for quorum queues: default 20, plus max_retries for a retryable queue.
    A backstop that must never fire (docs/strategies.md: Delivery limit)."""
    retry: Retry | None = None
    max_length_bytes: int | None = None
    message_ttl_ms: int | None = None
    """Plain queues only (a retryable queue's expired message would enter its retry path)."""
    single_active_consumer: bool = False
    """Plain queues only: `x-single-active-consumer`, a queue argument (changing it replaces the queue)."""
    quorum_group_size: int | None = None
    """Quorum only: `x-quorum-initial-group-size` of the queue and of every queue it owns (wait tiers, error
    queue), a queue argument (changing it replaces the queues). None: the broker's default, every cluster node."""
    target_group_size: int | None = None
    """`quorum_group_size` again when `broker.version` is 4.x (else None): `target-group-size` in the policy of the
    queue and of every queue it owns, so that RabbitMQ 4 grows their membership back to the size after a member is
    lost (continuous membership reconciliation). A policy key: it changes in place, never replaces a queue."""
    arguments: Mapping[str, str | int | bool] | None = None
    """Plain queues only (`arguments`): the queue's arguments exactly as the broker holds them, declared in place of
    those the plan derives (`x-queue-type`, `x-single-active-consumer`, `x-quorum-initial-group-size`), so that a
    queue an application declared at runtime is adopted (imported) as it is, every argument kept. None: derived."""


@dataclass(frozen=True)
class Exchange:
    name: str
    type: str


@dataclass(frozen=True)
class Policy:
    name: str
    pattern: str
    priority: int
    apply_to: str
    definition: Mapping[str, str]
    """Values as the provider's schema wants them: strings (digits become JSON integers)."""


@dataclass(frozen=True)
class TopicPermission:
    exchange: str
    write: str
    read: str


@dataclass(frozen=True)
class UserLimits:
    """A user's limits, broker-wide (`applications[].limits`); None: no limit."""

    max_connections: int | None = None
    max_channels: int | None = None


@dataclass(frozen=True)
class Application:
    """An application's user in one vhost; its permissions are derived, never written by hand."""

    user: str
    publishes: tuple[str, ...] = ()
    """Exchanges it publishes to."""
    consumes: tuple[str, ...] = ()
    """Queues it consumes; for a retryable queue it may also publish retries and park messages."""
    topic_permissions: tuple[TopicPermission, ...] = ()
    limits: UserLimits = UserLimits()
    """Its user's connection and channel limits (the user is the stack's alone: `check_users`)."""


@dataclass(frozen=True)
class Operator:
    """A user who operates the vhost's parked messages (`rabbitmq-retry parked …`); permissions derived."""

    user: str


@dataclass(frozen=True)
class Limits:
    max_connections: int | None = None
    max_queues: int | None = None


RETIRE = "retire"
"""The last step of every migration kind (`migrations/`): the old objects leave the plan."""


@dataclass(frozen=True)
class ExternalSource:
    """`move.external`: the old queue of a move is not the stack's (an application declared it at runtime, and
    `make adopt` took it over beside). The stack never declares, changes or deletes these objects: it shovels what
    they hold to the successor, and `make migrate-retire` unbinds and deletes them on the broker, each only when
    empty and unused (docs/migrations.md)."""

    error_queue: str | None = None
    """Where the old topology parks messages: shovelled to the successor's error queue."""
    queues: tuple[str, ...] = ()
    """The old topology's other queues (wait or retry queues): retired once empty, before the old queue."""
    exchanges: tuple[str, ...] = ()
    """The old topology's own exchanges: deleted once unused, after its queues."""
    policies: tuple[str, ...] = ()
    """User policies that wired the old topology: deleted last."""


@dataclass(frozen=True)
class Migration:
    """A `migrations[]` entry of a vhost: a change that would lose messages, declared so that the plan keeps the
    old objects beside their successor until they are empty (docs/config.md: Migrations)."""

    name: str
    kind: str
    """Its kind's name, one of `migrations.KINDS` (which `migrations.kind_of` returns the module of)."""
    step: str
    """One of its kind's `STEPS`."""
    index: int
    """Where it stands in the vhost's `migrations[]` (for key paths)."""
    source: str = ""
    """`move.from`, or `drain_tiers.queue`."""
    target: str = ""
    """`move.to`."""
    delays_ms: tuple[int, ...] = ()
    """`drain_tiers.delays`: the queue's delays before the change."""
    max_delay_ms: int = 0
    """`drain_levels.max_delay`: the vhost's `delay_levels.max_delay` before the change."""
    external: ExternalSource | None = None
    """`move.external`: the old queue is not declared by the stack (an adopted runtime topology)."""

    @property
    def retiring(self) -> bool:
        return self.step == RETIRE


@dataclass(frozen=True)
class Vhost:
    name: str
    existing: bool
    """Declared elsewhere (always so for `/`): referenced, never created or deleted."""
    exchanges: tuple[Exchange, ...] = ()
    queues: tuple[Queue, ...] = ()
    policies: tuple[Policy, ...] = ()
    """User policies of the vhost besides ours; checked for overlap with ours at preview time."""
    operator_policies: tuple[Policy, ...] = ()
    """Limits that apply on top of every user policy (the lower numeric value wins)."""
    applications: tuple[Application, ...] = ()
    operators: tuple[Operator, ...] = ()
    limits: Limits = Limits()
    default_queue_type: str | None = None
    imports: tuple[str, ...] = ()
    """Objects already on the broker that Pulumi adopts (`import_`), each `<kind> <provider ID>`."""
    delay_levels: DelayLevels | None = None
    """The shared delay levels, when a queue of the vhost has `retry.strategy: levels`."""
    migrations: tuple[Migration, ...] = ()
    """Migrations under way (`migrations[]`), in config order."""

    def user_paths(self) -> tuple[tuple[str, str], ...]:
        """(user, key path within the vhost) of each user the vhost creates: applications, then operators."""
        return (*((a.user, f"{at}.user") for at, a in with_paths("", "applications", self.applications)),
                *((o.user, f"{at}.user") for at, o in with_paths("", "operators", self.operators)))


@dataclass(frozen=True)
class Defaults:
    queue_type: str = DEFAULT_QUEUE_TYPE
    policy_priority: int = DEFAULT_POLICY_PRIORITY
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    quorum_group_size: int | None = None
    """The quorum group size of every quorum queue that does not set its own."""


@dataclass(frozen=True)
class StackConfig:
    vhosts: tuple[Vhost, ...]
    defaults: Defaults = Defaults()
    protect: bool = False
    """`protect` on every queue of the stack: Pulumi refuses to delete or replace them."""
    retain_error_queues: bool = False
    """`retain_on_delete` on error queues: removing one from config leaves it on the broker."""
    broker_version: tuple[int, int, int] | None = None
    """`broker.version`: the RabbitMQ version the stack is meant for; preview refuses what it cannot run."""
    alerts: AlertsConfig | None = None
    """Every `alerts` block (stack, vhosts, queues); None when there is none: every rule with its defaults."""
