"""What a stack needs of the broker's version, checked offline against `rabbitmq-retry:broker.version`.

Pure. Each requirement names the config key that needs it, so a refusal says what to change. The same
table serves `make doctor`, which reads the version from the live broker instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..model import wire
from ..model.key_paths import with_paths
from ..model.stack_config import Policy, StackConfig
from ..strategies import strategy_of

Version = wire.Version
VERSION = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")
QUORUM_MIN_VERSION: Version = (3, 8, 0)
"""Quorum queues first shipped in RabbitMQ 3.8.0."""
AT_LEAST_ONCE_MIN_VERSION: Version = wire.AT_LEAST_ONCE_SINCE.minimum
"""`x-dead-letter-strategy: at-least-once` (every retryable quorum queue dead-letters so)."""
COMMUNITY_SUPPORT_ENDED: dict[tuple[int, int], str] = {
    (4, 1): "2026-01-30", (4, 0): "2025-04-15", (3, 13): "2024-09-17", (3, 12): "2024-02-21",
    (3, 11): "2023-06-01", (3, 10): "2022-09-28", (3, 9): "2023-01-31", (3, 8): "2022-07-31",
}
"""When each release series stopped getting community fixes, from endoflife.date's RabbitMQ table (its `eol`,
read in 2026: RabbitMQ gives community support to the latest minor series only, so mostly the day the next
series came out; some series' own release notes had promised later dates, e.g. 3.10's July 31st, 2023). A
series older than these ended earlier still."""


def _measured(since: wire.Since | None) -> tuple[Version, Version] | None:
    """(refused by, accepted by) of a measured `since`; None when every broker takes the key, or when read."""
    return None if since is None or since.refused_by is None else (since.refused_by, since.minimum)


USER_POLICY_KEY_VERSIONS: dict[str, tuple[Version, Version]] = {
    row.key: versions for row in wire.ROWS if row.policy and (versions := _measured(row.since))}
"""User policy keys not every measured broker takes (keys whose version was read, e.g. `delayed-retry-*`, are
required by `requirements` on their own). 3.10.8 still takes the `ha-*` and `queue-master-locator` keys that 4.3.6
refuses; the config refuses those on every version (wire.RETIRED_POLICY_KEYS)."""
OPERATOR_POLICY_KEY_VERSIONS: dict[str, tuple[Version, Version]] = {
    row.key: versions for row in wire.ROWS if row.operator_policy and (versions := _measured(row.operator_since))}
"""Operator policy keys (of wire.OPERATOR_POLICY_KEYS) not every measured broker takes."""
OPERATOR_POLICY_KEYS_ON_3_10 = tuple(k for k in wire.OPERATOR_POLICY_KEYS if k not in OPERATOR_POLICY_KEY_VERSIONS)
TARGET_GROUP_SIZE_FROM: Version = (4, 0, 0)
"""From this `broker.version` on, a quorum queue with a `quorum_group_size` also gets `target-group-size` in its
policy (`Queue.target_group_size`). 3.10.8 refuses the key and 4.3.6 takes it (USER_POLICY_KEY_VERSIONS);
versions from 4.0 below 4.3.6 were not measured, and preview warns about them as for any such key."""
APPLY_TO_VERSIONS: dict[str, tuple[Version, Version]] = {
    value: (wire.OLDEST_MEASURED, wire.NEWEST_MEASURED) for value in ("classic_queues", "quorum_queues", "streams")}
"""`apply-to` values not every measured broker takes, for user and operator policies alike: 3.10.8 takes
only queues, exchanges and all."""


@dataclass(frozen=True)
class Requirement:
    path: str
    """Config key path that needs the feature."""
    minimum: Version
    feature: str
    refused_by: Version | None = None
    """The newest measured version that refuses the feature (then `minimum` is the oldest measured version that
    takes it, and the versions between were not measured); None when `minimum` itself is known."""
    fix: str = ""
    """What the target version takes instead, when `refused_by` is set."""


def parse_version(text: str) -> Version | None:
    """(4, 3, 6) from "4.3.6" (a pre-release or build suffix is ignored); None when it is not `X.Y.Z`."""
    match = VERSION.match(text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def shown(version: Version) -> str:
    return ".".join(map(str, version))


def requirements(config: StackConfig) -> Iterator[Requirement]:
    """Every feature of the broker the stack uses, with the key path that uses it."""
    for at, vhost in with_paths("", "vhosts", config.vhosts):
        for path, queue in with_paths(at, "queues", vhost.queues):
            if queue.queue_type == "quorum":
                yield Requirement(f"{path}.type", QUORUM_MIN_VERSION, "quorum queues")
                if queue.retry is not None:
                    yield Requirement(f"{path}.retry", AT_LEAST_ONCE_MIN_VERSION,
                                      "at-least-once dead-lettering of quorum queues")
            if queue.target_group_size is not None:
                yield _target_group_size(f"{path}.quorum_group_size")
            if queue.retry is not None and (needs := strategy_of(queue.retry).MIN_BROKER_VERSION) is not None:
                yield Requirement(f"{path}.retry.strategy", *needs)
        if vhost.delay_levels is not None and vhost.delay_levels.queue_type == "quorum":
            yield Requirement(f"{at}.delay_levels.type", QUORUM_MIN_VERSION, "quorum queues")
            yield Requirement(f"{at}.delay_levels.type", AT_LEAST_ONCE_MIN_VERSION,
                              "at-least-once dead-lettering of quorum queues (between delay levels)")
        if vhost.delay_levels is not None and vhost.delay_levels.target_group_size is not None:
            yield _target_group_size(f"{at}.delay_levels.quorum_group_size")
        for kind, policies in (("policies", vhost.policies), ("operator_policies", vhost.operator_policies)):
            for path, policy in with_paths(at, kind, policies):
                for key in policy.definition:
                    row = wire.BY_KEY.get(key)
                    since = None if row is None else row.operator_since if kind == "operator_policies" else row.since
                    if since is not None and since.refused_by is None:
                        yield Requirement(f"{path}.definition.{key}", since.minimum,
                                          f"the policy key {key}")
        yield from _measured_policy_requirements(at, vhost.policies, vhost.operator_policies)


def _target_group_size(path: str) -> Requirement:
    """The plan's own `target-group-size` (a `quorum_group_size` on a 4.x `broker.version`)."""
    refused_by, accepted_by = USER_POLICY_KEY_VERSIONS[wire.TARGET_GROUP_SIZE.key]
    return Requirement(path, accepted_by, f"the policy key {wire.TARGET_GROUP_SIZE.key}", refused_by,
                       "remove quorum_group_size")


def _measured_policy_requirements(vhost_path: str, policies: Sequence[Policy],
                                  operator_policies: Sequence[Policy]) -> Iterator[Requirement]:
    for kind, kind_policies, keys in (("policies", policies, USER_POLICY_KEY_VERSIONS),
                                      ("operator_policies", operator_policies, OPERATOR_POLICY_KEY_VERSIONS)):
        what = "an operator policy" if kind == "operator_policies" else "a policy"
        for path, policy in with_paths(vhost_path, kind, kind_policies):
            if policy.apply_to in APPLY_TO_VERSIONS:
                refused_by, accepted_by = APPLY_TO_VERSIONS[policy.apply_to]
                yield Requirement(f"{path}.apply_to", accepted_by, f"apply_to: {policy.apply_to}", refused_by,
                                  f"write apply_to: queues (RabbitMQ {shown(refused_by)} takes queues, exchanges or "
                                  "all) with a pattern that matches only the queues of that type")
            for key in policy.definition:
                if key in keys:
                    refused_by, accepted_by = keys[key]
                    allowed = (f" ({what} there takes {', '.join(OPERATOR_POLICY_KEYS_ON_3_10)})"
                               if kind == "operator_policies" else "")
                    yield Requirement(f"{path}.definition.{key}", accepted_by, f"the key {key} in {what}",
                                      refused_by, f"remove it{allowed}")


def _refuses(requirement: Requirement, version: Version) -> bool:
    """`version` lacks the feature; an unmeasured version between refusal and acceptance is not refused."""
    if requirement.refused_by is None:
        return version < requirement.minimum
    return version <= requirement.refused_by


def version_problems(config: StackConfig, version: Version, source: str = "broker.version") -> list[tuple[str, str]]:
    """(key path, problem) for each feature `version` lacks; `source` says where the version came from."""
    problems = []
    for r in requirements(config):
        if not _refuses(r, version):
            continue
        if r.refused_by is None:
            problems.append((r.path, f"{r.feature}: needs RabbitMQ {shown(r.minimum)} or later, and {source} is "
                             f"{shown(version)}; upgrade the broker first, or change {r.path}"))
        else:
            problems.append((r.path, f"{r.feature}: RabbitMQ {shown(r.refused_by)} refuses it (HTTP 400, measured), "
                             f"and {source} is {shown(version)}; {r.fix}, or upgrade the broker first "
                             f"({shown(r.minimum)} takes it)"))
    return problems


def version_warnings(config: StackConfig, version: Version | None, source: str = "broker.version") -> list[str]:
    """What preview cannot vouch for: without a version, every feature the oldest measured broker lacks (the
    stack is checked for the newest broker); with one, a feature it was not measured on."""
    warnings = []
    for r in requirements(config):
        if version is None and r.minimum > wire.OLDEST_MEASURED:
            measured = (f"RabbitMQ {shown(r.refused_by)} refuses it, {shown(r.minimum)} takes it" if r.refused_by
                        else f"needs RabbitMQ {shown(r.minimum)} or later")
            warnings.append(f"{r.path}: {r.feature}: {measured}; {source} is not set, so preview checked it for the "
                            "newest broker: set broker.version to have it checked for yours")
        elif (version is not None and r.refused_by is not None and r.refused_by < version < r.minimum):
            warnings.append(f"{r.path}: {r.feature}: RabbitMQ {shown(r.refused_by)} refuses it and "
                            f"{shown(r.minimum)} takes it; {shown(version)} was not measured: try it on a broker of "
                            "that version before `pulumi up`")
    return warnings


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
