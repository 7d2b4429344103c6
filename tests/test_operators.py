"""Operators of parked messages (`vhosts[].operators[]`) under Pulumi's mocks: a user each, with exactly the
permissions `rabbitmq-retry parked …` needs (docs/operations.md: Parked messages), a password like an
application's, and config errors with their key paths."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest

from components import Vhost
from components.config.load import load_stack_config
from components.config.passwords import password_problems
from components.model.plan_types import Grant
from components.plan.planner import plan_vhost
from tests.conftest import of_type
from tests.support.problems import config_problems
from tests.test_access import PASSWORDS, PERMISSIONS, USER, shop
from tools.lib.mockrun import Registered, record

OPERATOR = {"user": "ops-oncall"}


def record_with_operator(**overrides: Any) -> list[Registered]:
    config = shop(operators=[OPERATOR], **overrides)
    secrets = {user: pulumi.Output.secret(pw) for user, pw in {**PASSWORDS, "ops-oncall": "0ps"}.items()}
    return record(lambda: Vhost("shop", {"vhost": config, "passwords": secrets}))


def test_an_operator_reads_error_queues_and_writes_only_where_a_redrive_publishes():
    permissions = of_type(record_with_operator(), PERMISSIONS)["shop-permissions-ops-oncall"]
    assert permissions.inputs == {"user": "ops-oncall", "vhost": "shop", "permissions": {
        "configure": "^$",
        # The input queues' source exchange (a redrive to the original exchange) and each Q.requeue (--to-queue).
        "write": r"^(orders\.billing\.requeue|orders\.shipping\.requeue|shop\.orders)$",
        "read": r"^(orders\.billing\.error|orders\.shipping\.error)$",
    }}


def test_the_operators_regexes_match_nothing_else():
    grant = of_type(record_with_operator(), PERMISSIONS)["shop-permissions-ops-oncall"].inputs["permissions"]
    assert [name for name in ("orders.billing", "orders.billing.wait.1", "audit.log", "orders.billing.retry",
                              "orders.billing.errorX") if re.search(grant["read"], name)] == []
    assert [name for name in ("shop.payments", "orders.billing.retry", "orders.billing.error", "amq.default", "",
                              "orders.billing") if re.search(grant["write"], name)] == []


def test_an_operator_is_a_user_without_tags_and_with_a_secret_password():
    users = of_type(record_with_operator(), USER)
    assert users["shop-user-ops-oncall"].inputs["name"] == "ops-oncall"
    assert users["shop-user-ops-oncall"].inputs.get("tags") in (None, [])
    assert users["shop-user-ops-oncall"].secret


def test_an_operator_of_a_vhost_without_retryable_queues_may_do_nothing():
    config = {"name": "plain", "queues": [{"name": "audit"}], "operators": [OPERATOR]}
    stack = load_stack_config({"vhosts": [config]})
    [grant] = plan_vhost(stack.vhosts[0]).permissions
    assert (grant.configure, grant.write, grant.read) == (Grant("^$", ()), Grant("^$", ()), Grant("^$", ()))


def test_an_operator_needs_a_password_named_by_its_key_path():
    config = load_stack_config({"vhosts": [shop(operators=[OPERATOR])]})
    assert password_problems(config, PASSWORDS) == [
        ("vhosts[shop].operators[ops-oncall].user", 'no password for "ops-oncall": `pulumi config set --secret --path '
         "'rabbitmq-retry:passwords.ops-oncall' <password>`")]
    assert password_problems(config, {**PASSWORDS, "ops-oncall": "0ps"}) == []


def test_an_operator_cannot_share_a_user_with_an_application_or_be_guest():
    raw = {"vhosts": [shop(operators=[{"user": "billing-app"}, {"user": "guest"}])], "passwords": PASSWORDS}
    problems = config_problems(raw)
    assert ("vhosts[shop].operators[billing-app].user",
            'user "billing-app" is also vhosts[shop].applications[billing-app].user; give each '
            "operator its own user") in problems
    assert [path for path, _ in problems] == ["vhosts[shop].operators[billing-app].user",
                                              "vhosts[shop].operators[guest].user"]


@pytest.mark.parametrize(("operator", "path", "message"), [
    ({"user": "ops", "role": "admin"}, "vhosts[shop].operators[ops].role", "unknown key (allowed: user)"),
    ({}, "vhosts[shop].operators[0].user", "user name must be a non-empty string, got None"),
    ("ops", "vhosts[shop].operators[0]", None),
])
def test_a_malformed_operator_is_named_by_its_key_path(operator: Any, path: str, message: str | None):
    problems = config_problems({"vhosts": [shop(operators=[operator])]})
    assert [p for p, _ in problems] == [path]
    if message is not None:
        assert problems[0][1] == message
