"""Application users under Pulumi's mocks: derived permissions, secret passwords, config errors, and the
vhost settings (operator policies, limits, default queue type) that reach the provider."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components import Vhost
from components.config.load import load_stack_config
from components.config.passwords import password_problems
from components.model.problems import ConfigError
from tests.conftest import of_type
from tests.support.problems import config_problems
from tools.lib.mockrun import Registered, record, record_program

USER = "rabbitmq:index/user:User"
PERMISSIONS = "rabbitmq:index/permissions:Permissions"
TOPIC_PERMISSIONS = "rabbitmq:index/topicPermissions:TopicPermissions"
EXCHANGE = "rabbitmq:index/exchange:Exchange"
VHOST = "rabbitmq:index/vHost:VHost"
OPERATOR_POLICY = "rabbitmq:index/operatorPolicy:OperatorPolicy"
PASSWORDS = {"billing-app": "s3cret", "shipping-app": "sh1pping-pw"}


def shop(**overrides: Any) -> dict[str, Any]:
    """Dotted names throughout: two retryable queues, a plain queue and two applications."""
    config: dict[str, Any] = {
        "name": "shop",
        "exchanges": [{"name": "shop.orders", "type": "topic"}, {"name": "shop.payments", "type": "topic"}],
        "queues": [
            {"name": "orders.billing", "bindings": [{"exchange": "shop.orders", "routing_key": "order.#"}],
             "retry": {"delays": ["1s", "10s"]}},
            {"name": "orders.shipping", "bindings": [{"exchange": "shop.orders", "routing_key": "order.*"}],
             "retry": {"delays": ["5s"]}},
            {"name": "audit.log", "bindings": [{"exchange": "shop.orders", "routing_key": "#"}]},
        ],
        "applications": [
            {"user": "billing-app", "publishes": ["shop.payments"], "consumes": ["orders.billing"],
             "topic_permissions": [{"exchange": "shop.payments", "write": r"^payment\.", "read": ".*"}]},
            {"user": "shipping-app", "publishes": ["shop.orders", "shop.payments"],
             "consumes": ["orders.shipping", "audit.log"]},
        ],
    }
    config.update(overrides)
    return config


def record_shop(config: dict[str, Any] | None = None, passwords: dict[str, str] | None = None) -> list[Registered]:
    raw = config or shop()
    secrets = {user: pulumi.Output.secret(pw) for user, pw in (passwords or PASSWORDS).items()}
    return record(lambda: Vhost("shop", {"vhost": raw, "passwords": secrets}))


# --- derived permissions --------------------------------------------------------------------------

def test_permissions_are_derived_exactly_anchored_and_escaped():
    permissions = of_type(record_shop(), PERMISSIONS)
    assert set(permissions) == {"shop-permissions-billing-app", "shop-permissions-shipping-app"}
    assert permissions["shop-permissions-billing-app"].inputs == {
        "user": "billing-app", "vhost": "shop", "permissions": {
            "configure": "^$",
            "write": r"^(orders\.billing\.error|orders\.billing\.retry|shop\.payments)$",
            "read": r"^(orders\.billing)$",
        }}
    assert permissions["shop-permissions-shipping-app"].inputs == {
        "user": "shipping-app", "vhost": "shop", "permissions": {
            "configure": "^$",
            "write": r"^(orders\.shipping\.error|orders\.shipping\.retry|shop\.orders|shop\.payments)$",
            "read": r"^(audit\.log|orders\.shipping)$",
        }}


def test_the_regexes_match_the_granted_names_and_nothing_else():
    """RabbitMQ searches the regex in the name (re:run): only the anchors make it exact."""
    grant = of_type(record_shop(), PERMISSIONS)["shop-permissions-billing-app"].inputs["permissions"]
    granted_write = ["shop.payments", "orders.billing.retry", "orders.billing.error"]
    assert [name for name in granted_write if re.search(grant["write"], name)] == granted_write
    not_granted = ["shop.orders", "orders.billing.requeue", "orders.shipping.retry", "orders.shipping.error",
                   "shopXpayments", "shop.payments.x", "x.shop.payments", "orders.billing", "amq.default", ""]
    assert [name for name in not_granted if re.search(grant["write"], name)] == []
    assert re.search(grant["read"], "orders.billing")
    assert [name for name in ("orders.billing.error", "orders.billing.wait.1", "ordersXbilling", "orders.shipping",
                              "orders.billing2") if re.search(grant["read"], name)] == []
    assert [name for name in ("orders.billing", "billing.x", "") if re.search(grant["configure"], name)] == [""]


def test_a_plain_queue_consumer_gets_no_retry_or_error_write():
    config = shop(applications=[{"user": "audit-app", "publishes": ["shop.orders"], "consumes": ["audit.log"]}])
    (grant,) = of_type(record_shop(config, {"audit-app": "pw"}), PERMISSIONS).values()
    assert grant.inputs["permissions"] == {"configure": "^$", "write": r"^(shop\.orders)$", "read": r"^(audit\.log)$"}


def test_an_application_with_nothing_to_publish_gets_write_nothing():
    config = shop(applications=[{"user": "audit-app", "consumes": ["audit.log"]},
                                {"user": "idle-app"}])
    permissions = of_type(record_shop(config, {"audit-app": "pw", "idle-app": "pw2"}), PERMISSIONS)
    assert permissions["shop-permissions-audit-app"].inputs["permissions"] == {
        "configure": "^$", "write": "^$", "read": r"^(audit\.log)$"}
    assert permissions["shop-permissions-idle-app"].inputs["permissions"] == {
        "configure": "^$", "write": "^$", "read": "^$"}
    assert not re.search("^$", "amq.default")  # the default exchange's name in permission checks


def test_topic_permissions_are_registered_only_where_configured():
    topic = of_type(record_shop(), TOPIC_PERMISSIONS)
    assert list(topic) == ["shop-topic-permissions-billing-app"]
    assert topic["shop-topic-permissions-billing-app"].inputs == {
        "user": "billing-app", "vhost": "shop",
        "permissions": [{"exchange": "shop.payments", "write": r"^payment\.", "read": ".*"}]}


# RabbitMQ 4.3 refuses topic permissions for a missing exchange (400 no_such_exchange).
def test_topic_permissions_are_created_after_their_exchange():
    resources = record_shop()
    exchange = of_type(resources, EXCHANGE)["shop-exchange-shop.payments"]
    topic = of_type(resources, TOPIC_PERMISSIONS)["shop-topic-permissions-billing-app"]
    assert exchange.urn in topic.dependencies


def test_users_have_no_tags():
    users = of_type(record_shop(), USER)
    assert {name: (r.inputs["name"], r.inputs["tags"]) for name, r in users.items()} == {
        "shop-user-billing-app": ("billing-app", []), "shop-user-shipping-app": ("shipping-app", [])}


# --- passwords --------------------------------------------------------------------------------------

def test_the_password_is_a_secret_and_in_no_output():
    def register() -> None:
        Vhost("shop", {"vhost": shop(applications=shop()["applications"][:1]),
                       "passwords": {"billing-app": pulumi.Output.secret("s3cret")}})

    (revealed,) = of_type(record(register, reveal_secrets=True), USER).values()
    assert revealed.inputs["password"] == "s3cret"  # the engine receives it, encrypted
    resources = record(register)
    (user,) = of_type(resources, USER).values()
    assert user.secret is True
    assert user.inputs["password"] == "[secret]"  # what plans and reviews show
    others = [r for r in resources if r is not user]
    assert [r.name for r in others if "s3cret" in json.dumps(r.inputs)] == []
    assert [r.name for r in resources if "s3cret" in json.dumps(r.outputs)] == []
    assert [r.name for r in others if r.secret] == []  # permissions stay readable in a preview


def test_a_plain_password_is_made_secret_by_the_component():
    resources = record(lambda: Vhost("shop", {"vhost": shop(applications=shop()["applications"][:1]),
                                              "passwords": {"billing-app": "plain-text"}}))
    (user,) = of_type(resources, USER).values()
    assert user.secret is True


def test_the_program_reads_passwords_from_secret_stack_config(program_copy: Path):
    """`pulumi preview` of a stack whose passwords are `pulumi config set --secret --path` values."""
    app = shop()["applications"][0]
    vhost = shop(applications=[app])
    stack = {"config": {
        "rabbitmq-retry:vhosts": [vhost],
        "rabbitmq-retry:passwords": {"billing-app": {"secure": "AAABAHNlY3JldA=="}},
    }}
    (program_copy / "Pulumi.apps.yaml").write_text(json.dumps(stack))
    resources = record_program("apps", program_copy)
    (user,) = [r for r in resources if r.type == USER]
    assert user.secret is True and user.inputs["name"] == "billing-app"
    assert [r.inputs["user"] for r in resources if r.type == PERMISSIONS] == ["billing-app"]


# --- config errors ----------------------------------------------------------------------------------

def test_an_application_cannot_consume_an_undeclared_queue_or_publish_to_an_undeclared_exchange():
    config = shop(applications=[{"user": "billing-app", "consumes": ["orders.refunds"]},
                                {"user": "shipping-app", "publishes": ["shop.refunds"]}])
    assert config_problems({"vhosts": [config], "passwords": PASSWORDS}) == [
        ("vhosts[shop].applications[billing-app].consumes[0]",
         "'orders.refunds' is not an input or plain queue of this vhost; declare it or remove it here"),
        ("vhosts[shop].applications[shipping-app].publishes[0]",
         "'shop.refunds' is not an exchange of this vhost; declare it or remove it here"),
    ]


def test_applications_reach_the_retry_machinery_only_through_the_contract():
    config = shop(applications=[{"user": "billing-app", "consumes": ["orders.billing.wait.1"],
                                 "publishes": ["orders.shipping.requeue"]}])
    assert config_problems({"vhosts": [config], "passwords": {"billing-app": PASSWORDS["billing-app"]}}) == [
        ("vhosts[shop].applications[billing-app].publishes[0]",
         "'orders.shipping.requeue' is not an exchange of this vhost; declare it or remove it here"),
        ("vhosts[shop].applications[billing-app].consumes[0]",
         "'orders.billing.wait.1' is not an input or plain queue of this vhost; declare it or remove it here"),
    ]


def test_a_consumed_queue_may_not_share_its_name_with_an_exchange():
    # Measured on both brokers: the read grant on "audit.log" would also let the app bind it to an
    # exchange called "audit.log".
    config = shop()
    config["exchanges"].append({"name": "audit.log", "type": "fanout"})
    assert config_problems({"vhosts": [config], "passwords": PASSWORDS}) == [
        ("vhosts[shop].applications[shipping-app].consumes[1]",
         '"audit.log" is also an exchange name: permissions cannot tell them apart, so this application could '
         "bind the queue to that exchange; rename one of them"),
    ]


def test_a_missing_password_is_a_clear_error_for_a_reused_component():
    with pytest.raises(ConfigError) as error:
        Vhost("shop", {"vhost": shop(), "passwords": {"billing-app": "x"}})
    assert error.value.problems == [
        ("Vhost(shop).passwords", "no password for `shipping-app`; pass a secret per application user")]


def test_a_user_cannot_be_an_application_in_two_vhosts():
    second = shop(name="warehouse", applications=[{"user": "billing-app", "consumes": ["audit.log"]}])
    assert config_problems({"vhosts": [shop(), second], "passwords": PASSWORDS}) == [
        ("vhosts[warehouse].applications[billing-app].user",
         'user "billing-app" is also vhosts[shop].applications[billing-app].user; give each application its own user'),
    ]


def test_every_application_needs_a_password():
    config = load_stack_config({"vhosts": [shop()]})
    assert password_problems(config, {"billing-app": "s3cret"}) == [
        ("vhosts[shop].applications[shipping-app].user",
         "no password for \"shipping-app\": `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.shipping-app' <password>`"),
    ]
    assert password_problems(config, None) == [
        ("vhosts[shop].applications[billing-app].user",
         "no password for \"billing-app\": `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.billing-app' <password>`"),
        ("vhosts[shop].applications[shipping-app].user",
         "no password for \"shipping-app\": `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.shipping-app' <password>`"),
    ]


def test_an_operator_policy_takes_only_the_keys_rabbitmq_allows():
    config = shop(operator_policies=[{"name": "cap", "pattern": ".*",
                                      "definition": {"max-length": 5, "dead-letter-exchange": "elsewhere"}}])
    assert config_problems({"vhosts": [config], "passwords": PASSWORDS}) == [
        ("vhosts[shop].operator_policies[cap].definition.dead-letter-exchange",
         "not allowed in an operator policy (allowed: expires, message-ttl, max-length, max-length-bytes, "
         "max-in-memory-length, max-in-memory-bytes, delivery-limit, queue-version, overflow)"),
    ]


def test_limits_are_only_for_a_vhost_this_stack_creates():
    config = shop(existing=True, limits={"max_queues": 10})
    assert config_problems({"vhosts": [config], "passwords": PASSWORDS}) == [
        ("vhosts[shop].limits", "only a vhost this stack creates can be given limits or a default queue type; "
                             "remove it"),
    ]


# --- vhost settings ---------------------------------------------------------------------------------

def test_limits_and_default_queue_type_reach_the_vhost_resource():
    config = shop(limits={"max_connections": 10, "max_queues": 20}, default_queue_type="quorum")
    (vhost,) = of_type(record_shop(config), VHOST).values()
    assert vhost.inputs == {"name": "shop", "maxConnections": "10", "maxQueues": "20", "defaultQueueType": "quorum"}
    (plain,) = of_type(record_shop(), VHOST).values()
    assert plain.inputs == {"name": "shop"}


def test_operator_policies_reach_the_provider_with_string_values():
    config = shop(operator_policies=[{"name": "cap-billing", "pattern": r"^orders\.billing$",
                                      "definition": {"max-length": 5, "overflow": "reject-publish"}}])
    (policy,) = of_type(record_shop(copy.deepcopy(config)), OPERATOR_POLICY).values()
    assert policy.inputs == {"name": "cap-billing", "vhost": "shop", "policy": {
        "pattern": r"^orders\.billing$", "priority": 0, "applyTo": "queues",
        "definition": {"max-length": "5", "overflow": "reject-publish"}}}
