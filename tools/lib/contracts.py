"""The stack's retry contracts as `pulumi stack output retry_contracts --json` prints them
(`{vhost: {queue: contract}}`), read from the Vhost components' `retry_contracts` outputs in a recording."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rabbitmq_retry_client.contract import whole_numbers
from tools.lib.inventory import VHOST_COMPONENT, contracts
from tools.lib.mockrun import Registered


def stack_contracts(recording: Sequence[Registered]) -> dict[str, dict[str, Any]]:
    """`{vhost: {queue: contract}}` as the program exports it: every vhost, even one without a retryable queue."""
    result: dict[str, dict[str, Any]] = {str(r.outputs["vhost_name"]): {} for r in recording
                                         if r.type == VHOST_COMPONENT and "vhost_name" in r.outputs}
    for (vhost, queue), contract in contracts(recording).items():
        # The mocks drop null outputs; the export has `delivery_limit: null` for a classic queue.
        result.setdefault(vhost, {})[queue] = {"delivery_limit": None, **whole_numbers(contract)}
    return result
