"""What `make plan` and `make review` cost on big stacks: N retryable queues × 3 wait tiers, in one vhost or
spread over vhosts of 100. Durations depend on the machine and its load, so they are printed, not asserted.

For each size and layout this writes a stack file into a throw-away git repository holding a copy of the
project, commits it (BASE), changes the last tier's delay of every queue in the working tree, then times
`python -m tools.plan_report` and `python -m tools.review --base HEAD --output-full …` there, and reports
the wall and CPU seconds (both sides of a review run at once, so its CPU can exceed its wall time) and
the length of the review for a comment.

    .venv/bin/python -m bench.review_cost [--queues 100 1000] [--layouts one spread] [--project DIR]

`--project` times another checkout of the project (e.g. an older commit's `git archive`), for before/after.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PER_VHOST = 100
STACK = "bench"


def stack_file(queues: int, per_vhost: int, last_delay: str) -> str:
    """`queues` retryable queues with delays 1s, 10s, `last_delay`, `per_vhost` to a vhost."""
    vhosts = [{"name": f"shop{start // per_vhost}",
               "exchanges": [{"name": "events", "type": "topic"}],
               "queues": [{"name": f"q{i:04d}", "bindings": [{"exchange": "events", "routing_key": f"k.{i}"}],
                           "retry": {"delays": ["1s", "10s", last_delay], "max_retries": 5}}
                          for i in range(start, min(queues, start + per_vhost))]}
              for start in range(0, queues, per_vhost)]
    return yaml.safe_dump({"config": {"rabbitmq-retry:defaults": {"queue_type": "classic"},
                                      "rabbitmq-retry:vhosts": vhosts}})


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float
    status: int
    output: str


def timed(command: Sequence[str], cwd: Path) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, check=False,
                            env={**os.environ, "ALLOW_DATA_LOSS": ""})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 2):
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu, result.returncode, result.stdout)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
                    "-c", "commit.gpgsign=false", *args], cwd=repo, check=True, capture_output=True)


def project_copy(project: Path, into: Path) -> Path:
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(project / name, into)
    for name in ("components", "tools"):
        shutil.copytree(project / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    git(into, "init", "-q")
    return into


def measure(project: Path, queues: int, layout: str) -> tuple[Timing, Timing]:
    per_vhost = queues if layout == "one" else PER_VHOST
    with tempfile.TemporaryDirectory(prefix="review-cost-") as tmp:
        repo = project_copy(project, Path(tmp))
        stack = repo / f"Pulumi.{STACK}.yaml"
        stack.write_text(stack_file(queues, per_vhost, "1m"))
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "base")
        stack.write_text(stack_file(queues, per_vhost, "2m"))
        python = sys.executable
        plan = timed([python, "-m", "tools.plan_report", "--stack", STACK, "--root", str(repo)], repo)
        full = ["--output-full", str(repo / "full.md")] if "--output-full" in (
            project / "tools" / "review.py").read_text() else []  # a project from before it existed
        review = timed([python, "-m", "tools.review", "--base", "HEAD", "--stack", STACK, "--root", str(repo),
                        *full], repo)
    return plan, review


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--layouts", nargs="+", choices=["one", "spread"], default=["spread", "one"])
    parser.add_argument("--project", type=Path, default=ROOT, help="project checkout to time (default: this one)")
    args = parser.parse_args(argv)
    print(f"project {args.project.resolve()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print("| retryable queues | layout | plan wall s | plan CPU s | review wall s | review CPU s | comment chars |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for queues in args.queues:
        for layout in args.layouts:
            where = "1 vhost" if layout == "one" or queues <= PER_VHOST else f"{-(-queues // PER_VHOST)} vhosts"
            if layout == "spread" and queues <= PER_VHOST and "one" in args.layouts:
                continue  # the same stack
            plan, review = measure(args.project, queues, layout)
            print(f"| {queues:,} | {where} | {plan.wall_s:.1f} | {plan.cpu_s:.1f} | {review.wall_s:.1f} | "
                  f"{review.cpu_s:.1f} | {len(review.output):,} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
