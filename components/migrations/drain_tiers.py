"""`drain_tiers`: the wait tiers a queue's `retry.delays` dropped drain before they go.

- Step drain: the tiers the change removed stay planned exactly as the old delays planned them, out of the
  contract (`tiers`, `retry` stay the current ones), with the policies that set their TTLs.
- Step retire: they leave the plan (the queue guard refuses to delete one that still holds messages).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..model.fields import INVALID, Invalid, Problems, items
from ..model.key_paths import entry_path
from ..model.keys import DRAIN_TIERS_KEYS
from ..model.plan_types import MigrationPlan
from ..model.stack_config import RETIRE, Migration, Queue
from ..strategies.common import positive_duration
from .base import CheckScope, Format, Migrating, Reviewed
from .common import DRAINED, dropped, keep, queue_name, review_drain, review_drain_retire

NAME = "drain_tiers"
KEYS = DRAIN_TIERS_KEYS
STEPS = ("drain", RETIRE)
KEEPS_OUT_OF_CONTRACT = True


def _delays(p: Problems, path: str, raw: object) -> tuple[int, ...] | Invalid:
    if raw is None:
        p.add(path, "missing; list the queue's retry.delays as they were before the change, e.g. [2s, 10s, 1m]")
        return INVALID
    delays = [positive_duration(p, f"{path}[{i}]", value) for i, value in enumerate(items(p, path, raw, scalars=True))]
    if not delays or INVALID in delays:
        if not delays and isinstance(raw, Sequence) and not isinstance(raw, str):  # else `items` said what is wrong
            p.add(path, "empty; list the queue's retry.delays as they were before the change")
        return INVALID
    return tuple(d for d in delays if isinstance(d, int))


def parse(p: Problems, where: str, body: Mapping[str, Any], name: str, step: str, index: int) -> Migration | Invalid:
    queue = queue_name(p, f"{where}.queue", body.get("queue"))
    delays = _delays(p, f"{where}.delays", body.get("delays"))
    if queue is INVALID or delays is INVALID:
        return INVALID
    return Migration(name, NAME, step, index, source=queue, delays_ms=delays)


def check(p: Problems, m: Migration, vhost: CheckScope) -> None:
    """The queue has wait tiers now, fewer than before."""
    where = f"{vhost.migration_path(m)}.drain_tiers"
    entry = vhost.declared.get(m.source)
    if entry is None:
        p.add(f"{where}.queue", f'"{m.source}" is not a queue of this vhost; name the queue whose tiers are removed')
        return
    queue = entry.value
    if not isinstance(queue, Queue):
        return
    delays = getattr(queue.retry, "delays_ms", None)
    if queue.retry is None or delays is None:
        p.add(f"{where}.queue", f'"{m.source}" has no wait tiers (retry.strategy tiers); a change of strategy is a '
              "move to a successor queue")
    elif len(delays) >= len(m.delays_ms):
        p.add(f"{where}.delays", f"{m.source} has {len(delays)} tiers now and this lists {len(m.delays_ms)}: nothing "
              "to drain; list the delays as they were before the change, with more tiers than now")


def check_across(p: Problems, m: Migration, vhost: CheckScope) -> None:
    """Nothing: a drain depends on no other migration."""


def runs_shovels(m: Migration) -> bool:
    return False


def _resourced(policies: Any, old_path: str, new_path: str) -> tuple[Any, ...]:
    """Kept policies name the migration entry that keeps them as the source of their values."""
    return tuple(replace(p, sources={k: v.replace(old_path, new_path) for k, v in p.sources.items()})
                 for p in policies)


def plan(m: Migration, mpath: str, vhost: Migrating) -> MigrationPlan:
    """The queue's plan with the tiers its old delays had and its current ones lack. Step retire: the plan as it
    is; the names are what retires."""
    index = next(i for i, q in enumerate(vhost.vhost.queues) if q.name == m.source)
    path = entry_path(vhost.path, "queues", vhost.vhost.queues, index)
    current = vhost.retryables[m.source]
    old_queue = replace(current.config, retry=replace(current.retry, delays_ms=m.delays_ms))
    old = vhost.plan_retryable(old_queue, path, current.delay_levels, vhost.imports)
    gone = dropped(current.queues, old.queues)
    if not m.retiring:
        kept_policies = _resourced((p for p in old.policies if p.key not in {q.key for q in current.policies}),
                                   f"{path}.retry.delays", f"{mpath}.drain_tiers.delays")
        vhost.retryables[m.source] = replace(
            current, queues=keep(current.queues, old.queues), exchanges=keep(current.exchanges, old.exchanges),
            bindings=keep(current.bindings, old.bindings), policies=(*current.policies, *kept_policies),
            draining=tuple(t for t in old.tiers if t.queue in gone))
    return MigrationPlan(m, mpath, old_queues=gone)


def title(m: Reviewed, code: Format) -> str:
    return f"drain the removed wait tiers of {code(m.source)}"


review_first_step = review_drain


def review_retire(m: Reviewed, code: Format) -> list[str]:
    return review_drain_retire(
        "one still on the contract from before the drain loses the retries it publishes in republish mode with a "
        f"removed tier's routing key (no queue is bound to it any more; {code(m.source)}'s retry exchange drops "
        "them).")


def retired_family(m: Reviewed) -> str | None:
    return None


def drained(m: Reviewed) -> str:
    return DRAINED
