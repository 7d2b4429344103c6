"""What the commands in `tools/` share on the command line: the `--stack`/`--root` arguments and a recording
of the program, with errors printed as one `error: …` line set."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pulumi

from tools.lib.mockrun import ROOT, Registered, close_event_loop, record_program
from tools.lib.stack_file import StackFileError


def broker_command_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a command that reads a stack's broker (doctor, drift, migrate-status, migrate-retire):
    `--stack`, `--endpoint` and `--root`; each command adds its own."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0] if doc else None)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--endpoint", help="management URL (default RABBITMQ_ENDPOINT, else the stack's "
                        "rabbitmq:endpoint)")
    parser.add_argument("--root", type=Path, default=ROOT)
    return parser


def record_for_command(description: str, argv: list[str] | None) -> tuple[str, list[Registered] | None]:
    """A command's `--stack`/`--root` arguments and its recording; None after printing the error as one
    `error: …` line set (a config error as `pulumi preview` prints it, a stack file error with its line)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    args = parser.parse_args(argv)
    try:
        return args.stack, record_program(args.stack, args.root, exiting=True)
    except (pulumi.RunError, StackFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return args.stack, None
    finally:
        close_event_loop()
