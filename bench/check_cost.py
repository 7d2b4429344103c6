"""What the preview-time checks cost: `check_vhost` alone at 100 and 1,000 retryable queues (3 tiers
each) in one vhost, and a Vhost component under Pulumi's mocks against a bare function that registers
the same number of `pulumi_rabbitmq` resources under the same mocks, measured in one run.

    .venv/bin/python -m bench.check_cost [--check-sizes 100 1000] [--program-sizes 100]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import pulumi_rabbitmq as rabbitmq

from components import Vhost
from components.checks import check_vhost
from components.config import load_vhost
from components.plan import plan_vhost
from tools.mockrun import record


def vhost_config(queues: int, tiers: int = 3) -> dict[str, Any]:
    """One vhost with `queues` retryable quorum queues of `tiers` wait tiers, each bound to one exchange."""
    return {"name": "bench", "exchanges": [{"name": "events", "type": "topic"}],
            "queues": [{"name": f"q{n:05d}", "bindings": [{"exchange": "events", "routing_key": f"q{n:05d}.#"}],
                        "retry": {"delays": [f"{s}s" for s in range(1, tiers + 1)]}} for n in range(queues)]}


def seconds(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def check_cost(queues: int) -> float:
    plan = plan_vhost(load_vhost(vhost_config(queues), "vhosts[0]"), "vhosts[0]")
    problems: list[str] = []
    elapsed = seconds(lambda: problems.extend(check_vhost(plan)))
    assert problems == [], problems[:3]
    return elapsed


def program_cost(queues: int) -> tuple[int, float, float]:
    """(custom resources registered, seconds for the component, seconds for a bare function registering
    as many Queue resources), both under the same mocks."""
    config = vhost_config(queues)
    registered: list[Any] = []
    component = seconds(lambda: registered.extend(record(lambda: Vhost("bench", {"vhost": config}))))
    count = sum(1 for r in registered if r.custom)

    def bare() -> None:
        settings = rabbitmq.QueueSettingsArgs(durable=True, arguments_json='{"x-queue-type": "quorum"}')
        for n in range(count):
            rabbitmq.Queue(f"bare-{n}", name=f"bare-{n}", vhost="bench", settings=settings)

    bare_seconds = seconds(lambda: record(bare))
    return count, component, bare_seconds


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check-sizes", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--program-sizes", type=int, nargs="*", default=[100])
    args = parser.parse_args(argv)
    lines = ["what                                   queues  resources  seconds  ratio"]
    for queues in args.check_sizes:
        lines.append(f"check_vhost (3 tiers each)            {queues:6d}  {'':9s}  {check_cost(queues):7.2f}")
    for queues in args.program_sizes:
        count, component, bare = program_cost(queues)
        lines.append(f"Vhost component under mocks           {queues:6d}  {count:9d}  {component:7.2f}  "
                     f"{component / bare:5.2f}")
        lines.append(f"bare Queue registrations under mocks  {'':6s}  {count:9d}  {bare:7.2f}  {1:5.2f}")
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
