"""The topology plan: which queues, exchanges, bindings and policies a config needs, as plain data.

Pure and Pulumi-free. The components turn a plan into `pulumi_rabbitmq` resources one to one, so
what is decided here is what `pulumi up` applies. The rules (docs/design.md §2):
- wiring that never changes (queue type, dead-letter exchange and routing key, quorum
  at-least-once dead-lettering) goes in queue arguments, where no other policy can remove it;
- everything a user tunes (TTLs, limits) goes in one exactly-anchored policy per queue, which the
  provider updates in place: editing a delay never replaces a queue.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar
from urllib.parse import unquote_plus

from . import naming
from .config import Binding, ConfigError, DelayLevels, Policy, Queue, TopicPermission, Vhost
from .layout import logical_names as logical_names

QueueRole = Literal["input", "wait", "error", "plain", "delay"]
NATIVE_RETRY_CALL = "basic.reject(requeue=true)"
"""The only call RabbitMQ 4.3 counts toward the delivery limit and delays: `basic.nack(requeue=true)` is a
"return" that neither counts nor waits, so a nack loop never ends."""
NATIVE_ATTEMPT_HEADER = "x-delivery-count"
"""Set by the broker on a redelivery: the failed deliveries so far (absent on the first delivery)."""
LEVELS_KEY_FORMAT = ("the delay in units, ceil(delay_ms / delay_unit_ms) capped at 2^delay_levels - 1, as "
                     "delay_words binary digits, most significant first, each followed by '.', then the queue name")
"""How a `levels` contract tells a client in any language to build the routing key of a delayed copy."""
ERROR_QUEUE_DELIVERY_LIMIT = 1_000_000
"""Quorum error queues: high enough that no parked message ever reaches it (see _error_policies)."""


@dataclass(frozen=True)
class QueuePlan:
    key: str
    """Logical key: the child's Pulumi name is f"{component}-{key}"."""
    name: str
    queue_type: str
    arguments: Mapping[str, str | int]
    role: QueueRole
    import_id: str | None = None
    """The provider ID Pulumi adopts it under (`import_`), from the vhost's `import` config."""

    @property
    def arguments_json(self) -> str:
        """Typed arguments as the provider must receive them (sorted keys, integers as numbers)."""
        return json.dumps(dict(self.arguments), sort_keys=True)


@dataclass(frozen=True)
class ExchangePlan:
    key: str
    name: str
    type: str
    import_id: str | None = None
    arguments: Mapping[str, str] = field(default_factory=dict)
    """String arguments (`alternate-exchange`), fixed at creation: changing one replaces the exchange."""


@dataclass(frozen=True)
class BindingPlan:
    key: str
    source: str
    destination: str
    routing_key: str = ""
    arguments: Mapping[str, str | int | bool] = field(default_factory=dict)
    source_external: bool = False
    import_id: str | None = None
    destination_type: Literal["queue", "exchange"] = "queue"

    @property
    def arguments_json(self) -> str | None:
        return json.dumps(dict(self.arguments), sort_keys=True) if self.arguments else None


@dataclass(frozen=True)
class PolicyPlan:
    key: str
    name: str
    pattern: str
    priority: int
    definition: Mapping[str, str]
    """String values, as the provider's schema wants; it sends digit strings as JSON integers."""
    apply_to: str = "queues"
    sources: Mapping[str, str] = field(default_factory=dict)
    """Config key path that sets each definition key, e.g. "vhosts[0].queues[2].delivery_limit"."""
    source: str = ""
    """Config key path of the policy entry ("" for the policies the plan derives for a queue)."""
    import_id: str | None = None


@dataclass(frozen=True)
class Tier:
    number: int
    delay_ms: int
    queue: str
    routing_key: str


@dataclass(frozen=True)
class RetryablePlan:
    """Everything one retryable queue owns."""

    config: Queue
    tiers: tuple[Tier, ...]
    queues: tuple[QueuePlan, ...]
    exchanges: tuple[ExchangePlan, ...]
    bindings: tuple[BindingPlan, ...]
    policies: tuple[PolicyPlan, ...]

    @property
    def retry_exchange(self) -> str:
        return naming.retry_exchange(self.config.name)

    @property
    def requeue_exchange(self) -> str:
        return naming.requeue_exchange(self.config.name)

    @property
    def error_exchange(self) -> str:
        return naming.error_exchange(self.config.name)

    @property
    def error_queue(self) -> str:
        return naming.error_queue(self.config.name)

    @property
    def strategy(self) -> str:
        assert self.config.retry is not None
        return self.config.retry.strategy

    @property
    def delay_exchange(self) -> str:
        """`levels`: the top level's exchange; a consumer publishes a delayed copy to the level of its delay's
        highest bit (`delay_exchanges`), at most this one."""
        return self.delay_exchanges[-1]

    @property
    def levels(self) -> DelayLevels:
        assert self.config.retry is not None and self.config.retry.levels is not None
        return self.config.retry.levels

    @property
    def consumer_exchanges(self) -> tuple[str, ...]:
        """Exchanges a consumer of the queue publishes to: retries (tiers: the retry exchange, levels: every delay
        level, see `delay_exchanges`) and parking."""
        if self.strategy == "native":
            return (self.error_exchange,)
        if self.strategy == "levels":
            return (*self.delay_exchanges, self.error_exchange)
        return (self.retry_exchange, self.error_exchange)

    @property
    def delay_exchanges(self) -> tuple[str, ...]:
        """`levels`: every level's exchange, not only the top one. A consumer still on the contract of a smaller
        `max_delay` publishes to the top level of its time, which stays a level when `max_delay` grows."""
        return tuple(naming.delay_level(level) for level in range(self.levels.levels))

    def contract(self, vhost: str) -> dict[str, object]:
        """What a consumer needs to retry and park a message: the stack exports this per queue. A `tiers`
        contract names no strategy (the clients that predate strategies read it as `tiers`)."""
        retry = self.config.retry
        assert retry is not None
        if retry.strategy == "levels":
            assert retry.backoff is not None
            levels, backoff = self.levels, retry.backoff
            return {
                "strategy": "levels",
                "vhost": vhost,
                "queue": self.config.name,
                "queue_type": self.config.queue_type,
                "delay_exchange": self.delay_exchange,
                "delay_exchanges": list(self.delay_exchanges),
                "delay_unit_ms": levels.unit_ms,
                "delay_words": naming.DELAY_WORDS,
                "delay_levels": levels.levels,
                "max_delay_ms": levels.max_delay_ms,
                "routing_key_format": LEVELS_KEY_FORMAT,
                "backoff": {"initial_ms": backoff.initial_ms, "multiplier": backoff.multiplier,
                            "max_ms": backoff.max_ms, "jitter": backoff.jitter},
                "max_retries": retry.max_retries,
                "delivery_limit": self.config.delivery_limit,
                "attempt_header": naming.ATTEMPT_HEADER,
                "error_exchange": self.error_exchange,
                "error_queue": self.error_queue,
            }
        if retry.strategy == "native":
            return {
                "strategy": "native",
                "vhost": vhost,
                "queue": self.config.name,
                "queue_type": self.config.queue_type,
                "retry_call": NATIVE_RETRY_CALL,
                "min_delay_ms": retry.min_delay_ms,
                "max_delay_ms": retry.max_delay_ms,
                "max_retries": retry.max_retries,
                "delivery_limit": self.config.delivery_limit,
                "attempt_header": NATIVE_ATTEMPT_HEADER,
                "error_exchange": self.error_exchange,
                "error_queue": self.error_queue,
            }
        return {
            "vhost": vhost,
            "queue": self.config.name,
            "queue_type": self.config.queue_type,
            "retry_exchange": self.retry_exchange,
            "reject_routes_to": self.tiers[0].routing_key,
            "tiers": [{"routing_key": t.routing_key, "queue": t.queue, "delay_ms": t.delay_ms} for t in self.tiers],
            "max_retries": retry.max_retries,
            "delivery_limit": self.config.delivery_limit,
            "attempt_header": naming.ATTEMPT_HEADER,
            "error_exchange": self.error_exchange,
            "error_queue": self.error_queue,
        }


@dataclass(frozen=True)
class DelayLevelsPlan:
    """A vhost's shared delay levels (strategy `levels`): level k is a topic exchange and a queue that holds a
    message `unit × 2^k`. The exchange of level k sends a message whose bit k is 1 to its queue and one whose bit
    is 0 on to level k-1; the queue dead-letters to level k-1 with the same key; after level 0 the delivery
    exchange routes the message to its queue."""

    config: DelayLevels
    queues: tuple[QueuePlan, ...]
    """Level 0 first, then the undeliverable queue."""
    exchanges: tuple[ExchangePlan, ...]
    """The delivery exchange, the levels (level 0 first), then the undeliverable exchange."""
    bindings: tuple[BindingPlan, ...]
    policies: tuple[PolicyPlan, ...]

    @property
    def top_exchange(self) -> str:
        return naming.delay_level(self.config.levels - 1)

    @property
    def level_queues(self) -> tuple[QueuePlan, ...]:
        """The level queues, level 0 first (without the undeliverable queue)."""
        return tuple(q for q in self.queues if q.role == "delay")


@dataclass(frozen=True)
class PermissionPlan:
    """An application's or operator's derived permissions: it declares nothing, writes and reads exactly
    what its job needs."""

    key: str
    user: str
    configure: str
    write: str
    read: str
    topic: tuple[TopicPermission, ...] = ()

    @property
    def user_key(self) -> str:
        return f"user-{self.user}"

    @property
    def topic_key(self) -> str:
        return f"topic-{self.key}"


@dataclass(frozen=True)
class VhostPlan:
    config: Vhost
    exchanges: tuple[ExchangePlan, ...]
    queues: tuple[QueuePlan, ...]
    """Plain queues only; retryable queues are in `retryables`."""
    policies: tuple[PolicyPlan, ...]
    bindings: tuple[BindingPlan, ...]
    """Config bindings of every queue, plain and retryable, to the vhost's or external exchanges."""
    retryables: tuple[RetryablePlan, ...]
    operator_policies: tuple[PolicyPlan, ...] = ()
    permissions: tuple[PermissionPlan, ...] = ()
    delay_levels: DelayLevelsPlan | None = None
    """The shared delay levels, when a queue has strategy `levels`."""


def exact_names(names: Iterable[str]) -> str:
    """A permission regex that matches exactly `names` (`^$`, nothing, when empty)."""
    unique = sorted(set(names))
    return f"^({'|'.join(re.escape(n) for n in unique)})$" if unique else "^$"


def levels_write_pattern(queues: Iterable[str]) -> str:
    """A topic permission's write pattern on each delay level: a delayed copy only to `queues`."""
    return rf"^([01]\.){{{naming.DELAY_WORDS}}}{exact_names(queues)[1:]}"


def _quorum_dead_lettering(queue_type: str) -> dict[str, str]:
    """Without both keys a quorum queue silently dead-letters at-most-once."""
    if queue_type != "quorum":
        return {}
    return {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


def _limit_sources(path: str) -> dict[str, str]:
    return {"max-length": f"{path}.max_length", "overflow": f"{path}.max_length",
            "delivery-limit": f"{path}.delivery_limit"}


def _limits(queue: Queue) -> dict[str, str]:
    definition: dict[str, str] = {}
    if queue.max_length is not None:
        definition["max-length"] = str(queue.max_length)
        # The default, drop-head, would silently drop (or dead-letter into the retry loop) the oldest
        # message; reject-publish nacks the publisher instead.
        definition["overflow"] = "reject-publish"
    if queue.delivery_limit is not None:
        definition["delivery-limit"] = str(queue.delivery_limit)
    return definition


def _policy(key: str, queue_name: str, priority: int, definition: dict[str, str],
            sources: Mapping[str, str]) -> PolicyPlan:
    return PolicyPlan(key=key, name=queue_name, pattern=naming.exact_pattern(queue_name), priority=priority,
                      definition=definition, sources={k: sources[k] for k in definition})


def _config_policy(key: str, policy: Policy, path: str) -> PolicyPlan:
    return PolicyPlan(key, policy.name, policy.pattern, policy.priority, dict(policy.definition), policy.apply_to,
                      sources={k: f"{path}.definition.{k}" for k in policy.definition}, source=path)


def plan_retryable(queue: Queue, path: str = "queue") -> RetryablePlan:
    """Input queue, retry exchange, one wait queue per tier, requeue exchange, error exchange and queue.
    `path`: the queue's config key path, named by the checks."""
    retry = queue.retry
    if retry is None:
        raise ValueError(f"queue {queue.name!r} has no retry block")
    if retry.strategy == "native":
        return _plan_native(queue, path)
    if retry.strategy == "levels":
        return _plan_levels(queue, path)
    name, qtype = queue.name, queue.queue_type
    tiers = tuple(Tier(n, delay, naming.wait_queue(name, n), naming.wait_routing_key(n))
                  for n, delay in enumerate(retry.delays_ms, start=1))
    retry_x, requeue_x, error_x = (naming.retry_exchange(name), naming.requeue_exchange(name),
                                   naming.error_exchange(name))
    input_queue = QueuePlan("input", name, qtype, {
        "x-queue-type": qtype,
        "x-dead-letter-exchange": retry_x,
        "x-dead-letter-routing-key": tiers[0].routing_key,
        **_quorum_dead_lettering(qtype),
    }, "input")
    wait_queues = tuple(QueuePlan(f"wait-{t.number}", t.queue, qtype, {
        "x-queue-type": qtype,
        "x-dead-letter-exchange": requeue_x,
        **_quorum_dead_lettering(qtype),
    }, "wait") for t in tiers)
    error = QueuePlan("error", naming.error_queue(name), qtype, {"x-queue-type": qtype}, "error")
    exchanges = (ExchangePlan("retry-exchange", retry_x, "direct"),
                 ExchangePlan("requeue-exchange", requeue_x, "fanout"),
                 ExchangePlan("error-exchange", error_x, "fanout"))
    bindings = (
        *(BindingPlan(f"wait-{t.number}-binding", retry_x, t.queue, t.routing_key) for t in tiers),
        # The requeue exchange is bound to this queue only: a retry never reaches other queues
        # bound to the same source exchange.
        BindingPlan("requeue-binding", requeue_x, name),
        BindingPlan("error-binding", error_x, error.name),
    )
    policies = [_policy(f"wait-{t.number}-policy", t.queue, queue.policy_priority,
                        {"message-ttl": str(t.delay_ms)}, {"message-ttl": f"{path}.retry.delays[{t.number - 1}]"})
                for t in tiers]
    if limits := _limits(queue):
        policies.insert(0, _policy("policy", name, queue.policy_priority, limits, _limit_sources(path)))
    policies += _error_policies(queue, path)
    imports = queue.imports
    return RetryablePlan(config=queue, tiers=tiers, queues=_adopt((input_queue, *wait_queues, error), "queue", imports),
                         exchanges=_adopt(exchanges, "exchange", imports),
                         bindings=_adopt(bindings, "binding", imports),
                         policies=_adopt(tuple(policies), "policy", imports))


def _error_queue_plans(queue: Queue) -> tuple[QueuePlan, ExchangePlan, BindingPlan]:
    """The error queue, its fanout exchange and their binding: the same for every strategy."""
    error = QueuePlan("error", naming.error_queue(queue.name), queue.queue_type,
                      {"x-queue-type": queue.queue_type}, "error")
    error_x = naming.error_exchange(queue.name)
    return error, ExchangePlan("error-exchange", error_x, "fanout"), BindingPlan("error-binding", error_x, error.name)


def _plan_native(queue: Queue, path: str) -> RetryablePlan:
    """RabbitMQ 4.3's delayed retry: a rejected message (`basic.reject(requeue=true)`) waits in the input
    queue itself, `min(min_delay × n, max_delay)` before its n-th redelivery; past the delivery limit
    (`max_retries`) the broker dead-letters it, at least once, to the error exchange. The delays and the limit
    live in the queue's policy, so editing them never replaces the queue. Integers only: a string
    `delayed-retry-min` silently turns the feature off, and the provider sends digit strings as integers."""
    retry = queue.retry
    assert retry is not None and retry.min_delay_ms is not None and retry.max_delay_ms is not None
    error, error_exchange, error_binding = _error_queue_plans(queue)
    input_queue = QueuePlan("input", queue.name, queue.queue_type, {
        "x-queue-type": queue.queue_type,
        "x-dead-letter-exchange": error_exchange.name,
        **_quorum_dead_lettering(queue.queue_type),
    }, "input")
    definition = {**_limits(queue), "delayed-retry-type": "failed", "delayed-retry-min": str(retry.min_delay_ms),
                  "delayed-retry-max": str(retry.max_delay_ms)}
    sources = {**_limit_sources(path), "delivery-limit": f"{path}.retry.max_retries",
               "delayed-retry-type": f"{path}.retry.strategy", "delayed-retry-min": f"{path}.retry.min_delay",
               "delayed-retry-max": f"{path}.retry.max_delay"}
    policies = (_policy("policy", queue.name, queue.policy_priority, definition, sources),
                *_error_policies(queue, path))
    imports = queue.imports
    return RetryablePlan(config=queue, tiers=(), queues=_adopt((input_queue, error), "queue", imports),
                         exchanges=_adopt((error_exchange,), "exchange", imports),
                         bindings=_adopt((error_binding,), "binding", imports),
                         policies=_adopt(policies, "policy", imports))


def _plan_levels(queue: Queue, path: str) -> RetryablePlan:
    """A delay per message through the vhost's shared delay levels (`plan_delay_levels`): the consumer publishes
    a copy to the top level with the delay and this queue's name in the routing key, and the delivery exchange
    routes it back here only. A rejected message, or one past the delivery limit, dead-letters to the error
    exchange: nothing the consumer gives up on is dropped."""
    error, error_exchange, error_binding = _error_queue_plans(queue)
    input_queue = QueuePlan("input", queue.name, queue.queue_type, {
        "x-queue-type": queue.queue_type,
        "x-dead-letter-exchange": error_exchange.name,
        **_quorum_dead_lettering(queue.queue_type),
    }, "input")
    delivery = BindingPlan("delivery-binding", naming.DELIVERY_EXCHANGE, queue.name,
                           naming.delivery_pattern(queue.name))
    policies = [*([_policy("policy", queue.name, queue.policy_priority, limits, _limit_sources(path))]
                  if (limits := _limits(queue)) else []), *_error_policies(queue, path)]
    imports = queue.imports
    return RetryablePlan(config=queue, tiers=(), queues=_adopt((input_queue, error), "queue", imports),
                         exchanges=_adopt((error_exchange,), "exchange", imports),
                         bindings=_adopt((error_binding, delivery), "binding", imports),
                         policies=_adopt(tuple(policies), "policy", imports))


def plan_delay_levels(levels: DelayLevels, imports: Iterable[str] | None = None,
                      path: str = "delay_levels") -> DelayLevelsPlan:
    """Level k (0 ≤ k < levels): exchange and queue `rabbitmq-retry.delay.<k>`, the queue's TTL `unit × 2^k` in
    its policy (a changed unit updates in place). Every routing key has DELAY_WORDS bit words, so a longer
    `max_delay` only adds levels on top: no existing binding changes under a waiting message. `imports`: the
    vhost's `import` entries (default: those the parsed levels carry, as the DelayLevels component plans them)."""
    imports = levels.imports if imports is None else tuple(imports)
    qtype = levels.queue_type
    below = [naming.DELIVERY_EXCHANGE, *(naming.delay_level(k) for k in range(levels.levels - 1))]
    queues: list[QueuePlan] = []
    exchanges = [ExchangePlan("deliver", naming.DELIVERY_EXCHANGE, "topic",
                              arguments={"alternate-exchange": naming.UNDELIVERABLE})]
    bindings: list[BindingPlan] = []
    policies: list[PolicyPlan] = []
    for level in range(levels.levels):
        name, key = naming.delay_level(level), f"level-{level}"
        queues.append(QueuePlan(key, name, qtype, {"x-queue-type": qtype, "x-dead-letter-exchange": below[level],
                                                   **_quorum_dead_lettering(qtype)}, "delay"))
        exchanges.append(ExchangePlan(f"{key}-exchange", name, "topic"))
        bindings += [BindingPlan(f"{key}-wait", name, name, naming.delay_level_pattern(level, "1")),
                     BindingPlan(f"{key}-pass", name, below[level], naming.delay_level_pattern(level, "0"),
                                 destination_type="exchange")]
        policies.append(_policy(f"{key}-policy", name, levels.policy_priority,
                                {"message-ttl": str(levels.unit_ms * 2**level)}, {"message-ttl": f"{path}.unit"}))
    # A copy whose queue is gone (or was never bound) when its delay is over goes to the undeliverable queue
    # through the delivery exchange's alternate exchange, where an unroutable dead-letter would be dropped.
    undeliverable = naming.UNDELIVERABLE
    queues.append(QueuePlan("undeliverable", undeliverable, qtype, {"x-queue-type": qtype}, "error"))
    exchanges.append(ExchangePlan("undeliverable-exchange", undeliverable, "fanout"))
    bindings.append(BindingPlan("undeliverable-binding", undeliverable, undeliverable))
    if qtype == "quorum":
        # As for the error queues (`_error_policies`): RabbitMQ 4's default delivery limit of 20 would drop a
        # copy that readers returned 20 times, since this queue has nowhere to dead-letter.
        policies.append(_policy("undeliverable-policy", undeliverable, levels.policy_priority,
                                {"delivery-limit": str(ERROR_QUEUE_DELIVERY_LIMIT)},
                                {"delivery-limit": f"{path}.type"}))
    return DelayLevelsPlan(levels, _adopt(tuple(queues), "queue", imports),
                           _adopt(tuple(exchanges), "exchange", imports), _adopt(tuple(bindings), "binding", imports),
                           _adopt(tuple(policies), "policy", imports))


def _error_policies(queue: Queue, path: str) -> list[PolicyPlan]:
    """The error queue's retention and length limit, when the retry block sets them."""
    retry = queue.retry
    assert retry is not None
    error_definition = {}
    if retry.error_retention_ms is not None:
        error_definition["message-ttl"] = str(retry.error_retention_ms)
    if retry.error_max_length is not None:
        error_definition["max-length"] = str(retry.error_max_length)
        # A full error queue nacks the parking publish (the client then keeps the message in Q); the
        # default, drop-head, would silently drop the oldest parked message.
        error_definition["overflow"] = "reject-publish"
    if queue.queue_type == "quorum":
        # RabbitMQ 4 gives a quorum queue a delivery limit of 20 and the error queue has nowhere to
        # dead-letter: a parked message returned 20 times by crashed readers would be dropped. 3.10
        # refuses -1 (unlimited), so the limit is set out of reach instead.
        error_definition["delivery-limit"] = str(ERROR_QUEUE_DELIVERY_LIMIT)
    if not error_definition:
        return []
    return [_policy("error-policy", naming.error_queue(queue.name), queue.policy_priority, error_definition, {
        "message-ttl": f"{path}.retry.error_retention", "max-length": f"{path}.retry.error_max_length",
        "delivery-limit": f"{path}.type", "overflow": f"{path}.retry.error_max_length"})]


Importable = QueuePlan | ExchangePlan | BindingPlan | PolicyPlan
E = TypeVar("E", QueuePlan, ExchangePlan, BindingPlan, PolicyPlan)


def _binding_id_matches(object_id: str, binding: BindingPlan) -> bool:
    """`vhost/source/destination/queue/properties_key` (the vhost part is checked by the caller): the
    properties key is the URL-encoded routing key, then `~` and a hash of the arguments when there are any
    (`~` alone for an empty key without arguments)."""
    parts = object_id.split("/")
    if len(parts) != 5 or parts[1:4] != [binding.source, binding.destination, binding.destination_type]:
        return False
    key, tilde, arguments_hash = parts[4].partition("~")
    if binding.arguments:
        return bool(tilde and arguments_hash) and unquote_plus(key) == binding.routing_key
    return (parts[4] == "~") if binding.routing_key == "" else (not tilde and unquote_plus(key) == binding.routing_key)


def _matches(kind: str, object_id: str, entry: Importable) -> bool:
    if isinstance(entry, BindingPlan):
        return kind == "binding" and _binding_id_matches(object_id, entry)
    return object_id.rsplit("@", 1)[0] == entry.name


def _adopt(entries: tuple[E, ...], kind: str, imports: Iterable[str]) -> tuple[E, ...]:
    """`entries` with the import ID of each one that an `import` entry (`<kind> <ID>`) names."""
    wanted = [tuple(entry.split(" ", 1)) for entry in imports]
    return tuple(next((replace(entry, import_id=object_id) for k, object_id in wanted
                       if k == kind and _matches(kind, object_id, entry)), entry) for entry in entries)


def _unmatched_imports(plan: VhostPlan, path: str) -> list[tuple[str, str]]:
    """Every `import` entry must adopt exactly one planned object: an ID nothing declares would never be
    imported, one that two objects match would be imported twice."""
    vhost = plan.config.name
    escaped = vhost.replace("%", "%25").replace("/", "%2F")
    adopted: list[tuple[str, str]] = [
        *(("queue", q.import_id) for q in plan.queues if q.import_id),
        *(("exchange", x.import_id) for x in plan.exchanges if x.import_id),
        *(("binding", b.import_id) for b in plan.bindings if b.import_id),
        *(("policy", p.import_id) for p in plan.policies if p.import_id),
        *(("operator_policy", p.import_id) for p in plan.operator_policies if p.import_id),
        *((kind, e.import_id) for r in (*plan.retryables, *((plan.delay_levels,) if plan.delay_levels else ()))
          for kind, group in (("queue", r.queues), ("exchange", r.exchanges), ("binding", r.bindings),
                              ("policy", r.policies)) for e in group if e.import_id)]
    problems = []
    for i, entry in enumerate(plan.config.imports):
        kind, object_id = entry.split(" ", 1)
        count = adopted.count((kind, object_id))
        if kind == "binding" and not object_id.startswith(f"{escaped}/"):
            problems.append((f"{path}.import[{i}]", f"{object_id!r} is not a binding ID of this vhost "
                             f"({escaped}/source/destination/queue/properties_key)"))
        elif count == 0:
            problems.append((f"{path}.import[{i}]", f"no {kind.replace('_', ' ')} this vhost declares has the ID "
                             f"{object_id!r}; declare it exactly as the broker holds it, or remove the entry"))
        elif count > 1:
            problems.append((f"{path}.import[{i}]", f"{count} planned objects match {object_id!r}; an object can be "
                             "imported only once"))
    return problems


def _config_binding(queue: Queue, binding: Binding) -> BindingPlan:
    return BindingPlan(naming.binding_key(queue.name, binding.exchange, binding.routing_key, binding.arguments),
                       binding.exchange, queue.name, binding.routing_key, dict(binding.arguments),
                       source_external=binding.external)


def _operator_permissions(user: str, retryables: Iterable[RetryablePlan]) -> PermissionPlan:
    """An operator of parked messages (`rabbitmq-retry parked …`): reads (gets, acks, purges) every error
    queue, and publishes a redrive to where the messages came from (the exchanges the input queues are bound
    to) or to `Q.requeue`, which reaches only `Q`. It cannot consume an input queue or publish elsewhere."""
    retryables = tuple(retryables)
    return PermissionPlan(
        key=f"permissions-{user}",
        user=user,
        configure="^$",
        write=exact_names([*(b.exchange for r in retryables for b in r.config.bindings),
                           *(r.requeue_exchange for r in retryables if r.strategy == "tiers")]),
        read=exact_names(r.error_queue for r in retryables),
    )


def _delay_topic_permissions(consumes: Iterable[str],
                             retryables: Mapping[str, RetryablePlan]) -> tuple[TopicPermission, ...]:
    """An application that consumes `levels` queues may publish to the delay levels, and a topic permission on
    each level keeps its keys to those queues: without one, RabbitMQ lets it route a copy into any queue of the
    vhost."""
    own = [retryables[q] for q in consumes if q in retryables and retryables[q].strategy == "levels"]
    if not own:
        return ()
    write = levels_write_pattern(r.config.name for r in own)
    return tuple(TopicPermission(exchange, write=write, read="^$") for exchange in own[0].delay_exchanges)


def plan_vhost(vhost: Vhost, path: str = "vhost") -> VhostPlan:
    """`path`: the vhost's config key path, e.g. "vhosts[0]", named by the checks."""
    exchanges = tuple(ExchangePlan(f"exchange-{e.name}", e.name, e.type) for e in vhost.exchanges)
    plain = [(i, q) for i, q in enumerate(vhost.queues) if q.retry is None]
    queues = tuple(QueuePlan(f"queue-{q.name}", q.name, q.queue_type, {"x-queue-type": q.queue_type}, "plain")
                   for _, q in plain)
    policies = (*(_policy(f"queue-{q.name}-policy", q.name, q.policy_priority, limits,
                          _limit_sources(f"{path}.queues[{i}]"))
                  for i, q in plain if (limits := _limits(q))),
                *(_config_policy(f"policy-{p.name}", p, f"{path}.policies[{j}]") for j, p in enumerate(vhost.policies)))
    bindings = tuple(_config_binding(q, b) for q in vhost.queues for b in q.bindings)
    retryables = tuple(plan_retryable(q, f"{path}.queues[{i}]") for i, q in enumerate(vhost.queues)
                       if q.retry is not None)
    operator_policies = tuple(_config_policy(f"operator-policy-{p.name}", p, f"{path}.operator_policies[{j}]")
                              for j, p in enumerate(vhost.operator_policies))
    retryable_queues = {r.config.name: r for r in retryables}
    permissions = tuple(PermissionPlan(
        key=f"permissions-{app.user}",
        user=app.user,
        configure="^$",
        # Retries (stepped republish, levels) and parking publish to the consumed queue's own exchanges.
        write=exact_names([*app.publishes, *(x for q in app.consumes if q in retryable_queues
                                             for x in retryable_queues[q].consumer_exchanges)]),
        read=exact_names(app.consumes),
        topic=(*app.topic_permissions, *_delay_topic_permissions(app.consumes, retryable_queues)),
    ) for app in vhost.applications)
    permissions += tuple(_operator_permissions(operator.user, retryables) for operator in vhost.operators)
    imports = vhost.imports
    delay_levels = None if vhost.delay_levels is None else plan_delay_levels(vhost.delay_levels, imports,
                                                                             f"{path}.delay_levels")
    plan = VhostPlan(vhost, _adopt(exchanges, "exchange", imports), _adopt(queues, "queue", imports),
                     _adopt(tuple(policies), "policy", imports), _adopt(bindings, "binding", imports), retryables,
                     _adopt(operator_policies, "operator_policy", imports), permissions, delay_levels)
    if problems := _unmatched_imports(plan, path):
        raise ConfigError(problems)
    return plan
