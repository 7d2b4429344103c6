"""`make evaluate STACK=<stack> [OUTPUT=<file>]` (`python -m tools.evaluate --stack <stack> [--root <project>]
[--output <file>]`): the stack evaluated once by these tools (its program run under Pulumi's mocks: what it
registers, what its plans knew of each registration, its migrations, its exports and settings;
tools/lib/evaluation.py), as a versioned JSON document (docs/schemas/evaluation.schema.json). `--root` another
checkout: its own `__main__.py` and `components/` run by these tools (`make review` evaluates BASE so). Save it
when a stack is deployed, and `make review BASE_EVALUATION=<file>` reviews a change against it.
Exit status: 0, or 1 when the stack file or the config is wrong (printed as `error: …`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.lib.cli import STACK_ERRORS
from tools.lib.evaluation import SCHEMA_VERSION, evaluate_checkout
from tools.lib.mockrun import close_event_loop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project directory holding the stack file")
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        evaluated = evaluate_checkout(args.stack, args.root.resolve())
    except STACK_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (ImportError, AttributeError, TypeError) as error:  # a program that does not run under Pulumi's mocks
        print(f"error: the program in {args.root} cannot be run by these tools: {type(error).__name__}: {error}",
              file=sys.stderr)
        return 1
    finally:
        close_event_loop()
    if args.output is None:
        sys.stdout.write(evaluated.to_json() + "\n")
    else:
        args.output.write_text(evaluated.to_json() + "\n", encoding="utf-8")
        print(f"wrote {args.output}: stack {args.stack}, {len(evaluated.recording)} registrations, schema_version "
              f"{SCHEMA_VERSION}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
