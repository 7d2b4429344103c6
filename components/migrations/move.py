"""`move`: a queue's messages move to a successor queue (a change that would replace the queue: its type, its
strategy), by shovel.

- Step move: the old queue and its successor are both ordinary queues of the config; the plan adds one shovel per
  moved queue (the queue, and its error queue) and the shovel user's permissions in the vhost. What waits in the
  old queue's wait tiers (or delay levels, or inside it: native) returns to the old queue on time and the shovel
  carries it on, so no wait restarts and none ends early. Both queues' contracts name the migration.
- Step retire: the old queue is gone from the config, so its objects leave the plan (the queue guard refuses to
  delete one that still holds messages); with delay levels, the successor is bound for the old queue's key, so a
  copy still waiting for the old queue reaches the successor.
- `external`: the old queue is not the stack's (an application declared it at runtime and `make adopt` took it
  over beside): nothing of it is planned; step move adds the shovels, step retire removes them, and
  `make migrate-retire` deletes the old objects on the broker once each is empty and unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..model import naming
from ..model.durations import format_duration
from ..model.fields import INVALID, Invalid, Problems, entity_name, items, mapping
from ..model.keys import EXTERNAL_KEYS, MOVE_KEYS
from ..model.plan_types import DRAINS_BY, BindingPlan, MigrationPlan, ShovelPlan
from ..model.stack_config import RETIRE, ExternalSource, Migration, Queue
from .base import CheckScope, Format, Migrating, Reviewed
from .common import queue_name

NAME = "move"
KEYS = MOVE_KEYS
STEPS = ("move", RETIRE)
KEEPS_OUT_OF_CONTRACT = False


def _names(p: Problems, path: str, raw: object, kind: str) -> tuple[str, ...] | Invalid:
    names = [entity_name(p, f"{path}[{i}]", value, kind) for i, value in enumerate(items(p, path, raw, scalars=True))]
    if INVALID in names:
        return INVALID
    return tuple(n for n in names if isinstance(n, str))


def _external(p: Problems, path: str, raw: object) -> ExternalSource | Invalid:
    """`move.external`: `true` (the old queue alone) or a mapping naming the rest of the old runtime topology."""
    if raw is True:
        return ExternalSource()
    if not isinstance(raw, Mapping):
        p.add(path, f"expected true or a mapping of {', '.join(EXTERNAL_KEYS)}, got {raw!r}; write external: true "
              "when the old queue is not declared by this stack (e.g. adopted by make adopt), else remove it")
        return INVALID
    data = mapping(p, path, raw, EXTERNAL_KEYS)
    if data is INVALID:
        return INVALID
    error_queue = (entity_name(p, f"{path}.error_queue", data["error_queue"], "queue")
                   if data.get("error_queue") is not None else None)
    queues, exchanges, policies = (_names(p, f"{path}.{key}", data.get(key), kind)
                                   for key, kind in (("queues", "queue"), ("exchanges", "exchange"),
                                                     ("policies", "policy")))
    if INVALID in (error_queue, queues, exchanges, policies):
        return INVALID
    assert error_queue is None or isinstance(error_queue, str)
    assert isinstance(queues, tuple) and isinstance(exchanges, tuple) and isinstance(policies, tuple)
    return ExternalSource(error_queue, queues, exchanges, policies)


def parse(p: Problems, where: str, body: Mapping[str, Any], name: str, step: str, index: int) -> Migration | Invalid:
    source, target = (queue_name(p, f"{where}.{key}", body.get(key)) for key in ("from", "to"))
    if source is INVALID or target is INVALID:
        return INVALID
    if source == target:
        p.add(f"{where}.to", f'"{target}" is the queue it moves from; name the successor queue (a new name: a '
              "queue keeps its type and its strategy for life)")
        return INVALID
    external = _external(p, f"{where}.external", body.get("external")) if "external" in body else None
    if external is INVALID:
        return INVALID
    return Migration(name, NAME, step, index, source=source, target=target, external=external)


def written(name: str, source: str, target: str, external: Mapping[str, Any] | bool = True) -> dict[str, Any]:
    """A `migrations[]` entry in step move as the stack file writes it (`make adopt` writes external ones)."""
    return {"name": name, NAME: {"from": source, "to": target, "external": external}, "step": STEPS[0]}


def check(p: Problems, m: Migration, vhost: CheckScope) -> None:
    """A queue moves to one successor; both queues are the vhost's in step move, the successor alone in retire."""
    if m.source in vhost.moving_out:
        p.add(f"{vhost.migration_path(m)}.move.from", f"{m.source} already moves in migration "
              f"{vhost.moving_out[m.source].name}; a queue moves to one successor")
    vhost.moving_out.setdefault(m.source, m)
    where = f"{vhost.migration_path(m)}.move"
    queues = f"{vhost.path}.queues"
    declared = vhost.declared
    if m.target not in declared:
        p.add(f"{where}.to", f'"{m.target}" is not a queue of this vhost; add the successor to {queues} '
              "(it must exist before anything moves to it)")
    if m.external is not None:
        target = declared.get(m.target)
        new = None if target is None else target.value
        if m.external.error_queue and isinstance(new, Queue) and new.retry is None:
            p.add(f"{where}.to", f"{m.external.error_queue} holds parked messages that move to {m.target}'s error "
                  f"queue; give {m.target} a retry block (any strategy)")
        return
    if m.retiring:
        if m.source in declared:
            p.add(declared[m.source].path, f'remove queue {m.source} from {queues}: step retire of '
                  f"migration {m.name} deletes it once empty")
        return
    if m.source not in declared:
        p.add(f"{where}.from", f'"{m.source}" is not a queue of this vhost; in step move the old queue stays in '
              f"{queues}, exactly as it was (remove it only in step retire)")
        return
    source = declared[m.source]
    if source.bindings:
        p.add(f"{source.path}.bindings", f"{m.source} is moving to {m.target} (migration {m.name}): "
              f"publishes would reach both queues and the shovel would duplicate them; move its bindings to "
              f"{m.target}")
    target = declared.get(m.target)
    old, new = source.value, None if target is None else target.value
    if isinstance(old, Queue) and isinstance(new, Queue) and old.retry is not None and new.retry is None:
        p.add(f"{where}.to", f"{m.source} has an error queue whose parked messages move to {m.target}'s error "
              f"queue; give {m.target} a retry block (any strategy)")


def check_across(p: Problems, m: Migration, vhost: CheckScope) -> None:
    """Not on to a third queue in the same step; an external move's old objects are none of the stack's (the stack
    would own, and one day delete, what `make migrate-retire` deletes only once empty)."""
    chained = vhost.moving_out.get(m.target)
    if chained is not None and chained.step == m.step and not m.retiring:
        p.add(f"{vhost.migration_path(m)}.move.to", f"{m.target} moves on to {chained.target} in the same "
              f"step (migration {chained.name}); finish this migration (step retire) before starting that one")
    if m.external is None:
        return
    owned_queues = {name: q.path for q in vhost.queues for name in q.owned_queues}
    owned_exchanges = {name: q.index for q in vhost.queues for name in q.owned_exchanges}
    declared_exchanges = {x.written: x.index for x in vhost.exchanges if x.written is not None}
    where = f"{vhost.migration_path(m)}.move"
    old_queues = [(f"{where}.from", m.source)]
    if m.external.error_queue:
        old_queues.append((f"{where}.external.error_queue", m.external.error_queue))
    old_queues += [(f"{where}.external.queues[{i}]", q) for i, q in enumerate(m.external.queues)]
    for at, queue in old_queues:
        if queue in owned_queues:
            p.add(at, f'"{queue}" is declared by this stack ({owned_queues[queue]}); external names '
                  "objects the stack does not declare: remove external (a move between two queues of the stack) "
                  "or name the runtime queue")
    for i, exchange in enumerate(m.external.exchanges):
        if exchange in declared_exchanges or exchange in owned_exchanges:
            p.add(f"{where}.external.exchanges[{i}]", f'"{exchange}" is declared by this stack; list only the old '
                  "topology's own exchanges, which make migrate-retire deletes once unused")


def runs_shovels(m: Migration) -> bool:
    return not m.retiring


def _shovel_user(m: Migration, mpath: str, shovel_user: str | None) -> str:
    if shovel_user is None:
        raise ValueError(f"{mpath}: migration {m.name} moves a queue with shovels; plan the vhost with the stack's "
                         "shovel user (naming.shovel_user(project, stack))")
    return shovel_user


def _external_plan(m: Migration, mpath: str, shovel_user: str | None) -> MigrationPlan:
    """Nothing of the old objects is planned: they are nobody's in the stack."""
    assert m.external is not None
    old_queues = (*m.external.queues, m.source, *((m.external.error_queue,) if m.external.error_queue else ()))
    if m.retiring:
        return MigrationPlan(m, mpath, old_queues=old_queues)
    shovel_user = _shovel_user(m, mpath, shovel_user)
    shovels = [ShovelPlan(naming.shovel_key(m.name), naming.shovel(m.name), m.source, m.target, m.name,
                          shovel_user, external_source=True)]
    if m.external.error_queue:
        shovels.append(ShovelPlan(naming.shovel_key(m.name, error=True), naming.shovel(m.name, error=True),
                                  m.external.error_queue, naming.error_queue(m.target), m.name, shovel_user,
                                  external_source=True))
    return MigrationPlan(m, mpath, shovels=tuple(shovels), old_queues=old_queues)


def _own_plan(m: Migration, mpath: str, vhost: Migrating) -> MigrationPlan:
    old = vhost.retryables.get(m.source)
    if m.retiring:
        bindings = (() if vhost.vhost.delay_levels is None else
                    (BindingPlan(naming.migration_binding_key(m.name), naming.DELIVERY_EXCHANGE, m.target,
                                 naming.delivery_pattern(m.source)),))
        return MigrationPlan(m, mpath, bindings=bindings,
                             old_queues=(m.source, naming.error_queue(m.source)))
    shovel_user = _shovel_user(m, mpath, vhost.shovel_user)
    shovels = [ShovelPlan(naming.shovel_key(m.name), naming.shovel(m.name), m.source, m.target, m.name, shovel_user)]
    if old is not None:
        shovels.append(ShovelPlan(naming.shovel_key(m.name, error=True), naming.shovel(m.name, error=True),
                                  old.error_queue, naming.error_queue(m.target), m.name, shovel_user))
    return MigrationPlan(m, mpath, shovels=tuple(shovels),
                         old_queues=tuple(q.name for q in old.queues) if old is not None else (m.source,))


def _contract(m: Migration, queue: str) -> dict[str, str]:
    """The contract's `migration` object of the old queue or its successor."""
    if queue == m.source:
        return {"name": m.name, "step": m.step, "successor": m.target}
    return {"name": m.name, "step": m.step, "predecessor": m.source, "drains_by": DRAINS_BY}


def plan(m: Migration, mpath: str, vhost: Migrating) -> MigrationPlan:
    planned = _external_plan(m, mpath, vhost.shovel_user) if m.external is not None else _own_plan(m, mpath, vhost)
    for queue in (m.source, m.target):
        if queue in vhost.retryables:
            vhost.retryables[queue] = replace(vhost.retryables[queue], migration=_contract(m, queue))
    return planned


def title(m: Reviewed, code: Format) -> str:
    return f"move {code(m.source)} → {code(m.target)}"


def review_first_step(m: Reviewed, code: Format, status: str) -> list[str]:
    moves = "; ".join(f"shovel {code(n)} {code(s)} → {code(d)}" for n, s, d in m.shovels)
    return [f"- Moves: {moves} (ack-mode on-confirm, src-delete-after never, as this stack's user "
            f"{code(m.shovel_user or '')}).",
            f"- Bindings: {code(m.source)} has none now; new publishes reach {code(m.target)} only.",
            f"- Kept as they were (nothing replaced): {', '.join(code(q) for q in m.old_queues)}. What waits there "
            f"returns to {code(m.source)} on time and the shovel carries it on: no wait restarts or ends early.",
            f"- Consumers: the successor's contract says `migration.predecessor: {m.source}`; one still on "
            f"{code(m.source)} keeps working until step retire.",
            f"- Next: once {status} says drained, remove {code(m.source)} from {_queues_key(m)} and set "
            "`step: retire` in one commit."]


def review_retire(m: Reviewed, code: Format) -> list[str]:
    out = ["- Shovels and the shovel user's permissions in this vhost leave the plan (the user too when no other "
           "migration needs it)."]
    if m.straggler_binding and m.max_delay_ms is not None:
        return [*out, f"- {code(m.target)} is bound for {code(m.source)}'s key on the delay levels: a copy still "
                "waiting there reaches it. Remove the entry once delay_levels.max_delay "
                f"({format_duration(m.max_delay_ms)}) has passed since this is applied."]
    return [*out, "- After this is applied, removing the entry changes no resource (the successor's contract loses "
            "its `migration` object)."]


def retired_family(m: Reviewed) -> str | None:
    return m.source


def drained(m: Reviewed) -> str:
    return f"drained: remove {m.source} from {_queues_key(m)} and set step: retire in a commit"


def _queues_key(m: Reviewed) -> str:
    """The key path of the vhost's queues, which the old queue leaves in step retire."""
    return f"{m.path.rsplit('.', 1)[0]}.queues"
