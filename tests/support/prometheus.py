"""The local Prometheus of scripts/prometheus.sh for the alert tests: load a rule file, read its alerts
(`/api/v1/alerts`), and wait until one fires or is gone."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.support.environment import missing

SCRIPT = ROOT / "scripts" / "prometheus.sh"
URL = f"http://127.0.0.1:{os.environ.get('PROMETHEUS_PORT', '9490')}"
RULES = Path(os.environ.get("PROMETHEUS_DIR", "/var/lib/rabbitmq-retry/prometheus")) / "rules"


def get(path: str) -> Any:
    with urllib.request.urlopen(f"{URL}{path}", timeout=10) as response:
        return json.load(response)["data"]


class PrometheusError(Exception):
    """scripts/prometheus.sh could not start it."""


def ensure_running() -> None:
    """Start it (installing Debian's package when missing) unless it answers."""
    result = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise PrometheusError(f"scripts/prometheus.sh start failed: {result.stderr.strip()[-500:]}")


def ensure() -> None:
    """`ensure_running` for a test: skip it when that fails, except in CI."""
    try:
        ensure_running()
    except PrometheusError as error:
        missing(str(error), because="CI=true: make setup should have installed prometheus")


@contextmanager
def loaded(name: str, rules: Mapping[str, Any]) -> Iterator[None]:
    """`rules` (a rule file) loaded by Prometheus, removed afterwards."""
    RULES.mkdir(parents=True, exist_ok=True)
    path = RULES / f"{name}.yml"
    path.write_text(yaml.safe_dump(dict(rules), sort_keys=False), encoding="utf-8")
    groups = {g["name"] for g in rules["groups"]}
    try:
        subprocess.run([str(SCRIPT), "reload"], check=True, capture_output=True, timeout=60)
        wait(lambda: groups <= {g["name"] for g in get("/api/v1/rules")["groups"]}, 30, f"rule groups {groups} loaded")
        yield
    finally:
        path.unlink(missing_ok=True)
        subprocess.run([str(SCRIPT), "reload"], capture_output=True, timeout=60)


def alerts(**labels: str) -> list[dict[str, Any]]:
    """The alerts Prometheus holds (pending or firing) whose labels include `labels`."""
    return [a for a in get("/api/v1/alerts")["alerts"] if all(a["labels"].get(k) == v for k, v in labels.items())]


def firing(**labels: str) -> list[dict[str, Any]]:
    return [a for a in alerts(**labels) if a["state"] == "firing"]


def wait(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `condition()` held (a generous bound for an eventual condition: tests assert it, never how
    fast); AssertionError naming `what` after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.5)
    return time.monotonic() - start
