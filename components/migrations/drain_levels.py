"""`drain_levels`: the delay levels a lower `delay_levels.max_delay` dropped drain before they go.

- Step drain: the levels the change removed stay planned exactly as the old `max_delay` planned them, out of the
  contract (`delay_levels` stays the current count).
- Step retire: they leave the plan (the queue guard refuses to delete one that still holds messages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..model.fields import INVALID, Invalid, Problems
from ..model.keys import DRAIN_LEVELS_KEYS
from ..model.plan_types import MigrationPlan
from ..model.stack_config import RETIRE, DelayLevels, Migration
from ..strategies.common import positive_duration
from .base import CheckScope, Format, Migrating, Reviewed
from .common import DRAINED, dropped, keep, review_drain, review_drain_retire

NAME = "drain_levels"
KEYS = DRAIN_LEVELS_KEYS
STEPS = ("drain", RETIRE)
KEEPS_OUT_OF_CONTRACT = True


def parse(p: Problems, where: str, body: Mapping[str, Any], name: str, step: str, index: int) -> Migration | Invalid:
    if "max_delay" not in body:
        p.add(f"{where}.max_delay", "missing; the vhost's delay_levels.max_delay before the change, e.g. 1d")
        return INVALID
    longest = positive_duration(p, f"{where}.max_delay", body["max_delay"])
    if longest is INVALID:
        return INVALID
    return Migration(name, NAME, step, index, max_delay_ms=longest)


def check(p: Problems, m: Migration, vhost: CheckScope) -> None:
    """The vhost has delay levels now, fewer than before (unchecked when its `delay_levels` is refused)."""
    if isinstance(vhost.delay_levels, Invalid):
        return
    where = f"{vhost.migration_path(m)}.drain_levels.max_delay"
    if vhost.delay_levels is None:
        p.add(where, "this vhost has no delay levels now; a vhost whose last levels queue moved away drains them "
              "with that move (remove this entry)")
    elif DelayLevels(vhost.delay_levels.unit_ms, m.max_delay_ms).levels <= vhost.delay_levels.levels:
        p.add(where, f"{vhost.delay_levels.levels} levels now and as many or fewer before: nothing to drain; write "
              "delay_levels.max_delay as it was before the change")


def check_across(p: Problems, m: Migration, vhost: CheckScope) -> None:
    """Nothing: a drain depends on no other migration."""


def runs_shovels(m: Migration) -> bool:
    return False


def plan(m: Migration, mpath: str, vhost: Migrating) -> MigrationPlan:
    """The vhost's delay levels with the levels the old `max_delay` had and the current one lacks. Step retire: the
    levels as they are; the names are what retires."""
    levels = vhost.delay_levels
    assert levels is not None
    config = levels.config
    old = vhost.plan_levels(DelayLevels(config.unit_ms, m.max_delay_ms, config.queue_type, config.policy_priority),
                            vhost.imports, f"{vhost.path}.delay_levels")
    gone = dropped(levels.queues, old.queues)
    if not m.retiring:
        vhost.delay_levels = replace(levels, queues=keep(levels.queues, old.queues),
                                     exchanges=keep(levels.exchanges, old.exchanges),
                                     bindings=keep(levels.bindings, old.bindings),
                                     policies=keep(levels.policies, old.policies))
    return MigrationPlan(m, mpath, old_queues=gone)


def title(m: Reviewed, code: Format) -> str:
    return "drain the removed delay levels"


review_first_step = review_drain


def review_retire(m: Reviewed, code: Format) -> list[str]:
    return review_drain_retire("one still on the contract from before the drain fails to publish a delayed copy to a "
                               "removed level (channel error 404 NOT_FOUND).")


def retired_family(m: Reviewed) -> str | None:
    return None


def drained(m: Reviewed) -> str:
    return DRAINED
