"""Connecting to the broker: parameters for the contract's vhost, and waiting for an unreachable broker
with one log line saying why (not a traceback per attempt).

A cluster is given as several hosts (a list of URLs or parameters): every connection, the first and each
reconnect, tries them in the order given and takes the first that accepts, so a consumer whose node dies
reconnects to another node."""

from __future__ import annotations

import copy
import logging
import os
import re
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeAlias

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingConnection
from pika.connection import Parameters

from .certificates import from_pem_file
from .management import HUNG_UP, ManagementError, TlsFault, TlsSettings, what_speaks
from .writes import send_joined

LOG = logging.getLogger("rabbitmq_retry_client")

ConnectionParams: TypeAlias = Parameters | str | Sequence[Parameters | str]
"""pika parameters, or an AMQP URL, or several of them (a cluster's nodes, tried in order)."""

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
WRONG_PORT_ATTEMPTS = 3
"""Handshakes closed in a row before a port is said not to speak AMQP (a stopping node may close one)."""


class BrokerUnreachableError(ConnectionError):
    """The broker did not accept a connection within the time allowed; the message says why."""


VHOST_STARTING = re.compile(r"\bis down\b|not (yet )?(running|started)", re.IGNORECASE)
"""What RabbitMQ says (530 NOT_ALLOWED) of a vhost that exists but is not running yet, e.g. while it restarts."""


STREAM_LOST = ("ALERT_", "SSL", "EOF", "reset", "Stream connection lost", "closed")
"""What pika says of a connection the server closed under it: over TLS, maybe a refused certificate."""


class TlsOptions(pika.SSLOptions):
    """pika's SSL options with the settings they were made from, so that a failure can name the client
    certificate."""

    def __init__(self, settings: TlsSettings, server_hostname: str) -> None:
        super().__init__(settings.context(), server_hostname)
        self.settings = settings


class CertificateCredentials(pika.credentials.ExternalCredentials):
    """SASL EXTERNAL: the client certificate is the login. `subject` names it in a refusal."""

    def __init__(self, clientcert_file: str) -> None:
        super().__init__()
        found = from_pem_file(clientcert_file)
        self.subject = f"{found.subject} ({clientcert_file})" if found else clientcert_file


def login(credentials: object) -> str:
    """Who logs in, for an error line: the user, or the subject of the client certificate."""
    if isinstance(credentials, CertificateCredentials):
        return f"the client certificate {credentials.subject}"
    if isinstance(credentials, pika.credentials.ExternalCredentials):
        return "the client certificate"
    return f"user {getattr(credentials, 'username', '?')!r}"


class BrokerRefusedError(ConnectionError):
    """The broker answered and refused the connection for good (403 login refused, 530 vhost not found or not
    allowed): retrying cannot help, so it is raised at once; the message says what to check."""


def refusal(error: BaseException, params: Parameters | Sequence[Parameters]) -> str | None:
    """What to check when `error` is a permanent refusal (wrong credentials, a vhost that is missing or not
    granted), in one line; None for anything worth retrying (connection refused, timeouts, a broker starting).
    A cluster's nodes share their users and vhosts, so one node's refusal is every node's."""
    first = params if isinstance(params, Parameters) else params[0]
    user = login(first.credentials)
    at = where(params).partition(" vhost ")[0]
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        if isinstance(first.credentials, pika.credentials.ExternalCredentials):
            return (f"login by {user} (SASL EXTERNAL) refused by {at}: enable the broker's "
                    "rabbitmq_auth_mechanism_ssl and create the user the certificate names (its CN, with "
                    "ssl_cert_login_from = common_name), or put a user and password in --url")
        return (f"login refused by {at} for {user} (403 ACCESS_REFUSED): check the user and password in "
                "--url or $RABBITMQ_URL")
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        said = re.search(r"\((\d+)\) '([^']*)'", str(error.args[0]) if error.args else "")
        if said and VHOST_STARTING.search(said[2]):
            return None  # a vhost still starting (a broker restart) answers 530 too: worth waiting for
        return (f"vhost {first.virtual_host!r} refused by {at} for {user}"
                + (f" ({said[1]} {said[2]})" if said else "")
                + ": check that the vhost exists and that the user has permissions on it")
    return None


def parameters(params: Parameters | str, vhost: str | None = None, tls: TlsSettings | None = None) -> Parameters:
    """pika parameters from a URL or parameters (one host), with `vhost` replacing theirs; the caller's are not
    changed. An `amqps://` URL (or parameters with ssl_options) speaks TLS with `tls` (a CA file, a client
    certificate) when given; for a URL without `tls`, with the settings of the environment (RABBITMQ_CACERT, …: the
    names the error lines give). A client certificate without a password in the URL logs in by SASL EXTERNAL (the
    broker's rabbitmq_auth_mechanism_ssl). ValueError for a URL that is not AMQP (an http(s) management URL), or a
    plain amqp:// one where TLS settings are given: the password would cross in clear."""
    if isinstance(params, str):
        result = _url_parameters(params)
        tls = TlsSettings.from_sources(None, os.environ) if tls is None else tls
        external = "@" not in params.partition("://")[2].partition("/")[0]
    else:
        result = copy.copy(params)
        external = False
    if vhost is not None:
        result.virtual_host = vhost
    if tls is not None and tls.given() and result.ssl_options is None:
        raise ValueError(f"amqp://{result.host}:{result.port} is plain AMQP, but TLS settings are given "
                         f"({tls.given()}): the password would cross in clear; use amqps:// and the broker's TLS "
                         "port (5671 by default)")
    if tls is not None and result.ssl_options is not None:
        speak_tls(result, tls, external)
    return result


def speak_tls(params: Parameters, tls: TlsSettings, external: bool) -> None:
    """Give `params` the TLS options of `tls`, and (`external`: no password given) its client certificate's login."""
    try:
        params.ssl_options = TlsOptions(tls, params.host)
    except ManagementError as error:
        raise ValueError(str(error)) from None
    if external and tls.clientcert_file:
        params.credentials = CertificateCredentials(tls.clientcert_file)


def _url_parameters(url: str) -> Parameters:
    """pika parameters of an AMQP URL; ValueError for another scheme."""
    scheme = url.partition("://")[0].lower()
    if scheme not in ("amqp", "amqps"):
        raise ValueError(f"{_redacted(url)} is not an AMQP URL"
                         + (": that looks like the management API's; give amqp://host:5672 or amqps://host:5671"
                            if scheme in ("http", "https") else ": give amqp://host:5672 or amqps://host:5671"))
    return pika.URLParameters(url)


def _redacted(url: str) -> str:
    """The URL without its password, for an error line."""
    return re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", url)


def hosts(params: ConnectionParams, vhost: str | None = None, tls: TlsSettings | None = None) -> list[Parameters]:
    """Each host's pika parameters, in the order given (`parameters` of each), with `vhost` replacing theirs.
    Raises ValueError for an empty list: there would be nothing to connect to."""
    given = [params] if isinstance(params, (str, Parameters)) else list(params)
    if not given:
        raise ValueError("no broker given: pass an AMQP URL, pika parameters, or a non-empty list of them")
    return [parameters(one, vhost, tls) for one in given]


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, then each cause pika wraps in it down to the innermost (the last host's, for several)."""
    yield error
    for inner in (*getattr(error, "exceptions", ())[-1:], getattr(error, "exception", None),
                  *(error.args[:1] if isinstance(error, pika.exceptions.AMQPError) else ())):
        if isinstance(inner, BaseException):
            yield from _causes(inner)
            return


def amqp_failure(error: BaseException, params: Parameters) -> str | None:
    """One line for a connection that failed because of TLS or a wrong port, naming what to fix; None otherwise.
    Over TLS, a certificate fault is named from the server's alert (`TlsFault`: when pika reports only a closed
    stream, a probe handshake hears the alert). Without TLS: a TLS port answers a plain AMQP header by closing the
    connection (4.3.6) or resetting it (3.10.8), the management (HTTP) port by closing it; a plain AMQP port
    answers a TLS handshake with its protocol header, which TLS reads as a wrong version."""
    if isinstance(error, (pika.exceptions.ProbableAuthenticationError, pika.exceptions.ProbableAccessDeniedError,
                          pika.exceptions.ConnectionClosedByBroker)):
        return None  # the broker answered AMQP: past TLS
    *_, inner = _causes(error)
    host, port = params.host, params.port
    said = f"{inner} {reason(error)}"
    if params.ssl_options is not None:
        if not isinstance(inner, ssl.SSLError) and not any(s in said for s in STREAM_LOST):
            return None  # the broker answered AMQP: not TLS's doing
        settings = getattr(params.ssl_options, "settings", TlsSettings())
        return TlsFault(f"{host}:{port}", host, port, "amqp://", settings).of(inner, params.ssl_options.context)
    if "Transport indicated EOF" in said or "Connection reset by peer" in said:
        if what_speaks(host, port, 3.0) == "tls":
            return (f"{host}:{port} speaks TLS, not plain AMQP: use amqps:// for this port (the password is not "
                    "sent in clear)")
        return (f"{host}:{port} closed the connection during the AMQP handshake: it is not a plain AMQP port; a TLS "
                "port (use amqps://, 5671 by default) or the management port (AMQP is 5672 by default)?")
    return None


def where(params: Parameters | Sequence[Parameters]) -> str:
    """"host:port vhost 'v' as user", with every host of a list ("a:5672, b:5672 vhost …")."""
    every = [params] if isinstance(params, Parameters) else list(params)
    first = every[0]
    addresses = ", ".join(f"{p.host}:{p.port}" for p in every)
    user = getattr(first.credentials, "username", None) or login(first.credentials).removeprefix("the ")
    return f"{addresses} vhost {first.virtual_host!r} as {user}"


def reason(error: BaseException) -> str:
    """One short line for a failed connection: the innermost cause pika reports, without its traceback."""
    for cause in _causes(error):
        if isinstance(cause, pika.exceptions.ProbableAuthenticationError):
            return "authentication refused (wrong user or password)"
        if isinstance(cause, pika.exceptions.ProbableAccessDeniedError):
            detail = str(cause.args[0]).replace("ConnectionClosedByBroker: ", "") if cause.args else ""
            return f"access to the vhost refused {detail}".strip()
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(cause) or type(cause).__name__


def quiet_pika() -> None:
    """pika logs every failed connection attempt at ERROR with a traceback; unless the application chose a
    level for the `pika` logger, keep only its critical messages (ours say what happened, once)."""
    logger = logging.getLogger("pika")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.CRITICAL)


def connect(params: Parameters | Sequence[Parameters], timeout: float, interval: float = 1.0,
            sleep: Callable[[float], None] = time.sleep) -> BlockingConnection:
    """Open a connection, retrying for up to `timeout` seconds; one warning when the broker is unreachable
    (and another only if the reason changes), one info line once it answers again. Raises BrokerUnreachableError,
    or BrokerRefusedError at once when the broker refuses the login or the vhost (see `refusal`). Several hosts
    are tried in order within each attempt (pika's BlockingConnection takes a list); the reason given is the
    last host's."""
    quiet_pika()
    hosts_given = [params] if isinstance(params, Parameters) else list(params)
    attempts = _Attempts(hosts_given, timeout, interval)
    while True:
        try:
            connection = BlockingConnection(params if isinstance(params, Parameters) else hosts_given)
        except ssl.SSLError as error:  # pika raises a failed handshake as it is: a certificate or a scheme
            last = hosts_given[-1]
            raise BrokerRefusedError(amqp_failure(error, last) or f"TLS: {last.host}:{last.port}: {error}") from None
        except pika.exceptions.AMQPConnectionError as error:
            attempts.failed(error)
            sleep(interval)
            continue
        send_joined(connection)  # one write per I/O pass, not one per frame (writes.py)
        if attempts.last_reason is not None:
            LOG.info("broker reachable again at %s after %.1f s", where(params), time.monotonic() - attempts.started)
        if len(hosts_given) > 1:
            LOG.debug("connected to %s", where(connection_params_of(connection, hosts_given)))
        return connection


class _Attempts:
    """`connect`'s failed attempts so far: when to give up, and what was said."""

    def __init__(self, hosts_given: list[Parameters], timeout: float, interval: float) -> None:
        self.hosts, self.timeout, self.interval = hosts_given, timeout, interval
        self.started = time.monotonic()
        self.last_reason: str | None = None
        self.wrong_port = 0
        """Handshakes of the last host closed in a row (`amqp_failure`)."""

    def failed(self, error: pika.exceptions.AMQPConnectionError) -> None:
        """Raise BrokerRefusedError when no retry can connect (a certificate or a scheme, a refused login or vhost,
        a port that is not AMQP's), BrokerUnreachableError once the next attempt would end past `timeout`; warn
        once per reason otherwise."""
        wrong = amqp_failure(error, self.hosts[-1])
        self.wrong_port = self.wrong_port + 1 if wrong is not None else 0
        if (refused := self._refused(error, wrong)) is not None:
            raise BrokerRefusedError(refused) from None
        why = reason(error)
        if time.monotonic() + self.interval > self.started + self.timeout:
            raise BrokerUnreachableError(f"broker unreachable at {where(self.hosts)}: {wrong or why} "
                                         f"(gave up after {time.monotonic() - self.started:.0f} s)") from None
        if wrong is None and why != self.last_reason:
            LOG.warning("broker unreachable at %s: %s; retrying every %.0f s for up to %.0f s",
                        where(self.hosts), why, self.interval, self.timeout)
            self.last_reason = why

    def _refused(self, error: pika.exceptions.AMQPConnectionError, wrong: str | None) -> str | None:
        """Why no retry can connect, or None. `wrong`: the last host's failed handshake (`amqp_failure`)."""
        last = self.hosts[-1]
        if wrong is not None and HUNG_UP not in wrong and (last.ssl_options is not None or " speaks TLS" in wrong):
            return wrong  # a certificate or a scheme
        if (permanent := refusal(error, self.hosts)) is not None:
            return permanent
        # A port that closes every handshake is not AMQP (nor a TLS port that accepts this client); a node
        # shutting down may close one or two: said after a few in a row, without a warning before.
        return wrong if wrong is not None and self.wrong_port >= WRONG_PORT_ATTEMPTS else None


def connection_params_of(connection: BlockingConnection, tried: Sequence[Parameters]) -> Parameters:
    """Which of the hosts `tried` the connection reached (pika keeps the parameters it used)."""
    used = getattr(getattr(connection, "_impl", None), "params", None)
    return used if isinstance(used, Parameters) else tried[0]
