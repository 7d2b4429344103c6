"""`make migrate-status STACK=… [ENDPOINT=…]`: where each migration of the stack file stands on the live broker, and
which step comes next. Read-only: passive declares and GET requests.

"Drained" is decided from the old queues' depth by passive declare (ready messages and consumers exactly; a quorum
queue's unacknowledged messages and pending dead letters from the management API), never from the shovel: a
shovel may report `running` while moving nothing (3.10 without write permission), and one with
`src-delete-after: queue-length` may delete itself before its source is drained (rabbitmq-server#14636).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.migrations import kind_of
from components.model import naming
from components.model.durations import format_duration
from rabbitmq_retry_client.depth import QueueDepth
from tools.lib.markdown import code, names
from tools.lib.queue_guard import Reader
from tools.lib.review.migrations import MigrationInfo

Shovels = Callable[[str], Sequence[Mapping[str, Any]]]
"""vhost → `GET /api/shovels/<vhost>` (a list of shovel statuses)."""
SAMPLE_S = 6.0
"""A little more than the management API's default sampling interval (`collect_statistics_interval`, 5 s)."""
MOST_WAIT_TIERS = 1000
"""How far a retired queue's wait tiers are probed (`Q.wait.1`, `Q.wait.2`, … until one is missing)."""


@dataclass(frozen=True)
class Status:
    migration: MigrationInfo
    depths: tuple[tuple[str, QueueDepth | None], ...]
    """(queue, what it holds now or None when it is not on the broker), for every old queue."""
    shovels: tuple[tuple[str, str], ...]
    """(shovel name, its state, or "missing")."""
    next_step: str


def old_queues(m: MigrationInfo, read: Reader) -> list[tuple[str, QueueDepth | None]]:
    """Every old queue of `m` with what it holds. In step retire of a kind that retires a queue's every queue (a
    move's old queue, `retired_family`) the config no longer says how many wait tiers that queue had: they are read
    until the first one missing."""
    found = [(queue, read(m.vhost, queue)) for queue in m.old_queues]
    whole = kind_of(m).retired_family(m)
    if whole is not None and m.retiring and not m.external:  # an external move names its old queues
        for tier in range(1, MOST_WAIT_TIERS + 1):
            queue = naming.wait_queue(whole, tier)
            depth = read(m.vhost, queue)
            if depth is None:
                break
            found.append((queue, depth))
    return found


def next_step(m: MigrationInfo, depths: Sequence[tuple[str, QueueDepth | None]], stack: str,
              shovels: Sequence[tuple[str, str]] = ()) -> str:
    """What to do now, in one sentence. A move whose shovels are not on the broker has not been applied: nothing
    moves, whatever the old queues hold."""
    missing = [name for name, state in shovels if state == "missing"]
    if missing and not m.retiring:
        return (f"step move not applied yet: shovel {missing[0]} is not on the broker; apply it with "
                f"`pulumi up --stack {stack}`")
    stopped = [name for name, state in shovels if state.startswith("terminated")]
    if stopped and not m.retiring:
        return (f"shovel {stopped[0]} has stopped (terminated) and moves nothing: fix what its reason says (an AMQP "
                f"port the broker does not listen on: set rabbitmq-retry:amqp_port to the broker's, see `make doctor "
                f"STACK={stack}`), then `pulumi up --stack {stack}`")
    holding = [(q, d) for q, d in depths if d is not None and d.messages > 0]
    present = [q for q, d in depths if d is not None]
    retire = f"make migrate-retire STACK={stack} MIGRATION={m.name}"
    if m.external and m.retiring and present:  # not the stack's: `pulumi up` never deletes them
        refuses = f" (it refuses while {code(holding[0][0])} holds {holding[0][1].messages:,})" if holding else ""
        return (f"retire on the broker: `{retire} APPLY=1` deletes {names(present)}, each only when empty and "
                f"unused{refuses}")
    if m.retiring:
        if present:
            held = "; ".join(f"{code(q)} holds {d.messages:,}" for q, d in holding)
            why = (f"`pulumi up` refuses it while {held}: nothing of the retry path of {m.source} is deleted until "
                   "every queue of it is empty" if holding else "`pulumi up --stack " + stack + "` deletes them")
            return f"retire not applied yet: {names(present)} still on the broker ({why})"
        if m.straggler_binding and m.max_delay_ms is not None:
            return (f"retired: the entry may be removed once delay_levels.max_delay ({format_duration(m.max_delay_ms)})"
                    " has passed since the retire was applied")
        return "retired: the entry may be removed"
    if holding:
        queue, depth = holding[0]
        more = f" (and {len(holding) - 1} more queue{'s' * (len(holding) != 2)})" if len(holding) > 1 else ""
        starting = [name for name, state in shovels if state == "starting"]
        hint = (f"; shovel {starting[0]} has not connected yet (starting): if it stays so, the broker cannot reach "
                "its URI: `make doctor STACK=" + stack + "` checks rabbitmq-retry:amqp_port against the broker's "
                "listeners" if starting else "")
        return f"not yet: {queue} holds {depth.messages:,}{more}{hint}"
    if m.external:
        return "drained: set step: retire in a commit, apply it, then `" + retire + " APPLY=1`"
    return kind_of(m).drained(m)


def shovel_state(shovel: Mapping[str, Any]) -> str:
    """A shovel's state as `GET /api/shovels/<vhost>` reports it, with the broker's reason when it has stopped
    (`terminated`: e.g. its URI points at a port the broker does not listen on, so it never moves anything)."""
    state = str(shovel.get("state", "unknown"))
    reason = shovel.get("reason")
    if state == "terminated" and reason:
        text = " ".join(str(reason).split())
        if len(text) > 1 and text[0] == text[-1] == '"':  # 4.3.6 quotes a plain reason: "failed to connect …"
            text = text[1:-1]
        return f"terminated: {text}"
    return state


def status(m: MigrationInfo, read: Reader, shovels: Shovels, stack: str,
           settle: Callable[[], None] | None = None) -> Status:
    """Where `m` stands. With `settle` (the command waits one management-API sample, `SAMPLE_S`), "drained" is said
    only when a second read after it agrees: unacknowledged messages, pending dead letters and messages waiting for
    a native delayed retry come from the sampled API, so a message rejected a moment before the first read may not
    show in it yet."""
    depths = old_queues(m, read)
    states: tuple[tuple[str, str], ...] = ()
    if m.shovels:
        live = {str(s.get("name")): s for s in shovels(m.vhost)}
        states = tuple((name, shovel_state(live[name]) if name in live else "missing") for name, _, _ in m.shovels)
    step = next_step(m, depths, stack, states)
    if settle is not None and step.startswith("drained"):
        settle()
        depths = old_queues(m, read)
        step = next_step(m, depths, stack, states)
    return Status(m, tuple(depths), states, step)


def render(statuses: Sequence[Status], stack: str, endpoint: str) -> str:
    if not statuses:
        return f"stack {stack}: no migration in the stack file ({endpoint})"
    out = [f"stack {stack} on {endpoint}:"]
    for s in statuses:
        m = s.migration
        out += ["", f"{m.vhost} / {m.name} ({m.kind}, step {m.step})"]
        for queue, depth in s.depths:
            out.append(f"  {queue}: " + ("not on the broker" if depth is None else
                                         f"{depth.messages:,} ({depth.describe()})"))
        for name, state in s.shovels:
            out.append(f"  shovel {name}: {state}")
        if m.source_in_levels and not m.retiring:
            out.append(f"  copies for {m.source} still waiting in the shared delay levels are not counted here; step "
                       f"retire binds {m.target} for them")
        out.append(f"  next: {s.next_step}")
    return "\n".join(out)
