"""Connecting to the broker: parameters for the contract's vhost, and waiting for an unreachable broker
with one log line saying why (not a traceback per attempt).

A cluster is given as several hosts (a list of URLs or parameters): every connection, the first and each
reconnect, tries them in the order given and takes the first that accepts, so a consumer whose node dies
reconnects to another node."""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import TypeAlias

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingConnection
from pika.connection import Parameters

LOG = logging.getLogger("rabbitmq_retry_client")

ConnectionParams: TypeAlias = Parameters | str | Sequence[Parameters | str]
"""pika parameters, or an AMQP URL, or several of them (a cluster's nodes, tried in order)."""

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


class BrokerUnreachableError(ConnectionError):
    """The broker did not accept a connection within the time allowed; the message says why."""


VHOST_STARTING = re.compile(r"\bis down\b|not (yet )?(running|started)", re.IGNORECASE)
"""What RabbitMQ says (530 NOT_ALLOWED) of a vhost that exists but is not running yet, e.g. while it restarts."""


class BrokerRefusedError(ConnectionError):
    """The broker answered and refused the connection for good (403 login refused, 530 vhost not found or not
    allowed): retrying cannot help, so it is raised at once; the message says what to check."""


def refusal(error: BaseException, params: Parameters | Sequence[Parameters]) -> str | None:
    """What to check when `error` is a permanent refusal (wrong credentials, a vhost that is missing or not
    granted), in one line; None for anything worth retrying (connection refused, timeouts, a broker starting).
    A cluster's nodes share their users and vhosts, so one node's refusal is every node's."""
    first = params if isinstance(params, Parameters) else params[0]
    user = getattr(first.credentials, "username", "?")
    at = where(params).partition(" vhost ")[0]
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return (f"login refused by {at} for user {user!r} (403 ACCESS_REFUSED): check the user and password in "
                "--url or $RABBITMQ_URL")
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        said = re.search(r"\((\d+)\) '([^']*)'", str(error.args[0]) if error.args else "")
        if said and VHOST_STARTING.search(said[2]):
            return None  # a vhost still starting (a broker restart) answers 530 too: worth waiting for
        return (f"vhost {first.virtual_host!r} refused by {at} for user {user!r}"
                + (f" ({said[1]} {said[2]})" if said else "")
                + ": check that the vhost exists and that the user has permissions on it")
    return None


def parameters(params: Parameters | str, vhost: str | None = None) -> Parameters:
    """pika parameters from a URL or parameters (one host), with `vhost` replacing theirs; the caller's are not
    changed."""
    result = pika.URLParameters(params) if isinstance(params, str) else copy.copy(params)
    if vhost is not None:
        result.virtual_host = vhost
    return result


def hosts(params: ConnectionParams, vhost: str | None = None) -> list[Parameters]:
    """Each host's pika parameters, in the order given (`parameters` of each), with `vhost` replacing theirs.
    Raises ValueError for an empty list: there would be nothing to connect to."""
    given = [params] if isinstance(params, (str, Parameters)) else list(params)
    if not given:
        raise ValueError("no broker given: pass an AMQP URL, pika parameters, or a non-empty list of them")
    return [parameters(one, vhost) for one in given]


def where(params: Parameters | Sequence[Parameters]) -> str:
    """"host:port vhost 'v' as user", with every host of a list ("a:5672, b:5672 vhost …")."""
    every = [params] if isinstance(params, Parameters) else list(params)
    first = every[0]
    user = getattr(first.credentials, "username", "?")
    addresses = ", ".join(f"{p.host}:{p.port}" for p in every)
    return f"{addresses} vhost {first.virtual_host!r} as {user}"


def reason(error: BaseException) -> str:
    """One short line for a failed connection: the innermost cause pika reports, without its traceback."""
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return "authentication refused (wrong user or password)"
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        detail = str(error.args[0]).replace("ConnectionClosedByBroker: ", "") if error.args else ""
        return f"access to the vhost refused {detail}".strip()
    for inner in (*getattr(error, "exceptions", ())[-1:], getattr(error, "exception", None),
                  *(error.args[:1] if isinstance(error, pika.exceptions.AMQPError) else ())):
        if isinstance(inner, BaseException):
            return reason(inner)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


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
    deadline = time.monotonic() + timeout
    last_reason: str | None = None
    started = time.monotonic()
    while True:
        try:
            connection = BlockingConnection(params if isinstance(params, Parameters) else list(params))
        except pika.exceptions.AMQPConnectionError as error:
            if (permanent := refusal(error, params)) is not None:
                raise BrokerRefusedError(permanent) from None
            why = reason(error)
            if time.monotonic() + interval > deadline:
                raise BrokerUnreachableError(f"broker unreachable at {where(params)}: {why} "
                                        f"(gave up after {time.monotonic() - started:.0f} s)") from None
            if why != last_reason:
                LOG.warning("broker unreachable at %s: %s; retrying every %.0f s for up to %.0f s",
                            where(params), why, interval, timeout)
                last_reason = why
            sleep(interval)
            continue
        if last_reason is not None:
            LOG.info("broker reachable again at %s after %.1f s", where(params), time.monotonic() - started)
        if not isinstance(params, Parameters) and len(params) > 1:
            LOG.info("connected to %s", where(connection_params_of(connection, params)))
        return connection


def connection_params_of(connection: BlockingConnection, tried: Sequence[Parameters]) -> Parameters:
    """Which of the hosts `tried` the connection reached (pika keeps the parameters it used)."""
    used = getattr(getattr(connection, "_impl", None), "params", None)
    return used if isinstance(used, Parameters) else tried[0]
