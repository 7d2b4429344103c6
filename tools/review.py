"""`make review BASE=<rev> STACK=<stack>`: what `pulumi up` would do to a stack between git revision BASE
and the working tree, as Markdown for a pull-request comment, with the risk of every change.

Both sides run under Pulumi's mocks (no CLI, broker or secrets), each in its own `tools.mockrun`
subprocess so that BASE's own `__main__.py` and `components/` are evaluated; `tools.engine` compares them.
Exit status: 0 no data loss (or acknowledged with ALLOW_DATA_LOSS=1 / --allow-data-loss), 2 a queue or
vhost is deleted or replaced, 1 error (a config error is printed as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from components.durations import format_duration
from tools import engine
from tools.diagram import retry_path
from tools.engine import Step
from tools.mockrun import Registered
from tools.plan import physical_name, short_type

TOOLS_ROOT = Path(__file__).resolve().parent.parent
RETRYABLE = "rabbitmq-retry:index:RetryableQueue"
VHOST_COMPONENT = "rabbitmq-retry:index:Vhost"
DATA_LOSS, ACCESS, SAFE = "data loss", "access", "safe"
HOLDS_MESSAGES = frozenset({engine.QUEUE, engine.VHOST})
"""Every queue we declare can hold messages (input, wait tier, error, plain); a vhost holds its queues."""
GRANTS = frozenset({engine.PERMISSIONS, engine.TOPIC_PERMISSIONS, engine.USER})
LITERAL = re.compile(r"(?:[^\\.^$*+?{}\[\]|()]|\\[^A-Za-z0-9])*")
QueueKey = tuple[str, str]


class ReviewError(Exception):
    """git or the program failed; the message is shown as is (mockrun's stderr for a config error)."""


def _literals(regex: str) -> frozenset[str] | None:
    """The names a permission regex allows when it is a finite list (`^a$`, `^(a|b)$`), else None.
    RabbitMQ treats "" as matching nothing."""
    if regex == "":
        return frozenset()
    match = re.fullmatch(r"\^(?:\((?:\?:)?(.*)\)|(.*))\$", regex)
    if match is None:
        return None
    parts = match[1].split("|") if match[1] is not None else [match[2]]
    if not all(LITERAL.fullmatch(part) for part in parts):
        return None
    return frozenset(re.sub(r"\\(.)", r"\1", part) for part in parts)


def narrows(old: str, new: str) -> bool:
    """Does `new` allow nothing that `old` did not? Exact for finite name lists; any other change of a
    regex is treated as widening (deciding regex inclusion in general is not worth the risk)."""
    names = _literals(new)
    if old == new:
        return True
    try:
        return names is not None and all(old != "" and re.search(old, name) for name in names)
    except re.error:
        return False


def _widens(step: Step) -> bool:
    old, new = step.old or {}, step.new or {}
    if step.type == engine.USER:  # a new tag (e.g. administrator) grants more
        return not set(new.get("tags") or []) <= set(old.get("tags") or [])
    if step.type == engine.PERMISSIONS:
        before, after = old.get("permissions") or {}, new.get("permissions") or {}
        return not all(narrows(str(before.get(k, "")), str(after.get(k, ""))) for k in ("configure", "write", "read"))
    before_by = {p.get("exchange"): p for p in old.get("permissions") or []}  # TopicPermissions: per exchange
    return not all(p.get("exchange") in before_by and all(
        narrows(str(before_by[p.get("exchange")].get(k, "")), str(p.get(k, ""))) for k in ("write", "read"))
        for p in new.get("permissions") or [])


def risk(step: Step) -> str:
    """data loss: a queue or vhost deleted (unless retained on the broker) or replaced; access: a grant
    created, moved or widened; safe: everything else (policies, exchanges, bindings, revocations)."""
    if step.type in HOLDS_MESSAGES and (step.op == "replace" or (step.op == "delete" and not step.retain_on_delete)):
        return DATA_LOSS
    if step.type in GRANTS and (step.op in ("create", "replace") or (step.op == "update" and _widens(step))):
        return ACCESS
    return SAFE


def contracts(recording: Sequence[Registered]) -> dict[QueueKey, dict[str, Any]]:
    """Retry contracts by (vhost, queue), from the Vhost and RetryableQueue components' outputs."""
    found: dict[QueueKey, dict[str, Any]] = {}
    for r in recording:
        if r.type == VHOST_COMPONENT:
            items = list(r.outputs.get("retry_contracts", {}).values())
        else:
            items = [r.outputs["contract"]] if r.type == RETRYABLE and "contract" in r.outputs else []
        for contract in items:
            found[(contract["vhost"], contract["queue"])] = contract
    return found


def _queue_of(record: Registered, by_urn: Mapping[str, Registered]) -> QueueKey | None:
    """The retryable queue a resource belongs to: the RetryableQueue component itself or its parent."""
    component = record if record.type == RETRYABLE else by_urn.get(record.parent or "")
    contract = component.outputs.get("contract") if component and component.type == RETRYABLE else None
    return (contract["vhost"], contract["queue"]) if contract else None


def _fmt(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _lookup(inputs: Mapping[str, Any] | None, path: str) -> Any:
    """An input by engine path; JSON text (argumentsJson) is looked into."""
    value: Any = inputs
    for part in path.split("."):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def what_changed(step: Step, names: Mapping[str, str]) -> str:
    """`message-ttl 1000 → 2000` per changed path; a dragged replacement names its cause."""
    parts = [f"replaced with `{names.get(step.replaced_dependency, step.replaced_dependency)}`"] * bool(
        step.replaced_dependency)
    if step.op == "create" and step.type == engine.POLICY:  # what a new policy sets
        parts += [f"{k} {_fmt(v)}" for k, v in sorted((_lookup(step.new, "policy.definition") or {}).items())]
    for path in step.changed:
        label = re.sub(r"^(policy\.definition|settings\.argumentsJson|settings)\.", "", path)
        parts.append(f"{label} {_fmt(_lookup(step.old, path))} → {_fmt(_lookup(step.new, path))}")
    return "; ".join(parts)


def _notes(step: Step) -> str:
    notes = []
    if step.protect and step.op in ("delete", "replace"):
        notes.append("🔒 protected: `pulumi up` will refuse until unprotected")
    if step.retain_on_delete and step.op == "delete":
        notes.append("retained on the broker with its messages (retain_on_delete), no longer managed")
    return "".join(f" — {note}" for note in notes)


def _contract_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    if old is None or new is None:
        return ["new retryable queue" if old is None else "retryable queue removed"]
    changes = [f"{k} {_fmt(old.get(k))} → {_fmt(new.get(k))}" for k in sorted(set(old) | set(new))
               if k != "tiers" and old.get(k) != new.get(k)]
    delays = [", ".join(format_duration(int(t["delay_ms"])) for t in c["tiers"]) for c in (old, new)]
    return changes + ([f"delays {delays[0]} → {delays[1]}"] if delays[0] != delays[1] else [])


def _with_removed_tiers(contract: dict[str, Any], old: Mapping[str, Any] | None, removed: set[str]) -> dict[str, Any]:
    """Keep deleted wait tiers in the diagram, so a reviewer sees them struck out."""
    kept = {t["queue"] for t in contract["tiers"]}
    gone = [t for t in (old or {}).get("tiers", []) if t["queue"] in removed and t["queue"] not in kept]
    return {**contract, "tiers": [*contract["tiers"], *gone]}


def render(steps: Sequence[Step], old: Sequence[Registered], new: Sequence[Registered],
           allow_data_loss: bool = False) -> tuple[str, int]:
    """The review's Markdown and the exit status (2: unacknowledged data loss)."""
    old_by, new_by = {r.urn: r for r in old}, {r.urn: r for r in new}
    old_contracts, new_contracts = contracts(old), contracts(new)
    counts = Counter(s.op for s in steps if s.custom)
    changes = [s for s in steps if s.custom and s.op != "same"]
    risks = {s.urn: risk(s) for s in changes}
    touched: dict[QueueKey, list[Step]] = {k: [] for k in set(old_contracts) | set(new_contracts)
                                           if old_contracts.get(k) != new_contracts.get(k)}
    for s in (s for s in steps if s.op != "same"):
        by_urn = old_by if s.op == "delete" else new_by
        key = _queue_of(by_urn[s.urn], by_urn)
        if key is not None:
            touched.setdefault(key, []).append(s)
    if not changes and not touched:
        return f"**No changes** — {counts['same']} unchanged.", 0

    lost, grants = list(risks.values()).count(DATA_LOSS), list(risks.values()).count(ACCESS)
    summary = [f"{counts[op]} to {op}" for op in ("replace", "delete", "update", "create") if counts[op]]
    out = ["**" + ", ".join([*summary, f"{counts['same']} unchanged"]) + "**"
           + f" — ⚠️ data loss: {lost}" * bool(lost) + f" — 🔑 access: {grants}" * bool(grants)]
    if lost and allow_data_loss:
        out += ["", "> ⚠️ Data loss acknowledged (ALLOW_DATA_LOSS=1 or --allow-data-loss): the queues below still "
                "lose their messages."]
    elif lost:
        out += ["", "> ⚠️ The queues below lose their messages. Drain them first (README: Changing topology "
                "safely), then acknowledge with ALLOW_DATA_LOSS=1 or --allow-data-loss."]

    names = {r.urn: r.name for r in [*old, *new]}
    if touched:
        out += ["", "### Retry paths", "", "Highlighted: yellow = created, updated or replaced; red = deleted."]
    for key in sorted(touched):
        before, after = old_contracts.get(key), new_contracts.get(key)
        physical = {s.urn: physical_name((old_by if s.op == "delete" else new_by)[s.urn]) for s in touched[key]}
        removed = {physical[s.urn] for s in touched[key] if s.op == "delete"}
        changed = {physical[s.urn] for s in touched[key] if s.op != "delete"}
        contract = _with_removed_tiers(after, before, removed) if after else before
        assert contract is not None
        out += ["", f"#### `{key[0]}` / `{key[1]}`", ""]
        if before != after:
            out += ["Retry contract: " + "; ".join(_contract_changes(before, after)), ""]
        out += ["```mermaid", retry_path(contract, changed=changed, removed=removed), "```"]

    if changes:
        out += ["", "### Changes", "", "| op | type | logical name | physical name | what changed | risk |",
                "|---|---|---|---|---|---|"]
    order = {DATA_LOSS: 0, ACCESS: 1, SAFE: 2}
    for s in sorted(changes, key=lambda s: order[risks[s.urn]]):
        record = (old_by if s.op == "delete" else new_by)[s.urn]
        label = f"**{risks[s.urn]}**" if risks[s.urn] != SAFE else SAFE
        cells = [s.op, short_type(s.type), f"`{s.name}`", f"`{physical_name(record)}`", what_changed(s, names),
                 label + _notes(s)]
        out.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(out), 2 if lost and not allow_data_loss else 0


def evaluate(stack: str, root: Path) -> list[Registered]:
    """The program at `root` under mocks, in a fresh interpreter running these tools. Its stderr is shown
    only on failure: on success it holds nothing but the SDK's occasional event-loop teardown noise."""
    result = subprocess.run([sys.executable, "-m", "tools.mockrun", "--stack", stack, "--root", str(root)],
                            cwd=TOOLS_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ReviewError(result.stderr.rstrip() or f"error: tools.mockrun exited {result.returncode}")
    known = {f.name for f in fields(Registered)}
    return [Registered(**{k: v for k, v in item.items() if k in known}) for item in json.loads(result.stdout)]


def checkout(rev: str, project: Path, into: Path) -> str:
    """Extract the project directory as of `rev` into `into` (git archive: no worktree to clean up);
    leaves `into` empty when the project did not exist then. Returns the commit's short hash."""
    def git(*args: str, cwd: Path = project) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)

    parsed = git("rev-parse", "--verify", "--quiet", "--short", "--end-of-options", f"{rev}^{{commit}}")
    if parsed.returncode != 0:
        raise ReviewError(f"error: BASE={rev!r} is not a commit (or {project} is not in a git repository)")
    commit = parsed.stdout.decode().strip()
    top, prefix = git("rev-parse", "--show-toplevel", "--show-prefix").stdout.decode().splitlines()
    tree = f"{commit}:{prefix}"
    if git("cat-file", "-e", tree).returncode != 0:
        return commit
    archive = git("archive", "--format=tar", tree, cwd=Path(top))  # from the top: a subdirectory limits it
    if archive.returncode != 0:
        raise ReviewError(archive.stderr.decode().rstrip())
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision to compare with, e.g. origin/main")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project directory (default: current)")
    parser.add_argument("--output", type=Path, help="also write the Markdown here (for CI to post)")
    parser.add_argument("--allow-data-loss", action="store_true", help="acknowledge data loss: exit 0")
    args = parser.parse_args(argv)
    allow = args.allow_data_loss or os.environ.get("ALLOW_DATA_LOSS", "").lower() in ("1", "true", "yes")
    project, stack_file = args.root.resolve(), f"Pulumi.{args.stack}.yaml"
    try:
        if not (project / stack_file).exists():
            raise ReviewError(f"error: {stack_file} not found in {project}: is STACK={args.stack} a stack here?")
        new = evaluate(args.stack, project)
        with tempfile.TemporaryDirectory(prefix="rabbitmq-retry-review-") as tmp:
            commit = checkout(args.base, project, Path(tmp))
            at_base = (Path(tmp) / stack_file).exists()
            try:
                old = evaluate(args.stack, Path(tmp)) if at_base else []
            except ReviewError as error:
                raise ReviewError(f"the program at BASE={args.base} ({commit}) fails:\n{error}") from None
        steps = engine.diff(old, new)
    except ReviewError as error:
        print(error, file=sys.stderr)
        return 1
    body, status = render(steps, old, new, allow_data_loss=allow)
    heading = f"## RabbitMQ review: stack `{args.stack}`, `{args.base}` ({commit}) → working tree"
    note = "" if at_base else f"\n\n`{stack_file}` does not exist at `{args.base}`: every resource is created."
    markdown = f"{heading}{note}\n\n{body}\n"
    sys.stdout.write(markdown)
    if args.output:
        args.output.write_text(markdown)
    return status


if __name__ == "__main__":
    sys.exit(main())
