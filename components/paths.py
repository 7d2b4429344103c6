"""Retry paths: what must stay whole while anything on it holds a message (docs/guard.md, "The path guard").

A retry path is everything a message of one queue can pass through: for a retryable queue its input queue,
wait queues, error queue, their exchanges and bindings, the bindings that feed its input queue, the shovels of a
migration that moves its messages out (or in, from a queue the stack does not declare), and for strategy `levels`
the vhost's delay levels its copies wait in; for the delay levels their own queues, exchanges and bindings; for a
plain queue the queue and the bindings that feed it.

Deleting any part of a path while one of its queues holds a message can lose that message even when the queue
itself is kept: a wait queue whose requeue exchange is gone dead-letters into nothing. So the guard checks the
whole path before the first part of it is deleted or replaced (`guard.py`). This module says what the paths of a
plan are and which of them a change between two inventories deletes or replaces a part of; it is pure, so the
program, the review and the tests ask the same question of the same data.

An inventory is JSON data (it is stored in the stack's state, as the input of the guard resources):
`{"vhost": …, "paths": [{"path": …, "queues": [...], "parts": {part: fingerprint}}]}`. A part is
`"<Kind> <physical name>"` (a binding's name is its logical key); its fingerprint changes exactly when an input
of the resource that forces a replacement does (every input of a queue, exchange, binding and shovel), never for
policies, which update in place and are not parts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .entries import BindingPlan, DelayLevelsPlan, ExchangePlan, QueuePlan, RetryablePlan, VhostPlan
from .migrations import ShovelPlan

DELAY_LEVELS_PATH = "delay levels"
"""The path of a vhost's shared delay levels."""


@dataclass(frozen=True)
class RetryPath:
    """One path: the queues whose messages it carries and every part whose deletion could lose them."""

    name: str
    """The input queue's name (a plain queue's own name), or DELAY_LEVELS_PATH."""
    queues: tuple[str, ...]
    """Every queue a message of the path can wait in (read before any part is deleted)."""
    parts: Mapping[str, str]
    """Part → fingerprint of its replace-forcing inputs."""

    def data(self) -> dict[str, Any]:
        return {"path": self.name, "queues": list(self.queues), "parts": dict(sorted(self.parts.items()))}


def _fingerprint(*values: Any) -> str:
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _queue(queue: QueuePlan) -> tuple[str, str]:
    return f"Queue {queue.name}", _fingerprint(queue.name, queue.arguments_json)


def _exchange(exchange: ExchangePlan) -> tuple[str, str]:
    return f"Exchange {exchange.name}", _fingerprint(exchange.name, exchange.type, dict(exchange.arguments))


def _binding(binding: BindingPlan) -> tuple[str, str]:
    return f"Binding {binding.key}", _fingerprint(binding.source, binding.destination, binding.destination_type,
                                                  binding.routing_key, binding.arguments_json)


def _shovel(shovel: ShovelPlan) -> tuple[str, str]:
    return f"Shovel {shovel.name}", _fingerprint(shovel.name, shovel.source, shovel.destination, shovel.ack_mode,
                                                 shovel.source_delete_after, shovel.external_source)


def _path(name: str, queues: Iterable[str], parts: Iterable[tuple[str, str]]) -> RetryPath:
    return RetryPath(name, tuple(dict.fromkeys(queues)), dict(parts))


def retryable_path(plan: RetryablePlan, levels: DelayLevelsPlan | None = None,
                   feeding: Sequence[BindingPlan] = (), shovels: Sequence[ShovelPlan] = ()) -> RetryPath:
    """A retryable queue's path; `levels`: the delay levels its copies wait in (strategy `levels`); `feeding`:
    the bindings declared outside it that feed its input queue; `shovels`: a migration's shovels that drain it
    (`_drains`)."""
    queues = [q.name for q in plan.queues] + ([q.name for q in levels.queues] if levels is not None else [])
    parts = [*map(_queue, plan.queues), *map(_exchange, plan.exchanges), *map(_binding, plan.bindings),
             *map(_binding, feeding), *map(_shovel, shovels)]
    return _path(plan.config.name, queues, parts)


def delay_levels_path(plan: DelayLevelsPlan) -> RetryPath:
    return _path(DELAY_LEVELS_PATH, (q.name for q in plan.queues),
                 [*map(_queue, plan.queues), *map(_exchange, plan.exchanges), *map(_binding, plan.bindings)])


def _drains(shovel: ShovelPlan, queues: set[str]) -> bool:
    """Whether deleting `shovel` can strand messages of the path of `queues`: it moves them out of one of its queues.
    A shovel into a declared queue is on its source's path only: deleting it strands nothing of the destination's,
    which a retire leaves holding what it received. The shovel of an external move (an adopted runtime queue, which
    the stack does not declare) is on a path of its own (`external_path`)."""
    return shovel.source in queues and not shovel.external_source


def external_path(shovel: ShovelPlan) -> RetryPath:
    """The path of an external move's shovel: the old runtime queue it drains, and the shovel. Deleting the shovel
    is refused while that queue holds a message (it would be stranded there), never for what the successor holds
    (a live work queue, a parked message in its error queue: neither is stranded by the shovel going)."""
    return _path(f"{shovel.source} (adopted, migration {shovel.migration})", [shovel.source], [_shovel(shovel)])


def vhost_paths(plan: VhostPlan) -> list[RetryPath]:
    """Every path of a vhost's plan: its retryable queues, its delay levels and its plain queues."""
    feeding: dict[str, list[BindingPlan]] = {}
    for binding in (*plan.bindings, *(b for m in plan.migrations for b in m.bindings)):
        if binding.destination_type == "queue":
            feeding.setdefault(binding.destination, []).append(binding)
    shovels_of: dict[str, list[ShovelPlan]] = {}
    for retryable in plan.retryables:
        names = {q.name for q in retryable.queues}
        shovels_of[retryable.config.name] = [s for s in plan.shovels if _drains(s, names)]
    paths = [retryable_path(r, plan.delay_levels if r.delay_levels is not None else None,
                            feeding.get(r.config.name, ()), shovels_of[r.config.name]) for r in plan.retryables]
    if plan.delay_levels is not None:
        paths.append(delay_levels_path(plan.delay_levels))
    for queue in plan.queues:
        shovels = [s for s in plan.shovels if _drains(s, {queue.name})]
        paths.append(_path(queue.name, [queue.name],
                           [_queue(queue), *map(_binding, feeding.get(queue.name, ())), *map(_shovel, shovels)]))
    paths += [external_path(s) for s in plan.shovels if s.external_source]
    return paths


def inventory(vhost: str, paths: Iterable[RetryPath]) -> dict[str, Any]:
    """What the guard resources store: the vhost and each path, as JSON data."""
    return {"vhost": vhost, "paths": [p.data() for p in paths]}


def _paths_of(data: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(p["path"]): p for p in (data or {}).get("paths") or ()}


def changed_parts(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Path → its parts that going from inventory `old` to `new` deletes or replaces (a path that is gone: all of
    them). A path whose parts are only added to is not touched: nothing on it is deleted."""
    old_paths, new_paths = _paths_of(old), _paths_of(new)
    moved_vhost = (old or {}).get("vhost") != (new or {}).get("vhost")
    touched: dict[str, list[str]] = {}
    for name, path in old_paths.items():
        kept: Mapping[str, str] = {} if moved_vhost else (new_paths.get(name) or {}).get("parts") or {}
        parts = [part for part, fingerprint in sorted((path.get("parts") or {}).items())
                 if kept.get(part) != fingerprint]
        if parts:
            touched[name] = parts
    return touched


def queues_of(data: Mapping[str, Any] | None, path: str) -> list[str]:
    return [str(q) for q in (_paths_of(data).get(path) or {}).get("queues") or ()]
