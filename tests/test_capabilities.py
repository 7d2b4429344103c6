"""`rabbitmq-retry:broker.version`: preview refuses, offline, what the named RabbitMQ version cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from components.config.capabilities import end_of_support, parse_version
from components.config.load import load_stack_config
from tests.conftest import RETRYABLE, vhost_config
from tests.support.problems import config_problems

NATIVE_QUEUE = {**RETRYABLE, "type": "quorum",
                "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "30s", "max_retries": 5}}


def stack(version: object, queue: dict[str, Any] = NATIVE_QUEUE) -> dict[str, Any]:
    return {"broker": {"version": version}, "vhosts": [vhost_config(queues=[queue])]}


def test_without_a_broker_version_nothing_is_checked():
    assert load_stack_config({"vhosts": [vhost_config(queues=[NATIVE_QUEUE])]}).broker_version is None


@pytest.mark.parametrize("version", ["4.3.1", "4.3.6", "5.0.0"])
def test_native_runs_from_4_3_1(version: str):
    assert load_stack_config(stack(version)).broker_version == parse_version(version)


@pytest.mark.parametrize("version", ["3.10.8", "4.3.0"])
def test_native_is_refused_below_4_3_1_at_its_key_path(version: str):
    assert config_problems(stack(version)) == [(
        "vhosts[shop].queues[orders].retry.strategy",
        f"strategy native (the delayed-retry-* policy keys): needs RabbitMQ 4.3.1 or later, and broker.version is "
        f"{version}; upgrade the broker first, or change vhosts[shop].queues[orders].retry.strategy")]


def test_quorum_queues_and_their_at_least_once_dead_lettering_have_their_own_versions():
    quorum_tiers = {**RETRYABLE, "type": "quorum"}
    assert [path for path, _ in config_problems(stack("3.9.29", quorum_tiers))] == ["vhosts[shop].queues[orders].retry"]
    assert [path for path, _ in config_problems(stack("3.7.28", quorum_tiers))] == [
        "vhosts[shop].queues[orders].type", "vhosts[shop].queues[orders].retry"]
    assert load_stack_config(stack("3.10.8", quorum_tiers)).broker_version == (3, 10, 8)


def test_a_user_policy_with_delayed_retry_keys_needs_4_3_1():
    raw = stack("4.2.5", RETRYABLE | {"type": "classic"})
    raw["vhosts"][0]["policies"] = [{"name": "slow", "pattern": "^x$", "definition": {"delayed-retry-min": 100}}]
    assert [path for path, _ in config_problems(raw)] == ["vhosts[shop].policies[slow].definition.delayed-retry-min"]


@pytest.mark.parametrize(("version", "message"), [
    (4.3, "4.3 is not a version; write it as a quoted \"X.Y.Z\", e.g. \"4.3.6\""),
    ("latest", "'latest' is not a version; write it as a quoted \"X.Y.Z\", e.g. \"4.3.6\""),
])
def test_a_version_that_is_not_x_y_z_is_refused(version: object, message: str):
    assert config_problems(stack(version)) == [("broker.version", message)]


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
    from tests.support.doctor import planned_objects
    from tools.lib import doctor

    config = load_stack_config(raw)
    return doctor.diagnose(config, planned_objects(config), live)


def test_doctor_passes_a_native_stack_on_4_3_6_and_blocks_it_on_3_10_8():
    raw = {"vhosts": [vhost_config(queues=[NATIVE_QUEUE])]}
    assert diagnosis(raw, facts()).status == 0
    found = diagnosis(raw, facts("3.10.8"))
    assert found.status == 2 and found.blocking[0].startswith("vhosts[shop].queues[orders].retry.strategy: strategy "
                                                              "native")
    assert found.warnings[0].startswith("RabbitMQ 3.10.8: the 3.10 series is out of community support")


def test_doctor_names_a_disabled_feature_flag_the_stack_needs():
    found = diagnosis({"vhosts": [vhost_config(queues=[NATIVE_QUEUE])]}, facts(**{"rabbitmq_4.3.0": "disabled"}))
    assert found.blocking == ["feature flag rabbitmq_4.3.0 is disabled, and the stack uses strategy native (RabbitMQ "
                              "4.3's delayed retry): `rabbitmqctl enable_feature_flag rabbitmq_4.3.0`"]


def test_doctor_says_why_the_provider_user_needs_the_administrator_tag():
    raw = {"vhosts": [vhost_config()]}
    assert diagnosis(raw, facts(tags=("policymaker",))).blocking == [
        "user 'deployer' (tags: policymaker) is not an administrator, which the stack needs: vhosts[shop] creates "
        "vhost 'shop'"]
    existing = {"vhosts": [vhost_config(existing=True)]}
    assert diagnosis(existing, facts(tags=("policymaker",))).blocking == []
    assert diagnosis(existing, facts(tags=("monitoring",))).blocking == [
        "user 'deployer' (tags: monitoring) may not manage policies; give it the policymaker tag (or administrator)"]


def test_doctor_warns_when_broker_version_is_not_the_live_one():
    raw = {"broker": {"version": "4.3.1"}, "vhosts": [vhost_config()]}
    assert diagnosis(raw, facts()).warnings == ["broker.version is 4.3.1 but the broker runs 4.3.6: preview checks "
                                                "the wrong version; update broker.version"]


# --- policy keys and apply-to values the broker version refuses (measured: tests/broker/test_policy_acceptance.py)

OPERATOR_OVERFLOW = {"name": "ops", "pattern": "^orders", "definition": {"max-length": 1000,
                                                                          "overflow": "reject-publish"}}
QUORUM_ONLY = {"name": "team", "pattern": "^x$", "apply_to": "quorum_queues", "definition": {"max-length": 5}}
TIMEOUT = {"name": "slow", "pattern": "^x$", "definition": {"consumer-timeout": 60000}}


def with_policies(version: object = None, **policies: list[dict[str, Any]]) -> dict[str, Any]:
    raw = {"vhosts": [vhost_config(**policies)]}
    return raw if version is None else {"broker": {"version": version}, **raw}


def test_3_10_refuses_operator_overflow_quorum_only_apply_to_and_newer_user_policy_keys_at_their_key_paths():
    assert config_problems(with_policies("3.10.8", operator_policies=[OPERATOR_OVERFLOW],
                                     policies=[QUORUM_ONLY, TIMEOUT])) == [
        ("vhosts[shop].policies[team].apply_to",
         "apply_to: quorum_queues: RabbitMQ 3.10.8 refuses it (HTTP 400, measured), and broker.version is 3.10.8; "
         "write apply_to: queues (RabbitMQ 3.10.8 takes queues, exchanges or all) with a pattern that matches only "
         "the queues of that type, or upgrade the broker first (4.3.6 takes it)"),
        ("vhosts[shop].policies[slow].definition.consumer-timeout",
         "the key consumer-timeout in a policy: RabbitMQ 3.10.8 refuses it (HTTP 400, measured), and broker.version "
         "is 3.10.8; remove it, or upgrade the broker first (4.3.6 takes it)"),
        ("vhosts[shop].operator_policies[ops].definition.overflow",
         "the key overflow in an operator policy: RabbitMQ 3.10.8 refuses it (HTTP 400, measured), and "
         "broker.version is 3.10.8; remove it (an operator policy there takes expires, message-ttl, max-length, "
         "max-length-bytes, max-in-memory-length, max-in-memory-bytes, delivery-limit), or upgrade the broker first "
         "(4.3.6 takes it)")]


def test_4_3_6_takes_them_and_nothing_is_warned():
    from components.config.capabilities import version_warnings

    config = load_stack_config(with_policies("4.3.6", operator_policies=[OPERATOR_OVERFLOW],
                                             policies=[QUORUM_ONLY, TIMEOUT]))
    assert version_warnings(config, config.broker_version) == []


def test_a_version_between_the_measured_ones_is_taken_with_a_warning():
    from components.config.capabilities import version_warnings

    config = load_stack_config(with_policies("4.0.9", operator_policies=[OPERATOR_OVERFLOW]))
    assert version_warnings(config, config.broker_version) == [
        "vhosts[shop].operator_policies[ops].definition.overflow: the key overflow in an operator policy: RabbitMQ "
        "3.10.8 "
        "refuses it and 4.3.6 takes it; 4.0.9 was not measured: try it on a broker of that version before "
        "`pulumi up`"]


def test_without_a_broker_version_preview_checks_for_the_newest_broker_and_says_what_needs_which_version():
    from components.config.capabilities import version_warnings

    config = load_stack_config({"vhosts": [vhost_config(queues=[NATIVE_QUEUE], operator_policies=[
        {**OPERATOR_OVERFLOW, "pattern": "^nothing$"}])]})
    assert version_warnings(config, None) == [
        "vhosts[shop].queues[orders].retry.strategy: strategy native (the delayed-retry-* policy keys): needs RabbitMQ "
        "4.3.1 "
        "or later; broker.version is not set, so preview checked it for the newest broker: set broker.version to "
        "have it checked for yours",
        "vhosts[shop].operator_policies[ops].definition.overflow: the key overflow in an operator policy: RabbitMQ "
        "3.10.8 "
        "refuses it, 4.3.6 takes it; broker.version is not set, so preview checked it for the newest broker: set "
        "broker.version to have it checked for yours"]


def test_doctor_blocks_what_the_live_broker_version_refuses():
    found = diagnosis(with_policies(operator_policies=[OPERATOR_OVERFLOW]), facts("3.10.8"))
    assert found.status == 2
    assert found.blocking[0].startswith("vhosts[shop].operator_policies[ops].definition.overflow: the key overflow in "
                                        "an "
                                        "operator policy: RabbitMQ 3.10.8 refuses it (HTTP 400, measured), and the "
                                        "broker is 3.10.8")
    assert diagnosis(with_policies(operator_policies=[OPERATOR_OVERFLOW]), facts()).status == 0
