"""Shared fixtures: configs in the stack-config shape, and recording a program under mocks."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RETRYABLE = {
    "name": "orders",
    "bindings": [{"exchange": "events", "routing_key": "order.created"}],
    "retry": {"delays": ["1s", "10s", "1m"], "max_retries": 5},
}


def vhost_config(**overrides: Any) -> dict[str, Any]:
    """A small valid vhost: one topic exchange, a retryable queue and a plain queue."""
    config: dict[str, Any] = {
        "name": "shop",
        "exchanges": [{"name": "events", "type": "topic"}],
        "queues": [copy.deepcopy(RETRYABLE),
                   {"name": "audit", "bindings": [{"exchange": "events", "routing_key": "#"}]}],
    }
    config.update(overrides)
    return config


@pytest.fixture
def stack_raw() -> dict[str, Any]:
    """The `rabbitmq-retry:` namespace of a valid stack, keys without the prefix."""
    return {"defaults": {"queue_type": "classic"}, "vhosts": [vhost_config()]}


@pytest.fixture
def program_copy(tmp_path: Path) -> Path:
    """A copy of the program (`__main__.py`, `components/`) in tmp_path, to run it with stack files that
    the test writes there."""
    shutil.copy(ROOT / "__main__.py", tmp_path)
    shutil.copytree(ROOT / "components", tmp_path / "components", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path
