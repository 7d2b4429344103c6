"""What the commands in `tools/` share on the command line: the `--stack`/`--root` arguments and a recording
of the program, with errors printed as one `error: …` line set."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pulumi

from tools.lib.mockrun import ROOT, Registered, close_event_loop, record_program
from tools.lib.stack_file import StackFileError


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
