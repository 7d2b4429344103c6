"""How many messages a queue holds on a live broker, read-only, for deciding whether deleting it loses any.

One reader serves the apply-time guard (`components/pulumi/guard.py`), `make review ENDPOINT=…` and, later, the
migration status: each needs the same answer and the same refusal when the broker cannot give one.

- **ready** comes from an AMQP passive `queue.declare`: the broker's own count at that instant, not the
  management API's sample (refreshed every `collect_statistics_interval`, 5 s by default). A passive declare
  never creates anything: a missing queue answers 404 NOT_FOUND "no queue …", which is read as "no queue"; any
  other 404 (a classic queue whose node is down) is "cannot tell", never "empty".
- **unacknowledged** (delivered to a consumer, not yet settled: lost with the queue) and a quorum queue's
  **pending dead letters** (`messages_dlx`: dead-lettered at-least-once, not yet confirmed by the target)
  exist only in the management API's queue record, which is sampled: a message taken in the last few
  seconds may not show yet.
- **delayed**: a 4.3 quorum queue's messages waiting for their native delayed retry (`messages_delayed`).
  The passive declare does not count them (measured on 4.3.6: 0 while 3 rejected messages waited 5 s), so
  they too come from the sampled record only: a message rejected in the last few seconds shows nowhere.

The AMQP port is not in the provider's config: it is read from `GET /api/overview`'s `listeners` (the TLS
listener `amqp/ssl` for an https endpoint, else `amqp`), on the management endpoint's host, unless given.
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions

from .connection import amqp_failure, quiet_pika, reason, speak_tls
from .management import ManagementClient, ManagementError, TlsSettings, path_escape

TIMEOUT_S = 10.0
"""Per HTTP request and AMQP connection: a broker that has not answered by then is unreachable here."""
AMQP_PORT_KEY = "amqp_port"
"""The stack setting (`rabbitmq-retry:amqp_port`) that gives the AMQP port when the overview's is not the one."""


class DepthError(Exception):
    """The broker could not say how many messages the queue holds; the message says why, in one line."""


@dataclass(frozen=True)
class QueueDepth:
    vhost: str
    queue: str
    ready: int
    """Exact: the passive declare's message count."""
    unacknowledged: int
    """Management API (sampled)."""
    dead_letters: int
    """A quorum queue's pending at-least-once dead letters, `messages_dlx` (management API, sampled); 0 otherwise."""
    consumers: int
    """Exact: the passive declare's consumer count."""
    queue_type: str
    delayed: int = 0
    """A quorum queue's messages waiting for a native delayed retry, `messages_delayed` (management API, sampled;
    the passive declare does not count them); 0 otherwise."""

    @property
    def messages(self) -> int:
        """Everything deleting the queue would lose."""
        return self.ready + self.unacknowledged + self.dead_letters + self.delayed

    def describe(self) -> str:
        """`1,234 ready, 3 unacknowledged (2 consumers), 0 pending dead letters`: what the queue holds, by kind."""
        parts = [f"{self.ready:,} ready", f"{self.unacknowledged:,} unacknowledged"]
        if self.consumers:
            parts[-1] += f" ({self.consumers:,} consumer{'s' * (self.consumers != 1)})"
        if self.queue_type == "quorum":
            parts.append(f"{self.dead_letters:,} pending dead letter{'s' * (self.dead_letters != 1)}")
        if self.delayed:
            parts.append(f"{self.delayed:,} waiting for a delayed retry")
        return ", ".join(parts)


@dataclass(frozen=True)
class BrokerAccess:
    """Where and as whom to read: the management endpoint and credentials the provider uses."""

    management_url: str
    username: str
    password: str
    amqp_port: int | None = None
    """The AMQP port on the endpoint's host, when the overview's listener is not the one to use (a port mapping,
    a load balancer); None: read it from `/api/overview`."""
    tls_settings: TlsSettings = field(default_factory=TlsSettings)
    """For https and AMQPS (the provider's `rabbitmq:cacertFile`, `insecure`, `clientcertFile`, `clientkeyFile`)."""

    def __post_init__(self) -> None:
        if not self.management_url:
            raise DepthError("no management endpoint: set rabbitmq:endpoint or RABBITMQ_ENDPOINT")

    @classmethod
    def of(cls, client: ManagementClient, amqp_port: int | None = None) -> BrokerAccess:
        """The access of a management client (its endpoint, user and TLS settings)."""
        return cls(client.url, client.username, client.password, amqp_port, client.tls)

    def client(self, timeout: float = TIMEOUT_S) -> ManagementClient:
        """The management API client for this access; DepthError for an endpoint that is not an http(s) URL."""
        try:
            return ManagementClient(self.management_url, self.username, self.password, self.tls_settings, timeout)
        except ManagementError as error:
            raise DepthError(str(error)) from None

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.management_url).hostname or "localhost"

    @property
    def tls(self) -> bool:
        return urllib.parse.urlsplit(self.management_url).scheme == "https"

    def amqp_parameters(self, host: str, port: int, tls: bool, vhost: str, timeout: float) -> pika.ConnectionParameters:
        """One attempt to `host:port` in `vhost` as this access's user (by SASL EXTERNAL, the client certificate,
        when there is a certificate and no password), over TLS with its settings when `tls`."""
        if self.tls and not tls:
            raise DepthError(f"AMQP at {host}:{port} is plain, but the management endpoint {self.management_url} is "
                             f"https: the password would cross in clear; give the AMQPS port in "
                             f"rabbitmq-retry:{AMQP_PORT_KEY}")
        params = pika.ConnectionParameters(
            host=host, port=port, virtual_host=vhost, credentials=pika.PlainCredentials(self.username, self.password),
            connection_attempts=1, socket_timeout=timeout, blocked_connection_timeout=timeout, stack_timeout=timeout)
        if tls:
            try:
                speak_tls(params, self.tls_settings, external=not self.password)
            except ValueError as error:  # a TLS file missing or unreadable, named by its setting
                raise DepthError(str(error)) from None
        return params


def amqp_listener(listeners: Sequence[Mapping[str, Any]], tls: bool) -> tuple[int, bool] | None:
    """(port, TLS) of the AMQP listener to use from `/api/overview`'s `listeners`: for an https endpoint the TLS one
    (`amqp/ssl`) only (the password never goes to a plain port where TLS is configured), otherwise the plain one
    first; None when the broker lists none of them."""
    by_protocol = {str(item.get("protocol")): int(item["port"]) for item in reversed(listeners)
                   if isinstance(item, Mapping) and isinstance(item.get("port"), int)}
    for protocol in (("amqp/ssl",) if tls else ("amqp", "amqp/ssl")):
        if protocol in by_protocol:
            return by_protocol[protocol], protocol == "amqp/ssl"
    return None


class DepthReader:
    """Reads queue depths through one broker's management API and AMQP; GET requests and passive declares only."""

    def __init__(self, access: BrokerAccess, timeout: float = TIMEOUT_S) -> None:
        self.access = access
        self.timeout = timeout
        self._amqp: tuple[int, bool] | None = None
        self._client = access.client(timeout)

    def _get(self, path: str) -> Any:
        """JSON of `GET /api/<path>`, None for 404; DepthError (the client's one line) for anything else."""
        try:
            return self._client.get(path)
        except ManagementError as error:
            raise DepthError(str(error)) from None

    def amqp_address(self) -> tuple[str, int, bool]:
        """(host, port, TLS) for AMQP: the endpoint's host, the given port or the overview's listener."""
        if self.access.amqp_port is not None:
            return self.access.host, self.access.amqp_port, self.access.tls
        if self._amqp is None:
            overview = self._get("overview") or {}
            listeners = overview.get("listeners") or []
            found = amqp_listener(listeners, self.access.tls)
            if found is None and self.access.tls and amqp_listener(listeners, False) is not None:
                raise DepthError(f"the broker at {self.access.management_url} lists no AMQPS listener (amqp/ssl) in "
                                 "/api/overview, only plain AMQP: not used, the password would cross in clear; enable "
                                 "its TLS listener (listeners.ssl.default) or give the AMQPS port in "
                                 f"rabbitmq-retry:{AMQP_PORT_KEY}")
            if found is None:
                raise DepthError(f"the broker at {self.access.management_url} lists no AMQP listener in /api/overview; "
                                 f"set rabbitmq-retry:{AMQP_PORT_KEY}")
            self._amqp = found
        return self.access.host, *self._amqp

    def _passive_declare(self, vhost: str, queue: str) -> tuple[int, int] | None:
        """(ready, consumers) from a passive declare in `vhost`; None when the queue (or the vhost) is missing."""
        host, port, tls = self.amqp_address()
        params = self.access.amqp_parameters(host, port, tls, vhost, self.timeout)
        quiet_pika()
        try:
            connection = pika.BlockingConnection(params)
        except pika.exceptions.ProbableAccessDeniedError as error:
            if f"vhost {vhost} not found" in str(error):
                return None  # the vhost is gone, and the queue with it
            raise DepthError(f"AMQP at {host}:{port} vhost {vhost!r}: {reason(error)}") from None
        except (pika.exceptions.AMQPError, ssl.SSLError) as error:
            raise DepthError(amqp_failure(error, params) or (
                f"AMQP at {host}:{port} unreachable: {reason(error)} (set rabbitmq-retry:amqp_port if the broker's "
                "AMQP port is another one from here)")) from None
        try:
            channel = connection.channel()
            try:
                frame = channel.queue_declare(queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker as error:
                if error.reply_code == 404 and "no queue" in str(error.reply_text):
                    return None
                # Also 404, for a queue that exists but cannot answer: a classic queue whose node is down ("home
                # node … is down or inaccessible"), or whose process stopped or crashed. Not "no queue": it holds
                # what it held, back with its node, and deleting it now would lose that.
                raise DepthError(f"passive declare of {queue!r} in vhost {vhost!r}: {error.reply_code} "
                                 f"{error.reply_text}") from None
            return int(frame.method.message_count), int(frame.method.consumer_count)
        except pika.exceptions.AMQPError as error:
            raise DepthError(f"passive declare of {queue!r} in vhost {vhost!r}: {reason(error)}") from None
        finally:
            if connection.is_open:
                connection.close()

    def read(self, vhost: str, queue: str) -> QueueDepth | None:
        """What `queue` in `vhost` holds now; None when it does not exist. DepthError when it cannot be read."""
        counted = self._passive_declare(vhost, queue)
        if counted is None:
            return None
        ready, consumers = counted
        record = self._get(f"queues/{path_escape(vhost)}/{path_escape(queue)}")
        if record is None:  # deleted between the two reads
            return None
        return QueueDepth(vhost, queue, ready, int(record.get("messages_unacknowledged") or 0),
                          int(record.get("messages_dlx") or 0), consumers, str(record.get("type") or "classic"),
                          int(record.get("messages_delayed") or 0))
