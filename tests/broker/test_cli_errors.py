"""The `rabbitmq-retry` command as a new user meets it, on both brokers (issue 22, item 7).

The console script's code path runs as a subprocess: a successful `publish --count 2` prints its two lines and
nothing else (no pika INFO lines); a refused login and a missing vhost are one `error:` line each saying what to
check, with no traceback and without waiting for the broker (they are permanent; only an unreachable broker is
retried); `make doctor`'s management API refusing the password names RABBITMQ_USERNAME / RABBITMQ_PASSWORD.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitmq_retry_client.management import LoginRefusedError, ManagementClient
from tests.support.amqp import drain
from tests.support.mirror import Broker, call, esc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def vhost(broker: Broker) -> Iterator[str]:
    """A vhost of this branch's own with fanout exchange `ex` bound to queue `q`; deleted afterwards."""
    name = f"newuser-{uuid.uuid4().hex[:12]}"
    call(broker, "PUT", f"vhosts/{esc(name)}", {})
    try:
        call(broker, "PUT", f"permissions/{esc(name)}/{esc(broker.username)}",
             {"configure": ".*", "write": ".*", "read": ".*"})
        call(broker, "PUT", f"exchanges/{esc(name)}/ex", {"type": "fanout", "durable": True})
        call(broker, "PUT", f"queues/{esc(name)}/q", {"durable": True})
        call(broker, "POST", f"bindings/{esc(name)}/e/ex/q/q", {})
        yield name
    finally:
        call(broker, "DELETE", f"vhosts/{esc(name)}")


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rabbitmq_retry_client", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _url(broker: Broker, vhost: str, password: str | None = None) -> str:
    return (f"amqp://{broker.username}:{password or broker.password}@{broker.host}:{broker.amqp_port}/"
            + esc(vhost))


def test_a_successful_publish_prints_its_messages_and_nothing_else(broker: Broker, vhost: str) -> None:
    done = _command("publish", "--exchange", "ex", "--count", "2", "--url", _url(broker, vhost))
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "no pika INFO lines (warnings only unless -v)"
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("published ") for line in lines)
    assert len(drain(broker, vhost, "q")) == 2, "published to the URL's vhost"


def test_a_refused_login_is_one_line_saying_which_credentials_to_check(broker: Broker, vhost: str) -> None:
    done = _command("--url", _url(broker, vhost, password="not-the-password"), "publish", "--exchange", "ex")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"error: login refused by {broker.host}:{broker.amqp_port} for user "
                           f"'{broker.username}' (403 ACCESS_REFUSED): check the user and password in --url or "
                           "$RABBITMQ_URL\n")


def test_a_missing_vhost_fails_at_once_with_what_to_check(broker: Broker, vhost: str) -> None:
    missing = f"{vhost}-missing"
    done = _command("publish", "--exchange", "ex", "--url", _url(broker, missing))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "retrying" not in done.stderr
    assert done.stderr.startswith(f"error: vhost '{missing}' refused by {broker.host}:{broker.amqp_port} for user "
                                  f"'{broker.username}' (530 NOT_ALLOWED - vhost {missing} not found): check that "
                                  "the vhost exists"), done.stderr


def test_doctor_s_401_names_the_environment_variables_to_check(broker: Broker) -> None:
    with pytest.raises(LoginRefusedError) as error:
        ManagementClient(broker.management_url, broker.username, "not-the-password").get("overview")
    assert str(error.value).endswith(f"HTTP 401, the management API refused user '{broker.username}': check "
                                     "RABBITMQ_USERNAME and RABBITMQ_PASSWORD")
