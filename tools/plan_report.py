"""`make plan STACK=<stack> [FORMAT=json]`: every resource the stack would register, and each retry path as a
Mermaid diagram, computed under Pulumi's mocks with no CLI, broker or secrets; `--format json`: the resources and
retry contracts as docs/schemas/plan.schema.json has them.
Exit status: 0, or 1 when the stack file or the config is wrong (printed as `error: …`)."""

from __future__ import annotations

import json
import sys

from tools.lib.cli import record_for_command
from tools.lib.plan_report import as_json, render


def main(argv: list[str] | None = None) -> int:
    args, resources = record_for_command(__doc__ or "", argv, formats=("markdown", "json"))
    if resources is None:
        return 1
    print(json.dumps(as_json(args.stack, resources), indent=1, sort_keys=True) if args.format == "json"
          else render(args.stack, resources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
