"""The `alerts` blocks of the stack config: thresholds, `for:` durations, severities and labels of the Prometheus
rules `components/plan/alert_rules.py` derives from the plan, per stack (`alerts`), vhost (`vhosts[].alerts`) and queue
(`vhosts[].queues[].alerts`). A queue's setting overrides its vhost's, which overrides the stack's, which overrides
the rule's default; labels add up the same way. Every mistake is a key-path problem like the rest of the config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .fields import ABSENT, INVALID, Invalid, Problems, boolean, child, choice, describe, duration, integer, mapping
from .key_paths import with_paths

Scope = Literal["queue", "vhost", "stack"]
"""Where a rule is generated: once per retryable queue, once per vhost, or once per stack (broker-wide metrics)."""


@dataclass(frozen=True)
class RuleKind:
    """One kind of rule and its defaults."""

    name: str
    scope: Scope
    alert: str
    """The Prometheus alert name (`alert:`)."""
    for_ms: int
    severity: str
    threshold: int | None = None
    """None: the rule takes no `threshold`."""
    window_ms: int | None = None
    """None: the rule takes no `window` (`not_draining`'s default is derived from its delays: `DERIVED`)."""


DERIVED = -1
"""`not_draining`'s window when not configured: the longest delay of the queues it watches, plus `DRAIN_MARGIN_MS`."""
DRAIN_MARGIN_MS = 300_000

RULE_KINDS: Mapping[str, RuleKind] = {kind.name: kind for kind in (
    RuleKind("parked", "queue", "RabbitmqRetryMessagesParked", 60_000, "warning", threshold=0),
    RuleKind("error_growing", "queue", "RabbitmqRetryErrorQueueGrowing", 0, "critical", threshold=10,
             window_ms=900_000),
    RuleKind("no_consumer", "queue", "RabbitmqRetryNoConsumer", 300_000, "critical", threshold=0),
    RuleKind("not_draining", "queue", "RabbitmqRetryWaitNotDraining", 60_000, "critical", window_ms=DERIVED),
    RuleKind("no_leader", "queue", "RabbitmqRetryQueueWithoutLeader", 60_000, "critical"),
    RuleKind("members_offline", "queue", "RabbitmqRetryQuorumMembersOffline", 60_000, "warning",
             window_ms=3_600_000),
    RuleKind("dead_letters_jammed", "queue", "RabbitmqRetryDeadLettersJammed", 60_000, "critical", threshold=0),
    RuleKind("undeliverable", "vhost", "RabbitmqRetryDelayUndeliverable", 60_000, "warning", threshold=0),
    RuleKind("dead_lettered_to_nowhere", "stack", "RabbitmqRetryDeadLetteredToNowhere", 0, "warning", threshold=0,
             window_ms=300_000),
    RuleKind("delivery_limit", "stack", "RabbitmqRetryDeliveryLimitReached", 0, "critical", threshold=0,
             window_ms=300_000),
)}
"""Every rule kind, in the order of docs/alerts.md."""
SCOPES: Mapping[str, tuple[Scope, ...]] = {"stack": ("queue", "vhost", "stack"), "vhost": ("queue", "vhost"),
                                           "queue": ("queue",)}
"""The rule kinds each level of the config may set: a level sets those generated at it or below."""
SEVERITIES = ("critical", "warning", "info")
METRICS = ("detailed", "per_object")
"""Which of rabbitmq_prometheus's per-queue endpoints Prometheus scrapes: `/metrics/detailed` (metric prefix
`rabbitmq_detailed_queue_`, filterable by vhost; 3.10 and later) or `/metrics/per-object` (`rabbitmq_queue_`)."""
RULE_KEYS = ("enabled", "for", "severity", "threshold", "window", "labels")
LEVEL_KEYS = ("labels", *(k for k in RULE_KINDS))
STACK_ALERTS_KEYS = ("metrics", "selector", *LEVEL_KEYS)
VHOST_ALERTS_KEYS = ("labels", *(k for k, v in RULE_KINDS.items() if v.scope in SCOPES["vhost"]))
QUEUE_ALERTS_KEYS = ("labels", *(k for k, v in RULE_KINDS.items() if v.scope in SCOPES["queue"]))
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED_LABELS = ("alertname", "severity", "stack", "vhost", "queue", "strategy", "rabbitmq_retry_rule",
                   "watched_queue", "reason")
"""Labels every rule sets itself: extra labels may not replace them (`severity` has a key of its own)."""


@dataclass(frozen=True)
class RuleSettings:
    """One rule's settings at one level of the config; None: not set there (the level above decides)."""

    enabled: bool | None = None
    for_ms: int | None = None
    severity: str | None = None
    threshold: int | None = None
    window_ms: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Level:
    """The settings of one `alerts` block (stack, vhost or queue)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    rules: Mapping[str, RuleSettings] = field(default_factory=dict)


@dataclass(frozen=True)
class Resolved:
    """A rule's settings once every level is applied."""

    enabled: bool
    for_ms: int
    severity: str
    threshold: int | None
    window_ms: int | None
    labels: Mapping[str, str]


@dataclass(frozen=True)
class AlertsConfig:
    """Every `alerts` block of a stack config."""

    metrics: str = "detailed"
    selector: Mapping[str, str] = field(default_factory=dict)
    """Label matchers added to every metric selector (e.g. the `cluster` or `job` label of the stack's broker)."""
    stack: Level = Level()
    vhosts: Mapping[str, Level] = field(default_factory=dict)
    """By vhost name."""
    queues: Mapping[tuple[str, str], Level] = field(default_factory=dict)
    """By (vhost, queue)."""

    def resolve(self, kind: str, vhost: str | None = None, queue: str | None = None) -> Resolved:
        """`kind`'s settings for a queue (`vhost` and `queue`), a vhost (`vhost`) or the stack."""
        default = RULE_KINDS[kind]
        levels = [self.stack]
        if vhost is not None:
            levels.append(self.vhosts.get(vhost, Level()))
            if queue is not None:
                levels.append(self.queues.get((vhost, queue), Level()))
        resolved = Resolved(True, default.for_ms, default.severity, default.threshold, default.window_ms, {})
        labels: dict[str, str] = {}
        for level in levels:
            labels.update(level.labels)
            rule = level.rules.get(kind)
            if rule is None:
                continue
            labels.update(rule.labels)
            resolved = _overridden(resolved, rule)
        return replace(resolved, labels=labels)


def _overridden(resolved: Resolved, rule: RuleSettings) -> Resolved:
    """`resolved` with what `rule` sets (its labels aside)."""
    return Resolved(rule.enabled if rule.enabled is not None else resolved.enabled,
                    rule.for_ms if rule.for_ms is not None else resolved.for_ms,
                    rule.severity or resolved.severity,
                    rule.threshold if rule.threshold is not None else resolved.threshold,
                    rule.window_ms or resolved.window_ms, {})


def _labels(p: Problems, path: str, raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        p.add(path, f"expected a mapping of label name to string, got {describe(raw)}")
        return {}
    labels = {}
    for name, value in raw.items():
        key = child(path, name)
        if not isinstance(name, str) or not LABEL_NAME.match(name) or name.startswith("__"):
            p.add(key, f"{name!r} is not a Prometheus label name (letters, digits and _, not starting with a digit "
                  "or __)")
        elif name in RESERVED_LABELS:
            p.add(key, f"every rule sets the label {name!r} itself"
                  + ("; use the rule's `severity` key" if name == "severity" else "; choose another name"))
        elif not isinstance(value, str):
            p.add(key, f"expected a string, got {describe(value)}; quote it")
        else:
            labels[name] = value
    return labels


def _rule_keys(kind: RuleKind) -> tuple[str, ...]:
    """The keys a rule of `kind` takes: `threshold` and `window` only where the kind has one."""
    return tuple(k for k in RULE_KEYS if (k != "threshold" or kind.threshold is not None)
                 and (k != "window" or kind.window_ms is not None))


def _rule(p: Problems, path: str, kind: RuleKind, raw: object) -> RuleSettings | Invalid:
    allowed = _rule_keys(kind)
    data = mapping(p, path, raw, allowed)
    if data is INVALID:
        return INVALID

    def get(key: str, parse: Any) -> Any:
        if key not in data or key not in allowed:
            return None
        value = parse(child(path, key), data[key])
        return None if value is INVALID else value

    window = get("window", lambda k, v: duration(p, k, v))
    if window == 0:
        p.add(child(path, "window"), "must be longer than 0s")
    return RuleSettings(
        enabled=get("enabled", lambda k, v: boolean(p, k, v)),
        for_ms=get("for", lambda k, v: 0 if v in ("0", "0s") else duration(p, k, v)),
        severity=get("severity", lambda k, v: choice(p, k, v, SEVERITIES)),
        threshold=get("threshold", lambda k, v: integer(p, k, v, 0)),
        window_ms=window or None,
        labels=_labels(p, child(path, "labels"), data["labels"]) if "labels" in data else {})


def _level(p: Problems, path: str, data: Mapping[str, Any], scopes: tuple[Scope, ...]) -> Level:
    rules = {}
    for name, kind in RULE_KINDS.items():
        if name in data and kind.scope in scopes:
            rule = _rule(p, child(path, name), kind, data[name])
            if rule is not INVALID:
                rules[name] = rule
    return Level(_labels(p, child(path, "labels"), data["labels"]) if "labels" in data else {}, rules)


def _block(p: Problems, path: str, raw: object, allowed: tuple[str, ...]) -> Mapping[str, Any] | Invalid:
    """The mapping of an `alerts` block; a rule set at a level below where it is generated says where it goes."""
    misplaced = [k for k in raw if k in RULE_KINDS and k not in allowed] if isinstance(raw, Mapping) else []
    for key in misplaced:
        scope = RULE_KINDS[key].scope
        p.add(child(path, key), f"a {scope} rule: set it in the "
              + ("stack's `alerts`" if scope == "stack" else "vhost's `alerts` or the stack's")
              + f" (rules here: {', '.join(k for k in allowed if k in RULE_KINDS)})")
    return mapping(p, path, raw, (*allowed, *misplaced))


def parse_alerts(p: Problems, top: Mapping[str, Any]) -> AlertsConfig:
    """Every `alerts` block of the raw `rabbitmq-retry:` namespace: the stack's, and each vhost's and queue's
    (read from the raw `vhosts` list; the topology parser only accepts the key)."""
    config = AlertsConfig()
    raw = top.get("alerts", ABSENT)
    if raw is not ABSENT and raw is not None:
        data = _block(p, "alerts", raw, STACK_ALERTS_KEYS)
        if data is not INVALID:
            metrics = choice(p, "alerts.metrics", data["metrics"], METRICS) if "metrics" in data else "detailed"
            selector = _selector(p, data["selector"]) if "selector" in data else {}
            config = AlertsConfig(metrics="detailed" if metrics is INVALID else metrics, selector=selector,
                                  stack=_level(p, "alerts", data, SCOPES["stack"]))
    vhosts: dict[str, Level] = {}
    queues: dict[tuple[str, str], Level] = {}
    raw_vhosts = top.get("vhosts")
    for at, vhost in with_paths("", "vhosts", raw_vhosts if isinstance(raw_vhosts, list) else []):
        if not isinstance(vhost, Mapping):
            continue
        level, queue_levels = vhost_alerts(p, at, vhost)
        if isinstance(name := vhost.get("name"), str):
            vhosts.update({name: level} if level is not None else {})
            queues.update({(name, queue): level for queue, level in queue_levels.items()})
    return replace(config, vhosts=vhosts, queues=queues)


def vhost_alerts(p: Problems, path: str, vhost: Mapping[str, Any]) -> tuple[Level | None, dict[str, Level]]:
    """The `alerts` of one raw vhost entry at `path`, and of each of its queues by name (a Vhost component checks
    them through this too)."""
    level = None
    if vhost.get("alerts") is not None:
        data = _block(p, f"{path}.alerts", vhost["alerts"], VHOST_ALERTS_KEYS)
        if data is not INVALID:
            level = _level(p, f"{path}.alerts", data, SCOPES["vhost"])
    queues: dict[str, Level] = {}
    raw_queues = vhost.get("queues")
    for at, queue in with_paths(path, "queues", raw_queues if isinstance(raw_queues, list) else []):
        queue_level = queue_alerts(p, at, queue) if isinstance(queue, Mapping) else None
        if queue_level is not None and isinstance(queue.get("name"), str):
            queues[queue["name"]] = queue_level
    return level, queues


def queue_alerts(p: Problems, path: str, queue: Mapping[str, Any]) -> Level | None:
    """The `alerts` of one raw queue entry at `path`, None when it has none (a RetryableQueue checks them too)."""
    if queue.get("alerts") is None:
        return None
    if queue.get("retry") is None:
        p.add(f"{path}.alerts", "alerts are derived for retryable queues only: this queue has no `retry` block; "
              "remove the key")
        return None
    data = _block(p, f"{path}.alerts", queue["alerts"], QUEUE_ALERTS_KEYS)
    return None if data is INVALID else _level(p, f"{path}.alerts", data, SCOPES["queue"])


def _selector(p: Problems, raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        p.add("alerts.selector", f"expected a mapping of label name to value, got {describe(raw)}")
        return {}
    selector = {}
    for name, value in raw.items():
        key = child("alerts.selector", name)
        if not isinstance(name, str) or not LABEL_NAME.match(name) or name in ("vhost", "queue"):
            p.add(key, f"{name!r} cannot select the broker: use a Prometheus label name (letters, digits and _) "
                  "other than vhost and queue, which each rule sets")
        elif not isinstance(value, str):
            p.add(key, f"expected a string, got {describe(value)}; quote it")
        else:
            selector[name] = value
    return selector
