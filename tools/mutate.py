"""`make mutate`: break the code on purpose, a handful of ways, and show that the tests notice each one.

Each mutation replaces one exact piece of source (it must occur exactly once, so a mutation that no longer
fits the code fails loudly instead of silently testing nothing) in a throw-away copy of the working tree,
then runs the tests that should catch it. A mutation the tests do not catch is a hole in the safety net:
the command lists it and exits 1. No broker is needed; `--all-tests` runs every non-broker test per
mutation instead of the named ones (slower, and the honest answer to "would anything catch it?").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    """What the breakage would do to a user, in a few words."""
    path: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    """The test files expected to catch it."""


MUTATIONS = (
    Mutation("the requeue exchange is no longer bound to its queue (retries vanish)",
             "components/plan.py", 'BindingPlan("requeue-binding", requeue_x, name),', "",
             ("tests/test_plan.py", "tests/test_components.py")),
    Mutation("the input queue dead-letters to the requeue exchange instead of the retry exchange (hot loop)",
             "components/plan.py", '"x-dead-letter-exchange": retry_x,', '"x-dead-letter-exchange": requeue_x,',
             ("tests/test_plan.py", "tests/test_components.py")),
    Mutation("queues are declared non-durable (lost on restart; refused by 4.3)",
             "components/resources.py", "durable=True,  # the provider defaults to false",
             "durable=False,  # the provider defaults to false", ("tests/test_components.py",)),
    Mutation("the preview-time checks are skipped",
             "components/vhost.py", "raise TopologyError(", "print(",
             ("tests/test_checks.py",)),
    Mutation("a wait tier's delay policy loses its TTL",
             "components/plan.py", '{"message-ttl": str(t.delay_ms)}', "{}",
             ("tests/test_plan.py", "tests/test_components.py")),
    Mutation("unknown config keys are accepted silently",
             "components/config/fields.py", "        if key not in allowed:\n", "        if False:\n",
             ("tests/test_config.py",)),
    Mutation("a secret's ciphertext is shown in plans and reviews",
             "tools/stack_file.py", 'return f"{SECRET_MARKER} {digest}"',
             'return f"{SECRET_MARKER} {json.dumps(ciphertext)}"', ("tests/test_review.py",)),
)


def _copy_tree(destination: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored), plus the shared venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for relative in filter(None, listed):
        source = ROOT / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (destination / ".venv").symlink_to(ROOT / ".venv")


def apply(mutation: Mutation, tree: Path) -> None:
    path = tree / mutation.path
    source = path.read_text()
    count = source.count(mutation.original)
    if count != 1:
        raise SystemExit(f"error: mutation {mutation.name!r}: {mutation.path} contains its original text "
                         f"{count} times, not once; update tools/mutate.py to the code")
    path.write_text(source.replace(mutation.original, mutation.mutated))


def check_fits(tree: Path = ROOT) -> list[str]:
    """Mutations whose original text is not exactly once in its file (they would test nothing)."""
    return [f"{m.name}: {m.path}" for m in MUTATIONS
            if not (tree / m.path).exists() or (tree / m.path).read_text().count(m.original) != 1]


def run(mutation: Mutation, all_tests: bool) -> tuple[bool, float, str]:
    """(caught, seconds, last line of pytest's output) for one mutation, in its own copy of the tree."""
    with tempfile.TemporaryDirectory(prefix="mutate-") as directory:
        tree = Path(directory)
        _copy_tree(tree)
        apply(mutation, tree)
        targets = ["-m", "not broker"] if all_tests else list(mutation.tests)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider", *targets],
                                cwd=tree, capture_output=True, text=True,
                                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        failed = [line.removeprefix("FAILED ") for line in result.stdout.splitlines() if line.startswith("FAILED ")]
        summary = failed[0] if failed else (result.stdout.strip().splitlines() or [result.stderr.strip()])[-1]
        # Exit 1 means a test failed; anything else (no tests collected, usage error) proves nothing.
        return result.returncode == 1, time.monotonic() - started, summary


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
