"""What `make review` says about the stack file's migrations (`vhosts[].migrations[]`, components/migrations.py): a
"Migrations" section per migration (what moves where, what is left to do), and which deletions a migration's step
retire covers, so that they are not unacknowledged data loss.

The migrations are read from the working tree's own evaluation (tools/lib/evaluation.py: its plan, `infos`), never
re-derived from names here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from components.durations import format_duration
from rabbitmq_retry_client.depth import DepthError
from tools.lib import engine, markdown
from tools.lib.engine import Step
from tools.lib.evaluation import MigrationInfo
from tools.lib.inventory import physical_name
from tools.lib.mockrun import Registered
from tools.lib.planned import PlanIndex, family_of
from tools.lib.queue_guard import Reader


def retired_by(record: Registered, base_plan: PlanIndex, migrations: Sequence[MigrationInfo]) -> MigrationInfo | None:
    """The migration in step retire whose old objects include `record` (a queue BASE declared), if any: an old
    queue's every queue (by the retryable queue BASE planned it for), or a drained tier or level (by name)."""
    if record.type != engine.QUEUE:
        return None
    vhost, name = str(record.inputs.get("vhost", "/")), physical_name(record)
    family = family_of(record, base_plan)
    for m in migrations:
        if m.vhost == vhost and m.retiring and (name in m.old_queues or (m.kind == "move" and (
                family == (vhost, m.source) or name == m.source))):
            return m
    return None


def kept_by_drains(migrations: Sequence[MigrationInfo]) -> dict[str, dict[str, str]]:
    """By vhost: each tier or level (its queue, and a level's exchange of the same name) that a drain in step drain
    keeps declared out of the contract, with the drain's name: what routes there breaks only at its step retire."""
    kept: dict[str, dict[str, str]] = {}
    for m in migrations:
        if m.kind != "move" and not m.retiring:
            kept.setdefault(m.vhost, {}).update((name, m.name) for name in m.old_queues)
    return kept


def _code(names: Iterable[str]) -> str:
    return ", ".join(markdown.code(n) for n in names)


def _depth(read: Reader, vhost: str, queue: str) -> str:
    try:
        depth = read(vhost, queue)
    except DepthError as error:
        return f"could not read: {markdown.text(str(error))}"
    if depth is None:
        return "not on the broker"
    if depth.messages == 0:
        return "empty now"
    return f"holds **{depth.messages:,}** now ({markdown.text(depth.describe())})"


def _what(m: MigrationInfo) -> str:
    if m.kind == "move":
        return f"move {markdown.code(m.source)} → {markdown.code(m.target)}"
    if m.kind == "drain_tiers":
        return f"drain the removed wait tiers of {markdown.code(m.source)}"
    return "drain the removed delay levels"


def what_retire_breaks(m: MigrationInfo) -> str:
    """What a drain's step retire breaks for a consumer still on the contract from before its step drain."""
    if m.kind == "drain_tiers":
        return (f"one still on the contract from before the drain loses the retries it publishes in republish mode "
                f"with a removed tier's routing key (no queue is bound to it any more; {markdown.code(m.source)}'s "
                "retry exchange drops them).")
    return ("one still on the contract from before the drain fails to publish a delayed copy to a removed level "
            "(channel error 404 NOT_FOUND).")


def _lines(m: MigrationInfo, stack: str, deleted: Sequence[str], read: Reader | None,
           endpoint: str | None) -> list[str]:
    status = f"`make migrate-status STACK={stack}{' ENDPOINT=' + endpoint if endpoint else ''}`"
    out = ["", f"#### {markdown.code(m.vhost)} / {markdown.code(m.name)}: {_what(m)}, step `{m.step}`", ""]
    if m.external:
        return out + _external_lines(m, stack, status, read)
    if m.kind == "move" and not m.retiring:
        moves = "; ".join(f"shovel {markdown.code(n)} {markdown.code(s)} → {markdown.code(d)}" for n, s, d in m.shovels)
        out += [f"- Moves: {moves} (ack-mode on-confirm, src-delete-after never, as this stack's user "
                f"{markdown.code(m.shovel_user or '')}).",
                f"- Bindings: {markdown.code(m.source)} has none now; new publishes reach {markdown.code(m.target)} "
                "only.",
                f"- Kept as they were (nothing replaced): {_code(m.old_queues)}. What waits there returns to "
                f"{markdown.code(m.source)} on time and the shovel carries it on: no wait restarts or ends early.",
                f"- Consumers: the successor's contract says `migration.predecessor: {m.source}`; one still on "
                f"{markdown.code(m.source)} keeps working until step retire.",
                f"- Next: once {status} says drained, remove {markdown.code(m.source)} from {m.path.rsplit('.', 1)[0]}"
                ".queues and set `step: retire` in one commit."]
    elif not m.retiring:
        out += [f"- Kept out of the contract, declared exactly as before until retire: {_code(m.old_queues)}. "
                "Consumers on the new contract stop routing there; what waits there returns on time, and so does "
                "what a consumer still on the old contract routes there: the contract rows above say what breaks "
                "from step retire on.",
                f"- Next: once {status} says drained and the consumers run the new contract, set `step: retire` in "
                "one commit."]
    else:
        gone = list(deleted) or list(m.old_queues)
        out += ["- Deletes, each only once empty (the queue guard fails `pulumi up` on one that holds messages): "
                + (_code(gone) if read is None else "")]
        if read is not None:
            out += [f"  - {markdown.code(q)}: {_depth(read, m.vhost, q)}" for q in gone]
        if m.kind == "move":
            out += ["- Shovels and the shovel user's permissions in this vhost leave the plan (the user too when no "
                    "other migration needs it)."]
        if m.straggler_binding and m.max_delay_ms is not None:
            out += [f"- {markdown.code(m.target)} is bound for {markdown.code(m.source)}'s key on the delay levels: a "
                    "copy still waiting there reaches it. Remove the entry once delay_levels.max_delay "
                    f"({format_duration(m.max_delay_ms)}) has passed since this is applied."]
        elif m.kind == "move":
            out += ["- After this is applied, removing the entry changes no resource (the successor's contract "
                    "loses its `migration` object)."]
        else:
            out += [f"- Consumers must run the contract of step drain by now: {what_retire_breaks(m)}",
                    "- After this is applied, removing the entry changes no resource."]
        out += [f"- Check first: {status}."]
    return out


def _external_lines(m: MigrationInfo, stack: str, status: str, read: Reader | None) -> list[str]:
    """An external move: its old objects were declared by applications at runtime, never by the stack."""
    retire = f"`make migrate-retire STACK={stack} MIGRATION={m.name}`"
    old = (f"Not the stack's (`move.external`, declared by applications at runtime): {_code(m.old_queues)} and the "
           "old topology's exchanges and policies. `pulumi up` never declares, changes or deletes them.")
    if not m.retiring:
        moves = "; ".join(f"shovel {markdown.code(n)} {markdown.code(s)} → {markdown.code(d)}" for n, s, d in m.shovels)
        return [f"- Moves: {moves} (ack-mode on-confirm, src-delete-after never, as user `rabbitmq-retry-shovel`).",
                f"- {old}",
                f"- Bindings: right after this is applied, {retire[:-1]} APPLY=1` unbinds {markdown.code(m.source)} "
                f"from each exchange {markdown.code(m.target)} is bound from the same way: until then both queues "
                "receive each publish and the shovel carries the old copy on.",
                f"- Consumers: the successor's contract says `migration.predecessor: {m.source}`; move consumers "
                "there and turn off the applications' runtime declarations.",
                f"- Next: once {status} says drained, set `step: retire` in one commit."]
    out = ["- The shovels and the shovel user's permissions in this vhost leave the plan (the user too when no "
           "other migration needs it).",
           f"- {old}",
           f"- Then {retire} prints what it would retire and, with `APPLY=1`, deletes each old queue only when empty "
           "and unused, then the old exchanges (if unused) and policies, stopping at the first refusal"
           + ("." if read is None else ":")]
    if read is not None:
        out += [f"  - {markdown.code(q)}: {_depth(read, m.vhost, q)}" for q in m.old_queues]
    return [*out, f"- Check first: {status}. Once retired, remove the entry (it changes no resource)."]


def section(migrations: Sequence[MigrationInfo], steps: Sequence[Step], old: Sequence[Registered],
            base_plan: PlanIndex, stack: str, read: Reader | None = None, endpoint: str | None = None) -> str:
    """The review's "Migrations" section ("" without migrations): one part per migration."""
    if not migrations:
        return ""
    old_by = {r.urn: r for r in old}
    deleted: dict[tuple[str, str], list[str]] = {}
    for s in steps:
        if s.op == "delete" and s.urn in old_by and (m := retired_by(old_by[s.urn], base_plan, migrations)):
            deleted.setdefault((m.vhost, m.name), []).append(physical_name(old_by[s.urn]))
    out = ["", "### Migrations", "", "Each step is an ordinary commit; deletions a step retire covers are not data "
           "loss (the queue guard refuses any queue that still holds messages)."]
    for m in migrations:
        out += _lines(m, stack, sorted(deleted.get((m.vhost, m.name), [])), read, endpoint)
    return "\n".join(out)
