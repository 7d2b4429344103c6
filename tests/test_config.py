"""The stack config: what is accepted, what each field means, and the exact message for each mistake."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.config.load import load_stack_config
from components.config.passwords import password_problems, plain_password_paths, plain_password_problems
from components.model.problems import ConfigError
from components.model.stack_config import Defaults
from components.model.wire import POLICY_KEYS
from tests.conftest import vhost_config
from tests.support.problems import config_problems


def with_queue(queue: dict[str, Any], **vhost: Any) -> dict[str, Any]:
    config = vhost_config(**vhost)
    config["queues"] = [queue]
    return {"vhosts": [config]}


def retryable(**retry: Any) -> dict[str, Any]:
    return {"name": "orders", "bindings": [{"exchange": "events"}], "retry": {"delays": ["1s", "10s"], **retry}}


def test_a_valid_stack_parses_with_defaults_applied(stack_raw):
    config = load_stack_config(stack_raw)
    (vhost,) = config.vhosts
    orders, audit = vhost.queues
    assert (vhost.name, vhost.existing) == ("shop", False)
    assert orders.queue_type == audit.queue_type == "classic"
    assert orders.retry.delays_ms == (1_000, 10_000, 60_000)
    assert orders.retry.max_retries == 5
    assert orders.delivery_limit is None  # classic queues have none
    assert audit.retry is None
    assert config.protect is False and config.defaults.policy_priority == 10


def test_max_retries_defaults_to_the_number_of_delays():
    config = load_stack_config(with_queue(retryable()))
    assert config.vhosts[0].queues[0].retry.max_retries == 2


def test_quorum_queues_get_an_explicit_delivery_limit():
    config = load_stack_config({"defaults": {"queue_type": "quorum"}, "vhosts": [vhost_config()]})
    orders, audit = config.vhosts[0].queues
    assert audit.delivery_limit == Defaults().delivery_limit == 20
    # A retryable queue's limit stays above max_retries: on RabbitMQ 4 each retry counts toward it.
    assert orders.delivery_limit == 20 + orders.retry.max_retries
    config = load_stack_config(with_queue({**retryable(), "type": "quorum", "delivery_limit": 7}))
    assert config.vhosts[0].queues[0].delivery_limit == 7


@pytest.mark.parametrize("limit", [5, 6])
def test_a_delivery_limit_at_or_below_max_retries_plus_one_is_refused(limit: int):
    assert config_problems(with_queue({**retryable(max_retries=5), "type": "quorum", "delivery_limit": limit})) == [
        (
            "vhosts[shop].queues[orders].delivery_limit",
            f"{limit} is not above max_retries + 1 (6): on RabbitMQ 4 each retry counts toward it, and a message "
            "over it jams in a dead-letter cycle; raise it or leave it unset (default: defaults.delivery_limit + "
            "max_retries)",
        )
    ]


def test_a_delivery_limit_too_low_is_said_beside_the_queues_other_problems():
    queue = {**retryable(max_retries=5), "type": "quorum", "delivery_limit": 6, "max_length": -1}
    assert [path for path, _ in config_problems(with_queue(queue))] == [
        "vhosts[shop].queues[orders].max_length", "vhosts[shop].queues[orders].delivery_limit"]

def test_the_default_vhost_is_referenced_never_managed():
    config = load_stack_config({"vhosts": [vhost_config(name="/")]})
    assert config.vhosts[0].existing is True
    assert config_problems({"vhosts": [vhost_config(name="/", existing=False)]}) == [
        ("vhosts[/].existing", 'the default vhost "/" is never managed by this stack; remove existing: false')
    ]


def test_external_exchanges_may_be_reserved_amq_exchanges():
    queue = {"name": "q", "bindings": [{"exchange": "amq.topic", "routing_key": "#", "external": True}]}
    config = load_stack_config(with_queue(queue))
    assert config.vhosts[0].queues[0].bindings[0].external is True


BAD_CONFIGS = [
    pytest.param(
        with_queue(retryable(delays=["1s", "10x"])),
        [("vhosts[shop].queues[orders].retry.delays[1]",
          '"10x" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)')],
        id="not-a-duration",
    ),
    pytest.param(
        with_queue(retryable(delays=["10s", "10s"])),
        [
            (
                "vhosts[shop].queues[orders].retry.delays[1]",
                '"10s" is not longer than the delay before it; delays must be strictly increasing',
            )
        ],
        id="delays-not-increasing",
    ),
    pytest.param(
        with_queue(retryable(delays=["0ms"])),
        [("vhosts[shop].queues[orders].retry.delays[0]", '"0ms" is out of range (1ms … 4294967295ms, about 49 days)')],
        id="delay-out-of-range",
    ),
    pytest.param(
        with_queue(retryable(delays=[])),
        [("vhosts[shop].queues[orders].retry.delays", "empty; list at least one delay, e.g. [10s]")],
        id="no-delays",
    ),
    pytest.param(
        with_queue({"name": "orders", "retry": {"max_retries": 3}}),
        [("vhosts[shop].queues[orders].retry.delays", "missing; list one delay per wait tier, e.g. [1s, 10s, 1m]")],
        id="missing-delays",
    ),
    pytest.param(
        with_queue(retryable(max_retries=0)),
        [("vhosts[shop].queues[orders].retry.max_retries", "0 is out of range (use 1 … 10000)")],
        id="max-retries-zero",
    ),
    pytest.param(
        with_queue(retryable(max_retries="3")),
        [("vhosts[shop].queues[orders].retry.max_retries", "expected an integer, got '3'")],
        id="max-retries-string",
    ),
    pytest.param(
        with_queue({**retryable(), "retries": 3}),
        [
            (
                "vhosts[shop].queues[orders].retries",
                'unknown key; did you mean "retry"? (allowed: name, type, bindings, max_length, delivery_limit, retry, '
                "policy_priority, max_length_bytes, message_ttl, single_active_consumer, quorum_group_size, arguments, "
                "alerts)",
            )
        ],
        id="unknown-key",
    ),
    pytest.param(
        {"vhosts": [vhost_config()], "protekt": True},
        [("rabbitmq-retry:protekt", 'unknown key; did you mean "rabbitmq-retry:protect"? (allowed: '
                                    "rabbitmq-retry:protect, rabbitmq-retry:retain_error_queues, "
                                    "rabbitmq-retry:defaults, rabbitmq-retry:vhosts, rabbitmq-retry:passwords, "
                                    "rabbitmq-retry:broker, rabbitmq-retry:delete_with_messages, "
                                    "rabbitmq-retry:amqp_port, rabbitmq-retry:alerts)")],
        id="unknown-top-level-key",
    ),
    pytest.param(
        with_queue({**retryable(), "type": "stream"}),
        [("vhosts[shop].queues[orders].type", "'stream' is not one of classic, quorum")],
        id="bad-queue-type",
    ),
    pytest.param(
        with_queue({**retryable(), "type": "classic", "delivery_limit": 5}),
        [("vhosts[shop].queues[orders].delivery_limit",
          "delivery-limit is quorum-only; remove it or set type: quorum")],
        id="quorum-option-on-classic",
    ),
    pytest.param(
        with_queue({"name": "a@b"}),
        [("vhosts[shop].queues[a@b].name", '"a@b": "@" breaks the provider\'s name@vhost IDs; rename the queue')],
        id="at-sign",
    ),
    pytest.param(
        with_queue({"name": "a/b"}),
        [("vhosts[shop].queues[a/b].name", '"a/b": "/" breaks the provider\'s binding IDs; rename the queue')],
        id="slash",
    ),
    pytest.param(
        with_queue({"name": "amq.mine"}),
        [("vhosts[shop].queues[amq.mine].name",
          '"amq.mine": the "amq." prefix is reserved by RabbitMQ; rename the queue')],
        id="reserved-prefix",
    ),
    pytest.param(
        with_queue({"name": ""}),
        [("vhosts[shop].queues[0].name", "queue name must be a non-empty string, got ''")],
        id="empty-name",
    ),
    pytest.param(
        with_queue({"name": "q" * 250, "retry": {"delays": ["1s"]}}),
        [(f"vhosts[shop].queues[{'q' * 250}].name",
          f'derived name "{"q" * 40}…" is over 255 bytes; shorten the queue name')],
        id="derived-name-too-long",
    ),
    pytest.param(
        with_queue({"name": "q", "bindings": [{"exchange": "nowhere"}]}),
        [
            (
                "vhosts[shop].queues[q].bindings[0].exchange",
                '"nowhere" is not declared in this vhost; add it to exchanges or mark the binding external: true',
            )
        ],
        id="undeclared-exchange",
    ),
    pytest.param(
        with_queue({"name": "q", "bindings": [{"exchange": "events", "external": True}]}),
        [("vhosts[shop].queues[q].bindings[0].external", '"events" is declared in this vhost; remove external: true')],
        id="external-but-declared",
    ),
    pytest.param(
        with_queue({"name": "q", "bindings": [{"exchange": "events", "routing_key": 42}]}),
        [("vhosts[shop].queues[q].bindings[0].routing_key", 'expected a string, got 42 (quote digits: "42")')],
        id="numeric-routing-key",
    ),
    pytest.param(
        with_queue({"name": "q", "bindings": [{"exchange": "events", "arguments": {"kind": "a"}}]}),
        [
            (
                "vhosts[shop].queues[q].bindings[0].arguments",
                'binding arguments only match on headers exchanges; "events" is topic',
            )
        ],
        id="arguments-on-topic",
    ),
    pytest.param(
        {"vhosts": [vhost_config(exchanges=[{"name": "events", "type": "x-delayed-message"}])]},
        [("vhosts[shop].exchanges[events].type", "'x-delayed-message' is not one of direct, topic, fanout, headers")],
        id="bad-exchange-type",
    ),
    pytest.param(
        {"vhosts": [vhost_config(), vhost_config()]},
        [("vhosts[1].name", 'duplicate vhost "shop" (also vhosts[0]); merge them')],
        id="duplicate-vhost",
    ),
    pytest.param(
        {"vhosts": [vhost_config(queues=[{"name": "a"}, {"name": "a"}])]},
        [("vhosts[shop].queues[1].name", 'duplicate queue "a" (also vhosts[shop].queues[0].name); keep one')],
        id="duplicate-queue",
    ),
    pytest.param(
        # One problem, not one per queue and exchange the retryable queue derives.
        {"vhosts": [vhost_config(queues=[{"name": "a", "retry": {"delays": ["1s"]}},
                                         {"name": "a", "retry": {"delays": ["1s"]}}])]},
        [("vhosts[shop].queues[1].name", 'duplicate queue "a" (also vhosts[shop].queues[0].name); keep one')],
        id="duplicate-retryable-queue",
    ),
    pytest.param(
        # One problem: the bindings to `events` are not also reported as undeclared.
        {"vhosts": [vhost_config(exchanges={"events": {"type": "topic"}})]},
        [("vhosts[shop].exchanges", "expected a list, got dict")],
        id="exchanges-as-a-map",
    ),
    pytest.param(
        {"vhosts": [vhost_config(queues=[{"name": "a", "type": "quorum", "retry": {"strategy": "level"}}],
                                 delay_levels={"unit": "1s", "max_delay": "1m"})]},
        [("vhosts[shop].queues[a].retry.strategy", "'level' is not one of tiers, levels, native; did you mean "
                                                '"levels"?')],
        id="misspelt-strategy",
    ),
    pytest.param(
        {"vhosts": [vhost_config(queues=[{"name": "a", "retry": {"delays": ["1s"]}}, {"name": "a.error"}])]},
        [
            (
                "vhosts[shop].queues[a.error].name",
                'queue "a.error" is also declared by vhosts[shop].queues[a].name; rename one of them',
            )
        ],
        id="clash-with-derived-queue",
    ),
    pytest.param(
        {
            "vhosts": [
                vhost_config(
                    exchanges=[{"name": "a.retry", "type": "direct"}],
                    queues=[{"name": "a", "retry": {"delays": ["1s"]}}],
                )
            ]
        },
        [
            (
                "vhosts[shop].queues[a].name",
                'exchange "a.retry" is also declared by vhosts[shop].exchanges[a.retry].name; rename one of them',
            )
        ],
        id="clash-with-derived-exchange",
    ),
    pytest.param(
        {"vhosts": [vhost_config(name="a@b")]},
        [("vhosts[a@b].name", '"a@b": "@" breaks the provider\'s name@vhost IDs; rename the vhost')],
        id="vhost-at-sign",
    ),
    pytest.param(
        with_queue(retryable(delays=None)),
        [("vhosts[shop].queues[orders].retry.delays", "null; list one delay per wait tier, e.g. [1s, 10s, 1m]")],
        id="delays-null",
    ),
    pytest.param(
        with_queue(retryable(delays=["1" * 5000 + "ms"])),
        [("vhosts[shop].queues[orders].retry.delays[0]",
          f'"{"1" * 20}…" is out of range (1ms … 4294967295ms, about 49 days)')],
        id="huge-duration",
    ),
    pytest.param(
        with_queue({"name": "q", "bindings": [{"exchange": "events"}] * 2}),
        [("vhosts[shop].queues[q].bindings[1]", "duplicate of bindings[0]; remove one")],
        id="duplicate-binding",
    ),
    pytest.param(
        {
            "vhosts": [
                vhost_config(
                    policies=[
                        {"name": "p", "pattern": "^a$", "definition": {"max-length": 1}},
                        {"name": "p", "pattern": "^b$", "definition": {"max-length": 1}},
                    ]
                )
            ]
        },
        [("vhosts[shop].policies[1].name",
          'duplicate policy "p" (also vhosts[shop].policies[0]); rename or merge them')],
        id="duplicate-policy",
    ),
    pytest.param(
        {
            "vhosts": [
                vhost_config(policies=[None, {"name": "audit", "pattern": "^a$", "definition": {"max-length": 1}}])
            ]
        },
        [
            ("vhosts[shop].policies[0]", "expected a mapping, got null"),
            (
                "vhosts[shop].policies[audit].name",
                '"audit" is the name of a policy this stack derives for that queue; rename the policy',
            ),
        ],
        id="policy-paths-count-refused-entries",
    ),
    pytest.param(
        {"vhosts": None},
        [("vhosts", "null; list the vhosts, or write [] to manage none (that deletes what this stack created)")],
        id="vhosts-null",
    ),
    pytest.param(
        {"vhosts": [vhost_config(name=" shop")]},
        [('vhosts[" shop"].name', '" shop": leading or trailing whitespace; remove it')],
        id="vhost-whitespace",
    ),
    pytest.param(
        with_queue(retryable(delays=["٣s"])),
        [("vhosts[shop].queues[orders].retry.delays[0]",
          '"٣s" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)')],
        id="non-ascii-digits",
    ),
    pytest.param({"vhosts": "shop"}, [("vhosts", "expected a list, got str")], id="vhosts-not-a-list"),
    pytest.param(
        with_queue(retryable(delays="2s")),
        [("vhosts[shop].queues[orders].retry.delays", "expected a list, got str; write delays: [2s]")],
        id="delays-not-a-list",
    ),
    pytest.param(
        with_queue(retryable(delays="1s, 10s")),
        [("vhosts[shop].queues[orders].retry.delays", "expected a list, got str; write delays: [1s, 10s]")],
        id="delays-comma-separated-not-a-list",
    ),
    pytest.param(
        with_queue(retryable(delays="a: b")),
        [("vhosts[shop].queues[orders].retry.delays", 'expected a list, got str; write delays: ["a: b"]')],
        id="delays-not-a-list-quoted-where-yaml-needs-it",
    ),
    pytest.param(
        {}, [("vhosts", "missing; set rabbitmq-retry:vhosts to a list of vhosts (see docs/config.md)")], id="no-vhosts"
    ),
    pytest.param(
        {"vhosts": [vhost_config()], "protect": "yes"},
        [("protect", "expected true or false, got 'yes'")],
        id="protect-not-bool",
    ),
    pytest.param(
        {"vhosts": [vhost_config()], "defaults": {"queue_type": "lazy"}},
        [("defaults.queue_type", "'lazy' is not one of classic, quorum")],
        id="bad-default",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), BAD_CONFIGS)
def test_each_mistake_is_reported_with_its_key_path_and_a_fix(raw, expected):
    assert config_problems(raw) == expected


def test_every_problem_is_reported_at_once():
    raw = with_queue(retryable(delays=["1s", "10x"], max_retries=-1))
    raw["vhosts"][0]["queues"].append({"name": "a@b", "type": "fifo"})
    paths = [path for path, _ in config_problems(raw)]
    assert paths == [
        "vhosts[shop].queues[orders].retry.delays[1]",
        "vhosts[shop].queues[orders].retry.max_retries",
        "vhosts[shop].queues[a@b].name",
        "vhosts[shop].queues[a@b].type",
    ]


def test_the_error_message_lists_each_problem_on_its_own_line():
    with pytest.raises(ConfigError) as error:
        load_stack_config(with_queue(retryable(delays=["1s", "10x"])))
    assert str(error.value) == (
        "invalid rabbitmq-retry config (1 problem):\n"
        '  vhosts[shop].queues[orders].retry.delays[1]: "10x" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'
    )


def test_config_errors_print_without_a_traceback_in_pulumi_and_are_plain_below_it():
    """Pulumi prints a RunError's message alone: the public loaders and the components raise one, with the
    pure layer's problems and message; the pure layers raise a plain exception and import no Pulumi."""
    import pulumi

    import components

    raw = with_queue(retryable(delays=["1s", "10x"]))
    with pytest.raises(ConfigError) as plain:
        load_stack_config(raw)
    assert not isinstance(plain.value, pulumi.RunError)
    with pytest.raises(pulumi.RunError) as reported:
        components.load_stack_config(raw)
    assert isinstance(reported.value, ConfigError)
    assert (str(reported.value), reported.value.problems) == (str(plain.value), plain.value.problems)
    assert reported.value.__cause__ is None and reported.value.__suppress_context__


def test_parsing_does_not_mutate_the_input(stack_raw):
    before = copy.deepcopy(stack_raw)
    load_stack_config(stack_raw)
    assert stack_raw == before


# --- a refused entry still declares its name: one mistake, one problem -----------------------------------------

BILLING = {"user": "billing-app", "consumes": ["orders"], "publishes": ["events"],
           "topic_permissions": [{"exchange": "events", "write": ".*"}]}


def with_billing(**vhost: Any) -> dict[str, Any]:
    return {"vhosts": [vhost_config(applications=[BILLING], **vhost)]}


def test_a_lone_name_where_a_list_of_names_is_expected_is_suggested_as_that_list():
    """Each list of names (like retry.delays) shows the value written alone as the list it stands for."""
    application = {**BILLING, "publishes": "events", "consumes": "orders"}
    assert config_problems({"vhosts": [vhost_config(applications=[application])]}) == [
        ("vhosts[shop].applications[billing-app].publishes", "expected a list, got str; write publishes: [events]"),
        ("vhosts[shop].applications[billing-app].consumes", "expected a list, got str; write consumes: [orders]"),
    ]


def bad_orders(**change: Any) -> list[dict[str, Any]]:
    """The conftest queues with `orders` changed; `audit` stays valid."""
    orders, audit = vhost_config()["queues"]
    return [{**orders, **change}, audit]


FOLLOW_ON_FREE = [
    pytest.param(
        with_billing(queues=bad_orders(retry={"delays": ["1s", "10x"]})),
        [("vhosts[shop].queues[orders].retry.delays[1]",
          '"10x" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)')],
        id="consumed-queue-with-a-bad-delay",
    ),
    pytest.param(
        with_billing(queues=bad_orders(bindings=[{"exchange": "events", "routing_key": 42}])),
        [("vhosts[shop].queues[orders].bindings[0].routing_key", 'expected a string, got 42 (quote digits: "42")')],
        id="consumed-queue-with-a-bad-binding",
    ),
    pytest.param(
        with_billing(queues=bad_orders(type="stream")),
        [("vhosts[shop].queues[orders].type", "'stream' is not one of classic, quorum")],
        id="consumed-queue-with-a-bad-type",
    ),
    pytest.param(
        with_billing(queues=bad_orders(name="orders", delivery_limit=0)),
        [("vhosts[shop].queues[orders].delivery_limit", "0 is out of range (use >= 1)")],
        id="consumed-queue-with-a-bad-delivery-limit",
    ),
    pytest.param(
        with_billing(exchanges=[{"name": "events", "type": "x-delayed-message"}]),
        [("vhosts[shop].exchanges[events].type", "'x-delayed-message' is not one of direct, topic, fanout, headers")],
        id="exchange-with-a-bad-type-bound-published-and-topic-limited",
    ),
    pytest.param(
        {"vhosts": [vhost_config(
            queues=bad_orders(bindings=[{"exchange": "amq.topic", "external": True}], retry={"delays": []}),
            applications=[{"user": "billing-app", "publishes": ["amq.topic"]}])]},
        [("vhosts[shop].queues[orders].retry.delays", "empty; list at least one delay, e.g. [10s]")],
        id="external-exchange-named-only-by-a-refused-queue",
    ),
    pytest.param(
        {"vhosts": [vhost_config(queues=bad_orders(name="orders@eu"),
                                 applications=[{"user": "billing-app", "consumes": ["orders@eu"]}])]},
        [("vhosts[shop].queues[orders@eu].name",
          '"orders@eu": "@" breaks the provider\'s name@vhost IDs; rename the queue')],
        id="consumed-queue-with-a-bad-name-is-reported-once",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), FOLLOW_ON_FREE)
def test_a_refused_entry_still_declares_its_name(raw, expected):
    assert config_problems(raw) == expected


def test_a_refused_entry_still_takes_part_in_duplicate_checks():
    orders, _ = bad_orders(retry={"delays": ["10x"]})
    raw = {"vhosts": [vhost_config(queues=[orders, {"name": "orders"}])]}
    assert config_problems(raw) == [
        ("vhosts[shop].queues[0].retry.delays[0]", '"10x" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
        ("vhosts[shop].queues[1].name", 'duplicate queue "orders" (also vhosts[shop].queues[0].name); keep one'),
    ]


# --- passwords -------------------------------------------------------------------------------------------------


def with_users(*users: str) -> dict[str, Any]:
    return {"vhosts": [vhost_config(applications=[{"user": user} for user in users])]}


def test_the_config_loads_without_passwords_and_password_problems_names_each_missing_one():
    config = load_stack_config(with_users("billing", "shipping"))
    assert password_problems(config, {"billing": "s3cret"}) == [
        ("vhosts[shop].applications[shipping].user",
         "no password for \"shipping\": `pulumi config set --secret --path 'rabbitmq-retry:passwords.shipping' "
         "<password>`"),
    ]
    assert password_problems(config, {"billing": "s3cret", "shipping": "pw", "stale": "unused"}) == []


def test_a_password_filed_under_a_user_nobody_declares_is_a_problem_with_the_closest_user():
    raw = {**with_users("billing-app", "shipping"), "passwords": {"biling-app": "pw", "shipping": "pw"}}
    with pytest.raises(ConfigError) as error:
        load_stack_config(raw)
    assert error.value.problems == [
        ("passwords.biling-app", 'no application or operator declares user "biling-app"; did you mean "billing-app"? '
                                 "file the password under the user that needs it, or remove it (users: billing-app, "
                                 "shipping)")]
    load_stack_config({**with_users("billing-app"), "passwords": {"billing-app": "pw"}})


def test_an_empty_or_non_string_password_is_a_problem():
    config = load_stack_config(with_users("billing", "shipping"))
    assert password_problems(config, {"billing": "", "shipping": 42}) == [
        ("vhosts[shop].applications[billing].user",
         "the password for \"billing\" is empty: `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.billing' <password>`"),
        ("vhosts[shop].applications[shipping].user",
         "the password for \"shipping\" is int, not a string: `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.shipping' <password>`"),
    ]


def test_passwords_that_are_not_a_mapping_are_a_problem_for_the_config_and_for_password_problems():
    not_a_mapping = ("passwords", "expected a mapping of application user to password, set with "
                     "`pulumi config set --secret --path 'rabbitmq-retry:passwords.<user>' <password>`")
    assert config_problems({**with_users("billing"), "passwords": "s3cret"}) == [not_a_mapping]
    assert password_problems(load_stack_config(with_users("billing")), "s3cret") == [
        not_a_mapping,
        ("vhosts[shop].applications[billing].user", "no password for \"billing\": `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.billing' <password>`"),
    ]


def test_a_password_that_is_not_a_string_is_refused_by_the_config():
    assert config_problems({**with_users("billing.svc"), "passwords": {"billing.svc": 42}}) == [
        ('passwords["billing.svc"]', "expected a string, got int: `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords[\"billing.svc\"]' <password>`"),
    ]


@pytest.mark.parametrize(("user", "command"), [
    ("billing", "pulumi config set --secret --path 'rabbitmq-retry:passwords.billing' <password>"),
    ("billing-app_2", "pulumi config set --secret --path 'rabbitmq-retry:passwords.billing-app_2' <password>"),
    ("billing.svc", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"billing.svc\"]' <password>"),
    ("amq.svc", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"amq.svc\"]' <password>"),
    ("x[0]", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"x[0]\"]' <password>"),
    ('say "hi"', "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"say \\\"hi\\\"\"]' <password>"),
    ("o'neil", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"o'\\''neil\"]' <password>"),
    ("billing svc", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"billing svc\"]' <password>"),
    ("42-app", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"42-app\"]' <password>"),
    ("team:billing", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"team:billing\"]' <password>"),
    ("ünï", "pulumi config set --secret --path 'rabbitmq-retry:passwords[\"ünï\"]' <password>"),
])
def test_the_password_hint_is_a_working_command_for_every_user_name(user, command):
    """The key path names the application by its user: bare, or as a JSON string when the name holds a bracket, a
    quote or whitespace (or is all digits)."""
    config = load_stack_config(with_users(user))
    shown = {"x[0]": '"x[0]"', 'say "hi"': '"say \\"hi\\""', "billing svc": '"billing svc"'}.get(user, user)
    assert password_problems(config, {}) == [
        (f"vhosts[shop].applications[{shown}].user", f'no password for "{user}": `{command}`')]


def test_a_name_no_property_path_can_spell_is_told_to_be_renamed():
    config = load_stack_config(with_users("billing.svc\\"))
    assert password_problems(config, {}) == [
        ("vhosts[shop].applications[billing.svc\\].user",
         'no password for "billing.svc\\": no `pulumi config set --path` can name this user (it ends with a '
         'backslash and needs `["…"]`); rename the user'),
    ]


def test_no_password_value_appears_in_a_problem():
    raw = {**with_users("billing", "shipping", "audit"), "passwords": {"billing": 12345, "shipping": ["hunter2"],
                                                                      "audit": {"pw": "hunter3"}}}
    problems = config_problems(raw)
    assert [path for path, _ in problems] == ["passwords.billing", "passwords.shipping", "passwords.audit"]
    assert not any(secret in str(problems) for secret in ("12345", "hunter2", "hunter3"))
    config = load_stack_config(with_users("billing", "shipping"))
    assert not any(secret in str(password_problems(config, {"billing": 12345, "shipping": ["hunter2"]}))
                   for secret in ("12345", "hunter2"))


@pytest.mark.parametrize(("written", "paths"), [
    ({"billing": {"secure": "v1"}, "billing.svc": {"secure": "v2"}}, []),
    ({"billing": {"secure": "v1"}, "billing.svc": "plain", "shipping": 12345},
     ['passwords["billing.svc"]', "passwords.shipping"]),
    ({"billing": {"nested": "plain"}, "shipping": ["a", {"secure": "v"}]},
     ["passwords.billing.nested", "passwords.shipping[0]"]),
    ({"say \"hi\"": "plain"}, ['passwords["say \\"hi\\""]']),
    ({"secure": "whole map encrypted"}, []),
    ("plain", ["passwords"]),
    ({"billing": None}, []),
    (None, []),
])
def test_plain_password_paths_names_every_value_of_the_stack_file_that_is_not_encrypted(written, paths):
    assert plain_password_paths(written) == paths


def test_a_plain_password_problem_names_the_command_that_encrypts_it_and_never_the_value():
    assert plain_password_problems({"billing.svc": "hunter2", "billing": {"secure": "v"}}) == [
        ('passwords["billing.svc"]', "stored in plain text in the stack file; encrypt it: `pulumi config set "
         "--secret --path 'rabbitmq-retry:passwords[\"billing.svc\"]' <password>` (and change that password: the "
         "plain one may be in version control)"),
    ]
    assert plain_password_problems("hunter2") == [
        ("passwords", "stored in plain text in the stack file; remove it with `pulumi config rm "
         "rabbitmq-retry:passwords` and set each password with `pulumi config set --secret --path "
         "'rabbitmq-retry:passwords.<user>' <password>` (and change that password: the plain one may be in "
         "version control)"),
    ]


def test_guest_is_never_an_application_user():
    assert config_problems(with_users("billing", "guest")) == [
        ("vhosts[shop].applications[guest].user",
         "\"guest\" is RabbitMQ's built-in administrator, often the user deploying this stack: pulumi up would "
         "overwrite the deploying user's tags and password mid-deploy; give the application its own user"),
    ]


# --- policy definitions ----------------------------------------------------------------------------------------


def with_policy(definition: dict[str, Any], kind: str = "policies") -> dict[str, Any]:
    return {"vhosts": [vhost_config(**{kind: [{"name": "team", "pattern": "^team\\.", "definition": definition}]})]}


def test_every_policy_key_rabbitmq_knows_is_accepted_with_a_value_it_takes():
    definition = {"alternate-exchange": "ae", "dead-letter-exchange": "dlx", "dead-letter-routing-key": "rk",
                  "dead-letter-strategy": "at-least-once", "message-ttl": 60_000, "expires": "3600000",
                  "max-length": 0, "max-length-bytes": 1_000, "max-in-memory-length": 1, "max-in-memory-bytes": 1,
                  "overflow": "reject-publish-dlx", "delivery-limit": "-1", "queue-mode": "lazy", "queue-version": 2,
                  "queue-leader-locator": "balanced", "initial-cluster-size": 3, "max-age": "7D",
                  "stream-max-segment-size-bytes": 500_000, "consumer-timeout": 1_800_000, "target-group-size": 3,
                  "stream-filter-size-bytes": 32, "delayed-retry-type": "failed", "delayed-retry-min": 1_000,
                  "delayed-retry-max": "60000"}
    assert sorted(definition) == sorted(POLICY_KEYS)
    (policy,) = load_stack_config(with_policy(definition)).vhosts[0].policies
    assert policy.definition == {key: str(value) for key, value in definition.items()}


def test_delayed_retry_keys_in_combinations_rabbitmq_refuses_are_refused():
    # Measured on 4.3.6: tests/broker/test_policy_acceptance.py.
    assert config_problems(with_policy({"delayed-retry-type": "all"})) == [
        ("vhosts[shop].policies[team].definition.delayed-retry-type",
         "'all' needs delayed-retry-min beside it (RabbitMQ "
         "refuses the policy without it); add delayed-retry-min, in ms")]
    assert config_problems(with_policy({"delayed-retry-min": 200, "delayed-retry-max": 100})) == [
        ("vhosts[shop].policies[team].definition.delayed-retry-max", "100 is below delayed-retry-min (200): RabbitMQ "
         "refuses the policy; raise it to 200 or more")]
    assert load_stack_config(with_policy({"delayed-retry-type": "disabled"}))


def test_a_policy_key_rabbitmq_does_not_know_is_refused_with_the_keys_it_knows():
    assert config_problems(with_policy({"x": "true", "max-length": 1})) == [
        ("vhosts[shop].policies[team].definition.x", f"not a policy key RabbitMQ knows (allowed: "
         f"{', '.join(POLICY_KEYS)})"),
    ]


def test_classic_mirroring_keys_are_refused_with_what_to_use_instead():
    assert config_problems(with_policy({"ha-mode": "all", "queue-master-locator": "min-masters"})) == [
        ("vhosts[shop].policies[team].definition.ha-mode",
         "a classic queue mirroring key: RabbitMQ 4.0 removed mirroring (4.3 refuses it); use quorum queues"),
        ("vhosts[shop].policies[team].definition.queue-master-locator",
         "deprecated, and refused by RabbitMQ 4.3; use queue-leader-locator"),
    ]


@pytest.mark.parametrize("kind", ["policies", "operator_policies"])
@pytest.mark.parametrize(("written", "canonical"), [("007", 7), ("+5", 5), ("-0", 0), ("-007", -7)])
def test_a_number_the_provider_would_read_back_differently_is_refused_with_the_number_to_write(kind, written,
                                                                                             canonical):
    assert config_problems(with_policy({"max-length": written}, kind)) == [
        (f"vhosts[shop].{kind}[team].definition.max-length",
         f"'{written}' is sent as the integer {canonical} and read back as \"{canonical}\", so every `pulumi up` "
         f"would update this policy again; write {canonical}"),
    ]


@pytest.mark.parametrize("value", ["true", "false", "1.5", "1_000", " 5", "٣", "1e3", str(2**63)])
def test_an_integer_policy_key_takes_only_an_integer(value):
    assert config_problems(with_policy({"message-ttl": value})) == [
        ("vhosts[shop].policies[team].definition.message-ttl",
         f"{value!r} is not an integer; RabbitMQ takes only an integer for message-ttl"),
    ]


def test_a_word_policy_key_takes_only_its_words():
    assert config_problems(with_policy({"overflow": "true", "queue-mode": "False", "max-age": "true"})) == [
        ("vhosts[shop].policies[team].definition.overflow",
         "'true' is not one of drop-head, reject-publish, reject-publish-dlx"),
        ("vhosts[shop].policies[team].definition.queue-mode", "'False' is not one of default, lazy"),
        ("vhosts[shop].policies[team].definition.max-age",
         "'true' is not a max-age: a count and a unit (Y, M, D, h, m or s), e.g. 7D"),
    ]


def test_a_boolean_is_refused_and_a_name_may_be_true():
    assert config_problems(with_policy({"max-length": True})) == [
        ("vhosts[shop].policies[team].definition.max-length", "expected a string or an integer, got True")]
    (policy,) = load_stack_config(with_policy({"dead-letter-exchange": "true"})).vhosts[0].policies
    assert policy.definition == {"dead-letter-exchange": "true"}


def test_a_queue_s_arguments_are_kept_as_written_and_each_mistake_is_one_line_naming_the_argument() -> None:
    """`queues[].arguments` (what `make adopt` writes for a queue it keeps): sent as they are, in place of the derived
    ones; a value RabbitMQ would refuse is refused before anything reaches a broker."""
    from components.config.load import load_vhost
    from components.plan.planner import plan_vhost

    kept = {"name": "jobs.retry", "type": "classic", "arguments": {"x-message-ttl": 60000, "x-dead-letter-exchange": "",
                                                                   "x-dead-letter-routing-key": "jobs"}}
    plan = plan_vhost(load_vhost(vhost_config(queues=[kept]), "vhosts[0]"), "vhosts[0]")
    assert [dict(q.arguments) for q in plan.queues] == [kept["arguments"]]

    def problems(**entry: Any) -> list[tuple[str, str]]:
        return config_problems({"vhosts": [vhost_config(queues=[{"name": "q", "type": "classic", **entry}])]})

    assert problems(arguments={"x-message-ttl": "60000"}) == [
        ("vhosts[shop].queues[q].arguments.x-message-ttl",
         "'60000': RabbitMQ takes x-message-ttl only as a non-negative integer, e.g. 60000")]
    assert problems(arguments={"x-overflow": "drop"})[0][0] == "vhosts[shop].queues[q].arguments.x-overflow"
    assert problems(arguments={"message-ttl": 5})[0] == (
        "vhosts[shop].queues[q].arguments.message-ttl", "a queue argument's name starts with x- (e.g. x-message-ttl)")
    assert problems(arguments={"x-queue-type": "quorum"})[0][0] == "vhosts[shop].queues[q].arguments.x-queue-type"
    assert config_problems({"vhosts": [vhost_config(queues=[{"name": "q", "type": "quorum", "arguments": {}}])]})[0] \
        == ("vhosts[shop].queues[q].arguments.x-queue-type",
            "missing: a quorum queue always holds x-queue-type: quorum; add it")
    assert ("vhosts[shop].queues[q].single_active_consumer" in
            {path for path, _ in problems(arguments={}, single_active_consumer=True)})
    assert ("vhosts[shop].queues[q].arguments" in
            {path for path, _ in problems(arguments={}, retry={"delays": ["1s"]})})
