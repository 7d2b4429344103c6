"""Checks of a vhost's planned topology that `pulumi preview` runs before registering anything.

Pure. They catch what RabbitMQ would otherwise do silently:
- two policies matching one queue: RabbitMQ applies only one (the highest priority, ties at random);
- a retry path that does not return to exactly its own queue (other consumers would see the retry);
- a dead-letter exchange that routes nowhere: RabbitMQ drops the message;
- a dead-letter cycle with no rejection in it: RabbitMQ drops the message when it comes round again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pulumi.errors import RunError

from .plan import BindingPlan, ExchangePlan, PolicyPlan, QueuePlan, VhostPlan, logical_names


class TopologyError(RunError):
    """The planned topology would lose or misroute messages; `problems` says where and why."""

    def __init__(self, scope: str, problems: list[str]) -> None:
        """`scope`: what was checked, e.g. 'vhost "shop"' or "the stack"."""
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"{scope}: the planned topology would lose or misroute messages:\n{lines}")


@dataclass(frozen=True)
class _Graph:
    exchanges: Mapping[str, ExchangePlan]
    queues: Mapping[str, QueuePlan]
    bindings: tuple[BindingPlan, ...]
    policies: tuple[PolicyPlan, ...]


def _graph(plan: VhostPlan, extra_policies: Iterable[PolicyPlan]) -> _Graph:
    queues = [*plan.queues, *(q for r in plan.retryables for q in r.queues)]
    exchanges = [*plan.exchanges, *(e for r in plan.retryables for e in r.exchanges)]
    bindings = (*plan.bindings, *(b for r in plan.retryables for b in r.bindings))
    policies = (*plan.policies, *(p for r in plan.retryables for p in r.policies), *extra_policies)
    return _Graph({e.name: e for e in exchanges}, {q.name: q for q in queues}, bindings, policies)


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


def route(graph: _Graph, exchange: str, routing_key: str | None) -> set[str] | None:
    """Queues a message published to `exchange` with `routing_key` reaches; None when it cannot be
    known here (a headers exchange, or an exchange declared outside the stack). `routing_key` None
    means "whatever key the message already has"."""
    declared = graph.exchanges.get(exchange)
    if declared is None or declared.type == "headers":
        return None
    bound = [b for b in graph.bindings if b.source == exchange]
    if declared.type == "fanout":
        return {b.destination for b in bound}
    if routing_key is None:
        return None if bound else set()
    if declared.type == "direct":
        return {b.destination for b in bound if b.routing_key == routing_key}
    return {b.destination for b in bound if _topic_matches(b.routing_key, routing_key)}


def _policy_of(graph: _Graph, queue: str) -> PolicyPlan | None:
    matching = [p for p in graph.policies if p.apply_to in ("queues", "all", f"{graph.queues[queue].queue_type}_queues")
                and re.search(p.pattern, queue)]
    return max(matching, key=lambda p: p.priority) if matching else None


def _overlaps(graph: _Graph) -> list[str]:
    problems = []
    for queue in sorted(graph.queues):
        matching = sorted(p.name for p in graph.policies if p.apply_to != "exchanges" and re.search(p.pattern, queue))
        if len(matching) > 1:
            problems.append(f'queue "{queue}" is matched by policies {", ".join(map(repr, matching))}: RabbitMQ '
                            "applies only one; narrow the patterns so that each queue has one policy")
    return problems


def _dead_letter_edges(graph: _Graph) -> dict[str, list[tuple[str, str]]]:
    """queue → [(target queue, reason)] for every way the broker can move a message on its own
    (`rejected` comes from a consumer and is what makes a cycle legal)."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for name, queue in graph.queues.items():
        dlx = queue.arguments.get("x-dead-letter-exchange")
        if not isinstance(dlx, str):
            continue
        key = queue.arguments.get("x-dead-letter-routing-key")
        targets = route(graph, dlx, key if isinstance(key, str) else None) or set()
        definition = (_policy_of(graph, name) or PolicyPlan("", "", "", 0, {})).definition
        reasons = []
        if queue.role in ("input", "plain"):
            reasons.append("rejected")
        if "message-ttl" in definition:
            reasons.append("expired")
        if "max-length" in definition and definition.get("overflow", queue.arguments.get("x-overflow")) not in (
                "reject-publish", "reject-publish-dlx"):
            reasons.append("maxlen")
        edges[name] = [(target, reason) for target in sorted(targets) for reason in reasons]
    return edges


def _automatic_cycles(graph: _Graph) -> list[str]:
    edges = {queue: [target for target, reason in targets if reason != "rejected"]
             for queue, targets in _dead_letter_edges(graph).items()}
    problems, seen = [], set()
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for target in edges.get(node, []):
                if target == start:
                    cycle = " → ".join([*path, start])
                    if frozenset(path) not in seen:
                        seen.add(frozenset(path))
                        problems.append(f"dead-letter cycle with no rejection in it: {cycle}; RabbitMQ drops "
                                        "such messages (remove the TTL or length limit that moves them)")
                elif target not in path:
                    stack.append((target, [*path, target]))
    return problems


def check_vhost(plan: VhostPlan, extra_policies: Iterable[PolicyPlan] = ()) -> list[str]:
    """Every problem of the planned topology, or []."""
    graph = _graph(plan, extra_policies)
    problems = _overlaps(graph)
    for retryable in plan.retryables:
        queue = retryable.config.name
        requeue = route(graph, f"{queue}.requeue", None)
        if requeue != {queue}:
            problems.append(f'retry path of "{queue}" returns to {sorted(requeue or [])} instead of exactly '
                            f'"{queue}"; remove other bindings from "{queue}.requeue"')
        for tier in retryable.tiers:
            reached = route(graph, retryable.retry_exchange, tier.routing_key)
            if reached != {tier.queue}:
                problems.append(f'"{retryable.retry_exchange}" routes {tier.routing_key} to {sorted(reached or [])} '
                                f'instead of exactly "{tier.queue}"')
    for name, queue in sorted(graph.queues.items()):
        dlx = queue.arguments.get("x-dead-letter-exchange")
        if not isinstance(dlx, str):
            continue
        key = queue.arguments.get("x-dead-letter-routing-key")
        reached = route(graph, dlx, key if isinstance(key, str) else None)
        if reached is not None and not reached:
            problems.append(f'queue "{name}" dead-letters to "{dlx}"' + (f" with key {key}" if key else "")
                            + ", which routes to no queue: RabbitMQ would drop those messages")
    return problems + _automatic_cycles(graph)


def check_logical_names(components: Iterable[tuple[str, VhostPlan]]) -> list[str]:
    """Logical names are joined with "-" (`f"{component}-{key}"`), so distinct names can meet, e.g.
    queue "x-queue-y" of vhost "a" and queue "y" of vhost "a-queue-x": two resources with one URN."""
    owners: dict[tuple[str, str, str], str] = {}
    problems = []
    for component, plan in components:
        for identity in logical_names(component, plan):
            owner = f'vhost "{plan.config.name}"'
            if identity in owners:
                problems.append((identity[2], f'{owners[identity]} and {owner} would both register a {identity[1]} '
                                 f'named "{identity[2]}"; rename a queue, exchange or vhost so that names joined '
                                 'with "-" stay distinct'))
            else:
                owners[identity] = owner
    # By name, not by the order the components register in: related clashes (a queue, its policy) stay together.
    return [problem for _, problem in sorted(problems, key=lambda named: named[0])]
