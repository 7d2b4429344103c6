"""`make definitions STACK=<stack>`: the stack's topology as RabbitMQ definitions (what `rabbitmqctl
import_definitions` and `POST /api/definitions` take), from the program run under Pulumi's mocks, without the CLI,
a backend or secrets (tools/lib/export.py says what is left out, and why).

    python -m tools.definitions --stack dev [--output definitions.dev.json]

Importing them only adds and updates: nothing is deleted or replaced, and a queue whose arguments differ makes the
import fail. Exit status 0, or 1 with one `error: …` line (a config error as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pulumi

from tools.lib.export import counts, export, text
from tools.lib.mockrun import ROOT, close_event_loop, record_program
from components.config.stack_file import StackFileError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.definitions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        recording = record_program(args.stack, args.root, preview=False)
    except (pulumi.RunError, StackFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        close_event_loop()
    found = export(recording)
    if args.output is None:
        sys.stdout.write(text(found))
    else:
        args.output.write_text(text(found))
        print(f"wrote {args.output}: {counts(found)} of stack {args.stack}", file=sys.stderr)
    for line in found.left_out:
        print(f"left out: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
