"""What a dynamic shovel does on real brokers (3.10.8 and 4.3.6): the facts migrations stand on
(docs/broker-facts.md §12).

Every shovel here is declared the way pulumi-rabbitmq declares a `rabbitmq.Shovel` (recorded under mocks, applied
through tests/support/mirror.py), between queues of a throw-away vhost `mvi-<random>`, with `ack-mode: on-confirm`
and `src-delete-after: never`, as a migration declares them. A test that expects a shovel NOT to move a message
waits `REFUSED_S` for it and then checks that the message is still in its source: a refused shovel loses nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pika
import pulumi
import pulumi_rabbitmq as rabbitmq
import pytest

from rabbitmq_retry_client.headers import ATTEMPTS, ERROR_REASON
from tests.support.admin import STATS_S, version, wait_for, wait_for_queue
from tests.support.amqp import channel, message_count, message_counts
from tests.support.mirror import Broker, apply, call, esc, get, read_back
from tools.lib.mockrun import Registered, record

REFUSED_S = 4.0
"""How long a test waits for a move that the shovel's permissions should prevent (a successful move takes well
under a second here): long enough for a shovel that could move to have moved."""
DEFAULT = r"^amq\.default$"


@pytest.fixture
def vhost(broker: Broker) -> Iterator[str]:
    """A vhost of this module's own, `mvi-<random>`, with every permission for the test user; deleted afterwards
    with what it holds (its shovels too)."""
    name = f"mvi-{uuid.uuid4().hex[:10]}"
    call(broker, "PUT", f"vhosts/{esc(name)}", {})
    call(broker, "PUT", f"permissions/{esc(name)}/{esc(broker.username)}", {"configure": ".*", "write": ".*",
                                                                           "read": ".*"})
    try:
        yield name
    finally:
        call(broker, "DELETE", f"vhosts/{esc(name)}")


@pytest.fixture
def shovel_user(broker: Broker) -> Iterator[tuple[str, str]]:
    """(name, password) of a user without tags or permissions, deleted afterwards."""
    name, password = f"mvi-shovel-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    call(broker, "PUT", f"users/{esc(name)}", {"password": password, "tags": ""})
    try:
        yield name, password
    finally:
        call(broker, "DELETE", f"users/{esc(name)}")


def declare(broker: Broker, vhost: str, queue_type: str, *queues: str) -> None:
    with channel(broker, vhost, confirms=False) as opened:
        for queue in queues:
            opened.queue_declare(queue, durable=True, arguments={"x-queue-type": queue_type})


def publish(broker: Broker, vhost: str, queue: str, count: int = 1,
            properties: pika.BasicProperties | None = None) -> None:
    with channel(broker, vhost) as opened:
        for i in range(count):
            opened.basic_publish("", queue, f"m{i}".encode(), properties or pika.BasicProperties(delivery_mode=2),
                                 mandatory=True)


def credentials_uri(broker: Broker, vhost: str, user: tuple[str, str]) -> str:
    """What a migration's shovel connects with: its own user, through the broker's AMQP port."""
    return f"amqp://{user[0]}:{user[1]}@localhost:{broker.amqp_port}/{esc(vhost)}"


def direct_uri(vhost: str) -> str:
    """A direct connection inside the node: no host, no credentials."""
    return f"amqp:///{esc(vhost)}"


def shovel_record(vhost: str, name: str, source: str, destination: str, uri: str) -> Registered:
    """The `rabbitmq.Shovel` a migration registers, as the engine would hand it to the provider."""
    def program() -> None:
        rabbitmq.Shovel(name, name=name, vhost=vhost, info=rabbitmq.ShovelInfoArgs(
            source_uri=pulumi.Output.secret(uri), destination_uri=pulumi.Output.secret(uri), source_queue=source,
            destination_queue=destination, ack_mode="on-confirm", source_delete_after="never"))
    [shovel] = [r for r in record(program, reveal_secrets=True) if r.custom]
    return shovel


def shovel(broker: Broker, vhost: str, source: str, destination: str, uri: str, name: str = "move") -> Registered:
    """Declare the shovel the provider's way (tests/support/mirror.py)."""
    declared = shovel_record(vhost, name, source, destination, uri)
    apply(broker, [declared])
    return declared


def status(broker: Broker, vhost: str, name: str = "move") -> dict[str, Any]:
    """The shovel's entry in `GET /api/shovels/<vhost>` ({} while it is not listed)."""
    return next((s for s in get(broker, f"shovels/{esc(vhost)}") or [] if s.get("name") == name), {})


def moves(broker: Broker, vhost: str, source: str, destination: str, count: int, timeout: float) -> bool:
    """Whether `count` messages reach `destination` (and leave `source`) within `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        depths = message_counts(broker, vhost, [source, destination])
        if depths == {source: 0, destination: count}:
            return True
        time.sleep(0.2)
    return False


def permissions(broker: Broker, vhost: str, user: str, configure: str, write: str, read: str) -> None:
    call(broker, "PUT", f"permissions/{esc(vhost)}/{esc(user)}", {"configure": configure, "write": write,
                                                                  "read": read})


def exactly(*names: str) -> str:
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


# ---------------------------------------------------------------- which URI, whose permissions


def test_a_direct_uri_shovel_checks_nobody_s_permissions(broker: Broker, vhost: str, shovel_user: tuple[str, str]):
    """`amqp:///<vhost>`: declared by a policymaker with configure, write and read all `^$` on the vhost, the
    shovel still moves the message: a direct shovel runs with no user's permissions, so it cannot be made
    least-privilege. Migrations use a URI with the shovel user's credentials instead."""
    user, password = shovel_user
    call(broker, "PUT", f"users/{esc(user)}", {"password": password, "tags": "policymaker"})
    permissions(broker, vhost, user, "^$", "^$", "^$")
    declare(broker, vhost, "classic", "old", "new")
    publish(broker, vhost, "old")
    as_user = Broker(broker.name, broker.host, broker.amqp_port, broker.management_port, user, password)
    shovel(as_user, vhost, "old", "new", direct_uri(vhost))
    assert moves(broker, vhost, "old", "new", 1, STATS_S)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_least_privilege_moves_everything_with_read_on_the_source_write_on_the_default_exchange_and_configure_on_the_destination(  # noqa: E501
        broker: Broker, vhost: str, shovel_user: tuple[str, str], queue_type: str):
    """configure `^new$`, write `^amq\\.default$`, read `^old$` (no write on the destination queue, no configure on
    the source) is enough on both versions; the shovel stays after the source is empty (`src-delete-after: never`)
    and reads back from the broker exactly as declared (a refresh plans nothing)."""
    declare(broker, vhost, queue_type, "old", "new")
    publish(broker, vhost, "old", 3)
    permissions(broker, vhost, shovel_user[0], exactly("new"), DEFAULT, exactly("old"))
    declared = shovel(broker, vhost, "old", "new", credentials_uri(broker, vhost, shovel_user))
    assert moves(broker, vhost, "old", "new", 3, STATS_S)
    assert status(broker, vhost)["state"] == "running"
    publish(broker, vhost, "old", 2)
    assert moves(broker, vhost, "old", "new", 5, STATS_S)
    value = get(broker, f"parameters/shovel/{esc(vhost)}/move")["value"]
    assert (value["ack-mode"], value["src-delete-after"]) == ("on-confirm", "never")
    assert read_back(broker, [declared]) == []


REMOVED = {
    # what is taken away from the least-privilege set → (configure, write, read), and whether the shovel still moves
    "read on the source": ((exactly("new"), DEFAULT, "^$"), {"3.10": False, "4.3": False}),
    "write on amq.default, kept on the destination queue": ((exactly("new"), exactly("new"), exactly("old")),
                                                           {"3.10": False, "4.3": False}),
    "configure on the destination": (("^$", DEFAULT, exactly("old")), {"3.10": True, "4.3": False}),
}


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
@pytest.mark.parametrize("removed", sorted(REMOVED))
def test_each_least_privilege_permission_is_needed_and_a_refused_shovel_loses_nothing(
        broker: Broker, vhost: str, shovel_user: tuple[str, str], queue_type: str, removed: str):
    """Read on the source and write on `amq.default` are needed on both versions; configure on the destination only
    on 4.3 (3.10's shovel moves into an existing queue without it). Refused, the shovel moves nothing and loses
    nothing: deleted, the message is ready in the source again. On 3.10 a shovel without write permission reports
    `running` and holds the message unacknowledged for good: a shovel's state is no proof of progress, and
    "drained" must count unacknowledged messages, not only ready ones."""
    (configure, write, read), expected = REMOVED[removed]
    major_minor = ".".join(map(str, version(broker)[:2]))
    declare(broker, vhost, queue_type, "old", "new")
    publish(broker, vhost, "old")
    permissions(broker, vhost, shovel_user[0], configure, write, read)
    shovel(broker, vhost, "old", "new", credentials_uri(broker, vhost, shovel_user))
    moved = moves(broker, vhost, "old", "new", 1, STATS_S if expected[major_minor] else REFUSED_S)
    assert moved is expected[major_minor]
    if moved:
        return
    state = status(broker, vhost).get("state")
    if removed.startswith("write") and major_minor == "3.10":
        # It took the message and waits for a confirm that never comes: unacknowledged in the source, for good.
        assert state == "running"
        held = wait_for_queue(broker, vhost, "old", lambda q: q.get("messages_unacknowledged") == 1, "held unacked")
        assert held.get("messages_ready") == 0
    else:
        # Restarted every reconnect-delay (1 s) and refused each time: sampled, it may read `running` for the moment
        # between a restart and its refusal, so it is read until it shows the refusal.
        wait_for(lambda: status(broker, vhost).get("state") in ("terminated", "starting"), STATS_S,
                 "the refused shovel to report terminated or starting", interval=0.2)
    call(broker, "DELETE", f"parameters/shovel/{esc(vhost)}/move")
    wait_for(lambda: message_counts(broker, vhost, ["old", "new"]) == {"old": 1, "new": 0}, STATS_S,
             "the message back in the source, ready, once the shovel is deleted")


# ---------------------------------------------------------------- what a shovel does


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_missing_destination_is_declared_as_a_classic_queue(broker: Broker, vhost: str, queue_type: str):
    """The shovel declares a destination that does not exist, durable and CLASSIC whatever the source's type:
    a successor must exist before its shovel."""
    declare(broker, vhost, queue_type, "old")
    publish(broker, vhost, "old")
    shovel(broker, vhost, "old", "new", direct_uri(vhost))
    # The shovel declares it once it has started: until then a passive declare of it answers 404.
    info = wait_for(lambda: get(broker, f"queues/{esc(vhost)}/new"), STATS_S, "the shovel to declare new")
    assert moves(broker, vhost, "old", "new", 1, STATS_S)
    assert (info["type"], info["durable"]) == ("classic", True)


def test_the_status_api_lists_each_shovel_without_credentials_but_its_parameter_shows_the_password(
        broker: Broker, vhost: str):
    """`GET /api/shovels/<vhost>`: name, type dynamic, state, source and destination queues, and the URIs with the
    credentials left out; a shovel that cannot connect shows only its state (and on 4.3 a reason). 4.3 adds
    counters (`forwarded`, `remaining`); 3.10 has none. The parameter (`GET /api/parameters/shovel/...`, also in a
    definitions export) holds the URI as declared, password included: whoever may read parameters reads the
    shovel user's password."""
    declare(broker, vhost, "classic", "old", "new")
    publish(broker, vhost, "old", 2)
    uri = f"amqp://{broker.username}:{broker.password}@localhost:{broker.amqp_port}/{esc(vhost)}"
    apply(broker, [shovel_record(vhost, "move", "old", "new", uri),
                   shovel_record(vhost, "stuck", "old", "new", "amqp://nobody:secret@localhost:1/none")])
    assert moves(broker, vhost, "old", "new", 2, STATS_S)
    moving = wait_for(lambda: status(broker, vhost), STATS_S, "the shovel's status")
    stripped = f"amqp://localhost:{broker.amqp_port}/{esc(vhost)}"
    assert {k: moving[k] for k in ("name", "vhost", "type", "state", "src_queue", "dest_queue", "src_uri",
                                    "dest_uri")} == {
        "name": "move", "vhost": vhost, "type": "dynamic", "state": "running", "src_queue": "old",
        "dest_queue": "new", "src_uri": stripped, "dest_uri": stripped}
    if version(broker) >= (4, 0, 0):
        assert wait_for(lambda: status(broker, vhost).get("forwarded") == 2, STATS_S, "forwarded: 2")
    else:
        assert "forwarded" not in moving
    stuck = wait_for(lambda: status(broker, vhost, "stuck"), STATS_S, "the stuck shovel's status")
    assert stuck["state"] in ("starting", "terminated") and "src_uri" not in stuck
    assert get(broker, f"parameters/shovel/{esc(vhost)}/move")["value"]["src-uri"] == [uri]


@pytest.mark.parametrize(("source_type", "destination_type"),
                         [("classic", "quorum"), ("quorum", "classic"), ("quorum", "quorum")])
def test_a_moved_message_keeps_its_properties_and_headers_and_its_x_death(
        broker: Broker, vhost: str, source_type: str, destination_type: str):
    """Every basic property, our headers, and the broker's `x-death` / `x-first-death-*` travel unchanged."""
    declare(broker, vhost, source_type, "old")
    declare(broker, vhost, destination_type, "new")
    with channel(broker, vhost, confirms=False) as opened:
        opened.queue_declare("expire", durable=True, arguments={
            "x-queue-type": "classic", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "old"})
    sent = pika.BasicProperties(delivery_mode=2, headers={ATTEMPTS: 2, ERROR_REASON: "boom"}, expiration="60000",
                                message_id="m1", correlation_id="c1", content_type="text/plain", priority=3,
                                timestamp=1700000000, type="t", app_id="a", reply_to="r", user_id=broker.username)
    publish(broker, vhost, "old", properties=sent)
    publish(broker, vhost, "expire", properties=pika.BasicProperties(delivery_mode=2, expiration="1",
                                                                     headers={ATTEMPTS: 1}))
    wait_for(lambda: message_counts(broker, vhost, ["old"])["old"] == 2, STATS_S, "the dead-lettered copy")
    shovel(broker, vhost, "old", "new", direct_uri(vhost))
    assert moves(broker, vhost, "old", "new", 2, STATS_S)
    with channel(broker, vhost, confirms=False) as opened:
        received = [opened.basic_get("new", auto_ack=True)[1] for _ in range(2)]
    plain = next(p for p in received if p.message_id == "m1")
    for key in ("delivery_mode", "expiration", "message_id", "correlation_id", "content_type", "priority",
                "timestamp", "type", "app_id", "reply_to", "user_id"):
        assert getattr(plain, key) == getattr(sent, key), key
    assert {k: plain.headers[k] for k in (ATTEMPTS, ERROR_REASON)} == {ATTEMPTS: 2, ERROR_REASON: "boom"}
    dead = next(p for p in received if p.message_id is None)
    [death] = dead.headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == ("expire", "expired", 1)
    assert (dead.headers["x-first-death-queue"], dead.headers[ATTEMPTS]) == ("expire", 1)


def test_a_per_message_ttl_starts_again_in_the_destination(broker: Broker, vhost: str):
    """A message published with `expiration: 3000` and moved after about 1.5 s is still in the destination 3.3 s
    after its publish, and expires later: its TTL starts again where it lands (late, never early)."""
    declare(broker, vhost, "classic", "old", "new")
    published = time.monotonic()
    publish(broker, vhost, "old", properties=pika.BasicProperties(delivery_mode=2, expiration="3000"))
    time.sleep(1.5)
    shovel(broker, vhost, "old", "new", direct_uri(vhost))
    assert moves(broker, vhost, "old", "new", 1, STATS_S)
    time.sleep(max(0.0, published + 3.3 - time.monotonic()))
    with channel(broker, vhost, confirms=False) as opened:
        assert message_count(opened, "new") == 1
    wait_for(lambda: message_counts(broker, vhost, ["new"])["new"] == 0, STATS_S, "the moved message to expire")


def delivery_headers(broker: Broker, vhost: str, queue: str, times: int) -> Mapping[str, Any]:
    """Deliver the queue's one message `times` times (requeued each time); the headers of the last delivery."""
    headers: Mapping[str, Any] = {}
    with channel(broker, vhost, confirms=False) as opened:
        for _ in range(times):
            method, properties, _ = opened.basic_get(queue)
            assert method is not None
            headers = properties.headers or {}
            opened.basic_nack(method.delivery_tag, requeue=True)
    return headers


@pytest.mark.parametrize("destination_type", ["classic", "quorum"])
def test_a_message_moved_out_of_a_quorum_queue_starts_a_new_delivery_count(
        broker: Broker, vhost: str, destination_type: str):
    """The delivery count belongs to the queue: a message delivered 3 times in a quorum source is, in a quorum
    destination, at its first delivery again (so its delivery limit and native delays restart there). What the
    source stamped on the shovel's delivery travels as a plain header: 3.10's `x-delivery-count: 3` (overwritten
    by a quorum destination, stale in a classic one), 4.3's `x-acquired-count: 3`."""
    declare(broker, vhost, "quorum", "old")
    declare(broker, vhost, destination_type, "new")
    publish(broker, vhost, "old")
    delivery_headers(broker, vhost, "old", 3)
    shovel(broker, vhost, "old", "new", direct_uri(vhost))
    assert moves(broker, vhost, "old", "new", 1, STATS_S)
    headers = delivery_headers(broker, vhost, "new", 1)
    if version(broker) >= (4, 0, 0):
        assert headers.get("x-acquired-count") == 3
        assert "x-delivery-count" not in headers
    else:
        assert headers.get("x-delivery-count") == (0 if destination_type == "quorum" else 3)
