"""`make definitions` on real brokers (3.10.8 and 4.3.6): the export of a stack, imported with
`POST /api/definitions`, puts on the broker exactly what `pulumi up` would apply (read back the provider's way,
tests/support/mirror.py), users without passwords and with their limits; what definitions cannot carry is said."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import dev_vhost_config, record_vhost
from tests.support.mirror import Broker, call, esc, get, read_back
from tools.lib.definitions import export


@pytest.fixture
def user(broker: Broker) -> Iterator[str]:
    name = f"exp-app-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        call(broker, "DELETE", f"users/{esc(name)}")


def test_an_imported_export_reads_back_as_the_stack_declares_it(broker: Broker, vhost: str, user: str):
    config = {**dev_vhost_config("quorum"), "name": vhost, "default_queue_type": "quorum",
              "limits": {"max_connections": 20, "max_queues": 100},
              "applications": [{"user": user, "consumes": ["orders.billing"], "limits": {"max_connections": 5}}]}
    resources = record_vhost(config, name="t", reveal_secrets=True, passwords={user: "unused"})
    found = export(resources)

    status, _, _ = call(broker, "POST", "definitions", found.definitions)
    assert status in (200, 204)
    assert read_back(broker, resources) == []
    assert get(broker, f"vhosts/{esc(vhost)}")["default_queue_type"] == "quorum"
    assert get(broker, f"vhost-limits/{esc(vhost)}")[0]["value"] == {"max-connections": 20, "max-queues": 100}
    assert get(broker, f"user-limits/{esc(user)}")[0]["value"] == {"max-connections": 5}
    assert get(broker, f"users/{esc(user)}")["password_hash"] == ""
    assert found.left_out == [f"user {user}: exported without a password (a secret of the stack); set it with "
                              f"`rabbitmqctl change_password {user} <password>`"]

    # Imported again, unchanged: nothing fails, nothing moves.
    assert call(broker, "POST", "definitions", found.definitions)[0] in (200, 204)
    assert read_back(broker, resources) == []
