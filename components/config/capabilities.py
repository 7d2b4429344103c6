"""What a stack needs of the broker's version, checked offline against `rabbitmq-retry:broker.version`.

Pure. Each requirement names the config key that needs it, so a refusal says what to change. The same
table serves `make doctor`, which reads the version from the live broker instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .model import NATIVE_MIN_VERSION, StackConfig

Version = tuple[int, int, int]
VERSION = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")
QUORUM_MIN_VERSION: Version = (3, 8, 0)
"""Quorum queues first shipped in RabbitMQ 3.8.0."""
AT_LEAST_ONCE_MIN_VERSION: Version = (3, 10, 0)
"""`x-dead-letter-strategy: at-least-once` (every retryable quorum queue dead-letters so) came with 3.10.0."""
COMMUNITY_SUPPORT_ENDED: dict[tuple[int, int], str] = {
    (4, 1): "2026-01-30", (4, 0): "2025-04-15", (3, 13): "2024-09-17", (3, 12): "2024-02-21",
    (3, 11): "2023-06-01", (3, 10): "2022-09-28", (3, 9): "2023-01-31", (3, 8): "2022-07-31",
}
"""When each release series stopped getting community fixes, from endoflife.date's RabbitMQ table (its `eol`,
read in 2026: RabbitMQ gives community support to the latest minor series only, so mostly the day the next
series came out; some series' own release notes had promised later dates, e.g. 3.10's July 31st, 2023). A
series older than these ended earlier still."""


@dataclass(frozen=True)
class Requirement:
    path: str
    """Config key path that needs the feature."""
    minimum: Version
    feature: str


def parse_version(text: str) -> Version | None:
    """(4, 3, 6) from "4.3.6" (a pre-release or build suffix is ignored); None when it is not `X.Y.Z`."""
    match = VERSION.match(text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def shown(version: Version) -> str:
    return ".".join(map(str, version))


def requirements(config: StackConfig) -> Iterator[Requirement]:
    """Every feature of the broker the stack uses, with the key path that uses it."""
    for i, vhost in enumerate(config.vhosts):
        for j, queue in enumerate(vhost.queues):
            path = f"vhosts[{i}].queues[{j}]"
            if queue.queue_type == "quorum":
                yield Requirement(f"{path}.type", QUORUM_MIN_VERSION, "quorum queues")
                if queue.retry is not None:
                    yield Requirement(f"{path}.retry", AT_LEAST_ONCE_MIN_VERSION,
                                      "at-least-once dead-lettering of quorum queues")
            if queue.retry is not None and queue.retry.strategy == "native":
                yield Requirement(f"{path}.retry.strategy", NATIVE_MIN_VERSION,
                                  "strategy native (the delayed-retry-* policy keys)")
        if vhost.delay_levels is not None and vhost.delay_levels.queue_type == "quorum":
            yield Requirement(f"vhosts[{i}].delay_levels.type", QUORUM_MIN_VERSION, "quorum queues")
            yield Requirement(f"vhosts[{i}].delay_levels.type", AT_LEAST_ONCE_MIN_VERSION,
                              "at-least-once dead-lettering of quorum queues (between delay levels)")
        for kind, policies in (("policies", vhost.policies), ("operator_policies", vhost.operator_policies)):
            for j, policy in enumerate(policies):
                for key in policy.definition:
                    if key.startswith("delayed-retry-"):
                        yield Requirement(f"vhosts[{i}].{kind}[{j}].definition.{key}", NATIVE_MIN_VERSION,
                                          f"the policy key {key}")


def version_problems(config: StackConfig, version: Version, source: str = "broker.version") -> list[tuple[str, str]]:
    """(key path, problem) for each feature `version` lacks; `source` says where the version came from."""
    return [(r.path, f"{r.feature}: needs RabbitMQ {shown(r.minimum)} or later, and {source} is {shown(version)}; "
             f"upgrade the broker first, or change {r.path}") for r in requirements(config) if version < r.minimum]


def end_of_support(version: Version) -> str | None:
    """A warning when the version's series no longer gets community support, else None."""
    series = version[:2]
    ended = COMMUNITY_SUPPORT_ENDED.get(series)
    if ended is None and series < min(COMMUNITY_SUPPORT_ENDED):
        ended = f"before {COMMUNITY_SUPPORT_ENDED[min(COMMUNITY_SUPPORT_ENDED)]}"
    if ended is None:
        return None
    return (f"RabbitMQ {shown(version)}: the {series[0]}.{series[1]} series is out of community support (ended "
            f"{ended}, per endoflife.date): no more fixes without a commercial licence; plan an upgrade")
