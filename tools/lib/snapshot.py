"""What one vhost holds, read (GET only) from the live management API or from an exported definitions file.

`make adopt` and `make drift` both start here. The live API gives each binding its `properties_key`, the part
of a binding's import ID that cannot be computed for a binding with arguments; a definitions file does not
carry it, nor message counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rabbitmq_retry_client.management import ManagementClient, path_escape


class DefinitionsError(Exception):
    """A file that is not definitions, or an adoption that cannot be made; the live API's failures are the
    client's `ManagementError`."""


@dataclass(frozen=True)
class Snapshot:
    """One vhost's objects as the broker stores them (management API field names)."""

    vhost: str
    source: str
    """Where it was read: the endpoint or the file."""
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    exchanges: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Without the default exchange ("")."""
    bindings: list[dict[str, Any]] = field(default_factory=list)
    """Without the default exchange's implicit bindings; `properties_key` only when read live."""
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    operator_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    permissions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By user: configure, write and read in this vhost."""
    topic_permissions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """By user: exchange, write and read of each entry in this vhost."""
    user_limits: dict[str, dict[str, Any]] | None = None
    """By user, broker-wide (users are): `max-connections`, `max-channels`; None when the source does not carry
    them (a single-vhost export), {} for a user without limits."""
    broker_version: str = ""
    amqp_ports: tuple[int, ...] = ()
    """The broker's plain AMQP listener ports (`/api/overview` listeners, protocol `amqp`); () from a file. A shovel
    runs on the broker and connects to one of them (`rabbitmq-retry:amqp_port`)."""
    live: bool = False
    exists: bool = True
    """False when the vhost itself is not on the broker."""
    shovels: dict[str, dict[str, Any]] | None = None
    """Dynamic shovels of this vhost by name (their parameter's value: `src-queue`, `dest-queue`, …); None when the
    source does not carry them."""
    users: frozenset[str] | None = None
    """Every user of the broker (broker-wide); None when the source does not carry them (a single-vhost export)."""
    reader: str = ""
    """The user the live API was read as (its permissions in the vhost are the provider's own); "" from a file."""

    def messages(self, queue: str) -> int | None:
        """Messages in `queue` (ready and unacknowledged) when read live; None from a file."""
        value = self.queues.get(queue, {}).get("messages")
        return int(value) if isinstance(value, (int, float)) else None


def _keep(item: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: item[k] for k in keys if k in item}


QUEUE_FIELDS = ("name", "durable", "auto_delete", "arguments", "type", "messages", "consumers", "policy",
                "operator_policy", "exclusive")
EXCHANGE_FIELDS = ("name", "type", "durable", "auto_delete", "internal", "arguments")
BINDING_FIELDS = ("source", "destination", "destination_type", "routing_key", "arguments", "properties_key")
POLICY_FIELDS = ("name", "pattern", "apply-to", "priority", "definition")
PERMISSION_FIELDS = ("configure", "write", "read")
TOPIC_PERMISSION_FIELDS = ("exchange", "write", "read")
SHOVEL_COMPONENT = "shovel"
"""The runtime parameter component of a dynamic shovel (`/api/parameters/shovel/<vhost>`)."""


def _snapshot(vhost: str, source: str, queues: list[Any], exchanges: list[Any], bindings: list[Any],
              policies: list[Any], operator_policies: list[Any], version: str, live: bool,
              permissions: list[Any], topic_permissions: list[Any],
              user_limits: dict[str, dict[str, Any]] | None = None, parameters: list[Any] | None = None,
              users: list[Any] | None = None) -> Snapshot:
    def mine(items: list[Any]) -> list[dict[str, Any]]:
        return [i for i in items if isinstance(i, dict) and i.get("vhost", vhost) == vhost]

    topics: dict[str, list[dict[str, Any]]] = {}
    for entry in mine(topic_permissions):
        topics.setdefault(entry["user"], []).append(_keep(entry, TOPIC_PERMISSION_FIELDS))

    return Snapshot(
        vhost=vhost, source=source, broker_version=version, live=live,
        queues={q["name"]: _keep(q, QUEUE_FIELDS) for q in mine(queues) if not q.get("exclusive")},
        exchanges={x["name"]: _keep(x, EXCHANGE_FIELDS) for x in mine(exchanges) if x.get("name")},
        bindings=[_keep(b, BINDING_FIELDS) for b in mine(bindings) if b.get("source")],
        policies={p["name"]: _keep(p, POLICY_FIELDS) for p in mine(policies)},
        operator_policies={p["name"]: _keep(p, POLICY_FIELDS) for p in mine(operator_policies)},
        permissions={p["user"]: _keep(p, PERMISSION_FIELDS) for p in mine(permissions) if p.get("user")},
        topic_permissions=topics,
        user_limits=user_limits,
        shovels=None if parameters is None else {p["name"]: dict(p.get("value") or {}) for p in mine(parameters)
                                                 if p.get("component") == SHOVEL_COMPONENT and p.get("name")},
        users=None if users is None else frozenset(u["name"] for u in users if isinstance(u, dict) and "name" in u),
    )


def amqp_ports(overview: Mapping[str, Any]) -> tuple[int, ...]:
    """The plain AMQP listener ports of an `/api/overview` (every node's), sorted."""
    return tuple(sorted({int(listener["port"]) for listener in overview.get("listeners") or []
                         if isinstance(listener, Mapping) and listener.get("protocol") == "amqp"
                         and isinstance(listener.get("port"), int)}))


def read_live(endpoint: ManagementClient, vhost: str) -> Snapshot:
    """GET only: overview, then the vhost's queues, exchanges, bindings, policies, operator policies and
    (topic) permissions, and the users' limits."""
    v = path_escape(vhost)
    overview = endpoint.get("overview") or {}
    version = str(overview.get("rabbitmq_version", ""))
    if endpoint.get(f"vhosts/{v}") is None:
        return Snapshot(vhost, endpoint.url, broker_version=version, live=True, exists=False,
                        amqp_ports=amqp_ports(overview))
    snapshot = _snapshot(vhost, endpoint.url, endpoint.get(f"queues/{v}") or [],
                         endpoint.get(f"exchanges/{v}") or [], endpoint.get(f"bindings/{v}") or [],
                         endpoint.get(f"policies/{v}") or [], endpoint.get(f"operator-policies/{v}") or [], version,
                         live=True, permissions=endpoint.get(f"vhosts/{v}/permissions") or [],
                         topic_permissions=endpoint.get(f"vhosts/{v}/topic-permissions") or [],
                         user_limits={e["user"]: dict(e.get("value") or {}) for e in endpoint.get("user-limits") or []
                                      if isinstance(e, dict) and "user" in e},
                         parameters=[{**p, "component": SHOVEL_COMPONENT}
                                     for p in endpoint.get(f"parameters/{SHOVEL_COMPONENT}/{v}") or []],
                         users=endpoint.get("users") or [])
    return replace(snapshot, amqp_ports=amqp_ports(overview), reader=endpoint.username)


def read_file(path: Path, vhost: str) -> Snapshot:
    """A broker-wide (`GET /api/definitions`) or single-vhost export (`GET /api/definitions/<vhost>`)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise DefinitionsError(f"{path}: {error}") from None
    if not isinstance(data, dict) or not any(k in data for k in ("queues", "exchanges", "bindings")):
        raise DefinitionsError(f"{path}: not a RabbitMQ definitions export (no queues, exchanges or bindings)")
    version = str(data.get("rabbitmq_version") or data.get("rabbit_version") or "")
    if "vhosts" in data and vhost not in {v.get("name") for v in data["vhosts"] if isinstance(v, dict)}:
        return Snapshot(vhost, str(path), broker_version=version, exists=False)
    return _snapshot(vhost, str(path), data.get("queues") or [], data.get("exchanges") or [],
                     data.get("bindings") or [], data.get("policies") or [], data.get("operator_policies") or [],
                     version, live=False, permissions=data.get("permissions") or [],
                     topic_permissions=data.get("topic_permissions") or [],
                     user_limits=None if "users" not in data else {
                         u["name"]: dict(u.get("limits") or {}) for u in data["users"] if isinstance(u, dict)},
                     parameters=data.get("parameters") if "parameters" in data else None,
                     users=data.get("users") if "users" in data else None)
