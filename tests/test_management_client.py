"""The one management API client (rabbitmq_retry_client/management.py) without a broker: its escaping is the
provider's, its settings are read under one set of names, and what cannot work is one line naming what to fix.
tests/broker/test_tls.py runs it against both brokers' HTTPS listeners."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rabbitmq_retry_client.management import (
    LoginRefusedError,
    ManagementClient,
    TlsError,
    TlsSettings,
    UnreachableError,
    path_escape,
)
from tests.support.mirror import esc


@pytest.mark.parametrize("segment", ["/", "shop/eu", "a b", "50%", "q#1", "what?", "$&+:=@", "ünï", "x.y-z_~"])
def test_paths_are_escaped_as_the_provider_escapes_them(segment: str) -> None:
    assert path_escape(segment) == esc(segment)
    assert path_escape("/") == "%2F" and path_escape("a:b@c") == "a:b@c"


def test_tls_settings_come_from_flags_else_the_environment_else_the_stack() -> None:
    config = {"rabbitmq:cacertFile": "/stack/ca.pem", "rabbitmq:insecure": "false",
              "rabbitmq:clientcertFile": "/stack/c.pem", "rabbitmq:clientkeyFile": "/stack/c.key"}
    env = {"RABBITMQ_CACERT": "/env/ca.pem", "RABBITMQ_INSECURE": "true"}
    assert TlsSettings.from_sources(config, {}) == TlsSettings("/stack/ca.pem", "/stack/c.pem", "/stack/c.key")
    assert TlsSettings.from_sources(config, env) == TlsSettings("/env/ca.pem", "/stack/c.pem", "/stack/c.key", True)
    assert TlsSettings.from_sources(config, env, {"cacert_file": "/flag/ca.pem"}).cacert_file == "/flag/ca.pem"
    assert TlsSettings.from_sources({}, {}) == TlsSettings()


def test_a_missing_or_partial_tls_file_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TlsError) as missing:
        TlsSettings(cacert_file=str(tmp_path / "nope.pem")).context()
    assert str(missing.value) == (f"rabbitmq:cacertFile (RABBITMQ_CACERT, --cacert-file): {tmp_path / 'nope.pem'} "
                                  "does not exist: give the path of a readable PEM file")
    cert = tmp_path / "client.pem"
    cert.write_text("not a certificate")
    with pytest.raises(TlsError) as alone:
        TlsSettings(clientcert_file=str(cert)).context()
    assert "rabbitmq:clientcertFile (RABBITMQ_CLIENTCERT, --clientcert-file) is set but rabbitmq:clientkeyFile" \
        in str(alone.value)
    key = tmp_path / "client.key"
    key.write_text("not a key")
    with pytest.raises(TlsError) as garbage:
        TlsSettings(clientcert_file=str(cert), clientkey_file=str(key)).context()
    assert "is not a PEM certificate and its unencrypted key" in str(garbage.value)


def test_guest_is_assumed_for_the_dev_stack_only() -> None:
    dev = ManagementClient.from_settings("http://127.0.0.1:15672", {}, dev=True, env={})
    assert (dev.username, dev.password) == ("guest", "guest")
    with pytest.raises(LoginRefusedError) as refused:
        ManagementClient.from_settings("http://127.0.0.1:15672", {}, dev=False, env={})
    assert str(refused.value) == ("no user for http://127.0.0.1:15672: set RABBITMQ_USERNAME (or the stack's "
                                  "rabbitmq:username); guest/guest is assumed only for the dev stack")
    with pytest.raises(LoginRefusedError, match=r"no password for user 'deployer'.*set RABBITMQ_PASSWORD"):
        ManagementClient.from_settings(None, {"rabbitmq:endpoint": "https://rabbit:15671",
                                              "rabbitmq:username": "deployer"}, env={})
    given = ManagementClient.from_settings(None, {"rabbitmq:endpoint": "https://rabbit:15671",
                                                  "rabbitmq:cacertFile": "/ca.pem"},
                                           env={"RABBITMQ_USERNAME": "u", "RABBITMQ_PASSWORD": "p"})
    assert (given.url, given.username, given.tls.cacert_file) == ("https://rabbit:15671", "u", "/ca.pem")


@contextmanager
def server(answer: bytes) -> Iterator[int]:
    """A port on 127.0.0.1 that reads what comes and answers `answer`, then closes (an AMQP port answers an HTTP
    request with its protocol header; a plain HTTP port answers a TLS hello with a 400)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(4096)
                    conn.sendall(answer)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_http_to_an_amqp_port_says_it_is_the_amqp_port() -> None:
    with server(b"AMQP\x00\x00\x09\x01") as port, pytest.raises(UnreachableError) as error:
        ManagementClient(f"http://127.0.0.1:{port}", "guest", "guest", timeout=5).get("overview")
    assert str(error.value) == (f"http://127.0.0.1:{port} is an AMQP port, not the management API: give the "
                                "management port in rabbitmq:endpoint (RABBITMQ_ENDPOINT, --endpoint) (15672 by "
                                "default, 15671 with TLS)")


def test_https_to_a_plain_http_port_says_it_does_not_speak_tls() -> None:
    with server(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n") as port, \
            pytest.raises(TlsError) as error:
        ManagementClient(f"https://127.0.0.1:{port}", "guest", "guest", timeout=5).get("overview")
    assert str(error.value).startswith(f"TLS: https://127.0.0.1:{port} does not speak TLS (")
    assert "use http:// for this port, or the broker's TLS port" in str(error.value)


def test_a_port_nothing_listens_on_is_unreachable_in_one_line() -> None:
    with pytest.raises(UnreachableError) as error:
        ManagementClient("http://127.0.0.1:1", "guest", "guest", timeout=5).get("overview")
    assert str(error.value).startswith("the management API at http://127.0.0.1:1 refuses connections (GET "
                                       "/api/overview)")
    assert "\n" not in str(error.value)


def test_another_http_server_on_the_port_is_not_read_as_an_empty_broker() -> None:
    """Prometheus (or any web server) answers 404 in plain text: that is not "the object is not there", which would
    make doctor report a broker without version, plugins or user, and drift a vhost with everything missing."""
    not_found = b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 18\r\n\r\n404 page not found"
    with server(not_found) as port, pytest.raises(UnreachableError) as error:
        ManagementClient(f"http://127.0.0.1:{port}", "guest", "guest", timeout=5).get("overview")
    assert str(error.value) == (f"http://127.0.0.1:{port} is not RabbitMQ's management API: it answered GET "
                                "/api/overview with HTTP 404 and no JSON; give the management port in "
                                "rabbitmq:endpoint (RABBITMQ_ENDPOINT, --endpoint) (15672 by default, 15671 with TLS)")
    management_404 = (b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 49\r\n\r\n"
                      b'{"error":"Object Not Found","reason":"Not Found"}')
    with server(management_404) as port:
        assert ManagementClient(f"http://127.0.0.1:{port}", "guest", "guest", timeout=5).get("vhosts/shop") is None


def test_an_amqp_url_is_not_an_endpoint() -> None:
    with pytest.raises(UnreachableError, match=r"^endpoint 'amqps://h:5671' is not an http\(s\) URL"):
        ManagementClient("amqps://h:5671", "u", "p")


def test_doctor_for_another_stack_does_not_log_in_as_guest(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`make doctor STACK=prod` without credentials: one line saying which variable to set, before any request."""
    from tools import doctor

    for variable in ("RABBITMQ_USERNAME", "RABBITMQ_PASSWORD", "RABBITMQ_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    assert doctor.main(["--stack", "prod", "--endpoint", "http://127.0.0.1:1"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "guest" not in error.replace("guest/guest is assumed only", "")
    assert error.startswith("error: no user for http://127.0.0.1:1: set RABBITMQ_USERNAME") or error.startswith(
        "error: no password for user"), error
