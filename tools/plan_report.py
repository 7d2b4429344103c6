"""`make plan STACK=<stack>`: every resource the stack would register, and each retry path as a
Mermaid diagram, computed under Pulumi's mocks with no CLI, broker or secrets.
Exit status: 0, or 1 when the stack file or the config is wrong (printed as `error: …`)."""

from __future__ import annotations

import re
import sys
from collections import Counter
from typing import Any

from tools import markdown
from tools.diagram import retry_path
from tools.inventory import VHOST_COMPONENT, key_inputs, physical_name, short_type
from tools.mockrun import Registered, record_for_command

COLUMNS = ("type", "logical name", "physical name", "key inputs")


def natural(name: str) -> list[Any]:
    """Numbers in a name compared as numbers: `…-level-2` before `…-level-10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


def render(stack: str, resources: list[Registered]) -> str:
    """The plan as Markdown: a count per type, a table of every RabbitMQ object, a diagram per retry path."""
    custom = [r for r in resources if r.custom]
    counts = Counter(short_type(r.type) for r in custom)
    out = [f"# Plan for stack {markdown.code(stack)}", "",
           f"{len(custom)} resources: " + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())), "",
           markdown.row(COLUMNS), markdown.row(["---"] * len(COLUMNS))]
    for r in sorted(custom, key=lambda r: (r.parent or "", short_type(r.type), natural(r.name))):
        out.append(markdown.row([short_type(r.type), markdown.code(r.name), markdown.code(physical_name(r)),
                                 markdown.code(key_inputs(r))]))
    for vhost in (r for r in resources if r.type == VHOST_COMPONENT):
        for queue, contract in sorted(vhost.outputs.get("retry_contracts", {}).items()):
            out += ["", f"## {markdown.code(contract['vhost'])} / {markdown.code(queue)}", "",
                    "```mermaid", retry_path(contract), "```"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    stack, resources = record_for_command(__doc__ or "", argv)
    if resources is None:
        return 1
    print(render(stack, resources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
