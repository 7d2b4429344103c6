"""The component package over the real wire: the plugin started the way Pulumi's Python language host starts it
(`python -m pulumi.run.plugin rabbitmq-retry <engine address>` in `pulumi-plugin/`), its port read from its
output, then `GetSchema` and `Construct` called over gRPC with the SDK's own stubs, the inputs encoded as the
engine forwards a TypeScript program's (numbers as protobuf doubles, a password as a secret), against a resource
monitor that records every registration. What it registers must be what the Python call registers under mocks.
What only the engine does (installing the plugin's venv, generating an SDK, the CLI) is not run here."""

import json
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2

from components.config.pulumi_yaml import PROJECT
from tests.support import package
from tests.support.package import as_typescript_sends, cases
from tests.support.wire import engine_services, running_plugin
from tools.lib.mockrun import record

STACK = "test"


def _wire_value(value: Any) -> Any:
    """A value as it travels in a ConstructRequest: a secret Output becomes the secret signature map."""
    import pulumi

    if isinstance(value, pulumi.Output):
        return {rpc._special_sig_key: rpc._special_secret_sig, "value": package.SECRET_VALUES[id(value)]}
    if isinstance(value, dict):
        return {key: _wire_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_wire_value(item) for item in value]
    return value


def _rows(recorded: list[Any]) -> list[dict[str, Any]]:
    import dataclasses

    rows = [dataclasses.asdict(r) for r in recorded if r.type != "pulumi:pulumi:Stack"]
    return sorted(rows, key=lambda row: row["urn"])


def test_get_schema_over_grpc_is_the_golden_schema_but_for_the_version_the_git_tag_gives() -> None:
    """`pulumi.run.plugin` passes no version (the SDK reports 0.0.0); for a package added from git, Pulumi takes
    the plugin's version from the tag (`@v0.1.0`), which the release tags after pyproject.toml's version."""
    with engine_services(STACK, PROJECT, "urn:unused") as (address, _, _), \
            running_plugin(package.PLUGIN, address) as plugin:
        served = json.loads(plugin.GetSchema(provider_pb2.GetSchemaRequest(version=0)).schema)
    golden = json.loads(package.GOLDEN_SCHEMA.read_text())
    assert served["version"] == "0.0.0"
    assert {**served, "version": golden["version"]} == golden


@pytest.mark.parametrize("case", list(cases()))
def test_construct_over_grpc_registers_what_the_python_call_registers(case: str) -> None:
    component, args_type, name, args = cases()[case]
    python = record(lambda: component(name, args()), reveal_secrets=True)
    stack_urn = next(r.urn for r in python if r.type == "pulumi:pulumi:Stack")
    inputs = struct_pb2.Struct()
    inputs.update(_wire_value(as_typescript_sends(args(), args_type)))
    with engine_services(STACK, PROJECT, stack_urn) as (address, monitor, _), \
            running_plugin(package.PLUGIN, address) as plugin:
        response = plugin.Construct(provider_pb2.ConstructRequest(
            project=PROJECT, stack=STACK, organization="organization", dryRun=True, parallel=1,
            monitorEndpoint=address, type=f"rabbitmq-retry:index:{component.__name__}", name=name,
            parent=stack_urn, inputs=inputs, accepts_output_values=True), timeout=120)
    assert response.urn == f"urn:pulumi:{STACK}::{PROJECT}::rabbitmq-retry:index:{component.__name__}::{name}"
    assert _rows(monitor.registered) == _rows(python)


@pytest.mark.parametrize(("case", "misspelt", "path", "guess"), [
    ("standalone-tiers", lambda inputs: inputs["queue"]["retry"].update(maxRetrys=4.0),
     "queue.retry.maxRetrys", '"maxRetries"'),
    ("prod-vhost", lambda inputs: inputs.update(protectQueue=True), "protectQueue", '"protectQueues"'),
    ("prod-vhost", lambda inputs: inputs["vhost"]["queues"][1].update(maxLenght=5.0),
     "vhost.queues[orders.shipping].maxLenght", '"maxLength"'),
])
def test_construct_over_grpc_refuses_a_key_the_schema_lacks_naming_it_before_registering_anything(
        case: str, misspelt: Any, path: str, guess: str) -> None:
    """Raw inputs from another language (YAML, an untyped object, any gRPC caller) reach Construct unchecked by a
    typed SDK; the SDK's provider would copy only the schema's keys and deploy as if the misspelt one were absent
    (max_retries back to its default, no queue protected). Ours fails the Construct with the key's path."""
    component, args_type, name, args = cases()[case]
    sent = _wire_value(as_typescript_sends(args(), args_type))
    misspelt(sent)
    inputs = struct_pb2.Struct()
    inputs.update(sent)
    stack_urn = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{STACK}"
    with engine_services(STACK, PROJECT, stack_urn) as (address, monitor, _), \
            running_plugin(package.PLUGIN, address) as plugin, pytest.raises(grpc.RpcError) as refused:
        plugin.Construct(provider_pb2.ConstructRequest(
            project=PROJECT, stack=STACK, organization="organization", dryRun=True, parallel=1,
            monitorEndpoint=address, type=f"rabbitmq-retry:index:{component.__name__}", name=name,
            parent=stack_urn, inputs=inputs, accepts_output_values=True), timeout=120)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    refusal = f"{component.__name__}({name}): {path}: unknown key; did you mean {guess}?"
    assert refused.value.details().startswith(refusal)
    assert monitor.registered == []
