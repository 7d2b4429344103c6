"""`make review BASE=<rev> STACK=<stack>`: what `pulumi up` would do to a stack between git revision BASE
and the working tree, as Markdown for a pull-request comment (or JSON, `--format json`:
docs/schemas/review.schema.json), with the risk of every change.

Both sides are evaluated once each under Pulumi's mocks (no CLI, broker or secrets), at once, each in a process of
its own (`python -m tools.evaluate`, tools/lib/evaluation.py), both by the working tree's tools: BASE's own
`__main__.py` and `components/` from its checkout, so any commit or tag of the project can be BASE (the review says
where the roles of BASE's resources came from when BASE's code keeps no plan these tools read). `--base-evaluation`
(`make review BASE_EVALUATION=<file>`) reads BASE from a saved evaluation (`make evaluate`) instead.
`tools/lib/engine.py` compares the two recordings, and the review reads each side's plan, migrations and alerting
rules from its evaluation.
The review printed (and written to --output) fits one comment: identical changes are grouped, diagrams
are drawn for retry paths whose shape or risk changed; --output-full gets every change and diagram.
Exit status: 0 no data loss (or acknowledged with ALLOW_DATA_LOSS=1 / --allow-data-loss), 2 a queue or
vhost is deleted or replaced, `rabbitmq-retry:delete_with_messages` waives the queue guard, or `pulumi up`
would fail halfway (a retained error queue replaced under its own name: no acknowledgement waives that),
1 error (a config error is printed as `pulumi preview` prints it).
Contract and protection risks are flagged, and do not change it. The Prometheus alerting rules the change adds,
removes or changes (docs/alerts.md) are listed last.
With --endpoint (`make review ENDPOINT=…`) it also says what each deleted or replaced queue holds on that broker
now, read-only (tools/lib/queue_guard.py); without it, it reads no broker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from components.config.pulumi_yaml import StackFileError, not_found
from rabbitmq_retry_client.management import ManagementError
from tools.lib import engine
from tools.lib.checkout import CheckoutError, checkout
from tools.lib.cli import add_tls_arguments, broker_client
from tools.lib.evaluation import NO_PLAN, TOOLS_PLAN, Evaluation, EvaluationError
from tools.lib.markdown import code
from tools.lib.queue_guard import depth_reader, review_section
from tools.lib.review import BaseProgramError, Review, ReviewError, evaluate_both, render
from tools.lib.review import alerts as alert_rules
from tools.lib.risk import DATA_LOSS
from tools.lib.snapshot import DefinitionsError

REVIEW_SCHEMA_VERSION = 1
"""`--format json`'s `schema_version` (docs/schemas/review.schema.json)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--base", help="git revision to compare with, e.g. origin/main or a release tag")
    sides.add_argument("--base-evaluation", type=Path, metavar="FILE",
                      help="compare with a saved evaluation of the stack (`make evaluate`) instead")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project directory (default: current)")
    parser.add_argument("--output", type=Path, help="also write the review for a comment here (for CI to post)")
    parser.add_argument("--output-full", type=Path, help="write the full, ungrouped review here")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown",
                        help="json: docs/schemas/review.schema.json (--output gets the same)")
    parser.add_argument("--allow-data-loss", action="store_true", help="acknowledge data loss: exit 0")
    parser.add_argument("--endpoint", help="management URL of the live broker: add what each deleted or replaced "
                        "queue holds now (read-only; credentials as for drift); offline without it")
    add_tls_arguments(parser)
    args = parser.parse_args(argv)
    allow = args.allow_data_loss or os.environ.get("ALLOW_DATA_LOSS", "").lower() in ("1", "true", "yes")
    project, stack_file = args.root.resolve(), f"Pulumi.{args.stack}.yaml"
    base: Evaluation | None
    try:
        if not (project / stack_file).exists():
            raise ReviewError(f"error: {not_found(project / stack_file)}")
        if args.base_evaluation is not None:
            base, head = _saved(args.base_evaluation, args.stack), evaluate_both(args.stack, project, None)[1]
            commit, at_base, where = "", True, code(args.base_evaluation.name)
        else:
            with tempfile.TemporaryDirectory(prefix="rabbitmq-retry-review-") as tmp:
                commit = checkout(args.base, project, Path(tmp))
                at_base = (Path(tmp) / stack_file).exists()
                try:
                    base, head = evaluate_both(args.stack, project, Path(tmp) if at_base else None)
                except BaseProgramError as error:
                    raise ReviewError(f"the program at BASE={args.base} ({commit}) fails:\n{error}") from None
            where = f"{code(args.base)} ({commit})"
        old = base.recording if base is not None else []
        plans = (base.plan if base is not None else {}, head.plan)
        rules = alert_rules.diff(base.alert_rules if base is not None else None, head.alert_rules)
        steps = engine.diff(old, head.recording)
    except (ReviewError, CheckoutError) as error:
        print(error, file=sys.stderr)
        return 1
    try:
        client = broker_client(args, head.provider, args.stack) if args.endpoint else None
        reader = depth_reader(head.amqp_port, client)
        review = render(steps, old, head.recording, plans, allow_data_loss=allow, migrations=head.migrations,
                        stack=args.stack, read=reader, endpoint=args.endpoint)
        guard = review_section(steps, head.delete_with_messages, head.amqp_port, client)
    except (DefinitionsError, StackFileError, ManagementError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    heading = f"## RabbitMQ review: stack `{args.stack}`, {where} → working tree"
    note = (f"\n\n`{stack_file}` does not exist at `{args.base}`: every resource is created." if not at_base
            else f"\n\n{_base_note(base)}" if base is not None and _base_note(base) else "")
    compact, complete = (f"{heading}{note}\n\n{body}{guard.markdown}{alert_rules.section(rules, limit)}\n"
                         for body, limit in ((review.compact, alert_rules.SHOWN), (review.full, None)))
    status = 2 if guard.data_loss and not allow else review.status
    if args.format == "json":
        compact = json.dumps(_as_json(args, commit, base, review, steps, guard.data_loss, rules, status),
                             indent=1, sort_keys=True) + "\n"
    sys.stdout.write(compact)
    if args.output:
        args.output.write_text(compact)
    if args.output_full:
        args.output_full.write_text(complete)
    return status


def _saved(path: Path, stack: str) -> Evaluation:
    """BASE from a saved evaluation of the same stack; ReviewError when it is of another stack."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ReviewError(f"error: cannot read BASE_EVALUATION {path}: {error.strerror}: write it with "
                          f"`make evaluate STACK={stack} OUTPUT={path}`") from None
    try:
        saved = Evaluation.from_json(text, f"BASE_EVALUATION {path}")
    except EvaluationError as error:
        raise ReviewError(f"error: {error}") from None
    if saved.stack != stack:
        raise ReviewError(f"error: BASE_EVALUATION {path} is of stack {saved.stack!r}, not {stack!r}: every URN "
                          f"names its stack; evaluate stack {stack!r} (`make evaluate STACK={stack}`)")
    return saved


def _base_note(base: Evaluation) -> str:
    """What the review should know of how BASE was evaluated, when its own plans were not read."""
    if base.plan_source == TOOLS_PLAN:
        return ("BASE's own program ran under the working tree's tools; BASE's code keeps no plan these tools read, "
                "so the roles of its resources (retryable queue, wait tier, error queue) are the working tree's "
                "planner reading BASE's stack file.")
    if base.plan_source == NO_PLAN:
        return ("BASE's own program ran under the working tree's tools; neither BASE's code nor the working tree's "
                "planner (which refuses BASE's stack file) gives the roles of its resources: they are listed "
                "without their retryable queue.")
    return ""


def _as_json(args: argparse.Namespace, commit: str, base: Evaluation | None, review: Review,
             steps: list[engine.Step], guard_loss: bool, rules: alert_rules.Diff | None,
             status: int) -> dict[str, object]:
    """The review as docs/schemas/review.schema.json has it."""
    counts = Counter(s.op for s in steps if s.custom and s.type != engine.STASH)
    return {
        "schema_version": REVIEW_SCHEMA_VERSION, "stack": args.stack, "status": status,
        "base": {"revision": args.base, "commit": commit or None,
                 "evaluation_file": str(args.base_evaluation) if args.base_evaluation else None,
                 "stack_file": base is not None,
                 "plan_source": base.plan_source if base is not None else None},
        "summary": {op: counts.get(op, 0) for op in ("create", "import", "update", "replace", "delete", "same")},
        "data_loss": any(r.risk == DATA_LOSS for r in review.rows) or guard_loss,
        "changes": [{"risk": r.risk, "op": r.op, "type": r.type, "logical_name": r.logical,
                     "physical_name": r.physical, "vhost": r.vhost or None,
                     "retryable_queue": r.family[1] if r.family else None, "what": r.what,
                     "notes": r.notes.removeprefix(" — ") or None} for r in review.rows],
        "alert_rules": None if rules is None else {"added": rules[0], "removed": rules[1],
                                                   "changed": [line for line, _ in rules[2]]},
    }


if __name__ == "__main__":
    sys.exit(main())
