"""What `make review` adds about the queue guard (components/pulumi/guard.py), in a section of its own after the review:

- each `rabbitmq-retry:delete_with_messages` entry is a data-loss line, acknowledged like any other (ALLOW_DATA_LOSS):
  it lets `pulumi up` delete that queue with what it holds; an entry that names no queue the change deletes or
  replaces is a waiver left behind, to remove;
- each retry path the change deletes or replaces a part of (read from the path guards' inventories, exactly what
  the guard will check at apply time), with its parts and its queues;
- with a live broker (`make review ENDPOINT=…`), what each queue of those paths (and each queue the change deletes
  or replaces) holds now, read through `rabbitmq_retry_client.depth` (passive declares and GET requests: nothing is
  created or changed).

Without an endpoint and without entries the review is exactly what it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from components.config.stack_settings import DELETE_WITH_MESSAGES
from components.model.keys import NAMESPACE
from components.plan.paths import at_risk, changed_parts
from components.pulumi.guard import queue_key
from rabbitmq_retry_client.depth import BrokerAccess, DepthError, DepthReader, QueueDepth
from rabbitmq_retry_client.management import ManagementClient
from tools.lib import engine, markdown
from tools.lib.cli import tls_summary
from tools.lib.engine import Step

Reader = Callable[[str, str], QueueDepth | None]
"""(vhost, queue) → what the queue holds now, None when it does not exist; DepthError when it cannot be read."""


@dataclass(frozen=True)
class Lost:
    vhost: str
    queue: str
    op: str
    """delete or replace; `path` for a queue that stays but is on a path the change deletes a part of."""


@dataclass(frozen=True)
class TouchedPath:
    """A retry path the change deletes or replaces a part of: the guard reads all its queues before."""

    vhost: str
    path: str
    parts: tuple[str, ...]
    queues: tuple[str, ...]


def touched_paths(steps: Sequence[Step]) -> list[TouchedPath]:
    """From the path guards' steps: an update deletes or replaces the parts whose fingerprints change, a delete
    (the removal guard: its component goes) every part of every path it lists; `queues` are the ones the guard reads
    first, those that need a part that changes (`paths.at_risk`)."""
    found: dict[tuple[str, str], TouchedPath] = {}
    for step in steps:
        if step.type != engine.STASH or step.op not in ("update", "delete"):
            continue
        old = (step.old or {}).get("input")
        new = (step.new or {}).get("input") if step.op == "update" else None
        vhost = str((old or {}).get("vhost") or "/")
        parts, risky = changed_parts(old, new), at_risk(old, new)
        for path in sorted(set(parts) | set(risky)):
            found.setdefault((vhost, path), TouchedPath(vhost, path, tuple(parts.get(path, ())),
                                                        tuple(risky.get(path, {}))))
    return sorted(found.values(), key=lambda p: (p.vhost, p.path))


@dataclass(frozen=True)
class GuardSection:
    markdown: str
    """Empty when there is nothing to add."""
    data_loss: bool
    """Some `delete_with_messages` entry waives the guard: exit 2 unless data loss is acknowledged."""


def lost_queues(steps: Sequence[Step]) -> list[Lost]:
    """Every queue the change deletes or replaces (a replacement deletes it first), and every other queue of a path
    it deletes a part of, in vhost and name order."""
    found: dict[tuple[str, str], str] = {
        (str((s.old or {}).get("vhost", "/")), str((s.old or {}).get("name", ""))): s.op
        for s in steps if s.type == engine.QUEUE and s.op in ("delete", "replace")}
    for path in touched_paths(steps):
        for queue in path.queues:
            found.setdefault((path.vhost, queue), "path")
    return sorted((Lost(vhost, queue, op) for (vhost, queue), op in found.items()),
                  key=lambda lost: (lost.vhost, lost.queue))


def path_lines(paths: Sequence[TouchedPath], entries: frozenset[str]) -> list[str]:
    """One line per touched path: what the change deletes of it, and the queues the guard reads first."""
    lines = []
    for path in paths:
        parts = ", ".join(markdown.code(p) for p in path.parts[:6]) or "nothing of its own"
        more = f" and {len(path.parts) - 6:,} more" if len(path.parts) > 6 else ""
        waived = [q for q in path.queues if queue_key(path.vhost, q) in entries]
        note = (f"; ⚠️ waived for {', '.join(markdown.code(q) for q in waived)}: what they hold is lost"
                if waived else "")
        reads = (f"`pulumi up` first reads {', '.join(markdown.code(q) for q in path.queues)}, whose messages need "
                 "what changes, and refuses, touching nothing, while any of them holds one" if path.queues
                 else "no message waiting on it needs what changes: nothing is read")
        lines.append(f"- {_where(path.vhost, path.path)}: deletes or replaces {parts}{more}. {reads}{note}.")
    return lines


def _where(vhost: str, queue: str) -> str:
    return f"{markdown.code(vhost)} / {markdown.code(queue)}"


def waiver_lines(entries: frozenset[str], lost: Sequence[Lost]) -> list[str]:
    by_key = {queue_key(q.vhost, q.queue): q for q in lost}
    lines = []
    for entry in sorted(entries):
        if (queue := by_key.get(entry)) is not None:
            did = "deletes a part of its retry path" if queue.op == "path" else f"{queue.op}s it"
            lines.append(f"- ⚠️ **data loss**: {markdown.code(entry)} — this change {did}, and "
                         f"`{DELETE_WITH_MESSAGES}` lets `pulumi up` do so with every message it holds.")
        else:
            lines.append(f"- ⚠️ **data loss**: {markdown.code(entry)} — this change neither deletes nor replaces it: "
                         "remove the entry, or a later change deletes it with its messages unguarded.")
    return lines


Depths = dict[tuple[str, str], QueueDepth | DepthError | None]
"""(vhost, queue) → what it holds now, None when it is not on the broker, or why it could not be read."""


def read_depths(lost: Sequence[Lost], read: Reader) -> Depths:
    """Each queue read once, for `depth_lines` and `refusal_lines`."""
    depths: Depths = {}
    for queue in lost:
        try:
            depths[(queue.vhost, queue.queue)] = read(queue.vhost, queue.queue)
        except DepthError as error:
            depths[(queue.vhost, queue.queue)] = error
    return depths


def depth_lines(lost: Sequence[Lost], depths: Depths) -> list[str]:
    """`holds 1,234 messages now` for each queue, fullest first; the empty and missing ones counted in one line
    each; one line per reason a queue could not be read."""
    held: list[tuple[Lost, QueueDepth]] = []
    empty, missing = 0, 0
    unread: dict[str, list[Lost]] = {}
    for queue in lost:
        depth = depths[(queue.vhost, queue.queue)]
        if isinstance(depth, DepthError):
            unread.setdefault(str(depth), []).append(queue)
        elif depth is None:
            missing += 1
        elif depth.messages == 0:
            empty += 1
        else:
            held.append((queue, depth))
    lines = [f"- {_where(q.vhost, q.queue)} ({q.op}): holds **{d.messages:,}** message{'s' * (d.messages != 1)} "
             f"now ({markdown.text(d.describe())})"
             for q, d in sorted(held, key=lambda pair: (-pair[1].messages, pair[0].vhost, pair[0].queue))]
    if empty:
        lines.append(f"- {empty:,} other queue{'s' * (empty != 1)} hold{'s' * (empty == 1)} no message now")
    if missing:
        lines.append(f"- {missing:,} {'queues are' if missing != 1 else 'queue is'} not on the broker")
    for why, queues in unread.items():
        lines.append(f"- could not read {', '.join(_where(q.vhost, q.queue) for q in queues[:5])}"
                     f"{f' and {len(queues) - 5:,} more' if len(queues) > 5 else ''}: {markdown.text(why)}")
    return lines


def refusal_lines(paths: Sequence[TouchedPath], depths: Depths, entries: frozenset[str]) -> list[str]:
    """One line per touched path that `pulumi up` would refuse to change now: a queue of it holds a message that
    `delete_with_messages` does not waive, or cannot be read. Empty when the change would go through."""
    lines = []
    for path in paths:
        holding = []
        for queue in path.queues:
            depth = depths.get((path.vhost, queue))
            if queue_key(path.vhost, queue) in entries:
                continue
            if isinstance(depth, DepthError):
                holding.append(f"{markdown.code(queue)} cannot be read")
            elif depth is not None and depth.messages:
                holding.append(f"{markdown.code(queue)} holds **{depth.messages:,}**")
        if holding:
            lines.append(f"- ⛔ {_where(path.vhost, path.path)}: `pulumi up` refuses this change now, because "
                         f"{', '.join(holding)}; it deletes nothing of the path until every queue of it is empty "
                         "(a migration: `make migrate-status` says when).")
    return lines


def guard_section(steps: Sequence[Step], waivers: Iterable[str], read: Reader | None,
                  where: str = "") -> GuardSection:
    """The review's queue guard section: `waivers` are the stack's `delete_with_messages` entries (at the working
    tree), `read` None offline."""
    lost = lost_queues(steps)
    entries = frozenset(waivers)
    out: list[str] = []
    if paths := touched_paths(steps):
        out += ["", "### Retry paths this change deletes a part of", "",
                "Nothing on a retry path is deleted while a message waiting on it needs it (docs/guard.md).", "",
                *path_lines(paths, entries)]
    if entries:
        out += ["", f"### Queue guard waived (`{NAMESPACE}:{DELETE_WITH_MESSAGES}`)", "",
                "> ⚠️ `pulumi up` deletes these queues with whatever they hold; acknowledge with ALLOW_DATA_LOSS=1 "
                "or --allow-data-loss.", "", *waiver_lines(entries, lost)]
    if read is not None and lost:
        depths = read_depths(lost, read)
        if refusals := refusal_lines(paths, depths, entries):
            out += ["", "### Refused if applied now", "", *refusals]
        out += ["", f"### What the deleted or replaced queues hold now{f' ({markdown.text(where)})' if where else ''}",
                "", "Read now, read-only (ready messages by passive declare; unacknowledged ones and a quorum queue's "
                "pending dead letters from the management API, a few seconds old). `pulumi up` refuses to delete a "
                f"queue that holds messages unless `{NAMESPACE}:{DELETE_WITH_MESSAGES}` lists it (docs/guard.md).", "",
                *depth_lines(lost, depths)]
    return GuardSection("\n" + "\n".join(out) if out else "", bool(entries))


def depth_reader(amqp_port: int | None, endpoint: ManagementClient | None) -> Reader | None:
    """What a queue holds on `endpoint`'s broker now (its user and TLS settings; `amqp_port`: the stack's), read as
    `review_section` reads it; None offline."""
    if endpoint is None:
        return None
    return DepthReader(BrokerAccess.of(endpoint, amqp_port)).read


def review_section(steps: Sequence[Step], waivers: Iterable[str], amqp_port: int | None,
                   endpoint: ManagementClient | None) -> GuardSection:
    """The section for `make review`: the stack's waivers and AMQP port (its settings at the working tree), and with
    `endpoint` what the deleted or replaced queues hold now, read as drift reads (RABBITMQ_USERNAME /
    RABBITMQ_PASSWORD, else the stack's `rabbitmq:username`; `make review` gives the dev stack guest/guest)."""
    read = depth_reader(amqp_port, endpoint)
    if endpoint is None or read is None:
        return guard_section(steps, waivers, None)
    where = endpoint.url + (f" ({tls_summary(endpoint)})" if endpoint.tls.insecure else "")
    return guard_section(steps, waivers, read, where)
