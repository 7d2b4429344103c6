"""What a plan is made of: the entries the components register one to one, and the builders every strategy
shares (error queue, limits, policies, adoption of existing objects).

`plan/planner.py` puts a vhost's plan together; each strategy module (`strategies/`) plans its retryable
queues from these parts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, Protocol, TypeVar
from urllib.parse import unquote_plus

from . import naming, wire
from .stack_config import DelayLevels, Migration, Queue, Retry, TopicPermission, Vhost

QueueRole = Literal["input", "wait", "error", "plain", "delay"]
"""A queue's part: a retryable queue's input, wait tier or error queue (the delay levels' undeliverable queue is an
error queue too), a queue without retries, or a delay level."""
PolicyRole = Literal["queue", "config", "operator"]
"""Derived for one planned queue (its limits, TTL or delays), a vhost's `policies[]` entry, or its
`operator_policies[]` entry."""
ERROR_QUEUE_DELIVERY_LIMIT = 1_000_000
"""Quorum error queues: high enough that no parked message ever reaches it (see error_policies)."""


@dataclass(frozen=True)
class QueuePlan:
    key: str
    """Logical key: the child's Pulumi name is f"{component}-{key}"."""
    name: str
    queue_type: str
    arguments: Mapping[str, str | int | bool]
    role: QueueRole
    import_id: str | None = None
    """The provider ID Pulumi adopts it under (`import_`), from the vhost's `import` config."""

    @property
    def arguments_json(self) -> str:
        """Typed arguments as the provider must receive them (sorted keys, integers as numbers)."""
        return json.dumps(dict(self.arguments), sort_keys=True)


@dataclass(frozen=True)
class ExchangePlan:
    key: str
    name: str
    type: str
    import_id: str | None = None
    arguments: Mapping[str, str] = field(default_factory=dict)
    """String arguments (`alternate-exchange`), fixed at creation: changing one replaces the exchange."""


@dataclass(frozen=True)
class BindingPlan:
    key: str
    source: str
    destination: str
    routing_key: str = ""
    arguments: Mapping[str, str | int | bool] = field(default_factory=dict)
    source_external: bool = False
    import_id: str | None = None
    destination_type: Literal["queue", "exchange"] = "queue"

    @property
    def arguments_json(self) -> str | None:
        return json.dumps(dict(self.arguments), sort_keys=True) if self.arguments else None


@dataclass(frozen=True)
class PolicyPlan:
    key: str
    name: str
    pattern: str
    priority: int
    definition: Mapping[str, str]
    """String values, as the provider's schema wants; it sends digit strings as JSON integers."""
    apply_to: str = "queues"
    sources: Mapping[str, str] = field(default_factory=dict)
    """Config key path that sets each definition key, e.g. "vhosts[shop].queues[orders].delivery_limit"."""
    source: str = ""
    """Config key path of the policy entry ("" for the policies the plan derives for a queue)."""
    import_id: str | None = None
    role: PolicyRole = "queue"


@dataclass(frozen=True)
class Tier:
    number: int
    delay_ms: int
    queue: str
    routing_key: str


R = TypeVar("R", bound=Retry)


class PlannedBy(Protocol):
    """What a retryable queue's plan asks of the strategy module that made it: the model cannot import the
    strategies (they import it), so each plan carries its planner, which `strategies/base.Strategy` extends."""

    def consumer_exchanges(self, plan: RetryablePlan[Any]) -> tuple[str, ...]: ...

    def redrive_exchanges(self, plan: RetryablePlan[Any]) -> tuple[str, ...]: ...

    def contract(self, plan: RetryablePlan[Any], vhost: str) -> dict[str, object]: ...


@dataclass(frozen=True)
class RetryablePlan(Generic[R]):
    """Everything one retryable queue owns, planned by its strategy's module (`planned_by`)."""

    config: Queue
    retry: R
    """`config.retry`, typed as its strategy's retry block."""
    tiers: tuple[Tier, ...]
    queues: tuple[QueuePlan, ...]
    exchanges: tuple[ExchangePlan, ...]
    bindings: tuple[BindingPlan, ...]
    policies: tuple[PolicyPlan, ...]
    delay_levels: DelayLevels | None = None
    """The vhost's shared delay levels this queue's retries go through (strategies that use them)."""
    draining: tuple[Tier, ...] = ()
    """Wait tiers a `drain_tiers` migration keeps planned, out of the contract, until they are empty."""
    migration: Mapping[str, str] | None = None
    """The contract's `migration` object while a move of this queue or to it is under way (`migrations/`)."""
    planned_by: PlannedBy = field(kw_only=True, compare=False, repr=False)
    """The strategy module that planned it (`strategies/`), which says what its entries mean to a consumer."""

    @property
    def strategy(self) -> str:
        return self.retry.strategy

    @property
    def retry_exchange(self) -> str:
        return naming.retry_exchange(self.config.name)

    @property
    def requeue_exchange(self) -> str:
        return naming.requeue_exchange(self.config.name)

    @property
    def error_exchange(self) -> str:
        return naming.error_exchange(self.config.name)

    @property
    def error_queue(self) -> str:
        return naming.error_queue(self.config.name)

    @property
    def delay_exchanges(self) -> tuple[str, ...]:
        """Every level's exchange of the delay levels it retries through, level 0 first (none without)."""
        return () if self.delay_levels is None else tuple(naming.delay_level(level)
                                                          for level in range(self.delay_levels.levels))

    @property
    def delay_exchange(self) -> str:
        """The top level's exchange: a consumer publishes a delayed copy to the level of its delay's highest bit
        (`delay_exchanges`), at most this one."""
        return self.delay_exchanges[-1]

    @property
    def consumer_exchanges(self) -> tuple[str, ...]:
        """Exchanges a consumer of the queue publishes to: its retries' and the error exchange."""
        return self.planned_by.consumer_exchanges(self)

    @property
    def redrive_exchanges(self) -> tuple[str, ...]:
        """Exchanges an operator publishes a redrive of its parked messages to, beyond those the queue is bound to."""
        return self.planned_by.redrive_exchanges(self)

    def contract(self, vhost: str) -> dict[str, object]:
        """What a consumer needs to retry and park a message: the stack exports this per queue. During a move the
        old queue and its successor say so (`migration`); absent otherwise."""
        contract = self.planned_by.contract(self, vhost)
        if self.migration is not None:
            contract["migration"] = dict(self.migration)
        return contract


@dataclass(frozen=True)
class DelayLevelsPlan:
    """A vhost's shared delay levels (strategy `levels`): level k is a topic exchange and a queue that holds a
    message `unit × 2^k`. The exchange of level k sends a message whose bit k is 1 to its queue and one whose bit
    is 0 on to level k-1; the queue dead-letters to level k-1 with the same key; after level 0 the delivery
    exchange routes the message to its queue."""

    config: DelayLevels
    queues: tuple[QueuePlan, ...]
    """Level 0 first, then the undeliverable queue."""
    exchanges: tuple[ExchangePlan, ...]
    """The delivery exchange, the levels (level 0 first), then the undeliverable exchange."""
    bindings: tuple[BindingPlan, ...]
    policies: tuple[PolicyPlan, ...]

    @property
    def top_exchange(self) -> str:
        return naming.delay_level(self.config.levels - 1)

    @property
    def level_queues(self) -> tuple[QueuePlan, ...]:
        """The level queues, level 0 first (without the undeliverable queue)."""
        return tuple(q for q in self.queues if q.role == "delay")


@dataclass(frozen=True)
class Grant:
    """One permission regex the plan grants (configure, write or read, or a topic permission's write or read), with
    the names it allows when the plan built it from a finite list (`Grant.exactly`). The review says what a change
    adds and removes, and whether it widens access, from `names`: it never reads a regex back."""

    regex: str
    """What RabbitMQ is given."""
    names: tuple[str, ...] | None
    """The names `regex` allows, sorted; None when it is not a finite list (the `levels` strategy's routing keys, a
    regex written in the config)."""

    @classmethod
    def exactly(cls, names: Iterable[str]) -> Grant:
        """Exactly `names` (`exact_names`), nothing when empty."""
        unique = sorted(set(names))
        return cls(exact_names(unique), tuple(unique))

    @classmethod
    def pattern(cls, regex: str) -> Grant:
        """A regex that is not a finite list of names."""
        return cls(regex, None)


@dataclass(frozen=True)
class TopicGrant:
    """A topic permission on one exchange: the routing keys a user may publish (`write`) and bind (`read`)."""

    exchange: str
    write: Grant
    read: Grant

    @classmethod
    def of(cls, written: TopicPermission) -> TopicGrant:
        """A topic permission of the config (`applications[].topic_permissions`): its regexes as written."""
        return cls(written.exchange, Grant.pattern(written.write), Grant.pattern(written.read))


@dataclass(frozen=True)
class PermissionPlan:
    """An application's or operator's derived permissions: it declares nothing, writes and reads exactly
    what its job needs."""

    key: str
    user: str
    configure: Grant
    write: Grant
    read: Grant
    topic: tuple[TopicGrant, ...] = ()

    @property
    def user_key(self) -> str:
        return naming.user_key(self.user)

    @property
    def topic_key(self) -> str:
        return naming.topic_permissions_key(self.user)


@dataclass(frozen=True)
class UserLimitsPlan:
    """An application user's limits, by RabbitMQ's limit name (`max-connections`, `max-channels`)."""

    key: str
    user: str
    limits: Mapping[str, int]
    source: str
    """The config key path of the limits (`vhosts[shop].applications[billing].limits`)."""


@dataclass(frozen=True)
class VhostPlan:
    config: Vhost
    exchanges: tuple[ExchangePlan, ...]
    queues: tuple[QueuePlan, ...]
    """Plain queues only; retryable queues are in `retryables`."""
    policies: tuple[PolicyPlan, ...]
    bindings: tuple[BindingPlan, ...]
    """Config bindings of every queue, plain and retryable, to the vhost's or external exchanges."""
    retryables: tuple[RetryablePlan, ...]
    operator_policies: tuple[PolicyPlan, ...] = ()
    permissions: tuple[PermissionPlan, ...] = ()
    delay_levels: DelayLevelsPlan | None = None
    """The shared delay levels, when a queue has strategy `levels`."""
    migrations: tuple[MigrationPlan, ...] = ()
    """What each `migrations[]` entry does in this step (`migrations.py`)."""
    shovel_permissions: tuple[PermissionPlan, ...] = ()
    """The shovel user's permissions in this vhost, when a migration moves a queue; the user is the stack's."""
    user_limits: tuple[UserLimitsPlan, ...] = ()
    """The limits of each application user that has some (`applications[].limits`)."""

    @property
    def shovels(self) -> tuple[ShovelPlan, ...]:
        return tuple(s for m in self.migrations for s in m.shovels)


def exact_names(names: Iterable[str]) -> str:
    """A permission regex that matches exactly `names` (`^$`, nothing, when empty); `Grant.exactly` keeps the names
    with it."""
    unique = sorted(set(names))
    return f"^({'|'.join(re.escape(n) for n in unique)})$" if unique else "^$"


def queue_type_arguments(queue: Queue) -> dict[str, str | int]:
    """The arguments every queue planned from a config queue carries: its type and, when the config sets one, its
    quorum group size (`quorum_group_size`: how many cluster nodes hold a replica; both fixed at declaration, so
    changing either replaces the queue). Without the key the argument is absent, as it always was."""
    return group_size_arguments(queue.queue_type, queue.quorum_group_size)


def group_size_arguments(queue_type: str, group_size: int | None) -> dict[str, str | int]:
    """`queue_type_arguments` for queues that are not a config queue's (the shared delay levels)."""
    if group_size is None:
        return {wire.QUEUE_TYPE.argument: queue_type}
    return {wire.QUEUE_TYPE.argument: queue_type, wire.QUORUM_INITIAL_GROUP_SIZE.argument: group_size}


def reconciliation(target_group_size: int | None) -> dict[str, str]:
    """The policy key that has RabbitMQ 4 grow a quorum queue's membership back to its group size after it lost a
    member (`target-group-size`); empty unless the config asks for it (`Queue.target_group_size`), so that a stack
    without it keeps its policies byte for byte."""
    return {} if target_group_size is None else {wire.TARGET_GROUP_SIZE.key: str(target_group_size)}


def quorum_dead_lettering(queue_type: str) -> dict[str, str]:
    """Without both keys a quorum queue silently dead-letters at-most-once."""
    if queue_type != "quorum":
        return {}
    return {wire.DEAD_LETTER_STRATEGY.argument: "at-least-once", wire.OVERFLOW.argument: "reject-publish"}


def limit_sources(path: str, queue: Queue | None = None) -> dict[str, str]:
    """The config key path of each key `queue_limits` sets (`overflow` comes with a length limit)."""
    by_bytes = queue is not None and queue.max_length is None and queue.max_length_bytes is not None
    return {wire.MAX_LENGTH.key: f"{path}.max_length", wire.OVERFLOW.key: f"{path}.max_length{'_bytes' * by_bytes}",
            wire.DELIVERY_LIMIT.key: f"{path}.delivery_limit", wire.MAX_LENGTH_BYTES.key: f"{path}.max_length_bytes",
            wire.MESSAGE_TTL.key: f"{path}.message_ttl", wire.TARGET_GROUP_SIZE.key: f"{path}.quorum_group_size"}


def queue_limits(queue: Queue) -> dict[str, str]:
    """A queue's tunables, for its policy: changing them updates the policy in place, never the queue."""
    definition: dict[str, str] = {}
    if queue.max_length is not None:
        definition[wire.MAX_LENGTH.key] = str(queue.max_length)
    if queue.max_length is not None or queue.max_length_bytes is not None:
        # The default, drop-head, would silently drop (or dead-letter into the retry loop) the oldest
        # message; reject-publish nacks the publisher instead.
        definition[wire.OVERFLOW.key] = "reject-publish"
    if queue.delivery_limit is not None:
        definition[wire.DELIVERY_LIMIT.key] = str(queue.delivery_limit)
    if queue.max_length_bytes is not None:
        definition[wire.MAX_LENGTH_BYTES.key] = str(queue.max_length_bytes)
    if queue.message_ttl_ms is not None:
        definition[wire.MESSAGE_TTL.key] = str(queue.message_ttl_ms)
    return {**definition, **reconciliation(queue.target_group_size)}


def queue_policy(key: str, queue_name: str, priority: int, definition: dict[str, str],
                 sources: Mapping[str, str]) -> PolicyPlan:
    return PolicyPlan(key=key, name=queue_name, pattern=naming.exact_pattern(queue_name), priority=priority,
                      definition=definition, sources={k: sources[k] for k in definition})


def parking_input_queue(queue: Queue) -> QueuePlan:
    """The input queue of a strategy whose retries never go through dead-lettering (`native`, `levels`): what it
    dead-letters, a message rejected for good or past the delivery limit, is parked in the error queue."""
    return QueuePlan(naming.INPUT_KEY, queue.name, queue.queue_type, {
        **queue_type_arguments(queue),
        wire.DEAD_LETTER_EXCHANGE.argument: naming.error_exchange(queue.name),
        **quorum_dead_lettering(queue.queue_type),
    }, "input")


def error_queue_plans(queue: Queue) -> tuple[QueuePlan, ExchangePlan, BindingPlan]:
    """The error queue, its fanout exchange and their binding: the same for every strategy."""
    error = QueuePlan(naming.ERROR_KEY, naming.error_queue(queue.name), queue.queue_type,
                      queue_type_arguments(queue), "error")
    error_x = naming.error_exchange(queue.name)
    return (error, ExchangePlan(naming.ERROR_EXCHANGE_KEY, error_x, "fanout"),
            BindingPlan(naming.ERROR_BINDING_KEY, error_x, error.name))


def error_policies(queue: Queue, retry: Retry, path: str) -> list[PolicyPlan]:
    """The error queue's retention and length limit, when the retry block sets them."""
    error_definition = {}
    if retry.error_retention_ms is not None:
        error_definition[wire.MESSAGE_TTL.key] = str(retry.error_retention_ms)
    if retry.error_max_length is not None:
        error_definition[wire.MAX_LENGTH.key] = str(retry.error_max_length)
        # A full error queue nacks the parking publish (the client then keeps the message in Q); the
        # default, drop-head, would silently drop the oldest parked message.
        error_definition[wire.OVERFLOW.key] = "reject-publish"
    if queue.queue_type == "quorum":
        # RabbitMQ 4 gives a quorum queue a delivery limit of 20 and the error queue has nowhere to
        # dead-letter: a parked message returned 20 times by crashed readers would be dropped. 3.10
        # refuses -1 (unlimited), so the limit is set out of reach instead.
        error_definition[wire.DELIVERY_LIMIT.key] = str(ERROR_QUEUE_DELIVERY_LIMIT)
    error_definition.update(reconciliation(queue.target_group_size))
    if not error_definition:
        return []
    return [queue_policy(naming.ERROR_POLICY_KEY, naming.error_queue(queue.name), queue.policy_priority,
                         error_definition, {
        wire.MESSAGE_TTL.key: f"{path}.retry.error_retention", wire.MAX_LENGTH.key: f"{path}.retry.error_max_length",
        wire.DELIVERY_LIMIT.key: f"{path}.type", wire.OVERFLOW.key: f"{path}.retry.error_max_length",
        wire.TARGET_GROUP_SIZE.key: f"{path}.quorum_group_size"})]


Importable = QueuePlan | ExchangePlan | BindingPlan | PolicyPlan
E = TypeVar("E", QueuePlan, ExchangePlan, BindingPlan, PolicyPlan)


def _binding_id_matches(object_id: str, binding: BindingPlan) -> bool:
    """`vhost/source/destination/queue/properties_key` (the vhost part is checked by the caller): the
    properties key is the URL-encoded routing key, then `~` and a hash of the arguments when there are any
    (`~` alone for an empty key without arguments)."""
    parts = object_id.split("/")
    if len(parts) != 5 or parts[1:4] != [binding.source, binding.destination, binding.destination_type]:
        return False
    key, tilde, arguments_hash = parts[4].partition("~")
    if binding.arguments:
        return bool(tilde and arguments_hash) and unquote_plus(key) == binding.routing_key
    return (parts[4] == "~") if binding.routing_key == "" else (not tilde and unquote_plus(key) == binding.routing_key)


def _matches(kind: str, object_id: str, entry: Importable) -> bool:
    if isinstance(entry, BindingPlan):
        return kind == "binding" and _binding_id_matches(object_id, entry)
    return object_id.rsplit("@", 1)[0] == entry.name


def adopt(entries: tuple[E, ...], kind: str, imports: Iterable[str]) -> tuple[E, ...]:
    """`entries` with the import ID of each one that an `import` entry (`<kind> <ID>`) names."""
    wanted = [tuple(entry.split(" ", 1)) for entry in imports]
    return tuple(next((replace(entry, import_id=object_id) for k, object_id in wanted
                       if k == kind and _matches(kind, object_id, entry)), entry) for entry in entries)


SHOVEL_ACK_MODE = "on-confirm"
"""The only lossless acknowledgement mode: the shovel acks a message at the source once the destination confirmed it."""
SHOVEL_DELETE_AFTER = "never"
"""The stack removes its shovels by config: `queue-length` counts only ready messages at (re)connect and a shovel
may delete itself before everything moved (rabbitmq-server#14636)."""
SHOVEL_WRITE = Grant(r"^amq\.default$", ("amq.default",))
"""A shovel with a destination queue publishes through the default exchange (RabbitMQ checks a publish to
`""` as one to `amq.default`)."""
DRAINS_BY = "shovel"
"""How the old queue of a move reaches its successor, as the contract says."""


@dataclass(frozen=True)
class ShovelPlan:
    """A dynamic shovel (`rabbitmq.Shovel`) from a queue to its successor, in one vhost."""

    key: str
    name: str
    source: str
    destination: str
    migration: str
    user: str
    """The stack's shovel user (`naming.shovel_user`), which it connects as."""
    ack_mode: str = SHOVEL_ACK_MODE
    source_delete_after: str = SHOVEL_DELETE_AFTER
    external_source: bool = False
    """The source queue is not the stack's (`move.external`): the shovel names it, and waits for no resource of it."""


@dataclass(frozen=True)
class MigrationPlan:
    """What one `migrations[]` entry does in this step, for the components, the checks, the review and status."""

    config: Migration
    path: str
    """Its config key path, e.g. "vhosts[shop].migrations[billing-to-quorum]"."""
    shovels: tuple[ShovelPlan, ...] = ()
    bindings: tuple[BindingPlan, ...] = ()
    """Step retire of a move with delay levels: the successor's delivery binding for the old queue's key."""
    old_queues: tuple[str, ...] = ()
    """The queues that drain and are retired: a move's old queue and everything it owns (in step retire, the
    ones still known: the queue and its error queue; wait tiers are found on the broker), or the tiers or levels a
    drain keeps out of the contract."""

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class Migrated:
    """A vhost's plan parts after its migrations: retryables and delay levels with what drains kept, and what the
    migrations add."""

    retryables: tuple[RetryablePlan[Any], ...]
    delay_levels: DelayLevelsPlan | None
    migrations: tuple[MigrationPlan, ...]
    shovel_permissions: tuple[PermissionPlan, ...]
    """The shovel user's permissions in this vhost (none without a shovel)."""

    @property
    def bindings(self) -> tuple[BindingPlan, ...]:
        return tuple(b for m in self.migrations for b in m.bindings)


def shovel_permissions(shovels: Sequence[ShovelPlan]) -> tuple[PermissionPlan, ...]:
    """The shovel user's permissions in one vhost, the least both brokers need (measured on 3.10.8 and 4.3.6): read
    the queues it moves from; write only the default exchange it publishes through (not the destination queue);
    configure its destination queues, which it declares (4.3 refuses the shovel without; the source needs none).
    The logical key names no stack: a stack has one shovel user."""
    if not shovels:
        return ()
    return (PermissionPlan(key=naming.permissions_key(naming.SHOVEL_USER), user=shovels[0].user,
                           configure=Grant.exactly(s.destination for s in shovels),
                           write=SHOVEL_WRITE, read=Grant.exactly(s.source for s in shovels)),)
