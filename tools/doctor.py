"""`make doctor STACK=<stack> [ENDPOINT=…]`: can the live broker run this stack? Read-only (GET requests).

Asks the management API for the broker's version, enabled plugins and feature flags, the tags of the user
the provider connects as, and the objects already in the stack's vhosts, and reports:
- **blocking**: what makes `pulumi up` fail or the topology misbehave: a feature the version lacks (strategy
  `native` below 4.3.1, …), a disabled feature flag the stack needs, a provider user without the tags the
  stack needs, an existing queue or exchange declared with other settings (`pulumi up` fails with 400
  "inequivalent arg", and replacing it would lose its messages), an `existing: true` vhost the broker lacks;
- **warnings**: a series out of community support, a `broker.version` other than the live one;
- **facts**: version, plugins, feature flags, the user and its tags.

Exit status: 0 nothing blocking, 2 blocking findings, 1 error (unreachable broker, invalid stack).
"""

from __future__ import annotations

import sys

from rabbitmq_retry_client.management import ManagementError
from tools.lib.cli import STACK_ERRORS, broker_client, broker_command_parser, evaluation, tls_summary
from tools.lib.doctor import diagnose, read_facts, render
from tools.lib.snapshot import DefinitionsError


def main(argv: list[str] | None = None) -> int:
    parser = broker_command_parser(__doc__)
    args = parser.parse_args(argv)
    try:
        # The written broker.version is compared with the live one, not checked against what the stack uses.
        evaluated = evaluation(args.stack, args.root, written_version=False)
        config = evaluated.settings.config
        endpoint = broker_client(args, evaluated.provider, args.stack)
        vhosts = sorted(v.name for v in config.vhosts)
        facts = read_facts(endpoint, vhosts)
    except (*STACK_ERRORS, DefinitionsError, ManagementError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    found = diagnose(config, evaluated.recording, facts, evaluated.amqp_port)
    print(render(args.stack, endpoint.url, facts, found, tls_summary(endpoint)))
    return found.status


if __name__ == "__main__":
    sys.exit(main())
