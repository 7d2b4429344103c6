"""Strategy `levels`: a delay per message through the vhost's shared binary delay levels.

The consumer picks each retry's delay from its `backoff` and publishes a copy to the top level with the delay
(in units, one bit word per level) and the queue's name in the routing key; level k holds a message `unit × 2^k`
when its bit is 1, and after level 0 the delivery exchange routes it back to exactly its queue. A rejected
message, or one past the delivery limit, dead-letters to the error exchange.

The levels themselves are the vhost's (`delay_levels`, a DelayLevels component), planned once by
`plan_delay_levels`; a queue's plan names the levels it goes through.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from ..model import naming, wire
from ..model.durations import format_duration
from ..model.fields import INVALID, Invalid, Problems, integer, mapping, number, optional
from ..model.keys import BACKOFF_KEYS
from ..model.plan_types import (
    ERROR_QUEUE_DELIVERY_LIMIT,
    BindingPlan,
    DelayLevelsPlan,
    ExchangePlan,
    Grant,
    PlannedBy,
    PolicyPlan,
    QueuePlan,
    RetryablePlan,
    TopicGrant,
    adopt,
    error_policies,
    error_queue_plans,
    exact_names,
    group_size_arguments,
    limit_sources,
    parking_input_queue,
    queue_limits,
    queue_policy,
    quorum_dead_lettering,
    reconciliation,
)
from ..model.problems import Problem
from ..model.stack_config import MAX_RETRIES_CEILING, DelayLevels, Queue, Retry
from .base import Route
from .common import REDEPLOY, contract_ms, contract_number, contract_of, parse_error_queue, positive_duration

PLANNER = cast("PlannedBy", sys.modules[__name__])  # each plan it makes records it (`planned_by`)

NAME = "levels"
RETRY_KEYS = ("backoff",)
USES_DELAY_LEVELS = True
DELIVERY_LIMIT_IS_MAX_RETRIES = False
MIN_BROKER_VERSION = None
DELAY_MISROUTED = "delay-misrouted"
"""`Problem.code`: a delayed copy does not take its path through the levels back to exactly its queue."""
FEATURE_FLAG = None
KEY_FORMAT = ("the delay in units, ceil(delay_ms / delay_unit_ms) capped at 2^delay_levels - 1, as "
              "delay_words binary digits, most significant first, each followed by '.', then the queue name")
"""How a `levels` contract tells a client in any language to build the routing key of a delayed copy."""


@dataclass(frozen=True)
class Backoff:
    """Retry n waits `min(max, initial × multiplier^(n-1))`, scaled by a random factor in
    `[1 - jitter, 1 + jitter]`, rounded up to whole delay units, never above `max`."""

    initial_ms: int = 1000
    multiplier: float = 2.0
    max_ms: int = 3_600_000
    jitter: float = 0.2


@dataclass(frozen=True, kw_only=True)
class LevelsRetry(Retry):
    strategy: ClassVar[str] = NAME
    backoff: Backoff = field(default_factory=Backoff)


def parse_backoff(p: Problems, path: str, raw: object) -> Backoff | Invalid:
    """The delay of retry n, `min(max, initial × multiplier^(n-1))` with ± `jitter`."""
    data = mapping(p, path, raw, BACKOFF_KEYS)
    if data is INVALID:
        return INVALID
    default = Backoff()
    initial = optional(data, "initial", lambda v: positive_duration(p, f"{path}.initial", v), default.initial_ms)
    multiplier = optional(data, "multiplier", lambda v: number(p, f"{path}.multiplier", v, 1), default.multiplier)
    longest = optional(data, "max", lambda v: positive_duration(p, f"{path}.max", v), default.max_ms)
    jitter = optional(data, "jitter", lambda v: number(p, f"{path}.jitter", v, 0, 1), default.jitter)
    if isinstance(initial, int) and isinstance(longest, int) and longest < initial:
        p.add(f"{path}.max", f"{data.get('max', '1h')!r} is shorter than initial {data.get('initial', '1s')!r}; "
              "the delay grows from initial up to max")
        return INVALID
    if (isinstance(initial, int) and isinstance(longest, int) and isinstance(multiplier, float)
            and isinstance(jitter, float)):
        return Backoff(initial, multiplier, longest, jitter)
    return INVALID


def parse_retry(p: Problems, path: str, data: Mapping[str, Any]) -> LevelsRetry | Invalid:
    """`backoff` and `max_retries`; the vhost's parser checks the backoff against its levels
    (`check_backoff_fits`)."""
    if "max_retries" not in data:
        p.add(f"{path}.max_retries", "missing; strategy levels needs it (the retries before a message is parked)")
    backoff = optional(data, "backoff", lambda v: parse_backoff(p, f"{path}.backoff", v), Backoff())
    max_retries = optional(data, "max_retries",
                           lambda v: integer(p, f"{path}.max_retries", v, 1, MAX_RETRIES_CEILING), INVALID)
    retention, error_max_length = parse_error_queue(p, path, data)
    if (isinstance(backoff, Backoff) and isinstance(max_retries, int) and retention is not INVALID
            and error_max_length is not INVALID):
        return LevelsRetry(max_retries=max_retries, error_retention_ms=retention, error_max_length=error_max_length,
                           backoff=backoff)
    return INVALID


def check_backoff_fits(p: Problems, path: str, retry: LevelsRetry, levels: DelayLevels, levels_path: str) -> bool:
    """The longest delay a retry can ask for must fit in the vhost's levels; a shorter one than a unit is a unit."""
    backoff = retry.backoff
    ok = True
    if backoff.initial_ms < levels.unit_ms:
        p.add(f"{path}.backoff.initial", f"{format_duration(backoff.initial_ms)} is shorter than {levels_path}.unit "
              f"({format_duration(levels.unit_ms)}), the shortest delay the levels make; raise initial or lower "
              "the unit")
        ok = False
    # A client never waits longer than backoff.max, jitter included (rabbitmq_retry_client.levels.retry_delay_ms).
    if backoff.max_ms > levels.max_delay_ms:
        p.add(f"{path}.backoff.max", f"{format_duration(backoff.max_ms)} is longer than {levels_path}.max_delay "
              f"({format_duration(levels.max_delay_ms)}), the longest delay the levels hold; lower max or raise "
              "max_delay")
        ok = False
    return ok


def check_queue(p: Problems, path: str, name: str, queue_type: str) -> bool:
    """A `levels` queue's name ends its routing key and its delivery binding's topic pattern."""
    if any(word in naming.TOPIC_WILDCARDS for word in name.split(".")):
        p.add(f"{path}.name", f'"{name}": a word "*" or "#" would be a wildcard in the delivery binding of strategy '
              "levels, which must match this queue only; rename the queue")
        return False
    longest = naming.MAX_NAME_BYTES - 2 * naming.DELAY_WORDS
    if naming.byte_length(name) > longest:
        p.add(f"{path}.name", f"{naming.byte_length(name)} bytes: with strategy levels the queue's name ends a "
              f"routing key after {naming.DELAY_WORDS} delay bits, which leaves {longest} bytes; shorten the queue "
              "name")
        return False
    return True


def owned_names(queue: str, retry: Retry) -> tuple[list[str], list[str]]:
    """The delays are the vhost's levels: only the error queue and exchange besides `Q`."""
    return naming.derived_queue_names(queue, 0), [naming.error_exchange(queue)]


def plan(queue: Queue, retry: LevelsRetry, path: str, levels: DelayLevels | None,
         imports: tuple[str, ...]) -> RetryablePlan[LevelsRetry]:
    """`Q`, its error queue and exchange, and `Q`'s delivery binding from the levels' delivery exchange, which
    routes a copy whose delay is over back here only."""
    if levels is None:
        raise ValueError(f"queue {queue.name!r} has strategy levels: plan it with the delay levels it retries "
                         "through")
    error, error_exchange, error_binding = error_queue_plans(queue)
    input_queue = parking_input_queue(queue)
    delivery = BindingPlan(naming.DELIVERY_BINDING_KEY, naming.DELIVERY_EXCHANGE, queue.name,
                           naming.delivery_pattern(queue.name))
    limits = queue_limits(queue)
    policies = [*([queue_policy(naming.QUEUE_POLICY_KEY, queue.name, queue.policy_priority, limits,
                                limit_sources(path, queue))] if limits else []),
                *error_policies(queue, retry, path)]
    return RetryablePlan(config=queue, retry=retry, planned_by=PLANNER,
                         tiers=(), queues=adopt((input_queue, error), "queue", imports),
                         exchanges=adopt((error_exchange,), "exchange", imports),
                         bindings=adopt((error_binding, delivery), "binding", imports),
                         policies=adopt(tuple(policies), "policy", imports), delay_levels=levels)


def plan_delay_levels(levels: DelayLevels, imports: Iterable[str] = (),
                      path: str = "delay_levels") -> DelayLevelsPlan:
    """Level k (0 ≤ k < levels): exchange and queue `rabbitmq-retry.delay.<k>`, the queue's TTL `unit × 2^k` in
    its policy (a changed unit updates in place). Every routing key has DELAY_WORDS bit words, so a longer
    `max_delay` only adds levels on top: no existing binding changes under a waiting message. `imports`: the
    vhost's `import` entries."""
    imports = tuple(imports)
    qtype = levels.queue_type
    below = [naming.DELIVERY_EXCHANGE, *(naming.delay_level(k) for k in range(levels.levels - 1))]
    queues: list[QueuePlan] = []
    exchanges = [ExchangePlan(naming.DELIVER_KEY, naming.DELIVERY_EXCHANGE, "topic",
                              arguments={wire.ALTERNATE_EXCHANGE.key: naming.UNDELIVERABLE})]
    bindings: list[BindingPlan] = []
    policies: list[PolicyPlan] = []
    target = reconciliation(levels.target_group_size)
    target_source = {wire.TARGET_GROUP_SIZE.key: f"{path}.quorum_group_size"}
    for level in range(levels.levels):
        name = naming.delay_level(level)
        queues.append(QueuePlan(naming.level_key(level), name, qtype, {
            **group_size_arguments(qtype, levels.quorum_group_size), wire.DEAD_LETTER_EXCHANGE.argument: below[level],
            **quorum_dead_lettering(qtype)}, "delay"))
        exchanges.append(ExchangePlan(naming.level_exchange_key(level), name, "topic"))
        bindings += [BindingPlan(naming.level_wait_key(level), name, name, naming.delay_level_pattern(level, "1")),
                     BindingPlan(naming.level_pass_key(level), name, below[level],
                                 naming.delay_level_pattern(level, "0"), destination_type="exchange")]
        policies.append(queue_policy(naming.level_policy_key(level), name, levels.policy_priority,
                                     {wire.MESSAGE_TTL.key: str(levels.unit_ms * 2**level), **target},
                                     {wire.MESSAGE_TTL.key: f"{path}.unit", **target_source}))
    # A copy whose queue is gone (or was never bound) when its delay is over goes to the undeliverable queue
    # through the delivery exchange's alternate exchange, where an unroutable dead-letter would be dropped.
    undeliverable = naming.UNDELIVERABLE
    queues.append(QueuePlan(naming.UNDELIVERABLE_KEY, undeliverable, qtype,
                            group_size_arguments(qtype, levels.quorum_group_size), "error"))
    exchanges.append(ExchangePlan(naming.UNDELIVERABLE_EXCHANGE_KEY, undeliverable, "fanout"))
    bindings.append(BindingPlan(naming.UNDELIVERABLE_BINDING_KEY, undeliverable, undeliverable))
    if qtype == "quorum":
        # As for the error queues (`error_policies`): RabbitMQ 4's default delivery limit of 20 would drop a
        # copy that readers returned 20 times, since this queue has nowhere to dead-letter.
        policies.append(queue_policy(naming.UNDELIVERABLE_POLICY_KEY, undeliverable, levels.policy_priority,
                                     {wire.DELIVERY_LIMIT.key: str(ERROR_QUEUE_DELIVERY_LIMIT), **target},
                                     {wire.DELIVERY_LIMIT.key: f"{path}.type", **target_source}))
    return DelayLevelsPlan(levels, adopt(tuple(queues), "queue", imports),
                           adopt(tuple(exchanges), "exchange", imports), adopt(tuple(bindings), "binding", imports),
                           adopt(tuple(policies), "policy", imports))


def levels_write_pattern(queues: Iterable[str]) -> str:
    """A topic permission's write pattern on each delay level: a delayed copy only to `queues`."""
    return rf"^([01]\.){{{naming.DELAY_WORDS}}}{exact_names(queues)[1:]}"


def topic_permissions(own: Iterable[RetryablePlan[Any]]) -> tuple[TopicGrant, ...]:
    """An application that consumes the `levels` queues `own` may publish to the delay levels, and a topic
    permission on each level keeps its keys to those queues: without one, RabbitMQ lets it route a copy into any
    queue of the vhost."""
    own = tuple(own)
    if not own:
        return ()
    write = Grant.pattern(levels_write_pattern(r.config.name for r in own))
    return tuple(TopicGrant(exchange, write=write, read=Grant.exactly(())) for exchange in own[0].delay_exchanges)


def consumer_exchanges(plan: RetryablePlan[Any]) -> tuple[str, ...]:
    """Every delay level, not only the top one (a consumer still on the contract of a smaller `max_delay`
    publishes to the top level of its time, which stays a level when `max_delay` grows), and parking."""
    return (*plan.delay_exchanges, plan.error_exchange)


def redrive_exchanges(plan: RetryablePlan[Any]) -> tuple[str, ...]:
    """An operator redrives a parked message to level 0 with a zero delay, which the delivery exchange routes to
    exactly `Q` (no other queue bound to the exchange it was first published to)."""
    return (plan.delay_exchanges[0],)


def retry_exchange(plan: RetryablePlan[Any]) -> str | None:
    return None


def contract(plan: RetryablePlan[LevelsRetry], vhost: str) -> dict[str, object]:
    levels, backoff = plan.delay_levels, plan.retry.backoff
    assert levels is not None  # `plan` refuses a levels queue without them
    return contract_of(plan, vhost, {
        "delay_exchange": plan.delay_exchange,
        "delay_exchanges": list(plan.delay_exchanges),
        "delay_unit_ms": levels.unit_ms,
        "delay_words": naming.DELAY_WORDS,
        "delay_levels": levels.levels,
        "max_delay_ms": levels.max_delay_ms,
        "routing_key_format": KEY_FORMAT,
        "backoff": {"initial_ms": backoff.initial_ms, "multiplier": backoff.multiplier,
                    "max_ms": backoff.max_ms, "jitter": backoff.jitter},
    }, NAME)


REVIEWED_CONTRACT_KEYS = frozenset({"backoff", "delay_levels", "routing_key_format", "delay_exchanges",
                                    "max_delay_ms", "delay_exchange", "delay_unit_ms"})
"""A consumer keeps its own back-off (any delay reaches its queue), caps a delay at its old `delay_levels` (they
still exist when there are more) and reads `max_delay_ms` and the key's description nowhere; `delay_exchanges`
are the levels up to `delay_exchange`, whose move is judged by `contract_breaks`."""


def _level(exchange: Any) -> int | None:
    """k of a delay level's exchange `rabbitmq-retry.delay.<k>`."""
    number = str(exchange).rsplit(".", 1)[-1]
    return int(number) if number.isdigit() else None


def _delay_exchange_break(old: Mapping[str, Any], new: Mapping[str, Any], kept: Mapping[str, str]) -> str | None:
    """The top level moved. Fewer levels delete the old top (at the step retire of the drain that keeps it, if
    one does); more keep it (a lower level now, which a consumer's application user may still write: it is granted
    every level), so nothing breaks."""
    before, after = old.get("delay_exchange"), new.get("delay_exchange")
    level, levels = _level(before), contract_number(new.get("delay_levels"))
    if level is not None and levels is not None and level < levels:
        return None
    if (migration := kept.get(str(before))) is not None:
        return (f"delay exchange {before} → {after}: migration {migration} keeps {before} until its step retire, so "
                "consumers still publishing delayed copies to it wait as before until then; from that step on they "
                "fail (channel error 404 NOT_FOUND): redeploy them with the new contract before it")
    return (f"delay exchange {before} → {after}: consumers still publishing delayed copies to {before} fail once "
            "it is deleted (channel error 404 NOT_FOUND)")


def contract_breaks(old: Mapping[str, Any], new: Mapping[str, Any],
                    kept: Mapping[str, str] | None = None) -> list[str]:
    """A top level deleted under running consumers, or a new delay unit they still count in."""
    breaks = []
    before, after = old.get("delay_exchange"), new.get("delay_exchange")
    if before != after:
        if before is None:
            breaks.append(f"delay exchange {before} → {after}: {REDEPLOY}")
        elif moved := _delay_exchange_break(old, new, kept or {}):
            breaks.append(moved)
    before, after = old.get("delay_unit_ms"), new.get("delay_unit_ms")
    if before != after and (contract_number(before) or 0) > 0 and (contract_number(after) or 0) > 0:
        ratio = (contract_number(after) or 0) / (contract_number(before) or 1)
        breaks.append(f"delay unit {contract_ms(before)} → {contract_ms(after)}: consumers on the old contract count "
                      f"delays in units of {contract_ms(before)}, which the levels now hold {contract_ms(after)} "
                      f"each: their retries wait {ratio:g} times as long until they are redeployed")
    elif before != after:
        breaks.append(f"delay unit {before} → {after}: {REDEPLOY}")
    return breaks


def path_problems(plan: RetryablePlan[Any], route: Route) -> list[Problem]:
    """A delayed copy of `Q` published to the top level goes first to the highest level its delay has a bit
    for, and with no bit left, back to exactly `Q`."""
    queue, levels = plan.config.name, plan.delay_levels
    assert levels is not None
    problems = []
    expected = {level: {naming.delay_level(level)} for level in range(levels.levels)}
    for level, units in ((None, 0), *((level, 2**level) for level in range(levels.levels))):
        key = naming.delay_routing_key(units, queue)
        reached = route(plan.delay_exchange, key)
        want = {queue} if level is None else expected[level]
        if reached != want:
            problems.append(Problem("", DELAY_MISROUTED, f'"{plan.delay_exchange}" routes a delay of {units} units for '
                                    f'"{queue}" to {sorted(reached or [])} instead of exactly {sorted(want)}'))
    return problems
