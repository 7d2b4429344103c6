"""Management API helpers the broker tests share: versions, queue statistics, and waiting for an
eventual condition (statistics and policies show up seconds after a change)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tests.support.mirror import Broker, call, esc, get

STATS_S = 30.0
"""Generous upper bound for the management API to report a change (measured: 3-6 s on 4.3, up to 10 s
on 3.10): a timeout for an eventual condition, not a figure."""

T = TypeVar("T")


def parse_version(text: str) -> tuple[int, ...]:
    """(4, 3, 6) from "4.3.6"; pre-release and build suffixes are ignored ("4.2.0-rc.1" → (4, 2, 0))."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("-", 1)[0].split("+", 1)[0])[:3])


def version(broker: Broker) -> tuple[int, ...]:
    """The broker's RabbitMQ version, from `GET /api/overview`."""
    return parse_version(call(broker, "GET", "overview")[1]["rabbitmq_version"])


def queue_info(broker: Broker, vhost: str, queue: str) -> dict[str, Any]:
    """`GET /api/queues/<vhost>/<queue>`: arguments, policies and (lagging) statistics."""
    info = get(broker, f"queues/{esc(vhost)}/{esc(queue)}")
    assert info is not None, f"queue {queue!r} does not exist in vhost {vhost!r}"
    return dict(info)


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll `check()` until it returns something truthy and return that; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return result


def wait_for_queue(broker: Broker, vhost: str, queue: str, ready: Callable[[dict[str, Any]], bool], what: str,
                   timeout: float = STATS_S) -> dict[str, Any]:
    """Poll the queue's management record until `ready(info)`; return that record."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        last = queue_info(broker, vhost, queue)
        return last if ready(last) else None

    try:
        return wait_for(check, timeout, what, interval=0.25)
    except AssertionError as error:
        raise AssertionError(f"{error}; {queue} reports {last}") from None
