"""On a real connection, plain and TLS, what one I/O pass queued leaves in a few socket writes instead of one per
frame (rabbitmq_retry_client/writes.py), and every message arrives whole and in order, a body larger than a
joined chunk among them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rabbitmq_retry_client.confirms import Confirms
from rabbitmq_retry_client.connection import connect, hosts
from rabbitmq_retry_client.writes import MAX_JOINED_BYTES
from tests.support.deploy import Deployer, configured_brokers, configured_tls_brokers, throwaway_vhost, unreachable
from tests.support.environment import missing
from tests.support.mirror import Broker

BROKERS = configured_brokers() + configured_tls_brokers()
COPIES = 300


@pytest.fixture(params=BROKERS, ids=[b.name for b in BROKERS])
def any_broker(request: pytest.FixtureRequest) -> Broker:
    candidate: Broker = request.param
    if (problem := unreachable(candidate)) is not None:
        missing(problem, because="CI=true: run scripts/brokers.sh ensure")
    return candidate


def counting_sends(transport: Any) -> list[int]:
    """The size of each socket write the transport makes from now on."""
    sizes: list[int] = []
    send: Callable[[Any, bytes], int] = transport._sigint_safe_send

    def counted(sock: Any, data: bytes) -> int:
        sent = send(sock, data)
        sizes.append(sent)
        return sent

    transport._sigint_safe_send = counted
    return sizes


def test_a_pass_of_queued_publishes_leaves_in_a_few_writes_and_arrives_whole_in_order(any_broker: Broker) -> None:
    with throwaway_vhost(any_broker, "writes") as vhost:
        Deployer(any_broker, vhost)({"queues": [{"name": "copies", "type": "classic"}]})
        connection = connect(hosts(any_broker.amqp_url, vhost, any_broker.tls), 10)
        try:
            confirms = Confirms(connection.channel())
            bodies = [b"%05d " % n + b"x" * (n % 700) for n in range(COPIES)]
            bodies[COPIES // 2] = b"big " + b"y" * (MAX_JOINED_BYTES + 10)
            answers: list[BaseException | None] = []
            sizes = counting_sends(connection._impl._transport)
            for body in bodies:
                confirms.publish("", "copies", body, None, answers.append)
            assert len(connection._impl._transport._tx_buffers) >= 3 * COPIES, "queued, none sent yet"
            while len(answers) < COPIES:
                confirms.wait(connection, 10)
                for copy, error in confirms.answers():
                    copy.answer(error)
            assert answers == [None] * COPIES
            assert sum(sizes) >= sum(map(len, bodies))
            assert len(sizes) <= 12, f"{len(sizes)} writes for {3 * COPIES} frames"
            channel = connection.channel()
            got = []
            while (message := channel.basic_get("copies", auto_ack=True))[0] is not None:
                got.append(message[2])
            assert got == bodies
        finally:
            connection.close()
