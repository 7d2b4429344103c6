"""The Pulumi program as `pulumi preview` runs it, per stack file, under mocks; and the URN snapshots
that make a rename (a replacement that loses messages) show up as a failing test."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pulumi
import pytest

from tests.conftest import dev_vhost_config, record_vhost, work_queue_config
from tools.lib.mockrun import ROOT, Registered, record_program

SNAPSHOTS = Path(__file__).parent / "snapshots"
STACKS = ["dev", "prod"]


def identity(resources: list[Registered]) -> str:
    """One line per resource: URN (type chain + logical name) and physical name."""
    lines = []
    for r in resources:
        if r.type == "pulumi:pulumi:Stack":
            continue
        physical = r.inputs.get("name") or (f'{r.inputs["source"]} -> {r.inputs["destination"]}'
                                            if "source" in r.inputs else "")
        lines.append(f"{r.urn}  {physical}".rstrip())
    return "\n".join(sorted(lines)) + "\n"


@pytest.mark.parametrize("stack", STACKS)
def test_urns_and_physical_names_match_the_snapshot(stack):
    """A diff here replaces resources on `pulumi up`: add aliases or say so in the PR.
    Regenerate deliberately with UPDATE_SNAPSHOTS=1."""
    actual = identity(record_program(stack))
    path = SNAPSHOTS / f"{stack}.urns.txt"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(actual)
    assert path.exists(), f"{path} missing: run UPDATE_SNAPSHOTS=1 pytest {__file__}"
    assert actual == path.read_text()


def test_prod_protects_every_queue_and_retains_error_queues():
    resources = record_program("prod")
    queues = [r for r in resources if r.type == "rabbitmq:index/queue:Queue"]
    assert queues and all(r.protect for r in queues)
    assert sorted(r.inputs["name"] for r in queues if r.retain_on_delete) == sorted(
        r.inputs["name"] for r in queues if r.inputs["name"].endswith(".error"))
    assert all('"x-queue-type": "quorum"' in r.inputs["settings"]["argumentsJson"] for r in queues)


def test_dev_uses_classic_queues_and_short_delays():
    resources = record_program("dev")
    queues = [r for r in resources if r.type == "rabbitmq:index/queue:Queue"]
    assert all('"x-queue-type": "classic"' in r.inputs["settings"]["argumentsJson"] for r in queues)
    ttls = [int(r.inputs["policy"]["definition"]["message-ttl"]) for r in resources
            if r.type == "rabbitmq:index/policy:Policy" and ".wait." in r.inputs["name"]]
    assert ttls and max(ttls) <= 15_000 and not any(r.protect for r in resources)


def test_a_bad_stack_file_fails_before_any_resource_is_registered(program_copy: Path):
    (program_copy / "Pulumi.broken.yaml").write_text("""
config:
  rabbitmq:endpoint: http://127.0.0.1:15672/
  rabbitmq:password: guest
  rabbitmq-retry:vhost: []
""")
    # The copy's own ConfigError class: the program raised it, not the test's import of it.
    with pytest.raises(pulumi.RunError) as error:
        record_program("broken", program_copy)
    assert type(error.value).__name__ == "ConfigError"
    assert error.value.problems == [
        ("rabbitmq-retry:vhost", 'unknown key; did you mean "rabbitmq-retry:vhosts"? (allowed: rabbitmq-retry:protect, '
                                 "rabbitmq-retry:retain_error_queues, rabbitmq-retry:defaults, rabbitmq-retry:vhosts, "
                                 "rabbitmq-retry:passwords, rabbitmq-retry:broker, "
                                 "rabbitmq-retry:delete_with_messages, rabbitmq-retry:amqp_port, "
                                 "rabbitmq-retry:alerts)"),
        ("vhosts", "missing; set rabbitmq-retry:vhosts to a list of vhosts (see docs/config.md)"),
        ("rabbitmq:endpoint", '"http://127.0.0.1:15672/" ends with "/": the management API answers 405; '
                              "remove the trailing slash"),
        ("rabbitmq:password", "stored in plain text; use `pulumi config set --secret rabbitmq:password` "
                              "or the RABBITMQ_PASSWORD environment variable"),
    ]


def test_provider_mistakes_are_refused_before_any_resource_is_registered(program_copy: Path):
    """An AMQP endpoint (the provider talks to the management API) and a misspelt provider key, which the
    provider would silently ignore, are refused at plan time with the fix."""
    (program_copy / "Pulumi.broken.yaml").write_text((ROOT / "Pulumi.dev.yaml").read_text().replace(
        "  rabbitmq:endpoint: http://127.0.0.1:15672\n",
        "  rabbitmq:endpoint: amqp://127.0.0.1:5672\n  rabbitmq:endpiont: http://127.0.0.1:15672\n"))
    with pytest.raises(pulumi.RunError) as error:
        record_program("broken", program_copy)
    assert error.value.problems == [
        ("rabbitmq:endpiont", "unknown key of the RabbitMQ provider, which ignores it; did you mean "
                              '"rabbitmq:endpoint"? (allowed: rabbitmq:endpoint, rabbitmq:username, '
                              "rabbitmq:password, rabbitmq:insecure, rabbitmq:cacertFile, rabbitmq:clientcertFile, "
                              "rabbitmq:clientkeyFile, rabbitmq:proxy)"),
        ("rabbitmq:endpoint", '"amqp://127.0.0.1:5672" is not an http(s) URL: the provider talks to the management '
                              "API, e.g. http://127.0.0.1:15672 (not the AMQP port)"),
    ]


def test_a_secret_password_is_accepted(program_copy: Path):
    (program_copy / "Pulumi.ok.yaml").write_text((ROOT / "Pulumi.dev.yaml").read_text().replace(
        "config:\n", "config:\n  rabbitmq:password:\n    secure: AAABADxlbmNyeXB0ZWQ+\n", 1))
    assert any(r.type == "rabbitmq:index/queue:Queue" for r in record_program("ok", program_copy))


def test_program_uses_no_4x_only_setting() -> None:
    """Issue behaviour (9): nothing only RabbitMQ 4.x accepts, and delivery-limit as an explicit policy that 3.10
    and 4.x both enforce (tests/broker/test_topology_state.py shows them enforcing it)."""
    configs = [work_queue_config("quorum", ["1s"], delivery_limit=3), dev_vhost_config("quorum"),
               dev_vhost_config("classic")]
    recordings = [record_program("dev"), record_program("prod")]
    recordings += [record_vhost({"name": "v", **config}, name="t") for config in configs]
    for resources in recordings:
        text = json.dumps([r.inputs for r in resources])
        assert "delayed-retry" not in text and "x-delayed" not in text
    prod_policies = [r.inputs["policy"]["definition"] for r in recordings[1] if r.type.endswith(":Policy")]
    # Explicit on both brokers: 20 (4.x's default) plus orders.shipping's 3 retries.
    assert {"delivery-limit": "23"} in prod_policies


def test_preview_refuses_what_broker_version_refuses_and_without_one_says_which_keys_need_which_version(
        program_copy: Path, caplog: pytest.LogCaptureFixture):
    stack_file = """
config:
  rabbitmq:endpoint: http://127.0.0.1:15672
  rabbitmq-retry:%s
  rabbitmq-retry:vhosts:
    - name: shop
      queues: [{name: orders, retry: {delays: [1s]}}]
      policies: [{name: team, pattern: "^team$", apply_to: quorum_queues, definition: {max-length: 5}}]
"""
    (program_copy / "Pulumi.old.yaml").write_text(stack_file % 'broker: {version: "3.10.8"}')
    with pytest.raises(pulumi.RunError) as error:
        record_program("old", program_copy)
    assert [path for path, _ in error.value.problems] == ["vhosts[shop].policies[team].apply_to"]
    (program_copy / "Pulumi.unset.yaml").write_text(stack_file % "protect: false")
    with caplog.at_level("WARNING"):
        assert record_program("unset", program_copy)
    assert ("vhosts[shop].policies[team].apply_to: apply_to: quorum_queues: RabbitMQ 3.10.8 refuses it, 4.3.6 takes "
            "it; "
            "broker.version is not set, so preview checked it for the newest broker: set broker.version to have it "
            "checked for yours") in [r.getMessage() for r in caplog.records]


def test_doctor_and_drift_refuse_an_amqp_endpoint_with_the_fix():
    from rabbitmq_retry_client.management import ManagementClient, ManagementError

    with pytest.raises(ManagementError) as error:
        ManagementClient.from_settings("amqp://127.0.0.1:5672", dev=True, env={})
    assert str(error.value) == ("endpoint 'amqp://127.0.0.1:5672' is not an http(s) URL: give the management API's, "
                                "e.g. http://127.0.0.1:15672 or https://broker:15671 (not an AMQP URL or port), in "
                                "rabbitmq:endpoint (RABBITMQ_ENDPOINT, --endpoint)")
