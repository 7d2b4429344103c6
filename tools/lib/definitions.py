"""The evaluated plan as RabbitMQ definitions (`make definitions`): what `rabbitmqctl import_definitions` and
`POST /api/definitions` take, from the program's own recording under mocks, each object with the inputs `pulumi up`
would send for it (docs/provider.md: string-only `arguments` against typed `argumentsJson`, policy values converted
as the provider converts them).

Importing definitions only adds and updates: it never deletes a queue, an exchange or a binding, never replaces a
queue whose arguments differ (the import fails on it instead), and knows nothing of the stack's state. It puts a
topology on a broker without the Pulumi CLI (the quick start's tour, a throw-away broker for tests); it is not
`pulumi up`.

What a recording cannot carry is left out and said (`Export.left_out`): the users' passwords (secrets of the stack:
each user is exported without one), and the shovels of migrations (their URIs hold the shovel user's password).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.lib import engine
from tools.lib.mockrun import Registered

_INT64 = re.compile(r"[+-]?[0-9]+")


@dataclass
class Export:
    definitions: dict[str, Any]
    left_out: list[str] = field(default_factory=list)
    """One line per object or value the definitions do not carry, and what to do about it."""


def _number(value: Any) -> Any:
    """Pulumi carries numbers as floats (10.0): whole ones go to the broker as integers."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def policy_definition(definition: Mapping[str, Any]) -> dict[str, Any]:
    """As the provider writes a policy's definition (docs/provider.md §4): each value that parses as a 64-bit
    integer is sent as one, every other string as it is."""
    out: dict[str, Any] = {}
    for key, value in definition.items():
        if isinstance(value, str) and _INT64.fullmatch(value):
            out[key] = int(value)
        else:
            out[key] = _number(value)
    return out


def arguments(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A queue's, exchange's or binding's arguments: typed from `argumentsJson`, else the string-only `arguments`."""
    if settings.get("argumentsJson"):
        loaded: dict[str, Any] = json.loads(settings["argumentsJson"])
        return loaded
    return {str(k): str(v) for k, v in (settings.get("arguments") or {}).items()}


def _policy(r: Registered) -> dict[str, Any]:
    policy = r.inputs["policy"]
    return {"vhost": r.inputs["vhost"], "name": r.inputs["name"], "pattern": policy["pattern"],
            "apply-to": policy.get("applyTo") or "all", "priority": int(_number(policy.get("priority") or 0)),
            "definition": policy_definition(policy.get("definition") or {})}


def export(resources: Sequence[Registered]) -> Export:
    """Definitions for every object the recording declares, in the order RabbitMQ imports them."""
    d: dict[str, list[Any]] = {key: [] for key in ("users", "vhosts", "permissions", "topic_permissions",
                                                   "parameters", "policies", "queues",
                                                   "exchanges", "bindings")}
    left_out: list[str] = []
    limits = {r.inputs["user"]: {k: int(_number(v)) for k, v in (r.inputs.get("limits") or {}).items()}
              for r in resources if r.type == engine.USER_LIMITS}
    for r in resources:
        i = r.inputs
        if r.type == engine.VHOST:
            queue_type = i.get("defaultQueueType")  # 3.10 reads it at the top, 4.x from the metadata
            d["vhosts"].append({"name": i["name"], **({"default_queue_type": queue_type, "metadata": {
                "default_queue_type": queue_type}} if queue_type else {})})
            vhost_limits = {key: int(i[prop]) for key, prop in (("max-connections", "maxConnections"),
                                                               ("max-queues", "maxQueues")) if i.get(prop)}
            if vhost_limits:
                d["parameters"].append({"vhost": i["name"], "component": "vhost-limits", "name": "limits",
                                        "value": vhost_limits})
        elif r.type == engine.QUEUE:
            s = i.get("settings") or {}
            d["queues"].append({"name": i["name"], "vhost": i["vhost"], "durable": bool(s.get("durable")),
                                "auto_delete": bool(s.get("autoDelete")), "arguments": arguments(s)})
        elif r.type == engine.EXCHANGE:
            s = i.get("settings") or {}
            d["exchanges"].append({"name": i["name"], "vhost": i["vhost"], "type": s.get("type"),
                                   "durable": bool(s.get("durable")), "auto_delete": bool(s.get("autoDelete")),
                                   "internal": False, "arguments": arguments(s)})
        elif r.type == engine.BINDING:
            d["bindings"].append({"source": i["source"], "vhost": i["vhost"], "destination": i["destination"],
                                  "destination_type": i.get("destinationType") or "queue",
                                  "routing_key": i.get("routingKey") or "", "arguments": arguments(i)})
        elif r.type == engine.POLICY:
            d["policies"].append(_policy(r))
        elif r.type == engine.OPERATOR_POLICY:  # definitions carry none: the import would drop it unsaid
            p = _policy(r)
            left_out.append(f"operator policy {p['name']} in vhost {p['vhost']}: definitions carry no operator policy; "
                            f"set it with `rabbitmqctl set_operator_policy -p {p['vhost']} --priority {p['priority']} "
                            f"--apply-to {p['apply-to']} {p['name']} '{p['pattern']}' "
                            f"'{json.dumps(p['definition'], sort_keys=True)}'`")
        elif r.type == engine.USER:
            d["users"].append({"name": i["name"], "password_hash": "", "hashing_algorithm":
                               "rabbit_password_hashing_sha256", "tags": list(i.get("tags") or []),
                               **({"limits": limits[i["name"]]} if i["name"] in limits else {})})
            left_out.append(f"user {i['name']}: exported without a password (a secret of the stack); set it with "
                            f"`rabbitmqctl change_password {i['name']} <password>`")
        elif r.type == engine.PERMISSIONS:
            p = i["permissions"]
            d["permissions"].append({"user": i["user"], "vhost": i["vhost"], "configure": p.get("configure") or "",
                                     "write": p.get("write") or "", "read": p.get("read") or ""})
        elif r.type == engine.TOPIC_PERMISSIONS:
            d["topic_permissions"] += [{"user": i["user"], "vhost": i["vhost"], "exchange": p["exchange"],
                                        "write": p.get("write") or "", "read": p.get("read") or ""}
                                       for p in i.get("permissions") or ()]
        elif r.type == engine.SHOVEL:
            left_out.append(f"shovel {i['name']} in vhost {i['vhost']}: not exported (its URIs hold the shovel "
                            "user's password); a migration is applied with `pulumi up`")
    return Export(dict(d), left_out)


def text(found: Export) -> str:
    return json.dumps(found.definitions, indent=2, sort_keys=True) + "\n"


_ONE = {"users": "user", "vhosts": "vhost", "parameters": "parameter", "policies": "policy", "queues": "queue",
        "exchanges": "exchange", "bindings": "binding"}


def counts(found: Export) -> str:
    """`1 vhost, 12 queues, …`, the kinds present."""
    return ", ".join(f"{len(v)} {_ONE.get(k, k) if len(v) == 1 else k}".replace("_", " ")
                     for k, v in found.definitions.items() if v)
