"""Real brokers for the tests under tests/broker: one parametrized `broker`, a throw-away `vhost`, and
`deploy`, which records the program's `Vhost` component under mocks and applies it like `pulumi up`
(tests/support/deploy.py says where brokers come from).

A broker that does not answer skips its tests, except in CI (CI=true), where it fails them: a green CI
run must have touched both brokers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.pulumi.resources import ShovelAccess
from tests.support.deploy import Deployer, configured_brokers, throwaway_vhost, unreachable
from tests.support.environment import missing
from tests.support.mirror import Broker, call, esc
from tests.support.retrying import CONSUMER_KINDS

HERE = Path(__file__).resolve().parent
BROKERS = configured_brokers()
_problems: dict[str, str | None] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this directory talks to a broker: `-m "not broker"` deselects them."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.broker)


@pytest.fixture(scope="session", params=BROKERS, ids=[b.name for b in BROKERS])
def broker(request: pytest.FixtureRequest) -> Broker:
    """A broker whose management API answers (checked once per session)."""
    candidate: Broker = request.param
    if candidate.name not in _problems:
        _problems[candidate.name] = unreachable(candidate)
    problem = _problems[candidate.name]
    if problem is not None:
        missing(problem, because="CI=true: start the brokers with `scripts/brokers.sh ensure`")
    return candidate


@pytest.fixture
def vhost(broker: Broker) -> Iterator[str]:
    """A fresh vhost name; the program creates the vhost, teardown deletes it with everything in it."""
    with throwaway_vhost(broker) as name:
        yield name


@pytest.fixture
def deploy(broker: Broker, vhost: str) -> Deployer:
    """Apply Vhost configs to `broker` in the throw-away `vhost` (the config's name defaults to it)."""
    return Deployer(broker, vhost)


@pytest.fixture
def shovel_user(broker: Broker) -> Iterator[ShovelAccess]:
    """A shovel user of the test's own, for a stack whose migrations move queues: users are broker-wide and other
    tests run beside, so the stack's `rabbitmq-retry-shovel` is not used. Deleted afterwards."""
    name, password = f"ado-shovel-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    call(broker, "PUT", f"users/{esc(name)}", {"password": password, "tags": ""})
    try:
        yield ShovelAccess(name, password, broker.amqp_port)
    finally:
        call(broker, "DELETE", f"users/{esc(name)}")


@pytest.fixture(params=CONSUMER_KINDS)
def consumer_kind(request: pytest.FixtureRequest) -> str:
    """Each consumer the behaviour suite runs: "threaded" (RetryingConsumer) and "asyncio" (AsyncRetryingConsumer)."""
    return str(request.param)
