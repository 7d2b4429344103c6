"""Can the live broker run this stack (`make doctor`, tools/doctor.py)? What the management API says
(version, plugins, feature flags, the provider user's tags, existing objects) against what the stack needs,
as blocking findings, warnings and facts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from components import Vhost
from components.config import StackConfig, load_stack_config
from components.config.capabilities import (
    Version,
    end_of_support,
    parse_version,
    shown,
    version_problems,
    version_warnings,
)
from components.config.model import Limits
from components.naming import vhost_key
from components.strategies import strategy_of
from tools.lib import drift
from tools.lib.definitions import Endpoint, Snapshot, read_live
from tools.lib.mockrun import Registered, record, stack_config

NAMESPACE = "rabbitmq-retry"
ADMINISTRATOR = "administrator"
POLICYMAKER = "policymaker"


@dataclass(frozen=True)
class LiveFacts:
    """What the management API says, read once."""

    version: str
    plugins: tuple[str, ...]
    feature_flags: Mapping[str, str]
    """Name → state (`enabled`, `disabled`, …)."""
    user: str
    tags: tuple[str, ...]
    snapshots: Mapping[str, Snapshot] = field(default_factory=dict)


@dataclass
class Diagnosis:
    blocking: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        return 2 if self.blocking else 0


def needs_administrator(config: StackConfig) -> list[str]:
    """Why the provider's user needs the `administrator` tag (a `policymaker` may manage queues, exchanges,
    bindings and policies of an existing vhost, nothing else); [] when policymaker suffices."""
    reasons = []
    for i, vhost in enumerate(config.vhosts):
        path = f"vhosts[{i}]"
        if not vhost.existing:
            reasons.append(f"{path} creates vhost {vhost.name!r}")
        if vhost.applications or vhost.operators:
            reasons.append(f"{path} creates users and permissions")
        if vhost.limits != Limits():
            reasons.append(f"{path}.limits")
        if vhost.operator_policies:
            reasons.append(f"{path}.operator_policies")
    return reasons


def diagnose(config: StackConfig, records: Sequence[Registered], facts: LiveFacts) -> Diagnosis:
    found = Diagnosis()
    version = parse_version(facts.version)
    if version is None:
        found.warnings.append(f"the broker reports version {facts.version!r}, which is not X.Y.Z: versions not checked")
    else:
        found.blocking += [f"{path}: {problem}" for path, problem in version_problems(config, version, "the broker")]
        found.warnings += version_warnings(config, version, "the broker")
        if warning := end_of_support(version):
            found.warnings.append(warning)
        if config.broker_version is not None and config.broker_version != version:
            found.warnings.append(f"broker.version is {shown(config.broker_version)} but the broker runs "
                                  f"{facts.version}: preview checks the wrong version; update broker.version")
    found.blocking += _absent_existing_vhosts(config, facts)
    found.blocking += _feature_flag_problems(config, facts, version)
    found.blocking += _tag_problems(config, facts)
    for finding in drift.findings(records, dict(facts.snapshots)):
        if finding.kind == "immutable" and finding.type in ("Queue", "Exchange"):
            found.blocking.append(f"{finding.type.lower()} {finding.name!r} in vhost {finding.vhost!r} already exists "
                                  f"with other settings ({finding.detail}): `pulumi up` fails with 400 "
                                  "\"inequivalent arg\"; drain and delete it, or declare it as it is")
    return found


def _absent_existing_vhosts(config: StackConfig, facts: LiveFacts) -> list[str]:
    """An `existing: true` vhost is referenced, never created: if the broker lacks it, `pulumi up` fails."""
    return [f"vhosts[{i}].existing: vhost {vhost.name!r} is not on the broker, and an existing vhost is referenced, "
            "never created: `pulumi up` fails with 404 vhost_not_found; create it first (`rabbitmqctl add_vhost "
            f"{vhost.name}`), or set vhosts[{i}].existing: false so that the stack creates it (and deletes it with "
            "the stack)"
            for i, vhost in enumerate(config.vhosts)
            if vhost.existing and (snapshot := facts.snapshots.get(vhost.name)) is not None and not snapshot.exists]


def _feature_flag_problems(config: StackConfig, facts: LiveFacts, version: Version | None) -> list[str]:
    problems = []
    quorum = any(q.queue_type == "quorum" for v in config.vhosts for q in v.queues)
    needed = {needs for v in config.vhosts for q in v.queues
              if q.retry is not None and (needs := strategy_of(q.retry).FEATURE_FLAG) is not None}
    wanted = [("quorum_queue", "quorum queues")] if quorum else []
    wanted += [(needs.name, needs.needed_for) for needs in sorted(needed, key=lambda n: n.name)
               if version is not None and version >= needs.since]
    for flag, what in wanted:
        state = facts.feature_flags.get(flag)
        if state is not None and state != "enabled":
            problems.append(f"feature flag {flag} is {state}, and the stack uses {what}: "
                            f"`rabbitmqctl enable_feature_flag {flag}`")
    return problems


def _tag_problems(config: StackConfig, facts: LiveFacts) -> list[str]:
    tags = set(facts.tags)
    if ADMINISTRATOR in tags:
        return []
    if reasons := needs_administrator(config):
        return [f"user {facts.user!r} (tags: {', '.join(sorted(tags)) or 'none'}) is not an administrator, which "
                f"the stack needs: {'; '.join(reasons)}"]
    if POLICYMAKER not in tags:
        return [f"user {facts.user!r} (tags: {', '.join(sorted(tags)) or 'none'}) may not manage policies; give it "
                "the policymaker tag (or administrator)"]
    return []


def read_facts(endpoint: Endpoint, vhosts: Sequence[str]) -> LiveFacts:
    """GET only: overview, nodes, feature flags, whoami, and a snapshot of each vhost."""
    overview = endpoint.get("overview") or {}
    nodes = endpoint.get("nodes") or []
    plugins = sorted({p for node in nodes for p in node.get("enabled_plugins") or []})
    flags = {f["name"]: str(f.get("state")) for f in endpoint.get("feature-flags") or []}
    me = endpoint.get("whoami") or {}
    tags = me.get("tags") or []
    tags = tags.split(",") if isinstance(tags, str) else tags
    return LiveFacts(str(overview.get("rabbitmq_version", "")), tuple(plugins), flags, str(me.get("name", "")),
                     tuple(t for t in tags if t), {v: read_live(endpoint, v) for v in vhosts})


def render(stack: str, endpoint: str, facts: LiveFacts, found: Diagnosis) -> str:
    lines = [f"# Doctor: stack `{stack}` against {endpoint}", "",
             f"- RabbitMQ {facts.version or '(unknown)'}",
             f"- plugins: {', '.join(facts.plugins) or '(none reported)'}",
             f"- feature flags enabled: {sum(s == 'enabled' for s in facts.feature_flags.values())} of "
             f"{len(facts.feature_flags)}" + "".join(f"; {n} {s}" for n, s in sorted(facts.feature_flags.items())
                                                   if s != "enabled"),
             f"- user `{facts.user}`, tags: {', '.join(facts.tags) or 'none'}", ""]
    for title, items in (("Blocking", found.blocking), ("Warnings", found.warnings)):
        if items:
            lines += [f"## {title}", "", *(f"- {item}" for item in items), ""]
    lines.append("**Blocking findings**: `pulumi up` would fail or misbehave." if found.blocking
                 else "**Nothing blocking**: the broker can run this stack.")
    return "\n".join(lines)


def stack_settings(stack: str, root: Path) -> tuple[StackConfig, dict[str, Any]]:
    """The stack's parsed config and its raw keys. `broker.version` is parsed but not checked here (the live
    version is): a stack refused for its written version can still be examined."""
    raw, _ = stack_config(stack, root)
    ours = {key.partition(":")[2]: stack_file_value(value) for key, value in raw.items()
            if key.partition(":")[0] == NAMESPACE}
    broker = ours.pop("broker", None)
    written = broker.get("version") if isinstance(broker, Mapping) else None
    config = load_stack_config(ours)
    return replace(config, broker_version=parse_version(written) if isinstance(written, str) else None), raw


def stack_file_value(value: Any) -> Any:
    """The engine hands structured values to the program as JSON strings."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def planned_objects(config: StackConfig) -> list[Registered]:
    """The queues, exchanges, bindings and policies the stack declares, recorded from its Vhost components
    under mocks (passwords do not matter here: users are not compared)."""
    def program() -> None:
        for index, vhost in enumerate(config.vhosts):
            Vhost(vhost_key(vhost.name), {"vhost": vhost, "config_path": f"vhosts[{index}]",
                                           "passwords": {user: "unused" for user, _ in vhost.user_paths()}})
    return record(program)
