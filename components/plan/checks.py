"""Checks of a vhost's planned topology that `pulumi preview` runs before registering anything.

Pure. They catch what RabbitMQ would otherwise do silently:
- two policies matching one queue: RabbitMQ applies only one (the highest priority, ties at random);
- a retry path that does not return to exactly its own queue (other consumers would see the retry);
- a dead-letter exchange that routes nowhere: RabbitMQ drops the message;
- a dead-letter cycle with no rejection in it: RabbitMQ drops the message when it comes round again;
- settings that reach our queues once user policy, operator policy and queue arguments are merged the
  way RabbitMQ merges them (`effective.py`): a TTL or expiry on an input, wait or error queue, a
  delivery limit too low for the retries (for strategy `native`: other than `max_retries`), a wait tier's
  TTL other than its delay, a length limit that dead-letters instead of refusing publishes.

Every pattern is compiled once and exact-name patterns are looked up by name, so the checks grow
linearly with the number of queues (P3 of `make bench`, bench/plan_cost.py, measures it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..model import wire
from ..model.durations import format_duration
from ..model.names import names
from ..model.plan_types import (
    BindingPlan,
    DelayLevelsPlan,
    ExchangePlan,
    PolicyPlan,
    QueuePlan,
    RetryablePlan,
    Tier,
    VhostPlan,
)
from ..model.problems import Problem
from ..model.stack_config import DEFAULT_DELIVERY_LIMIT, Retry
from ..strategies import delivery_limit_problem, strategy_of
from .effective import Effective, PolicyIndex, Setting, effective_settings
from .layout import logical_names

# What each problem is (`Problem.code`): stable identifiers the tools act on, whatever the message says.
OVERLAPPING_POLICIES = "overlapping-policies"
"""Config policies match one queue: RabbitMQ applies only one."""
POLICY_OVER_OURS = "policy-over-ours"
"""A config policy matches queues that have a policy of this stack."""
DEAD_LETTERS_NOWHERE = "dead-letters-nowhere"
TTL_ON_INPUT = "ttl-on-input"
TTL_ON_ERROR_QUEUE = "ttl-on-error-queue"
EXPIRES_ON_QUEUE = "expires-on-queue"
WAIT_WITHOUT_TTL = "wait-without-ttl"
WAIT_TTL_NOT_DELAY = "wait-ttl-not-delay"
DELIVERY_LIMIT_NOT_MAX_RETRIES = "delivery-limit-not-max-retries"
DELIVERY_LIMIT_TOO_LOW = "delivery-limit-too-low"
DROPS_WHEN_FULL = "drops-when-full"
"""A length limit on a queue that dead-letters, without overflow reject-publish."""
DEAD_LETTER_CYCLE = "dead-letter-cycle"
SHOVEL_QUEUE_NOT_PLANNED = "shovel-queue-not-planned"
SHOVEL_ACK_MODE = "shovel-ack-mode"
SHOVEL_DELETES_ITSELF = "shovel-deletes-itself"
SHOVEL_NOT_GRANTED = "shovel-not-granted"
LEVEL_TTL_NOT_DELAY = "level-ttl-not-delay"
EXPIRES_ON_LEVEL = "expires-on-level"
LEVEL_DROPS_WHEN_FULL = "level-drops-when-full"
STALE_POLICY = "stale-policy"
"""A warning, not an error: a config policy that matches nothing the vhost plans."""
LOGICAL_NAME_CLASH = "logical-name-clash"


@dataclass(frozen=True)
class _Graph:
    exchanges: Mapping[str, ExchangePlan]
    queues: Mapping[str, QueuePlan]
    bindings: Mapping[str, tuple[BindingPlan, ...]]
    """By source exchange."""
    policies: PolicyIndex
    operator_policies: PolicyIndex


def _graph(plan: VhostPlan, extra_policies: Iterable[PolicyPlan]) -> _Graph:
    groups = (*plan.retryables, *((plan.delay_levels,) if plan.delay_levels else ()))
    queues = [*plan.queues, *(q for r in groups for q in r.queues)]
    exchanges = [*plan.exchanges, *(e for r in groups for e in r.exchanges)]
    by_source: dict[str, list[BindingPlan]] = defaultdict(list)
    for binding in (*plan.bindings, *(b for r in groups for b in r.bindings)):
        by_source[binding.source].append(binding)
    policies = (*plan.policies, *(p for r in groups for p in r.policies), *extra_policies)
    return _Graph({e.name: e for e in exchanges}, {q.name: q for q in queues},
                  {source: tuple(bound) for source, bound in by_source.items()},
                  PolicyIndex(policies), PolicyIndex(plan.operator_policies))


def _topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: `*` is one word, `#` zero or more."""
    words, keys = pattern.split("."), key.split(".")

    def match(i: int, j: int) -> bool:
        if i == len(words):
            return j == len(keys)
        if words[i] == "#":
            return any(match(i + 1, k) for k in range(j, len(keys) + 1))
        return j < len(keys) and words[i] in ("*", keys[j]) and match(i + 1, j + 1)

    return match(0, 0)


def route(graph: _Graph, exchange: str, routing_key: str | None, seen: frozenset[str] = frozenset()) -> set[str] | None:
    """Queues a message published to `exchange` with `routing_key` reaches, through exchange-to-exchange
    bindings too; None when it cannot be known here (a headers exchange, or an exchange declared outside the
    stack). `routing_key` None means "whatever key the message already has"."""
    declared = graph.exchanges.get(exchange)
    if declared is None or declared.type == "headers":
        return None
    bound = graph.bindings.get(exchange, ())
    if declared.type == "fanout":
        matched = list(bound)
    elif routing_key is None:
        return None if bound else set()
    elif declared.type == "direct":
        matched = [b for b in bound if b.routing_key == routing_key]
    else:
        matched = [b for b in bound if _topic_matches(b.routing_key, routing_key)]
    reached = {b.destination for b in matched if b.destination_type == "queue"}
    for onward in (b.destination for b in matched if b.destination_type == "exchange" and b.destination not in seen):
        further = route(graph, onward, routing_key, seen | {exchange})
        if further is None:
            return None
        reached |= further
    return reached


def _named(policy: PolicyPlan) -> str:
    """A config policy by its key path and name; one this stack derives for a queue by its name."""
    return f"{policy.source} (policy {policy.name!r})" if policy.source else f"this stack's policy {policy.name!r}"


def _overlaps(graph: _Graph) -> list[Problem]:
    """One problem per set of config policies that share queues with another policy, naming their key paths
    and a few of the queues (a `.*` policy over a retryable queue hits its input, wait and error queues)."""
    clashes: dict[tuple[str, ...], tuple[list[PolicyPlan], list[str], bool]] = {}
    for queue in sorted(graph.queues):
        matching = sorted(graph.policies.matching_queue(graph.queues[queue]), key=lambda p: (p.source or "~", p.name))
        if len(matching) > 1:
            config = [p for p in matching if p.source] or matching[:1]
            derived = any(not p.source for p in matching)
            key = (*(p.name for p in config), "+ours" * derived)
            clashes.setdefault(key, (config, [], derived))[1].append(queue)
    problems = []
    for config, queues, derived in clashes.values():
        path = config[0].source or ""
        shown = names(queues[:3]) + (f" and {len(queues) - 3} more" if len(queues) > 3 else "")
        who = " and ".join(_named(p) for p in config)
        if derived:
            problems.append(Problem(
                path, POLICY_OVER_OURS,
                f"{who} {'matches' if len(config) == 1 else 'match'} {len(queues)} "
                f"queue{'s' * (len(queues) != 1)} that {'have' if len(queues) != 1 else 'has'} a policy "
                f"of this stack ({shown}): RabbitMQ applies only one policy per queue; narrow the pattern "
                "to leave them out, and set what it sets through the queue's own keys (max_length, "
                "delivery_limit; message_ttl, max_length_bytes on a plain queue)"))
        else:
            problems.append(Problem(
                path, OVERLAPPING_POLICIES,
                f"{who} both match {shown}: RabbitMQ applies only one policy per queue; narrow the "
                "patterns so that each queue has one policy"))
    return problems


def _drops_when_full(effective: Effective) -> tuple[str, Setting] | None:
    """The length limit (key, setting) that makes RabbitMQ drop or dead-letter the oldest message
    rather than refuse the publish (overflow other than reject-publish), or None."""
    overflow = effective.get(wire.OVERFLOW.key)
    if overflow is not None and overflow.value == "reject-publish":
        return None
    return next(((key, setting) for key in (wire.MAX_LENGTH.key, wire.MAX_LENGTH_BYTES.key)
                 if (setting := effective.get(key)) is not None), None)


def _dead_letter_edges(graph: _Graph, settings: Mapping[str, list[Effective]]) -> dict[str, list[tuple[str, str]]]:
    """queue → [(target queue, reason)] for every way the broker can move a message on its own
    (`rejected` comes from a consumer and is what makes a cycle legal)."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for name, queue in graph.queues.items():
        dlx = queue.arguments.get(wire.DEAD_LETTER_EXCHANGE.argument)
        if not isinstance(dlx, str):
            continue
        key = queue.arguments.get(wire.DEAD_LETTER_ROUTING_KEY.argument)
        targets = route(graph, dlx, key if isinstance(key, str) else None) or set()
        reasons = ["rejected"] if queue.role in ("input", "plain") else []
        if any(e.get(wire.MESSAGE_TTL.key) for e in settings[name]):
            reasons.append("expired")
        if any(_drops_when_full(e) for e in settings[name]):
            reasons.append("maxlen")
        edges[name] = [(target, reason) for target in sorted(targets) for reason in reasons]
    return edges


def _automatic_cycles(graph: _Graph, settings: Mapping[str, list[Effective]]) -> list[Problem]:
    edges = {queue: [target for target, reason in targets if reason != "rejected"]
             for queue, targets in _dead_letter_edges(graph, settings).items()}
    problems: list[Problem] = []
    seen = set()
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for target in edges.get(node, []):
                if target == start:
                    cycle = " → ".join([*path, start])
                    if frozenset(path) not in seen:
                        seen.add(frozenset(path))
                        problems.append(Problem(
                            "", DEAD_LETTER_CYCLE,
                            f"dead-letter cycle with no rejection in it: {cycle}; RabbitMQ drops "
                            "such messages (remove the TTL or length limit that moves them)"))
                elif target not in path:
                    stack.append((target, [*path, target]))
    return problems


def _source(setting: Setting, effective: Effective) -> str:
    """Key path of what sets `setting` ("" when the stack derives it for the queue)."""
    if setting.source:
        return setting.source
    policy = effective.policy or effective.operator_policy
    return policy.source if policy is not None and policy.source else ""


def _cause(setting: Setting, effective: Effective) -> str:
    """Key path of what sets `setting`, for the message; the queue when the stack derives it."""
    return _source(setting, effective) or f'queue "{effective.queue.name}"'


def _found(setting: Setting, effective: Effective, code: str, what: str) -> Problem:
    """The problem `what` with `setting` where `effective` applies it, said after what sets it (`_cause`)."""
    return Problem(_source(setting, effective), code, f"{_cause(setting, effective)}: {what}")


def _fix(setting: Setting, queue: str) -> str:
    whose = "the operator policy's" if setting.operator else "its"
    return f'narrow {whose} pattern so that it does not match "{queue}"'


def _overflow_fix(length: Setting, overflow: Setting | None, role: str, retryable: str, queue: str) -> str:
    """A fix the broker takes: RabbitMQ 3.10.8 refuses `overflow` in an operator policy (4.3.6 takes it;
    tests/broker/test_policy_acceptance.py), but applies a user policy's overflow with an operator's lower
    length limit (tests/broker/test_effective_policies.py)."""
    if overflow is not None and overflow.operator:
        return f"set the operator policy's overflow to reject-publish, or {_fix(length, queue)}"
    if not length.operator:
        return f"add overflow: reject-publish to that policy, or {_fix(length, queue)}"
    ours = (f'set max_length on queue "{retryable}" (its policy then carries overflow: reject-publish, which '
            "RabbitMQ applies with the operator's lower limit), " if role == "input" else "")
    return (f"{ours}{_fix(length, queue)}, or add overflow: reject-publish to the operator policy (RabbitMQ 4.3.6 "
            "takes it there, 3.10.8 refuses it)")


WHEN_FULL = {
    "input": "dead-letters the oldest message into the retry loop before any consumer saw it, and drops it when "
             "it comes round",
    "wait": 'sends the oldest message back to "{queue}" before its delay is over',
}


def _effective_problems(retryable: RetryablePlan, settings: Mapping[str, list[Effective]]) -> list[Problem]:
    """What the merged policies do to one retryable queue's input, wait and error queues."""
    problems: list[Problem] = []
    retry = retryable.retry
    tiers: dict[str, Tier] = {t.queue: t for t in (*retryable.tiers, *retryable.draining)}
    for queue in retryable.queues:
        for effective in settings[queue.name]:
            role = queue.role
            ttl, expires = effective.get(wire.MESSAGE_TTL.key), effective.get(wire.EXPIRES.key)
            if ttl is not None and role == "input":
                problems.append(_found(
                    ttl, effective, TTL_ON_INPUT, f'message-ttl {ttl.value} reaches input queue '
                    f'"{queue.name}": waiting messages expire into the retry loop and RabbitMQ drops '
                    f"them when they come round (nothing rejected them); {_fix(ttl, queue.name)}"))
            if ttl is not None and role == "error" and not ttl.source.endswith(".retry.error_retention"):
                problems.append(_found(
                    ttl, effective, TTL_ON_ERROR_QUEUE, f'message-ttl {ttl.value} reaches error queue '
                    f'"{queue.name}": RabbitMQ deletes parked messages after {format_duration(ttl.value)}; set '
                    f"retry.error_retention instead, or {_fix(ttl, queue.name)}"))
            if expires is not None:
                problems.append(_found(
                    expires, effective, EXPIRES_ON_QUEUE, f'expires {expires.value} reaches {role} queue '
                    f'"{queue.name}": RabbitMQ deletes the queue with its messages once it has had no '
                    f"consumer for {format_duration(expires.value)}; {_fix(expires, queue.name)}"))
            if role == "wait":
                delay = tiers[queue.name].delay_ms
                if ttl is None:
                    problems.append(_found(
                        Setting("", ""), effective, WAIT_WITHOUT_TTL, f'wait queue "{queue.name}" gets no '
                        f"message-ttl (the tier's delay is {format_duration(delay)}): its messages would never "
                        "come back; leave the wait queue to its own policy"))
                elif ttl.value != delay:
                    problems.append(_found(
                        ttl, effective, WAIT_TTL_NOT_DELAY, f'message-ttl {ttl.value} on wait queue '
                        f'"{queue.name}" is not the tier\'s delay ({format_duration(delay)}): RabbitMQ retries '
                        f"after {format_duration(ttl.value)} instead; {_fix(ttl, queue.name)}"))
            if role == "input" and queue.queue_type == "quorum":
                problems += _delivery_limit_problems(retry, queue, effective)
            if wire.DEAD_LETTER_EXCHANGE.argument in queue.arguments and (full := _drops_when_full(effective)):
                key, length = full
                overflow = effective.get(wire.OVERFLOW.key)
                problems.append(_found(
                    length, effective, DROPS_WHEN_FULL, f'{key} {length.value} on {role} queue "{queue.name}", '
                    "which dead-letters, without overflow reject-publish (effective: "
                    f'{overflow.value if overflow else "drop-head"}): when full, RabbitMQ '
                    f"{WHEN_FULL[role].format(queue=retryable.config.name)}; "
                    f"{_overflow_fix(length, overflow, role, retryable.config.name, queue.name)}"))
    return list(dict.fromkeys(problems))


def _delivery_limit_problems(retry: Retry, queue: QueuePlan, effective: Effective) -> list[Problem]:
    """The delivery limit the policies leave on a retryable quorum queue, against the one rule
    (`strategies.delivery_limit_problem`)."""
    limit = effective.get(wire.DELIVERY_LIMIT.key) or Setting(DEFAULT_DELIVERY_LIMIT, "")
    if (problem := delivery_limit_problem(retry, limit.value)) is None:
        return []
    if strategy_of(retry).DELIVERY_LIMIT_IS_MAX_RETRIES:
        code, fix = DELIVERY_LIMIT_NOT_MAX_RETRIES, _fix(limit, queue.name)
    else:
        or_narrow = f", or {_fix(limit, queue.name)}" if limit.operator else ""
        code, fix = DELIVERY_LIMIT_TOO_LOW, f"raise it above {retry.max_retries + 1}{or_narrow}"
    return [Problem(_source(limit, effective), code, f'{_cause(limit, effective)}: delivery-limit {limit.value} on '
                    f'quorum queue "{queue.name}" {problem}; {fix}')]


def _dead_letters_nowhere(graph: _Graph) -> list[Problem]:
    """Every queue's dead-letter exchange and key route to some queue."""
    problems = []
    for name, queue in sorted(graph.queues.items()):
        dlx = queue.arguments.get(wire.DEAD_LETTER_EXCHANGE.argument)
        key = queue.arguments.get(wire.DEAD_LETTER_ROUTING_KEY.argument)
        if isinstance(dlx, str) and route(graph, dlx, key if isinstance(key, str) else None) == set():
            problems.append(Problem("", DEAD_LETTERS_NOWHERE, f'queue "{name}" dead-letters to "{dlx}"'
                                    + (f" with key {key}" if key else "")
                                    + ", which routes to no queue: RabbitMQ would drop those messages"))
    return problems


def check_vhost(plan: VhostPlan, extra_policies: Iterable[PolicyPlan] = ()) -> list[Problem]:
    """Every problem of the planned topology, or []."""
    graph = _graph(plan, extra_policies)
    settings = {name: effective_settings(queue, graph.policies, graph.operator_policies)
                for name, queue in graph.queues.items()}
    problems = _overlaps(graph)
    for retryable in plan.retryables:
        problems += strategy_of(retryable.retry).path_problems(
            retryable, lambda exchange, key: route(graph, exchange, key))
    problems += _dead_letters_nowhere(graph)
    for retryable in plan.retryables:
        problems += _effective_problems(retryable, settings)
    if plan.delay_levels is not None:
        problems += _delay_level_problems(plan.delay_levels, settings)
    return problems + _automatic_cycles(graph, settings) + _shovel_problems(plan, graph)


def _shovel_problems(plan: VhostPlan, graph: _Graph) -> list[Problem]:
    """Each migration's shovel loses nothing: both its queues are planned (a shovel whose destination is missing
    declares a classic queue of its own), it acknowledges a message only once the destination confirmed it, it
    never deletes itself (it is removed by config, once the source is drained), and the shovel user may read its
    source and declare its destination."""
    problems: list[Problem] = []
    grants = {g.user: g for g in plan.shovel_permissions}
    for shovel in plan.shovels:
        what = f'shovel "{shovel.name}" (migration {shovel.migration})'
        for role, queue in (("source", shovel.source), ("destination", shovel.destination)):
            if role == "source" and shovel.external_source:
                continue  # not the stack's: an adopted runtime queue (move.external)
            if queue not in graph.queues:
                problems.append(Problem("", SHOVEL_QUEUE_NOT_PLANNED, f'{what}: its {role} queue "{queue}" is not '
                                        "planned in this vhost; declare it in queues"))
        if shovel.ack_mode != "on-confirm":
            problems.append(Problem("", SHOVEL_ACK_MODE, f"{what}: ack-mode {shovel.ack_mode} can lose messages; use "
                                    "on-confirm"))
        if shovel.source_delete_after != "never":
            problems.append(Problem("", SHOVEL_DELETES_ITSELF, f"{what}: src-delete-after {shovel.source_delete_after} "
                                    "may delete the shovel before its source is drained (rabbitmq-server#14636); use "
                                    "never and remove it by config"))
        grant = grants.get(shovel.user)
        if grant is None or not re.fullmatch(grant.read.regex, shovel.source) or not re.fullmatch(
                grant.configure.regex, shovel.destination):
            problems.append(Problem("", SHOVEL_NOT_GRANTED, f'{what}: its user "{shovel.user}" may not read '
                                    f'"{shovel.source}" or declare "{shovel.destination}"; the shovel user\'s '
                                    "permissions must cover every shovel of the vhost"))
    return problems


def _delay_level_problems(levels: DelayLevelsPlan, settings: Mapping[str, list[Effective]]) -> list[Problem]:
    """Each level must hold a message exactly its own time, and keep it."""
    problems: list[Problem] = []
    for level, queue in enumerate(levels.level_queues):
        delay = levels.config.unit_ms * 2**level
        for effective in settings[queue.name]:
            ttl, expires = effective.get(wire.MESSAGE_TTL.key), effective.get(wire.EXPIRES.key)
            if ttl is None or ttl.value != delay:
                setting = ttl or Setting("", "")
                when = "never come back" if ttl is None else "come back at the wrong time"
                problems.append(_found(
                    setting, effective, LEVEL_TTL_NOT_DELAY, f'message-ttl {ttl.value if ttl else "none"} on delay '
                    f'level "{queue.name}" is not its {format_duration(delay)}: messages would {when}; '
                    f"{_fix(setting, queue.name)}"))
            if expires is not None:
                problems.append(_found(
                    expires, effective, EXPIRES_ON_LEVEL, f'expires {expires.value} reaches delay level '
                    f'"{queue.name}", which has no consumer: RabbitMQ would delete it with its messages; '
                    f"{_fix(expires, queue.name)}"))
            if full := _drops_when_full(effective):
                key, length = full
                problems.append(_found(
                    length, effective, LEVEL_DROPS_WHEN_FULL, f'{key} {length.value} on delay level "{queue.name}" '
                    "without overflow reject-publish: when full, RabbitMQ sends the oldest message on "
                    f"before its delay is over; {_fix(length, queue.name)}"))
    return problems


def stale_policies(plan: VhostPlan) -> list[Problem]:
    """Warnings: config policies and operator policies that match nothing the vhost plans (often left
    behind by a rename). Not errors: a policy may be meant for queues this stack does not declare."""
    graph = _graph(plan, ())
    matched = {id(p) for index in (graph.policies, graph.operator_policies)
               for queue in graph.queues.values() for p in index.matching_queue(queue)}
    matched |= {id(p) for index in (graph.policies, graph.operator_policies)
                for exchange in graph.exchanges for p in index.matching_exchange(exchange)}
    return [Problem(p.source or "", STALE_POLICY, f'{p.source}: {"operator " if p.role == "operator" else ""}policy '
                    f'"{p.name}" (pattern {p.pattern!r}, apply-to {p.apply_to}) matches no queue or exchange this '
                    f'stack plans in vhost "{plan.config.name}"; if a queue was renamed, update the pattern, otherwise '
                    "ignore this")
            for p in (*plan.policies, *plan.operator_policies) if p.role != "queue" and id(p) not in matched]


def check_logical_names(components: Iterable[tuple[str, VhostPlan]]) -> list[Problem]:
    """Logical names are joined with "-" (`f"{component}-{key}"`), so distinct names can meet, e.g.
    queue "x-queue-y" of vhost "a" and queue "y" of vhost "a-queue-x": two resources with one URN."""
    owners: dict[tuple[str, str, str], str] = {}
    problems = []
    for component, plan in components:
        for identity in logical_names(component, plan):
            owner = f'vhost "{plan.config.name}"'
            if identity in owners:
                problems.append((identity[2], Problem("", LOGICAL_NAME_CLASH, f'{owners[identity]} and {owner} would '
                                                      f'both register a {identity[1]} named "{identity[2]}"; rename a '
                                                      'queue, exchange or vhost so that names joined with "-" stay '
                                                      "distinct")))
            else:
                owners[identity] = owner
    # By name, not by the order the components register in: related clashes (a queue, its policy) stay together.
    return [problem for _, problem in sorted(problems, key=lambda named: named[0])]
