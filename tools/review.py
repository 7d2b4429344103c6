"""`make review BASE=<rev> STACK=<stack>`: what `pulumi up` would do to a stack between git revision BASE
and the working tree, as Markdown for a pull-request comment, with the risk of every change.

Both sides run under Pulumi's mocks (no CLI, broker or secrets), each in its own `tools.mockrun`
subprocess so that BASE's own `__main__.py` and `components/` are evaluated; `tools.engine` compares them.
Exit status: 0 no data loss (or acknowledged with ALLOW_DATA_LOSS=1 / --allow-data-loss), 2 a queue or
vhost is deleted or replaced, 1 error (a config error is printed as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from components.durations import format_duration
from tools import engine, markdown
from tools.checkout import CheckoutError, checkout
from tools.diagram import retry_path
from tools.engine import Step
from tools.inventory import QueueKey, contracts, physical_name, retryable_queue_of, short_type
from tools.mockrun import Registered
from tools.risk import ACCESS, DATA_LOSS, ORDER, SAFE, risk
from tools.stack_file import is_secret_placeholder

TOOLS_ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("op", "type", "logical name", "physical name", "what changed", "risk")


class ReviewError(Exception):
    """The program failed; the message is shown as is (mockrun's stderr for a config error)."""


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
    """`message-ttl 1000 → 2000` per changed path; a dragged replacement names its cause. Markdown."""
    parts = [f"replaced with {markdown.code(names.get(step.replaced_dependency, step.replaced_dependency))}"] * bool(
        step.replaced_dependency)
    if step.op == "create" and step.type == engine.POLICY:  # what a new policy sets
        parts += [markdown.text(f"{k} {_fmt(v)}")
                  for k, v in sorted((_lookup(step.new, "policy.definition") or {}).items())]
    for path in step.changed:
        label = re.sub(r"^(policy\.definition|settings\.argumentsJson|settings)\.", "", path)
        before, after = _lookup(step.old, path), _lookup(step.new, path)
        if is_secret_placeholder(before) or is_secret_placeholder(after):
            parts.append(markdown.text(f"{label} changed (secret)"))
        else:
            parts.append(markdown.text(f"{label} {_fmt(before)} → {_fmt(after)}"))
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
        key = retryable_queue_of(by_urn[s.urn], by_urn)
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
        out += ["", f"#### {markdown.code(key[0])} / {markdown.code(key[1])}", ""]
        if before != after:
            out += ["Retry contract: " + "; ".join(_contract_changes(before, after)), ""]
        out += ["```mermaid", retry_path(contract, changed=changed, removed=removed), "```"]

    if changes:
        out += ["", "### Changes", "", markdown.row(COLUMNS), markdown.row(["---"] * len(COLUMNS))]
    for s in sorted(changes, key=lambda s: ORDER[risks[s.urn]]):
        record = (old_by if s.op == "delete" else new_by)[s.urn]
        label = f"**{risks[s.urn]}**" if risks[s.urn] != SAFE else SAFE
        out.append(markdown.row([s.op, short_type(s.type), markdown.code(s.name), markdown.code(physical_name(record)),
                                 what_changed(s, names), label + _notes(s)]))
    return "\n".join(out), 2 if lost and not allow_data_loss else 0


def evaluate(stack: str, root: Path) -> list[Registered]:
    """The program at `root` under mocks, in a fresh interpreter running these tools (so that `root`'s
    own `components/` are imported). Its stderr is shown when it fails."""
    result = subprocess.run([sys.executable, "-m", "tools.mockrun", "--stack", stack, "--root", str(root)],
                            cwd=TOOLS_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ReviewError(result.stderr.rstrip() or f"error: tools.mockrun exited {result.returncode}")
    known = {f.name for f in fields(Registered)}
    return [Registered(**{k: v for k, v in item.items() if k in known}) for item in json.loads(result.stdout)]


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
    except (ReviewError, CheckoutError) as error:
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
