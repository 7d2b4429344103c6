"""The one client of RabbitMQ's management API (HTTP or HTTPS) that this project uses: the components' dynamic
provider (`components/user_limits.py`), the queue guard (`depth.py`) and every tool under `tools/`.

It speaks as pulumi-rabbitmq 3.5.3 does (docs/provider.md §1), so that what a tool reads is what `pulumi up` would
see: each path segment escaped with Go's `url.PathEscape` (`path_escape`), Basic auth, a JSON body, no keep-alive.
Unlike the provider it has a timeout (`TIMEOUT_S`) and says what went wrong in one line naming what to fix, in one
vocabulary of errors (`ManagementError` and its five kinds): the API is unreachable, the login was refused, the
object is not there, the request was refused, or TLS failed (`TlsFault`: the broker's certificate, the client's as
the broker's alert says, a file, or a URL scheme that does not match what the port speaks). A redirect is never
followed (the password would go with it), and where TLS settings are given an http:// endpoint is refused.

TLS settings carry one set of names everywhere (`TLS_SETTINGS`): the provider's stack config keys
(`rabbitmq:cacertFile`, …) and environment variables (`RABBITMQ_CACERT`, …), and the same words as command flags
(`--cacert-file`, …). docs/tls.md describes them.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from .certificates import Certificate, from_der, from_pem_file, stamp

TIMEOUT_S = 30.0
"""Per request: a management API that has not answered by then is reported unreachable."""


def path_escape(segment: str) -> str:
    """A path segment as the provider escapes it (Go's url.PathEscape): `/`, `%`, `#`, `?` and space escaped, `$ & + :
    = @` left as they are (docs/provider.md §1)."""
    return urllib.parse.quote(segment, safe="$&+:=@")


class ConfigSource(Protocol):
    """Where stack config is read: a dict of `namespace:key` → value, or the engine's `pulumi.dynamic.Config`."""

    def get(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class Setting:
    """One setting's names: the stack config key (the provider's), the environment variable, the command flag."""

    config: str
    env: str
    flag: str

    def names(self) -> str:
        """`rabbitmq:cacertFile (RABBITMQ_CACERT, --cacert-file)`: every way to give it, for an error line."""
        return f"{self.config} ({self.env}, {self.flag})"

    def value(self, config: ConfigSource, env: Mapping[str, str], flag: Any = None) -> str | None:
        """Its value from `flag`, else the environment, else the stack's config; None when none gives one."""
        for found in (flag, env.get(self.env), config.get(self.config)):
            if found not in (None, ""):
                return str(found)
        return None


ENDPOINT = Setting("rabbitmq:endpoint", "RABBITMQ_ENDPOINT", "--endpoint")
USERNAME = Setting("rabbitmq:username", "RABBITMQ_USERNAME", "--username")
PASSWORD = Setting("rabbitmq:password", "RABBITMQ_PASSWORD", "--password")
CACERT = Setting("rabbitmq:cacertFile", "RABBITMQ_CACERT", "--cacert-file")
CLIENTCERT = Setting("rabbitmq:clientcertFile", "RABBITMQ_CLIENTCERT", "--clientcert-file")
CLIENTKEY = Setting("rabbitmq:clientkeyFile", "RABBITMQ_CLIENTKEY", "--clientkey-file")
INSECURE = Setting("rabbitmq:insecure", "RABBITMQ_INSECURE", "--insecure")
TLS_SETTINGS = {"cacert_file": CACERT, "clientcert_file": CLIENTCERT, "clientkey_file": CLIENTKEY,
                "insecure": INSECURE}
"""TlsSettings field → its names. The provider's own (terraform-provider-rabbitmq `cacert_file`, `clientcert_file`,
`clientkey_file`, `insecure`, with their environment variables), so that a stack configured for the provider
configures the tools and the guard too."""


def truthy(value: Any) -> bool:
    """`true`/`1`/`yes` (any case) or True: how `insecure` is read from config, environment and flags."""
    return value is True or str(value).strip().lower() in ("1", "true", "yes")


class ManagementError(Exception):
    """A management API request that failed, in one line naming what to fix; its class says which of the five kinds."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class UnreachableError(ManagementError):
    """Nothing answered HTTP at the endpoint: connection refused, timed out, unknown host, or not an HTTP port."""


class LoginRefusedError(ManagementError):
    """401: the user or password is wrong (or the user may not use the management API)."""


class NotFoundError(ManagementError):
    """404: the object (or its vhost) is not there."""


class RequestRefusedError(ManagementError):
    """Any other status from 400 up: the broker refused the request (a 403 for a user without the tag, a 400 …)."""


class TlsError(ManagementError):
    """TLS failed before HTTP: the broker's certificate is not trusted, not for this host or expired; a CA, client
    certificate or key file is missing or unreadable; or https:// was given for a plain port (or http:// for a TLS
    one)."""


@dataclass(frozen=True)
class TlsSettings:
    """How to speak TLS to a broker (management API and AMQPS alike)."""

    cacert_file: str | None = None
    """CA bundle (PEM) that signed the broker's certificate; None: the system's trusted CAs."""
    clientcert_file: str | None = None
    """Client certificate (PEM) for brokers that ask for one (and for SASL EXTERNAL)."""
    clientkey_file: str | None = None
    """Its private key (PEM, unencrypted)."""
    insecure: bool = False
    """Skip verifying the broker's certificate (never by default; the review and doctor say when it is on)."""

    @classmethod
    def from_sources(cls, config: ConfigSource | None = None, env: Mapping[str, str] | None = None,
                     given: Mapping[str, Any] | None = None) -> TlsSettings:
        """From `given` (flags, by field), else the environment, else the stack's config (provider keys)."""
        config, env, given = config or {}, os.environ if env is None else env, given or {}
        found = {field: setting.value(config, env, given.get(field)) for field, setting in TLS_SETTINGS.items()}
        return cls(found["cacert_file"], found["clientcert_file"], found["clientkey_file"], truthy(found["insecure"]))

    def given(self) -> str:
        """The names of the settings that are set, for an error line: `rabbitmq:cacertFile (RABBITMQ_CACERT, …)`;
        "" when none is."""
        return ", ".join(TLS_SETTINGS[field].names() for field in TLS_SETTINGS if getattr(self, field))

    def _check_files(self) -> None:
        """TlsError naming the setting when a file is missing or unreadable, or a certificate comes without its key."""
        for field, path in (("cacert_file", self.cacert_file), ("clientcert_file", self.clientcert_file),
                            ("clientkey_file", self.clientkey_file)):
            if path is not None and not os.access(path, os.R_OK):
                why = "does not exist" if not os.path.exists(path) else "cannot be read"
                raise TlsError(f"{TLS_SETTINGS[field].names()}: {path} {why}: give the path of a readable PEM file")
        if bool(self.clientcert_file) != bool(self.clientkey_file):
            have, missing = (CLIENTCERT, CLIENTKEY) if self.clientcert_file else (CLIENTKEY, CLIENTCERT)
            raise TlsError(f"{have.names()} is set but {missing.names()} is not: a client certificate needs its key")

    def context(self) -> ssl.SSLContext:
        """A client context verifying the broker (unless `insecure`), with the client certificate when given.
        TlsError naming the setting when a file is missing or unreadable (`_check_files`) or not what it should be."""
        self._check_files()
        try:
            context = ssl.create_default_context(cafile=self.cacert_file)
        except ssl.SSLError as error:
            raise TlsError(f"{CACERT.names()}: {self.cacert_file} is not a PEM CA certificate ({error.reason}): give "
                           "the CA that signed the broker's certificate") from None
        if self.clientcert_file and self.clientkey_file:
            try:
                context.load_cert_chain(self.clientcert_file, self.clientkey_file)
            except ssl.SSLError as error:
                if "KEY_VALUES_MISMATCH" in f"{error.reason} {error}".upper():
                    raise TlsError(f"{CLIENTKEY.names()}: {self.clientkey_file} is not the key of the client "
                                   f"certificate {describe_certificate(self.clientcert_file)}: give the key it was "
                                   "issued with") from None
                raise TlsError(f"{CLIENTCERT.names()} and {CLIENTKEY.names()}: {self.clientcert_file} with "
                               f"{self.clientkey_file} is not a PEM certificate and its unencrypted key "
                               f"({error.reason or error})") from None
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


UNVERIFIED = TlsSettings(insecure=True)
"""What a probe speaks when it only names what a server presents or speaks: no certificate verified."""
NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST")
"""What OpenSSL says when the server answered a ClientHello with something that is not TLS."""
TLS_RECORD = (b"\x15", b"\x16")
"""The first byte of a TLS alert or handshake record: the server speaks TLS."""
CLIENT_CERT_DISTRUSTED = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "UNSUPPORTED_CERTIFICATE",
                          "DECRYPT_ERROR", "CERTIFICATE_REVOKED", "ACCESS_DENIED")
"""The alerts a server sends about the client's certificate (RFC 8446 §6.2)."""
HUNG_UP = "closed the connection during the TLS handshake"
"""Said of a server that started a handshake and closed it without an alert: a refused certificate whose alert was
lost, or a node stopping; a client retrying tells them apart by whether it happens again."""
PROBE_WAIT_S = 1.0
"""After a probe's handshake: how long a server that refuses the client certificate has to say so (it does at once)."""


@dataclass(frozen=True)
class Handshake:
    """What a server did with one TLS handshake (`probe_handshake`), reading without sending application data."""

    outcome: str
    """`accepted` (it waits for data, or sent some), `refused` (an alert or a verification failure: `error`),
    `closed` (it started the handshake, then closed or reset the connection without an alert), `plain` (it answered
    something that is not TLS, or closed before answering), `unreachable` (no connection)."""
    error: ssl.SSLError | None = None


def _failed_handshake(error: OSError, first: bytes, done: bool) -> Handshake:
    """What a handshake that failed with `error` says of the server: `first`, the first byte it answered (b""
    for none); `done`, whether the handshake had completed."""
    if isinstance(error, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError, TimeoutError)):
        if not first and not done:
            return Handshake("unreachable" if isinstance(error, ConnectionRefusedError) else "plain")
        return Handshake("closed" if first in TLS_RECORD else "plain")
    if not isinstance(error, ssl.SSLError):
        return Handshake("unreachable")
    said = f"{error.reason} {error}".upper()
    if not isinstance(error, ssl.SSLCertVerificationError) and any(s in said for s in NOT_TLS):
        return Handshake("plain", error)
    return Handshake("refused", error)


def probe_handshake(host: str, port: int, context: ssl.SSLContext, timeout: float = 3.0) -> Handshake:
    """One TLS handshake with `context`, then a read without sending anything: a server that refuses the client's
    certificate says so then (TLS 1.3 completes the client's side of the handshake before the server has checked
    it), and with nothing sent by the client, no reset can overtake its alert."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    first, done = b"", False
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            def exchange(wait: float) -> None:
                nonlocal first
                if pending := outgoing.read():
                    raw.sendall(pending)
                raw.settimeout(wait)
                data = raw.recv(65536)
                first = first or data[:1]
                incoming.write(data) if data else incoming.write_eof()

            while not done:
                try:
                    tls.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    exchange(timeout)
            if pending := outgoing.read():
                raw.sendall(pending)
            while True:
                try:
                    tls.read(1)
                    return Handshake("accepted")
                except ssl.SSLWantReadError:
                    try:
                        exchange(PROBE_WAIT_S)
                    except TimeoutError:
                        return Handshake("accepted")
    except OSError as error:
        return _failed_handshake(error, first, done)


def peer_certificate(host: str, port: int, timeout: float = 3.0) -> Certificate | None:
    """The certificate a server presents, unverified: only to name its dates in an error line."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                UNVERIFIED.context().wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
        return from_der(der) if der else None
    except (OSError, ValueError):
        return None


def describe_certificate(path: str) -> str:
    """`/etc/app/client.pem (CN=app, valid from … to …)`: a certificate file as an error line names it."""
    found = from_pem_file(path)
    return f"{path} ({found.subject}, {found.validity()})" if found else path


def now() -> str:
    return stamp(datetime.now(UTC))


class TlsFault:
    """Names what failed in a TLS connection to one server, and what to fix, in one line."""

    def __init__(self, where: str, host: str, port: int, plain: str, tls: TlsSettings) -> None:
        self.where, self.host, self.port, self.plain, self.tls = where, host, port, plain, tls

    def of(self, error: BaseException, context: ssl.SSLContext | None) -> str | None:
        """The line for a connection that failed with `error`; None when TLS is not the cause (the server accepts
        the handshake: a network problem, worth retrying). An error that says no more than "closed" or "reset" is
        explained by `probe_handshake` with `context`, the connection's own."""
        named = self.named(error)
        if named is not None or context is None:
            return named
        probe = probe_handshake(self.host, self.port, context)
        if probe.outcome == "refused" and probe.error is not None:
            return self.named(probe.error)
        if probe.outcome == "plain":
            return self.not_tls(probe.error or error)
        return self.closed() if probe.outcome == "closed" else None

    def named(self, error: BaseException) -> str | None:
        """The line for an error that names its fault itself: a verification failure, an alert, not TLS."""
        if isinstance(error, ssl.SSLCertVerificationError):
            return self.verification(error)
        said = f"{getattr(error, 'reason', '') or ''} {error}".upper()
        if "ALERT_" in said:
            return self.alert(said, error)
        return self.not_tls(error) if any(s in said for s in NOT_TLS) else None

    def reason(self, error: BaseException) -> str:
        return str(getattr(error, "reason", None) or error)

    def verification(self, error: ssl.SSLCertVerificationError) -> str:
        said = error.verify_message or str(error)
        where = f"TLS: the certificate of {self.where}"
        if error.verify_code == 62 or "hostname" in said.lower() or "IP address mismatch" in said:
            return (f"{where} is not for {self.host!r} ({said}): connect by a name the certificate lists (see its "
                    "subjectAltName), or fix the broker's certificate")
        if error.verify_code in (9, 10):
            peer = peer_certificate(self.host, self.port)
            dates = f"{peer.subject}, {peer.validity()}" if peer else said
            if error.verify_code == 9:
                return (f"{where} is not valid yet ({dates}; this machine's clock says {now()}): fix this machine's "
                        "clock, or the broker's certificate if it was issued for a later date")
            return (f"{where} has expired ({dates}; this machine's clock says {now()}): renew the broker's "
                    "certificate, or fix this machine's clock if it is wrong")
        return (f"{where} is not signed by a CA this client trusts ({said}): set {CACERT.names()} to the CA file "
                "that signed it")

    def alert(self, said: str, error: BaseException) -> str:
        """The server's alert about the client's certificate (or the lack of one)."""
        name = next((word for word in re.findall(r"[A-Z0-9_]*ALERT_[A-Z_]+", said)), self.reason(error))
        given = self.tls.clientcert_file
        if "CERTIFICATE_REQUIRED" in said or ("HANDSHAKE_FAILURE" in said and not given):
            return (f"TLS: {self.where} requires a client certificate and none was given ({name}): set "
                    f"{CLIENTCERT.names()} and {CLIENTKEY.names()} to one signed by a CA the broker trusts")
        if given and "CERTIFICATE_EXPIRED" in said:
            return (f"TLS: {self.where} refused the client certificate {describe_certificate(given)}: it has "
                    f"expired or is not valid yet ({name}; this machine's clock says {now()}): renew it in "
                    f"{CLIENTCERT.names()}")
        if given and any(s in said for s in CLIENT_CERT_DISTRUSTED):
            return (f"TLS: {self.where} does not trust the client certificate ({name}) {describe_certificate(given)}: "
                    f"set {CLIENTCERT.names()} and {CLIENTKEY.names()} to one signed by a CA the broker trusts (its "
                    "ssl_options.cacertfile, management.ssl.cacertfile for HTTPS)")
        return (f"TLS: {self.where} refused the handshake ({name}): check {CACERT.names()}, "
                f"{CLIENTCERT.names()} and the port")

    def closed(self) -> str:
        """A server that started the handshake and closed without an alert: in practice, a refused certificate."""
        given = self.tls.clientcert_file
        cert = (f"the client certificate {describe_certificate(given)}: set {CLIENTCERT.names()} to one signed by a "
                "CA the broker trusts" if given else
                f"no client certificate: set {CLIENTCERT.names()} and {CLIENTKEY.names()} if it requires one")
        return f"TLS: {self.where} {HUNG_UP}, without saying why; it was given {cert}"

    def not_tls(self, error: BaseException) -> str:
        return (f"TLS: {self.where} does not speak TLS ({self.reason(error)}): use {self.plain} for this port, or the "
                "broker's TLS port")


def what_speaks(host: str, port: int, timeout: float) -> str | None:
    """"amqp" when the port answers an AMQP 0-9-1 header with a method frame (Connection.Start), "tls" when it
    answers a TLS handshake (not verified: only to name the mistake), None otherwise."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            raw.sendall(b"AMQP\x00\x00\x09\x01")
            if raw.recv(1) == b"\x01":
                return "amqp"
    except OSError:
        pass
    outcome = probe_handshake(host, port, UNVERIFIED.context(), timeout).outcome
    return "tls" if outcome in ("accepted", "refused", "closed") else None


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects come back as their 3xx answer (`ManagementClient._redirected`), never followed."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


@dataclass(frozen=True)
class Response:
    status: int
    data: Any
    """The decoded JSON body, None when empty, the text when not JSON."""
    headers: dict[str, str]


class ManagementClient:
    """One broker's management API as one user. `request` returns any HTTP answer; `get`, `put`, `delete`
    raise the matching ManagementError for a status from 400 up (`get` returns None for 404, `delete` False)."""

    def __init__(self, url: str, username: str, password: str, tls: TlsSettings | None = None,
                 timeout: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.username = username
        self.password = password
        self.tls = tls or TlsSettings()
        self.timeout = timeout
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UnreachableError(f"endpoint {url!r} is not an http(s) URL: give the management API's, e.g. "
                                   "http://127.0.0.1:15672 or https://broker:15671 (not an AMQP URL or port), in "
                                   f"{ENDPOINT.names()}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._context: ssl.SSLContext | None = None
        if self.scheme == "http" and self.tls.given():
            raise TlsError(f"{self.url} is plain HTTP, but TLS settings are given ({self.tls.given()}): the password "
                           f"would cross in clear; use https:// and the broker's TLS port (15671 by default) in "
                           f"{ENDPOINT.names()}")

    @classmethod
    def from_settings(cls, endpoint: str | None = None, config: Mapping[str, Any] | None = None,
                      dev: bool = False, env: Mapping[str, str] | None = None,
                      tls: Mapping[str, Any] | None = None) -> ManagementClient:
        """The client a tool uses: `endpoint` (its flag), else RABBITMQ_ENDPOINT, else the stack's
        rabbitmq:endpoint; the user and password from RABBITMQ_USERNAME / RABBITMQ_PASSWORD, else the stack's
        `rabbitmq:username` (the password is a secret the tools cannot decrypt); TLS as `TlsSettings.from_sources`.
        RabbitMQ's guest/guest only for the dev stack (`dev`): elsewhere a missing user or password is an error
        naming the variable."""
        env = os.environ if env is None else env
        config = config or {}
        url = ENDPOINT.value(config, env, endpoint)
        if not url:
            raise UnreachableError(f"no management endpoint: pass ENDPOINT=http://host:15672 (or https://host:15671) "
                                   f"or set {ENDPOINT.names()}")
        username = USERNAME.value(config, env) or ""
        password = env.get(PASSWORD.env, "")
        if dev:
            username, password = username or "guest", password or "guest"
        if not username:
            raise LoginRefusedError(f"no user for {url}: set {USERNAME.env} (or the stack's {USERNAME.config}); "
                                    "guest/guest is assumed only for the dev stack")
        if not password:
            raise LoginRefusedError(f"no password for user {username!r} at {url}: set {PASSWORD.env} (the stack's "
                                    f"{PASSWORD.config} is a secret the tools do not decrypt)")
        return cls(url, username, password, TlsSettings.from_sources(config, env, tls))

    # --- transport -----------------------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = self.tls.context()
        return self._context

    def request(self, method: str, path: str, body: Any = None) -> Response:
        """`method /api/<path>` (path segments already escaped), as the provider sends it; any HTTP status is
        returned. ManagementError (UnreachableError or TlsError) when no HTTP answer came."""
        url = f"{self.url}/api/{path}"
        request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        request.add_header("Connection", "close")
        if method != "GET":  # as rabbit-hole does
            request.add_header("Content-Type", "application/json")
        context = self.ssl_context() if self.scheme == "https" else None
        opener = urllib.request.build_opener(NoRedirects, urllib.request.HTTPSHandler(context=context))
        try:
            with opener.open(request, timeout=self.timeout) as answer:
                status, raw, headers = answer.status, answer.read(), dict(answer.headers)
        except urllib.error.HTTPError as error:
            status, raw, headers = error.code, error.read(), dict(error.headers)
        except (OSError, http.client.HTTPException) as error:
            raise self._failure(method, path, error) from None
        if 300 <= status < 400:
            raise self._redirected(method, path, status, str(headers.get("Location") or "nowhere"))
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw.decode(errors="replace")
        return Response(status, data, headers)

    def _redirected(self, method: str, path: str, status: int, location: str) -> ManagementError:
        """A redirect is never followed: the user and password would go with it, wherever it points (another host,
        or plain HTTP). The management API itself never redirects an /api request."""
        target = urllib.parse.urljoin(f"{self.url}/api/{path}", location)
        base = target.split("/api/", 1)[0]
        clear = " in clear" if urllib.parse.urlsplit(target).scheme != "https" else ""
        return UnreachableError(f"{method} {self.url}/api/{path} answered HTTP {status}, a redirect to {target}: not "
                                f"followed, it would send the password there{clear}; if the management API is "
                                f"there, set {ENDPOINT.names()} to {base}, else fix what answers at {self.url}")

    def _failure(self, method: str, path: str, error: BaseException) -> ManagementError:
        """The one line for a request that got no HTTP answer."""
        cause: Any = getattr(error, "reason", error) if isinstance(error, urllib.error.URLError) else error
        what = f"{method} /api/{path}"
        failed = self._tls_failure(cause) or self._not_http(cause, what)
        if failed is not None:
            return failed
        if isinstance(cause, ConnectionRefusedError):
            return UnreachableError(f"the management API at {self.url} refuses connections ({what}): the node behind "
                                    "it is down or its management plugin is off; on a cluster, use another node's "
                                    f"endpoint in {ENDPOINT.names()} and start this one")
        if isinstance(cause, TimeoutError):
            return UnreachableError(f"the management API at {self.url} did not answer {what} within "
                                    f"{self.timeout:.0f} s: the node runs but cannot serve it; on a cluster, a "
                                    "majority of the nodes is probably down (RabbitMQ 4.x then waits for a quorum "
                                    "that is not there): start the stopped nodes")
        if isinstance(cause, socket.gaierror):
            return UnreachableError(f"the management API at {self.url}: unknown host {self.host!r} ({cause}): fix "
                                    f"{ENDPOINT.names()}")
        return UnreachableError(f"the management API at {self.url} unreachable ({what}): {cause or type(cause)}")

    def _tls_failure(self, cause: BaseException) -> ManagementError | None:
        """An https request's failed TLS, in words (None: not that)."""
        if self.scheme != "https" or not isinstance(cause, (ssl.SSLError, ConnectionError, http.client.HTTPException)):
            return None
        fault = TlsFault(self.url, self.host, self.port, "http://", self.tls).of(cause, self.ssl_context())
        if fault is not None:
            return TlsError(fault)
        if isinstance(cause, ssl.SSLError):
            return TlsError(f"TLS: handshake with {self.url} failed ({cause.reason or cause}): check "
                            f"{CACERT.names()} and the port")
        return None

    def _not_http(self, cause: BaseException, what: str) -> ManagementError | None:
        """A port that answered `what` with something else than HTTP: AMQP's, a TLS one, another (None: not that)."""
        amqp = (f"{self.url} is an AMQP port, not the management API: give the management port in "
                f"{ENDPOINT.names()} (15672 by default, 15671 with TLS)")
        if isinstance(cause, http.client.BadStatusLine) and "AMQP" in str(cause):
            return UnreachableError(amqp)
        if self.scheme != "http" or not isinstance(cause, (http.client.RemoteDisconnected, http.client.BadStatusLine,
                                                           ConnectionResetError)):
            return None
        speaks = what_speaks(self.host, self.port, min(self.timeout, 3.0))
        if speaks == "amqp":
            return UnreachableError(amqp)
        if speaks == "tls":
            return TlsError(f"{self.url} speaks TLS: use https:// in {ENDPOINT.names()}, with {CACERT.names()} "
                            "naming the CA that signed the broker's certificate")
        return UnreachableError(f"{self.url} closed the connection without an HTTP answer to {what}: is it the "
                                f"management port? Check {ENDPOINT.names()}")

    def _raise_for(self, method: str, path: str, answer: Response) -> None:
        if answer.status < 400:
            return
        info = answer.data if isinstance(answer.data, dict) else {}
        said = str(info.get("reason") or info.get("error") or answer.data or "")[:300]
        where = f"{method} {self.url}/api/{path}"
        if answer.status == 401:
            raise LoginRefusedError(f"{where}: HTTP 401, the management API refused user {self.username!r}: check "
                                    f"{USERNAME.env} and {PASSWORD.env}", 401)
        if answer.status == 404:
            raise NotFoundError(f"{where}: HTTP 404, not found{f': {said}' if said else ''}", 404)
        raise RequestRefusedError(f"{where}: HTTP {answer.status}: {said}", answer.status)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded answer; ManagementError for anything from 400 up."""
        answer = self.request(method, path, body)
        self._raise_for(method, path, answer)
        return answer.data

    def _from_management_api(self, method: str, path: str, answer: Response) -> None:
        """The management API answers JSON, a 404 too (`{"error": "Object Not Found", …}`): any other body comes from
        something else on that port (Prometheus, a web server, a proxy's error page), and reading its 404 as "not
        there" would report an empty broker."""
        if isinstance(answer.data, dict) or (answer.status < 400 and not isinstance(answer.data, str)):
            return
        raise UnreachableError(f"{self.url} is not RabbitMQ's management API: it answered {method} /api/{path} with "
                               f"HTTP {answer.status} and no JSON; give the management port in {ENDPOINT.names()} "
                               "(15672 by default, 15671 with TLS)")

    def get(self, path: str) -> Any:
        """JSON of `GET /api/<path>`, None for 404 (the object is not there)."""
        answer = self.request("GET", path)
        if answer.status in (200, 404):
            self._from_management_api("GET", path, answer)
        if answer.status == 404:
            return None
        self._raise_for("GET", path, answer)
        return answer.data

    def put(self, path: str, body: Any) -> Any:
        return self.call("PUT", path, body)

    def delete(self, path: str) -> bool:
        """True when deleted, False when it was not there (404, success for the provider too)."""
        answer = self.request("DELETE", path)
        if answer.status == 404:
            self._from_management_api("DELETE", path, answer)
            return False
        self._raise_for("DELETE", path, answer)
        return True
