"""The stack config's list items as parsed, each with its index, name and key path, kept even when refused.

A refused entry keeps its name (when the name itself is fine) so that checks across entities (`config/crosschecks`)
and each migration kind's checks still see it: one bad field never makes its queue, exchange or policy look
undeclared elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from .fields import Invalid
from .stack_config import Application, Binding, Exchange, Operator, Policy, Queue, TopicPermission, Vhost

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One item of a config list, kept even when refused."""

    index: int
    name: str | None
    """The entry's name when that name is valid, even if the entry is not."""
    written: str | None
    """The name as written when it is a string, valid or not: references to it are never undeclared."""
    value: T | Invalid
    path: str
    """Its key path (`key_paths.entry_paths`)."""


@dataclass(frozen=True)
class BindingEntry(Entry[Binding]):
    external: bool = False
    """`external: true` as written, so that an exchange named only here counts as declared."""


@dataclass(frozen=True)
class QueueEntry(Entry[Queue]):
    bindings: tuple[BindingEntry, ...] = ()
    owned_queues: tuple[str, ...] = ()
    """Queues this entry brings into its vhost: itself, and a retryable queue's wait tiers and error queue."""
    owned_exchanges: tuple[str, ...] = ()
    """A retryable queue's retry, requeue and error exchanges."""


@dataclass(frozen=True)
class TopicEntry:
    path: str
    exchange: object
    """As written (`INVALID` when the entry is not a mapping): `crosschecks` checks that it names an exchange
    of the vhost."""
    value: TopicPermission | Invalid


@dataclass(frozen=True)
class ApplicationEntry(Entry[Application]):
    publishes: Sequence[object] = ()
    consumes: Sequence[object] = ()
    topics: tuple[TopicEntry, ...] = ()


@dataclass(frozen=True)
class OperatorEntry(Entry[Operator]):
    """An `operators[]` entry, kept even when refused."""


@dataclass(frozen=True)
class VhostEntry(Entry[Vhost]):
    """A vhost and every entry in it, for the checks across entities."""

    exchanges: tuple[Entry[Exchange], ...] = ()
    queues: tuple[QueueEntry, ...] = ()
    policies: tuple[Entry[Policy], ...] = ()
    operator_policies: tuple[Entry[Policy], ...] = ()
    applications: tuple[ApplicationEntry, ...] = ()
    operators: tuple[OperatorEntry, ...] = ()
    unreadable: frozenset[str] = frozenset()
    """Its list keys written as something other than a list (already reported)."""
