"""What a quorum queue's `delivery-limit` does to a message in our retry topology, on 3.10 and 4.x.

Findings pinned here (RabbitMQ 3.10.8 and 4.3.6; source: rabbit_fifo.erl, rabbit_fifo_dlx_worker.erl,
mc.erl / rabbit_dead_letter.erl):

- A message over the delivery limit is dead-lettered with reason `delivery_limit` through the input
  queue's only dead-letter route, `Q.retry`/`wait.1`, into the tier-1 wait queue.
- RabbitMQ refuses to dead-letter a message into a queue that is already in its `x-death` history
  unless a `rejected` death lies in between (cycle detection). With `at-least-once` dead-lettering the
  message is then neither dropped nor delivered: the queue's dead-letter worker keeps it (`messages_dlx`)
  and re-detects the cycle every 180 s, forever. That is a jam, not a loss.
- Each jammed message holds one of the 32 slots (`dead_letter_worker_consumer_prefetch`) of its queue's
  dead-letter worker: 32 jammed messages stop every later dead-letter of that queue.
- 4.x counts only failed deliveries: `basic.reject` (requeue or not) and a consumer's connection going
  down; `basic.nack(requeue=True)` is not counted. The count travels with the message through the wait
  queue, so plain retries count toward the limit too. 3.10 counts every return and starts from zero
  again after each dead-letter.
- On 3.10 a plain-retried message survives the limit only because 3.10 reorders `x-death` (the cycle
  check then sees the `rejected` death); 4.x keeps `x-death` in order and finds the cycle.

Management statistics lag by up to ~10 s, so jams are read by polling `GET /api/queues/...`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import NackError

from tests.support.admin import STATS_S, queue_info, version, wait_for_queue
from tests.support.amqp import Delivery, next_message, parameters
from tests.support.amqp import channel as _channel
from tests.support.mirror import Broker, call, esc, get

if TYPE_CHECKING:
    from tests.support.deploy import Deployer, Deployment

TTL_MS = 200
QUIET_S = 3.0
"""How long a message must stay away to count as gone: 15 wait-tier TTLs."""
ARRIVAL_S = 20.0
"""Generous bound for an expected message to arrive (an eventual condition, not a figure)."""
DLX_WORKER_PREFETCH = 32
"""RabbitMQ's default `dead_letter_worker_consumer_prefetch` (3.10 and 4.x)."""


def _deploy(deploy: Deployer, delivery_limit: int = 1, **extra: Any) -> Deployment:
    """Our topology, with q's policy then lowered to `delivery_limit` behind the program's back: the
    config refuses a limit at or below max_retries, and these tests show why."""
    deployment = deploy({"queues": [{"name": "q", "type": "quorum", "retry": {"delays": [f"{TTL_MS}ms"],
                                                                                "max_retries": 3}, **extra}]})
    path = f"policies/{esc(deployment.vhost)}/q"
    policy = get(deploy.broker, path)
    policy["definition"]["delivery-limit"] = delivery_limit
    call(deploy.broker, "PUT", path, {key: policy[key] for key in ("pattern", "apply-to", "priority",
                                                                      "definition")})
    # The queue reports the new limit several seconds later; wait, so no test reads a stale one.
    wait_for_queue(deploy.broker, deployment.vhost, "q",
                   lambda stats: (stats.get("effective_policy_definition") or {}).get("delivery-limit")
                   == delivery_limit and stats.get("delivery_limit", delivery_limit) == delivery_limit,
                   f"q to report delivery-limit {delivery_limit}")
    return deployment


def _get(channel: BlockingChannel, queue: str = "q", timeout: float = QUIET_S) -> Delivery | None:
    """basic.get until a message arrives or `timeout` passes."""
    return next_message(channel, queue, timeout)


def _must_get(channel: BlockingChannel, what: str, queue: str = "q") -> Delivery:
    delivery = next_message(channel, queue, ARRIVAL_S)
    assert delivery is not None, f"{what}: nothing in {queue} within {ARRIVAL_S}s"
    return delivery


def _delivery_count(delivery: Delivery) -> int | None:
    count = (delivery[1].headers or {}).get("x-delivery-count")
    return None if count is None else int(count)


def _deaths(delivery: Delivery) -> list[tuple[str, str, int]]:
    """x-death as (queue, reason, count), in the broker's order."""
    return [(d["queue"], d["reason"], int(d["count"])) for d in (delivery[1].headers or {}).get("x-death", [])]


def _settles(broker: Broker, vhost: str, expected: dict[str, dict[str, Any]],
             channel: BlockingChannel | None = None) -> dict[str, dict[str, Any]]:
    """Poll the management API until every queue reports the expected fields; return what it reported.

    With `channel`: also wait at least QUIET_S (15 wait-tier TTLs) and then check that q delivers
    nothing, so a message that merely passes through a queue cannot satisfy the expectation.
    """
    start = time.monotonic()
    while True:
        seen = {queue: queue_info(broker, vhost, queue) for queue in expected}
        matches = all(seen[q].get(k) == v for q, fields in expected.items() for k, v in fields.items())
        elapsed = time.monotonic() - start
        if matches and (channel is None or elapsed >= QUIET_S):
            break
        if elapsed > STATS_S:
            got = {q: {k: seen[q].get(k) for k in fields} for q, fields in expected.items()}
            raise AssertionError(f"after {STATS_S}s the management API reports {got}, expected {expected}")
        time.sleep(0.25)
    if channel is not None:
        assert _get(channel, timeout=0) is None, "the message came back to q"
    return seen


def _jammed(queue: str, count: int = 1) -> dict[str, Any]:
    """A queue whose only messages are `count` dead-letters its at-least-once worker cannot forward."""
    return {"messages": count, "messages_ready": 0, "messages_unacknowledged": 0, "messages_dlx": count}


EMPTY = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0, "messages_dlx": 0}


def _publish(channel: BlockingChannel, body: bytes, exchange: str = "", routing_key: str = "q") -> None:
    channel.basic_publish(exchange, routing_key, body, pika.BasicProperties(delivery_mode=2), mandatory=True)


def _retry_once(channel: BlockingChannel, body: bytes) -> Delivery:
    """Publish, take it, plain-reject it (the retry contract) and take it again after the wait tier."""
    _publish(channel, body)
    first = _must_get(channel, "first delivery")
    channel.basic_reject(first[0].delivery_tag, requeue=False)
    back = _must_get(channel, "back from the wait tier")
    assert back[2] == body
    return back


def _requeue_until_gone(channel: BlockingChannel, requeue: str = "reject") -> int:
    """Requeue (reject or nack, requeue=True) whatever q delivers until it delivers nothing for QUIET_S."""
    requeues = 0
    while (delivery := _get(channel)) is not None:
        if requeue == "reject":
            channel.basic_reject(delivery[0].delivery_tag, requeue=True)
        else:
            channel.basic_nack(delivery[0].delivery_tag, requeue=True)
        requeues += 1
    return requeues


def _stepped_copies(channel: BlockingChannel, deployment: Deployment, count: int, prefix: str) -> None:
    """`count` messages retried the stepped way: a copy to the retry exchange (tier 1), original acked."""
    contract = deployment.contracts["q"]
    for n in range(count):
        _publish(channel, f"{prefix}{n}".encode())
    for _ in range(count):
        method, _, body = _must_get(channel, "original")
        channel.basic_publish(contract["retry_exchange"], contract["tiers"][0]["routing_key"], body,
                              pika.BasicProperties(delivery_mode=2, headers={contract["attempt_header"]: 1}),
                              mandatory=True)
        channel.basic_ack(method.delivery_tag)


def _retry_comes_back(channel: BlockingChannel, body: bytes) -> bool:
    """Does a healthy message's plain retry still travel q → wait tier → q? (acks it if it does)"""
    _publish(channel, body)
    delivery = _must_get(channel, "healthy message")
    assert delivery[2] == body
    channel.basic_reject(delivery[0].delivery_tag, requeue=False)
    back = _get(channel)
    if back is None:
        return False
    assert back[2] == body
    channel.basic_ack(back[0].delivery_tag)
    return True


# (a) --------------------------------------------------------------------------------------------

def test_a_fresh_message_over_the_delivery_limit_jams_in_the_wait_queue(broker: Broker, deploy: Deployer) -> None:
    """Both brokers: dead-lettered (delivery_limit) into q.wait.1, whose way back to q is a cycle."""
    deployment = _deploy(deploy, delivery_limit=1)
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    with _channel(broker, vhost) as channel:
        _publish(channel, b"fresh")
        first = _must_get(channel, "first delivery")
        assert _delivery_count(first) in (None, 0)      # 4.x omits a zero count
        channel.basic_reject(first[0].delivery_tag, requeue=True)
        second = _must_get(channel, "after one reject(requeue=True)")
        assert (second[0].redelivered, _delivery_count(second), _deaths(second)) == (True, 1, [])
        channel.basic_reject(second[0].delivery_tag, requeue=True)     # count 2 > delivery-limit 1
        seen = _settles(broker, vhost, {"q": EMPTY, wait: _jammed(wait)}, channel)
    if version(broker) >= (4,):
        # No 4.x delayed retry is involved: it is off unless configured.
        assert (seen["q"]["delivery_limit"], seen["q"]["delayed_retry"], seen["q"]["messages_delayed"]) == \
            (1, "disabled", 0)


# (b) --------------------------------------------------------------------------------------------

def test_a_retried_message_over_the_delivery_limit_by_reject_requeue_jams_in_the_input_queue_on_4x_but_cycles_on_3_10(
        broker: Broker, deploy: Deployer) -> None:
    deployment = _deploy(deploy, delivery_limit=1)
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    with _channel(broker, vhost) as channel:
        back = _retry_once(channel, b"retried")
        assert _deaths(back) == [(wait, "expired", 1), ("q", "rejected", 1)]
        if version(broker) >= (4,):
            # The plain retry's reject counted, and the count came back with the message.
            assert (back[0].redelivered, _delivery_count(back)) == (True, 1)
            channel.basic_reject(back[0].delivery_tag, requeue=True)   # count 2 > 1 on the first requeue
            _settles(broker, vhost, {"q": _jammed("q"), wait: EMPTY}, channel)
        else:
            assert (back[0].redelivered, _delivery_count(back)) == (False, 0)
            channel.basic_reject(back[0].delivery_tag, requeue=True)
            again = _must_get(channel, "after one reject(requeue=True)")
            assert _delivery_count(again) == 1
            channel.basic_reject(again[0].delivery_tag, requeue=True)  # count 2 > 1
            cycled = _must_get(channel, "back through the wait tier")
            # 3.10 rewrote x-death out of recency order, so its cycle check saw the `rejected` death.
            assert _deaths(cycled) == [(wait, "expired", 2), ("q", "rejected", 1), ("q", "delivery_limit", 1)]
            assert (cycled[0].redelivered, _delivery_count(cycled)) == (False, 0)
            channel.basic_ack(cycled[0].delivery_tag)


def test_nack_requeue_after_a_retry_never_reaches_the_delivery_limit_on_4x_but_cycles_on_3_10(
        broker: Broker, deploy: Deployer) -> None:
    deployment = _deploy(deploy, delivery_limit=1)
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    with _channel(broker, vhost) as channel:
        delivery = _retry_once(channel, b"nacked")
        if version(broker) >= (4,):
            # basic.nack(requeue=True) is a plain return: not counted, so no limit ever applies.
            for _ in range(10):
                channel.basic_nack(delivery[0].delivery_tag, requeue=True)
                delivery = _must_get(channel, "after nack(requeue=True)")
                assert (delivery[0].redelivered, _delivery_count(delivery)) == (True, 1)
                assert _deaths(delivery) == [(wait, "expired", 1), ("q", "rejected", 1)]
        else:
            channel.basic_nack(delivery[0].delivery_tag, requeue=True)
            delivery = _must_get(channel, "after one nack(requeue=True)")
            assert _delivery_count(delivery) == 1
            channel.basic_nack(delivery[0].delivery_tag, requeue=True)  # counted like a reject: 2 > 1
            delivery = _must_get(channel, "back through the wait tier")
            assert _deaths(delivery) == [(wait, "expired", 2), ("q", "rejected", 1), ("q", "delivery_limit", 1)]
        channel.basic_ack(delivery[0].delivery_tag)


def test_plain_retries_count_toward_the_delivery_limit_on_4x_so_a_consumer_crash_then_jams_the_message(
        broker: Broker, deploy: Deployer) -> None:
    """The jam needs no requeue=True: a connection that goes away holding the message is a failed delivery."""
    deployment = _deploy(deploy, delivery_limit=1)
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    is_4x = version(broker) >= (4,)
    with pika.BlockingConnection(parameters(broker, vhost)) as connection:
        channel = connection.channel()
        back = _retry_once(channel, b"crash")
        channel.basic_reject(back[0].delivery_tag, requeue=False)      # a second plain retry
        back = _must_get(channel, "back from the second retry")
        # Plain retries past the limit still work (a reject without requeue is never checked) ...
        assert _deaths(back) == [(wait, "expired", 2), ("q", "rejected", 2)]
        assert _delivery_count(back) == (2 if is_4x else 0)
        # ... but this consumer now goes away without settling it (the connection closes).
    with _channel(broker, vhost) as channel:
        if is_4x:
            _settles(broker, vhost, {"q": _jammed("q"), wait: EMPTY}, channel)
        else:
            after = _must_get(channel, "3.10 returns the message after a crash")
            assert (after[0].redelivered, _delivery_count(after)) == (True, 1)
            channel.basic_ack(after[0].delivery_tag)


def test_a_stepped_retry_copy_over_the_delivery_limit_jams_in_the_input_queue(
        broker: Broker, deploy: Deployer) -> None:
    """Both brokers: the republished copy's only death is the wait tier's, so q → q.wait.1 is a cycle."""
    deployment = _deploy(deploy, delivery_limit=1)
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    with _channel(broker, vhost) as channel:
        _stepped_copies(channel, deployment, 1, "stepped")
        copy = _must_get(channel, "stepped copy")
        assert _deaths(copy) == [(wait, "expired", 1)]
        assert _delivery_count(copy) in (None, 0)
        channel.basic_reject(copy[0].delivery_tag, requeue=True)
        again = _must_get(channel, "after one reject(requeue=True)")
        assert _delivery_count(again) == 1
        channel.basic_reject(again[0].delivery_tag, requeue=True)      # count 2 > 1
        _settles(broker, vhost, {"q": _jammed("q"), wait: EMPTY}, channel)


# (c) consequences ----------------------------------------------------------------------------------

def test_32_jammed_messages_stop_every_retry_through_the_wait_queue(broker: Broker, deploy: Deployer) -> None:
    """Both brokers: healthy retries go q → q.wait.1 and stay there once its dead-letter worker is full."""
    deployment = _deploy(deploy, delivery_limit=1)
    vhost = deployment.vhost
    with _channel(broker, vhost) as channel:
        for n in range(DLX_WORKER_PREFETCH - 1):
            _publish(channel, f"poison{n}".encode())
        assert _requeue_until_gone(channel) == 2 * (DLX_WORKER_PREFETCH - 1)
        assert _retry_comes_back(channel, b"healthy-1"), "31 jammed messages already block retries"

        _publish(channel, b"poison-last")
        assert _requeue_until_gone(channel) == 2
        assert not _retry_comes_back(channel, b"healthy-2"), "a retry passed 32 jammed messages"


def test_32_jammed_messages_stop_every_retry_of_the_input_queue(broker: Broker, deploy: Deployer) -> None:
    """Both brokers: a healthy message's reject(requeue=False) is never dead-lettered to the wait tier."""
    deployment = _deploy(deploy, delivery_limit=1)
    vhost, wait = deployment.vhost, deployment.contracts["q"]["tiers"][0]["queue"]
    with _channel(broker, vhost) as channel:
        _stepped_copies(channel, deployment, DLX_WORKER_PREFETCH - 1, "poison")
        assert _requeue_until_gone(channel) == 2 * (DLX_WORKER_PREFETCH - 1)
        assert _retry_comes_back(channel, b"healthy-1"), "31 jammed messages already block retries"

        _stepped_copies(channel, deployment, 1, "poison-last")
        assert _requeue_until_gone(channel) == 2
        assert not _retry_comes_back(channel, b"healthy-2"), "a retry passed 32 jammed messages"
        # The healthy message waits in q's dead-letter worker queue behind the 32 jammed ones.
        _settles(broker, vhost, {"q": _jammed("q", DLX_WORKER_PREFETCH + 1), wait: EMPTY})


def test_jammed_messages_count_toward_max_length_so_publishers_get_nacks(broker: Broker, deploy: Deployer) -> None:
    deployment = _deploy(deploy, delivery_limit=1, max_length=2)
    with _channel(broker, deployment.vhost) as channel:
        _stepped_copies(channel, deployment, 2, "poison")
        assert _requeue_until_gone(channel) == 4        # both jammed in q; its trailing second settles them
        _publish(channel, b"fits")                      # 0 ready + 2 jammed: not over max-length 2 yet
        try:
            _publish(channel, b"refused")               # 1 ready + 2 jammed > 2: reject-publish
        except NackError:
            pass
        else:
            raise AssertionError("the publish was confirmed although jammed messages fill max-length")
