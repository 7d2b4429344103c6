"""What a recording of the program lists, in the words a reviewer uses: short types, physical names,
key inputs, and the retry contract of each retryable queue. Shared by `make plan` and `make review`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components import naming
from components.effective import PolicyIndex
from components.plan import PolicyPlan, QueuePlan
from tools.lib.engine import short_type
from tools.lib.mockrun import Registered
from tools.lib.stack_file import SECRET_MARKER, is_secret_placeholder

RETRYABLE_COMPONENT = "rabbitmq-retry:index:RetryableQueue"
VHOST_COMPONENT = "rabbitmq-retry:index:Vhost"
QueueKey = tuple[str, str]
"""(vhost, queue) of a retryable queue."""

def natural(name: str) -> list[Any]:
    """Numbers in a name compared as numbers: `rabbitmq-retry.delay.2` before `rabbitmq-retry.delay.10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


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
        if inputs.get("destinationType") == "exchange":
            text += " destination_type=exchange"  # exchange to exchange: the delay levels pass a 0 bit on
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


CONFIG_POLICY_KEYS = {"rabbitmq:index/policy:Policy": ("policy", naming.config_policy_key),
                      "rabbitmq:index/operatorPolicy:OperatorPolicy": ("operator policy", naming.operator_policy_key)}
"""The kind and the logical key (`components.naming`, which the planner mints them with) of the policies a stack
config declares (`policies[]`, `operator_policies[]`) under its Vhost component; the per-queue policies have
other keys."""


@dataclass(frozen=True)
class ConfigPolicy:
    vhost: str
    kind: str
    """"policy" or "operator policy"."""
    name: str
    pattern: str
    apply_to: str
    matches: int
    """Queues and exchanges of the recording in its vhost that it applies to."""


def config_policies(recording: Sequence[Registered]) -> dict[tuple[str, str, str], ConfigPolicy]:
    """The stack config's user and operator policies, by (vhost, kind, name), with how many planned queues
    or exchanges each matches, by the preview checks' own rules (`components.effective`: pattern searched,
    apply-to and the queue type's refused keys honoured)."""
    by_urn = {r.urn: r for r in recording}
    queues: dict[str, list[QueuePlan]] = {}
    exchanges: dict[str, list[str]] = {}
    for r in recording:
        vhost = str(r.inputs.get("vhost", "/"))
        if short_type(r.type) == "Queue":
            arguments = json.loads(r.inputs.get("settings", {}).get("argumentsJson") or "{}")
            queue_type = str(arguments.get("x-queue-type", "classic"))
            queues.setdefault(vhost, []).append(QueuePlan("", str(r.inputs["name"]), queue_type, arguments, "plain"))
        elif short_type(r.type) == "Exchange":
            exchanges.setdefault(vhost, []).append(str(r.inputs["name"]))
    found = {}
    for r in recording:
        config_policy = CONFIG_POLICY_KEYS.get(r.type)
        parent = by_urn.get(r.parent or "")
        if config_policy is None or parent is None or parent.type != VHOST_COMPONENT:
            continue
        kind, key = config_policy
        if r.name != naming.logical_name(parent.name, key(str(r.inputs.get("name")))):
            continue
        vhost, policy = str(r.inputs.get("vhost", "/")), r.inputs["policy"]
        planned = PolicyPlan("", str(r.inputs["name"]), str(policy["pattern"]), int(policy.get("priority") or 0),
                             dict(policy.get("definition") or {}), str(policy.get("applyTo") or "all"))
        try:
            index = PolicyIndex([planned])
        except re.error:  # the config check refuses these; never hide a policy behind a crash here
            continue
        matches = (sum(1 for queue in queues.get(vhost, []) if index.matching_queue(queue))
                   + sum(1 for exchange in exchanges.get(vhost, []) if index.matching_exchange(exchange)))
        found[(vhost, kind, planned.name)] = ConfigPolicy(vhost, kind, planned.name, planned.pattern, planned.apply_to,
                                                          matches)
    return found
