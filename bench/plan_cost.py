"""P3, plan cost: what the program and its tooling cost on big stacks, broker-free.

For each size (retryable queues × 3 wait tiers each) and layout (one vhost, or spread over `SPREAD` vhosts)
this writes a stack file into a throw-away git repository holding a copy of the project, commits it (the
review's BASE), changes the last tier's delay of every queue in the working tree, and measures, each in a
process of its own (peak memory = that process tree's peak resident set, from `wait4`):

- `program under mocks`: `__main__.py` with that stack under Pulumi's mocks (`tools.mockrun.record_program`);
- `SDK floor`: a bare function that registers the same resources again, with the same types, names,
  inputs, parents and dependencies, and none of our config, plan or check code (the SDK's own cost);
- `check_vhost`: the preview-time topology checks of every vhost (planned beforehand, not timed);
- `make plan` and `make review` (BASE=HEAD: the delay change of every queue), as commands;
- `program, GC on`: the program under mocks again with Python's cyclic garbage collector left on, as it ran before
  `__main__.py` turned it off (the SDK floor runs with it off too, like the program).

Seconds are the work itself for the first three (after imports) and the command's wall time for the two
`make` targets.

    .venv/bin/python -m bench.plan_cost [--sizes 100 1000] [--layouts one spread]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
STACK = "bench"
SPREAD = 10
"""Vhosts of the spread layout."""
KINDS = ("program under mocks", "SDK floor", "check_vhost", "make plan", "make review", "program, GC on")
GC_ON = KINDS[-1]
"""The anchor of `__main__.py`'s `gc.disable()`: the program under mocks with the cyclic collector left on."""
LAYOUTS = ("one", "spread")


def layout_vhosts(layout: str) -> int:
    return 1 if layout == "one" else SPREAD


def stack_file(queues: int, vhosts: int, last_delay: str) -> str:
    """`queues` retryable classic queues with delays 1s, 10s, `last_delay`, in `vhosts` vhosts (equal shares)."""
    per_vhost = -(-queues // vhosts)
    entries = [{"name": f"shop{v}", "exchanges": [{"name": "events", "type": "topic"}],
                "queues": [{"name": f"q{i:05d}", "bindings": [{"exchange": "events", "routing_key": f"k.{i}"}],
                            "retry": {"delays": ["1s", "10s", last_delay], "max_retries": 5}}
                           for i in range(v * per_vhost, min(queues, (v + 1) * per_vhost))]}
               for v in range(vhosts)]
    return yaml.safe_dump({"config": {"rabbitmq-retry:defaults": {"queue_type": "classic"},
                                      "rabbitmq-retry:vhosts": entries}})


@dataclass(frozen=True)
class Cost:
    kind: str
    queues: int
    layout: str
    vhosts: int
    seconds: float
    peak_mb: float
    resources: int = 0


@dataclass(frozen=True)
class _Process:
    wall_s: float
    peak_mb: float
    stdout: str


LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Runs a command from a small process, so that its peak RSS (ru_maxrss, KiB on Linux, which a fork inherits from
its parent's high-water mark) is the command's own and not this process's."""


def _run(command: Sequence[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> _Process:
    """Run `command`; its wall time and the peak RSS of its process tree."""
    with tempfile.TemporaryDirectory(prefix="plan-cost-run-") as tmp:
        out, err, rss = Path(tmp) / "out", Path(tmp) / "err", Path(tmp) / "rss"
        start = time.perf_counter()
        with out.open("w") as stdout, err.open("w") as stderr:
            status = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(rss), *command], cwd=cwd,
                                    stdout=stdout, stderr=stderr, check=False,
                                    env={**os.environ, "ALLOW_DATA_LOSS": "", "PYTHONPATH": str(ROOT)}).returncode
        wall = time.perf_counter() - start
        if status not in ok:
            raise RuntimeError(f"{' '.join(command)} exited {status}:\n{err.read_text()[-3000:]}")
        return _Process(wall, int(rss.read_text()) / 1024, out.read_text())


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
                    "-c", "commit.gpgsign=false", *args], cwd=repo, check=True, capture_output=True)


def project_copy(into: Path, project: Path = ROOT) -> Path:
    """The program, its components and tools, and the Makefile, in a fresh git repository."""
    for name in ("__main__.py", "Pulumi.yaml", "Makefile"):
        shutil.copy(project / name, into)
    for name in ("components", "tools"):
        shutil.copytree(project / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    _git(into, "init", "-q")
    return into


# --- what runs in the child processes ------------------------------------------------------------------------


def _child_program(root: Path, recording: Path | None) -> dict[str, Any]:
    """Record the program (and write the recording for the floor), or with `recording` None, time it with the
    cyclic garbage collector left on (the program's own `gc.disable()` made a no-op)."""
    import gc

    from tools.lib.mockrun import close_event_loop, record_program

    if recording is None:
        gc.disable = lambda: None
    start = time.perf_counter()
    registered = record_program(STACK, root, exiting=recording is not None)
    seconds = time.perf_counter() - start
    close_event_loop()
    if recording is not None:
        recording.write_bytes(pickle.dumps(registered))
    return {"seconds": seconds, "resources": sum(1 for r in registered if r.custom)}


def replay(registered: Sequence[Any]) -> None:
    """Register `registered` (tools.mockrun.Registered) again as it was, with no config, plan or check of ours."""
    import pulumi

    made: dict[str, pulumi.Resource] = {}
    for resource in registered:
        if resource.type == "pulumi:pulumi:Stack":
            continue
        opts = pulumi.ResourceOptions(parent=made.get(resource.parent or ""),
                                      depends_on=[made[d] for d in resource.dependencies if d in made])
        if resource.custom:
            made[resource.urn] = pulumi.CustomResource(resource.type, resource.name, dict(resource.inputs), opts)
        else:
            component = pulumi.ComponentResource(resource.type, resource.name, None, opts)
            component.register_outputs(resource.outputs)
            made[resource.urn] = component


def _child_floor(recording: Path) -> dict[str, Any]:
    import gc

    from tools.lib.mockrun import close_event_loop, record

    registered = pickle.loads(recording.read_bytes())
    gc.disable()  # on the program's footing
    start = time.perf_counter()
    replayed = record(lambda: replay(registered))
    seconds = time.perf_counter() - start
    close_event_loop()
    return {"seconds": seconds, "resources": sum(1 for r in replayed if r.custom)}


def _child_check(root: Path) -> dict[str, Any]:
    from components.config.pulumi_yaml import stack_config
    from components.config.stack_settings import parse_stack_settings
    from components.plan.checks import check_vhost
    from components.plan.planner import plan_vhost

    config = parse_stack_settings(*stack_config(root / f"Pulumi.{STACK}.yaml"))[0].config
    plans = [plan_vhost(vhost, f"vhosts[{i}]") for i, vhost in enumerate(config.vhosts)]
    start = time.perf_counter()
    problems = [problem for plan in plans for problem in check_vhost(plan)]
    seconds = time.perf_counter() - start
    if problems:
        raise RuntimeError(f"check_vhost found problems: {[p.message for p in problems[:3]]}")
    return {"seconds": seconds, "resources": 0}


def _child(argv: Sequence[str]) -> int:
    kind, root, recording = argv[0], Path(argv[1]), Path(argv[2])
    result = {"program": lambda: _child_program(root, recording), "floor": lambda: _child_floor(recording),
              "program-gc-on": lambda: _child_program(root, None),
              "check": lambda: _child_check(root)}[kind]()
    print(json.dumps(result))
    return 0


# --- the parent ----------------------------------------------------------------------------------------------


def measure(queues: int, layout: str, progress: Callable[[str], None] = print) -> list[Cost]:
    """Every kind for one size and layout, in one throw-away project copy."""
    vhosts = layout_vhosts(layout)
    costs: list[Cost] = []
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="plan-cost-") as tmp:
        (Path(tmp) / "project").mkdir()
        repo = project_copy(Path(tmp) / "project")
        stack = repo / f"Pulumi.{STACK}.yaml"
        stack.write_text(stack_file(queues, vhosts, "1m"))
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", "base")
        stack.write_text(stack_file(queues, vhosts, "2m"))
        recording = Path(tmp) / "recording.pickle"

        def child(kind: str, name: str) -> None:
            progress(f"P3 {queues} queues, {vhosts} vhost(s): {name} …")
            process = _run([python, "-m", "bench.plan_cost", "--child", kind, str(repo), str(recording)], ROOT)
            result = json.loads(process.stdout.strip().splitlines()[-1])
            costs.append(Cost(name, queues, layout, vhosts, result["seconds"], process.peak_mb, result["resources"]))

        def make(target: str, *extra: str, ok: tuple[int, ...] = (0,)) -> None:
            progress(f"P3 {queues} queues, {vhosts} vhost(s): make {target} …")
            process = _run(["make", "-s", "-C", str(repo), target, f"STACK={STACK}", f"PY={python}", *extra], repo, ok)
            costs.append(Cost(f"make {target}", queues, layout, vhosts, process.wall_s, process.peak_mb))

        child("program", KINDS[0])
        child("floor", KINDS[1])
        child("check", KINDS[2])
        make("plan")
        make("review", "BASE=HEAD")
        if layout == LAYOUTS[0]:  # the anchor in one layout: it costs more than the rest, and the layouts agreed
            child("program-gc-on", GC_ON)
    return costs


def growth(costs: Sequence[Cost], kind: str, layout: str, small: int, big: int) -> float | None:
    """t(big) / t(small) for one kind and layout, when both were measured."""
    times = {c.queues: c.seconds for c in costs if c.kind == kind and c.layout == layout}
    if small in times and big in times and times[small] > 0:
        return times[big] / times[small]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.plan_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    args = parser.parse_args(argv)
    costs = [c for queues in args.sizes for layout in args.layouts for c in measure(queues, layout)]
    for c in costs:
        print(f"{c.kind:<20} {c.queues:>6} {c.vhosts:>3} vhost(s) {c.seconds:8.2f} s {c.peak_mb:7.0f} MB "
              f"{c.resources or '':>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
