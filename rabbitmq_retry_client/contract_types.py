"""The retry contract as Python types: the shape `contract.schema.json` defines, for the client that reads a contract
and the components that export one (their Pulumi package schema is generated from these classes, so annotations
here are evaluated, not strings: no `from __future__ import annotations`)."""

from typing import NotRequired, TypedDict


class ContractTier(TypedDict):
    """Strategy tiers: one wait tier of the retry contract."""

    routing_key: str
    """The tier's routing key on retry_exchange."""
    queue: str
    """The tier's wait queue."""
    delay_ms: int
    """How long the tier holds a message, in ms."""


class ContractBackoff(TypedDict):
    """Strategy levels: retry n waits min(max_ms, initial_ms × multiplier^(n-1)) ± jitter, never above max_ms."""

    initial_ms: int
    """The first retry's delay, in ms."""
    multiplier: float
    """Growth per retry."""
    max_ms: int
    """The longest delay, in ms."""
    jitter: float
    """Relative spread, 0 ≤ jitter < 1."""


class ContractMigration(TypedDict):
    """Present only while a migration moves this queue or into it."""

    name: str
    """The migration's name in the stack file."""
    step: str
    """"move" or "retire"."""
    successor: NotRequired[str]
    """On the old queue: the queue that replaces it."""
    predecessor: NotRequired[str]
    """On the successor: the queue it replaces."""
    drains_by: NotRequired[str]
    """On the successor: how what the predecessor holds reaches it ("shovel")."""


class RetryContract(TypedDict):
    """What a consumer needs to retry and park the messages of one retryable queue (docs/contract.md)."""

    strategy: NotRequired[str]
    """The strategy: tiers, levels or native; absent: tiers."""
    vhost: str
    """The queue's vhost."""
    queue: str
    """The input queue the consumer reads."""
    queue_type: str
    """"classic" or "quorum"."""
    max_retries: int
    """Retries before a message is parked."""
    delivery_limit: NotRequired[int | None]
    """The quorum queue's delivery limit (null for a classic queue)."""
    attempt_header: str
    """The header counting failed attempts: retry-count, or x-delivery-count for native."""
    error_exchange: str
    """Fanout exchange a consumer publishes the parking copy to."""
    error_queue: str
    """Where parked messages wait for a person."""
    migration: NotRequired[ContractMigration]
    """Present only while a migration moves this queue or into it."""
    retry_exchange: NotRequired[str]
    """Tiers: direct exchange of the wait tiers."""
    reject_routes_to: NotRequired[str]
    """Tiers: the routing key a rejected message dead-letters with (the first tier's)."""
    tiers: NotRequired[list[ContractTier]]
    """Tiers: the wait tiers, shortest first."""
    retry_call: NotRequired[str]
    """Native: basic.reject(requeue=true)."""
    min_delay_ms: NotRequired[int]
    """Native: the wait before the first redelivery, in ms."""
    max_delay_ms: NotRequired[int]
    """Native: the longest wait; levels: the longest delay the levels were built for, in ms."""
    delay_exchange: NotRequired[str]
    """Levels: the top level, where a delayed copy is published."""
    delay_exchanges: NotRequired[list[str]]
    """Levels: every level's exchange, level 0 first."""
    delay_unit_ms: NotRequired[int]
    """Levels: level k holds a message delay_unit_ms × 2^k."""
    delay_words: NotRequired[int]
    """Levels: binary digits in a routing key."""
    delay_levels: NotRequired[int]
    """Levels: how many levels the vhost has."""
    routing_key_format: NotRequired[str]
    """Levels: how a delayed copy's routing key is built, in words."""
    backoff: NotRequired[ContractBackoff]
    """Levels: the delay of each retry."""
