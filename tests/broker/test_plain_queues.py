"""Plain queues with `message_ttl`, `max_length_bytes` and `single_active_consumer`, on both brokers (issue 22,
item 9).

The registered inputs are applied the provider's way: the broker takes the queue argument and our policy with
`max-length`, `max-length-bytes`, `message-ttl` and `overflow: reject-publish` together (no user policy needed,
so none can clash), messages expire after the TTL, a publish past the byte limit is refused, and only one of
two consumers gets deliveries. A TTL change is applied as a policy update: the queue keeps its messages.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.support.admin import wait_for
from tests.support.amqp import channel, message_counts
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import publish_ids

if TYPE_CHECKING:
    from tests.support.deploy import Deployer

TTL_MS = 300


def _config(queue_type: str, ttl: str) -> dict[str, Any]:
    return {"exchanges": [{"name": "in", "type": "fanout"}],
            "queues": [{"name": "audit", "type": queue_type, "bindings": [{"exchange": "in"}], "max_length": 100,
                        "max_length_bytes": 1000, "message_ttl": ttl, "single_active_consumer": True}]}


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_plain_queue_takes_a_ttl_a_byte_limit_and_a_single_active_consumer(
        broker: Broker, deploy: Deployer, queue_type: str) -> None:
    deployment = deploy(_config(queue_type, f"{TTL_MS}ms"))
    vhost = deployment.vhost
    _, queue, _ = call(broker, "GET", f"queues/{esc(vhost)}/audit")
    assert queue["arguments"]["x-single-active-consumer"] is True
    assert wait_for(lambda: call(broker, "GET", f"queues/{esc(vhost)}/audit")[1].get("effective_policy_definition"),
                    10, "the policy applied") == {"max-length": 100, "max-length-bytes": 1000,
                                                  "message-ttl": TTL_MS, "overflow": "reject-publish",
                                                  **({"delivery-limit": 20} if queue_type == "quorum" else {})}

    publish_ids(broker, vhost, "in", ["t1", "t2"])
    published = time.monotonic()
    wait_for(lambda: message_counts(broker, vhost, ["audit"]) == {"audit": 0}, 30, "the messages to expire")
    assert time.monotonic() - published >= TTL_MS / 1000 - 0.05, "not before their TTL"

    # 1,000 bytes: 600-byte bodies are refused (reject-publish) once the limit is reached, none dropped from the
    # head. A classic queue refuses the one that would exceed it; a quorum queue the one after it is exceeded.
    accepted = 0
    with channel(broker, vhost) as opened:
        properties = pika.BasicProperties(delivery_mode=2)
        with pytest.raises(pika.exceptions.NackError):
            for _ in range(3):
                opened.basic_publish("in", "", b"x" * 600, properties, mandatory=True)
                accepted += 1
    assert accepted == (1 if queue_type == "classic" else 2)
    assert message_counts(broker, vhost, ["audit"]) == {"audit": accepted}, "nothing dropped"

    # Single active consumer: of two consumers, one gets every delivery.
    updated = deploy.update(deployment, _config(queue_type, "1h"))
    assert {(s.op, s.type.rsplit(":", 1)[-1]) for s in updated.steps if s.op != "same"} == {("update", "Policy")}
    assert message_counts(broker, vhost, ["audit"]) == {"audit": accepted}, "a policy update: the queue kept them"
    call(broker, "DELETE", f"queues/{esc(vhost)}/audit/contents")  # room under the byte limit
    publish_ids(broker, vhost, "in", [f"s{i}" for i in range(3)])
    with pika.BlockingConnection(pika.URLParameters(
            f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.amqp_port}/{esc(vhost)}")) as conn:
        first, second = conn.channel(), conn.channel()
        got: dict[str, int] = {"first": 0, "second": 0}
        for name, opened in (("first", first), ("second", second)):
            opened.basic_consume("audit", lambda ch, method, props, body, name=name: got.__setitem__(
                name, got[name] + 1), auto_ack=False)
        deadline = time.monotonic() + 10
        while sum(got.values()) < 3 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    assert sorted(got.values()) == [0, 3], got
