"""What a stack cannot own in a vhost, and why: `make adopt` leaves it alone on purpose (a queue that deletes itself,
declared by its application at use; an exchange or binding of a shape this project does not declare), and `make drift`
lists it as expected in a vhost the stack references (`existing: true`), not as drift."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.model import naming, wire
from components.model.durations import format_duration
from components.model.stack_config import EXCHANGE_TYPES, QUEUE_TYPES
from tools.lib.markdown import code
from tools.lib.recognise import applied, dead_letter, own_policy
from tools.lib.snapshot import Snapshot


def valid_name(name: str) -> bool:
    return bool(name) and "@" not in name and "/" not in name and not name.startswith(naming.RESERVED_PREFIX) \
        and name == name.strip()


def kept_detail(snapshot: Snapshot, queue: str) -> str:
    """What a queue kept as it is does with a message, in words: its TTL and where it dead-letters."""
    letter = dead_letter(snapshot, queue)
    parts = []
    if letter.ttl_ms is not None:
        parts.append(f"holds a message {format_duration(letter.ttl_ms)}")
    if letter.exchange is not None:
        route = "the default exchange" if letter.exchange == "" else f"exchange {code(letter.exchange)}"
        key = f" with key {code(letter.routing_key)}" if letter.routing_key is not None else ""
        parts.append(f"dead-letters to {route}{key}")
    if letter.ttl_ms is not None and letter.exchange is not None:
        parts.append("a retry waiting here comes back on time through that route, before and after adoption")
    return "; ".join(parts) or "kept with its arguments"


def unmanageable_exchange(info: dict[str, Any]) -> str | None:
    """Why the stack cannot declare this exchange as it is, or None."""
    if info.get("type") not in EXCHANGE_TYPES:
        return f"type {info.get('type')} (this project declares {', '.join(EXCHANGE_TYPES)})"
    if not info.get("durable") or info.get("auto_delete") or info.get("internal"):
        return "not durable, auto-delete or internal: this project declares durable exchanges only"
    if info.get("arguments"):
        return f"arguments {info['arguments']} (this project declares none)"
    if not valid_name(info["name"]):
        return "a name the provider cannot manage (`@`, `/`, `amq.`)"
    return None


def unmanageable_queue(snapshot: Snapshot, name: str) -> str | None:
    """Why the stack cannot own the queue `name` as it is, or None."""
    info = snapshot.queues[name]
    arguments = dict(info.get("arguments") or {})
    queue_type = str(arguments.get(wire.QUEUE_TYPE.argument) or info.get("type") or "classic")
    if info.get("auto_delete") or not info.get("durable") or name.startswith(naming.RESERVED_PREFIX):
        return "transient (auto-delete, non-durable or server-named)"
    if queue_type not in QUEUE_TYPES or not valid_name(name):
        return f"a {queue_type} queue or a name the provider cannot manage"
    if wire.EXPIRES.argument in arguments:
        return (f"deletes itself when unused (x-expires {format_duration(int(arguments[wire.EXPIRES.argument]))}), "
                "so the stack cannot own it; left as it is, it "
                + kept_detail(snapshot, name).replace("; a retry", ", and a retry"))
    if queue_type == "quorum" and (policy := applied(snapshot, name).policy) is not None \
            and (policy.name != name or own_policy(snapshot, name) is None):
        return (f"user policy {code(policy.name)} applies to it "
                f"({', '.join(sorted(policy.definition))}); the stack gives every quorum "
                "queue a `delivery-limit` policy of its own, which would take that policy's place "
                "(RabbitMQ applies one user policy to a queue) and silently drop its settings: left as it "
                "is, still under its policy. To manage it, move the policy's settings into the queue's "
                "config (e.g. `max_length`) and narrow the policy's pattern")
    return None


def unmanageable_binding(snapshot: Snapshot, binding: Mapping[str, Any]) -> str | None:
    """Why the stack cannot declare `binding`, or None: one to an exchange, or from or to an object it cannot own."""
    if binding.get("destination_type") == "exchange":
        return "to an exchange (this project declares exchange-to-exchange bindings only of its own strategies)"
    destination, source = str(binding.get("destination")), str(binding.get("source"))
    if destination in snapshot.queues and unmanageable_queue(snapshot, destination) is not None:
        return f"to queue {code(destination)}, which the stack cannot own"
    if source in snapshot.exchanges and unmanageable_exchange(snapshot.exchanges[source]) is not None:
        return f"from exchange {code(source)}, which the stack cannot own"
    return None
