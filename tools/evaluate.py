"""`python -m tools.evaluate --stack <stack> [--root <project>]`: the project's stack evaluated once (its program run
under Pulumi's mocks: what it registers, what its plans knew of each registration, its migrations, its exports and
settings; tools/lib/evaluation.py), printed as JSON. `make review` runs it once per side of the change, BASE's in
BASE's own checkout; `--root`'s own `components` come first on the import path.
Exit status: 0, or 1 when the stack file or the config is wrong (printed as `error: …`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project directory holding __main__.py")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    sys.path.insert(0, str(root))  # before anything imports `components`: this process evaluates root's own
    try:
        from tools.lib.cli import evaluation_for_command
    except ImportError as error:
        print(f"error: {root} cannot be evaluated by these tools ({error}): its components predate one evaluation "
              "per side (tools/evaluate.py); review against a newer BASE", file=sys.stderr)
        return 1
    evaluated = evaluation_for_command(args.stack, root)
    if evaluated is None:
        return 1
    sys.stdout.write(evaluated.to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
