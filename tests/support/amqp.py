"""AMQP helpers the broker tests share (pika, blocking)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.support.mirror import Broker


def parameters(broker: Broker, vhost: str) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(broker.host, broker.amqp_port, vhost,
                                     pika.PlainCredentials(broker.username, broker.password))


@contextmanager
def channel(broker: Broker, vhost: str, confirms: bool = True) -> Iterator[BlockingChannel]:
    """A channel on its own connection, closed afterwards; with publisher confirms by default."""
    with pika.BlockingConnection(parameters(broker, vhost)) as connection:
        opened = connection.channel()
        if confirms:
            opened.confirm_delivery()
        yield opened


def message_count(opened: BlockingChannel, queue: str) -> int:
    """Ready messages, from a passive declare."""
    return int(opened.queue_declare(queue, passive=True).method.message_count)
