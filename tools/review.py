"""`make review BASE=<rev> STACK=<stack>`: what `pulumi up` would do to a stack between git revision BASE
and the working tree, as Markdown for a pull-request comment, with the risk of every change.

Both sides are evaluated once each under Pulumi's mocks (no CLI, broker or secrets), at once, each in a process of
its own (`python -m tools.evaluate`, tools/lib/evaluation.py) so that BASE's own `__main__.py` and `components/`
are evaluated by BASE's own code; `tools/lib/engine.py` compares the two recordings, and the review reads each
side's plan, migrations and alerting rules from its evaluation.
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
import os
import sys
import tempfile
from pathlib import Path

from components.config.stack_file import StackFileError, not_found
from rabbitmq_retry_client.management import ManagementError
from tools.lib import engine
from tools.lib.checkout import CheckoutError, checkout
from tools.lib.cli import add_tls_arguments, broker_client
from tools.lib.definitions import DefinitionsError
from tools.lib.queue_guard import depth_reader, review_section
from tools.lib.review import BaseProgramError, ReviewError, evaluate_both, render
from tools.lib.review import alerts as alert_rules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision to compare with, e.g. origin/main")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project directory (default: current)")
    parser.add_argument("--output", type=Path, help="also write the review for a comment here (for CI to post)")
    parser.add_argument("--output-full", type=Path, help="write the full, ungrouped review here")
    parser.add_argument("--allow-data-loss", action="store_true", help="acknowledge data loss: exit 0")
    parser.add_argument("--endpoint", help="management URL of the live broker: add what each deleted or replaced "
                        "queue holds now (read-only; credentials as for drift); offline without it")
    add_tls_arguments(parser)
    args = parser.parse_args(argv)
    allow = args.allow_data_loss or os.environ.get("ALLOW_DATA_LOSS", "").lower() in ("1", "true", "yes")
    project, stack_file = args.root.resolve(), f"Pulumi.{args.stack}.yaml"
    try:
        if not (project / stack_file).exists():
            raise ReviewError(f"error: {not_found(project / stack_file)}")
        with tempfile.TemporaryDirectory(prefix="rabbitmq-retry-review-") as tmp:
            commit = checkout(args.base, project, Path(tmp))
            at_base = (Path(tmp) / stack_file).exists()
            try:
                base, head = evaluate_both(args.stack, project, Path(tmp) if at_base else None)
            except BaseProgramError as error:
                raise ReviewError(f"the program at BASE={args.base} ({commit}) fails:\n{error}") from None
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
    heading = f"## RabbitMQ review: stack `{args.stack}`, `{args.base}` ({commit}) → working tree"
    note = "" if at_base else f"\n\n`{stack_file}` does not exist at `{args.base}`: every resource is created."
    compact, complete = (f"{heading}{note}\n\n{body}{guard.markdown}{alert_rules.section(rules, limit)}\n"
                         for body, limit in ((review.compact, alert_rules.SHOWN), (review.full, None)))
    sys.stdout.write(compact)
    if args.output:
        args.output.write_text(compact)
    if args.output_full:
        args.output_full.write_text(complete)
    return 2 if guard.data_loss and not allow else review.status


if __name__ == "__main__":
    sys.exit(main())
