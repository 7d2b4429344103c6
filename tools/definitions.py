"""`make definitions STACK=<stack>`: the stack's topology as RabbitMQ definitions (what `rabbitmqctl
import_definitions` and `POST /api/definitions` take), from the program run under Pulumi's mocks, without the CLI,
a backend or secrets (tools/lib/definitions.py says what is left out, and why).

    python -m tools.definitions --stack dev [--output definitions.dev.json]

Importing them only adds and updates: nothing is deleted or replaced, and a queue whose arguments differ makes the
import fail. Exit status 0, or 1 with one `error: …` line (a config error as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import sys

from tools.lib.cli import Written, stack_file_command
from tools.lib.definitions import counts, export, text
from tools.lib.evaluation import Evaluation


def _definitions(args: argparse.Namespace, evaluated: Evaluation) -> Written:
    found = export(evaluated.recording)
    return Written(text(found), f"{counts(found)} of stack {args.stack}",
                   [f"left out: {line}" for line in found.left_out])


def main(argv: list[str] | None = None) -> int:
    # As `pulumi up` runs the program: every user's password is required.
    return stack_file_command(__doc__ or "", "python -m tools.definitions", argv, _definitions, preview=False)


if __name__ == "__main__":
    sys.exit(main())
