"""Publishing with confirms: `publish` returns only once the broker owns the message."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from pika.adapters.blocking_connection import BlockingConnection
from pika.spec import BasicProperties

from .connection import ConnectionParams, connect, hosts
from .management import TlsSettings


def message_properties(message_id: str | None = None, headers: Mapping[str, Any] | None = None,
                       content_type: str | None = None) -> BasicProperties:
    """A persistent message's properties as `Publisher.publish` sends them: the message id (a new one if None),
    the headers, the content type and the current time."""
    return BasicProperties(delivery_mode=2, message_id=message_id or uuid.uuid4().hex, headers=dict(headers or {}),
                           content_type=content_type, timestamp=int(time.time()))


class Publisher:
    """One connection with a confirm-mode channel: `publish` returns only once the broker owns the message,
    and raises pika's `UnroutableError` / `NackError` when it does not. Several hosts are tried in order.
    Connecting waits up to `connect_timeout` seconds for an unreachable broker (BrokerUnreachableError) and fails
    at once with BrokerRefusedError when the broker refuses the login or the vhost."""

    def __init__(self, connection_params: ConnectionParams, connect_timeout: float = 0.0,
                 tls: TlsSettings | None = None) -> None:
        self._connection: BlockingConnection = connect(hosts(connection_params, None, tls), connect_timeout)
        self._channel = self._connection.channel()
        self._channel.confirm_delivery()

    def publish(self, exchange: str, routing_key: str, body: bytes | str, message_id: str | None = None,
                headers: Mapping[str, Any] | None = None, content_type: str | None = None) -> None:
        self._channel.basic_publish(exchange, routing_key, body.encode() if isinstance(body, str) else body,
                                    message_properties(message_id, headers, content_type), mandatory=True)

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def publish(connection_params: ConnectionParams, exchange: str, routing_key: str, body: bytes | str,
            message_id: str, headers: Mapping[str, Any] | None = None) -> None:
    """Publish one persistent message, mandatory, and wait for the broker's confirm."""
    with Publisher(connection_params) as publisher:
        publisher.publish(exchange, routing_key, body, message_id, headers)
