"""Stack config: parse `rabbitmq-retry:*` values into frozen dataclasses, or fail with every problem.

Pure: no resource is registered here. `ConfigError` subclasses `pulumi.RunError` only so that
`pulumi preview` prints the problems without a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulumi.errors import RunError

from . import naming
from .durations import DurationError, parse_duration

QUEUE_TYPES = ("classic", "quorum")
EXCHANGE_TYPES = ("direct", "topic", "fanout", "headers")
X_MATCH = ("all", "any", "all-with-x", "any-with-x")
DEFAULT_QUEUE_TYPE = "quorum"
DEFAULT_POLICY_PRIORITY = 10
DEFAULT_DELIVERY_LIMIT = 20
"""RabbitMQ 4's default, set explicitly so that 3.10 and 4.x behave alike."""
MAX_RETRIES_CEILING = 10_000
TOP_LEVEL_KEYS = ("protect", "retain_error_queues", "defaults", "vhosts", "passwords")
OPERATOR_POLICY_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes", "max-in-memory-length",
                        "max-in-memory-bytes", "delivery-limit", "queue-version", "overflow")
"""What RabbitMQ accepts in an operator policy (../shared/notes/provider.md §4)."""


class ConfigError(RunError):
    """Invalid stack config. `problems` holds (key path, what is wrong and what to do)."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {path}: {message}" for path, message in self.problems)
        count = len(self.problems)
        super().__init__(f"invalid rabbitmq-retry config ({count} problem{'s' * (count != 1)}):\n{lines}")


@dataclass(frozen=True)
class Binding:
    exchange: str
    routing_key: str = ""
    arguments: Mapping[str, str | int | bool] = field(default_factory=dict)
    external: bool = False
    """The exchange is declared outside this stack (e.g. `amq.topic`)."""


@dataclass(frozen=True)
class Retry:
    delays_ms: tuple[int, ...]
    max_retries: int
    error_retention_ms: int | None = None
    error_max_length: int | None = None


@dataclass(frozen=True)
class Queue:
    name: str
    queue_type: str
    policy_priority: int
    bindings: tuple[Binding, ...] = ()
    max_length: int | None = None
    delivery_limit: int | None = None
    """Quorum only; always set for quorum queues: default 20, plus max_retries for a retryable queue.
    A backstop that must never fire (README: Delivery limit)."""
    retry: Retry | None = None


@dataclass(frozen=True)
class Exchange:
    name: str
    type: str


@dataclass(frozen=True)
class Policy:
    name: str
    pattern: str
    priority: int
    apply_to: str
    definition: Mapping[str, str]
    """Values as the provider's schema wants them: strings (digits become JSON integers)."""


@dataclass(frozen=True)
class TopicPermission:
    exchange: str
    write: str
    read: str


@dataclass(frozen=True)
class Application:
    """An application's user in one vhost; its permissions are derived, never written by hand."""

    user: str
    publishes: tuple[str, ...] = ()
    """Exchanges it publishes to."""
    consumes: tuple[str, ...] = ()
    """Queues it consumes; for a retryable queue it may also publish retries and park messages."""
    topic_permissions: tuple[TopicPermission, ...] = ()


@dataclass(frozen=True)
class Limits:
    max_connections: int | None = None
    max_queues: int | None = None


@dataclass(frozen=True)
class Vhost:
    name: str
    existing: bool
    """Declared elsewhere (always so for `/`): referenced, never created or deleted."""
    exchanges: tuple[Exchange, ...] = ()
    queues: tuple[Queue, ...] = ()
    policies: tuple[Policy, ...] = ()
    """User policies of the vhost besides ours; checked for overlap with ours at preview time."""
    operator_policies: tuple[Policy, ...] = ()
    """Limits that apply on top of every user policy (the lower numeric value wins)."""
    applications: tuple[Application, ...] = ()
    application_indexes: tuple[int, ...] = ()
    """Where each application stands in the config's `applications[]` (for error paths)."""
    limits: Limits = Limits()
    default_queue_type: str | None = None


@dataclass(frozen=True)
class Defaults:
    queue_type: str = DEFAULT_QUEUE_TYPE
    policy_priority: int = DEFAULT_POLICY_PRIORITY
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT


@dataclass(frozen=True)
class StackConfig:
    vhosts: tuple[Vhost, ...]
    defaults: Defaults = Defaults()
    protect: bool = False
    """`protect` on every queue of the stack: Pulumi refuses to delete or replace them."""
    retain_error_queues: bool = False
    """`retain_on_delete` on error queues: removing one from config leaves it on the broker."""


class _Problems:
    """Collects every problem so that one run reports them all."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)


_MISSING = object()


def _describe(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _mapping(p: _Problems, path: str, value: object, allowed: Sequence[str]) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        p.add(path, f"expected a mapping, got {_describe(value)}")
        return None
    for key in value:
        if key not in allowed:
            p.add(f"{path}.{key}" if path else str(key), f"unknown key (allowed: {', '.join(allowed)})")
    return value


def _list(p: _Problems, path: str, value: object) -> Sequence[Any]:
    if value is _MISSING or value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        p.add(path, f"expected a list, got {_describe(value)}")
        return ()
    return value


def _int(p: _Problems, path: str, value: object, minimum: int, maximum: int | None = None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        p.add(path, f"expected an integer, got {value!r}")
        return None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum} … {maximum}" if maximum is not None else f">= {minimum}"
        p.add(path, f"{value} is out of range (use {bound})")
        return None
    return value


def _bool(p: _Problems, path: str, value: object) -> bool | None:
    if not isinstance(value, bool):
        p.add(path, f"expected true or false, got {value!r}")
        return None
    return value


def _choice(p: _Problems, path: str, value: object, choices: Sequence[str]) -> str | None:
    if value not in choices:
        p.add(path, f"{value!r} is not one of {', '.join(choices)}")
        return None
    return str(value)


def _name(p: _Problems, path: str, value: object, kind: str, allow_reserved: bool = False) -> str | None:
    """A queue or exchange name the provider can manage: see ../shared/notes/provider.md §1-§2."""
    if not isinstance(value, str) or not value.strip():
        p.add(path, f"{kind} name must be a non-empty string, got {value!r}")
        return None
    ok = True
    if "@" in value:
        p.add(path, f'"{value}": "@" breaks the provider\'s name@vhost IDs; rename the {kind}')
        ok = False
    if "/" in value:
        p.add(path, f'"{value}": "/" breaks the provider\'s binding IDs; rename the {kind}')
        ok = False
    if value.startswith(naming.RESERVED_PREFIX) and not allow_reserved:
        p.add(path, f'"{value}": the "amq." prefix is reserved by RabbitMQ; rename the {kind}')
        ok = False
    if value != value.strip():
        p.add(path, f'"{value}": leading or trailing whitespace; remove it')
        ok = False
    if naming.byte_length(value) > naming.MAX_NAME_BYTES:
        p.add(path, f"{kind} name is {naming.byte_length(value)} bytes; RabbitMQ allows 255")
        ok = False
    return value if ok else None


def _duration(p: _Problems, path: str, value: object) -> int | None:
    try:
        return parse_duration(value)
    except DurationError as error:
        p.add(path, str(error))
        return None


def _optional(raw: Mapping[str, Any], key: str, parse: Callable[[object], Any], default: Any = None) -> Any:
    return parse(raw[key]) if key in raw else default


def _parse_defaults(p: _Problems, raw: object) -> Defaults:
    if raw is _MISSING or raw is None:
        return Defaults()
    data = _mapping(p, "defaults", raw, ("queue_type", "policy_priority", "delivery_limit"))
    if data is None:
        return Defaults()
    base = Defaults()
    queue_type = _optional(data, "queue_type", lambda v: _choice(p, "defaults.queue_type", v, QUEUE_TYPES))
    priority = _optional(data, "policy_priority", lambda v: _int(p, "defaults.policy_priority", v, 0))
    limit = _optional(data, "delivery_limit", lambda v: _int(p, "defaults.delivery_limit", v, 1))
    return Defaults(
        queue_type=queue_type or base.queue_type,
        policy_priority=base.policy_priority if priority is None else priority,
        delivery_limit=limit or base.delivery_limit,
    )


def _parse_binding(p: _Problems, path: str, raw: object) -> Binding | None:
    data = _mapping(p, path, raw, ("exchange", "routing_key", "arguments", "external"))
    if data is None:
        return None
    external = _optional(data, "external", lambda v: _bool(p, f"{path}.external", v), False)
    if "exchange" not in data:
        p.add(f"{path}.exchange", "missing; name the exchange this queue is bound to")
        return None
    exchange = _name(p, f"{path}.exchange", data["exchange"], "exchange", allow_reserved=bool(external))
    routing_key = data.get("routing_key", "")
    if not isinstance(routing_key, str):
        p.add(f"{path}.routing_key", f"expected a string, got {routing_key!r} (quote digits: \"42\")")
        routing_key = None
    arguments = data.get("arguments", {})
    if not isinstance(arguments, Mapping):
        p.add(f"{path}.arguments", f"expected a mapping of header names to values, got {_describe(arguments)}")
        arguments = None
    else:
        for key, value in arguments.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, bool)):
                p.add(f"{path}.arguments.{key}", f"expected a string, integer or boolean, got {_describe(value)}")
                arguments = None
        if arguments and "x-match" in arguments and arguments["x-match"] not in X_MATCH:
            p.add(f"{path}.arguments.x-match", f"{arguments['x-match']!r} is not one of {', '.join(X_MATCH)}")
    if exchange is None or routing_key is None or arguments is None or external is None:
        return None
    return Binding(exchange=exchange, routing_key=routing_key, arguments=dict(arguments), external=external)


def _parse_retry(p: _Problems, path: str, raw: object) -> Retry | None:
    data = _mapping(p, path, raw, ("delays", "max_retries", "error_retention", "error_max_length"))
    if data is None:
        return None
    delays_raw = data.get("delays", _MISSING)
    if delays_raw is _MISSING:
        p.add(f"{path}.delays", "missing; list one delay per wait tier, e.g. [1s, 10s, 1m]")
        return None
    if delays_raw is None:
        p.add(f"{path}.delays", "null; list one delay per wait tier, e.g. [1s, 10s, 1m]")
        return None
    delays_list = _list(p, f"{path}.delays", delays_raw)
    if not delays_list and isinstance(delays_raw, Sequence) and not isinstance(delays_raw, str):
        p.add(f"{path}.delays", "empty; list at least one delay, e.g. [10s]")
    delays = [_duration(p, f"{path}.delays[{i}]", value) for i, value in enumerate(delays_list)]
    for i in range(1, len(delays)):
        before, after = delays[i - 1], delays[i]
        if before is not None and after is not None and after <= before:
            p.add(f"{path}.delays[{i}]", f'"{delays_list[i]}" is not longer than the delay before it; '
                  "delays must be strictly increasing")
    max_retries = _optional(data, "max_retries", lambda v: _int(p, f"{path}.max_retries", v, 1, MAX_RETRIES_CEILING),
                            len(delays_list))
    retention = _optional(data, "error_retention", lambda v: _duration(p, f"{path}.error_retention", v))
    error_max_length = _optional(data, "error_max_length", lambda v: _int(p, f"{path}.error_max_length", v, 1))
    if not delays or None in delays or max_retries is None:
        return None
    if ("error_retention" in data and retention is None) or ("error_max_length" in data and error_max_length is None):
        return None
    return Retry(tuple(d for d in delays if d is not None), max_retries, retention, error_max_length)


def parse_queue(p: _Problems, path: str, raw: object, defaults: Defaults) -> Queue | None:
    data = _mapping(p, path, raw, ("name", "type", "bindings", "max_length", "delivery_limit", "retry",
                                   "policy_priority"))
    if data is None:
        return None
    if "name" not in data:
        p.add(f"{path}.name", "missing; every queue needs a name")
        name = None
    else:
        name = _name(p, f"{path}.name", data["name"], "queue")
    queue_type = _optional(data, "type", lambda v: _choice(p, f"{path}.type", v, QUEUE_TYPES), defaults.queue_type)
    priority = _optional(data, "policy_priority", lambda v: _int(p, f"{path}.policy_priority", v, 0),
                         defaults.policy_priority)
    max_length = _optional(data, "max_length", lambda v: _int(p, f"{path}.max_length", v, 0))
    delivery_limit = _optional(data, "delivery_limit", lambda v: _int(p, f"{path}.delivery_limit", v, 1))
    if queue_type == "classic" and "delivery_limit" in data:
        p.add(f"{path}.delivery_limit", "delivery-limit is quorum-only; remove it or set type: quorum")
    bindings = [_parse_binding(p, f"{path}.bindings[{i}]", b)
                for i, b in enumerate(_list(p, f"{path}.bindings", data.get("bindings", _MISSING)))]
    seen_bindings: dict[str, int] = {}
    for i, binding in enumerate(bindings):
        if binding is None:
            continue
        identity = json.dumps([binding.exchange, binding.routing_key, dict(binding.arguments)], sort_keys=True)
        if identity in seen_bindings:
            p.add(f"{path}.bindings[{i}]", f"duplicate of bindings[{seen_bindings[identity]}]; remove one")
        seen_bindings.setdefault(identity, i)
    retry = _optional(data, "retry", lambda v: _parse_retry(p, f"{path}.retry", v))
    if name is not None and retry is not None:
        for derived in naming.derived_queue_names(name, len(retry.delays_ms)) + naming.derived_exchange_names(name):
            if naming.byte_length(derived) > naming.MAX_NAME_BYTES:
                p.add(f"{path}.name", f'derived name "{derived[:40]}…" is over 255 bytes; shorten the queue name')
                break
    if name is None or queue_type is None or priority is None or None in bindings:
        return None
    if ("max_length" in data and max_length is None) or ("retry" in data and retry is None):
        return None
    if queue_type != "quorum":
        delivery_limit = None
    elif retry is None:
        delivery_limit = delivery_limit or defaults.delivery_limit
    elif delivery_limit is None:
        # On RabbitMQ 4 every plain retry counts toward the limit for the message's whole life.
        delivery_limit = defaults.delivery_limit + retry.max_retries
    elif delivery_limit <= retry.max_retries:
        p.add(f"{path}.delivery_limit", f"{delivery_limit} is not above max_retries ({retry.max_retries}): on "
              "RabbitMQ 4 each retry counts toward it, and a message over it jams in a dead-letter cycle; "
              "raise it or leave it unset (default: defaults.delivery_limit + max_retries)")
        return None
    return Queue(name=name, queue_type=queue_type, policy_priority=priority,
                 bindings=tuple(b for b in bindings if b is not None), max_length=max_length,
                 delivery_limit=delivery_limit, retry=retry)


STRING_POLICY_KEYS = ("dead-letter-exchange", "dead-letter-routing-key", "alternate-exchange")
APPLY_TO = ("queues", "classic_queues", "quorum_queues", "streams", "exchanges", "all")


def _parse_policies(p: _Problems, path: str, raw: object,
                    allowed_keys: Sequence[str] | None = None) -> list[tuple[int, Policy]]:
    """Parsed policies with their index in the config; names must be unique."""
    policies: list[tuple[int, Policy]] = []
    names: dict[str, int] = {}
    for i, raw_policy in enumerate(_list(p, path, raw)):
        policy = _parse_policy(p, f"{path}[{i}]", raw_policy, allowed_keys)
        if policy is None:
            continue
        if policy.name in names:
            p.add(f"{path}[{i}].name", f'duplicate policy "{policy.name}" (also {path}[{names[policy.name]}]); '
                  "rename or merge them")
            continue
        names[policy.name] = i
        policies.append((i, policy))
    return policies


def _parse_policy(p: _Problems, path: str, raw: object, allowed_keys: Sequence[str] | None = None) -> Policy | None:
    data = _mapping(p, path, raw, ("name", "pattern", "priority", "apply_to", "definition"))
    if data is None:
        return None
    name = _name(p, f"{path}.name", data.get("name"), "policy")
    pattern = data.get("pattern")
    if not isinstance(pattern, str):
        p.add(f"{path}.pattern", f"expected a regular expression string, got {pattern!r}")
        pattern = None
    else:
        try:
            re.compile(pattern)
        except re.error as error:
            p.add(f"{path}.pattern", f"{pattern!r} is not a valid regular expression ({error})")
            pattern = None
    priority = _int(p, f"{path}.priority", data.get("priority", 0), 0)
    apply_to = _choice(p, f"{path}.apply_to", data.get("apply_to", "queues"), APPLY_TO)
    raw_definition = data.get("definition")
    definition: dict[str, str] | None = {}
    if not isinstance(raw_definition, Mapping) or not raw_definition:
        p.add(f"{path}.definition", "expected a non-empty mapping of policy keys to values")
        definition = None
    else:
        for key, value in raw_definition.items():
            if allowed_keys is not None and key not in allowed_keys:
                p.add(f"{path}.definition.{key}",
                      f"not allowed in an operator policy (allowed: {', '.join(allowed_keys)})")
                definition = None
            elif isinstance(value, bool) or not isinstance(value, (str, int)):
                p.add(f"{path}.definition.{key}", f"expected a string or an integer, got {value!r}")
                definition = None
            elif key in STRING_POLICY_KEYS and str(value).lstrip("+-").isdigit():
                p.add(f"{path}.definition.{key}", f"{value!r}: the provider sends digits-only values as integers, "
                      "which RabbitMQ refuses here; use a name with a letter in it")
                definition = None
            elif definition is not None:
                definition[str(key)] = str(value)
    if name is None or pattern is None or priority is None or apply_to is None or definition is None:
        return None
    return Policy(name, pattern, priority, apply_to, definition)


def _owned_names(queue: Queue) -> tuple[list[str], list[str]]:
    """Queues and exchanges that a configured queue brings into its vhost."""
    if queue.retry is None:
        return [queue.name], []
    return (naming.derived_queue_names(queue.name, len(queue.retry.delays_ms)),
            naming.derived_exchange_names(queue.name))


def _check_vhost_names(p: _Problems, path: str, exchanges: list[tuple[int, Exchange]],
                       queues: list[tuple[int, Queue]]) -> None:
    queue_owner: dict[str, str] = {}
    exchange_owner: dict[str, str] = {}
    for i, exchange in exchanges:
        where = f"{path}.exchanges[{i}].name"
        if exchange.name in exchange_owner:
            p.add(where, f'duplicate exchange "{exchange.name}" (also {exchange_owner[exchange.name]})')
        exchange_owner.setdefault(exchange.name, where)
    for i, queue in queues:
        where = f"{path}.queues[{i}].name"
        queue_names, exchange_names = _owned_names(queue)
        for owned, owners, kind in ((queue_names, queue_owner, "queue"), (exchange_names, exchange_owner, "exchange")):
            for name in owned:
                if name in owners:
                    p.add(where, f'{kind} "{name}" is also declared by {owners[name]}; rename one of them')
                owners.setdefault(name, where)


def _check_bindings(p: _Problems, path: str, exchanges: Mapping[str, Exchange], queues: list[tuple[int, Queue]],
                    named: set[str]) -> None:
    """`named`: every exchange name written in the vhost, valid or not (its own problem is reported)."""
    for i, queue in queues:
        for j, binding in enumerate(queue.bindings):
            where = f"{path}.queues[{i}].bindings[{j}]"
            declared = exchanges.get(binding.exchange)
            if binding.exchange not in named and not binding.external:
                p.add(f"{where}.exchange", f'"{binding.exchange}" is not declared in this vhost; '
                      "add it to exchanges or mark the binding external: true")
            if binding.exchange in named and binding.external:
                p.add(f"{where}.external", f'"{binding.exchange}" is declared in this vhost; remove external: true')
            if declared is not None and binding.arguments and declared.type != "headers":
                p.add(f"{where}.arguments", f'binding arguments only match on headers exchanges; '
                      f'"{declared.name}" is {declared.type}')


def parse_vhost(p: _Problems, path: str, raw: object, defaults: Defaults) -> Vhost | None:
    data = _mapping(p, path, raw, ("name", "existing", "exchanges", "queues", "policies", "operator_policies",
                                   "applications", "limits", "default_queue_type"))
    if data is None:
        return None
    name = data.get("name")
    if not isinstance(name, str) or not name:
        p.add(f"{path}.name", f"vhost name must be a non-empty string, got {name!r}")
        name = None
    elif "@" in name:
        p.add(f"{path}.name", f'"{name}": "@" breaks the provider\'s name@vhost IDs; rename the vhost')
        name = None
    elif name != name.strip():
        p.add(f"{path}.name", f'"{name}": leading or trailing whitespace; remove it')
        name = None
    elif naming.byte_length(name) > naming.MAX_NAME_BYTES:
        p.add(f"{path}.name", "vhost name is over 255 bytes; shorten it")
        name = None
    existing = _optional(data, "existing", lambda v: _bool(p, f"{path}.existing", v), name == "/")
    if name == "/" and existing is False:
        p.add(f"{path}.existing", 'the default vhost "/" is never managed by this stack; remove existing: false')
    exchanges: list[tuple[int, Exchange]] = []
    named: set[str] = set()
    for i, raw_exchange in enumerate(_list(p, f"{path}.exchanges", data.get("exchanges", _MISSING))):
        e_path = f"{path}.exchanges[{i}]"
        e_data = _mapping(p, e_path, raw_exchange, ("name", "type"))
        if e_data is None:
            continue
        e_name = _name(p, f"{e_path}.name", e_data.get("name"), "exchange")
        if isinstance(e_data.get("name"), str):
            named.add(e_data["name"])
        if "type" not in e_data:
            p.add(f"{e_path}.type", f"missing; use one of {', '.join(EXCHANGE_TYPES)}")
            continue
        e_type = _choice(p, f"{e_path}.type", e_data["type"], EXCHANGE_TYPES)
        if e_name is not None and e_type is not None:
            exchanges.append((i, Exchange(e_name, e_type)))
    queues: list[tuple[int, Queue]] = []
    for i, raw_queue in enumerate(_list(p, f"{path}.queues", data.get("queues", _MISSING))):
        queue = parse_queue(p, f"{path}.queues[{i}]", raw_queue, defaults)
        if queue is not None:
            queues.append((i, queue))
    policies = _parse_policies(p, f"{path}.policies", data.get("policies", _MISSING))
    ours = {name for _, queue in queues for name in _owned_names(queue)[0]}
    for i, policy in policies:
        if policy.name in ours:
            p.add(f"{path}.policies[{i}].name", f'"{policy.name}" is the name of a policy this stack derives for '
                  "that queue; rename the policy")
    _check_vhost_names(p, path, exchanges, queues)
    _check_bindings(p, path, {e.name: e for _, e in exchanges}, queues, named)
    operator_policies = _parse_policies(p, f"{path}.operator_policies", data.get("operator_policies", _MISSING),
                                        OPERATOR_POLICY_KEYS)
    # Applications consume input and plain queues (wait tiers are the broker's, error queues the
    # operators') and publish to exchanges the config names (not the retry machinery, reached via
    # the contract). Permission regexes do not tell queues from exchanges, so a consumed queue may
    # not share its name with any exchange: the read grant would let the app bind to that exchange.
    queue_names = {q.name for _, q in queues}
    exchange_names = named | {b.exchange for _, q in queues for b in q.bindings if b.external}
    all_exchanges = exchange_names | {n for _, q in queues for n in _owned_names(q)[1]}
    raw_apps = _list(p, f"{path}.applications", data.get("applications", _MISSING))
    applications = [(i, app) for i, raw_app in enumerate(raw_apps)
                    if (app := _parse_application(p, f"{path}.applications[{i}]", raw_app, queue_names,
                                                  exchange_names, all_exchanges))]
    limits = _optional(data, "limits", lambda v: _parse_limits(p, f"{path}.limits", v), Limits())
    default_queue_type = _optional(data, "default_queue_type",
                                   lambda v: _choice(p, f"{path}.default_queue_type", v, QUEUE_TYPES))
    if existing and ("limits" in data or "default_queue_type" in data):
        p.add(f"{path}.{'limits' if 'limits' in data else 'default_queue_type'}",
              "only a vhost this stack creates can be given limits or a default queue type; remove it")
    if name is None or existing is None or limits is None:
        return None
    return Vhost(name=name, existing=existing, exchanges=tuple(e for _, e in exchanges),
                 queues=tuple(q for _, q in queues), policies=tuple(pol for _, pol in policies),
                 operator_policies=tuple(pol for _, pol in operator_policies),
                 applications=tuple(app for _, app in applications),
                 application_indexes=tuple(i for i, _ in applications), limits=limits,
                 default_queue_type=default_queue_type)


def _names_list(p: _Problems, path: str, raw: object, known: set[str], kind: str) -> tuple[str, ...] | None:
    names = []
    for i, value in enumerate(_list(p, path, raw)):
        if not isinstance(value, str) or value not in known:
            p.add(f"{path}[{i}]", f"{value!r} is not {kind} of this vhost; declare it or remove it here")
            return None
        names.append(value)
    return tuple(names)


def _parse_application(p: _Problems, path: str, raw: object, queues: set[str], exchanges: set[str],
                       all_exchanges: set[str]) -> Application | None:
    data = _mapping(p, path, raw, ("user", "publishes", "consumes", "topic_permissions"))
    if data is None:
        return None
    user = _name(p, f"{path}.user", data.get("user"), "user", allow_reserved=True)
    publishes = _names_list(p, f"{path}.publishes", data.get("publishes", _MISSING), exchanges, "an exchange")
    consumes = _names_list(p, f"{path}.consumes", data.get("consumes", _MISSING), queues,
                           "an input or plain queue")
    for i, queue in enumerate(consumes or ()):
        if queue in all_exchanges:
            p.add(f"{path}.consumes[{i}]", f'"{queue}" is also an exchange name: permissions cannot tell them apart, '
                  "so this application could bind the queue to that exchange; rename one of them")
            consumes = None
            break
    topic: list[TopicPermission] = []
    for i, raw_topic in enumerate(_list(p, f"{path}.topic_permissions", data.get("topic_permissions", _MISSING))):
        t_path = f"{path}.topic_permissions[{i}]"
        t_data = _mapping(p, t_path, raw_topic, ("exchange", "write", "read"))
        if t_data is None:
            continue
        regexes = [_regex(p, f"{t_path}.{key}", t_data.get(key, "^$")) for key in ("write", "read")]
        if not isinstance(t_data.get("exchange"), str) or t_data["exchange"] not in exchanges:
            p.add(f"{t_path}.exchange", f"{t_data.get('exchange')!r} is not an exchange of this vhost")
        elif None not in regexes:
            topic.append(TopicPermission(t_data["exchange"], *regexes))
    if user is None or publishes is None or consumes is None:
        return None
    return Application(user, publishes, consumes, tuple(topic))


def _regex(p: _Problems, path: str, value: object) -> str | None:
    if not isinstance(value, str):
        p.add(path, f"expected a regular expression string, got {value!r}")
        return None
    try:
        re.compile(value)
    except re.error as error:
        p.add(path, f"{value!r} is not a valid regular expression ({error})")
        return None
    return value


def _parse_limits(p: _Problems, path: str, raw: object) -> Limits | None:
    data = _mapping(p, path, raw, ("max_connections", "max_queues"))
    if data is None:
        return None
    values = {key: _int(p, f"{path}.{key}", data[key], 0) for key in ("max_connections", "max_queues") if key in data}
    return None if None in values.values() else Limits(**values)


def load_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """Parse the `rabbitmq-retry:` namespace (keys without the prefix); raise ConfigError with all problems."""
    p = _Problems()
    top = _mapping(p, "", raw, TOP_LEVEL_KEYS) or {}
    protect = _optional(top, "protect", lambda v: _bool(p, "protect", v), False)
    retain = _optional(top, "retain_error_queues", lambda v: _bool(p, "retain_error_queues", v), False)
    defaults = _parse_defaults(p, top.get("defaults", _MISSING))
    if "vhosts" not in top:
        p.add("vhosts", "missing; set rabbitmq-retry:vhosts to a list of vhosts (see README)")
    elif top["vhosts"] is None:
        p.add("vhosts", "null; list the vhosts, or write [] to manage none (that deletes what this stack created)")
    vhosts: list[tuple[int, Vhost]] = []
    for i, raw_vhost in enumerate(_list(p, "vhosts", top.get("vhosts", _MISSING))):
        vhost = parse_vhost(p, f"vhosts[{i}]", raw_vhost, defaults)
        if vhost is not None:
            vhosts.append((i, vhost))
    passwords = top.get("passwords", {})
    if not isinstance(passwords, Mapping):
        p.add("passwords", "expected a mapping of application user to password, set with "
              "`pulumi config set --secret --path 'rabbitmq-retry:passwords.<user>' <password>`")
        passwords = {}
    users: dict[str, str] = {}
    for i, vhost in vhosts:
        for j, app in zip(vhost.application_indexes, vhost.applications, strict=True):
            where = f"vhosts[{i}].applications[{j}].user"
            if app.user in users:
                p.add(where, f'user "{app.user}" is also {users[app.user]}; give each application its own user')
            users.setdefault(app.user, where)
            if not isinstance(passwords.get(app.user), str) or not passwords.get(app.user):
                p.add(where, f'no password for "{app.user}": `pulumi config set --secret --path '
                      f"'rabbitmq-retry:passwords.{app.user}' <password>`")
    seen: dict[str, int] = {}
    for i, vhost in vhosts:
        if vhost.name in seen:
            p.add(f"vhosts[{i}].name", f'duplicate vhost "{vhost.name}" (also vhosts[{seen[vhost.name]}]); merge them')
        seen.setdefault(vhost.name, i)
    p.raise_if_any()
    return StackConfig(vhosts=tuple(v for _, v in vhosts), defaults=defaults,
                       protect=bool(protect), retain_error_queues=bool(retain))


def load_queue(raw: Mapping[str, Any], path: str, defaults: Defaults = Defaults()) -> Queue:
    """Parse one queue entry (the shape of a `queues[]` item), for components used outside a stack config."""
    p = _Problems()
    queue = parse_queue(p, path, raw, defaults)
    p.raise_if_any()
    assert queue is not None
    return queue


def load_vhost(raw: Mapping[str, Any], path: str, defaults: Defaults = Defaults()) -> Vhost:
    """Parse one vhost entry (the shape of a `vhosts[]` item)."""
    p = _Problems()
    vhost = parse_vhost(p, path, raw, defaults)
    p.raise_if_any()
    assert vhost is not None
    return vhost
