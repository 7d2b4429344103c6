"""`make plan STACK=<stack>`: every resource the stack would register, and each retry path as a
Mermaid diagram, computed under Pulumi's mocks with no CLI, broker or secrets."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import pulumi

from tools.diagram import retry_path
from tools.mockrun import Registered, record_program

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
        text = " ".join(f"{k}={v}" for k, v in sorted(inputs.items()) if k != "name" and not isinstance(v, dict))
    return (text + flags).strip()


def render(stack: str, resources: list[Registered]) -> str:
    custom = [r for r in resources if r.custom]
    counts = Counter(short_type(r.type) for r in custom)
    out = [f"# Plan for stack `{stack}`", "",
           f"{len(custom)} resources: " + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())), "",
           "| type | logical name | physical name | key inputs |", "|---|---|---|---|"]
    for r in sorted(custom, key=lambda r: (r.parent or "", short_type(r.type), r.name)):
        out.append(f"| {short_type(r.type)} | `{r.name}` | `{physical_name(r)}` | {key_inputs(r)} |")
    for vhost in (r for r in resources if r.type == "rabbitmq-retry:index:Vhost"):
        for queue, contract in sorted(vhost.outputs.get("retry_contracts", {}).items()):
            out += ["", f"## `{contract['vhost']}` / `{queue}`", "", "```mermaid", retry_path(contract), "```"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", default="dev")
    args = parser.parse_args(argv)
    try:
        resources = record_program(args.stack)
    except (pulumi.RunError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(render(args.stack, resources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
