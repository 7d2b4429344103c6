"""The guards read each queue on its own provider's broker (issue 31, point 5), in one program that manages both
local brokers: the 3.10 one through the default provider (the stack's settings, here the environment variables the
provider reads), the 4.3 one through an explicit `rabbitmq.Provider` given to its Vhost component.

The hooks are the program's own: recorded under mocks, each hook the program registers is captured with its callback,
which is then called as the engine calls it (docs/guard.md; the engine calling it is not verified here).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pulumi_rabbitmq as rabbitmq
import pytest

from components import Vhost
from components.config.load import load_vhost
from components.plan.planner import plan_vhost
from components.pulumi import guard
from components.pulumi.guard import PATH_GUARD, QUEUE_GUARD, GuardError
from tests.support.deploy import configured_brokers, configured_tls_brokers, throwaway_vhost, unreachable
from tests.support.mirror import Broker, apply
from tests.support.retrying import publish_ids
from tools.lib import engine
from tools.lib.mockrun import Registered, record

Hooks = dict[str, Callable[[pulumi.ResourceHookArgs], Any]]


@pytest.fixture(params=["plain", "tls"])
def two_brokers(request: pytest.FixtureRequest) -> tuple[Broker, Broker]:
    """The 3.10 broker for the default provider; the 4.3 one for the explicit provider, over its plain listener or
    over TLS (https, with the provider's `cacert_file`, `clientcert_file` and `clientkey_file`)."""
    brokers = {b.name: b for b in configured_brokers() + configured_tls_brokers()}
    if not {"3.10", "4.3", "4.3-tls"} <= set(brokers):
        pytest.skip("needs both local brokers (RABBITMQ_BROKERS names 3.10 and 4.3)")
    pair = brokers["3.10"], brokers["4.3" if request.param == "plain" else "4.3-tls"]
    for broker in pair:
        if (problem := unreachable(broker)) is not None:
            if os.environ.get("CI") == "true":
                pytest.fail(problem)
            pytest.skip(problem)
    return pair


@pytest.fixture
def vhosts(two_brokers: tuple[Broker, Broker]) -> Iterator[tuple[str, str]]:
    old, new = two_brokers
    with throwaway_vhost(old, "prov") as on_old, throwaway_vhost(new, "prov") as on_new:
        yield on_old, on_new


@pytest.fixture
def default_provider(two_brokers: tuple[Broker, Broker], monkeypatch: pytest.MonkeyPatch) -> None:
    """`pulumi up`'s default provider settings point at the 3.10 broker (environment variables, no stack config)."""
    old, _ = two_brokers
    monkeypatch.setenv("RABBITMQ_ENDPOINT", old.management_url)
    monkeypatch.setenv("RABBITMQ_USERNAME", old.username)
    monkeypatch.setenv("RABBITMQ_PASSWORD", old.password)


def config(vhost: str) -> dict[str, Any]:
    return {"name": vhost, "exchanges": [{"name": "in", "type": "fanout"}],
            "queues": [{"name": "orders", "type": "quorum", "bindings": [{"exchange": "in"}],
                        "retry": {"delays": ["30s"], "max_retries": 3}}]}


def record_two_brokers(new: Broker, on_old: str, on_new: str,
                       monkeypatch: pytest.MonkeyPatch) -> tuple[list[Registered], Hooks]:
    """The program: one Vhost on the default provider, one on an explicit provider for `new`; and every hook it
    registers, by name."""
    hooks: Hooks = {}
    register = guard._registered

    def capture(name: str, callback: Callable[[pulumi.ResourceHookArgs], Any]) -> pulumi.ResourceHook:
        hooks.setdefault(name, callback)
        return register(name, callback)
    monkeypatch.setattr(guard, "_registered", capture)

    def program() -> None:
        Vhost("old", {"plan": plan_vhost(load_vhost(config(on_old), "vhost")), "passwords": {}})
        tls = {} if new.tls is None else {"cacert_file": new.tls.cacert_file,
                                          "clientcert_file": new.tls.clientcert_file,
                                          "clientkey_file": new.tls.clientkey_file}
        provider = rabbitmq.Provider("broker-43", endpoint=new.management_url, username=new.username,
                                     password=new.password, **tls)
        Vhost("new", {"plan": plan_vhost(load_vhost(config(on_new), "vhost")), "passwords": {}},
              opts=pulumi.ResourceOptions(provider=provider))

    return record(program, reveal_secrets=True), hooks


def queue_args(vhost: str, queue: str) -> pulumi.ResourceHookArgs:
    inputs = {"name": queue, "vhost": vhost}
    return pulumi.ResourceHookArgs(urn=f"urn:{vhost}:{queue}", id=f"{queue}@{vhost}", name=queue,
                                   type=engine.QUEUE, old_inputs=inputs, old_outputs=inputs)


def call(hook: Callable[[pulumi.ResourceHookArgs], Any], args: pulumi.ResourceHookArgs) -> str | None:
    """The hook's refusal, or None when it lets the step go."""
    try:
        asyncio.run(hook(args))
    except GuardError as error:
        return str(error)
    return None


def test_each_queue_is_read_on_its_own_providers_broker(two_brokers: tuple[Broker, Broker], vhosts: tuple[str, str],
                                                        default_provider: None, monkeypatch: pytest.MonkeyPatch):
    old, new = two_brokers
    on_old, on_new = vhosts
    resources, hooks = record_two_brokers(new, on_old, on_new, monkeypatch)
    queues = {(r.inputs["vhost"], r.inputs["name"]): r for r in resources if r.type == engine.QUEUE}
    assert queues[(on_old, "orders")].hooks == {"before_delete": [QUEUE_GUARD]}
    assert queues[(on_new, "orders")].hooks == {"before_delete": [f"{QUEUE_GUARD}.broker-43"]}
    stashes = {r.name: r.hooks for r in resources if r.type == engine.STASH}
    assert stashes["new-path-guard"] == {"before_update": [f"{PATH_GUARD}.broker-43"]}
    assert stashes["old-path-guard"] == {"before_update": [PATH_GUARD]}

    # Each vhost applied to its own broker; 2 messages wait in `orders` on the 4.3 broker only.
    apply(old, [r for r in resources if _of(r, "old")])
    apply(new, [r for r in resources if _of(r, "new")])
    publish_ids(new, on_new, "in", ["a", "b"])

    # The explicit provider's hook reads the 4.3 broker, where the queue holds them: refused. Read at the default
    # provider's broker instead, the queue would be missing there ("nothing to lose"), and deleted.
    refusal = call(hooks[f"{QUEUE_GUARD}.broker-43"], queue_args(on_new, "orders"))
    assert refusal is not None and f'queue "orders" in vhost "{on_new}": it holds 2 messages' in refusal
    assert call(hooks[QUEUE_GUARD], queue_args(on_new, "orders")) is None  # the default provider's: 3.10, missing
    assert call(hooks[QUEUE_GUARD], queue_args(on_old, "orders")) is None  # empty on 3.10

    # The path guard of the explicit provider's component reads its paths there too.
    stash = next(r for r in resources if r.name == "new-removal-guard")
    path_args = pulumi.ResourceHookArgs(urn=stash.urn, id="stash", name=stash.name, type=engine.STASH,
                                        old_inputs=stash.inputs, old_outputs=stash.inputs)
    refusal = call(hooks[f"{PATH_GUARD}.broker-43"], path_args)
    assert refusal is not None and '"orders" holds 2 messages' in refusal


def _of(record_: Registered, component: str) -> bool:
    """Whether `record_` is a child of the Vhost component `component` (its URN's type chain says so)."""
    return record_.custom and "rabbitmq-retry:index:Vhost$" in record_.urn and record_.name.startswith(f"{component}-")
