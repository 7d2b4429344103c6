"""`make drift STACK=<stack> [ENDPOINT=…]`: the live vhosts against what the stack declares.

Each declared object is read back the way pulumi-rabbitmq's Read fills its state (docs/provider.md §7) and
compared with the program's inputs under the provider's diff rules (`tools/lib/engine.py`), so:
- **missing, not created**: a vhost marked `existing: true` (referenced, never created) that is not on the
  broker, and everything in it: `pulumi up` fails with 404 vhost_not_found;
- **missing**: not on the broker; `pulumi up` creates it;
- **different, immutable**: an input that forces a replacement; `pulumi up` replaces it (a queue loses its
  messages), and an import of it fails;
- **different, mutable**: `pulumi up` overwrites it in place (policies, permissions);
- **extra**: on the broker, declared by nothing in the stack (a queue still declared at runtime by an
  application, a policy set by hand). What a migration still drains (an adopted runtime topology in step move)
  is expected until its step retire, and said apart;
- **expected, not drift**: in a vhost the stack references (`existing: true`, as `make adopt` writes it), what the
  stack cannot own, left alone on purpose (a queue that deletes itself, declared by its application at use; an
  exchange-to-exchange binding): listed with the reason, not counted.

The migrations' shovels and the users the stack declares are compared too (users by name).

`--format json` (`make drift FORMAT=json`): the findings as docs/schemas/drift.schema.json has them.
Exit status: 0 in sync, 2 drift, 1 error. GET requests only.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from rabbitmq_retry_client.management import ManagementError
from tools.lib.cli import STACK_ERRORS, broker_client, broker_command_parser, evaluation
from tools.lib.drift import DRIFT_COMPARED, drifted, findings, present_drained, render
from tools.lib.snapshot import DefinitionsError, read_file, read_live

SCHEMA_VERSION = 1
"""`--format json`'s `schema_version` (docs/schemas/drift.schema.json)."""


def main(argv: list[str] | None = None) -> int:
    parser = broker_command_parser(__doc__)
    parser.add_argument("--definitions", type=Path, help="compare with an exported definitions file instead")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    args = parser.parse_args(argv)
    try:
        evaluated = evaluation(args.stack, args.root)
        records = evaluated.recording
        vhosts = sorted({str(r.inputs["vhost"]) for r in records if r.custom and r.type in DRIFT_COMPARED})
        own_user = os.environ.get("RABBITMQ_USERNAME") or evaluated.settings.provider.username or ""
        if args.definitions:
            snapshots = {v: read_file(args.definitions, v) for v in vhosts}
        else:
            endpoint = broker_client(args, evaluated.provider, args.stack)
            own_user = endpoint.username
            snapshots = {v: read_live(endpoint, v) for v in vhosts}
    except (*STACK_ERRORS, DefinitionsError, ManagementError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    found = findings(records, snapshots, own_user, evaluated.migrations)
    drained = present_drained(snapshots, evaluated.migrations)
    status = 2 if drifted(found) else 0
    report = (json.dumps({"schema_version": SCHEMA_VERSION, "stack": args.stack, "status": status,
                          "vhosts": sorted(snapshots), "findings": [asdict(f) for f in found],
                          "still_draining": drained}, indent=1, sort_keys=True)
              if args.format == "json" else render(args.stack, found, snapshots, drained))
    if args.output:
        args.output.write_text(report)
    print(report)
    return status


if __name__ == "__main__":
    sys.exit(main())
