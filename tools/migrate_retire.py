"""`make migrate-retire STACK=<stack> MIGRATION=<name> [ENDPOINT=…] [APPLY=1]`: retire the old objects of an
external move (an adopted runtime topology, `move.external`), which the stack never declared: in step move,
unbind the old queue where its successor is bound; in step retire, delete the old queues, exchanges and policies,
each only when empty and unused (tools/lib/migrate_retire.py). Read-only unless --apply.

Exit status: 0 nothing refused (done, or nothing would be refused now), 3 stopped at a refusal (nothing lost:
run it again later), 1 error (one line).
"""

from __future__ import annotations

import sys

from rabbitmq_retry_client.depth import BrokerAccess, DepthError
from rabbitmq_retry_client.management import ManagementError
from tools.lib.cli import STACK_ERRORS, broker_client, broker_command_parser, evaluation
from tools.lib.migrate_retire import Broker, RetireError, find, retire
from tools.lib.snapshot import DefinitionsError, read_live

REFUSED = 3


def main(argv: list[str] | None = None) -> int:
    parser = broker_command_parser(__doc__)
    parser.add_argument("--migration", required=True, help="the migration's name in the stack file")
    parser.add_argument("--apply", action="store_true", help="do it (default: print what it would do)")
    args = parser.parse_args(argv)
    try:
        evaluated = evaluation(args.stack, args.root, written_version=False)
        found = find(evaluated.settings.config, args.migration)
        endpoint = broker_client(args, evaluated.provider, args.stack)
        port = evaluated.amqp_port
        snapshot = read_live(endpoint, found.vhost)
        if not snapshot.exists:
            raise RetireError(f"vhost {found.vhost!r} does not exist at {endpoint.url}")
        broker = Broker(BrokerAccess.of(endpoint, port), found.vhost)
        finished = retire(found, snapshot, broker, args.apply, print)
    except (*STACK_ERRORS, DefinitionsError, DepthError, RetireError, ManagementError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0 if finished else REFUSED


if __name__ == "__main__":
    sys.exit(main())
