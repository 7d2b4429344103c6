"""`make migrate-status STACK=<stack> [ENDPOINT=…]`: for each migration of the stack file (`vhosts[].migrations[]`),
its step, what each old queue holds now (passive declare: ready and consumers; the management API: unacknowledged
and a quorum queue's pending dead letters), the state of its shovels (`GET /api/shovels/<vhost>`), and the next
step: "drained: set step: retire in a commit", "not yet: orders.billing.wait.2 holds 12", "retired: the entry may be
removed". Read-only. Credentials as for `make drift` (RABBITMQ_USERNAME / RABBITMQ_PASSWORD, else the stack's
`rabbitmq:username`, else guest).

Exit status: 0 read, 1 error (one line; a broker's error names its endpoint).
"""

from __future__ import annotations

import sys
import time

from rabbitmq_retry_client.depth import DepthError
from rabbitmq_retry_client.management import ManagementError, path_escape
from tools.lib.cli import STACK_ERRORS, broker_client, broker_command_parser, evaluation
from tools.lib.migrate_status import SAMPLE_S, render, status
from tools.lib.queue_guard import depth_reader
from tools.lib.snapshot import DefinitionsError


def main(argv: list[str] | None = None) -> int:
    parser = broker_command_parser(__doc__)
    args = parser.parse_args(argv)
    url = ""  # known once the stack file is read: its errors name the file, a broker's name its endpoint
    try:
        evaluated = evaluation(args.stack, args.root)
        endpoint = broker_client(args, evaluated.provider, args.stack)
        url = endpoint.url
        endpoint.get("overview")  # unreachable or refused: one line, exit 1, even without migrations
        migrations = evaluated.migrations
        read = depth_reader(evaluated.amqp_port, endpoint)
        assert read is not None

        def shovels(vhost: str) -> list[dict[str, object]]:
            return list(endpoint.get(f"shovels/{path_escape(vhost)}") or [])

        statuses = [status(m, read, shovels, args.stack, settle=lambda: time.sleep(SAMPLE_S)) for m in migrations]
    except (*STACK_ERRORS, DefinitionsError, DepthError, ManagementError) as error:
        where = f"{url}: " if url and url not in str(error) else ""
        print(f"error: {where}{error}".replace("\n", " "), file=sys.stderr)
        return 1
    print(render(statuses, args.stack, url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
