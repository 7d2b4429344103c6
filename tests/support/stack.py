"""A one-vhost stack recorded as `__main__.py` registers it (plan, the stack's shovel user, the Vhost component), for
tests that apply a stack's steps to a real broker (tests/support/mirror.py), and a throw-away vhost whose stack
has a shovel user of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest

from components import Vhost
from components.config.load import load_stack_config
from components.model import naming
from components.pulumi.stack_resources import declare_shovel_user, plan_stack
from components.pulumi.vhost import VhostPythonArgs
from tests.support.deploy import _integers
from tests.support.mirror import Broker, call, esc
from tools.lib import engine
from tools.lib.mockrun import Registered, record

SHOVEL_PASSWORD = "mvi shovel/pw"
"""With characters a URI must escape: the shovel URIs are built by the product (components/naming.shovel_uri)."""


@dataclass
class Stack:
    """One step's recording: what `pulumi up` would apply, and the retry contracts it exports."""

    config: dict[str, Any]
    resources: list[Registered]
    contracts: dict[str, dict[str, Any]]

    def queues(self) -> set[str]:
        return {r.inputs["name"] for r in self.resources if r.type == engine.QUEUE}


def record_stack(broker: Broker, vhost: str, vhost_config: dict[str, Any]) -> Stack:
    """The program's registrations for a one-vhost stack (as __main__.py makes them: plan, the stack's shovel user,
    the Vhost component), with the broker's AMQP port as the stack's `rabbitmq-retry:amqp_port`."""
    config = {"name": vhost, **vhost_config}
    stack = load_stack_config({"vhosts": [config]})
    contracts: dict[str, Any] = {}

    def program() -> None:
        plans = plan_stack(stack)
        access = declare_shovel_user(plans, {naming.SHOVEL_USER: pulumi.Output.secret(SHOVEL_PASSWORD)},
                                     broker.amqp_port)
        for name, plan in plans:
            args: VhostPythonArgs = {"plan": plan, "passwords": {}}
            if access is not None and plan.shovels:
                args["shovel_access"] = access
            Vhost(name, args).retry_contracts.apply(contracts.update)

    resources = record(program, reveal_secrets=True)
    return Stack(config, resources, _integers(contracts))


@contextmanager
def stack_vhost(broker: Broker, monkeypatch: pytest.MonkeyPatch, prefix: str) -> Iterator[str]:
    """`<prefix>-<random>`, deleted afterwards with what it holds; the stack's shovel user renamed to
    `<prefix>-shovel-<random>` (and deleted afterwards, should a failed test leave it), so that concurrent runs on
    one broker never share the product's broker-wide user."""
    suffix = uuid.uuid4().hex[:10]
    name, user = f"{prefix}-{suffix}", f"{prefix}-shovel-{suffix}"
    monkeypatch.setattr(naming, "shovel_user", lambda project, stack: user)
    try:
        yield name
    finally:
        call(broker, "DELETE", f"vhosts/{esc(name)}")
        call(broker, "DELETE", f"users/{esc(user)}")
