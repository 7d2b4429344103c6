"""Retry paths: what must stay whole while anything on it holds a message (docs/guard.md, "The path guard").

A retry path is everything a message of one queue can pass through: for a retryable queue its input queue, wait
queues, error queue, their exchanges and the bindings out of them, the shovels of a migration that moves its
messages out (or in, from a queue the stack does not declare), and for strategy `levels` the vhost's delay levels
its copies wait in; for the delay levels their own queues, exchanges and bindings; for a plain queue the queue. An
application's binding into a queue is not on any path: deleting it only stops new publishes, which a migration's
step move does on purpose.

What a queue on a path needs, so that what waits in it is not lost, is narrower than the path (`needs`): the queue
itself; for a queue whose messages leave by themselves (a wait tier or a delay level: they expire), every exchange,
binding and queue on its dead-letter route back; for a queue a shovel drains, that shovel. A consumer's queue (the
input queue, an error queue, a plain queue) needs only itself: its messages wait for a consumer, not for a route.
So removing an empty wait tier from a busy queue goes through, and deleting the requeue binding of a wait tier that
holds messages does not. The guard (`guard.py`) reads a queue only when the change deletes or replaces one of the
parts it needs.

This module says what the paths of a plan are, and which queues a change between two inventories puts at risk; it
is pure, so the program, the review and the tests ask the same question of the same data.

An inventory is JSON data (it is stored in the stack's state, as the input of the guard resources):
`{"vhost": …, "paths": [{"path": …, "queues": [...], "parts": {part: fingerprint}, "needs": {queue: [part]}}]}`.
A part is `"<Kind> <physical name>"` (a binding: `Binding <source> → <destination>`, and its routing key); its
fingerprint changes exactly when an input of the resource that forces a replacement does (every input of a queue,
exchange, binding and shovel), never for policies, which update in place and are not parts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import wire
from ..model.plan_types import (
    BindingPlan,
    DelayLevelsPlan,
    ExchangePlan,
    QueuePlan,
    RetryablePlan,
    ShovelPlan,
    VhostPlan,
)

DELAY_LEVELS_PATH = "delay levels"
"""The path of a vhost's shared delay levels."""


@dataclass(frozen=True)
class RetryPath:
    """One path: the queues whose messages it carries, every part whose deletion could lose them, and what each
    queue needs."""

    name: str
    """The input queue's name (a plain queue's own name), or DELAY_LEVELS_PATH."""
    queues: tuple[str, ...]
    """Every queue a message of the path can wait in."""
    parts: Mapping[str, str]
    """Part → fingerprint of its replace-forcing inputs."""
    needs: Mapping[str, tuple[str, ...]]
    """Queue → the parts (of any path of the vhost) what waits in it needs (see the module's docstring)."""

    def data(self) -> dict[str, Any]:
        return {"path": self.name, "queues": list(self.queues), "parts": dict(sorted(self.parts.items())),
                "needs": {queue: sorted(parts) for queue, parts in self.needs.items()}}


def _fingerprint(*values: Any) -> str:
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def queue_part(name: str) -> str:
    return f"Queue {name}"


def exchange_part(name: str) -> str:
    return f"Exchange {name}"


def binding_part(binding: BindingPlan) -> str:
    key = f" ({binding.routing_key})" if binding.routing_key else ""
    return f"Binding {binding.source} → {binding.destination}{key}"


def _queue(queue: QueuePlan) -> tuple[str, str]:
    return queue_part(queue.name), _fingerprint(queue.name, queue.arguments_json)


def _exchange(exchange: ExchangePlan) -> tuple[str, str]:
    return exchange_part(exchange.name), _fingerprint(exchange.name, exchange.type, dict(exchange.arguments))


def _binding(binding: BindingPlan) -> tuple[str, str]:
    return binding_part(binding), _fingerprint(binding.source, binding.destination, binding.destination_type,
                                               binding.routing_key, binding.arguments_json)


def _shovel(shovel: ShovelPlan) -> tuple[str, str]:
    return f"Shovel {shovel.name}", _fingerprint(shovel.name, shovel.source, shovel.destination, shovel.ack_mode,
                                                 shovel.source_delete_after, shovel.external_source)


EXPIRING_ROLES = frozenset({"wait", "delay"})
"""Queues whose messages leave without a consumer (they expire), by their dead-letter route."""


class Routes:
    """The dead-letter routes of a vhost's plan: where each queue dead-letters to, and each exchange's bindings."""

    def __init__(self, queues: Iterable[QueuePlan], bindings: Iterable[BindingPlan]) -> None:
        self.queues = {q.name: q for q in queues}
        self.out: dict[str, list[BindingPlan]] = {}
        for binding in bindings:
            self.out.setdefault(binding.source, []).append(binding)

    def way_back(self, queue: QueuePlan) -> list[str]:
        """The parts on `queue`'s dead-letter route: its exchange, each binding out of it (and of every exchange it
        routes to), and each queue it reaches; the default exchange routes by the dead-letter routing key."""
        arguments = queue.arguments
        if wire.DEAD_LETTER_EXCHANGE.argument not in arguments:
            return []
        exchange = str(arguments[wire.DEAD_LETTER_EXCHANGE.argument])
        if exchange == "":
            target = arguments.get(wire.DEAD_LETTER_ROUTING_KEY.argument)
            return [queue_part(str(target))] if target else []
        found: list[str] = []
        todo, seen = [exchange], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            found.append(exchange_part(current))
            for binding in self.out.get(current, ()):
                found.append(binding_part(binding))
                if binding.destination_type == "exchange":
                    todo.append(binding.destination)
                else:
                    found.append(queue_part(binding.destination))
        return found

    def needs(self, queue: str, shovels: Sequence[ShovelPlan]) -> tuple[str, ...]:
        """What what waits in `queue` needs (the module's docstring)."""
        plan = self.queues.get(queue)
        found = [queue_part(queue)] if plan is not None else []
        if plan is not None and plan.role in EXPIRING_ROLES:
            found += self.way_back(plan)
        found += [f"Shovel {s.name}" for s in shovels if s.source == queue]
        return tuple(dict.fromkeys(found))


def _drains(shovel: ShovelPlan, queues: set[str]) -> bool:
    """Whether deleting `shovel` can strand messages of the path of `queues`: it moves them out of one of its queues,
    or into one of them out of a queue the stack does not declare (an adopted runtime queue, whose messages only
    this shovel brings to the path). A shovel into a declared queue from another declared one is on its source's
    path only: deleting it strands nothing of the destination's, which a retire leaves holding what it received."""
    return shovel.source in queues or (shovel.external_source and shovel.destination in queues)


def _carries(binding: BindingPlan, exchanges: set[str]) -> bool:
    """Whether `binding` routes out of one of `exchanges` (a retry, a requeue, a parking, a delivery from the delay
    levels). A binding from an application's exchange only feeds new publishes in: deleting it (a migration's step
    move does) strands nothing that waits."""
    return binding.source in exchanges


def _path(name: str, queues: Iterable[str], parts: Iterable[tuple[str, str]], routes: Routes,
          shovels: Sequence[ShovelPlan]) -> RetryPath:
    listed = tuple(dict.fromkeys(queues))
    return RetryPath(name, listed, dict(parts), {q: routes.needs(q, shovels) for q in listed})


def retryable_path(plan: RetryablePlan, vhost_levels: DelayLevelsPlan | None = None,
                   shovels: Sequence[ShovelPlan] = (), routes: Routes | None = None) -> RetryPath:
    """A retryable queue's path; `vhost_levels`: the vhost's delay levels, whose queues its copies wait in when it
    retries through them (strategy `levels`); `shovels`: a migration's shovels that drain it (`_drains`); `routes`:
    the vhost's dead-letter routes (by default, this queue's and the levels' own).

    A binding declared outside it into its input queue is not on its path: an application's only feeds new
    publishes, and a migration's from the delay levels (copies of the queue it replaces) is removed with the
    migration's entry once `delay_levels.max_delay` has passed, which no queue's depth can tell: the levels are
    shared, and busy with other queues' copies."""
    levels = vhost_levels if plan.delay_levels is not None else None
    own = {e.name for e in plan.exchanges} | ({e.name for e in levels.exchanges} if levels is not None else set())
    if routes is None:
        routes = Routes([*plan.queues, *(levels.queues if levels is not None else ())],
                        [*plan.bindings, *(levels.bindings if levels is not None else ())])
    queues = [q.name for q in plan.queues] + ([q.name for q in levels.queues] if levels is not None else [])
    queues += [s.source for s in shovels if s.external_source]
    parts = [*map(_queue, plan.queues), *map(_exchange, plan.exchanges),
             *(_binding(b) for b in plan.bindings if _carries(b, own)), *map(_shovel, shovels)]
    return _path(plan.config.name, queues, parts, routes, shovels)


def delay_levels_path(plan: DelayLevelsPlan, routes: Routes | None = None) -> RetryPath:
    routes = routes or Routes(plan.queues, plan.bindings)
    return _path(DELAY_LEVELS_PATH, (q.name for q in plan.queues),
                 [*map(_queue, plan.queues), *map(_exchange, plan.exchanges), *map(_binding, plan.bindings)],
                 routes, ())


def vhost_paths(plan: VhostPlan) -> list[RetryPath]:
    """Every path of a vhost's plan: its retryable queues, its delay levels and its plain queues."""
    levels = plan.delay_levels
    routes = Routes([*plan.queues, *(q for r in plan.retryables for q in r.queues), *(levels.queues if levels else ())],
                    [*plan.bindings, *(b for r in plan.retryables for b in r.bindings),
                     *(b for m in plan.migrations for b in m.bindings), *(levels.bindings if levels else ())])
    paths = [retryable_path(r, levels, [s for s in plan.shovels if _drains(s, {q.name for q in r.queues})], routes)
             for r in plan.retryables]
    if levels is not None:
        paths.append(delay_levels_path(levels, routes))
    for queue in plan.queues:
        shovels = [s for s in plan.shovels if _drains(s, {queue.name})]
        paths.append(_path(queue.name, [queue.name, *(s.source for s in shovels if s.external_source)],
                           [_queue(queue), *map(_shovel, shovels)], routes, shovels))
    return paths


def inventory(vhost: str, paths: Iterable[RetryPath]) -> dict[str, Any]:
    """What the guard resources store: the vhost and each path, as JSON data."""
    return {"vhost": vhost, "paths": [p.data() for p in paths]}


def _paths_of(data: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(p["path"]): p for p in (data or {}).get("paths") or ()}


def _all_parts(data: Mapping[str, Any] | None) -> dict[str, str]:
    return {part: fingerprint for path in _paths_of(data).values()
            for part, fingerprint in (path.get("parts") or {}).items()}


def changed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> set[str]:
    """Every part of `old` (whichever path lists it) that going to `new` deletes or replaces: gone from every path of
    `new`, or listed there with another fingerprint; every part, when the vhost is another one (or `new` is None)."""
    before, after = _all_parts(old), _all_parts(new)
    if new is None or (old or {}).get("vhost") != new.get("vhost"):
        return set(before)
    return {part for part, fingerprint in before.items() if after.get(part) != fingerprint}


def changed_parts(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Path → its own parts that going from `old` to `new` deletes or replaces. A path whose parts are only added to
    is not touched: nothing on it is deleted."""
    gone = changed(old, new)
    touched: dict[str, list[str]] = {}
    for name, path in _paths_of(old).items():
        if parts := sorted(p for p in (path.get("parts") or {}) if p in gone):
            touched[name] = parts
    return touched


def at_risk(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, dict[str, list[str]]]:
    """Path → queue → the parts it needs that going from `old` to `new` deletes or replaces: the queues the guard
    reads, and why. A path whose queues need nothing that changes is not in it."""
    gone = changed(old, new)
    found: dict[str, dict[str, list[str]]] = {}
    for name, path in _paths_of(old).items():
        needs = path.get("needs") or {}
        for queue in path.get("queues") or ():
            if hit := sorted(p for p in needs.get(queue, [f"Queue {queue}"]) if p in gone):
                found.setdefault(name, {})[str(queue)] = hit
    return found
