"""`vhosts[].migrations[]`: the parser of each entry and the checks against the vhost's queues.

A migration is declared in the stack file, never inferred: the entry names what moves or drains, and its
`step` says which commit of the migration this is. Every problem names the key path and a fix; what the plan
makes of an entry is `components/migrations.py`'s business.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..strategies.common import positive_duration
from .fields import INVALID, Invalid, Problems, choice, entity_name, items, mapping
from .keys import DRAIN_LEVELS_KEYS, DRAIN_TIERS_KEYS, EXTERNAL_KEYS, MIGRATION_KEYS, MOVE_KEYS
from .model import MIGRATION_KINDS, MIGRATION_STEPS, DelayLevels, ExternalSource, Migration, Queue

if TYPE_CHECKING:
    from .parsers import Entry, QueueEntry

MIGRATION_NAME = re.compile(r"[a-z0-9-]+")
"""A migration's name ends the shovels' names and shows in review and status: lower case, digits and dashes."""


def _kind(p: Problems, path: str, data: Mapping[str, Any]) -> str | Invalid:
    written = [kind for kind in MIGRATION_KINDS if kind in data]
    if len(written) != 1:
        found = f"found {', '.join(written)}" if written else "found none"
        p.add(path, f"exactly one of {', '.join(MIGRATION_KINDS)} per migration ({found}); "
              "write one entry per change")
        return INVALID
    return written[0]


def _queue_name(p: Problems, path: str, value: object) -> str | Invalid:
    if value is None:
        p.add(path, "missing; name a queue of this vhost")
        return INVALID
    return entity_name(p, path, value, "queue")


def _delays(p: Problems, path: str, raw: object) -> tuple[int, ...] | Invalid:
    if raw is None:
        p.add(path, "missing; list the queue's retry.delays as they were before the change, e.g. [2s, 10s, 1m]")
        return INVALID
    delays = [positive_duration(p, f"{path}[{i}]", value) for i, value in enumerate(items(p, path, raw))]
    if not delays or INVALID in delays:
        if not delays:
            p.add(path, "empty; list the queue's retry.delays as they were before the change")
        return INVALID
    return tuple(d for d in delays if isinstance(d, int))


def _names(p: Problems, path: str, raw: object, kind: str) -> tuple[str, ...] | Invalid:
    names = [entity_name(p, f"{path}[{i}]", value, kind) for i, value in enumerate(items(p, path, raw))]
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


def parse_migration(p: Problems, path: str, index: int, raw: object) -> Migration | Invalid:
    """One entry's own fields; `check_migrations` checks it against the vhost."""
    data = mapping(p, path, raw, MIGRATION_KEYS)
    if data is INVALID:
        return INVALID
    name = data.get("name")
    if not isinstance(name, str) or not MIGRATION_NAME.fullmatch(name):
        p.add(f"{path}.name", f"{name!r}: every migration needs a name of lower-case letters, digits and dashes "
              "(e.g. billing-to-quorum); it names the migration's shovels and shows in review and status")
        name = INVALID
    kind = _kind(p, path, data)
    if kind is INVALID:
        return INVALID
    steps = MIGRATION_STEPS[kind]
    if "step" not in data:
        p.add(f"{path}.step", f"missing; {' then '.join(steps)} (start with step: {steps[0]})")
        step: str | Invalid = INVALID
    else:
        step = choice(p, f"{path}.step", data["step"], steps)
    where = f"{path}.{kind}"
    body = mapping(p, where, data[kind], {"move": MOVE_KEYS, "drain_tiers": DRAIN_TIERS_KEYS,
                                           "drain_levels": DRAIN_LEVELS_KEYS}[kind])
    if body is INVALID or name is INVALID or step is INVALID:
        return INVALID
    assert isinstance(name, str) and isinstance(step, str)
    if kind == "move":
        source, target = (_queue_name(p, f"{where}.{key}", body.get(key)) for key in ("from", "to"))
        if source is INVALID or target is INVALID:
            return INVALID
        assert isinstance(source, str) and isinstance(target, str)
        if source == target:
            p.add(f"{where}.to", f'"{target}" is the queue it moves from; name the successor queue (a new name: a '
                  "queue keeps its type and its strategy for life)")
            return INVALID
        external = _external(p, f"{where}.external", body.get("external")) if "external" in body else None
        if external is INVALID:
            return INVALID
        assert external is None or isinstance(external, ExternalSource)
        return Migration(name, kind, step, index, source=source, target=target, external=external)
    if kind == "drain_tiers":
        queue = _queue_name(p, f"{where}.queue", body.get("queue"))
        delays = _delays(p, f"{where}.delays", body.get("delays"))
        if queue is INVALID or delays is INVALID:
            return INVALID
        assert isinstance(queue, str) and isinstance(delays, tuple)
        return Migration(name, kind, step, index, source=queue, delays_ms=delays)
    if "max_delay" not in body:
        p.add(f"{where}.max_delay", "missing; the vhost's delay_levels.max_delay before the change, e.g. 1d")
        return INVALID
    longest = positive_duration(p, f"{where}.max_delay", body["max_delay"])
    if longest is INVALID:
        return INVALID
    assert isinstance(longest, int)
    return Migration(name, kind, step, index, max_delay_ms=longest)


def parse_migrations(p: Problems, path: str, raw: object, queues: Sequence[QueueEntry],
                     delay_levels: DelayLevels | Invalid | None,
                     exchanges: Sequence[Entry[Any]] = ()) -> tuple[Migration, ...] | Invalid:
    """`migrations:` of a vhost, each entry checked against the vhost's queues, exchanges and delay levels."""
    entries = [parse_migration(p, f"{path}.migrations[{i}]", i, item)
               for i, item in enumerate(items(p, f"{path}.migrations", raw))]
    migrations = tuple(m for m in entries if isinstance(m, Migration))
    before = len(p.items)
    check_migrations(p, path, migrations, queues, delay_levels)
    _check_external(p, path, migrations, queues, exchanges)
    if len(migrations) != len(entries) or len(p.items) != before:
        return INVALID
    return migrations


def _check_names(p: Problems, path: str, migrations: Sequence[Migration]) -> None:
    first: dict[str, int] = {}
    for m in migrations:
        if m.name in first:
            p.add(f"{path}.migrations[{m.index}].name", f'"{m.name}" is also migrations[{first[m.name]}]; give each '
                  "migration its own name")
        first.setdefault(m.name, m.index)


def _check_external(p: Problems, path: str, migrations: Sequence[Migration], queues: Sequence[QueueEntry],
                    exchanges: Sequence[Entry[Any]]) -> None:
    """An external move's old objects are not the stack's: none may be declared by it (the stack would own, and
    one day delete, what `make migrate-retire` deletes only once empty)."""
    owned_queues = {name: q.index for q in queues for name in q.owned_queues}
    owned_exchanges = {name: q.index for q in queues for name in q.owned_exchanges}
    declared_exchanges = {x.written: x.index for x in exchanges if x.written is not None}
    for m in migrations:
        if m.external is None:
            continue
        where = f"{path}.migrations[{m.index}].move"
        old_queues = [(f"{where}.from", m.source)]
        if m.external.error_queue:
            old_queues.append((f"{where}.external.error_queue", m.external.error_queue))
        old_queues += [(f"{where}.external.queues[{i}]", q) for i, q in enumerate(m.external.queues)]
        for at, queue in old_queues:
            if queue in owned_queues:
                p.add(at, f'"{queue}" is declared by this stack (queues[{owned_queues[queue]}]); external names '
                      "objects the stack does not declare: remove external (a move between two queues of the stack) "
                      "or name the runtime queue")
        for i, exchange in enumerate(m.external.exchanges):
            if exchange in declared_exchanges or exchange in owned_exchanges:
                p.add(f"{where}.external.exchanges[{i}]", f'"{exchange}" is declared by this stack; list only the old '
                      "topology's own exchanges, which make migrate-retire deletes once unused")


def _check_move(p: Problems, path: str, m: Migration, declared: Mapping[str, QueueEntry]) -> None:
    where = f"{path}.migrations[{m.index}].move"
    queues = f"{path}.queues"
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
            p.add(f"{queues}[{declared[m.source].index}]", f'remove queue {m.source} from {queues}: step retire of '
                  f"migration {m.name} deletes it once empty")
        return
    if m.source not in declared:
        p.add(f"{where}.from", f'"{m.source}" is not a queue of this vhost; in step move the old queue stays in '
              f"{queues}, exactly as it was (remove it only in step retire)")
        return
    source = declared[m.source]
    if source.bindings:
        p.add(f"{queues}[{source.index}].bindings", f"{m.source} is moving to {m.target} (migration {m.name}): "
              f"publishes would reach both queues and the shovel would duplicate them; move its bindings to "
              f"{m.target}")
    target = declared.get(m.target)
    old, new = source.value, None if target is None else target.value
    if isinstance(old, Queue) and isinstance(new, Queue) and old.retry is not None and new.retry is None:
        p.add(f"{where}.to", f"{m.source} has an error queue whose parked messages move to {m.target}'s error "
              f"queue; give {m.target} a retry block (any strategy)")


def _check_drain_tiers(p: Problems, path: str, m: Migration, declared: Mapping[str, QueueEntry]) -> None:
    where = f"{path}.migrations[{m.index}].drain_tiers"
    entry = declared.get(m.source)
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


def _check_drain_levels(p: Problems, path: str, m: Migration, delay_levels: DelayLevels | None) -> None:
    where = f"{path}.migrations[{m.index}].drain_levels.max_delay"
    if delay_levels is None:
        p.add(where, "this vhost has no delay levels now; a vhost whose last levels queue moved away drains them "
              "with that move (remove this entry)")
    elif DelayLevels(delay_levels.unit_ms, m.max_delay_ms).levels <= delay_levels.levels:
        p.add(where, f"{delay_levels.levels} levels now and as many or fewer before: nothing to drain; write "
              "delay_levels.max_delay as it was before the change")


def check_migrations(p: Problems, path: str, migrations: Sequence[Migration], queues: Sequence[QueueEntry],
                     delay_levels: DelayLevels | Invalid | None) -> None:
    """Names unique; each entry against the queues (`move`: both in step move, the successor alone in step
    retire; a queue moves to one successor at a time, and not on to a third in the same step)."""
    _check_names(p, path, migrations)
    declared = {q.written: q for q in queues if q.written is not None}
    sources: dict[str, Migration] = {}
    for m in migrations:
        if m.kind == "move":
            where = f"{path}.migrations[{m.index}].move.from"
            if m.source in sources:
                p.add(where, f"{m.source} already moves in migration {sources[m.source].name}; a queue moves to "
                      "one successor")
            sources.setdefault(m.source, m)
            _check_move(p, path, m, declared)
        elif m.kind == "drain_tiers":
            _check_drain_tiers(p, path, m, declared)
        elif not isinstance(delay_levels, Invalid):
            _check_drain_levels(p, path, m, delay_levels)
    for m in migrations:
        chained = sources.get(m.target) if m.kind == "move" else None
        if chained is not None and chained.step == m.step and not m.retiring:
            p.add(f"{path}.migrations[{m.index}].move.to", f"{m.target} moves on to {chained.target} in the same step "
                  f"(migration {chained.name}); finish this migration (step retire) before starting that one")
