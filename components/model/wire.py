"""Every RabbitMQ queue argument and policy key the project writes or reads, one row each.

Pure. A row says what RabbitMQ takes and how it combines what it is given:
- the key as a policy definition writes it (`message-ttl`) and, when RabbitMQ also takes it as a queue argument,
  the argument (`x-message-ttl`, always `x-` and the key). A queue argument is fixed when the queue is declared:
  changing one replaces the queue (the provider replaces a Queue on any change of its inputs, tools/lib/engine.py),
  while a policy key changes in place;
- its value: an integer, a name, a boolean, one of a few words, or a stream's age;
- how a policy and an argument combine, and a user and an operator policy (rabbit_policy.erl,
  rabbit_amqqueue_process.erl and rabbit_quorum_queue.erl of 3.10.8 and 4.3; docs/broker-facts.md §2): the
  lower value for TTLs, lengths and the delivery limit; the argument for the dead-letter route (and for
  `overflow` on classic queues only); the operator's value for `overflow` and `queue-version`; else the user
  policy over the operator's and the policy over the argument;
- the queue types that take it: RabbitMQ skips a whole policy for a queue whose type does not (e.g. a
  `delivery-limit` policy on a classic queue), on 3.10 and 4.x alike;
- from which broker version a user or an operator policy takes it: measured (tests/broker/test_policy_acceptance.py
  PUTs every key to 3.10.8 and 4.3.6; versions between were not run) or read in RabbitMQ's release notes.

The config's key tables (model/keys.py), the value checks of the parser, the effective-policy merge
(effective.py), the broker-version checks (config/capabilities.py), the plan, the review, drift, adopt and
`make mutate` read these rows; outside this module and the tests each key is spelt nowhere else
(tests/test_wire.py scans the source). The client package (`rabbitmq_retry_client`) ships on its own and never
imports `components`: it spells any key it reads itself (today only message headers, which are not rows here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Version = tuple[int, int, int]
QUEUE_TYPES = ("classic", "quorum")
"""The queue types the project declares (a stream is only ever another team's)."""
EVERY_QUEUE_TYPE = frozenset(QUEUE_TYPES)
STREAMS = frozenset({"stream"})
CLASSIC = frozenset({"classic"})
QUORUM = frozenset({"quorum"})

ValueType = Literal["integer", "name", "boolean", "choice", "age"]
"""What RabbitMQ takes as the value: an integer (a string is refused); a name (the provider sends a digits-only value
as an integer, which RabbitMQ refuses); a boolean; one of `choices`; a stream's age (a count and a unit, `7D`)."""


@dataclass(frozen=True)
class Since:
    """From which broker version RabbitMQ takes a key."""

    minimum: Version
    """The oldest version that takes it: read in the release notes, or the oldest measured one that took it."""
    refused_by: Version | None = None
    """Measured: the newest version that answered 400 (the versions between it and `minimum` were not run).
    None: `minimum` was read."""


OLDEST_MEASURED: Version = (3, 10, 8)
NEWEST_MEASURED: Version = (4, 3, 6)
"""The two brokers every policy key and `apply-to` value was PUT to (tests/broker/test_policy_acceptance.py)."""
NOT_ON_3_10 = Since(NEWEST_MEASURED, OLDEST_MEASURED)
"""3.10.8 answers 400, 4.3.6 takes it."""
NATIVE_DELAYED_RETRY = Since((4, 3, 1))
"""The `delayed-retry-*` keys of RabbitMQ 4.3's native delayed retry (read: 4.3.1 release notes)."""
MIRRORING_REMOVED = "a classic queue mirroring key: RabbitMQ 4.0 removed mirroring (4.3 refuses it); use quorum queues"


@dataclass(frozen=True)
class WireKey:
    """One key RabbitMQ takes in a policy definition, as a queue argument, or both."""

    key: str
    """As a policy definition writes it; with `x-` in front, the queue argument."""
    type: ValueType
    choices: tuple[str, ...] = ()
    """The words RabbitMQ takes, for `type` choice; anything else (`"true"` included) is refused at `pulumi up`."""
    policy: bool = True
    """A user policy takes it (the config accepts it in `policies[].definition`)."""
    operator_policy: bool = False
    """An operator policy takes it too (`operator_policies[].definition`)."""
    queue_argument: bool = False
    """RabbitMQ takes it as the queue argument `x-<key>` (the config checks its value in `queues[].arguments`).
    Fixed at declaration: changing it replaces the queue."""
    queue_types: frozenset[str] = EVERY_QUEUE_TYPE
    """The queue types a policy holding it still applies to; RabbitMQ skips the whole policy for another (the key
    need not do anything there: `alternate-exchange` is an exchange's)."""
    lower_wins: bool = False
    """Of a policy and an argument, and of a user and an operator policy, the lower value applies."""
    unlimited_below_zero: bool = False
    """A negative value means no limit: it loses to any other (for the lower of two)."""
    operator_wins: bool = False
    """An operator policy's value replaces the user policy's."""
    argument_wins_on: frozenset[str] = frozenset()
    """The queue types on which a queue argument beats a policy's value (elsewhere the policy's applies, unless
    `lower_wins`)."""
    since: Since | None = None
    """The versions whose user policies take it; None: every broker the project runs on (3.10.8 measured)."""
    operator_since: Since | None = None
    """The same for an operator policy."""
    retired: str = ""
    """Why the config refuses it on every version, and what to use instead (3.10 still takes it, 4.x refuses it)."""

    @property
    def argument(self) -> str:
        """The queue argument (`x-message-ttl`)."""
        if not self.queue_argument:
            raise ValueError(f"{self.key} is not a queue argument")
        return f"x-{self.key}"

    def combine(self, queue_type: str) -> Literal["lower", "argument", "policy"]:
        """Which applies when a queue of `queue_type` has the key both as an argument and from its policy."""
        if queue_type in self.argument_wins_on:
            return "argument"
        return "lower" if self.lower_wins else "policy"


def _limit(key: str, *, queue_types: frozenset[str] = EVERY_QUEUE_TYPE, unlimited_below_zero: bool = False) -> WireKey:
    """A limit an operator may cap: the lower value wins everywhere."""
    return WireKey(key, "integer", operator_policy=True, queue_argument=True, queue_types=queue_types,
                   lower_wins=True, unlimited_below_zero=unlimited_below_zero)


OVERFLOW_CHOICES = ("drop-head", "reject-publish", "reject-publish-dlx")
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")

ALTERNATE_EXCHANGE = WireKey("alternate-exchange", "name")
"""An exchange's key: as an exchange argument it has no `x-` (the delay levels' delivery exchange declares it so)."""
DEAD_LETTER_EXCHANGE = WireKey("dead-letter-exchange", "name", queue_argument=True, argument_wins_on=EVERY_QUEUE_TYPE)
DEAD_LETTER_ROUTING_KEY = WireKey("dead-letter-routing-key", "name", queue_argument=True,
                                  argument_wins_on=EVERY_QUEUE_TYPE)
AT_LEAST_ONCE_SINCE = Since((3, 10, 0))
"""At-least-once dead-lettering of quorum queues came with 3.10.0 (read)."""
DEAD_LETTER_STRATEGY = WireKey("dead-letter-strategy", "choice", DEAD_LETTER_STRATEGIES, queue_argument=True,
                               queue_types=QUORUM, argument_wins_on=QUORUM, since=AT_LEAST_ONCE_SINCE)
"""`at-least-once` needs `overflow: reject-publish` too (docs/broker-facts.md §7)."""
MESSAGE_TTL = _limit("message-ttl")
EXPIRES = _limit("expires")
MAX_LENGTH = _limit("max-length")
MAX_LENGTH_BYTES = _limit("max-length-bytes")
MAX_IN_MEMORY_LENGTH = _limit("max-in-memory-length")
MAX_IN_MEMORY_BYTES = _limit("max-in-memory-bytes")
OVERFLOW = WireKey("overflow", "choice", OVERFLOW_CHOICES, operator_policy=True, queue_argument=True,
                   operator_wins=True, argument_wins_on=CLASSIC, operator_since=NOT_ON_3_10)
DELIVERY_LIMIT = _limit("delivery-limit", queue_types=QUORUM, unlimited_below_zero=True)
QUEUE_MODE = WireKey("queue-mode", "choice", ("default", "lazy"), queue_argument=True, queue_types=CLASSIC)
QUEUE_VERSION = WireKey("queue-version", "integer", operator_policy=True, queue_argument=True, operator_wins=True,
                        operator_since=NOT_ON_3_10)
QUEUE_LEADER_LOCATOR = WireKey("queue-leader-locator", "choice", ("client-local", "balanced", "random",
                                                                  "least-leaders"))
INITIAL_CLUSTER_SIZE = WireKey("initial-cluster-size", "integer", queue_types=STREAMS)
MAX_AGE = WireKey("max-age", "age", queue_types=STREAMS)
STREAM_MAX_SEGMENT_SIZE_BYTES = WireKey("stream-max-segment-size-bytes", "integer", queue_types=STREAMS)
CONSUMER_TIMEOUT = WireKey("consumer-timeout", "integer", since=NOT_ON_3_10)
TARGET_GROUP_SIZE = WireKey("target-group-size", "integer", since=NOT_ON_3_10)
"""Continuous membership reconciliation of quorum queues (RabbitMQ 4)."""
STREAM_FILTER_SIZE_BYTES = WireKey("stream-filter-size-bytes", "integer", since=NOT_ON_3_10)
DELAYED_RETRY_TYPE = WireKey("delayed-retry-type", "choice", ("disabled", "all", "failed", "returned"),
                             since=NATIVE_DELAYED_RETRY)
DELAYED_RETRY_MIN = WireKey("delayed-retry-min", "integer", since=NATIVE_DELAYED_RETRY)
DELAYED_RETRY_MAX = WireKey("delayed-retry-max", "integer", since=NATIVE_DELAYED_RETRY)

QUEUE_TYPE = WireKey("queue-type", "choice", QUEUE_TYPES, policy=False, queue_argument=True)
MAX_PRIORITY = WireKey("max-priority", "integer", policy=False, queue_argument=True, queue_types=CLASSIC)
QUORUM_INITIAL_GROUP_SIZE = WireKey("quorum-initial-group-size", "integer", policy=False, queue_argument=True,
                                    queue_types=QUORUM)
SINGLE_ACTIVE_CONSUMER = WireKey("single-active-consumer", "boolean", policy=False, queue_argument=True)


def _retired(key: str, why: str, queue_types: frozenset[str] = CLASSIC) -> WireKey:
    return WireKey(key, "name", policy=False, queue_types=queue_types, retired=why)


ROWS: tuple[WireKey, ...] = (
    ALTERNATE_EXCHANGE, DEAD_LETTER_EXCHANGE, DEAD_LETTER_ROUTING_KEY, DEAD_LETTER_STRATEGY, EXPIRES, MESSAGE_TTL,
    MAX_LENGTH, MAX_LENGTH_BYTES, MAX_IN_MEMORY_LENGTH, MAX_IN_MEMORY_BYTES, DELIVERY_LIMIT, QUEUE_MODE,
    QUEUE_VERSION, OVERFLOW, QUEUE_LEADER_LOCATOR, INITIAL_CLUSTER_SIZE, MAX_AGE, STREAM_MAX_SEGMENT_SIZE_BYTES,
    CONSUMER_TIMEOUT, TARGET_GROUP_SIZE, STREAM_FILTER_SIZE_BYTES, DELAYED_RETRY_TYPE, DELAYED_RETRY_MIN,
    DELAYED_RETRY_MAX,
    QUEUE_TYPE, MAX_PRIORITY, QUORUM_INITIAL_GROUP_SIZE, SINGLE_ACTIVE_CONSUMER,
    *(_retired(key, MIRRORING_REMOVED) for key in ("ha-mode", "ha-params", "ha-sync-mode")),
    _retired("ha-sync-batch-size", MIRRORING_REMOVED, EVERY_QUEUE_TYPE),
    *(_retired(key, MIRRORING_REMOVED) for key in ("ha-promote-on-shutdown", "ha-promote-on-failure")),
    _retired("queue-master-locator", "deprecated, and refused by RabbitMQ 4.3; use queue-leader-locator"),
)
"""The order of "allowed: …" messages and of docs/config.md's table of operator policy keys."""

BY_KEY: Mapping[str, WireKey] = {row.key: row for row in ROWS}
BY_ARGUMENT: Mapping[str, WireKey] = {row.argument: row for row in ROWS if row.queue_argument}
POLICY_KEYS = tuple(row.key for row in ROWS if row.policy)
"""What the config takes in a user policy's definition."""
OPERATOR_POLICY_KEYS = tuple(row.key for row in ROWS if row.operator_policy)
"""What the config takes in an operator policy's definition."""
RETIRED_POLICY_KEYS: Mapping[str, str] = {row.key: row.retired for row in ROWS if row.retired}
"""Keys 3.10 still takes in a user policy but 4.x refuses, with what to use instead."""


SKIPPED_KEYS: Mapping[str, frozenset[str]] = {
    queue_type: frozenset(row.key for row in ROWS if queue_type not in row.queue_types) for queue_type in QUEUE_TYPES}
"""The keys that make RabbitMQ skip a policy for a queue of each type the project declares; none for another type
(a stream)."""
