"""What a recording of the program lists, in the words a reviewer uses: short types, physical names,
key inputs, and the retry contract of each retryable queue. Shared by `make plan` and `make review`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tools.mockrun import Registered
from tools.stack_file import SECRET_MARKER, is_secret_placeholder

RETRYABLE_COMPONENT = "rabbitmq-retry:index:RetryableQueue"
VHOST_COMPONENT = "rabbitmq-retry:index:Vhost"
QueueKey = tuple[str, str]
"""(vhost, queue) of a retryable queue."""

SHORT_TYPES = {
    "rabbitmq:index/vHost:VHost": "VHost",
    "rabbitmq:index/queue:Queue": "Queue",
    "rabbitmq:index/exchange:Exchange": "Exchange",
    "rabbitmq:index/binding:Binding": "Binding",
    "rabbitmq:index/policy:Policy": "Policy",
    "rabbitmq:index/operatorPolicy:OperatorPolicy": "OperatorPolicy",
    "rabbitmq:index/user:User": "User",
    "rabbitmq:index/permissions:Permissions": "Permissions",
    "rabbitmq:index/topicPermissions:TopicPermissions": "TopicPermissions",
}


def short_type(resource_type: str) -> str:
    return SHORT_TYPES.get(resource_type, resource_type.rsplit(":", 1)[-1])


def physical_name(resource: Registered) -> str:
    inputs = resource.inputs
    if "name" in inputs:
        return str(inputs["name"])
    if "source" in inputs:
        return f'{inputs["source"]} → {inputs["destination"]}'
    if "user" in inputs:
        return f'{inputs["user"]}@{inputs.get("vhost", "/")}'
    return ""


def shown(value: Any) -> Any:
    """A value as a report shows it: a secret's placeholder as just `[secret]`."""
    return SECRET_MARKER if is_secret_placeholder(value) else value


def key_inputs(resource: Registered) -> str:
    """The inputs a reviewer needs, compactly; the full inputs are in `python -m tools.mockrun`."""
    inputs = resource.inputs
    kind = short_type(resource.type)
    flags = " protect" * resource.protect + " retain-on-delete" * resource.retain_on_delete
    if kind == "Queue":
        settings = inputs.get("settings", {})
        arguments = json.loads(settings.get("argumentsJson", "{}"))
        text = f"durable={settings.get('durable')} " + " ".join(f"{k}={v}" for k, v in sorted(arguments.items()))
    elif kind == "Exchange":
        text = f"type={inputs['settings']['type']} durable={inputs['settings'].get('durable')}"
    elif kind == "Binding":
        text = f"routing_key={inputs.get('routingKey', '')!r}"
        if "argumentsJson" in inputs:
            text += f" arguments={inputs['argumentsJson']}"
    elif kind in ("Policy", "OperatorPolicy"):
        policy = inputs["policy"]
        definition = " ".join(f"{k}={v}" for k, v in sorted(policy["definition"].items()))
        text = (f"pattern={policy['pattern']} priority={int(policy['priority'])} apply-to={policy['applyTo']} "
                f"{definition}")
    elif kind == "Permissions":
        p = inputs["permissions"]
        text = f"configure={p['configure']!r} write={p['write']!r} read={p['read']!r}"
    else:
        text = " ".join(f"{k}={shown(v)}" for k, v in sorted(inputs.items())
                        if k != "name" and not isinstance(v, dict))
    return (text + flags).strip()


def contracts(recording: Sequence[Registered]) -> dict[QueueKey, dict[str, Any]]:
    """Retry contracts by (vhost, queue), from the Vhost and RetryableQueue components' outputs."""
    found: dict[QueueKey, dict[str, Any]] = {}
    for r in recording:
        if r.type == VHOST_COMPONENT:
            items = list(r.outputs.get("retry_contracts", {}).values())
        else:
            items = [r.outputs["contract"]] if r.type == RETRYABLE_COMPONENT and "contract" in r.outputs else []
        for contract in items:
            found[(contract["vhost"], contract["queue"])] = contract
    return found


def retryable_queue_of(record: Registered, by_urn: Mapping[str, Registered]) -> QueueKey | None:
    """The retryable queue a resource belongs to: the RetryableQueue component itself or its parent."""
    component = record if record.type == RETRYABLE_COMPONENT else by_urn.get(record.parent or "")
    contract = component.outputs.get("contract") if component and component.type == RETRYABLE_COMPONENT else None
    return (contract["vhost"], contract["queue"]) if contract else None
