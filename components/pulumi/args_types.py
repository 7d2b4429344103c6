"""The components' args and outputs as typed trees: the stack file's keys as TypedDicts, one field per key.

One set of types serves two readers. mypy checks a Python program's `RetryableQueue(...)` call against them
(a misspelt key or a wrong type is an error in the editor), and Pulumi's component analyzer turns them into
the package schema other languages get their SDKs from (`pulumi package add`): each field's docstring is its
description there, `snake_case` becomes `camelCase`. The run-time check stays the config parser's
(`components/config`, `components/pulumi/arguments.py`): as strict as the stack file, every problem with its key path.

What the analyzer of pulumi 3.272 takes shapes these types: no `from __future__ import annotations` (string
annotations break it), no unions (so durations are the strings users write, `"1m30s"`; a policy's definition values
and a plain queue's `arguments` are strings, an integer as its digits; `move.external` is a mapping, `{}` for the
stack file's `true`), every optional key `NotRequired`, each schema type a class of its own (the analyzer reads a
field's description from the source of the class it is analysing, so an inherited field would have none). A key
that is a Python keyword is its field with a trailing underscore (`move.from_`, `import_`, an alert rule's `for_`):
the analyzer's `camel_case` drops the empty last part, so the schema property is `from` again, and the SDK hands
another language's `from` over as `from_`. `args_to_config.py` takes these spellings and strings to the stack file's
shape before the parser reads them; a Python program may also pass a stack file's entry as it is (`from`).
Every stack-file key a component takes is a field here (`tests/test_component_package.py` compares them with
`model/keys.py`). `alerts` is checked but registers nothing: a stack derives its alerting rules from its file.

Pulumi-free: the contract types are the retry contract of `rabbitmq_retry_client/contract.schema.json`."""

from typing import NotRequired, TypedDict

from rabbitmq_retry_client.contract_types import RetryContract as RetryContract


class BackoffSpec(TypedDict):
    """Strategy `levels`: retry n waits min(max, initial × multiplier^(n-1)), times a random factor in
    [1 - jitter, 1 + jitter]."""

    initial: NotRequired[str]
    """The first retry's delay, a duration such as "1s" or "1m30s" (default "1s")."""
    multiplier: NotRequired[float]
    """Growth per retry, at least 1 (default 2; 1 is a fixed delay)."""
    max: NotRequired[str]
    """The longest delay, jitter included, a duration (default "1h"); at most delay_levels.max_delay."""
    jitter: NotRequired[float]
    """Spread of retries of messages that failed together, 0 ≤ jitter < 1 (default 0.2)."""


class RetrySpec(TypedDict):
    """Makes a queue retryable: how a failed message waits and when it is parked."""

    strategy: NotRequired[str]
    """How a failed message waits: tiers (the default), levels, or native (RabbitMQ 4.3.1+, quorum only)."""
    delays: NotRequired[list[str]]
    """Strategy tiers: one wait queue per delay, strictly increasing durations such as "1s", "10s", "1m"."""
    backoff: NotRequired[BackoffSpec]
    """Strategy levels: the delay of each retry."""
    min_delay: NotRequired[str]
    """Strategy native: the wait before the first retry, a duration; the n-th waits min(n × min_delay, max_delay)."""
    max_delay: NotRequired[str]
    """Strategy native: the longest wait, a duration (default min_delay)."""
    max_retries: NotRequired[int]
    """Retries before a message is parked, 1 to 10000 (tiers: default the number of delays)."""
    error_retention: NotRequired[str]
    """How long parked messages are kept, a duration (message-ttl of the error queue); default forever."""
    error_max_length: NotRequired[int]
    """Most parked messages; a full error queue refuses a parking publish instead of dropping the oldest."""


class BindingSpec(TypedDict):
    """A binding of the queue to an exchange."""

    exchange: str
    """An exchange of this vhost, or one declared elsewhere with external: true."""
    routing_key: NotRequired[str]
    """The routing key (default "")."""
    arguments: NotRequired[dict[str, str]]
    """Headers exchanges only, e.g. {"x-match": "all", "kind": "invoice"}."""
    external: NotRequired[bool]
    """The exchange is not declared by this stack (e.g. amq.topic)."""


class AlertRuleSpec(TypedDict):
    """One alerting rule's settings at this level (docs/alerts.md); unset keys come from the level above."""

    enabled: NotRequired[bool]
    """false switches the rule off here and below (a level below may switch it on again)."""
    for_: NotRequired[str]
    """`for` (Python: `for_`): how long the condition holds before the alert fires, a duration or "0s"."""
    severity: NotRequired[str]
    """The severity label: "critical", "warning" or "info"."""
    threshold: NotRequired[int]
    """Rules that count something (parked, error_growing, no_consumer, undeliverable): fires above it, at least 0."""
    window: NotRequired[str]
    """error_growing, not_draining, members_offline only: the range the rule looks back over, a duration."""
    labels: NotRequired[dict[str, str]]
    """Extra labels on this rule."""


class QueueAlertsSpec(TypedDict):
    """A retryable queue's own alerting rules; each overrides its vhost's and the stack's."""

    labels: NotRequired[dict[str, str]]
    """Extra labels on the queue's rules."""
    parked: NotRequired[AlertRuleSpec]
    """A message parked in the error queue."""
    error_growing: NotRequired[AlertRuleSpec]
    """The error queue growing."""
    no_consumer: NotRequired[AlertRuleSpec]
    """The input queue holding ready messages with no consumer."""
    not_draining: NotRequired[AlertRuleSpec]
    """A wait tier not draining past its delay."""
    no_leader: NotRequired[AlertRuleSpec]
    """A quorum queue reported by no node (no leader)."""
    members_offline: NotRequired[AlertRuleSpec]
    """A quorum queue with fewer members reporting than it had."""
    dead_letters_jammed: NotRequired[AlertRuleSpec]
    """A quorum queue or its wait tier holding dead-letters RabbitMQ cannot forward."""


class QueueSpec(TypedDict):
    """A queue, as a `queues[]` entry of the stack file: plain, or retryable with a `retry` block."""

    name: str
    """The queue's name: no "@", no "/", not amq.*. Changing it replaces the queue (its messages are lost)."""
    type: NotRequired[str]
    """"classic" or "quorum" (default quorum); every queue of a retryable queue shares it. A change replaces it."""
    bindings: NotRequired[list[BindingSpec]]
    """Its bindings."""
    max_length: NotRequired[int]
    """max-length policy, at least 0."""
    delivery_limit: NotRequired[int]
    """Quorum only: delivery-limit; for a retryable queue above max_retries + 1 (default 20 + max_retries)."""
    retry: NotRequired[RetrySpec]
    """Makes the queue retryable."""
    policy_priority: NotRequired[int]
    """Priority of this queue's policies, at least 0 (default 10)."""
    max_length_bytes: NotRequired[int]
    """max-length-bytes policy with overflow reject-publish, at least 0."""
    message_ttl: NotRequired[str]
    """Plain queues only: message-ttl policy, a duration."""
    single_active_consumer: NotRequired[bool]
    """Plain queues only: x-single-active-consumer (a change replaces the queue)."""
    quorum_group_size: NotRequired[int]
    """Quorum only: replication factor of the queue and every queue it owns; a change replaces them."""
    arguments: NotRequired[dict[str, str]]
    """Plain queues only: its arguments as the broker holds them; an integer as digits ("60000"), a bool "true"."""
    alerts: NotRequired[QueueAlertsSpec]
    """Retryable queues only: its alerting rules, read by the stack's alert rules (the component registers none)."""


class DelayLevelsSpec(TypedDict):
    """A vhost's shared delay levels (strategy levels): level k holds a message unit × 2^k."""

    unit: NotRequired[str]
    """The shortest delay, a duration (default "1s")."""
    max_delay: NotRequired[str]
    """The longest delay, a duration (default "1d"); decides how many levels there are."""
    type: NotRequired[str]
    """Queue type of the level queues, "classic" or "quorum" (default quorum)."""
    quorum_group_size: NotRequired[int]
    """Quorum only: replication factor of the level queues; a change replaces them."""


class ExchangeSpec(TypedDict):
    """An exchange this stack declares, durable."""

    name: str
    """No "@", no "/", not amq.*."""
    type: str
    """"direct", "topic", "fanout" or "headers"."""


class TopicPermissionSpec(TypedDict):
    """Routing-key limits of an application on a topic exchange."""

    exchange: str
    """An exchange the application may publish to."""
    write: NotRequired[str]
    """Regex of the routing keys it may publish with (default "^$")."""
    read: NotRequired[str]
    """Regex of the routing keys it may consume by (default "^$")."""


class UserLimitsSpec(TypedDict):
    """A user's limits, broker-wide."""

    max_connections: NotRequired[int]
    """Most connections the user may have open at once, at least 1."""
    max_channels: NotRequired[int]
    """Most channels the user may have open at once, at least 1."""


class ApplicationSpec(TypedDict):
    """An application user and what it publishes and consumes; its password is in `passwords`."""

    user: str
    """The application's user; once per stack (users are broker-wide)."""
    publishes: NotRequired[list[str]]
    """Exchanges of this vhost it publishes to."""
    consumes: NotRequired[list[str]]
    """Input or plain queues it consumes."""
    topic_permissions: NotRequired[list[TopicPermissionSpec]]
    """Routing-key limits on topic exchanges."""
    limits: NotRequired[UserLimitsSpec]
    """The user's connection and channel limits."""


class OperatorSpec(TypedDict):
    """A user who operates parked messages; its password is in `passwords`."""

    user: str
    """The operator's user; once per stack."""


class VhostLimitsSpec(TypedDict):
    """Limits of a vhost this stack creates."""

    max_connections: NotRequired[int]
    """Most client connections to the vhost, at least 0."""
    max_queues: NotRequired[int]
    """Most queues in the vhost, at least 0."""


class PolicySpec(TypedDict):
    """A user or operator policy of the vhost, beside the ones the stack derives for its queues."""

    name: str
    """The policy's name in the vhost."""
    pattern: str
    """A regular expression over the names of what it applies to."""
    priority: NotRequired[int]
    """Higher wins where several match (default 0)."""
    apply_to: NotRequired[str]
    """"queues", "classic_queues", "quorum_queues", "streams", "exchanges" or "all" (default "queues")."""
    definition: dict[str, str]
    """RabbitMQ's policy keys and values, each a string; an integer as its digits ("60000"), sent as an integer."""


class VhostAlertsSpec(TypedDict):
    """A vhost's alerting rules: those of its retryable queues and of its delay levels; each overrides the stack's."""

    labels: NotRequired[dict[str, str]]
    """Extra labels on the vhost's rules."""
    parked: NotRequired[AlertRuleSpec]
    """A message parked in an error queue of the vhost."""
    error_growing: NotRequired[AlertRuleSpec]
    """An error queue growing."""
    no_consumer: NotRequired[AlertRuleSpec]
    """An input queue holding ready messages with no consumer."""
    not_draining: NotRequired[AlertRuleSpec]
    """A wait tier or delay level not draining past its delay."""
    no_leader: NotRequired[AlertRuleSpec]
    """A retryable quorum queue reported by no node (no leader)."""
    members_offline: NotRequired[AlertRuleSpec]
    """A retryable quorum queue with fewer members reporting than it had."""
    dead_letters_jammed: NotRequired[AlertRuleSpec]
    """A retryable quorum queue or its wait tier holding dead-letters RabbitMQ cannot forward."""
    undeliverable: NotRequired[AlertRuleSpec]
    """The delay levels' undeliverable queue holding messages."""


class MoveExternalSpec(TypedDict):
    """The old runtime topology of an external move, by name; none of it may be declared by the stack."""

    error_queue: NotRequired[str]
    """Where the old topology parks messages: shovelled to the successor's error queue (`to` needs a retry block)."""
    queues: NotRequired[list[str]]
    """Its other queues (wait or retry queues): deleted first by make migrate-retire, each only once empty."""
    exchanges: NotRequired[list[str]]
    """Its own exchanges: deleted by make migrate-retire once unused, after its queues."""
    policies: NotRequired[list[str]]
    """User policies that wired it (dead-lettering, TTL): deleted last by make migrate-retire."""


class MoveSpec(TypedDict):
    """A queue moves to a successor queue (rename, classic ↔ quorum, another strategy)."""

    from_: str
    """`from` (Python: `from_`): the old queue; in queues as it was, without bindings, in step move; gone in retire."""
    to: str
    """The successor, an ordinary queue of this vhost (a retryable one when the old queue is retryable)."""
    external: NotRequired[MoveExternalSpec]
    """The old queue is not the stack's (declared at runtime, adopted): {} is the stack file's `external: true`."""


class DrainTiersSpec(TypedDict):
    """Wait tiers removed from a queue's retry.delays drain before they are deleted."""

    queue: str
    """The queue (strategy tiers) whose retry.delays lost tiers."""
    delays: list[str]
    """Its retry.delays as they were before the change (more tiers than now), durations such as "1m"."""


class DrainLevelsSpec(TypedDict):
    """Delay levels removed by a lower delay_levels.max_delay drain before they are deleted."""

    max_delay: str
    """The vhost's delay_levels.max_delay as it was before the change (more levels than now), a duration."""


class MigrationSpec(TypedDict):
    """A change that would lose messages, in steps: exactly one of move, drain_tiers and drain_levels."""

    name: str
    """Unique in the vhost, of a-z, 0-9 and "-"; names the migration's shovels and shows in review and status."""
    move: NotRequired[MoveSpec]
    """A queue moves to a successor queue."""
    drain_tiers: NotRequired[DrainTiersSpec]
    """Wait tiers removed from a queue's retry.delays drain before they are deleted."""
    drain_levels: NotRequired[DrainLevelsSpec]
    """Delay levels removed by a lower delay_levels.max_delay drain before they are deleted."""
    step: str
    """Which commit this is: "move" then "retire" (move); "drain" then "retire" (drain_tiers, drain_levels)."""


class VhostSpec(TypedDict):
    """A vhost, as a `vhosts[]` entry of the stack file."""

    name: str
    """The vhost's name: no "@", no leading or trailing whitespace."""
    existing: NotRequired[bool]
    """Referenced, never created or deleted (default true for "/", else false)."""
    exchanges: NotRequired[list[ExchangeSpec]]
    """Exchanges this stack declares."""
    queues: NotRequired[list[QueueSpec]]
    """Plain or retryable queues."""
    applications: NotRequired[list[ApplicationSpec]]
    """Application users and their permissions."""
    operators: NotRequired[list[OperatorSpec]]
    """Operators of parked messages."""
    limits: NotRequired[VhostLimitsSpec]
    """Vhost limits; only for a vhost this stack creates."""
    default_queue_type: NotRequired[str]
    """"classic" or "quorum"; only for a vhost this stack creates."""
    delay_levels: NotRequired[DelayLevelsSpec]
    """The shared delay levels, declared when a queue has retry.strategy levels."""
    policies: NotRequired[list[PolicySpec]]
    """Other user policies of the vhost."""
    operator_policies: NotRequired[list[PolicySpec]]
    """Operator policies: a definition of RabbitMQ's operator policy keys only (message-ttl, max-length, …)."""
    import_: NotRequired[list[str]]
    """`import` (Python: `import_`): objects Pulumi adopts, each "<kind> <provider ID>"; only in an existing vhost."""
    migrations: NotRequired[list[MigrationSpec]]
    """Changes that would lose messages, carried through step by step (docs/migrations.md)."""
    alerts: NotRequired[VhostAlertsSpec]
    """This vhost's alerting rules, read by the stack's alert rules (the component registers none)."""


VhostStackSpec = VhostSpec
"""The name `VhostSpec` had while `migrations` and `import` were typed for Python alone; kept for programs using it."""


