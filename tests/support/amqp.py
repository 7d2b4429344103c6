"""AMQP helpers the broker tests share (pika, blocking): connections, counting, polling and draining."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.support.mirror import Broker

Delivery = tuple[Any, pika.BasicProperties, bytes]
"""(method, properties, body) of one basic.get."""

POLL_S = 0.02


def parameters(broker: Broker, vhost: str, username: str | None = None,
               password: str | None = None) -> pika.ConnectionParameters:
    """Connection parameters for `vhost`, as the broker's admin user unless a user is given; AMQPS with the broker's
    TLS settings when it has them."""
    credentials = pika.PlainCredentials(username or broker.username,
                                        broker.password if password is None else password)
    return pika.ConnectionParameters(broker.host, broker.amqp_port, vhost, credentials, ssl_options=None if broker.tls
                                     is None else pika.SSLOptions(broker.tls.context(), broker.host))


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


def message_counts(broker: Broker, vhost: str, queues: Sequence[str]) -> dict[str, int]:
    """Ready messages of each queue, on a connection of its own."""
    with channel(broker, vhost, confirms=False) as opened:
        return {queue: message_count(opened, queue) for queue in queues}


def next_message(opened: BlockingChannel, queue: str, timeout: float,
                 give_up: Callable[[], bool] | None = None) -> Delivery | None:
    """basic.get (unacked) until a message arrives; None after `timeout` s or as soon as `give_up()`."""
    deadline = time.monotonic() + timeout
    while True:
        method, properties, body = opened.basic_get(queue)
        if method is not None:
            return method, properties, body
        if time.monotonic() > deadline or (give_up is not None and give_up()):
            return None
        time.sleep(POLL_S)


def returned_by_crashed_readers(broker: Broker, vhost: str, queue: str, times: int, timeout: float = 2.5) -> bool:
    """Take the queue's one message `times` times without acking it (each time the reader's connection
    closes, as a crash would), then say whether the message is still there."""
    for _ in range(times):
        with channel(broker, vhost, confirms=False) as reader:
            if next_message(reader, queue, timeout=timeout) is None:
                return False
    with channel(broker, vhost, confirms=False) as reader:
        return next_message(reader, queue, timeout=timeout) is not None


def drain(broker: Broker, vhost: str, queue: str) -> list[tuple[pika.BasicProperties, bytes]]:
    """Every message in `queue`, removed (as the broker's admin user)."""
    messages: list[tuple[pika.BasicProperties, bytes]] = []
    with channel(broker, vhost, confirms=False) as opened:
        while True:
            method, properties, body = opened.basic_get(queue, auto_ack=True)
            if method is None:
                return messages
            messages.append((properties, body))
