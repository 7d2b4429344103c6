"""The program under Pulumi's mocks with application passwords: plain text in the stack file is refused by key
path, a missing password is a placeholder in a preview and an error in an update, the provider's own user
is never an application's, and no password value reaches an error, a warning or an unrelated input."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pulumi import RunError

from components.config.pulumi_yaml import SECRET_MARKER, is_secret_placeholder
from tools.lib.mockrun import Registered, record_program

USER = "rabbitmq:index/user:User"
SECURE = {"secure": "AAABAHNlY3JldA=="}
"""An encrypted value as `pulumi config set --secret` writes it; the mocks hand the program a marker."""
PLAIN = "pl41n-t3xt-pw"


def shop(*users: str) -> dict[str, Any]:
    return {"name": "shop", "exchanges": [{"name": "orders", "type": "topic"}],
            "queues": [{"name": "orders.billing", "bindings": [{"exchange": "orders"}], "retry": {"delays": ["1s"]}}],
            "applications": [{"user": user, "consumes": ["orders.billing"]} for user in users]}


@pytest.fixture
def project(program_copy: Path) -> Path:
    """A copy of the program, so that each test writes its own stack file beside it."""
    return program_copy


def run(project: Path, config: dict[str, Any], stack: str = "apps", preview: bool = True,
        reveal_secrets: bool = False) -> list[Registered]:
    """The copied program under mocks, as `pulumi preview` (or with `preview=False`, `pulumi up`) runs it."""
    (project / f"Pulumi.{stack}.yaml").write_text(json.dumps({"config": config}))
    return record_program(stack, project, preview, reveal_secrets)


def refusal(project: Path, config: dict[str, Any], preview: bool = True) -> list[tuple[str, str]]:
    """The problems of the copied program's ConfigError (its own class, imported from `project`)."""
    with pytest.raises(RunError) as error:
        run(project, config, preview=preview)
    assert type(error.value).__name__ == "ConfigError"
    return error.value.problems  # type: ignore[attr-defined]


# --- plain text --------------------------------------------------------------------------------------------


def test_a_plain_password_beside_encrypted_ones_is_refused_by_its_key_path_without_its_value(project: Path):
    problems = refusal(project, {"rabbitmq-retry:vhosts": [shop("billing", "billing.svc", "shipping")],
                                 "rabbitmq-retry:passwords": {"billing": SECURE, "billing.svc": PLAIN,
                                                              "shipping": 12345}})
    assert problems == [
        ("passwords.shipping", "expected a string, got int: `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.shipping' <password>`"),
        ('passwords["billing.svc"]', "stored in plain text in the stack file; encrypt it: `pulumi config set "
         "--secret --path 'rabbitmq-retry:passwords[\"billing.svc\"]' <password>` (and change that password: the "
         "plain one may be in version control)"),
        ("passwords.shipping", "stored in plain text in the stack file; encrypt it: `pulumi config set --secret "
         "--path 'rabbitmq-retry:passwords.shipping' <password>` (and change that password: the plain one may be "
         "in version control)"),
    ]
    assert PLAIN not in str(problems) and "12345" not in str(problems)


def test_passwords_all_in_plain_text_are_refused_each_by_its_path(project: Path):
    problems = refusal(project, {"rabbitmq-retry:vhosts": [shop("billing")],
                                 "rabbitmq-retry:passwords": {"billing": PLAIN}})
    assert [path for path, _ in problems] == ["passwords.billing"]
    assert PLAIN not in str(problems)


def test_encrypted_passwords_pass_and_reach_only_the_user_as_a_secret(project: Path):
    resources = run(project, {"rabbitmq-retry:vhosts": [shop("billing")],
                              "rabbitmq-retry:passwords": {"billing": SECURE}})
    (user,) = [r for r in resources if r.type == USER]
    assert user.secret is True and is_secret_placeholder(user.inputs["password"])
    assert [r.name for r in resources if r.secret] == [user.name]


# --- missing passwords -------------------------------------------------------------------------------------


def test_an_update_refuses_a_missing_password_before_registering_anything(project: Path):
    assert refusal(project, {"rabbitmq-retry:vhosts": [shop("billing", "billing.svc")],
                             "rabbitmq-retry:passwords": {"billing": SECURE}}, preview=False) == [
        ("vhosts[shop].applications[billing.svc].user", "no password for \"billing.svc\": `pulumi config set --secret "
                                                        "--path "
         "'rabbitmq-retry:passwords[\"billing.svc\"]' <password>`"),
    ]


def test_a_preview_plans_a_missing_password_as_a_secret_placeholder_and_warns(project: Path,
                                                                               caplog: pytest.LogCaptureFixture):
    config = {"rabbitmq-retry:vhosts": [shop("billing", "billing.svc")],
              "rabbitmq-retry:passwords": {"billing": SECURE}}
    with caplog.at_level(logging.WARNING):
        revealed = run(project, config, reveal_secrets=True)
        again = run(project, config, reveal_secrets=True)
        shown = run(project, config)
    users = {r.inputs["name"]: r for r in revealed if r.type == USER}
    assert sorted(users) == ["billing", "billing.svc"] and all(u.secret for u in users.values())
    assert is_secret_placeholder(users["billing"].inputs["password"])
    placeholder = users["billing.svc"].inputs["password"]
    assert placeholder and not is_secret_placeholder(placeholder)
    assert placeholder != next(r for r in again if r.type == USER and r.inputs["name"] == "billing.svc"
                               ).inputs["password"]  # a new one each run: nobody can know it
    assert [r.name for r in revealed if placeholder in json.dumps(r.inputs) or placeholder in json.dumps(r.outputs)
            ] == [users["billing.svc"].name]
    # Plans and reviews show it as a secret, the same every run, so a review sees no change.
    assert {r.inputs["name"]: r.inputs["password"] for r in shown if r.type == USER}["billing.svc"] == (
        SECRET_MARKER)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert ('no password for application user "billing.svc": this preview uses a placeholder and `pulumi up` will '
            "refuse; set it with `pulumi config set --secret --path 'rabbitmq-retry:passwords[\"billing.svc\"]' "
            "<password>`") in warnings
    assert not any(placeholder in warning for warning in warnings)


def test_a_preview_still_refuses_plain_text(project: Path):
    problems = refusal(project, {"rabbitmq-retry:vhosts": [shop("billing")],
                                 "rabbitmq-retry:passwords": {"billing": PLAIN}})
    assert [path for path, _ in problems] == ["passwords.billing"]


# --- lock-out ----------------------------------------------------------------------------------------------


LOCK_OUT = ("pulumi up would overwrite the deploying user's tags and password mid-deploy; give the application "
            "its own user")


def test_the_provider_user_from_config_cannot_be_an_application(project: Path):
    assert refusal(project, {"rabbitmq:username": "deployer",
                             "rabbitmq-retry:vhosts": [shop("billing", "deployer")],
                             "rabbitmq-retry:passwords": {"billing": SECURE, "deployer": SECURE}}) == [
        ("vhosts[shop].applications[deployer].user",
         f'"deployer" is the provider\'s user (rabbitmq:username or RABBITMQ_USERNAME): {LOCK_OUT}'),
    ]


def test_the_provider_user_from_the_environment_cannot_be_an_application(project: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RABBITMQ_USERNAME", "deployer")
    problems = refusal(project, {"rabbitmq-retry:vhosts": [shop("deployer")],
                                 "rabbitmq-retry:passwords": {"deployer": SECURE}})
    assert problems == [("vhosts[shop].applications[deployer].user",
                         f'"deployer" is the provider\'s user (rabbitmq:username or RABBITMQ_USERNAME): {LOCK_OUT}')]


def test_the_config_username_is_the_provider_user_even_when_the_environment_names_another(
        project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RABBITMQ_USERNAME", "billing")
    resources = run(project, {"rabbitmq:username": "deployer", "rabbitmq-retry:vhosts": [shop("billing")],
                              "rabbitmq-retry:passwords": {"billing": SECURE}})
    assert [r.inputs["name"] for r in resources if r.type == USER] == ["billing"]

