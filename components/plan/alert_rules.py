"""Prometheus alerting rules for a stack, derived from its plan: every retryable queue, wait tier, delay level and
undeliverable queue the plan declares gets its rules, so a new queue can never ship without them.

Pure and Pulumi-free. The metrics are those of RabbitMQ's `rabbitmq_prometheus` plugin (3.10 and 4.x):
- per queue, from `/metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count`
  (`rabbitmq_detailed_queue_messages`, `…_messages_ready`, `…_consumers`, labels `vhost` and `queue`), or the
  same from `/metrics/per-object` (`rabbitmq_queue_…`) with `alerts.metrics: per_object`. A node reports the
  queues it leads: a quorum queue without a leader has no series at all (`no_leader`);
- broker-wide, from `/metrics`: `rabbitmq_global_messages_dead_lettered_<reason>_total{queue_type,
  dead_letter_strategy}` (`disabled`: the message was dropped, it had no dead-letter target).

docs/alerts.md says what each rule means and what to run; `make alerts` writes them, the program exports them
(`alert_rules`), and the review lists the rules a change adds, removes or changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import naming
from ..model.alerts import DERIVED, DRAIN_MARGIN_MS, RULE_KINDS, AlertsConfig, Resolved
from ..model.durations import format_duration
from ..model.plan_types import RetryablePlan, VhostPlan
from ..strategies import levels as levels_strategy
from ..strategies import strategy_of

FORMATS = ("prometheus", "prometheus-rule")
"""`make alerts FORMAT=…`: a Prometheus rule file, or a Kubernetes `PrometheusRule` manifest (prometheus-operator)."""
PREFIXES = {"detailed": "rabbitmq_detailed_queue_", "per_object": "rabbitmq_queue_"}
RAFT_PREFIXES = {"detailed": "rabbitmq_detailed_raft_", "per_object": "rabbitmq_raft_"}
"""Each quorum queue member's Raft metrics (family `ra_metrics` of the detailed endpoint), one series per member:
a node that is down reports none."""
DROPPED_REASONS = ("expired", "maxlen", "rejected", "delivery_limit")
"""The reasons RabbitMQ counts a message dead-lettered for (`confirmed` counts at-least-once deliveries to the
target, not drops)."""
DROP_CAUSES = {"expired": "their TTL expired", "maxlen": "the queue was over its length limit",
               "rejected": "a consumer rejected them without requeue",
               "delivery_limit": "they were delivered more times than the delivery limit"}
QUORUM_QUEUE_TYPE = "rabbit_quorum_queue"
"""The `queue_type` label of quorum queues in the global counters."""


KEY_LABELS = ("vhost", "queue", "watched_queue", "reason")
"""The labels that tell two rules of one kind apart."""


@dataclass(frozen=True)
class Rule:
    """One alerting rule, as a Prometheus rule file has it."""

    kind: str
    """The key of `RULE_KINDS` (`parked`, …): the `rabbitmq_retry_rule` label."""
    alert: str
    expr: str
    for_ms: int
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    @property
    def key(self) -> str:
        """What tells two rules of a stack apart (the review pairs them by it): kind and where it watches."""
        where = "/".join(self.labels.get(k, "") for k in KEY_LABELS)
        return f"{self.kind} {where.rstrip('/')}".rstrip()

    def as_dict(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.alert, "expr": self.expr}
        if self.for_ms:
            rule["for"] = format_duration(self.for_ms)
        rule["labels"] = dict(self.labels)
        rule["annotations"] = dict(self.annotations)
        return rule


@dataclass(frozen=True)
class Group:
    name: str
    rules: tuple[Rule, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rules": [r.as_dict() for r in self.rules]}


def string(value: str) -> str:
    """A PromQL string literal (double-quoted, Go escapes): queue and vhost names may hold quotes and backslashes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class _Selectors:
    """Metric selectors of one stack: its `alerts.selector` matchers on every one."""

    def __init__(self, config: AlertsConfig) -> None:
        self.prefix = PREFIXES[config.metrics]
        self.raft_prefix = RAFT_PREFIXES[config.metrics]
        self.common = [f"{k}={string(v)}" for k, v in sorted(config.selector.items())]

    def matchers(self, *extra: str) -> str:
        return "{" + ", ".join([*extra, *self.common]) + "}"

    def queue(self, metric: str, vhost: str, queue: str) -> str:
        return f"{self.prefix}{metric}" + self.matchers(f"vhost={string(vhost)}", f"queue={string(queue)}")

    def members(self, vhost: str, queue: str) -> str:
        """One series per member of a quorum queue: its Raft term, `…_raft_term_total` on 3.10, `…_raft_term`
        on 4.x (measured on 3.10.8 and 4.3.6)."""
        return self.matchers(f'__name__=~"{self.raft_prefix}term(_total)?"', f"vhost={string(vhost)}",
                             f"queue={string(queue)}")


def _draining_expr(s: _Selectors, vhost: str, queue: str, window_ms: int) -> str:
    """A queue that held messages all through `window` and whose count never went down in it: nothing left it
    (a wait tier or delay level whose TTL no longer expires messages, or whose dead-letter target is gone)."""
    selector, window = s.queue("messages", vhost, queue), format_duration(window_ms)
    return (f"min_over_time({selector}[{window}]) > 0 and on(vhost, queue) "
            f"min_over_time(idelta({selector}[5m])[{window}:]) >= 0")


def _labels(stack: str, kind: str, settings: Resolved, **where: str) -> dict[str, str]:
    return {**settings.labels, "severity": settings.severity, "stack": stack, **where, "rabbitmq_retry_rule": kind}


def contracts_file(stack: str) -> str:
    """The contract file `make contracts STACK=<stack>` writes by default: what `--contract` reads without the CLI."""
    return f"contracts.{stack}.json"


def _rule(kind: str, settings: Resolved, expr: str, labels: dict[str, str], summary: str, description: str,
          command: str, command_without_cli: str | None = None) -> Rule:
    """`command_without_cli`: the same with `--contract` for `--stack`, after `make contracts` (annotation
    `command_contract`), for users of the stack without the Pulumi CLI."""
    annotations = {"summary": summary, "description": description, "command": command}
    if command_without_cli is not None:
        annotations["command_contract"] = f"make contracts STACK={labels['stack']}; {command_without_cli}"
    return Rule(kind, RULE_KINDS[kind].alert, expr, settings.for_ms, labels, annotations)


def _consumers(plan: VhostPlan, queue: str) -> list[str]:
    return [a.user for a in plan.config.applications if queue in a.consumes]


def _queue_rules(stack: str, config: AlertsConfig, s: _Selectors, plan: VhostPlan,
                 retryable: RetryablePlan[Any]) -> list[Rule]:
    vhost, queue, strategy = plan.config.name, retryable.config.name, retryable.strategy
    error = retryable.error_queue
    where = f"{queue} in vhost {vhost}"
    parked = f"rabbitmq-retry parked list --stack {stack} --vhost {vhost} --queue {queue}"
    redrive = f"rabbitmq-retry parked redrive --stack {stack} --vhost {vhost} --queue {queue}"
    rules = []

    def without_cli(command: str) -> str:
        """`command` for those without the Pulumi CLI: the contract file `make contracts` writes instead."""
        return command.replace(f"--stack {stack} ", f"--contract {contracts_file(stack)} ")

    def settings(kind: str) -> Resolved | None:
        resolved = config.resolve(kind, vhost, queue)
        return resolved if resolved.enabled else None

    def labels(kind: str, resolved: Resolved, **extra: str) -> dict[str, str]:
        return _labels(stack, kind, resolved, vhost=vhost, queue=queue, strategy=strategy, **extra)

    if r := settings("parked"):
        rules.append(_rule("parked", r, f"{s.queue('messages', vhost, error)} > {r.threshold}", labels("parked", r),
                           f"Messages parked in {error} (vhost {vhost})",
                           f"{{{{ $value }}}} messages of {where} failed {retryable.retry.max_retries} retries (or "
                           f"were rejected for good) and wait in {error}.",
                           f"{parked}; fix the cause, then {redrive}",
                           f"{without_cli(parked)}; fix the cause, then {without_cli(redrive)}"))
    if (r := settings("error_growing")) and r.window_ms:
        span = format_duration(r.window_ms)
        rules.append(_rule("error_growing", r, f"delta({s.queue('messages', vhost, error)}[{span}]) > {r.threshold}",
                           labels("error_growing", r),
                           f"{error} is growing (vhost {vhost})",
                           f"{{{{ $value }}}} more messages of {where} parked in the last {span}: retries are "
                           "failing now.",
                           f"{parked} --newer-than {span}", f"{without_cli(parked)} --newer-than {span}"))
    if r := settings("no_consumer"):
        users = _consumers(plan, queue)
        who = f" (applications that consume it: {', '.join(users)})" if users else ""
        rules.append(_rule("no_consumer", r, f"{s.queue('messages_ready', vhost, queue)} > {r.threshold} and "
                           f"on(vhost, queue) {s.queue('consumers', vhost, queue)} == 0", labels("no_consumer", r),
                           f"{queue} has messages and no consumer (vhost {vhost})",
                           f"{{{{ $value }}}} messages wait in {where} and nothing consumes it: they are neither "
                           "processed nor retried.",
                           f"start its consumer{who}; check with rabbitmq-diagnostics list_consumers -p {vhost}"))
    tiers = (*retryable.tiers, *retryable.draining)
    if tiers and (r := settings("not_draining")):
        for tier in tiers:
            window = r.window_ms if r.window_ms not in (None, DERIVED) else tier.delay_ms + DRAIN_MARGIN_MS
            stuck = (f"rabbitmq-retry stuck redrive --stack {stack} --vhost {vhost} --queue {queue} "
                     f"--tier {tier.queue}")
            then = ("make drift STACK={stack} (a policy that overrides the tier's message-ttl or dead-letter "
                    "exchange: remove it); then, for what entered meanwhile and keeps no TTL, {command}")
            rules.append(_rule("not_draining", r, _draining_expr(s, vhost, tier.queue, window),
                               labels("not_draining", r, watched_queue=tier.queue),
                               f"Wait tier {tier.queue} is not draining (vhost {vhost})",
                               f"{tier.queue} held messages for {format_duration(window)} and none left it, though "
                               f"each waits {format_duration(tier.delay_ms)}: retries of {where} are stuck.",
                               then.format(stack=stack, command=stuck),
                               then.format(stack=stack, command=without_cli(stuck))))
    if retryable.config.queue_type == "quorum" and (r := settings("no_leader")):
        rules.append(_rule("no_leader", r, f"absent({s.queue('messages', vhost, queue)})", labels("no_leader", r),
                           f"Quorum queue {queue} has no leader (vhost {vhost})",
                           f"No node reports {where}: it has no leader (too many members offline, or the 3.10 "
                           "stall of docs/clusters.md), or the broker is not scraped, or the queue is gone.",
                           f"rabbitmq-queues quorum_status --vhost {vhost} {queue}; make doctor STACK={stack}"))
    if retryable.config.queue_type == "quorum" and (r := settings("members_offline")) and r.window_ms:
        members = s.members(vhost, queue)
        size = retryable.config.quorum_group_size
        counted = f"count by (vhost, queue) ({members})"
        span = format_duration(r.window_ms)
        expected = (str(size) if size is not None else
                    f"on(vhost, queue) max_over_time(({counted})[{span}:])")
        rules.append(_rule("members_offline", r, f"{counted} < {expected}", labels("members_offline", r),
                           f"Quorum queue {queue} has members offline (vhost {vhost})",
                           f"{{{{ $value }}}} members of {where} report, fewer than "
                           + (f"its quorum_group_size {size}" if size is not None else f"in the last {span}")
                           + ": a node is down or cut off. On 3.10, a failed leader stalls dead-lettering retries "
                           "for about 3 minutes (docs/clusters.md).",
                           f"rabbitmq-queues quorum_status --vhost {vhost} {queue}; bring the node back "
                           f"(make doctor STACK={stack})"))
    if retryable.config.queue_type == "quorum" and (r := settings("dead_letters_jammed")):
        for watched in (queue, *(tier.queue for tier in tiers)):
            held = " - on(vhost, queue) ".join(s.queue(metric, vhost, watched)
                                                for metric in ("messages", "messages_ready", "messages_unacked"))
            rules.append(_rule("dead_letters_jammed", r, f"{held} > {r.threshold}",
                               labels("dead_letters_jammed", r, watched_queue=watched),
                               f"Dead-letters jammed in {watched} (vhost {vhost})",
                               f"{{{{ $value }}}} messages of {watched} are dead-letters RabbitMQ cannot forward: "
                               "past the delivery limit, a message meets the dead-letter cycle of "
                               f"{where}'s retry path and stays, neither delivered nor dropped, until someone "
                               "releases it; each holds one of the queue's 32 dead-letter slots.",
                               f"docs/strategies.md (Delivery limit): bind a temporary queue to the dead-letter "
                               f"exchange of {watched} until they moved into it (RabbitMQ retries every 180 s), then "
                               "unbind it; on 4.x a purge of the queue deletes them; make doctor STACK="
                               f"{stack}"))
    return rules


def _vhost_rules(stack: str, config: AlertsConfig, s: _Selectors, plan: VhostPlan) -> list[Rule]:
    levels = plan.delay_levels
    if levels is None:
        return []
    vhost = plan.config.name
    rules = []
    draining = config.resolve("not_draining", vhost)
    if draining.enabled:
        for level, queue in enumerate(levels.level_queues):
            delay = levels.config.unit_ms * 2**level
            window = draining.window_ms if draining.window_ms not in (None, DERIVED) else delay + DRAIN_MARGIN_MS
            rules.append(_rule("not_draining", draining, _draining_expr(s, vhost, queue.name, window),
                               _labels(stack, "not_draining", draining, vhost=vhost, strategy=levels_strategy.NAME,
                                       watched_queue=queue.name),
                               f"Delay level {queue.name} is not draining (vhost {vhost})",
                               f"{queue.name} held messages for {format_duration(window)} and none left it, though "
                               f"each waits {format_duration(delay)}: delayed retries of vhost {vhost} are stuck.",
                               f"make doctor STACK={stack}; make drift STACK={stack}"))
    undeliverable = config.resolve("undeliverable", vhost)
    if undeliverable.enabled:
        rules.append(_rule("undeliverable", undeliverable,
                           f"{s.queue('messages', vhost, naming.UNDELIVERABLE)} > {undeliverable.threshold}",
                           _labels(stack, "undeliverable", undeliverable, vhost=vhost, strategy=levels_strategy.NAME,
                                   watched_queue=naming.UNDELIVERABLE),
                           f"Delayed retries undeliverable in vhost {vhost}",
                           f"{{{{ $value }}}} delayed copies found no queue when their delay was over (their queue "
                           f"was removed or unbound) and wait in {naming.UNDELIVERABLE}.",
                           f"read them in the management UI (queue {naming.UNDELIVERABLE}, vhost {vhost}, Get "
                           "messages) and republish them by hand (docs/alerts.md)"))
    return rules


def _stack_rules(stack: str, config: AlertsConfig, s: _Selectors, plans: Sequence[VhostPlan]) -> list[Rule]:
    rules = []
    extra = "".join(f", {matcher}" for matcher in s.common)
    dropped = config.resolve("dead_lettered_to_nowhere")
    if dropped.enabled and dropped.window_ms:
        window = format_duration(dropped.window_ms)
        # One rule per reason: `increase` drops the metric name, so one selector over the four counters would
        # give series that differ by name only, which Prometheus refuses ("same labelset").
        for reason in DROPPED_REASONS:
            rules.append(_rule(
                "dead_lettered_to_nowhere", dropped,
                f"sum by (instance, queue_type) (increase(rabbitmq_global_messages_dead_lettered_{reason}_total"
                f'{{dead_letter_strategy="disabled"{extra}}}[{window}])) > {dropped.threshold}',
                _labels(stack, "dead_lettered_to_nowhere", dropped, reason=reason),
                f"Messages dropped ({reason}): dead-lettered to no target",
                f"{{{{ $value }}}} messages of {{{{ $labels.queue_type }}}} queues on {{{{ $labels.instance }}}} were "
                f"dropped in the last {window} ({DROP_CAUSES[reason]}, and the queue has no dead-letter target); a "
                "broker-wide counter: any queue of the broker.",
                f"make drift STACK={stack} (a policy that removed a dead-letter exchange); make doctor STACK={stack}"))
    quorum = [r for plan in plans for r in plan.retryables if r.config.queue_type == "quorum"]
    limit = config.resolve("delivery_limit")
    # A `native` queue parks past its delivery limit by design: the broker-wide counter cannot tell its parking
    # from another queue's backstop firing, so the rule is only derived for stacks without one.
    if quorum and limit.enabled and limit.window_ms and not any(
            strategy_of(r.retry).DELIVERY_LIMIT_IS_MAX_RETRIES for plan in plans for r in plan.retryables):
        rules.append(_rule(
            "delivery_limit", limit,
            f"sum by (instance, dead_letter_strategy) (increase(rabbitmq_global_messages_dead_lettered_delivery_limit"
            f'_total{{queue_type="{QUORUM_QUEUE_TYPE}"{extra}}}[{format_duration(limit.window_ms)}])) '
            f"> {limit.threshold}",
            _labels(stack, "delivery_limit", limit),
            "Quorum queue messages hit their delivery limit",
            f"{{{{ $value }}}} messages of quorum queues on {{{{ $labels.instance }}}} were returned to their queue "
            f"more times than its delivery limit in the last {format_duration(limit.window_ms)} (dead_letter_strategy "
            "{{ $labels.dead_letter_strategy }}; disabled: dropped): a consumer requeues instead of retrying, or "
            "crashes while holding them.",
            f"make doctor STACK={stack}; docs/strategies.md (Delivery limit); a message of the stack's retry paths "
            "stays jammed after this resolves: dead_letters_jammed names its queue until it is released"))
    return rules


def stack_rules(stack: str, config: AlertsConfig | None, plans: Iterable[VhostPlan]) -> tuple[Group, ...]:
    """Every rule of a stack: one group per vhost (its queues', then its delay levels'), then the broker-wide ones.
    `config`: the stack config's `alerts` (None: every rule with its defaults)."""
    plans = list(plans)
    config = config or AlertsConfig()
    s = _Selectors(config)
    groups = []
    for plan in plans:
        rules = [rule for r in plan.retryables for rule in _queue_rules(stack, config, s, plan, r)]
        rules += _vhost_rules(stack, config, s, plan)
        if rules:
            groups.append(Group(f"rabbitmq-retry/{stack}/{plan.config.name}", tuple(rules)))
    if broker := _stack_rules(stack, config, s, plans):
        groups.append(Group(f"rabbitmq-retry/{stack}", tuple(broker)))
    return tuple(groups)


def rule_file(groups: Iterable[Group]) -> dict[str, Any]:
    """A Prometheus rule file (`rule_files:`), as data: also the stack output `alert_rules`."""
    return {"groups": [g.as_dict() for g in groups]}


def manifest_name(stack: str) -> str:
    """A Kubernetes object name (DNS-1123 subdomain) for the stack's PrometheusRule."""
    name = re.sub(r"[^a-z0-9.-]+", "-", f"rabbitmq-retry-{stack}".lower()).strip("-.")
    return name[:253]


def prometheus_rule(stack: str, rules: Mapping[str, Any]) -> dict[str, Any]:
    """A rule file (`rule_file`) as a Kubernetes `PrometheusRule` (monitoring.coreos.com/v1), which the Prometheus
    operator loads."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": manifest_name(stack), "labels": {"app.kubernetes.io/managed-by": "rabbitmq-retry",
                                                                   "rabbitmq-retry/stack": manifest_name(stack)}},
            "spec": dict(rules)}


def rules_by_key(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The rules of a rule file (or the stack output `alert_rules`) by what tells them apart (`Rule.key`)."""
    found = {}
    for group in data.get("groups", []):
        for rule in group.get("rules", []):
            labels = rule.get("labels", {})
            where = "/".join(labels.get(k, "") for k in KEY_LABELS)
            found[f"{labels.get('rabbitmq_retry_rule', rule.get('alert'))} {where.rstrip('/')}".rstrip()] = rule
    return found
