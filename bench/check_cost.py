"""What the preview-time checks cost: `check_vhost` alone at 100 and 1,000 retryable queues (3 tiers
each) in one vhost, and a Vhost component under Pulumi's mocks against the SDK's own floor for the same
resources, measured in one run: a bare function that replays the recording (every resource, components
included, with the same type, name, inputs, parent and dependencies) without any of our code.

    .venv/bin/python -m bench.check_cost [--check-sizes 100 1000] [--program-sizes 100]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import pulumi

from components import Vhost
from components.checks import check_vhost
from components.config import load_vhost
from components.plan import plan_vhost
from tools.mockrun import Registered, record


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


def replay(registered: Sequence[Registered]) -> None:
    """Register `registered` again as it was, with no config, plan or check of ours in between."""
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


def program_cost(queues: int) -> tuple[int, float, float]:
    """(resources registered, seconds for the Vhost component, seconds for replaying what it registered),
    both under the same mocks."""
    config = vhost_config(queues)
    registered: list[Registered] = []
    component = seconds(lambda: registered.extend(record(lambda: Vhost("bench", {"vhost": config}))))
    bare_seconds = seconds(lambda: record(lambda: replay(registered)))
    return sum(1 for r in registered if r.type != "pulumi:pulumi:Stack"), component, bare_seconds


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
        lines.append(f"the same resources replayed (floor)   {'':6s}  {count:9d}  {bare:7.2f}  {1:5.2f}")
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
