"""Shared fixtures: configs in the stack-config shape, and recording a program under mocks."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tools.lib.mockrun import Registered

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


def record_vhost(config: dict[str, Any] | None = None, *, name: str = "shop", reveal_secrets: bool = False,
                 **vhost_args: Any) -> list[Registered]:
    """What a `Vhost` component registers under mocks, for `config` (default: `vhost_config()`); secrets are
    masked as plans show them unless `reveal_secrets` (what the provider gets)."""
    from components import Vhost
    from tools.lib.mockrun import record

    args: Any = {"vhost": config or vhost_config(), **vhost_args}  # any keys: tests pass wrong ones on purpose
    return record(lambda: Vhost(name, args), reveal_secrets=reveal_secrets)


def of_type(resources: list[Registered], resource_type: str) -> dict[str, Registered]:
    """The resources of one type, by logical name."""
    return {r.name: r for r in resources if r.type == resource_type}


def dev_vhost_config(queue_type: str) -> dict[str, Any]:
    """The vhost of Pulumi.dev.yaml without its name, with every queue of `queue_type`."""
    document = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    [vhost] = document["config"]["rabbitmq-retry:vhosts"]
    vhost.pop("name")
    for queue in vhost["queues"]:
        queue["type"] = queue_type
    if "delay_levels" in vhost:
        vhost["delay_levels"]["type"] = queue_type
    return vhost


def work_queue_config(queue_type: str, delays: list[str], **extra: Any) -> dict[str, Any]:
    """A vhost without its name holding one retryable queue, `work`, retried after `delays`."""
    return {"queues": [{"name": "work", "type": queue_type, "retry": {"delays": delays}, **extra}]}


@pytest.fixture
def stack_raw() -> dict[str, Any]:
    """The `rabbitmq-retry:` namespace of a valid stack, keys without the prefix."""
    return {"defaults": {"queue_type": "classic"}, "vhosts": [vhost_config()]}


@pytest.fixture
def program_copy(tmp_path: Path) -> Path:
    """A copy of the program (`__main__.py`, `components/`, and `rabbitmq_retry_client/`, whose contract schema
    the components build contracts from) in tmp_path, to run it with stack files that the test writes there."""
    shutil.copy(ROOT / "__main__.py", tmp_path)
    for package in ("components", "rabbitmq_retry_client"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path
