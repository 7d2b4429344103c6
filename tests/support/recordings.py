"""What the program and its components register under Pulumi's mocks, as sorted JSON, so that a change
meant to change nothing a user deployed can be compared byte for byte with recordings made before it
(`tests/recordings/`, checked by `tests/test_recordings.py`).

`python -m tests.support.recordings` rewrites the recordings: do it only for a change that is meant to
change what users deploy, and say so in its commit.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "tests" / "recordings"
STACKS = ("dev", "prod", "every")
"""`Pulumi.dev.yaml`, `Pulumi.prod.yaml`, and `tests/recordings/Pulumi.every.yaml` (every strategy)."""


def _standalone_tiers() -> Any:
    from components import RetryableQueue

    return RetryableQueue("billing", {
        "vhost": "payments",
        "queue": {"name": "billing", "type": "quorum", "retry": {"delays": ["5s", "1m", "10m"], "max_retries": 6}},
        "protect_queues": True,
        "retain_error_queues": True,
    })


def _standalone_native() -> Any:
    from components import RetryableQueue

    return RetryableQueue("push", {
        "vhost": "payments",
        "queue": {"name": "push", "type": "quorum",
                  "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "30s", "max_retries": 5}},
    })


def _standalone_levels() -> Any:
    from components import DelayLevels

    return DelayLevels("payments-levels", {"vhost": "payments", "delay_levels": {"unit": "1s", "max_delay": "1h"}})


def _standalone_levels_queue() -> Any:
    from components import DelayLevels, RetryableQueue
    from components.pulumi.retryable_queue import RetryableQueuePythonArgs

    levels = DelayLevels("payments-levels", {"vhost": "payments", "delay_levels": {"unit": "1s", "max_delay": "1h"}})
    args: RetryableQueuePythonArgs = {
        "vhost": "payments",
        "queue": {"name": "refunds", "retry": {"strategy": "levels", "backoff": {"max": "5m"}, "max_retries": 6}},
        "delay_levels": levels,
    }
    return RetryableQueue("refunds", args)


STANDALONE: dict[str, Callable[[], Any]] = {
    "standalone-tiers": _standalone_tiers,
    "standalone-native": _standalone_native,
    "standalone-levels": _standalone_levels,
    "standalone-levels-queue": _standalone_levels_queue,
}
"""Components used on their own, as from another stack (docs/components.md)."""


def _rows(recorded: list[Any]) -> str:
    # Registration order is asynchronous; the URN identifies a resource, dependencies are a set.
    rows = sorted((asdict(r) for r in recorded), key=lambda row: row["urn"])
    for row in rows:
        row["dependencies"] = sorted(row["dependencies"])
    return json.dumps(rows, indent=1, sort_keys=True) + "\n"


def program_copy() -> Path:
    """The program with every stack file the recordings use, in a temporary directory."""
    target = Path(tempfile.mkdtemp(prefix="recordings-"))
    shutil.copy(ROOT / "__main__.py", target)
    shutil.copy(ROOT / "Pulumi.yaml", target)
    shutil.copytree(ROOT / "components", target / "components", ignore=shutil.ignore_patterns("__pycache__"))
    for stack in ("dev", "prod"):
        shutil.copy(ROOT / f"Pulumi.{stack}.yaml", target)
    shutil.copy(RECORDINGS / "Pulumi.every.yaml", target)
    return target


def current() -> dict[str, str]:
    """File name → what the code registers now, for every recording."""
    from tools.lib.mockrun import record, record_program

    root = program_copy()
    try:
        found = {}
        for stack in STACKS:
            for preview in (True, False):
                found[f"{stack}.{'preview' if preview else 'up'}.json"] = _rows(record_program(stack, root, preview))
        for name, register in STANDALONE.items():
            found[f"{name}.json"] = _rows(record(register))
        return found
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    from tools.lib.mockrun import close_event_loop

    try:
        for name, text in current().items():
            (RECORDINGS / name).write_text(text, encoding="utf-8")
            print(f"wrote {RECORDINGS.relative_to(ROOT) / name}")
    finally:
        close_event_loop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
