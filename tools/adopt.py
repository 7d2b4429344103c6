"""`make adopt VHOST=<vhost> STACK=<new stack> [ENDPOINT=…] [DEFINITIONS=file.json]`: take over a vhost
whose topology applications declare at runtime, with nothing lost.

Reads the vhost (GET only, or an exported definitions file) and writes `Pulumi.<stack>.yaml` in this
project's config schema plus a Markdown report. Every object gets one fate:
- **import**: the stack declares it exactly as the broker holds it, as the provider's Read would see it, so
  Pulumi adopts it (`import_`) instead of creating it. An object whose inputs differ is never imported:
  every queue, exchange and binding input forces a replacement, and Pulumi fails an import that needs one.
- **create beside**: our design differs (a runtime retry loop, a queue without `x-queue-type` on RabbitMQ
  3.x, arguments this project does not declare), so a new object is created under a new name and the old
  one is left alone; a create under the old name would fail with HTTP 400 "inequivalent arg".
- **retire later**: the old object, with the steps that drain it first.
- **left alone**: what the stack cannot declare (transient queues, exchange-to-exchange bindings, exchange
  arguments, policies the config refuses or that would also match the new queues); it stays as it is.

Exit status: 0 written, 1 error (nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pulumi

from rabbitmq_retry_client.management import TLS_SETTINGS, ManagementClient, ManagementError
from tools.lib.adopt import DEFAULT_SUFFIX, adopt, report, stack_file
from tools.lib.cli import add_tls_arguments, broker_client
from tools.lib.migrate_status import SAMPLE_S
from tools.lib.mockrun import ROOT
from tools.lib.snapshot import DefinitionsError, Snapshot, read_file, read_live


def _read_counted(endpoint: ManagementClient, vhost: str) -> Snapshot:
    """The vhost read live; read again once after one statistics interval when a queue has no message count yet (the
    management API reports a new queue's counts only with its next statistics emission), so that the report says
    what each old queue holds."""
    snapshot = read_live(endpoint, vhost)
    if snapshot.exists and any(snapshot.messages(q) is None for q in snapshot.queues):
        time.sleep(SAMPLE_S)
        snapshot = read_live(endpoint, vhost)
    return snapshot


def _reader(args: argparse.Namespace) -> Callable[[], Snapshot]:
    if args.definitions:
        return lambda: read_file(args.definitions, args.vhost)
    return lambda: _read_counted(broker_client(args, {}, args.stack), args.vhost)


def _contracts(path: Path | None, vhost: str) -> dict[str, Any]:
    """The vhost's retry contracts by queue, from a `make contracts` file ({vhost: {queue: contract}})."""
    if path is None:
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise DefinitionsError(f"CONTRACTS={path}: {error}") from None
    if not isinstance(found, dict) or not isinstance(found.get(vhost, {}), dict):
        raise DefinitionsError(f"CONTRACTS={path}: not a `make contracts` file ({{vhost: {{queue: contract}}}})")
    return dict(found.get(vhost, {}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--vhost", required=True)
    parser.add_argument("--stack", required=True, help="the new stack: Pulumi.<stack>.yaml must not exist")
    parser.add_argument("--endpoint", help="management URL (default RABBITMQ_ENDPOINT)")
    parser.add_argument("--definitions", type=Path, help="an exported definitions file instead of the live API")
    parser.add_argument("--contracts", type=Path, help="the old stack's retry contracts (`make contracts`): what the "
                        "broker does not keep (max_retries) is read from them")
    parser.add_argument("--suffix", default=DEFAULT_SUFFIX, help="appended to a queue created beside an old one")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--report", type=Path, help="default adopt-<stack>.md in the project")
    add_tls_arguments(parser)
    args = parser.parse_args(list(argv) if argv is not None else None)
    target = args.root / f"Pulumi.{args.stack}.yaml"
    report_path = args.report or args.root / f"adopt-{args.stack}.md"
    if not args.vhost:
        print("error: no vhost: pass VHOST=<name>", file=sys.stderr)
        return 1
    if target.exists():
        print(f"error: {target} exists; adopt into a new stack", file=sys.stderr)
        return 1
    try:
        adoption = adopt(_reader(args)(), args.suffix, _contracts(args.contracts, args.vhost))
    except (DefinitionsError, ManagementError, pulumi.RunError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    tls = {setting.config: "true" if field == "insecure" else value for field, setting in TLS_SETTINGS.items()
           if (value := getattr(args, field, None))}
    target.write_text(stack_file(adoption, args.endpoint, tls))
    report_path.write_text(report(adoption, args.stack))
    print(f"wrote {target} and {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
