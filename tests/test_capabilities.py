"""`rabbitmq-retry:broker.version`: preview refuses, offline, what the named RabbitMQ version cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from components.config import ConfigError, load_stack_config
from components.config.capabilities import end_of_support, parse_version
from tests.conftest import RETRYABLE, vhost_config

NATIVE_QUEUE = {**RETRYABLE, "type": "quorum",
                "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "30s", "max_retries": 5}}


def stack(version: object, queue: dict[str, Any] = NATIVE_QUEUE) -> dict[str, Any]:
    return {"broker": {"version": version}, "vhosts": [vhost_config(queues=[queue])]}


def problems_of(raw: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as error:
        load_stack_config(raw)
    return error.value.problems


def test_without_a_broker_version_nothing_is_checked():
    assert load_stack_config({"vhosts": [vhost_config(queues=[NATIVE_QUEUE])]}).broker_version is None


@pytest.mark.parametrize("version", ["4.3.1", "4.3.6", "5.0.0"])
def test_native_runs_from_4_3_1(version: str):
    assert load_stack_config(stack(version)).broker_version == parse_version(version)


@pytest.mark.parametrize("version", ["3.10.8", "4.3.0"])
def test_native_is_refused_below_4_3_1_at_its_key_path(version: str):
    assert problems_of(stack(version)) == [(
        "vhosts[0].queues[0].retry.strategy",
        f"strategy native (the delayed-retry-* policy keys): needs RabbitMQ 4.3.1 or later, and broker.version is "
        f"{version}; upgrade the broker first, or change vhosts[0].queues[0].retry.strategy")]


def test_quorum_queues_and_their_at_least_once_dead_lettering_have_their_own_versions():
    quorum_tiers = {**RETRYABLE, "type": "quorum"}
    assert [path for path, _ in problems_of(stack("3.9.29", quorum_tiers))] == ["vhosts[0].queues[0].retry"]
    assert [path for path, _ in problems_of(stack("3.7.28", quorum_tiers))] == [
        "vhosts[0].queues[0].type", "vhosts[0].queues[0].retry"]
    assert load_stack_config(stack("3.10.8", quorum_tiers)).broker_version == (3, 10, 8)


def test_a_user_policy_with_delayed_retry_keys_needs_4_3_1():
    raw = stack("4.2.5", RETRYABLE | {"type": "classic"})
    raw["vhosts"][0]["policies"] = [{"name": "slow", "pattern": "^x$", "definition": {"delayed-retry-min": 100}}]
    assert [path for path, _ in problems_of(raw)] == ["vhosts[0].policies[0].definition.delayed-retry-min"]


@pytest.mark.parametrize(("version", "message"), [
    (4.3, "4.3 is not a version; write it as a quoted \"X.Y.Z\", e.g. \"4.3.6\""),
    ("latest", "'latest' is not a version; write it as a quoted \"X.Y.Z\", e.g. \"4.3.6\""),
])
def test_a_version_that_is_not_x_y_z_is_refused(version: object, message: str):
    assert problems_of(stack(version)) == [("broker.version", message)]


def test_series_out_of_community_support_are_warned_about():
    assert end_of_support((3, 10, 8)) == (
        "RabbitMQ 3.10.8: the 3.10 series is out of community support (ended 2022-09-28, per endoflife.date): "
        "no more fixes without a commercial licence; plan an upgrade")
    assert "ended before" in (end_of_support((3, 6, 0)) or "")
    assert end_of_support((4, 3, 6)) is None


# --- make doctor, on facts as the management API reports them ----------------------------------------------

def facts(version: str = "4.3.6", tags: tuple[str, ...] = ("administrator",), **flags: str):
    from tools.lib.doctor import LiveFacts

    return LiveFacts(version, ("rabbitmq_management",), {"quorum_queue": "enabled", "rabbitmq_4.3.0": "enabled",
                                                         **flags}, "deployer", tags)


def diagnosis(raw: dict[str, Any], live):
    from tools.lib import doctor

    config = load_stack_config(raw)
    return doctor.diagnose(config, doctor.planned_objects(config), live)


def test_doctor_passes_a_native_stack_on_4_3_6_and_blocks_it_on_3_10_8():
    raw = {"vhosts": [vhost_config(queues=[NATIVE_QUEUE])]}
    assert diagnosis(raw, facts()).status == 0
    found = diagnosis(raw, facts("3.10.8"))
    assert found.status == 2 and found.blocking[0].startswith("vhosts[0].queues[0].retry.strategy: strategy native")
    assert found.warnings[0].startswith("RabbitMQ 3.10.8: the 3.10 series is out of community support")


def test_doctor_names_a_disabled_feature_flag_the_stack_needs():
    found = diagnosis({"vhosts": [vhost_config(queues=[NATIVE_QUEUE])]}, facts(**{"rabbitmq_4.3.0": "disabled"}))
    assert found.blocking == ["feature flag rabbitmq_4.3.0 is disabled, and the stack uses strategy native (RabbitMQ "
                              "4.3's delayed retry): `rabbitmqctl enable_feature_flag rabbitmq_4.3.0`"]


def test_doctor_says_why_the_provider_user_needs_the_administrator_tag():
    raw = {"vhosts": [vhost_config()]}
    assert diagnosis(raw, facts(tags=("policymaker",))).blocking == [
        "user 'deployer' (tags: policymaker) is not an administrator, which the stack needs: vhosts[0] creates "
        "vhost 'shop'"]
    existing = {"vhosts": [vhost_config(existing=True)]}
    assert diagnosis(existing, facts(tags=("policymaker",))).blocking == []
    assert diagnosis(existing, facts(tags=("monitoring",))).blocking == [
        "user 'deployer' (tags: monitoring) may not manage policies; give it the policymaker tag (or administrator)"]


def test_doctor_warns_when_broker_version_is_not_the_live_one():
    raw = {"broker": {"version": "4.3.1"}, "vhosts": [vhost_config()]}
    assert diagnosis(raw, facts()).warnings == ["broker.version is 4.3.1 but the broker runs 4.3.6: preview checks "
                                                "the wrong version; update broker.version"]
