"""What `make review` says about the stack file's migrations (`vhosts[].migrations[]`,
components/model/plan_types.py): a "Migrations" section per migration (what moves where, what is left to do), and
which deletions a migration's step retire covers, so that they are not unacknowledged data loss.

The migrations are read from the working tree's own evaluation (tools/lib/evaluation.py: its plan, `infos`), never
re-derived from names here.
"""

from __future__ import annotations

from collections.abc import Sequence

from components.migrations import kind_of
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
        whole = kind_of(m).retired_family(m)
        if m.vhost == vhost and m.retiring and (name in m.old_queues or (whole is not None and (
                family == (vhost, whole) or name == whole))):
            return m
    return None


def kept_by_drains(migrations: Sequence[MigrationInfo]) -> dict[str, dict[str, str]]:
    """By vhost: each tier or level (its queue, and a level's exchange of the same name) that a drain in step drain
    keeps declared out of the contract, with the drain's name: what routes there breaks only at its step retire."""
    kept: dict[str, dict[str, str]] = {}
    for m in migrations:
        if kind_of(m).KEEPS_OUT_OF_CONTRACT and not m.retiring:
            kept.setdefault(m.vhost, {}).update((name, m.name) for name in m.old_queues)
    return kept


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


def _lines(m: MigrationInfo, stack: str, deleted: Sequence[str], read: Reader | None,
           endpoint: str | None) -> list[str]:
    status = f"`make migrate-status STACK={stack}{' ENDPOINT=' + endpoint if endpoint else ''}`"
    kind = kind_of(m)
    out = ["", f"#### {markdown.code(m.vhost)} / {markdown.code(m.name)}: {kind.title(m, markdown.code)}, "
           f"step `{m.step}`", ""]
    if m.external:
        return out + _external_lines(m, stack, status, read)
    if not m.retiring:
        return out + kind.review_first_step(m, markdown.code, status)
    gone = list(deleted) or list(m.old_queues)
    out += ["- Deletes, each only once empty (the queue guard fails `pulumi up` on one that holds messages): "
            + (markdown.names(gone) if read is None else "")]
    if read is not None:
        out += [f"  - {markdown.code(q)}: {_depth(read, m.vhost, q)}" for q in gone]
    return [*out, *kind.review_retire(m, markdown.code), f"- Check first: {status}."]


def _external_lines(m: MigrationInfo, stack: str, status: str, read: Reader | None) -> list[str]:
    """An external move: its old objects were declared by applications at runtime, never by the stack."""
    retire = f"`make migrate-retire STACK={stack} MIGRATION={m.name}`"
    old = (f"Not the stack's (`move.external`, declared by applications at runtime): {markdown.names(m.old_queues)} "
           "and the old topology's exchanges and policies. `pulumi up` never declares, changes or deletes them.")
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
