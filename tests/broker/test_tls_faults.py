"""Every certificate fault is one line naming the fix, over HTTPS (the management client: tools, guards, provider)
and AMQPS (the client) alike, and is never retried (no "broker unreachable … retrying" first).

The broker's certificate (expired, not yet valid, another host's, an unknown CA) and a port that requires a client
certificate come from TLS servers of the test's own (tests/support/tls.py): the local brokers present one valid
certificate and accept connections without a client certificate. What the brokers themselves decide is tested on
each: a client certificate they do not trust or that has expired (AMQPS and HTTPS, whose listeners ask for one:
scripts/brokers.sh sets management.ssl.verify = verify_peer, so the tools' certificate is really presented and
checked), and a login by certificate that they refuse, named by the certificate's subject."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.user_limits import UserLimitsError, UserLimitsProvider
from rabbitmq_retry_client import BrokerRefusedError, Publisher, RetryingConsumer, TlsSettings
from rabbitmq_retry_client.depth import BrokerAccess, DepthError, DepthReader
from rabbitmq_retry_client.management import ManagementClient, TlsError, path_escape
from tests.support.deploy import configured_tls_brokers, throwaway_vhost, tls_dir, unreachable
from tests.support.environment import missing
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import Recorder
from tests.support.tls import CertificateAuthority, TlsServer
from tests.test_retry_client import contract

ROOT = Path(__file__).resolve().parents[2]
TLS_BROKERS = configured_tls_brokers()
CLOCK = r"this machine's clock says \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
PAST, FUTURE = ("20200101000000Z", "20210101000000Z"), ("20400101000000Z", "20410101000000Z")


class Certificates:
    """Everything the faults need, made once: the test's CA and another one, server and client certificates."""

    def __init__(self, where: Path) -> None:
        self.ca = CertificateAuthority(where / "ca")
        self.other = CertificateAuthority(where / "other", "another CA")
        self.server = self.ca.issue("localhost")
        self.expired = self.ca.issue("expired-server", start=PAST[0], end=PAST[1])
        self.future = self.ca.issue("future-server", start=FUTURE[0], end=FUTURE[1])
        self.elsewhere = self.ca.issue("elsewhere", hosts="DNS:broker.elsewhere.example")
        self.client = self.ca.issue("app-client", client=True)
        self.stranger = self.other.issue("stranger-client", client=True)

    def trusting(self, client: tuple[Path, Path] | None = None, key: Path | None = None) -> TlsSettings:
        """Trusts this CA; presents `client` (with `key` instead of its own, to mismatch them)."""
        if client is None:
            return TlsSettings(str(self.ca.cert))
        return TlsSettings(str(self.ca.cert), str(client[0]), str(key or client[1]))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("tls-faults"))


def refusals(port: int, tls: TlsSettings, caplog: pytest.LogCaptureFixture) -> tuple[str, str]:
    """(HTTPS line, AMQPS line) for `127.0.0.1:port`: each one line, the AMQPS one refused at once, not retried."""
    with pytest.raises(TlsError) as https:
        ManagementClient(f"https://127.0.0.1:{port}", "u", "p", tls, timeout=10).get("overview")
    caplog.clear()
    with caplog.at_level(logging.INFO, "rabbitmq_retry_client"), pytest.raises(BrokerRefusedError) as amqps:
        Publisher(f"amqps://u:p@127.0.0.1:{port}/%2F", connect_timeout=60, tls=tls)
    assert not [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    lines = str(https.value), str(amqps.value)
    assert all("\n" not in line for line in lines)
    return lines


def over_both(port: int, pattern: str, lines: tuple[str, str]) -> None:
    """`pattern` (a regex; `{where}` stands for the address) matches the HTTPS and the AMQPS line."""
    import re

    for where, line in zip((f"https://127.0.0.1:{port}", f"127.0.0.1:{port}"), lines, strict=True):
        assert re.fullmatch(pattern.replace("{where}", re.escape(where)), line), line


# --- the broker's certificate ---------------------------------------------------------------------------------------

def test_an_expired_broker_certificate_names_its_dates_and_this_clock(certs: Certificates,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    with TlsServer(*certs.expired) as server:
        lines = refusals(server.port, certs.trusting(), caplog)
    over_both(server.port, r"TLS: the certificate of {where} has expired \(CN=expired-server, valid from 2020-01-01 "
              rf"00:00:00 UTC to 2021-01-01 00:00:00 UTC; {CLOCK}\): renew the broker's certificate, or fix this "
              r"machine's clock if it is wrong", lines)


def test_a_broker_certificate_not_valid_yet_names_its_dates_and_this_clock(certs: Certificates,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Not "not signed by a CA this client trusts": the CA is right, the dates are not."""
    with TlsServer(*certs.future) as server:
        lines = refusals(server.port, certs.trusting(), caplog)
    over_both(server.port, r"TLS: the certificate of {where} is not valid yet \(CN=future-server, valid from "
              rf"2040-01-01 00:00:00 UTC to 2041-01-01 00:00:00 UTC; {CLOCK}\): fix this machine's clock, or the "
              "broker's certificate if it was issued for a later date", lines)


def test_a_certificate_for_another_host(certs: Certificates, caplog: pytest.LogCaptureFixture) -> None:
    with TlsServer(*certs.elsewhere) as server:
        lines = refusals(server.port, certs.trusting(), caplog)
    over_both(server.port, r"TLS: the certificate of {where} is not for '127.0.0.1' \(IP address mismatch, "
              r"certificate is not valid for '127.0.0.1'.\): connect by a name the certificate lists \(see its "
              r"subjectAltName\), or fix the broker's certificate", lines)


def test_a_broker_certificate_of_an_unknown_ca(certs: Certificates, caplog: pytest.LogCaptureFixture) -> None:
    with TlsServer(*certs.server) as server:
        lines = refusals(server.port, TlsSettings(str(certs.other.cert)), caplog)
    over_both(server.port, r"TLS: the certificate of {where} is not signed by a CA this client trusts \(unable to "
              r"get local issuer certificate\): set rabbitmq:cacertFile \(RABBITMQ_CACERT, --cacert-file\) to the "
              "CA file that signed it", lines)


# --- the client's certificate ---------------------------------------------------------------------------------------

def test_a_client_certificate_missing_where_required_every_time(certs: Certificates,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """From the server's alert, every time: the client's AMQP header can race the alert (a reset), and was then
    read as "does not speak TLS"."""
    with TlsServer(*certs.server, client_ca=certs.ca.cert, require=True) as server:
        for _ in range(12):
            lines = refusals(server.port, certs.trusting(), caplog)
            over_both(server.port, r"TLS: {where} requires a client certificate and none was given "
                      r"\(TLSV13_ALERT_CERTIFICATE_REQUIRED\): set rabbitmq:clientcertFile \(RABBITMQ_CLIENTCERT, "
                      r"--clientcert-file\) and rabbitmq:clientkeyFile \(RABBITMQ_CLIENTKEY, --clientkey-file\) to "
                      "one signed by a CA the broker trusts", lines)


def test_a_client_certificate_the_server_does_not_trust(certs: Certificates, caplog: pytest.LogCaptureFixture) -> None:
    with TlsServer(*certs.server, client_ca=certs.ca.cert, require=True) as server:
        lines = refusals(server.port, certs.trusting(certs.stranger), caplog)
    over_both(server.port, r"TLS: {where} does not trust the client certificate \(TLSV1_ALERT_UNKNOWN_CA\) "
              r"\S+/stranger-client.pem \(CN=stranger-client, valid from .* UTC to .* UTC\): set "
              r"rabbitmq:clientcertFile .*", lines)


def test_a_server_that_hangs_up_after_the_handshake_is_not_said_to_not_speak_tls(
        certs: Certificates, caplog: pytest.LogCaptureFixture) -> None:
    """A server that started the handshake and closed without an alert: it speaks TLS; the line says what it was
    given."""
    with TlsServer(*certs.server, client_ca=certs.ca.cert, hang_up=True) as server:
        lines = refusals(server.port, certs.trusting(certs.client), caplog)
    over_both(server.port, r"TLS: {where} closed the connection during the TLS handshake, without saying why; it was "
              r"given the client certificate \S+/app-client.pem \(CN=app-client, .*\): set rabbitmq:clientcertFile "
              r".* to one signed by a CA the broker trusts", lines)


def test_a_key_that_does_not_match_the_certificate_names_its_subject(certs: Certificates) -> None:
    """Refused before connecting, by the management client and the client alike."""
    settings = certs.trusting(certs.client, key=certs.stranger[1])
    expected = (f"rabbitmq:clientkeyFile (RABBITMQ_CLIENTKEY, --clientkey-file): {certs.stranger[1]} is not the key "
                f"of the client certificate {certs.client[0]} (CN=app-client, valid from ")
    with pytest.raises(TlsError) as https:
        ManagementClient("https://127.0.0.1:1", "u", "p", settings).get("overview")
    with pytest.raises(ValueError) as amqps:
        Publisher("amqps://u:p@127.0.0.1:1/%2F", tls=settings)
    for said in (str(https.value), str(amqps.value)):
        assert said.startswith(expected) and said.endswith(": give the key it was issued with"), said


# --- what the brokers decide ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=TLS_BROKERS, ids=[b.name for b in TLS_BROKERS])
def tls_broker(request: pytest.FixtureRequest) -> Broker:
    candidate: Broker = request.param
    if not (tls_dir() / "ca.key").exists():
        missing(f"no test CA key in {tls_dir()}", because="CI=true: run scripts/brokers.sh ensure")
    if (problem := unreachable(candidate)) is not None:
        missing(problem, because="CI=true: run scripts/brokers.sh ensure (TLS listeners)")
    return candidate


@pytest.fixture(scope="module")
def brokers_ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    """The CA the local brokers trust (scripts/brokers.sh made it), issuing client certificates of the test's own."""
    return CertificateAuthority(tmp_path_factory.mktemp("brokers-ca"), existing=(tls_dir() / "ca.pem",
                                                                                 tls_dir() / "ca.key"))


def broker_refusals(broker: Broker, tls: TlsSettings, caplog: pytest.LogCaptureFixture) -> tuple[str, str]:
    """(HTTPS line, AMQPS line) from the broker's TLS listeners with `tls`."""
    with pytest.raises(TlsError) as https:
        ManagementClient(broker.management_url, broker.username, broker.password, tls).get("overview")
    caplog.clear()
    with caplog.at_level(logging.INFO, "rabbitmq_retry_client"), pytest.raises(BrokerRefusedError) as amqps:
        Publisher(f"amqps://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/%2F",
                  connect_timeout=60, tls=tls)
    assert not [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    return str(https.value), str(amqps.value)


def test_the_brokers_refuse_a_client_certificate_they_do_not_trust(tls_broker: Broker, certs: Certificates,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """On AMQPS and on HTTPS: had the management client not presented it, the request would have passed."""
    tls = TlsSettings(str(tls_dir() / "ca.pem"), str(certs.stranger[0]), str(certs.stranger[1]))
    for line in broker_refusals(tls_broker, tls, caplog):
        assert "does not trust the client certificate (TLSV1_ALERT_UNKNOWN_CA)" in line, line
        assert "(CN=stranger-client, valid from" in line and "\n" not in line
    url = f"amqps://{tls_broker.username}:{tls_broker.password}@{tls_broker.host}:{tls_broker.amqp_port}/%2F"
    consumer = RetryingConsumer(url, contract(vhost="/"), Recorder(lambda _: 0), reconnect_timeout=60, tls=tls)
    caplog.clear()
    with caplog.at_level(logging.INFO, "rabbitmq_retry_client"), pytest.raises(BrokerRefusedError) as consumed:
        consumer.run(max_messages=1)
    assert "does not trust the client certificate (TLSV1_ALERT_UNKNOWN_CA)" in str(consumed.value)
    assert not [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]


def test_the_brokers_refuse_an_expired_client_certificate(tls_broker: Broker, brokers_ca: CertificateAuthority,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cert, key = brokers_ca.issue(f"expired-client-{uuid.uuid4().hex[:6]}", client=True, start=PAST[0], end=PAST[1])
    for line in broker_refusals(tls_broker, TlsSettings(str(tls_dir() / "ca.pem"), str(cert), str(key)), caplog):
        assert "refused the client certificate" in line and "valid from 2020-01-01 00:00:00 UTC to 2021-01-01" in line
        assert "it has expired or is not valid yet (SSLV3_ALERT_CERTIFICATE_EXPIRED" in line, line


def test_the_tools_guard_and_provider_present_their_client_certificate(tls_broker: Broker, certs: Certificates,
                                                                       tmp_path: Path) -> None:
    """`make doctor`, the queue guard's reader and the per-user-limits provider with a certificate the broker does not
    trust: refused by the broker's HTTPS listener, so each did present it (with none, each would have passed)."""
    flags = ["--endpoint", tls_broker.management_url, "--cacert-file", str(tls_dir() / "ca.pem"),
             "--clientcert-file", str(certs.stranger[0]), "--clientkey-file", str(certs.stranger[1])]
    done = subprocess.run([sys.executable, "-m", "tools.doctor", "--stack", "dev", *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "does not trust the client certificate (TLSV1_ALERT_UNKNOWN_CA)" in done.stderr
    access = BrokerAccess(tls_broker.management_url, tls_broker.username, tls_broker.password, None,
                          TlsSettings(str(tls_dir() / "ca.pem"), str(certs.stranger[0]), str(certs.stranger[1])))
    with pytest.raises(DepthError, match=r"does not trust the client certificate \(TLSV1_ALERT_UNKNOWN_CA\)"):
        DepthReader(access).read("/", "anything")
    provider = UserLimitsProvider()
    provider.endpoint, provider.username, provider.password = (tls_broker.management_url, tls_broker.username,
                                                               tls_broker.password)
    provider.tls = access.tls_settings
    with pytest.raises(UserLimitsError, match=r"does not trust the client certificate \(TLSV1_ALERT_UNKNOWN_CA\)"):
        provider.create({"user": "nobody", "limits": {"max-connections": 1}})


@pytest.fixture
def cert_vhost(tls_broker: Broker) -> Iterator[str]:
    with throwaway_vhost(tls_broker, "certlogin") as name:
        yield name


def test_a_refused_certificate_login_names_the_certificates_subject(
        tls_broker: Broker, brokers_ca: CertificateAuthority, cert_vhost: str) -> None:
    """SASL EXTERNAL: no user for the certificate's CN (403), then a user without permissions on the vhost (530):
    both name the certificate's subject, not '?'."""
    name = f"cert-login-{uuid.uuid4().hex[:6]}"
    cert, key = brokers_ca.issue(name, client=True)
    tls = TlsSettings(str(tls_dir() / "ca.pem"), str(cert), str(key))
    url = f"amqps://{tls_broker.host}:{tls_broker.amqp_port}/{path_escape(cert_vhost)}"
    with pytest.raises(BrokerRefusedError) as no_user:
        Publisher(url, connect_timeout=60, tls=tls)
    assert str(no_user.value).startswith(f"login by the client certificate CN={name} ({cert}) (SASL EXTERNAL) "
                                         f"refused by {tls_broker.host}:{tls_broker.amqp_port}")
    call(tls_broker, "PUT", f"users/{esc(name)}", {"password_hash": "", "tags": ""})
    try:
        with pytest.raises(BrokerRefusedError) as no_vhost:
            Publisher(url, connect_timeout=60, tls=tls)
        assert str(no_vhost.value).startswith(f"vhost {cert_vhost!r} refused by {tls_broker.host}:"
                                              f"{tls_broker.amqp_port} for the client certificate CN={name} ({cert})")
    finally:
        call(tls_broker, "DELETE", f"users/{esc(name)}")


def test_the_command_says_a_certificate_fault_in_one_line(certs: Certificates) -> None:
    """`rabbitmq-retry publish --url amqps://…` against an expired certificate: exit 1, one line, at once."""
    with TlsServer(*certs.expired) as server:
        done = subprocess.run([sys.executable, "-m", "rabbitmq_retry_client", "publish", "--exchange", "in", "--url",
                               f"amqps://u:p@127.0.0.1:{server.port}/%2F", "--cacert-file", str(certs.ca.cert)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: TLS: the certificate of 127.0.0.1:{server.port} has expired (CN=expired")


def test_the_python_api_reads_the_variables_its_errors_name(tls_broker: Broker, tls_vhost_free_url: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `tls=`, an amqps:// URL is verified with RABBITMQ_CACERT (and RABBITMQ_CLIENTCERT, …), the variable
    the error line names: setting it is the fix."""
    for variable in ("RABBITMQ_CACERT", "RABBITMQ_CLIENTCERT", "RABBITMQ_CLIENTKEY", "RABBITMQ_INSECURE"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(BrokerRefusedError, match=r"not signed by a CA this client trusts .*: set rabbitmq:cacertFile "
                                                 r"\(RABBITMQ_CACERT, --cacert-file\)"):
        Publisher(tls_vhost_free_url, connect_timeout=60)
    monkeypatch.setenv("RABBITMQ_CACERT", str(tls_dir() / "ca.pem"))
    Publisher(tls_vhost_free_url, connect_timeout=60).close()  # connected, verified with the environment's CA


@pytest.fixture
def tls_vhost_free_url(tls_broker: Broker) -> str:
    return f"amqps://{tls_broker.username}:{tls_broker.password}@{tls_broker.host}:{tls_broker.amqp_port}/%2F"
