"""Per-user limits (`applications[].limits`) on 3.10.8 and 4.3.6: the dynamic provider of components/user_limits.py,
method by method against the management API, and the stack applied the way `pulumi up` would run it (the
provider's methods on the recorded inputs, tests/support/mirror.py). A user over its connection limit is refused;
raising, lowering and removing a limit take effect; nothing of the deploying user's credentials is an input or
an output. The engine driving the provider is unverified here (no Pulumi CLI)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pika
import pika.exceptions
import pulumi.dynamic
import pytest

from components.user_limits import UserLimitsError, UserLimitsProvider
from tests.support.admin import wait_for
from tests.support.amqp import parameters
from tests.support.deploy import Deployer
from tests.support.mirror import Broker, MirrorError, call, esc, read_back, user_limits_provider
from tools.lib.drift import findings
from tools.lib.snapshot import read_live

PASSWORD = "limits-test-password"
TRACKED_S = 15.0


@pytest.fixture
def user(broker: Broker) -> Iterator[str]:
    """A throw-away user (`cl2-…`) with full permissions on `/`; deleted afterwards (its limits go with it)."""
    name = f"cl2-{uuid.uuid4().hex[:10]}"
    call(broker, "PUT", f"users/{esc(name)}", {"password": PASSWORD, "tags": ""})
    call(broker, "PUT", f"permissions/%2F/{esc(name)}", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        yield name
    finally:
        call(broker, "DELETE", f"users/{esc(name)}")


def connections_accepted(broker: Broker, user: str, vhost: str = "/", attempts: int = 4) -> int:
    """How many of `attempts` connections the user opens at once before the broker refuses one."""
    with ExitStack() as stack:
        for opened in range(attempts):
            try:
                stack.enter_context(pika.BlockingConnection(parameters(broker, vhost, user, PASSWORD)))
            except pika.exceptions.AMQPConnectionError:
                return opened
        return attempts


def accepts(count: Callable[[], int], expected: int, what: str) -> None:
    """Until `count()` is `expected`: RabbitMQ forgets a closed connection asynchronously, so right after the
    previous measurement closed its connections a count may still come out lower (never higher: the limit holds)."""
    wait_for(lambda: count() == expected, TRACKED_S, what, interval=0.3)


def channels_accepted(broker: Broker, user: str, attempts: int = 4) -> int:
    with pika.BlockingConnection(parameters(broker, "/", user, PASSWORD)) as connection:
        for opened in range(attempts):
            try:
                connection.channel()
            except (pika.exceptions.ChannelClosed, pika.exceptions.ConnectionClosed):
                return opened
        return attempts


def test_the_provider_sets_changes_reads_and_removes_a_users_limits(broker: Broker, user: str) -> None:
    provider = user_limits_provider(broker)
    created = provider.create({"user": user, "limits": {"max-connections": 2.0}})
    assert (created.id, created.outs) == (user, {"user": user, "limits": {"max-connections": 2}})
    assert provider.live(user) == {"max-connections": 2}
    accepts(lambda: connections_accepted(broker, user), 2, "2 connections")

    olds, news = created.outs or {}, {"user": user, "limits": {"max-connections": 3, "max-channels": 1}}
    diff = provider.diff(user, olds, news)
    assert (diff.changes, diff.replaces) == (True, [])
    provider.update(user, olds, news)
    assert provider.live(user) == {"max-connections": 3, "max-channels": 1}
    accepts(lambda: connections_accepted(broker, user), 3, "3 connections")
    accepts(lambda: channels_accepted(broker, user), 1, "1 channels")

    provider.update(user, news, {"user": user, "limits": {"max-channels": 2}})
    assert provider.live(user) == {"max-channels": 2}  # the connection limit it no longer declares is removed
    accepts(lambda: connections_accepted(broker, user), 4, "4 connections")
    read = provider.read(user, {"user": user, "limits": {"max-channels": 2}})
    assert (read.id, read.outs) == (user, {"user": user, "limits": {"max-channels": 2}})

    provider.delete(user, {"user": user, "limits": {"max-channels": 2}})
    assert provider.live(user) == {}
    accepts(lambda: channels_accepted(broker, user), 4, "4 channels")


def test_lowering_a_limit_closes_nothing_and_refuses_new_connections(broker: Broker, user: str) -> None:
    """What `make review` tells a reviewer about a lowered limit."""
    provider = user_limits_provider(broker)
    provider.create({"user": user, "limits": {"max-connections": 3}})
    with ExitStack() as stack:
        opened = [stack.enter_context(pika.BlockingConnection(parameters(broker, "/", user, PASSWORD)))
                  for _ in range(2)]
        provider.update(user, {"user": user, "limits": {"max-connections": 3}},
                        {"user": user, "limits": {"max-connections": 1}})
        wait_for(lambda: refused_now(broker, user), TRACKED_S, "a new connection refused under the lowered limit",
                 interval=0.3)
        for connection in opened:
            connection.process_data_events(time_limit=0.2)
            assert connection.is_open
            connection.channel().close()  # still usable


def refused_now(broker: Broker, user: str) -> bool:
    try:
        pika.BlockingConnection(parameters(broker, "/", user, PASSWORD)).close()
    except pika.exceptions.AMQPConnectionError:
        return True
    return False


def test_a_user_that_does_not_exist_is_a_clear_error_and_reads_as_gone(broker: Broker) -> None:
    provider = user_limits_provider(broker)
    missing = f"cl2-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(UserLimitsError) as refused:
        provider.create({"user": missing, "limits": {"max-connections": 1}})
    assert f"user {missing!r}: setting max-connections to 1:" in str(refused.value)
    assert "no_such_user" in str(refused.value)
    assert provider.read(missing, {"user": missing, "limits": {}}).id == ""
    provider.delete(missing, {"user": missing, "limits": {"max-connections": 1}})  # already gone: nothing to do


def test_what_the_management_api_takes_as_a_user_limit(broker: Broker, user: str) -> None:
    """Why the provider sends JSON integers and only the two limit names, and may DELETE a limit that is not set."""
    def put(limit: str, value: object) -> tuple[int, str]:
        try:
            return call(broker, "PUT", f"user-limits/{esc(user)}/{limit}", {"value": value})[0], ""
        except MirrorError as error:
            return 400 if "Error 400" in str(error) else 0, str(error)
    assert put("max-connections", 2)[0] == 204 and put("max-channels", -1)[0] == 204
    for value in ("2", 1.5):
        status, reason = put("max-connections", value)
        assert status == 400 and "should be a number" in reason, reason
    status, reason = put("max-queues", 2)
    assert status == 400 and "Unrecognised terms" in reason, reason
    assert call(broker, "DELETE", f"user-limits/{esc(user)}/max-connections")[0] == 204
    assert call(broker, "DELETE", f"user-limits/{esc(user)}/max-connections")[0] == 204  # not set: still 204


def test_wrong_credentials_name_the_endpoint(broker: Broker, user: str) -> None:
    provider = UserLimitsProvider()
    provider.configure(pulumi.dynamic.ConfigureRequest(pulumi.dynamic.Config({
        "rabbitmq:endpoint": broker.management_url, "rabbitmq:username": "cl2-nobody",
        "rabbitmq:password": "wrong"}, "rabbitmq-retry")))
    with pytest.raises(UserLimitsError) as refused:
        provider.create({"user": user, "limits": {"max-connections": 1}})
    assert broker.management_url in str(refused.value) and "HTTP 401" in str(refused.value)


def test_the_stack_applies_an_applications_limits_and_a_change_of_them(broker: Broker, deploy: Deployer) -> None:
    """Recorded under mocks, applied as `pulumi up` applies it, read back as a refresh would, then changed."""
    app = f"cl2-app-{uuid.uuid4().hex[:8]}"
    config = {"queues": [{"name": "jobs", "type": "classic"}],
              "applications": [{"user": app, "consumes": ["jobs"], "limits": {"max_connections": 1}}]}
    try:
        first = deploy(config, passwords={app: PASSWORD})
        [limits] = [r for r in first.resources if r.type.endswith(":UserLimits")]
        assert limits.inputs == {"user": app, "limits": {"max-connections": 1}}
        assert read_back(broker, first.resources) == []
        accepts(lambda: connections_accepted(broker, app, deploy.vhost), 1, "1 connections")

        raised = {**config, "applications": [{**config["applications"][0],  # type: ignore[dict-item]
                                              "limits": {"max_connections": 2, "max_channels": 5}}]}
        second = deploy.update(first, raised, passwords={app: PASSWORD})
        assert [(s.op, s.name) for s in second.steps if s.op != "same" and s.custom] == [("update", limits.name)]
        assert user_limits_provider(broker).live(app) == {"max-connections": 2, "max-channels": 5}
        accepts(lambda: connections_accepted(broker, app, deploy.vhost), 2, "2 connections")
        assert read_back(broker, second.resources) == []

        # `make drift` reads the users' limits live: in sync, then a limit changed by hand.
        def drift() -> list[tuple[str, str]]:
            snapshot = read_live(broker.client(), deploy.vhost)
            return [(f.kind, f.detail) for f in findings(second.resources, {deploy.vhost: snapshot}, broker.username)]
        assert drift() == []
        call(broker, "PUT", f"user-limits/{esc(app)}/max-channels", {"value": 7})
        assert drift() == [("mutable", "limits.max-channels: stack 5, broker 7")]

        removed = {**config, "applications": [{"user": app, "consumes": ["jobs"]}]}
        third = deploy.update(second, removed, passwords={app: PASSWORD})
        assert [(s.op, s.name) for s in third.steps if s.op != "same" and s.custom] == [("delete", limits.name)]
        assert user_limits_provider(broker).live(app) == {}
    finally:
        call(broker, "DELETE", f"users/{esc(app)}")
