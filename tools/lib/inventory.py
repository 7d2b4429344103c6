"""What a recording of the program lists, in the words a reviewer uses: short types, physical names,
key inputs, and the retry contract of each retryable queue. Shared by `make plan` and `make review`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.config.pulumi_yaml import SECRET_MARKER, is_secret_placeholder
from components.model import wire
from components.model.plan_types import PolicyPlan, QueuePlan
from components.plan.effective import PolicyIndex
from tools.lib import definitions
from tools.lib.engine import USER_LIMITS, short_type
from tools.lib.mockrun import Registered
from tools.lib.planned import PlanIndex, QueueKey

RETRYABLE_COMPONENT = "rabbitmq-retry:index:RetryableQueue"
VHOST_COMPONENT = "rabbitmq-retry:index:Vhost"

def natural(name: str) -> list[Any]:
    """Numbers in a name compared as numbers: `rabbitmq-retry.delay.2` before `rabbitmq-retry.delay.10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


def physical_name(resource: Registered) -> str:
    inputs = resource.inputs
    if "name" in inputs:
        return str(inputs["name"])
    if "source" in inputs:
        return f'{inputs["source"]} → {inputs["destination"]}'
    if resource.type == USER_LIMITS:  # broker-wide, not of a vhost
        return str(inputs.get("user"))
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
    elif resource.type == USER_LIMITS:
        text = " ".join(f"{k}={int(v)}" for k, v in sorted((inputs.get("limits") or {}).items()))
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


CONFIG_POLICY_KINDS = {"config": "policy", "operator": "operator policy"}
"""The policies a stack config declares (`policies[]`, `operator_policies[]`), by their role in the plan; the
plan derives the others for its queues."""


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


def queue_plan(name: str, arguments: dict[str, Any], queue_type: str | None = None) -> QueuePlan:
    """A queue as the plan has it, for the preview checks' matching rules (`components.plan.effective`): its type
    from its arguments, else `queue_type`."""
    return QueuePlan(name, name, str(arguments.get(wire.QUEUE_TYPE.argument) or queue_type or "classic"), arguments,
                     "plain")


def policy_plan(name: str, policy: Mapping[str, Any], apply_to: str = "applyTo") -> PolicyPlan:
    """A policy as the plan has it, for the same rules, from a recorded `policy` input or (`apply_to`: "apply-to")
    the broker's."""
    return PolicyPlan(name, name, str(policy.get("pattern", "")), int(policy.get("priority") or 0),
                      {k: str(v) for k, v in (policy.get("definition") or {}).items()},
                      str(policy.get(apply_to) or "all"), source=f"policy {name}")


def config_policies(recording: Sequence[Registered], plan: PlanIndex) -> dict[tuple[str, str, str], ConfigPolicy]:
    """The stack config's user and operator policies (by their role in `plan`), by (vhost, kind, name), with how
    many queues or exchanges of the recording each matches, by the preview checks' own rules
    (`components.plan.effective`: pattern searched, apply-to and the queue type's refused keys honoured)."""
    queues: dict[str, list[QueuePlan]] = {}
    exchanges: dict[str, list[str]] = {}
    for r in recording:
        vhost = str(r.inputs.get("vhost", "/"))
        if short_type(r.type) == "Queue":
            declared = definitions.arguments(r.inputs.get("settings") or {})
            queues.setdefault(vhost, []).append(queue_plan(str(r.inputs["name"]), declared))
        elif short_type(r.type) == "Exchange":
            exchanges.setdefault(vhost, []).append(str(r.inputs["name"]))
    found = {}
    for r in recording:
        known = plan.get(r.urn)
        kind = CONFIG_POLICY_KINDS.get(known.role) if known is not None and known.kind.endswith("Policy") else None
        if kind is None:
            continue
        vhost, written = str(r.inputs.get("vhost", "/")), policy_plan(str(r.inputs["name"]), r.inputs["policy"])
        try:
            index = PolicyIndex([written])
        except re.error:  # the config check refuses these; never hide a policy behind a crash here
            continue
        matches = (sum(1 for queue in queues.get(vhost, []) if index.matching_queue(queue))
                   + sum(1 for exchange in exchanges.get(vhost, []) if index.matching_exchange(exchange)))
        found[(vhost, kind, written.name)] = ConfigPolicy(vhost, kind, written.name, written.pattern, written.apply_to,
                                                          matches)
    return found
