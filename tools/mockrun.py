"""`python -m tools.mockrun --stack <stack> [--root <project>]`: the program run under Pulumi's mocks, every
resource it registers (type, logical name, URN, parent, options and exact inputs) printed as JSON.
No CLI, broker or secrets (tools/lib/mockrun.py); `make evaluate` records the same, with what the plans knew.
Exit status: 0, or 1 when the stack file or the config is wrong (printed as `error: …`)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from tools.lib.cli import record_for_command


def main(argv: list[str] | None = None) -> int:
    _, recorded = record_for_command(__doc__ or "", argv)
    if recorded is None:
        return 1
    sys.stdout.write(json.dumps([asdict(r) for r in recorded], indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
