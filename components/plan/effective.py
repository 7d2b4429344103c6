"""The settings RabbitMQ really gives a queue: which policies apply, and how they merge with its arguments.

Pure. Read in rabbitmq-server (3.10.8 and 4.3) `rabbit_policy.erl`, `rabbit_policies.erl`,
`rabbit_queue_type_util.erl`, `rabbit_amqqueue_process.erl` and `rabbit_quorum_queue.erl`:
- a policy applies to a queue when its pattern matches the name (a regex search), its `apply-to` is
  `queues`, `all` or the queue's own type (`classic_queues`, `quorum_queues`; `streams` never matches
  a classic or quorum queue) and its definition holds no key the queue type refuses (then RabbitMQ
  skips the whole policy for that queue);
- of the user policies, and separately of the operator policies, only the highest priority applies
  (ties: RabbitMQ picks one, so every tied candidate is considered);
- operator over user policy, and policy over queue argument, key by key as components/model/wire.py says.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..model import wire
from ..model.naming import exact_pattern
from ..model.plan_types import PolicyPlan, QueuePlan

LOWER_WINS = frozenset(row.key for row in wire.ROWS if row.lower_wins)
OPERATOR_WINS = frozenset(row.key for row in wire.ROWS if row.operator_wins)
UNLIMITED_BELOW_ZERO = frozenset(row.key for row in wire.ROWS if row.unlimited_below_zero)
QUEUE_APPLY_TO = ("queues", "all")
EXCHANGE_APPLY_TO = ("exchanges", "all")


def applies_to_queue_type(policy: PolicyPlan, queue_type: str) -> bool:
    """`apply-to` and the definition's keys allow `policy` on a queue of `queue_type`."""
    return ((policy.apply_to in QUEUE_APPLY_TO or policy.apply_to == f"{queue_type}_queues")
            and not wire.SKIPPED_KEYS.get(queue_type, frozenset()).intersection(policy.definition))


class PolicyIndex:
    """Which of `policies` match a name: exact-name patterns (`^escaped$`, what the plan derives) by a
    dictionary look-up, every other pattern compiled once and searched. Linear in names × other patterns."""

    def __init__(self, policies: Iterable[PolicyPlan]) -> None:
        self.policies = tuple(policies)
        self._exact: dict[str, list[PolicyPlan]] = defaultdict(list)
        self._searched: list[tuple[re.Pattern[str], PolicyPlan]] = []
        for policy in self.policies:
            if _is_exact(policy.pattern):
                self._exact[policy.pattern].append(policy)
            else:
                self._searched.append((re.compile(policy.pattern), policy))

    def matching_name(self, name: str) -> list[PolicyPlan]:
        """Every policy whose pattern matches `name`, whatever it applies to."""
        found = list(self._exact.get(exact_pattern(name), ()))
        if name.endswith("\n"):
            found += self._exact.get(exact_pattern(name[:-1]), ())   # `$` also matches before a final newline
        return found + [policy for compiled, policy in self._searched if compiled.search(name)]

    def matching_queue(self, queue: QueuePlan) -> list[PolicyPlan]:
        """Every policy RabbitMQ would consider for `queue`."""
        return [p for p in self.matching_name(queue.name) if applies_to_queue_type(p, queue.queue_type)]

    def matching_exchange(self, name: str) -> list[PolicyPlan]:
        return [p for p in self.matching_name(name) if p.apply_to in EXCHANGE_APPLY_TO]


def _is_exact(pattern: str) -> bool:
    if not (pattern.startswith("^") and pattern.endswith("$")) or pattern.endswith("\\$"):
        return False
    literal = re.sub(r"\\(.)", r"\1", pattern[1:-1], flags=re.DOTALL)
    return exact_pattern(literal) == pattern


def winners(matching: Iterable[PolicyPlan]) -> list[PolicyPlan | None]:
    """The policies that can apply: the highest priority (several on a tie), or [None] when none match."""
    candidates = list(matching)
    if not candidates:
        return [None]
    top = max(p.priority for p in candidates)
    return [p for p in candidates if p.priority == top]


@dataclass(frozen=True)
class Setting:
    value: str | int
    source: str
    """Config key path of what sets the value ("" for the plan's own queue arguments)."""
    operator: bool = False
    """Set by an operator policy."""


@dataclass(frozen=True)
class Effective:
    queue: QueuePlan
    policy: PolicyPlan | None
    operator_policy: PolicyPlan | None
    settings: Mapping[str, Setting]

    def get(self, key: str) -> Setting | None:
        return self.settings.get(key)


def _value(raw: str | int) -> str | int:
    """Policy values are strings in the plan; the provider sends digit strings as integers."""
    if isinstance(raw, str) and raw.lstrip("-").isdigit():
        return int(raw)
    return raw


def _lower(key: str, a: Setting, b: Setting) -> Setting:
    if not (isinstance(a.value, int) and isinstance(b.value, int)):
        return a
    if key in UNLIMITED_BELOW_ZERO and (a.value < 0 or b.value < 0):
        return a if a.value >= b.value else b
    return a if a.value <= b.value else b


def _from(policy: PolicyPlan | None, operator: bool) -> dict[str, Setting]:
    if policy is None:
        return {}
    return {key: Setting(_value(value), policy.sources.get(key, policy.source), operator)
            for key, value in policy.definition.items()}


def merge(queue: QueuePlan, policy: PolicyPlan | None, operator_policy: PolicyPlan | None) -> Effective:
    """The settings of `queue` under `policy` and `operator_policy`, as RabbitMQ computes them."""
    merged = _from(policy, False)
    for key, setting in _from(operator_policy, True).items():
        if key not in merged or key in OPERATOR_WINS:
            merged[key] = setting
        elif key in LOWER_WINS:
            merged[key] = _lower(key, merged[key], setting)
    return Effective(queue, policy, operator_policy, _with_arguments(queue, merged))


def _with_arguments(queue: QueuePlan, merged: dict[str, Setting]) -> dict[str, Setting]:
    """`merged` (the policies' settings) with the queue's own arguments, each combined as its wire row says."""
    for argument, value in queue.arguments.items():
        key = argument.removeprefix("x-")
        if argument == key or argument == wire.QUEUE_TYPE.argument:
            continue
        own = Setting(value, "")
        row = wire.BY_KEY.get(key)
        if key not in merged or (row is not None and row.combine(queue.queue_type) == "argument"):
            merged[key] = own
        elif key in LOWER_WINS:
            merged[key] = _lower(key, own, merged[key])
    return merged


def effective_settings(queue: QueuePlan, policies: PolicyIndex, operator_policies: PolicyIndex) -> list[Effective]:
    """Every way RabbitMQ can set up `queue` (more than one only when policies tie on priority)."""
    return [merge(queue, policy, operator) for policy, operator in itertools.product(
        winners(policies.matching_queue(queue)), winners(operator_policies.matching_queue(queue)))]
