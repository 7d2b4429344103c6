"""`make plan STACK=<stack>`: every resource the stack would register, and each retry path as a
Mermaid diagram, computed under Pulumi's mocks with no CLI, broker or secrets.
Exit status: 0, or 1 when the stack file or the config is wrong (printed as `error: …`)."""

from __future__ import annotations

import sys

from tools.lib.cli import record_for_command
from tools.lib.plan_report import render


def main(argv: list[str] | None = None) -> int:
    stack, resources = record_for_command(__doc__ or "", argv)
    if resources is None:
        return 1
    print(render(stack, resources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
