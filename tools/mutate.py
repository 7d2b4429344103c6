"""`make mutate`: break the code on purpose, a handful of ways, and show that the tests notice each one.

Each mutation replaces one exact piece of source (it must occur exactly once, so a mutation that no longer
fits the code fails loudly instead of silently testing nothing) in a throw-away copy of the working tree,
then runs the tests that should catch it. A mutation the tests do not catch is a hole in the safety net:
the command lists it and exits 1. No broker is needed; `--all-tests` runs every non-broker test per
mutation instead of the named ones (slower, and the honest answer to "would anything catch it?").
"""

from __future__ import annotations

import argparse
import sys

from tools.lib.mutate import MUTATIONS, check_fits, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all-tests", action="store_true", help="run every non-broker test per mutation")
    args = parser.parse_args(argv)
    if misfits := check_fits():
        print("error: these mutations no longer fit the code:\n  " + "\n  ".join(misfits), file=sys.stderr)
        return 1
    survivors = []
    for number, mutation in enumerate(MUTATIONS, start=1):
        print(f"[{number}/{len(MUTATIONS)}] {mutation.name} ({mutation.path}) …", flush=True)
        caught, seconds, summary = run(mutation, args.all_tests)
        print(f"    {'caught' if caught else 'SURVIVED'} in {seconds:.0f} s: {summary}", flush=True)
        if not caught:
            survivors.append(mutation.name)
    if survivors:
        print(f"\n{len(survivors)} of {len(MUTATIONS)} mutations survived: the tests miss\n  "
              + "\n  ".join(survivors))
        return 1
    print(f"\nall {len(MUTATIONS)} mutations caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
