"""Every broker-facing path over TLS with verification on, against the TLS listeners scripts/brokers.sh gives both
brokers (3.10.8: AMQPS 5671, HTTPS 15671; 4.3.6: AMQPS 5674, HTTPS 15674), verified with its test CA and
presenting its client certificate: the topology applied the provider's way over HTTPS, the queue guard, the
per-user-limits provider, the tools (doctor, drift, migrate-status, the review's live part), the client and the
`rabbitmq-retry` command with amqps:// URLs, and login by client certificate (SASL EXTERNAL). Then what bad TLS
input does: one line naming the setting to fix, and nothing changed on the broker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from components.user_limits import UserLimitsError
from rabbitmq_retry_client import BrokerRefusedError, Publisher, RetryingConsumer
from rabbitmq_retry_client.depth import BrokerAccess, DepthReader
from rabbitmq_retry_client.management import (
    ManagementClient,
    TlsError,
    TlsSettings,
    UnreachableError,
    path_escape,
)
from tests.support.admin import wait_for
from tests.support.deploy import (
    TLS_CLIENT_CN,
    Deployer,
    configured_brokers,
    configured_tls_brokers,
    throwaway_vhost,
    tls_dir,
    unreachable,
)
from tests.support.environment import missing
from tests.support.mirror import Broker, call, esc, user_limits_provider
from tests.support.retrying import Recorder, publish_ids, retryable_queue, run_consumers
from tools.lib.snapshot import read_live

ROOT = Path(__file__).resolve().parents[2]
TLS_BROKERS = configured_tls_brokers()
PLAIN = {b.name: b for b in configured_brokers()}


@pytest.fixture(scope="module", params=TLS_BROKERS, ids=[b.name for b in TLS_BROKERS])
def tls_broker(request: pytest.FixtureRequest) -> Broker:
    """A broker's TLS listeners, when they answer (scripts/brokers.sh ensure makes them)."""
    candidate: Broker = request.param
    if not (tls_dir() / "ca.pem").exists():
        missing(f"no test CA in {tls_dir()}", because="CI=true: run scripts/brokers.sh ensure")
    problem = unreachable(candidate)
    if problem is not None:
        missing(problem, because="CI=true: run scripts/brokers.sh ensure (TLS listeners)")
    return candidate


def plain_of(broker: Broker) -> Broker:
    return PLAIN[broker.name.removesuffix("-tls")]


@pytest.fixture
def tls_vhost(tls_broker: Broker) -> Iterator[str]:
    with throwaway_vhost(tls_broker, "tls") as name:
        yield name


def test_the_topology_is_applied_the_providers_way_over_https(tls_broker: Broker, tls_vhost: str) -> None:
    """What pulumi-rabbitmq sends, over HTTPS with rabbitmq:cacertFile, clientcertFile and clientkeyFile."""
    deployment = Deployer(tls_broker, tls_vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                                 "queues": [retryable_queue("jobs", "quorum", ["1s"], 2)]})
    assert tls_broker.management_url.startswith("https://")
    snapshot = read_live(tls_broker.client(), tls_vhost)
    assert {"jobs", "jobs.error"} <= set(snapshot.queues) and "jobs" in deployment.contracts
    # The same objects, read over the plain listener: one broker.
    assert call(plain_of(tls_broker), "GET", f"queues/{esc(tls_vhost)}/jobs")[1]["type"] == "quorum"


def test_the_queue_guard_reads_over_https_and_amqps(tls_broker: Broker, tls_vhost: str) -> None:
    Deployer(tls_broker, tls_vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                    "queues": [retryable_queue("jobs", "classic", ["1s"], 2)]})
    publish_ids(tls_broker, tls_vhost, "in", ["a", "b", "c"])
    reader = DepthReader(BrokerAccess.of(tls_broker.client()))
    assert reader.amqp_address() == (tls_broker.host, tls_broker.amqp_port, True)  # the overview's amqp/ssl
    depth = reader.read(tls_vhost, "jobs")
    assert depth is not None and depth.ready == 3
    assert reader.read(tls_vhost, "nothing-here") is None


def test_the_user_limits_provider_works_over_https(tls_broker: Broker) -> None:
    user = f"tls-limits-{uuid.uuid4().hex[:8]}"
    call(tls_broker, "PUT", f"users/{esc(user)}", {"password": uuid.uuid4().hex, "tags": ""})
    try:
        provider = user_limits_provider(tls_broker)
        assert provider.tls.cacert_file and provider.endpoint.startswith("https://")
        provider.create({"user": user, "limits": {"max-connections": 3}})
        assert provider.live(user) == {"max-connections": 3}
    finally:
        call(tls_broker, "DELETE", f"users/{esc(user)}")


def tls_flags(broker: Broker) -> list[str]:
    assert broker.tls is not None
    return ["--endpoint", broker.management_url, "--cacert-file", str(broker.tls.cacert_file),
            "--clientcert-file", str(broker.tls.clientcert_file), "--clientkey-file", str(broker.tls.clientkey_file)]


@pytest.mark.parametrize("command", ["doctor", "drift", "migrate_status"])
def test_the_tools_read_the_broker_over_https(tls_broker: Broker, command: str) -> None:
    """`make doctor|drift|migrate-status STACK=dev ENDPOINT=https://…` with the TLS settings as flags: read, not an
    error (what they find on this shared broker is not the point)."""
    done = subprocess.run([sys.executable, "-m", f"tools.{command}", "--stack", "dev", *tls_flags(tls_broker)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "RABBITMQ_USERNAME": tls_broker.username,
                               "RABBITMQ_PASSWORD": tls_broker.password})
    assert "error:" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), done.stdout + done.stderr
    if command == "doctor":
        assert tls_broker.tls is not None
        assert (f"- TLS: verified with {tls_broker.tls.cacert_file}, client certificate "
                f"{tls_broker.tls.clientcert_file}") in done.stdout


def test_doctor_says_when_certificate_verification_is_off(tls_broker: Broker) -> None:
    """`insecure` only where the user says so, and the report says it is on."""
    done = subprocess.run([sys.executable, "-m", "tools.doctor", "--stack", "dev", "--endpoint",
                           tls_broker.management_url, "--insecure"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "error:" not in done.stderr, done.stderr
    assert ("- TLS: **certificate verification off** (rabbitmq:insecure (RABBITMQ_INSECURE, --insecure) is set)"
            in done.stdout)


def test_the_tls_settings_come_from_the_environment_under_the_providers_names(tls_broker: Broker) -> None:
    assert tls_broker.tls is not None
    env = {"RABBITMQ_ENDPOINT": tls_broker.management_url, "RABBITMQ_USERNAME": tls_broker.username,
           "RABBITMQ_PASSWORD": tls_broker.password, "RABBITMQ_CACERT": str(tls_broker.tls.cacert_file),
           "RABBITMQ_CLIENTCERT": str(tls_broker.tls.clientcert_file),
           "RABBITMQ_CLIENTKEY": str(tls_broker.tls.clientkey_file)}
    client = ManagementClient.from_settings(None, {}, env=env)
    assert client.get("overview")["rabbitmq_version"]


def test_the_review_reads_depths_over_https(tls_broker: Broker, tls_vhost: str, tmp_path: Path) -> None:
    from tools.lib import engine
    from tools.lib.queue_guard import review_section

    deployment = Deployer(tls_broker, tls_vhost)({"queues": [{"name": "orders", "type": "classic"}]})
    publish_ids(tls_broker, tls_vhost, "", ["x"], routing_key="orders")
    steps = engine.diff(deployment.resources, [r for r in deployment.resources if "orders" not in r.name])
    section = review_section(steps, (), None, tls_broker.client())
    assert tls_broker.management_url in section.markdown and "1 ready" in section.markdown


def test_the_client_consumes_and_publishes_over_amqps(tls_broker: Broker, tls_vhost: str) -> None:
    deployment = Deployer(tls_broker, tls_vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                                 "queues": [retryable_queue("jobs", "classic", ["200ms"], 2)]})
    url = tls_broker.amqp_url.rsplit("/", 1)[0] + "/" + path_escape(tls_vhost)
    with Publisher(url, tls=tls_broker.tls) as publisher:
        for n in range(3):
            publisher.publish("in", "", f"m{n}".encode(), message_id=f"m{n}")
    recorder = Recorder(lambda message_id: 1 if message_id == "m0" else 0)
    consumer = RetryingConsumer(url, deployment.contracts["jobs"], recorder, tls=tls_broker.tls)
    run_consumers([consumer], lambda: consumer.processed >= 3, timeout=30)
    assert (consumer.processed, consumer.retried) == (3, 1)


def command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rabbitmq_retry_client", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_command_publishes_over_amqps_with_a_ca_file_and_client_certificate(tls_broker: Broker,
                                                                                 tls_vhost: str) -> None:
    assert tls_broker.tls is not None
    Deployer(tls_broker, tls_vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                    "queues": [{"name": "jobs", "type": "classic", "bindings": [{"exchange": "in"}]}]})
    url = tls_broker.amqp_url.rsplit("/", 1)[0] + "/" + path_escape(tls_vhost)
    done = command("publish", "--exchange", "in", "--count", "2", "--url", url,
                   "--cacert-file", str(tls_broker.tls.cacert_file),
                   "--clientcert-file", str(tls_broker.tls.clientcert_file),
                   "--clientkey-file", str(tls_broker.tls.clientkey_file))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert call(tls_broker, "GET", f"queues/{esc(tls_vhost)}/jobs")[1].get("messages_ready", 0) in (0, 2)


def test_login_by_client_certificate_sasl_external(tls_broker: Broker, tls_vhost: str) -> None:
    """No user or password in the URL: the client certificate's common name is the user."""
    Deployer(tls_broker, tls_vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                    "queues": [{"name": "jobs", "type": "classic", "bindings": [{"exchange": "in"}]}]})
    call(tls_broker, "PUT", f"users/{esc(TLS_CLIENT_CN)}", {"password_hash": "", "tags": ""})
    call(tls_broker, "PUT", f"permissions/{esc(tls_vhost)}/{esc(TLS_CLIENT_CN)}",
         {"configure": "", "write": ".*", "read": ".*"})
    url = f"amqps://{tls_broker.host}:{tls_broker.amqp_port}/{path_escape(tls_vhost)}"
    with Publisher(url, tls=tls_broker.tls) as publisher:
        publisher.publish("in", "", b"by certificate")

        def by_certificate() -> bool:
            return any(c.get("user") == TLS_CLIENT_CN and c.get("auth_mechanism") == "EXTERNAL" and c.get("ssl")
                       for c in call(tls_broker, "GET", f"vhosts/{esc(tls_vhost)}/connections")[1] or [])
        wait_for(by_certificate, 30, "the connection listed as the certificate's user, by EXTERNAL", interval=0.2)


def test_migrate_retire_connects_and_deletes_a_policy_over_tls(tls_broker: Broker, tls_vhost: str) -> None:
    """make migrate-retire's writes: AMQPS for unbinding and deleting (the broker's own preconditions), HTTPS for
    policies; the AMQP port is the overview's TLS listener."""
    from tools.lib.migrate_retire import Broker as RetireBroker

    Deployer(tls_broker, tls_vhost)({"queues": [{"name": "old", "type": "classic"}]})
    call(tls_broker, "PUT", f"policies/{esc(tls_vhost)}/old-ttl", {"pattern": "^old$", "apply-to": "queues",
                                                                  "definition": {"message-ttl": 1000}})
    retire = RetireBroker(BrokerAccess.of(tls_broker.client()), tls_vhost)
    with retire.connect():
        assert retire.delete_queue("old", quorum=False) is None
    assert retire.delete_policy("old-ttl") is None
    assert retire.delete_policy("old-ttl") is not None and retire.delete_policy("old-ttl")[0] == 404
    assert call(tls_broker, "GET", f"queues/{esc(tls_vhost)}")[1] == []


def test_make_adopt_reads_the_vhost_over_https(tls_broker: Broker, tls_vhost: str, tmp_path: Path) -> None:
    Deployer(tls_broker, tls_vhost)({"exchanges": [{"name": "in", "type": "fanout"}],
                                    "queues": [{"name": "jobs", "type": "classic", "bindings": [{"exchange": "in"}]}]})
    done = subprocess.run([sys.executable, "-m", "tools.adopt", "--vhost", tls_vhost, "--stack", "adopted-tls",
                           "--root", str(tmp_path), *tls_flags(tls_broker)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "RABBITMQ_USERNAME": tls_broker.username,
                               "RABBITMQ_PASSWORD": tls_broker.password})
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "Pulumi.adopted-tls.yaml").read_text()
    assert "name: jobs" in written
    assert tls_broker.tls is not None and f"rabbitmq:cacertFile: {tls_broker.tls.cacert_file}" in written


# --- bad TLS input: one line naming what to fix, nothing changed on the broker -----------------------------------

def test_an_unknown_ca_is_one_line_and_changes_nothing(tls_broker: Broker) -> None:
    user = f"tls-unknown-ca-{uuid.uuid4().hex[:8]}"
    call(tls_broker, "PUT", f"users/{esc(user)}", {"password": uuid.uuid4().hex, "tags": ""})
    try:
        provider = user_limits_provider(replace(tls_broker, tls=TlsSettings()))  # the system's CAs only
        with pytest.raises(UserLimitsError) as refused:
            provider.create({"user": user, "limits": {"max-connections": 1}})
        said = str(refused.value)
        assert "is not signed by a CA this client trusts" in said and "rabbitmq:cacertFile (RABBITMQ_CACERT" in said
        assert "\n" not in said
        assert call(tls_broker, "GET", f"user-limits/{esc(user)}")[1] == []  # nothing set
    finally:
        call(tls_broker, "DELETE", f"users/{esc(user)}")


def test_a_hostname_the_certificate_does_not_name_is_one_line(tls_broker: Broker) -> None:
    name = socket.gethostname()
    if name in ("localhost", tls_broker.host) or "127.0.0.1" not in {a[4][0] for a in socket.getaddrinfo(name, None)}:
        pytest.skip(f"this machine's name {name!r} does not resolve to 127.0.0.1")
    client = ManagementClient(f"https://{name}:{tls_broker.management_port}", "guest", "guest", tls_broker.tls)
    with pytest.raises(TlsError) as error:
        client.get("overview")
    assert str(error.value).startswith(f"TLS: the certificate of https://{name}:{tls_broker.management_port} is "
                                       f"not for {name!r}")


def refusal(url: str, tls: TlsSettings | None, error: type[Exception]) -> str:
    """What the management client says when `url` is not the management API it expects: one line."""
    with pytest.raises(error) as refused:
        ManagementClient(url, "guest", "guest", tls).get("overview")
    said = str(refused.value)
    assert "\n" not in said
    return said


def test_https_to_the_plain_port_and_http_to_the_tls_port_say_so(tls_broker: Broker) -> None:
    plain = plain_of(tls_broker)
    https_to_plain = f"https://{plain.host}:{plain.management_port}"
    assert f"{https_to_plain} does not speak TLS" in refusal(https_to_plain, tls_broker.tls, TlsError)
    http_to_tls = f"http://{tls_broker.host}:{tls_broker.management_port}"
    assert refusal(http_to_tls, None, TlsError).startswith(f"{http_to_tls} speaks TLS: use https:// in "
                                                           "rabbitmq:endpoint")


def test_http_to_an_amqp_port_says_it_is_the_amqp_port(tls_broker: Broker) -> None:
    """Point 6 of the TLS issue: this was `[Errno 104] Connection reset by peer`."""
    plain = plain_of(tls_broker)
    url = f"http://{plain.host}:{plain.amqp_port}"
    assert refusal(url, None, UnreachableError).startswith(
        f"{url} is an AMQP port, not the management API: give the management port in rabbitmq:endpoint")


def test_the_wrong_scheme_or_port_for_amqp_is_one_line(tls_broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    """amqps:// to the plain port, amqp:// to the AMQPS port (the right answer at once: no "broker unreachable …
    retrying" first) and to the management port."""
    plain = plain_of(tls_broker)
    with pytest.raises(BrokerRefusedError) as amqps_to_plain:
        Publisher(f"amqps://guest:guest@{plain.host}:{plain.amqp_port}/%2F", connect_timeout=20, tls=tls_broker.tls)
    assert f"TLS: {plain.host}:{plain.amqp_port} does not speak TLS" in str(amqps_to_plain.value)
    assert "use amqp:// for this port" in str(amqps_to_plain.value)
    caplog.clear()
    with pytest.raises(BrokerRefusedError) as to_amqps:
        Publisher(f"amqp://guest:guest@{plain.host}:{tls_broker.amqp_port}/%2F", connect_timeout=60)
    assert str(to_amqps.value) == (f"{plain.host}:{tls_broker.amqp_port} speaks TLS, not plain AMQP: use amqps:// "
                                   "for this port (the password is not sent in clear)")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    with pytest.raises(BrokerRefusedError) as wrong:
        Publisher(f"amqp://guest:guest@{plain.host}:{plain.management_port}/%2F", connect_timeout=20)
    assert (f"{plain.host}:{plain.management_port} closed the connection during the AMQP handshake: it is not a "
            "plain AMQP port") in str(wrong.value)
    done = command("publish", "--exchange", "x", "--url", f"https://{plain.host}:{plain.management_port}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "is not an AMQP URL: that looks like the management API's" in done.stderr


def test_make_review_with_an_https_endpoint(tls_broker: Broker, program_copy: Path) -> None:
    """`make review ENDPOINT=https://…` end to end (tests/test_review.py's repository): a removed tier's wait queues
    are read on the broker over HTTPS and AMQPS (the shared broker may have the dev vhost or not); without the CA,
    the review says it could not read them, in one line naming the setting."""
    from tests.test_review import a_removed_tier_committed, cli

    a_removed_tier_committed(program_copy)
    assert tls_broker.tls is not None
    env = {"RABBITMQ_USERNAME": tls_broker.username, "RABBITMQ_PASSWORD": tls_broker.password,
           "PYTHONPATH": str(program_copy)}
    done = cli(program_copy, "--base", "HEAD~1", "--stack", "dev", "--allow-data-loss", *tls_flags(tls_broker), **env)
    assert done.returncode == 0, done.stderr
    assert f"### What the deleted or replaced queues hold now ({tls_broker.management_url})" in done.stdout
    assert "not on the broker" in done.stdout or "no message now" in done.stdout, done.stdout
    unread = cli(program_copy, "--base", "HEAD~1", "--stack", "dev", "--allow-data-loss", "--endpoint",
                 tls_broker.management_url, **env)
    assert unread.returncode == 0 and unread.stderr == "", unread.stderr  # the review says it could not read
    assert "is not signed by a CA this client trusts" in unread.stdout and "rabbitmq:cacertFile" in unread.stdout
