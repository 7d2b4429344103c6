"""Connecting to the broker: parameters for the contract's vhost, and waiting for an unreachable broker
with one log line saying why (not a traceback per attempt)."""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Callable
from typing import TypeAlias

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingConnection
from pika.connection import Parameters

LOG = logging.getLogger("rabbitmq_retry_client")

ConnectionParams: TypeAlias = Parameters | str
"""pika parameters, or an AMQP URL."""

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


class BrokerUnreachableError(ConnectionError):
    """The broker did not accept a connection within the time allowed; the message says why."""


VHOST_STARTING = re.compile(r"\bis down\b|not (yet )?(running|started)", re.IGNORECASE)
"""What RabbitMQ says (530 NOT_ALLOWED) of a vhost that exists but is not running yet, e.g. while it restarts."""


class BrokerRefusedError(ConnectionError):
    """The broker answered and refused the connection for good (403 login refused, 530 vhost not found or not
    allowed): retrying cannot help, so it is raised at once; the message says what to check."""


def refusal(error: BaseException, params: Parameters) -> str | None:
    """What to check when `error` is a permanent refusal (wrong credentials, a vhost that is missing or not
    granted), in one line; None for anything worth retrying (connection refused, timeouts, a broker starting)."""
    user = getattr(params.credentials, "username", "?")
    at = f"{params.host}:{params.port}"
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return (f"login refused by {at} for user {user!r} (403 ACCESS_REFUSED): check the user and password in "
                "--url or $RABBITMQ_URL")
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        said = re.search(r"\((\d+)\) '([^']*)'", str(error.args[0]) if error.args else "")
        if said and VHOST_STARTING.search(said[2]):
            return None  # a vhost still starting (a broker restart) answers 530 too: worth waiting for
        return (f"vhost {params.virtual_host!r} refused by {at} for user {user!r}"
                + (f" ({said[1]} {said[2]})" if said else "")
                + ": check that the vhost exists and that the user has permissions on it")
    return None


def parameters(params: ConnectionParams, vhost: str | None = None) -> Parameters:
    """pika parameters from a URL or parameters, with `vhost` replacing theirs; the caller's are not changed."""
    result = pika.URLParameters(params) if isinstance(params, str) else copy.copy(params)
    if vhost is not None:
        result.virtual_host = vhost
    return result


def where(params: Parameters) -> str:
    user = getattr(params.credentials, "username", "?")
    return f"{params.host}:{params.port} vhost {params.virtual_host!r} as {user}"


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


def connect(params: Parameters, timeout: float, interval: float = 1.0,
            sleep: Callable[[float], None] = time.sleep) -> BlockingConnection:
    """Open a connection, retrying for up to `timeout` seconds; one warning when the broker is unreachable
    (and another only if the reason changes), one info line once it answers again. Raises BrokerUnreachableError,
    or BrokerRefusedError at once when the broker refuses the login or the vhost (see `refusal`)."""
    quiet_pika()
    deadline = time.monotonic() + timeout
    last_reason: str | None = None
    started = time.monotonic()
    while True:
        try:
            connection = BlockingConnection(params)
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
        return connection
