"""One parser per entity of the stack config; each reports the problems of its own fields and returns its entry,
kept even when refused (`model/config_entries.py`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..model import naming, wire
from ..model.config_entries import (
    ApplicationEntry,
    BindingEntry,
    Entry,
    OperatorEntry,
    QueueEntry,
    TopicEntry,
    VhostEntry,
)
from ..model.durations import format_duration
from ..model.fields import (
    ABSENT,
    INVALID,
    Invalid,
    Problems,
    boolean,
    choice,
    describe,
    duration,
    entity_name,
    integer,
    items,
    mapping,
    optional,
    regex,
    written_name,
)
from ..model.key_paths import with_paths
from ..model.keys import (
    APPLICATION_KEYS,
    BINDING_KEYS,
    DEFAULTS_KEYS,
    DELAY_LEVELS_KEYS,
    EXCHANGE_KEYS,
    IMPORT_KINDS,
    LIMITS_KEYS,
    OPERATOR_KEYS,
    POLICY_KEYS,
    QUEUE_KEYS,
    TOPIC_PERMISSION_KEYS,
    USER_LIMITS_KEYS,
    VHOST_KEYS,
)
from ..model.stack_config import (
    APPLY_TO,
    EXCHANGE_TYPES,
    MAX_AGE,
    MAX_MESSAGE_TTL_MS,
    QUEUE_TYPES,
    X_MATCH,
    Application,
    Binding,
    Defaults,
    DelayLevels,
    Exchange,
    Limits,
    Operator,
    Policy,
    Queue,
    TopicPermission,
    UserLimits,
    Vhost,
)
from ..strategies import (
    STRATEGIES,
    fits_delay_levels,
    parse_queue_retry,
)
from ..strategies.common import positive_duration
from .migrations import parse_migrations

T = TypeVar("T")
E = TypeVar("E", bound="Entry[Any]")
GO_INTEGER = re.compile(r"[+-]?[0-9]+")
"""What Go's `strconv.ParseInt(s, 10, 64)` reads as a number (within int64), ASCII digits only."""


def refused(index: int, path: str) -> Entry[Any]:
    return Entry(index, None, None, INVALID, path)


def parse_defaults(p: Problems, raw: object) -> Defaults:
    base = Defaults()
    if raw is ABSENT or raw is None:
        return base
    data = mapping(p, "defaults", raw, DEFAULTS_KEYS)
    if data is INVALID:
        return base
    queue_type = optional(data, "queue_type", lambda v: choice(p, "defaults.queue_type", v, QUEUE_TYPES), INVALID)
    priority = optional(data, "policy_priority", lambda v: integer(p, "defaults.policy_priority", v, 0), INVALID)
    limit = optional(data, "delivery_limit", lambda v: integer(p, "defaults.delivery_limit", v, 2), INVALID)
    group_size = optional(data, "quorum_group_size", lambda v: integer(p, "defaults.quorum_group_size", v, 1),
                          INVALID)
    return Defaults(
        queue_type=base.queue_type if queue_type is INVALID else queue_type,
        policy_priority=base.policy_priority if priority is INVALID else priority,
        delivery_limit=base.delivery_limit if limit is INVALID else limit,
        quorum_group_size=base.quorum_group_size if group_size is INVALID else group_size,
    )


# --- exchanges and bindings -----------------------------------------------------------------------------------


def parse_exchange(p: Problems, path: str, index: int, raw: object) -> Entry[Exchange]:
    data = mapping(p, path, raw, EXCHANGE_KEYS)
    if data is INVALID:
        return refused(index, path)
    name = entity_name(p, f"{path}.name", data.get("name"), "exchange")
    if "type" not in data:
        p.add(f"{path}.type", f"missing; use one of {', '.join(EXCHANGE_TYPES)}")
        exchange_type: str | Invalid = INVALID
    else:
        exchange_type = choice(p, f"{path}.type", data["type"], EXCHANGE_TYPES)
    value = INVALID if name is INVALID or exchange_type is INVALID else Exchange(name, exchange_type)
    return Entry(index, None if name is INVALID else name, written_name(data.get("name")), value, path)


def parse_binding_arguments(p: Problems, path: str, raw: object) -> dict[str, str | int | bool] | Invalid:
    if not isinstance(raw, Mapping):
        p.add(path, f"expected a mapping of header names to values, got {describe(raw)}")
        return INVALID
    arguments: dict[str, str | int | bool] | Invalid = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, (str, int, bool)):
            p.add(f"{path}.{key}", f"expected a string, integer or boolean, got {describe(value)}")
            arguments = INVALID
        elif arguments is not INVALID:
            arguments[key] = value
    if arguments is not INVALID and "x-match" in arguments and arguments["x-match"] not in X_MATCH:
        p.add(f"{path}.x-match", f"{arguments['x-match']!r} is not one of {', '.join(X_MATCH)}")
        return INVALID
    return arguments


def parse_binding(p: Problems, path: str, index: int, raw: object) -> BindingEntry:
    data = mapping(p, path, raw, BINDING_KEYS)
    if data is INVALID:
        return BindingEntry(index, None, None, INVALID, path)
    external = optional(data, "external", lambda v: boolean(p, f"{path}.external", v), False)
    if "exchange" not in data:
        p.add(f"{path}.exchange", "missing; name the exchange this queue is bound to")
        return BindingEntry(index, None, None, INVALID, path)
    exchange = entity_name(p, f"{path}.exchange", data["exchange"], "exchange", allow_reserved=external is True)
    routing_key = data.get("routing_key", "")
    if not isinstance(routing_key, str):
        p.add(f"{path}.routing_key", f"expected a string, got {routing_key!r} (quote digits: \"42\")")
        routing_key = INVALID
    arguments = parse_binding_arguments(p, f"{path}.arguments", data.get("arguments", {}))
    written = written_name(data["exchange"])
    if exchange is INVALID or routing_key is INVALID or arguments is INVALID or external is INVALID:
        return BindingEntry(index, None, written, INVALID, path, external=external is True)
    return BindingEntry(index, exchange, written, Binding(exchange, routing_key, arguments, external), path,
                        external=external)


def check_duplicate_bindings(p: Problems, path: str, bindings: Sequence[BindingEntry]) -> None:
    seen: dict[str, int] = {}
    for entry in bindings:
        if entry.value is INVALID:
            continue
        binding = entry.value
        identity = json.dumps([binding.exchange, binding.routing_key, dict(binding.arguments)], sort_keys=True)
        if identity in seen:
            p.add(entry.path, f"duplicate of bindings[{seen[identity]}]; remove one")
        seen.setdefault(identity, entry.index)


# --- queues ---------------------------------------------------------------------------------------------------


def parse_group_size(p: Problems, path: str, data: Mapping[str, Any], queue_type: object,
                     defaults: Defaults) -> int | Invalid | None:
    """`quorum_group_size` of a quorum queue or of quorum delay levels, else the default's (None for another type);
    refused on a classic type."""
    group_size = optional(data, "quorum_group_size", lambda v: integer(p, f"{path}.quorum_group_size", v, 1),
                          defaults.quorum_group_size)
    if queue_type == "classic" and "quorum_group_size" in data:
        p.add(f"{path}.quorum_group_size", "x-quorum-initial-group-size is quorum-only (RabbitMQ refuses it on a "
              "classic queue); remove it or set type: quorum")
        return INVALID
    return group_size if queue_type == "quorum" else None


def parse_delay_levels(p: Problems, path: str, raw: object, defaults: Defaults) -> DelayLevels | Invalid:
    """The vhost's shared delay levels: `levels` follows from `max_delay / unit`."""
    data = mapping(p, path, raw, DELAY_LEVELS_KEYS)
    if data is INVALID:
        return INVALID
    default = DelayLevels()
    unit = optional(data, "unit", lambda v: positive_duration(p, f"{path}.unit", v), default.unit_ms)
    longest = optional(data, "max_delay", lambda v: positive_duration(p, f"{path}.max_delay", v),
                       default.max_delay_ms)
    queue_type = optional(data, "type", lambda v: choice(p, f"{path}.type", v, QUEUE_TYPES), defaults.queue_type)
    group_size = parse_group_size(p, path, data, queue_type, defaults)
    if INVALID in (unit, longest, queue_type, group_size):
        return INVALID
    assert isinstance(unit, int) and isinstance(longest, int) and isinstance(queue_type, str)
    assert group_size is None or isinstance(group_size, int)
    levels = DelayLevels(unit, longest, queue_type, defaults.policy_priority, group_size)
    if longest < unit:
        p.add(f"{path}.max_delay", f"{data.get('max_delay', '1d')!r} is shorter than unit {data.get('unit', '1s')!r}")
    elif levels.levels > naming.DELAY_WORDS:
        p.add(f"{path}.max_delay", f"{levels.levels} levels of {format_duration(unit)} are more than the "
              f"{naming.DELAY_WORDS} a routing key carries; raise unit or lower max_delay")
    elif unit * 2 ** (levels.levels - 1) > MAX_MESSAGE_TTL_MS:
        top = format_duration(unit * 2 ** (levels.levels - 1))
        p.add(f"{path}.max_delay", f"the top level would hold messages {top}, over RabbitMQ's longest message-ttl "
              f"({MAX_MESSAGE_TTL_MS}ms, about 49 days); lower max_delay or unit")
    else:
        return levels
    return INVALID


PLAIN_QUEUE_ONLY = {
    "message_ttl": "on a retryable queue an expired message would enter the retry path (or be parked) unhandled",
    "single_active_consumer": "a retryable queue's consumers are not limited to one here",
    "arguments": "a retryable queue's arguments are its strategy's",
}
"""Queue keys a retryable queue refuses, and why."""
WRITTEN_IN_ARGUMENTS = {"single_active_consumer": wire.SINGLE_ACTIVE_CONSUMER.argument,
                        "quorum_group_size": wire.QUORUM_INITIAL_GROUP_SIZE.argument}
"""Keys that set a queue argument: with `arguments` the argument is written there (or left out) instead."""


def parse_queue_arguments(p: Problems, path: str, raw: object,
                          queue_type: object) -> dict[str, str | int | bool] | Invalid:
    """`queues[].arguments`: the arguments exactly as the broker holds them; each refused value names the argument
    and what RabbitMQ accepts, before anything reaches a broker."""
    if not isinstance(raw, Mapping):
        p.add(path, f"expected a mapping of queue argument names to values, got {describe(raw)}")
        return INVALID
    arguments: dict[str, str | int | bool] = {}
    ok = True
    for key, value in raw.items():
        where = f"{path}.{key}"
        if not isinstance(key, str) or not key.startswith("x-"):
            p.add(where, "a queue argument's name starts with x- (e.g. x-message-ttl)")
            ok = False
        elif not isinstance(value, (str, int, bool)):
            p.add(where, f"expected a string, integer or boolean, got {describe(value)}")
            ok = False
        elif (row := wire.BY_ARGUMENT.get(key)) is not None and row.type == "integer" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            p.add(where, f"{value!r}: RabbitMQ takes {key} only as a non-negative integer, e.g. 60000")
            ok = False
        elif row is not None and row.type == "choice" and value not in row.choices:
            p.add(where, f"{value!r} is not one of {', '.join(row.choices)}")
            ok = False
        else:
            arguments[key] = value
    if not ok:
        return INVALID
    type_argument = wire.QUEUE_TYPE.argument
    if isinstance(queue_type, str) and arguments.get(type_argument, queue_type) != queue_type:
        p.add(f"{path}.{type_argument}", f"{arguments[type_argument]!r} differs from the queue's type "
              f"{queue_type!r}: make them equal")
        return INVALID
    if queue_type == "quorum" and type_argument not in arguments:
        p.add(f"{path}.{type_argument}", f"missing: a quorum queue always holds {type_argument}: quorum; add it")
        return INVALID
    return arguments


def parse_queue(p: Problems, path: str, index: int, raw: object, defaults: Defaults) -> QueueEntry:
    data = mapping(p, path, raw, QUEUE_KEYS)
    if data is INVALID:
        return QueueEntry(index, None, None, INVALID, path)
    if "name" not in data:
        p.add(f"{path}.name", "missing; every queue needs a name")
        name: str | Invalid = INVALID
    else:
        name = entity_name(p, f"{path}.name", data["name"], "queue")
    queue_type = optional(data, "type", lambda v: choice(p, f"{path}.type", v, QUEUE_TYPES), defaults.queue_type)
    priority = optional(data, "policy_priority", lambda v: integer(p, f"{path}.policy_priority", v, 0),
                        defaults.policy_priority)
    max_length = optional(data, "max_length", lambda v: integer(p, f"{path}.max_length", v, 0), None)
    max_length_bytes = optional(data, "max_length_bytes", lambda v: integer(p, f"{path}.max_length_bytes", v, 0), None)
    message_ttl = optional(data, "message_ttl", lambda v: duration(p, f"{path}.message_ttl", v), None)
    single_active = optional(data, "single_active_consumer",
                             lambda v: boolean(p, f"{path}.single_active_consumer", v), False)
    if "retry" in data:
        for key, why in PLAIN_QUEUE_ONLY.items():
            if key in data:
                p.add(f"{path}.{key}", f"a plain queue's key: {why}; remove it (or remove retry)")
    arguments = optional(data, "arguments", lambda v: parse_queue_arguments(p, f"{path}.arguments", v, queue_type),
                         None)
    if "arguments" in data:
        for key, argument in WRITTEN_IN_ARGUMENTS.items():
            if key in data:
                p.add(f"{path}.{key}", f"with `arguments` the queue's arguments are written there: remove {key} "
                      f"(and set {argument} in arguments if the queue holds it)")
    delivery_limit = optional(data, "delivery_limit", lambda v: integer(p, f"{path}.delivery_limit", v, 1), None)
    if queue_type == "classic" and "delivery_limit" in data:
        p.add(f"{path}.delivery_limit", "delivery-limit is quorum-only; remove it or set type: quorum")
    group_size = parse_group_size(p, path, data, queue_type, defaults)
    bindings = tuple(parse_binding(p, f"{path}.bindings[{i}]", i, b)
                     for i, b in enumerate(items(p, f"{path}.bindings", data.get("bindings", ABSENT))))
    check_duplicate_bindings(p, f"{path}.bindings", bindings)
    retried = parse_queue_retry(p, path, name, queue_type, data.get("retry", ABSENT), delivery_limit,
                                defaults.delivery_limit)
    if name is INVALID:
        return QueueEntry(index, None, written_name(data.get("name")), INVALID, path, bindings=bindings)
    entry = QueueEntry(index, name, name, INVALID, path, bindings, retried.owned_queues, retried.owned_exchanges)
    retry = retried.retry
    if (not retried.names_fit or queue_type is INVALID or priority is INVALID or max_length is INVALID
            or delivery_limit is INVALID or retry is INVALID or max_length_bytes is INVALID or message_ttl is INVALID
            or single_active is INVALID or group_size is INVALID or arguments is INVALID
            or any(b.value is INVALID for b in bindings)):
        return entry
    limit = retried.delivery_limit
    if limit is INVALID:
        return entry
    queue = Queue(name=name, queue_type=queue_type, policy_priority=priority,
                  bindings=tuple(b.value for b in bindings if isinstance(b.value, Binding)), max_length=max_length,
                  delivery_limit=limit, retry=retry, max_length_bytes=max_length_bytes, message_ttl_ms=message_ttl,
                  single_active_consumer=single_active is True,
                  quorum_group_size=group_size if arguments is None else None,
                  arguments=arguments)
    return QueueEntry(index, name, name, queue, path, bindings, entry.owned_queues, entry.owned_exchanges)


# --- policies -------------------------------------------------------------------------------------------------


def provider_integer(text: str) -> int | None:
    """The integer the provider sends for a policy value (Go's `strconv.ParseInt(v, 10, 64)`), or None when
    it sends the value as a string."""
    if not GO_INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def policy_value(p: Problems, path: str, key: str, value: object) -> str | Invalid:
    """One definition value as the provider's schema takes it (a string), or INVALID when RabbitMQ would
    refuse it at `pulumi up` or the provider would update it on every `pulumi up`."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        p.add(path, f"expected a string or an integer, got {value!r}")
        return INVALID
    text = str(value)
    number = provider_integer(text)
    row = wire.BY_KEY.get(key)
    value_type = row.type if row is not None else None
    if value_type == "name" and number is not None:
        p.add(path, f"{value!r}: the provider sends digits-only values as integers, which RabbitMQ refuses here; "
              "use a name with a letter in it")
    elif number is not None and text != str(number):
        p.add(path, f"{value!r} is sent as the integer {number} and read back as \"{number}\", so every "
              f"`pulumi up` would update this policy again; write {number}")
    elif value_type == "integer" and number is None:
        p.add(path, f"{value!r} is not an integer; RabbitMQ takes only an integer for {key}")
    elif row is not None and value_type == "choice" and text not in row.choices:
        p.add(path, f"{value!r} is not one of {', '.join(row.choices)}")
    elif value_type == "age" and not re.fullmatch(MAX_AGE, text):
        p.add(path, f"{value!r} is not a max-age: a count and a unit (Y, M, D, h, m or s), e.g. 7D")
    else:
        return text
    return INVALID


def check_definition_key(p: Problems, path: str, key: object, allowed_keys: Sequence[str] | None) -> bool:
    """A user policy takes the keys RabbitMQ knows (`wire.POLICY_KEYS`), an operator policy fewer."""
    if allowed_keys is not None:
        if key in allowed_keys:
            return True
        p.add(path, f"not allowed in an operator policy (allowed: {', '.join(allowed_keys)})")
    elif key in wire.RETIRED_POLICY_KEYS:
        p.add(path, wire.RETIRED_POLICY_KEYS[str(key)])
    elif key not in wire.POLICY_KEYS:
        p.add(path, f"not a policy key RabbitMQ knows (allowed: {', '.join(wire.POLICY_KEYS)})")
    else:
        return True
    return False


def parse_definition(p: Problems, path: str, raw: object,
                     allowed_keys: Sequence[str] | None) -> dict[str, str] | Invalid:
    if not isinstance(raw, Mapping) or not raw:
        p.add(path, "expected a non-empty mapping of policy keys to values")
        return INVALID
    definition: dict[str, str] | Invalid = {}
    for key, value in raw.items():
        where = f"{path}.{key}"
        text = policy_value(p, where, str(key), value) if check_definition_key(p, where, key, allowed_keys) \
            else INVALID
        if text is INVALID:
            definition = INVALID
        elif definition is not INVALID:
            definition[str(key)] = text
    if definition is not INVALID:
        check_delayed_retry(p, path, definition)
    return definition


def check_delayed_retry(p: Problems, path: str, definition: Mapping[str, str]) -> None:
    """RabbitMQ 4.3.6 answers 400 to these combinations (tests/broker/test_policy_acceptance.py)."""
    kind, low, high = (definition.get(f"delayed-retry-{k}") for k in ("type", "min", "max"))
    if kind not in (None, "disabled") and low is None:
        p.add(f"{path}.delayed-retry-type", f"{kind!r} needs delayed-retry-min beside it (RabbitMQ refuses the policy "
              "without it); add delayed-retry-min, in ms")
    if low is not None and high is not None and int(high) < int(low):
        p.add(f"{path}.delayed-retry-max", f"{high} is below delayed-retry-min ({low}): RabbitMQ refuses the policy; "
              f"raise it to {low} or more")


def parse_policy(p: Problems, path: str, index: int, raw: object,
                 allowed_keys: Sequence[str] | None = None) -> Entry[Policy]:
    """A user policy, or with `allowed_keys` an operator policy."""
    data = mapping(p, path, raw, POLICY_KEYS)
    if data is INVALID:
        return refused(index, path)
    name = entity_name(p, f"{path}.name", data.get("name"), "policy")
    pattern = regex(p, f"{path}.pattern", data.get("pattern"))
    priority = integer(p, f"{path}.priority", data.get("priority", 0), 0)
    apply_to = choice(p, f"{path}.apply_to", data.get("apply_to", "queues"), APPLY_TO)
    definition = parse_definition(p, f"{path}.definition", data.get("definition"), allowed_keys)
    valid_name = None if name is INVALID else name
    if name is INVALID or pattern is INVALID or priority is INVALID or apply_to is INVALID or definition is INVALID:
        return Entry(index, valid_name, written_name(data.get("name")), INVALID, path)
    return Entry(index, valid_name, valid_name, Policy(name, pattern, priority, apply_to, definition), path)


# --- applications ---------------------------------------------------------------------------------------------


def parse_topic_permission(p: Problems, path: str, raw: object) -> TopicEntry:
    data = mapping(p, path, raw, TOPIC_PERMISSION_KEYS)
    if data is INVALID:
        return TopicEntry(path, INVALID, INVALID)
    write, read = (regex(p, f"{path}.{key}", data.get(key, "^$")) for key in ("write", "read"))
    exchange = data.get("exchange")
    if write is INVALID or read is INVALID or not isinstance(exchange, str):
        return TopicEntry(path, exchange, INVALID)
    return TopicEntry(path, exchange, TopicPermission(exchange, write, read))


def parse_application(p: Problems, path: str, index: int, raw: object) -> ApplicationEntry:
    """The application's own fields; what it names is checked against its vhost by `crosschecks`."""
    data = mapping(p, path, raw, APPLICATION_KEYS)
    if data is INVALID:
        return ApplicationEntry(index, None, None, INVALID, path)
    user = entity_name(p, f"{path}.user", data.get("user"), "user", allow_reserved=True)
    publishes = items(p, f"{path}.publishes", data.get("publishes", ABSENT), scalars=True)
    consumes = items(p, f"{path}.consumes", data.get("consumes", ABSENT), scalars=True)
    topics = tuple(parse_topic_permission(p, f"{path}.topic_permissions[{i}]", t) for i, t in
                   enumerate(items(p, f"{path}.topic_permissions", data.get("topic_permissions", ABSENT))))
    limits = optional(data, "limits", lambda v: parse_user_limits(p, f"{path}.limits", v), UserLimits())
    valid_user = None if user is INVALID else user
    names = [*publishes, *consumes]
    if (user is INVALID or not all(isinstance(n, str) for n in names) or any(t.value is INVALID for t in topics)
            or limits is INVALID):
        return ApplicationEntry(index, valid_user, written_name(data.get("user")), INVALID, path, publishes,
                                consumes, topics)
    application = Application(user, tuple(publishes), tuple(consumes),
                              tuple(t.value for t in topics if isinstance(t.value, TopicPermission)), limits)
    return ApplicationEntry(index, user, user, application, path, publishes, consumes, topics)


def parse_counts(p: Problems, path: str, raw: object, keys: tuple[str, ...], minimum: int) -> dict[str, int] | Invalid:
    """A mapping of `keys` to integers of at least `minimum` (a limits mapping), each problem at its key path."""
    data = mapping(p, path, raw, keys)
    if data is INVALID:
        return INVALID
    values = {key: integer(p, f"{path}.{key}", data[key], minimum) for key in keys if key in data}
    counts = {key: value for key, value in values.items() if isinstance(value, int)}
    return counts if len(counts) == len(values) else INVALID


def parse_user_limits(p: Problems, path: str, raw: object) -> UserLimits | Invalid:
    """At least 1 each: RabbitMQ takes 0, which refuses every connection (or channel) of the application."""
    counts = parse_counts(p, path, raw, USER_LIMITS_KEYS, 1)
    return INVALID if counts is INVALID else UserLimits(**counts)


def parse_operator(p: Problems, path: str, index: int, raw: object) -> OperatorEntry:
    """An operator of parked messages: a user whose permissions come from the vhost's retryable queues."""
    data = mapping(p, path, raw, OPERATOR_KEYS)
    if data is INVALID:
        return OperatorEntry(index, None, None, INVALID, path)
    user = entity_name(p, f"{path}.user", data.get("user"), "user", allow_reserved=True)
    if user is INVALID:
        return OperatorEntry(index, None, written_name(data.get("user")), INVALID, path)
    return OperatorEntry(index, user, user, Operator(user), path)


# --- vhosts ---------------------------------------------------------------------------------------------------


def parse_vhost_name(p: Problems, path: str, name: object) -> str | Invalid:
    if not isinstance(name, str) or not name:
        p.add(path, f"vhost name must be a non-empty string, got {name!r}")
    elif "@" in name:
        p.add(path, f'"{name}": "@" breaks the provider\'s name@vhost IDs; rename the vhost')
    elif name != name.strip():
        p.add(path, f'"{name}": leading or trailing whitespace; remove it')
    elif naming.byte_length(name) > naming.MAX_NAME_BYTES:
        p.add(path, "vhost name is over 255 bytes; shorten it")
    else:
        return name
    return INVALID


def parse_limits(p: Problems, path: str, raw: object) -> Limits | Invalid:
    counts = parse_counts(p, path, raw, LIMITS_KEYS, 0)
    return INVALID if counts is INVALID else Limits(**counts)


def check_created_only_options(p: Problems, path: str, data: Mapping[str, Any], existing: object) -> None:
    """Limits and a default queue type are set when the vhost is created, so only ours may have them."""
    if existing is True and ("limits" in data or "default_queue_type" in data):
        p.add(f"{path}.{'limits' if 'limits' in data else 'default_queue_type'}",
              "only a vhost this stack creates can be given limits or a default queue type; remove it")


def parse_list(p: Problems, path: str, data: Mapping[str, Any], key: str,
               parse: Callable[[Problems, str, int, object], E]) -> tuple[E, ...]:
    """Each entry of the list `key`, parsed by `parse(p, path, index, raw)` at its key path (`with_paths`)."""
    written = items(p, f"{path}.{key}", data.get(key, ABSENT))
    return tuple(parse(p, at, i, raw) for i, (at, raw) in enumerate(with_paths(path, key, written)))


def valid_values(entries: Sequence[Entry[T]]) -> tuple[T, ...] | Invalid:
    """The value of every entry, or INVALID when any entry was refused."""
    values = tuple(entry.value for entry in entries if not isinstance(entry.value, Invalid))
    return values if len(values) == len(entries) else INVALID


def parse_import(p: Problems, path: str, raw: object, name: str | Invalid,
                 existing: object) -> tuple[str, ...] | Invalid:
    """`import: ["queue orders@shop", "binding shop/orders/orders/queue/~", …]`: written by `make adopt`.
    The plan checks that each one names an object the vhost declares."""
    entries = items(p, path, raw, scalars=True)
    ok = True
    if entries and existing is not True:
        p.add(path, "only objects of an existing vhost can be imported; set existing: true")
        ok = False
    for i, entry in enumerate(entries):
        kind, _, object_id = entry.partition(" ") if isinstance(entry, str) else ("", "", "")
        if kind not in IMPORT_KINDS or not object_id:
            p.add(f"{path}[{i}]", f"expected \"<kind> <provider ID>\" with kind one of {', '.join(IMPORT_KINDS)}, "
                  f"e.g. \"queue orders@shop\"; got {entry!r}")
            ok = False
        elif isinstance(name, str) and kind != "binding" and not object_id.endswith(f"@{name}"):
            p.add(f"{path}[{i}]", f"{object_id!r} is not an ID of this vhost (name@{name})")
            ok = False
    if ok and len(set(entries)) != len(entries):
        p.add(path, "an object is listed twice; keep one")
        ok = False
    return tuple(entries) if ok else INVALID


def parse_vhost(p: Problems, path: str, index: int, raw: object, defaults: Defaults) -> VhostEntry:
    """A vhost's own fields and entries; `crosschecks.check_vhost` checks them against each other."""
    data = mapping(p, path, raw, VHOST_KEYS)
    if data is INVALID:
        return VhostEntry(index, None, None, INVALID, path)
    name = parse_vhost_name(p, f"{path}.name", data.get("name"))
    existing = optional(data, "existing", lambda v: boolean(p, f"{path}.existing", v), name == "/")
    if name == "/" and existing is False:
        p.add(f"{path}.existing", 'the default vhost "/" is never managed by this stack; remove existing: false')
    parsers: dict[str, Callable[[Problems, str, int, object], Entry[Any]]] = {
        "exchanges": parse_exchange,
        "queues": lambda p_, at, i, raw: parse_queue(p_, at, i, raw, defaults),
        "policies": parse_policy,
        "operator_policies": lambda p_, at, i, raw: parse_policy(p_, at, i, raw, wire.OPERATOR_POLICY_KEYS),
        "applications": parse_application,
        "operators": parse_operator,
    }
    lists: dict[str, Any] = {key: parse_list(p, path, data, key, parse) for key, parse in parsers.items()}
    limits = optional(data, "limits", lambda v: parse_limits(p, f"{path}.limits", v), Limits())
    default_queue_type = optional(data, "default_queue_type",
                                  lambda v: choice(p, f"{path}.default_queue_type", v, QUEUE_TYPES), None)
    imports = optional(data, "import", lambda v: parse_import(p, f"{path}.import", v, name, existing), ())
    delay_levels = vhost_delay_levels(p, path, data, lists["queues"], defaults)
    migrations = parse_migrations(p, path, data.get("migrations", ()), lists["queues"], delay_levels,
                                  lists["exchanges"])
    check_created_only_options(p, path, data, existing)
    unreadable = frozenset(key for key in parsers if data.get(key) is not None and (
        isinstance(data[key], (str, bytes)) or not isinstance(data[key], Sequence)))
    values: dict[str, Any] = {key: valid_values(entries) for key, entries in lists.items()}
    if (name is INVALID or existing is INVALID or limits is INVALID or default_queue_type is INVALID
            or imports is INVALID or delay_levels is INVALID or migrations is INVALID or INVALID in values.values()):
        return VhostEntry(index, None if name is INVALID else name, written_name(data.get("name")), INVALID, path,
                          **lists, unreadable=unreadable)
    vhost = Vhost(name=name, existing=existing, limits=limits, default_queue_type=default_queue_type,
                  imports=imports, delay_levels=delay_levels, migrations=migrations, **values)
    return VhostEntry(index, name, name, vhost, path, **lists, unreadable=unreadable)


def _written_strategies(data: Mapping[str, Any]) -> list[object]:
    """The `retry.strategy` each queue writes (absent ones left out), valid or not."""
    queues = data.get("queues")
    return [q["retry"]["strategy"] for q in (queues if isinstance(queues, Sequence) else ())
            if isinstance(q, Mapping) and isinstance(q.get("retry"), Mapping) and "strategy" in q["retry"]]


def _written_levels(data: Mapping[str, Any]) -> bool:
    """A queue asks for a strategy that uses delay levels, valid or not: its own problems are reported where
    they are."""
    return any(isinstance(name, str) and name in STRATEGIES and STRATEGIES[name].USES_DELAY_LEVELS
               for name in _written_strategies(data))


def _unused_levels(p: Problems, levels_path: str, data: Mapping[str, Any]) -> Invalid | None:
    """`delay_levels` in a vhost none of whose queues retries through them is refused, unless a queue misspells its
    strategy (`level`): that is its own problem, and delay_levels may well be what it asks for."""
    misspelt = any(not (isinstance(name, str) and name in STRATEGIES) for name in _written_strategies(data))
    if "delay_levels" in data and not misspelt:
        p.add(levels_path, "no queue of this vhost has retry.strategy: levels; remove delay_levels")
        return INVALID
    return None


def vhost_delay_levels(p: Problems, path: str, data: Mapping[str, Any], queues: tuple[QueueEntry, ...],
                       defaults: Defaults) -> DelayLevels | Invalid | None:
    """The vhost's delay levels when a queue uses a strategy that retries through them, else None
    (`delay_levels` without such a queue is refused); the backoff of each such queue must fit in them."""
    levels_path = f"{path}.delay_levels"
    if not _written_levels(data):
        return _unused_levels(p, levels_path, data)
    levels = optional(data, "delay_levels", lambda v: parse_delay_levels(p, levels_path, v, defaults),
                      DelayLevels(queue_type=defaults.queue_type, policy_priority=defaults.policy_priority,
                                  quorum_group_size=defaults.quorum_group_size if defaults.queue_type == "quorum"
                                  else None))
    if not isinstance(levels, DelayLevels):
        return INVALID
    fits = True
    for entry in queues:
        if isinstance(entry.value, Queue) and entry.value.retry is not None:
            fits &= fits_delay_levels(p, f"{entry.path}.retry", entry.value.retry, levels, levels_path)
    return levels if fits else INVALID
