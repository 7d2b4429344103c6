"""Loopback servers for the TLS tests, where the shared brokers cannot be reconfigured per test.

- `CertificateAuthority`: a CA of the test's own, made with openssl in a temporary directory, that issues server
  and client certificates with any dates (`openssl ca -startdate/-enddate`: expired, not yet valid).
- `TlsServer`: a TLS listener presenting a chosen certificate, asking for a client certificate (or requiring one)
  as a broker does: the handshake is all it serves, which is where every certificate fault shows.
- `RecordingRelay`: a plain TCP port that records every byte it receives in clear and forwards it to a real port,
  so a client that would send its credentials there gets as far as with the real port, and the test sees it.
- `FakeManagement`: an HTTPS management endpoint in front of a broker's plain one: it either redirects every
  request (308) to a relay, or answers `/api/overview` listing only a plain AMQP listener (a relay).
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any


class CertificateAuthority:
    """A CA in `directory` that issues certificates with openssl."""

    def __init__(self, directory: Path, name: str = "rabbitmq-retry test CA",
                 existing: tuple[Path, Path] | None = None) -> None:
        """A new CA named `name`, or the `existing` (certificate, key), e.g. the one the local brokers trust."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        if existing is not None:
            self.cert, self.key = existing
        else:
            self.cert, self.key = directory / "ca.pem", directory / "ca.key"
            self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", f"/CN={name}",
                          "-keyout", str(self.key), "-out", str(self.cert))
        (directory / "index.txt").write_text("")
        (directory / "serial").write_text("1000\n")
        (directory / "ca.cnf").write_text(
            "[ca]\ndefault_ca = this\n[this]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
            "default_md = sha256\npolicy = any\nunique_subject = no\ndefault_days = 365\n"
            "[any]\ncommonName = supplied\n")

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.directory, check=True, capture_output=True)

    def issue(self, name: str, *, client: bool = False, hosts: str = "DNS:localhost,IP:127.0.0.1",
              start: str | None = None, end: str | None = None) -> tuple[Path, Path]:
        """(certificate, key) for CN=`name`; `start`/`end` as openssl's YYYYMMDDHHMMSSZ."""
        cert, key, csr, ext = (self.directory / f"{name}.{s}" for s in ("pem", "key", "csr", "ext"))
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key),
                      "-out", str(csr))
        ext.write_text("basicConstraints=CA:FALSE\n" + (
            "extendedKeyUsage=clientAuth\n" if client else f"extendedKeyUsage=serverAuth\nsubjectAltName={hosts}\n"))
        dates = [*(["-startdate", start] if start else []), *(["-enddate", end] if end else [])]
        self._openssl("ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", str(self.cert), "-keyfile",
                      str(self.key), "-in", str(csr), "-out", str(cert), "-extfile", str(ext), *dates)
        return cert, key


class _Listener:
    """A loopback port served by `serve(connection)` on a thread per connection until `close`."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self._open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self._open:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            self.serve(connection)
        except OSError:
            pass
        finally:
            connection.close()

    def serve(self, connection: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._open = False
        self.socket.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class TlsServer(_Listener):
    """Presents `cert`; asks for a client certificate signed by `client_ca` (`require`: refuses a handshake without
    one, as `ssl_options.fail_if_no_peer_cert = true` does). After the handshake it waits for the client to close,
    or (`hang_up`) closes the connection at once without a word, as a server that dislikes the client's certificate
    but whose alert is lost would appear."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None, require: bool = False,
                 hang_up: bool = False) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        if client_ca is not None:
            self.context.load_verify_locations(client_ca)
            self.context.verify_mode = ssl.CERT_REQUIRED if require else ssl.CERT_OPTIONAL
        self.hang_up = hang_up
        super().__init__()

    def serve(self, connection: socket.socket) -> None:
        connection.settimeout(10)
        try:
            tls = self.context.wrap_socket(connection, server_side=True)
        except ssl.SSLError:
            return
        if self.hang_up:
            tls.close()  # the TCP connection only: Python sends no close_notify without unwrap()
            return
        with tls:
            while tls.recv(4096):
                pass


class RecordingRelay(_Listener):
    """Records every byte received in clear and forwards it to `target` (host, port), answers relayed back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.received = bytearray()
        self.connections = 0
        self._lock = threading.Lock()
        super().__init__()

    def serve(self, connection: socket.socket) -> None:
        with self._lock:
            self.connections += 1
        with socket.create_connection(self.target, timeout=10) as upstream:
            def back() -> None:
                try:
                    while data := upstream.recv(65536):
                        connection.sendall(data)
                except OSError:
                    pass
            threading.Thread(target=back, daemon=True).start()
            while data := connection.recv(65536):
                with self._lock:
                    self.received.extend(data)
                upstream.sendall(data)

    def leaked(self, username: str, password: str) -> list[str]:
        """Which forms of the credential arrived in clear: the password itself (AMQP PLAIN sends it as is), the
        Basic auth token (HTTP)."""
        token = base64.b64encode(f"{username}:{password}".encode())
        with self._lock:
            received = bytes(self.received)
        return [name for name, secret in (("password", password.encode()), ("Basic token", token))
                if secret in received]


class FakeManagement:
    """An HTTPS management endpoint (certificate `cert`) in front of `upstream`, a broker's plain management API
    (host, port). `redirect_to`: every request answers 308 to that base URL, same path. `amqp_port`: requests are
    forwarded, and `/api/overview` lists only a plain AMQP listener on that port."""

    def __init__(self, cert: Path, key: Path, upstream: tuple[str, int], *, redirect_to: str | None = None,
                 amqp_port: int | None = None) -> None:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def handle_one(self) -> None:
                if redirect_to is not None:
                    self.send_response(308)
                    self.send_header("Location", f"{redirect_to}{self.path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, body = fake.forward(self.command, self.path, dict(self.headers),
                                            self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if self.path.rstrip("/") == "/api/overview" and status == 200:
                    overview = json.loads(body)
                    overview["listeners"] = [{"node": "rabbit@fake", "protocol": "amqp", "ip_address": "127.0.0.1",
                                              "port": amqp_port}]
                    body = json.dumps(overview).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.handle_one()

            def do_PUT(self) -> None:
                self.handle_one()

            def do_POST(self) -> None:
                self.handle_one()

            def do_DELETE(self) -> None:
                self.handle_one()

        self.upstream = upstream
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            connection.request(method, path, body or None, {k: v for k, v in headers.items()
                                                            if k.lower() in ("authorization", "content-type")})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeManagement:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
