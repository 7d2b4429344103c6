"""`make contracts STACK=<stack>`: the stack's retry contracts as `pulumi stack output retry_contracts --json`
prints them (`{vhost: {queue: contract}}`), written without the Pulumi CLI, a backend or secrets: the program
runs under Pulumi's mocks (tools/lib/evaluation.py) and the Vhost components' `retry_contracts` outputs are read.

    python -m tools.contracts --stack dev [--output contracts.dev.json]

Exit status 0, or 1 with one `error: …` line set (a config error as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import json
import sys

from tools.lib.cli import Written, stack_file_command
from tools.lib.contracts import stack_contracts
from tools.lib.evaluation import Evaluation


def _contracts(args: argparse.Namespace, evaluated: Evaluation) -> Written:
    found = stack_contracts(evaluated.recording)
    count = sum(len(queues) for queues in found.values())
    return Written(json.dumps(found, indent=2, sort_keys=True) + "\n", f"{count} retry contracts of stack {args.stack}")


def main(argv: list[str] | None = None) -> int:
    return stack_file_command(__doc__ or "", "python -m tools.contracts", argv, _contracts)


if __name__ == "__main__":
    sys.exit(main())
