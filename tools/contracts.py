"""`make contracts STACK=<stack>`: the stack's retry contracts as `pulumi stack output retry_contracts --json`
prints them (`{vhost: {queue: contract}}`), written without the Pulumi CLI, a backend or secrets: the program
runs under Pulumi's mocks (tools/lib/mockrun.py) and the Vhost components' `retry_contracts` outputs are read.

    python -m tools.contracts --stack dev [--output contracts.dev.json]

Exit status 0, or 1 with one `error: …` line set (a config error as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pulumi

from tools.lib.contracts import stack_contracts
from tools.lib.mockrun import ROOT, close_event_loop, record_program
from components.config.stack_file import StackFileError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.contracts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        recording = record_program(args.stack, args.root)
    except (pulumi.RunError, StackFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        close_event_loop()
    found = stack_contracts(recording)
    text = json.dumps(found, indent=2, sort_keys=True) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        count = sum(len(queues) for queues in found.values())
        print(f"wrote {args.output}: {count} retry contracts of stack {args.stack}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
