"""The components as a Pulumi component package (`pulumi package add`, docs/components.md): the schema the SDK's
analyzer makes of them, pinned in `pulumi-plugin/schema.json`; what a TypeScript program's inputs register
through the SDK's component provider, compared with the Python call; integers that arrive as floats; errors
spelled the way the caller wrote its keys. No CLI: the provider is the SDK's own `ComponentProvider`, run
under Pulumi's mocks (tests/test_component_plugin.py starts the plugin as the engine does)."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.provider.experimental import host

# As the plugin imports them: the installed package, `rabbitmq_retry` (this repository's components/).
from rabbitmq_retry import (
    ConfigError,
    RetryableQueue,
)

from tests.support import package
from tests.support.package import as_typescript_sends, cases
from tools.lib.mockrun import record

ROOT = Path(__file__).resolve().parents[1]


# --- the schema -------------------------------------------------------------------------------------------


def test_the_golden_schema_is_what_the_sdks_analyzer_makes_of_the_components() -> None:
    """A change to the public API shows in review as a change of pulumi-plugin/schema.json
    (`UPDATE_SCHEMA=1` rewrites it)."""
    made = package.schema_text()
    if os.environ.get("UPDATE_SCHEMA"):
        package.GOLDEN_SCHEMA.write_text(made)
    assert package.GOLDEN_SCHEMA.read_text() == made


def test_the_schema_hosts_the_three_components_under_their_type_tokens_at_the_packages_version() -> None:
    schema = package.schema()
    assert schema["name"] == "rabbitmq-retry"
    assert schema["version"] == package.version()
    assert sorted(schema["resources"]) == ["rabbitmq-retry:index:DelayLevels", "rabbitmq-retry:index:RetryableQueue",
                                           "rabbitmq-retry:index:Vhost"]
    assert all(resource["isComponent"] for resource in schema["resources"].values())


def _properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for token, resource in schema["resources"].items():
        for name, prop in resource["inputProperties"].items():
            yield f"{token}.inputs.{name}", prop
        for name, prop in resource["properties"].items():
            yield f"{token}.outputs.{name}", prop
    for token, typ in schema["types"].items():
        for name, prop in typ["properties"].items():
            yield f"{token}.{name}", prop


def test_every_input_and_output_has_a_description_and_a_type_none_is_any() -> None:
    undescribed, untyped = [], []
    for where, prop in _properties(package.schema()):
        if not prop.get("description"):
            undescribed.append(where)
        for part in (prop, prop.get("items", {}), prop.get("additionalProperties", {})):
            if part.get("$ref") == "pulumi.json#/Any" or (part is prop and "type" not in prop and "$ref" not in prop):
                untyped.append(where)
    assert undescribed == []
    assert untyped == []


def test_the_retry_contract_output_is_a_typed_object_with_every_field_of_the_contract_schema() -> None:
    """The output type names every property `rabbitmq_retry_client/contract.schema.json` defines: the SDK keeps
    only the declared fields of an object output, so a missing one would vanish for other languages."""
    schema = package.schema()
    contract = schema["resources"]["rabbitmq-retry:index:RetryableQueue"]["properties"]["contract"]
    assert contract["$ref"] == "#/types/rabbitmq-retry:index:RetryContract"
    contracts = schema["resources"]["rabbitmq-retry:index:Vhost"]["properties"]["retryContracts"]
    assert contracts["additionalProperties"]["$ref"] == "#/types/rabbitmq-retry:index:RetryContract"
    json_schema = json.loads((ROOT / "rabbitmq_retry_client" / "contract.schema.json").read_text())
    defined = {key for part in ("common", "tiers", "native", "levels")
               for key in json_schema["$defs"][part]["properties"]} | set(json_schema["properties"])
    typed = set(schema["types"]["rabbitmq-retry:index:RetryContract"]["properties"])
    assert typed == {package.camel(key) for key in defined}


def test_the_plugin_folder_is_the_layout_pulumi_runs_with_python_m_pulumi_run_plugin() -> None:
    """PulumiPlugin.yaml says the runtime; the language host runs `python -m pulumi.run.plugin <[project] name>`
    when the folder has no __main__.py and a pyproject.toml with a build backend; the name is the distribution
    whose module (`rabbitmq_retry`) the SDK hosts, at the version of the repository's own pyproject.toml; the
    plugin's venv gets the components from requirements.txt, with the SDK this repository pins."""
    assert yaml.safe_load((package.PLUGIN / "PulumiPlugin.yaml").read_text()) == {"runtime": "python"}
    assert not (package.PLUGIN / "__main__.py").exists()
    plugin = tomllib.loads((package.PLUGIN / "pyproject.toml").read_text())
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert plugin["project"]["name"] == root["project"]["name"] == package.PACKAGE
    assert plugin["project"]["version"] == root["project"]["version"]
    assert plugin["build-system"]["build-backend"]
    requirements = (package.PLUGIN / "requirements.txt").read_text().split("\n")
    pinned = [line for line in (ROOT / "requirements.txt").read_text().split("\n")
              if line.startswith(("pulumi==", "pulumi-rabbitmq=="))]
    assert "..[components]" in requirements
    assert set(pinned) <= set(requirements)


# --- construct with a TypeScript program's inputs --------------------------------------------------------


def _rows(recorded: list[Any]) -> list[dict[str, Any]]:
    return sorted((dataclasses.asdict(r) for r in recorded), key=lambda row: row["urn"])


def _construct(token: str, name: str, inputs: dict[str, Any]) -> Any:
    return package.provider().construct(name, f"rabbitmq-retry:index:{token}", inputs, None)


@pytest.fixture
def hosted(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `component_provider_host` sets in the plugin's process."""
    monkeypatch.setattr(host, "is_hosting", True)


@pytest.mark.parametrize("case", list(cases()))
def test_construct_with_a_typescript_programs_inputs_registers_what_the_python_call_registers(
        case: str, hosted: None) -> None:
    component, args_type, name, args = cases()[case]
    python = _rows(record(lambda: component(name, args()), reveal_secrets=True))
    sent = as_typescript_sends(args(), args_type)
    assert any(isinstance(v, float) for v in _leaves(sent)), "a TypeScript program sends every number as a float"
    constructed = _rows(record(lambda: _construct(component.__name__, name, sent), reveal_secrets=True))
    assert len(python) > 1
    assert constructed == python


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def test_the_application_users_password_stays_a_secret_through_construct(hosted: None) -> None:
    _, args_type, name, args = cases()["vhost-with-application"]
    sent = as_typescript_sends(args(), args_type)
    users = [r for r in record(lambda: _construct("Vhost", name, sent)) if r.type == "rabbitmq:index/user:User"]
    assert [(u.name, u.secret) for u in users] == [(users[0].name, True)]
    assert "s3cret" not in json.dumps(users[0].inputs)


def _state(token: str, name: str, inputs: dict[str, Any], output: str) -> Any:
    state: dict[str, Any] = {}

    def program() -> None:
        _construct(token, name, inputs).state[output].apply(lambda value: state.update(value=value))

    record(program)
    return state["value"]


def test_constructs_outputs_name_every_field_as_the_schema_does_nested_lists_and_maps_included(hosted: None) -> None:
    """What another language's SDK reads: `contract.tiers[0].routingKey`, `retryContracts["q"].maxRetries`.
    pulumi 3.272 renames an output object's own fields but copies lists and maps of objects as they are."""
    _, args_type, name, args = cases()["standalone-tiers"]
    contract = _state("RetryableQueue", name, as_typescript_sends(args(), args_type), "contract")
    assert contract["maxRetries"] == 6
    assert contract["errorQueue"] == "billing.error"
    assert contract["tiers"][0] == {"routingKey": "wait.1", "queue": "billing.wait.1", "delayMs": 5000}
    _, args_type, name, args = cases()["dev-vhost"]
    contracts = _state("Vhost", name, as_typescript_sends(args(), args_type), "retryContracts")
    assert contracts["orders.billing"]["tiers"][0]["routingKey"] == "wait.1"
    assert contracts["orders.refunds"]["backoff"] == {"initialMs": 1000, "multiplier": 2.0, "maxMs": 300000,
                                                      "jitter": 0.2}
    assert {key for contract in contracts.values() for key in contract} <= {
        package.camel(key) for key in package.schema()["types"]["rabbitmq-retry:index:RetryContract"]["properties"]}


# --- integers as floats, and errors in the caller's spelling ---------------------------------------------


def _refused(token: str, name: str, inputs: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(Exception) as raised:
        record(lambda: _construct(token, name, inputs))
    error = raised.value
    while not isinstance(error, ConfigError):  # the SDK wraps it (ComponentInitError), raising it while handling it
        assert error.__context__ is not None, repr(raised.value)
        error = error.__context__
    return error.problems


def test_a_whole_float_where_an_integer_belongs_is_that_integer(hosted: None) -> None:
    """3.0 from another language registers what 3 does from Python (the nested retry.maxRetries included)."""
    args = {"vhost": "payments", "queue": {"name": "billing", "max_length": 500,
                                            "retry": {"delays": ["1s", "5s"], "max_retries": 3}}}
    python = _rows(record(lambda: RetryableQueue("billing", args)))  # type: ignore[arg-type]
    sent = {"vhost": "payments", "queue": {"name": "billing", "maxLength": 500.0,
                                           "retry": {"delays": ["1s", "5s"], "maxRetries": 3.0}}}
    assert _rows(record(lambda: _construct("RetryableQueue", "billing", sent))) == python


def test_a_fractional_number_where_an_integer_belongs_is_refused_with_its_key_path_in_the_schemas_spelling(
        hosted: None) -> None:
    sent = {"vhost": "payments", "queue": {"name": "billing", "maxLength": 10.5,
                                           "retry": {"delays": ["1s"], "maxRetries": 3.5}}}
    assert _refused("RetryableQueue", "billing", sent) == [
        ("RetryableQueue(billing).queue.maxLength", "expected an integer, got 10.5"),
        ("RetryableQueue(billing).queue.retry.maxRetries", "expected an integer, got 3.5")]
    levels = {"vhost": "payments", "delayLevels": {"quorumGroupSize": 2.5}}
    assert _refused("DelayLevels", "levels", levels) == [
        ("DelayLevels(levels).delayLevels.quorumGroupSize", "expected an integer, got 2.5")]
    vhost = {"vhost": {"name": "shop", "queues": [{"name": "a", "retry": {"delays": ["1s"], "maxRetries": 0.5}}]}}
    assert _refused("Vhost", "shop", vhost) == [
        ("Vhost(shop).vhost.queues[0].retry.maxRetries", "expected an integer, got 0.5")]


def test_the_config_parsers_errors_name_the_keys_as_another_language_wrote_them(hosted: None) -> None:
    sent = {"vhost": "payments", "queue": {"name": "billing", "retry": {"delays": ["1s", "5s"], "maxRetries": 0.0,
                                                                        "errorRetention": "soon"}}}
    paths = [path for path, _ in _refused("RetryableQueue", "billing", sent)]
    assert paths == ["RetryableQueue(billing).queue.retry.maxRetries",
                     "RetryableQueue(billing).queue.retry.errorRetention"]


def test_a_python_call_is_untouched_floats_are_refused_and_paths_stay_snake_case() -> None:
    """Outside the plugin nothing converts: the Python path is the stack file's, as strict as before."""
    with pytest.raises(ConfigError) as refused:
        RetryableQueue("billing", {"vhost": "payments",
                                   "queue": {"name": "billing", "retry": {"delays": ["1s"], "max_retries": 3.0}}})  # type: ignore[typeddict-item]
    assert [path for path, _ in refused.value.problems] == ["RetryableQueue(billing).queue.retry.max_retries"]


# --- Python users: the same types, checked by mypy ---------------------------------------------------------


def _mypy(program: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """mypy on a user's program that imports `rabbitmq_retry` (this repository's components/, as installed)."""
    (tmp_path / "site").mkdir(exist_ok=True)
    for name, folder in (("rabbitmq_retry", "components"), ("rabbitmq_retry_client", "rabbitmq_retry_client")):
        if not (tmp_path / "site" / name).exists():
            (tmp_path / "site" / name).symlink_to(ROOT / folder)
    source = tmp_path / "program.py"
    source.write_text(textwrap.dedent(program))
    command = [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", os.devnull, "--follow-imports",
               "silent", "--cache-dir", str(tmp_path / "cache"), str(source)]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False,
                          env={**os.environ, "MYPYPATH": str(tmp_path / "site")})


def test_mypy_refuses_a_wrong_key_or_type_in_a_retryable_queue_call_and_takes_a_right_one(tmp_path: Path) -> None:
    wrong = _mypy("""
        from rabbitmq_retry import RetryableQueue

        RetryableQueue("billing", {"vhost": "payments", "protect": True,
                                   "queue": {"name": "billing", "retry": {"delays": ["5s"], "max_retries": "6"}}})
    """, tmp_path)
    assert wrong.returncode == 1
    assert 'Extra key "protect" for TypedDict "RetryableQueueArgs"' in wrong.stdout
    assert '(expression has type "str", TypedDict item "max_retries" has type "int")' in wrong.stdout
    right = _mypy("""
        from rabbitmq_retry import RetryableQueue, Vhost

        billing = RetryableQueue("billing", {
            "vhost": "payments", "protect_queues": True,
            "queue": {"name": "billing", "type": "quorum", "retry": {"delays": ["5s", "1m"], "max_retries": 6}}})
        shop = Vhost("shop", {"vhost": {"name": "shop", "queues": [
            {"name": "refunds", "retry": {"strategy": "levels", "backoff": {"max": "5m"}, "max_retries": 6}}]}})
        retries: int = billing.contract.apply(lambda c: c["max_retries"])  # wrong on purpose: an Output, not an int
    """, tmp_path)
    assert right.stdout.count("error:") == 1
    assert 'Incompatible types in assignment (expression has type "Output[int]", variable has type "int")' \
        in right.stdout


# --- the Pulumi YAML example against the schema ------------------------------------------------------------


def _problems(value: Any, spec: dict[str, Any], types: dict[str, Any], path: str, plain: bool) -> Iterator[str]:
    """What is wrong with `value` as the schema property `spec` (an `${...}` interpolation is an Output: only a
    property that is not plain takes one)."""
    if isinstance(value, str) and value.startswith("${"):
        if plain or spec.get("plain"):
            yield f"{path}: an interpolation, but the property is plain"
        return
    ref = spec.get("$ref")
    if ref is not None:
        typ = types[ref.removeprefix("#/types/")]
        yield from _object_problems(value, typ["properties"], typ.get("required", []), types, path)
        return
    kind = spec["type"]
    python_type = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
                   "object": dict}[kind]
    if not isinstance(value, python_type) or (kind in ("integer", "number") and isinstance(value, bool)):
        yield f"{path}: expected {kind}, got {value!r}"
        return
    if kind == "array":
        for i, item in enumerate(value):
            yield from _problems(item, spec["items"], types, f"{path}[{i}]", plain or bool(spec.get("plain")))
    if kind == "object":
        for key, item in value.items():
            yield from _problems(item, spec["additionalProperties"], types, f"{path}.{key}", False)


def _object_problems(value: Any, properties: dict[str, Any], required: list[str], types: dict[str, Any],
                     path: str) -> Iterator[str]:
    if not isinstance(value, dict):
        yield f"{path}: expected an object, got {value!r}"
        return
    for key, item in value.items():
        if key not in properties:
            yield f"{path}.{key}: no such property (has {', '.join(sorted(properties))})"
        else:
            yield from _problems(item, properties[key], types, f"{path}.{key}", False)
    yield from (f"{path}.{key}: required, missing" for key in required if key not in value)


def test_the_yaml_example_sets_only_properties_the_schema_has_with_their_types() -> None:
    schema = package.schema()
    program = yaml.safe_load((ROOT / "examples" / "package-yaml" / "Pulumi.yaml").read_text())
    [(name, resource)] = program["resources"].items()
    component = schema["resources"][resource["type"]]
    problems = list(_object_problems(resource["properties"], component["inputProperties"],
                                     component.get("requiredInputs", []), schema["types"], name))
    assert problems == []
    assert program["outputs"]["retryContracts"] == f"${{{name}.retryContracts}}"
    assert "retryContracts" in component["properties"]


def test_the_schema_check_of_the_yaml_example_refuses_a_misspelt_key_and_a_wrong_type() -> None:
    """The check above can fail: a snake_case key (the stack file's spelling) and a string for an integer."""
    schema = package.schema()
    component = schema["resources"]["rabbitmq-retry:index:Vhost"]
    wrong = {"vhost": {"name": "shop", "queues": [{"name": "q", "retry": {"max_retries": 6, "maxRetries": "6"}}]},
             "protectQueues": "${protect}"}
    assert list(_object_problems(wrong, component["inputProperties"], [], schema["types"], "shop")) == [
        "shop.vhost.queues[0].retry.max_retries: no such property (has backoff, delays, errorMaxLength, "
        "errorRetention, maxDelay, maxRetries, minDelay, strategy)",
        "shop.vhost.queues[0].retry.maxRetries: expected integer, got '6'",
        "shop.protectQueues: an interpolation, but the property is plain"]
