"""What `make plan` prints: every resource a recording of the program registers, and each retry path as a
Mermaid diagram."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tools.lib import markdown
from tools.lib.diagram import retry_path
from tools.lib.engine import STASH, short_type
from tools.lib.inventory import VHOST_COMPONENT, key_inputs, natural, physical_name
from tools.lib.mockrun import Registered

SCHEMA_VERSION = 1
"""`make plan FORMAT=json`'s `schema_version` (docs/schemas/plan.schema.json)."""
COLUMNS = ("op", "type", "logical name", "physical name", "key inputs")
"""`op`: `create`, or `import` for an object the stack adopts as the broker holds it (`import_`)."""


def render(stack: str, resources: list[Registered]) -> str:
    """The plan as Markdown: a count per type, a table of every RabbitMQ object, a diagram per retry path."""
    # The path guards are Pulumi's own bookkeeping, not RabbitMQ objects: counted in one line (docs/guard.md).
    guards = sum(r.type == STASH for r in resources)
    custom = [r for r in resources if r.custom and r.type != STASH]
    counts = Counter(short_type(r.type) for r in custom)
    imported = sum(bool(r.import_id) for r in custom)
    out = [f"# Plan for stack {markdown.code(stack)}", "",
           f"{len(custom)} resources: " + ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
           + (f"; {imported} imported (adopted as the broker holds them, with their messages)" if imported else "")
           + (f"; and {guards} path guards (Pulumi Stash resources that refuse to delete any part of a retry path "
              "while anything on it holds a message, docs/guard.md)" if guards else ""),
           "",
           markdown.row(COLUMNS), markdown.row(["---"] * len(COLUMNS))]
    for r in sorted(custom, key=lambda r: (r.parent or "", short_type(r.type), natural(r.name))):
        out.append(markdown.row(["import" if r.import_id else "create", short_type(r.type), markdown.code(r.name),
                                 markdown.code(physical_name(r)), markdown.code(key_inputs(r))]))
    for vhost in (r for r in resources if r.type == VHOST_COMPONENT):
        for queue, contract in sorted(vhost.outputs.get("retry_contracts", {}).items()):
            out += ["", f"## {markdown.code(contract['vhost'])} / {markdown.code(queue)}", "",
                    "```mermaid", retry_path(contract), "```"]
    return "\n".join(out)


def as_json(stack: str, resources: list[Registered]) -> dict[str, Any]:
    """The plan as docs/schemas/plan.schema.json has it: every RabbitMQ object with its inputs (secrets masked, as
    in the recording), and the retry contracts (docs/contract.md)."""
    custom = [r for r in resources if r.custom and r.type != STASH]
    return {"schema_version": SCHEMA_VERSION, "stack": stack,
            "resources": [{"op": "import" if r.import_id else "create", "type": short_type(r.type),
                           "logical_name": r.name, "physical_name": physical_name(r), "urn": r.urn,
                           "inputs": r.inputs, "secret": r.secret, "protect": r.protect,
                           "retain_on_delete": r.retain_on_delete} for r in custom],
            "path_guards": sum(r.type == STASH for r in resources),
            "retry_contracts": [contract for v in resources if v.type == VHOST_COMPONENT
                                for _, contract in sorted(v.outputs.get("retry_contracts", {}).items())]}
