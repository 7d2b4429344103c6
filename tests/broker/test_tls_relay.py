"""Once TLS is configured, no credential crosses in clear, by any path: proven with a recording relay
(tests/support/tls.py) that forwards to the broker's plain ports and records every byte it receives. Each case fails
if the password, or the Basic auth token, arrives at the relay.

- A 308 redirect from an https:// management endpoint to an http:// relay (in front of the broker's plain
  management API, so that following it would work): never followed, one line naming where it pointed.
- An https:// endpoint whose /api/overview lists only a plain AMQP listener (a relay in front of the broker's
  plain AMQP port): never connected to, one line naming the AMQPS listener or setting to give.
- An amqp:// URL (or http:// endpoint) where TLS settings are given: refused before connecting.

Every tool (doctor, drift, migrate-status, adopt as commands, review with an endpoint, migrate-retire's
connection), the queue guard's reader, the per-user-limits provider, and the client (Python API and command).
The first test shows the relay does see a password sent in clear: the others' silence means something."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest

from components.pulumi.guard import GuardError, check_queue_delete
from components.user_limits import UserLimitsError, UserLimitsProvider
from rabbitmq_retry_client import Publisher, RetryingConsumer, TlsSettings
from rabbitmq_retry_client.depth import BrokerAccess, DepthError, DepthReader
from rabbitmq_retry_client.management import ManagementClient, TlsError, UnreachableError
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import Recorder
from tests.support.tls import CertificateAuthority, FakeManagement, RecordingRelay
from tests.test_retry_client import contract
from tools.lib.migrate_retire import Broker as RetireBroker
from tools.lib.migrate_retire import RetireError
from tools.lib.queue_guard import depth_reader
from tools.lib.snapshot import read_live

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Operator:
    """A management user of the test's own, with a password nothing else sends."""

    username: str
    password: str


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("relay-ca"))


@pytest.fixture(scope="module")
def server_cert(ca: CertificateAuthority) -> tuple[Path, Path]:
    return ca.issue("fake-management")


@pytest.fixture
def operator(broker: Broker) -> Iterator[Operator]:
    user = Operator(f"relay-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}")
    call(broker, "PUT", f"users/{esc(user.username)}", {"password": user.password, "tags": "administrator"})
    call(broker, "PUT", f"permissions/%2F/{esc(user.username)}", {"configure": ".*", "write": ".*", "read": ".*"})
    yield user
    call(broker, "DELETE", f"users/{esc(user.username)}")


@pytest.fixture
def http_relay(broker: Broker) -> Iterator[RecordingRelay]:
    """In front of the broker's plain management API."""
    with RecordingRelay((broker.host, broker.management_port)) as relay:
        yield relay


@pytest.fixture
def amqp_relay(broker: Broker) -> Iterator[RecordingRelay]:
    """In front of the broker's plain AMQP port."""
    with RecordingRelay((broker.host, broker.amqp_port)) as relay:
        yield relay


@pytest.fixture
def redirecting(broker: Broker, server_cert: tuple[Path, Path], http_relay: RecordingRelay) -> Iterator[FakeManagement]:
    """An https:// endpoint answering every request with 308 to the http:// relay."""
    with FakeManagement(*server_cert, (broker.host, broker.management_port),
                        redirect_to=f"http://127.0.0.1:{http_relay.port}") as fake:
        yield fake


@pytest.fixture
def plain_amqp_only(broker: Broker, server_cert: tuple[Path, Path],
                    amqp_relay: RecordingRelay) -> Iterator[FakeManagement]:
    """An https:// endpoint (the broker's management API behind it) whose overview lists only plain AMQP: the relay."""
    with FakeManagement(*server_cert, (broker.host, broker.management_port), amqp_port=amqp_relay.port) as fake:
        yield fake


def access(fake: FakeManagement, ca: CertificateAuthority, operator: Operator) -> BrokerAccess:
    return BrokerAccess(fake.url, operator.username, operator.password, tls_settings=TlsSettings(str(ca.cert)))


def redirect_line(relay: RecordingRelay) -> str:
    return f"answered HTTP 308, a redirect to http://127.0.0.1:{relay.port}/api/"


def nothing_crossed(relay: RecordingRelay, operator: Operator) -> None:
    assert relay.leaked(operator.username, operator.password) == []
    assert relay.connections == 0  # not even a connection: refused before


def test_the_relay_sees_a_password_sent_in_clear(broker: Broker, operator: Operator, http_relay: RecordingRelay,
                                                 amqp_relay: RecordingRelay) -> None:
    """The control: plain HTTP and plain AMQP through the relays do reach the broker, and the relay records the
    Basic token and the AMQP PLAIN password."""
    client = ManagementClient(f"http://127.0.0.1:{http_relay.port}", operator.username, operator.password)
    assert client.get("overview")["rabbitmq_version"]
    assert http_relay.leaked(operator.username, operator.password) == ["Basic token"]
    credentials = pika.PlainCredentials(operator.username, operator.password)
    pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp_relay.port, "/", credentials)).close()
    assert amqp_relay.leaked(operator.username, operator.password) == ["password"]


# --- a redirect to http:// -----------------------------------------------------------------------------------------

def test_the_management_client_does_not_follow_a_redirect(redirecting: FakeManagement, ca: CertificateAuthority,
                                                          operator: Operator, http_relay: RecordingRelay) -> None:
    client = ManagementClient(redirecting.url, operator.username, operator.password, TlsSettings(str(ca.cert)))
    with pytest.raises(UnreachableError) as refused:
        client.get("overview")
    said = str(refused.value)
    assert said == (f"GET {redirecting.url}/api/overview {redirect_line(http_relay)}overview: not followed, it "
                    f"would send the password there in clear; if the management API is there, set rabbitmq:endpoint "
                    f"(RABBITMQ_ENDPOINT, --endpoint) to http://127.0.0.1:{http_relay.port}, else fix what answers "
                    f"at {redirecting.url}")
    nothing_crossed(http_relay, operator)


def tool(module: str, *args: str, operator: Operator, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "RABBITMQ_USERNAME":
                                            operator.username, "RABBITMQ_PASSWORD": operator.password, **env})


@pytest.mark.parametrize("command", [["tools.doctor", "--stack", "dev"], ["tools.drift", "--stack", "dev"],
                                     ["tools.migrate_status", "--stack", "dev"],
                                     ["tools.adopt", "--vhost", "/", "--stack", "adopted-relay"]],
                         ids=["doctor", "drift", "migrate-status", "adopt"])
def test_the_tools_do_not_follow_a_redirect(command: list[str], redirecting: FakeManagement, ca: CertificateAuthority,
                                            operator: Operator, http_relay: RecordingRelay, tmp_path: Path) -> None:
    """`make doctor|drift|migrate-status|adopt ENDPOINT=https://…`: one error line naming where it pointed."""
    root = ["--root", str(tmp_path)] if command[0] == "tools.adopt" else []
    done = tool(*command, *root, "--endpoint", redirecting.url, "--cacert-file", str(ca.cert), operator=operator)
    assert done.returncode != 0, done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert redirect_line(http_relay) in done.stderr and "not followed" in done.stderr
    assert "Nothing blocking" not in done.stdout
    nothing_crossed(http_relay, operator)


def test_the_readers_and_the_provider_do_not_follow_a_redirect(redirecting: FakeManagement, ca: CertificateAuthority,
                                                               operator: Operator, http_relay: RecordingRelay) -> None:
    """The queue guard's reader (and migrate-status's, the review's), migrate-retire's connection, the drift and
    adopt reads, the per-user-limits provider."""
    broker = access(redirecting, ca, operator)
    with pytest.raises(GuardError) as guard:
        check_queue_delete("/", "orders", DepthReader(broker).read, frozenset(), warn=lambda _: None)
    assert redirect_line(http_relay) in str(guard.value)
    with pytest.raises(DepthError) as status:
        reader = depth_reader(None, broker.client())
        assert reader is not None
        reader("/", "orders")
    assert redirect_line(http_relay) in str(status.value)
    with pytest.raises(RetireError) as retire, RetireBroker(broker, "/").connect():
        pass
    assert redirect_line(http_relay) in str(retire.value)
    with pytest.raises(UnreachableError):
        read_live(broker.client(), "/")
    provider = UserLimitsProvider()
    provider.endpoint, provider.username, provider.password = redirecting.url, operator.username, operator.password
    provider.tls = TlsSettings(str(ca.cert))
    with pytest.raises(UserLimitsError) as limits:
        provider.create({"user": operator.username, "limits": {"max-connections": 3}})
    assert redirect_line(http_relay) in str(limits.value)
    nothing_crossed(http_relay, operator)


# --- an https endpoint listing only plain AMQP ---------------------------------------------------------------------

PLAIN_ONLY = "lists no AMQPS listener (amqp/ssl) in /api/overview, only plain AMQP: not used"


def test_the_depth_readers_never_use_plain_amqp_behind_an_https_endpoint(
        plain_amqp_only: FakeManagement, ca: CertificateAuthority, operator: Operator,
        amqp_relay: RecordingRelay) -> None:
    """The guard, migrate-status, the review and migrate-retire read depths (and retire connects) over AMQP: not
    over the plain listener the overview lists; the line names the TLS listener to enable or the setting."""
    broker = access(plain_amqp_only, ca, operator)
    assert broker.client().get("overview")["rabbitmq_version"]  # the endpoint works: only AMQP is refused
    with pytest.raises(GuardError) as guard:
        check_queue_delete("/", "orders", DepthReader(broker).read, frozenset(), warn=lambda _: None)
    said = str(guard.value)
    assert PLAIN_ONLY in said and "listeners.ssl.default" in said and "rabbitmq-retry:amqp_port" in said
    reader = depth_reader(None, broker.client())
    assert reader is not None
    with pytest.raises(DepthError, match="only plain AMQP: not used"):
        reader("/", "orders")
    with pytest.raises(RetireError, match="only plain AMQP: not used"), RetireBroker(broker, "/").connect():
        pass
    nothing_crossed(amqp_relay, operator)


def test_an_amqp_port_given_for_an_https_endpoint_is_spoken_to_over_tls(
        plain_amqp_only: FakeManagement, ca: CertificateAuthority, operator: Operator,
        amqp_relay: RecordingRelay) -> None:
    """rabbitmq-retry:amqp_port pointing at a plain port: TLS is tried there, so the relay gets a ClientHello, and
    the plain port's answer makes it "does not speak TLS"; no password."""
    broker = BrokerAccess(plain_amqp_only.url, operator.username, operator.password, amqp_relay.port,
                          tls_settings=TlsSettings(str(ca.cert)))
    with pytest.raises(DepthError) as refused:
        DepthReader(broker).read("/", "orders")
    assert f"TLS: 127.0.0.1:{amqp_relay.port} does not speak TLS" in str(refused.value)
    assert amqp_relay.leaked(operator.username, operator.password) == []
    assert amqp_relay.received[:1] == b"\x16"  # a TLS handshake record, nothing else in clear


def test_the_review_reads_no_depth_over_a_redirect_or_plain_amqp(
        broker: Broker, program_copy: Path, ca: CertificateAuthority, server_cert: tuple[Path, Path],
        operator: Operator, http_relay: RecordingRelay, amqp_relay: RecordingRelay) -> None:
    """`make review ENDPOINT=https://…`: the review says it could not read the queues, in one line each time."""
    from tests.test_review import a_removed_tier_committed, cli

    a_removed_tier_committed(program_copy)
    env = {"RABBITMQ_USERNAME": operator.username, "RABBITMQ_PASSWORD": operator.password,
           "PYTHONPATH": str(program_copy)}
    upstream = (broker.host, broker.management_port)
    with FakeManagement(*server_cert, upstream, redirect_to=f"http://127.0.0.1:{http_relay.port}") as redirecting:
        done = cli(program_copy, "--base", "HEAD~1", "--stack", "dev", "--allow-data-loss", "--endpoint",
                   redirecting.url, "--cacert-file", str(ca.cert), **env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert redirect_line(http_relay) in done.stdout and "not on the broker" not in done.stdout
    with FakeManagement(*server_cert, upstream, amqp_port=amqp_relay.port) as plain_only:
        done = cli(program_copy, "--base", "HEAD~1", "--stack", "dev", "--allow-data-loss", "--endpoint",
                   plain_only.url, "--cacert-file", str(ca.cert), **env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert PLAIN_ONLY in done.stdout and "not on the broker" not in done.stdout
    nothing_crossed(http_relay, operator)
    nothing_crossed(amqp_relay, operator)


# --- plain URLs where TLS is configured ----------------------------------------------------------------------------

def test_the_client_refuses_amqp_urls_where_tls_settings_are_given(ca: CertificateAuthority, operator: Operator,
                                                                   amqp_relay: RecordingRelay) -> None:
    """Python API: Publisher and RetryingConsumer; the command: `rabbitmq-retry publish --url amqp://… --cacert-file`.
    """
    url = f"amqp://{operator.username}:{operator.password}@127.0.0.1:{amqp_relay.port}/%2F"
    tls = TlsSettings(str(ca.cert))
    expected = (f"amqp://127.0.0.1:{amqp_relay.port} is plain AMQP, but TLS settings are given (rabbitmq:cacertFile "
                "(RABBITMQ_CACERT, --cacert-file)): the password would cross in clear; use amqps:// and the broker's "
                "TLS port (5671 by default)")
    with pytest.raises(ValueError) as publisher:
        Publisher(url, tls=tls)
    assert str(publisher.value) == expected
    with pytest.raises(ValueError, match="is plain AMQP, but TLS settings are given"):  # any node of a list
        RetryingConsumer(["amqps://x:y@127.0.0.1:5671/%2F", url], contract(), Recorder(lambda _: 0), tls=tls)
    done = tool("rabbitmq_retry_client", "publish", "--exchange", "in", "--url", url, "--cacert-file", str(ca.cert),
                operator=operator)
    assert done.returncode == 2 and done.stderr == f"rabbitmq-retry: error: --url / RABBITMQ_URL: {expected}\n"
    nothing_crossed(amqp_relay, operator)


def test_the_tools_refuse_an_http_endpoint_where_tls_settings_are_given(
        ca: CertificateAuthority, operator: Operator, http_relay: RecordingRelay) -> None:
    url = f"http://127.0.0.1:{http_relay.port}"
    with pytest.raises(TlsError) as refused:
        ManagementClient(url, operator.username, operator.password, TlsSettings(str(ca.cert))).get("overview")
    assert str(refused.value).startswith(f"{url} is plain HTTP, but TLS settings are given (rabbitmq:cacertFile")
    done = tool("tools.doctor", "--stack", "dev", "--endpoint", url, operator=operator, RABBITMQ_CACERT=str(ca.cert))
    assert done.returncode != 0 and done.stderr.count("\n") == 1 and "is plain HTTP, but TLS settings" in done.stderr
    nothing_crossed(http_relay, operator)
