"""Retry topologies that applications declare at runtime, recognised in a vhost snapshot.

Pure: a `Snapshot` in, `Topology` records out. Each names the work queue, the objects the topology owns
(which `make adopt` plans to retire once drained), and what its retries were (delays, limit), so that a
retryable queue of ours can take over beside it. Recognised:
- **ours**: `Q`, `Q.retry`, `Q.wait.<n>`, `Q.requeue`, `Q.error` (a stack whose state was lost);
- **sneakers**: the maxretry handler of Sneakers/kicks: exchanges `Q-retry`, `Q-retry-requeue`, `Q-error`,
  queue `Q-retry` with a TTL dead-lettering to `Q-retry-requeue`, queue `Q-error`;
- **spring-cloud-stream**: the Rabbit binder's DLQ: `Q` dead-letters to exchange `DLX` with key `Q`, queue
  `Q.dlq` bound there;
- **dlx-ttl-loop**: a message `Q` dead-letters reaches one queue `T` with a TTL, which dead-letters it back to `Q`
  (a DLX and TTL loop), each route followed exactly (tools/lib/routing.py): exchange types, routing keys,
  exchange-to-exchange bindings. Loops that share an exchange (one retry exchange, a key per worker) each get their
  own route; an ambiguous route is no loop (`unclear`: the reason, for the report).

Dead-lettering and TTL count whether set by queue argument or by policy, as the preview checks compute them
(`components.plan.effective`: a policy's `dead-letter-exchange` applies only where the queue has no argument; of the
user policies that match the queue and may apply to its type, the highest priority wins).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from components.model import naming, wire
from components.model.plan_types import quorum_dead_lettering
from components.plan.effective import Effective, PolicyIndex, effective_settings
from tools.lib.inventory import policy_plan, queue_plan
from tools.lib.markdown import code, names
from tools.lib.routing import Message, arrival_keys, route
from tools.lib.snapshot import Snapshot

SNEAKERS_MAX_RETRIES = 5
"""Sneakers' default `retry_max_times`."""
SPRING_DELAYS_MS = (1000, 2000)
"""Spring Cloud Stream's defaults: maxAttempts 3, backOffInitialInterval 1 s, multiplier 2."""
LOOP_MAX_RETRIES = 5
"""What a DLX and TTL loop's successor (the consumer counted `x-death`), or a `levels` queue without its contract, is
planned with while `max_retries` is still a decision: never written to the stack file, where the decision is."""


@dataclass(frozen=True)
class DeadLetter:
    """A queue's effective dead-letter and TTL settings, and where each comes from."""

    exchange: str | None = None
    routing_key: str | None = None
    ttl_ms: int | None = None
    policy: str | None = None
    """The user policy that sets the dead-letter exchange, when the arguments do not."""


@dataclass(frozen=True)
class Topology:
    kind: str
    queue: str
    """The work queue applications consume."""
    queue_type: str
    delays_ms: tuple[int, ...]
    max_retries: int
    queues: tuple[str, ...]
    """Every queue of the topology, work queue first."""
    exchanges: tuple[str, ...] = ()
    """Exchanges of the topology, retired with it (a shared one, e.g. Spring's `DLX`, once no queue uses it)."""
    bindings: tuple[int, ...] = ()
    """Indexes into `Snapshot.bindings` of the bindings among its own objects."""
    policies: tuple[str, ...] = ()
    """User policies that wire it (dead-lettering or TTL by policy)."""
    error_queue: str | None = None
    """Where it parks messages that are out of retries."""
    notes: tuple[str, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)
    """For `ours`: max_length, delivery_limit, error_retention, error_max_length read from our policies."""
    backoff: Mapping[str, Any] = field(default_factory=dict)
    """For `levels`: the retry contract's backoff, in the config's shape."""
    required: tuple[str, ...] = ()
    """Retry keys the broker cannot tell (`max_retries` of a loop counted by its consumers): read from the retry
    contract when `make adopt` is given one, else written as decisions that `make plan` refuses until made."""


def applied(snapshot: Snapshot, queue: str) -> Effective:
    """`queue`'s settings as RabbitMQ gives them: its arguments under the user policy that applies to it, by the
    preview checks' own rules (`components.plan.effective`: pattern, apply-to, refused keys, highest priority)."""
    info = snapshot.queues[queue]
    policies = PolicyIndex(policy_plan(name, policy, "apply-to") for name, policy in snapshot.policies.items())
    return effective_settings(queue_plan(queue, dict(info.get("arguments") or {}), info.get("type")), policies,
                              PolicyIndex(()))[0]


def queue_type(snapshot: Snapshot, queue: str) -> str:
    info = snapshot.queues[queue]
    return str((info.get("arguments") or {}).get(wire.QUEUE_TYPE.argument) or info.get("type") or "classic")


def dead_letter(snapshot: Snapshot, queue: str) -> DeadLetter:
    found = applied(snapshot, queue)
    exchange, key, ttl = (found.get(row.key) for row in (wire.DEAD_LETTER_EXCHANGE, wire.DEAD_LETTER_ROUTING_KEY,
                                                          wire.MESSAGE_TTL))
    return DeadLetter(None if exchange is None else str(exchange.value), None if key is None else str(key.value),
                      None if ttl is None else int(ttl.value),
                      found.policy.name if exchange is not None and exchange.source and found.policy else None)


WORK_ARGUMENTS = frozenset({wire.QUEUE_TYPE.argument, wire.DEAD_LETTER_EXCHANGE.argument,
                            wire.DEAD_LETTER_ROUTING_KEY.argument, wire.QUORUM_INITIAL_GROUP_SIZE.argument})
"""Arguments of a recognised work queue that the strategy taking it over replaces with its own (the dead-letter
route into its retry path); any other argument (a length limit, a TTL, a priority …) would be dropped: then the
topology is not recognised, and its queues are kept as they are, every argument with them."""
WAIT_ARGUMENTS = WORK_ARGUMENTS | {wire.MESSAGE_TTL.argument}
"""Arguments of a recognised wait queue: its delay and its route back."""
PLAIN = frozenset({wire.QUEUE_TYPE.argument, wire.QUORUM_INITIAL_GROUP_SIZE.argument})
"""Arguments of a recognised error queue (it parks; the successor's error queue takes its messages)."""
QUORUM_DEAD_LETTERING = quorum_dead_lettering("quorum")
"""What this project's quorum queues always declare: a recognised quorum queue may hold exactly these."""


def replaceable(snapshot: Snapshot, queue: str, allowed: frozenset[str]) -> bool:
    """Whether every argument of `queue` is one the taking-over strategy keeps or replaces (nothing dropped)."""
    arguments = dict(snapshot.queues[queue].get("arguments") or {})
    if queue_type(snapshot, queue) == "quorum":
        for key, value in QUORUM_DEAD_LETTERING.items():
            if arguments.get(key) == value:
                arguments.pop(key)
    return set(arguments) <= allowed


def _bound(snapshot: Snapshot, source: str, destination: str) -> list[int]:
    return [i for i, b in enumerate(snapshot.bindings)
            if b["source"] == source and b["destination"] == destination and b["destination_type"] == "queue"]


def _ours(snapshot: Snapshot, q: str) -> Topology | None:
    retry_x, requeue_x, error_x = naming.derived_exchange_names(q)
    if dead_letter(snapshot, q).exchange != retry_x or not {retry_x, requeue_x} <= snapshot.exchanges.keys():
        return None
    tiers: list[str] = []
    while naming.wait_queue(q, len(tiers) + 1) in snapshot.queues:
        tiers.append(naming.wait_queue(q, len(tiers) + 1))
    if not tiers:
        return None
    delays = tuple(dead_letter(snapshot, t).ttl_ms or 0 for t in tiers)
    error = naming.error_queue(q) if naming.error_queue(q) in snapshot.queues else None
    queues = (q, *tiers, *([error] if error else []))
    exchanges = (retry_x, requeue_x, *([error_x] if error_x in snapshot.exchanges else []))
    bindings = [i for x in exchanges for d in queues for i in _bound(snapshot, x, d)]
    limits = _limits(snapshot, q, error)
    return Topology("ours", q, queue_type(snapshot, q), delays, len(delays), queues, exchanges, tuple(bindings),
                    tuple(p for p in (q, *tiers, error) if p and p in snapshot.policies), error,
                    ("max_retries is the consumers' setting, kept in the retry contract, not on the broker",), limits,
                    required=("max_retries",))


@dataclass(frozen=True)
class Levels:
    """This project's shared delay levels of a vhost (`delay_levels`), as the broker holds them."""

    unit_ms: int
    levels: int
    queue_type: str
    quorum_group_size: int | None
    objects: frozenset[str]
    """Every queue, exchange and policy named `rabbitmq-retry.delay.*`."""

    def owns(self, name: str) -> bool:
        return name in self.objects


def delay_levels(snapshot: Snapshot) -> Levels | None:
    """The vhost's delay levels (level queues `rabbitmq-retry.delay.<k>` from 0 up, and the delivery exchange), or
    None. The broker does not keep `max_delay`, only how many levels it took."""
    count = 0
    while naming.delay_level(count) in snapshot.queues:
        count += 1
    unit = dead_letter(snapshot, naming.delay_level(0)).ttl_ms if count else None
    if unit is None or naming.DELIVERY_EXCHANGE not in snapshot.exchanges:
        return None
    level0 = snapshot.queues[naming.delay_level(0)]
    group = (level0.get("arguments") or {}).get(wire.QUORUM_INITIAL_GROUP_SIZE.argument)
    prefix = naming.DELAY_PREFIX + "."
    objects = {n for n in (*snapshot.queues, *snapshot.exchanges, *snapshot.policies) if n.startswith(prefix)}
    return Levels(unit, count, queue_type(snapshot, naming.delay_level(0)), group if isinstance(group, int) else None,
                  frozenset(objects))


def _levels(snapshot: Snapshot, q: str) -> Topology | None:
    """A queue of strategy `levels`: bound from the delivery exchange for its own name, parking in `Q.error`."""
    error_x = naming.derived_exchange_names(q)[2]
    delivered = [i for i in _bound(snapshot, naming.DELIVERY_EXCHANGE, q)
                 if snapshot.bindings[i]["routing_key"] == naming.delivery_pattern(q)]
    if not delivered or delay_levels(snapshot) is None or dead_letter(snapshot, q).exchange != error_x:
        return None
    error = naming.error_queue(q) if naming.error_queue(q) in snapshot.queues else None
    queues = (q, *([error] if error else []))
    return Topology("levels", q, queue_type(snapshot, q), (), LOOP_MAX_RETRIES, queues, (error_x,),
                    (*delivered, *(i for d in queues for i in _bound(snapshot, error_x, d))),
                    tuple(p for p in queues if p in snapshot.policies), error,
                    ("its backoff and max_retries are the consumers' settings, kept in the retry contract, not on the "
                     "broker",), _limits(snapshot, q, error), required=("backoff", "max_retries"))


OWN_POLICY_KEYS = {wire.MAX_LENGTH.key, wire.OVERFLOW.key, wire.DELIVERY_LIMIT.key}
"""What the policy this project derives for a plain or retryable queue (named as the queue) may set."""


def own_policy(snapshot: Snapshot, q: str) -> Mapping[str, Any] | None:
    """The policy this project derives for queue `q` (named `q`, matching `q` alone, limits only), or None."""
    policy = snapshot.policies.get(q)
    if policy is None or policy.get("pattern") != f"^{re.escape(q)}$" or policy.get("apply-to") != "queues":
        return None
    definition = policy.get("definition") or {}
    if not set(definition) <= OWN_POLICY_KEYS or definition.get(wire.OVERFLOW.key, "reject-publish") != \
            "reject-publish" or (wire.OVERFLOW.key in definition) != (wire.MAX_LENGTH.key in definition):
        return None
    return policy


def _limits(snapshot: Snapshot, q: str, error: str | None) -> dict[str, int]:
    """max_length, delivery_limit, error_retention, error_max_length as our own policies of `q` and its error queue
    set them."""
    limits: dict[str, int] = {}
    for name, keys in ((q, {wire.MAX_LENGTH.key: "max_length", wire.DELIVERY_LIMIT.key: "delivery_limit"}),
                       (error, {wire.MESSAGE_TTL.key: "error_retention", wire.MAX_LENGTH.key: "error_max_length"})):
        definition = (snapshot.policies.get(name or "") or {}).get("definition") or {}
        limits |= {ours: int(definition[theirs]) for theirs, ours in keys.items() if theirs in definition}
    return limits


def _native(snapshot: Snapshot, q: str) -> Topology | None:
    """A quorum queue of strategy `native` (RabbitMQ 4.3's delayed retry): its own policy sets `delayed-retry-*` and
    the delivery limit (its max_retries); it parks in `Q.error`, and `Q.requeue` redrives to it alone."""
    _, requeue_x, error_x = naming.derived_exchange_names(q)
    policy = snapshot.policies.get(q) or {}
    definition = policy.get("definition") or {}
    delays = [definition.get(k.key) for k in (wire.DELAYED_RETRY_MIN, wire.DELAYED_RETRY_MAX)]
    limit = definition.get(wire.DELIVERY_LIMIT.key)
    if queue_type(snapshot, q) != "quorum" or policy.get("pattern") != f"^{re.escape(q)}$" \
            or definition.get(wire.DELAYED_RETRY_TYPE.key) != "failed" or not all(isinstance(d, int) for d in delays) \
            or not isinstance(limit, int) or dead_letter(snapshot, q).exchange != error_x:
        return None
    error = naming.error_queue(q) if naming.error_queue(q) in snapshot.queues else None
    queues = (q, *([error] if error else []))
    exchanges = tuple(x for x in (requeue_x, error_x) if x in snapshot.exchanges)
    limits = {k: v for k, v in _limits(snapshot, q, error).items() if k != "delivery_limit"}
    return Topology("native", q, "quorum", tuple(int(d) for d in delays if isinstance(d, int)), limit, queues,
                    exchanges,
                    tuple(i for x in exchanges for d in queues for i in _bound(snapshot, x, d)),
                    tuple(p for p in queues if p in snapshot.policies), error,
                    ("min and max delay and max_retries read from its policy (delayed-retry-*, delivery-limit)",),
                    limits)


def _sneakers(snapshot: Snapshot, q: str) -> Topology | None:
    retry, requeue, error = f"{q}-retry", f"{q}-retry-requeue", f"{q}-error"
    if dead_letter(snapshot, q).exchange != retry or retry not in snapshot.queues:
        return None
    wait = dead_letter(snapshot, retry)
    if wait.exchange != requeue or wait.ttl_ms is None:
        return None
    queues = (q, retry, *([error] if error in snapshot.queues else []))
    if not (replaceable(snapshot, q, WORK_ARGUMENTS) and replaceable(snapshot, retry, WAIT_ARGUMENTS)
            and (error not in snapshot.queues or replaceable(snapshot, error, PLAIN))):
        return None
    exchanges = tuple(x for x in (retry, requeue, error) if x in snapshot.exchanges)
    bindings = (*_bound(snapshot, retry, retry), *_bound(snapshot, error, error), *_bound(snapshot, requeue, q))
    return Topology("sneakers", q, queue_type(snapshot, q), (wait.ttl_ms,), SNEAKERS_MAX_RETRIES, queues, exchanges,
                    bindings, _policies(snapshot, queues), error if error in snapshot.queues else None,
                    (f"max_retries {SNEAKERS_MAX_RETRIES} is Sneakers' default retry_max_times: set yours",))


def _spring(snapshot: Snapshot, q: str) -> Topology | None:
    letter = dead_letter(snapshot, q)
    dlq = f"{q}.dlq"
    if letter.exchange != "DLX" or dlq not in snapshot.queues:
        return None
    parked = dead_letter(snapshot, dlq)
    if parked.ttl_ms is not None or parked.exchange is not None or not replaceable(snapshot, dlq, PLAIN) \
            or not replaceable(snapshot, q, WORK_ARGUMENTS):
        return None  # a DLQ with a TTL and a way back is a retry loop of its own (the binder's dlqTtl): kept
    bindings = tuple(i for i in _bound(snapshot, "DLX", dlq) if snapshot.bindings[i]["routing_key"] == q)
    if not bindings:
        return None
    return Topology("spring-cloud-stream", q, queue_type(snapshot, q), SPRING_DELAYS_MS, len(SPRING_DELAYS_MS),
                    (q, dlq), ("DLX",), bindings, _policies(snapshot, (q, dlq)), dlq,
                    ("the binder retried in memory (maxAttempts 3, back-off 1 s × 2): these delays are its "
                     "defaults; set yours", "exchange DLX is shared by every destination of the binder: retire it "
                     "when no queue dead-letters to it any more"))


def trace(snapshot: Snapshot, q: str) -> Topology | str | None:
    """The DLX and TTL loop of `q`, followed exactly with the routing model: a message `q` dead-letters (with its
    dead-letter routing key, else with each key it may arrive with) must reach one queue `T` alone, for every key,
    and `T` (with a TTL) must dead-letter it back to `q`. None when `q` dead-letters nowhere or into no such loop;
    the reason, when the route is ambiguous (some keys only, or more than one queue)."""
    letter = dead_letter(snapshot, q)
    if not letter.exchange or letter.exchange not in snapshot.exchanges:
        return None
    sent = Message(arrival_keys(snapshot, q)).dead_lettered(letter.routing_key)
    out = route(snapshot, letter.exchange, sent)
    waits = sorted(w for w in out.queues | out.partly if w != q and dead_letter(snapshot, w).ttl_ms is not None)
    if not waits:
        return None
    where = f"a message it dead-letters to exchange {code(letter.exchange)} with key(s) {names(sent.routing_keys)}"
    if out.ambiguous or len(out.queues) != 1:
        reached = names(sorted(out.queues)) or "none"
        partly = f"; for some keys only: {names(sorted(out.partly))}" if out.partly else ""
        return f"{where} reaches, for every key: {reached}{partly}: not one wait queue, so not taken over"
    wait = waits[0]
    back = dead_letter(snapshot, wait)
    if not back.exchange:
        return None  # back by the work queue's own name (the default exchange): kept, it works as it is
    returned = route(snapshot, back.exchange, sent.dead_lettered(back.routing_key))
    if q not in returned.queues or returned.partly:
        why = (f"for some keys only (and {names(sorted(returned.partly))})" if q in returned.partly else "not to it")
        return f"{where} waits in {code(wait)}, which dead-letters {why}: not taken over"
    if not (replaceable(snapshot, q, WORK_ARGUMENTS) and replaceable(snapshot, wait, WAIT_ARGUMENTS)):
        return None
    return Topology("dlx-ttl-loop", q, queue_type(snapshot, q), (back.ttl_ms or 0,), LOOP_MAX_RETRIES, (q, wait),
                    tuple(sorted(out.exchanges)), tuple(sorted(out.bindings)), _policies(snapshot, (q, wait)), None,
                    ("the loop had no limit of its own (consumers count x-death): max_retries is a decision",
                     "messages past the limit were dropped or kept by the consumer: the new queue parks "
                     "them in its error queue"), required=("max_retries",))


def _loop(snapshot: Snapshot, q: str) -> Topology | None:
    traced = trace(snapshot, q)
    return traced if isinstance(traced, Topology) else None


def _policies(snapshot: Snapshot, queues: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({letter.policy for q in queues if (letter := dead_letter(snapshot, q)).policy}))


RECOGNISERS = (_ours, _levels, _native, _sneakers, _spring, _loop)


def unclear(snapshot: Snapshot, topologies: list[Topology]) -> dict[str, str]:
    """Queues not in a recognised topology whose retry route is ambiguous, each with the reason (kept as they
    are)."""
    claimed = {q for t in topologies for q in t.queues}
    return {q: why for q in sorted(snapshot.queues) if q not in claimed and isinstance(why := trace(snapshot, q), str)}


def recognise(snapshot: Snapshot) -> list[Topology]:
    """Every topology found, each queue in at most one (the first recogniser that claims it wins)."""
    found: list[Topology] = []
    claimed: set[str] = set()
    for recogniser in RECOGNISERS:
        for q in sorted(snapshot.queues):
            if q in claimed:
                continue
            topology = recogniser(snapshot, q)
            if topology is not None and not claimed & set(topology.queues):
                found.append(topology)
                claimed |= set(topology.queues)
    return found
