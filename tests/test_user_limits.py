"""`applications[].limits`: parsed with key paths, planned as one `UserLimits` dynamic resource per application user
that has some, registered under mocks with the user's name and RabbitMQ's limit names only (no credentials, no
serialized provider), and diffed by the engine model like the provider's own `diff`. On brokers and clusters:
tests/broker/test_user_limits.py, tests/cluster/test_shared_vhosts.py."""

from __future__ import annotations

import base64
from typing import Any

import dill
import pulumi.dynamic
import pytest

from components.config.load import load_stack_config
from components.model.problems import ConfigError
from components.pulumi.stack_resources import plan_stack
from components.user_limits import TYPE, UserLimitsProvider
from tests.conftest import record_vhost, vhost_config
from tools.lib import engine
from tools.lib.mockrun import Registered


def application(**limits: Any) -> dict[str, Any]:
    return {"user": "billing", "consumes": ["orders"], **({"limits": limits} if limits else {})}


def recorded(app: dict[str, Any]) -> list[Registered]:
    return record_vhost(vhost_config(applications=[app]), passwords={"billing": "pw"})


def test_an_applications_limits_become_one_user_limits_resource_after_its_user() -> None:
    resources = recorded(application(max_connections=5, max_channels=20))
    [limits] = [r for r in resources if r.type == TYPE]
    [user] = [r for r in resources if r.type == engine.USER]
    assert limits.name == "shop-limits-billing"
    assert limits.inputs == {"user": "billing", "limits": {"max-channels": 20, "max-connections": 5}}
    [guard] = [r.urn for r in resources if r.name == "shop-path-guard"]
    assert limits.dependencies == [guard, user.urn] and not limits.secret
    assert limits.urn.endswith("::rabbitmq-retry:index:Vhost$pulumi-python:dynamic/rabbitmq-retry:UserLimits::"
                               "shop-limits-billing")


def test_without_limits_nothing_is_registered_and_everything_else_is_unchanged() -> None:
    with_limits, without = recorded(application(max_channels=3)), recorded(application())
    assert not [r for r in without if r.type == TYPE]
    assert sorted((r.urn, str(r.inputs)) for r in with_limits if r.type != TYPE and r.custom) == sorted(
        (r.urn, str(r.inputs)) for r in without if r.custom)


@pytest.mark.parametrize(("limits", "path", "problem"), [
    ({"max_connections": 0}, "limits.max_connections", "use >= 1"),
    ({"max_channels": "ten"}, "limits.max_channels", ""),
    ({"max_queues": 3}, "limits.max_queues", "unknown key (allowed: max_connections, max_channels)"),
])
def test_a_bad_limit_is_refused_with_its_key_path(limits: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_stack_config({"vhosts": [vhost_config(applications=[{**application(), "limits": limits}])],
                           "passwords": {"billing": "x"}})
    found = dict(refused.value.problems)
    assert f"vhosts[shop].applications[billing].{path}" in found, found
    assert problem in found[f"vhosts[shop].applications[billing].{path}"]


def test_the_plan_names_the_config_key_of_each_users_limits() -> None:
    config = load_stack_config({"vhosts": [vhost_config(applications=[
        {"user": "audit", "consumes": ["audit"]}, application(max_connections=4)])]})
    [(_, plan)] = plan_stack(config)
    [limits] = plan.user_limits
    assert (limits.user, dict(limits.limits), limits.source) == (
        "billing", {"max-connections": 4}, "vhosts[shop].applications[billing].limits")


def test_the_serialized_provider_holds_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine stores the serialized provider in state with each resource: credentials come from `configure`
    at run time, which the program's serialization never sees, even where the program's environment has them."""
    for variable, value in (("RABBITMQ_ENDPOINT", "http://rabbit:15672"), ("RABBITMQ_USERNAME", "deployer"),
                            ("RABBITMQ_PASSWORD", "s3cret-password")):
        monkeypatch.setenv(variable, value)
    provider = UserLimitsProvider()
    blob = pulumi.dynamic.dynamic.serialize_provider(provider)
    assert b"s3cret-password" not in base64.b64decode(blob)
    restored = dill.loads(base64.b64decode(blob))
    assert (restored.endpoint, restored.username, restored.password) == ("", "", "")
    assert UserLimitsProvider.serialize_as_secret_always is False


def config_of(endpoint: str, username: str, password: str) -> pulumi.dynamic.ConfigureRequest:
    return pulumi.dynamic.ConfigureRequest(pulumi.dynamic.Config({
        "rabbitmq:endpoint": endpoint, "rabbitmq:username": username, "rabbitmq:password": password},
        "rabbitmq-retry"))


def test_configure_reads_the_providers_keys_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = UserLimitsProvider()
    provider.configure(config_of("http://rabbit:15672", "deployer", "s3cret"))
    assert (provider.endpoint, provider.username, provider.password) == ("http://rabbit:15672", "deployer", "s3cret")
    monkeypatch.setenv("RABBITMQ_ENDPOINT", "http://env:15672")
    monkeypatch.setenv("RABBITMQ_USERNAME", "env-user")
    monkeypatch.setenv("RABBITMQ_PASSWORD", "env-password")
    provider.configure(pulumi.dynamic.ConfigureRequest(pulumi.dynamic.Config({}, "rabbitmq-retry")))
    assert (provider.endpoint, provider.username, provider.password) == ("http://env:15672", "env-user",
                                                                         "env-password")


def test_check_and_diff_say_what_the_engine_would_do() -> None:
    provider = UserLimitsProvider()
    ok = provider.check({}, {"user": "billing", "limits": {"max-connections": 5.0}})
    assert ok.failures == []
    bad = provider.check({}, {"user": "billing", "limits": {"max-queues": 5, "max-channels": -1}})
    assert sorted(f.property for f in bad.failures) == ["limits.max-channels", "limits.max-queues"]
    same = provider.diff("billing", {"user": "billing", "limits": {"max-connections": 5}},
                         {"user": "billing", "limits": {"max-connections": 5.0}})
    assert not same.changes
    other = provider.diff("billing", {"user": "billing", "limits": {}}, {"user": "payments", "limits": {}})
    assert (other.changes, other.replaces, other.delete_before_replace) == (True, ["user"], False)


def test_the_engine_model_updates_limits_in_place_and_replaces_for_another_user() -> None:
    def limits(user: str, **values: int) -> Registered:
        return Registered(urn=f"urn:pulumi:dev::rabbitmq-retry::{TYPE}::shop-limits-billing", type=TYPE,
                          name="shop-limits-billing", custom=True, parent=None,
                          inputs={"user": user, "limits": values})
    [update] = engine.diff([limits("billing", **{"max-connections": 5})], [limits("billing", **{"max-connections": 9})])
    assert (update.op, update.changed) == ("update", ["limits.max-connections"])
    [replace] = engine.diff([limits("billing")], [limits("payments")])
    assert (replace.op, replace.delete_before_replace) == ("replace", False)
