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
    Vhost,
    VhostSpec,
    load_stack_config,
    load_vhost,
)
from rabbitmq_retry.model.keys import KEY_TABLES

from tests.support import package
from tests.support.package import adopted_vhost, as_typescript_sends, cases
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


STACK_ONLY = {"rabbitmq-retry": "the stack's top level", "defaults": "the stack's defaults, applied by its parser",
              "broker": "the stack's broker version", "alerts": "the stack's own alerts block (metrics, selector)"}
"""Key tables no component takes, and why."""
MAPS_OF_RABBITMQ_KEYS = {"vhosts[].operator_policies[].definition"}
"""Key tables of RabbitMQ's own names (`message-ttl`): a map of strings in the schema, not fields."""


def _schema_object(schema: dict[str, Any], table: str) -> dict[str, Any]:
    """The schema object a key table's mapping is: `vhosts[].queues[].retry` → VhostSpec.queues.items.retry;
    `alerts.<rule>` → the rule settings of `vhosts[].alerts.parked`."""
    segments = table.replace("alerts.<rule>", "vhosts[].alerts.parked").replace("vhosts[]", "vhost", 1).split(".")
    properties = schema["resources"]["rabbitmq-retry:index:Vhost"]["inputProperties"]
    prop: dict[str, Any] = {}
    for segment in segments:
        prop = properties[package.camel(segment.removesuffix("[]"))]
        if segment.endswith("[]"):
            prop = prop["items"]
        if "$ref" in prop:
            properties = schema["types"][prop["$ref"].removeprefix("#/types/")]["properties"]
    return prop if "$ref" not in prop else {"properties": properties}


def _untyped(tables: dict[str, tuple[str, ...]], schema: dict[str, Any]) -> list[str]:
    """Each stack-file key without a field of that name (schema spelling) in the typed args, and each field
    without a key; a table neither a component's nor listed above is one problem."""
    problems = []
    for table, keys in tables.items():
        if table in STACK_ONLY:
            continue
        try:
            typed = _schema_object(schema, table)
        except KeyError:
            problems.append(f"{table}: no typed field holds it (a stack-only table goes in STACK_ONLY)")
            continue
        if table in MAPS_OF_RABBITMQ_KEYS:
            if typed.get("additionalProperties", {}).get("type") != "string":
                problems.append(f"{table}: not a map of strings")
            continue
        fields = set(typed.get("properties", ()))
        written = {package.camel(key) for key in keys}
        problems += [f"{table}.{key}: no typed field" for key in sorted(written - fields)]
        problems += [f"{table}.{key}: no stack-file key" for key in sorted(fields - written)]
    return problems


def test_every_stack_file_key_a_component_takes_is_a_typed_field_of_the_schema() -> None:
    """components/model/keys.py against the schema other languages get: a new stack-file key cannot ship untyped.
    Keywords included: the field `from_` is the schema's `from` (the analyzer's camel_case drops the empty tail)."""
    schema = package.schema()
    assert _untyped(dict(KEY_TABLES), schema) == []
    move = schema["types"]["rabbitmq-retry:index:MoveSpec"]
    assert set(move["required"]) == {"from", "to"}
    assert move["properties"]["from"]["description"].startswith("`from` (Python: `from_`)")
    vhost_type = schema["resources"]["rabbitmq-retry:index:Vhost"]["inputProperties"]["vhost"]["$ref"]
    queues = schema["types"][vhost_type.removeprefix("#/types/")]["properties"]["queues"]["items"]["$ref"]
    assert schema["resources"]["rabbitmq-retry:index:RetryableQueue"]["inputProperties"]["queue"]["$ref"] == queues


def test_the_key_comparison_names_a_key_without_a_field_and_a_table_no_component_takes() -> None:
    """The check above can fail: a key added to a table, and a table of its own."""
    tables = {**KEY_TABLES, "vhosts[].migrations[].move": (*KEY_TABLES["vhosts[].migrations[].move"], "via"),
              "vhosts[].shovels[]": ("name",)}
    assert _untyped(tables, package.schema()) == [
        "vhosts[].migrations[].move.via: no typed field",
        "vhosts[].shovels[]: no typed field holds it (a stack-only table goes in STACK_ONLY)"]


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


def test_the_plugin_folder_is_the_layout_pulumi_runs_with_its_main_py() -> None:
    """PulumiPlugin.yaml says the runtime; the language host runs `python <folder>` when the folder has a
    __main__.py, which serves our strict provider (not the SDK's `python -m pulumi.run.plugin`, which drops unknown
    keys: tests/test_component_plugin.py); the plugin's venv gets the components from requirements.txt, with the
    SDK this repository pins."""
    assert yaml.safe_load((package.PLUGIN / "PulumiPlugin.yaml").read_text()) == {"runtime": "python"}
    assert (package.PLUGIN / "__main__.py").is_file()
    assert not (package.PLUGIN / "pyproject.toml").exists()
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
        ("Vhost(shop).vhost.queues[a].retry.maxRetries", "expected an integer, got 0.5")]
    # A queue's name is the user's: a field name inside it (after a dot) is left as written.
    vhost = {"vhost": {"name": "shop", "queues": [{"name": "a.max_retries", "retry": {"delays": ["1s"],
                                                                                     "maxRetries": 0.5}}]}}
    assert _refused("Vhost", "shop", vhost) == [
        ("Vhost(shop).vhost.queues[a.max_retries].retry.maxRetries", "expected an integer, got 0.5")]


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


def test_the_adopted_vhost_with_migrations_sent_as_typescript_does_imports_migrates_and_converts(
        hosted: None) -> None:
    """What the construct tests compare, made visible: `import` adopts its queue, the retired move's old queue and
    the drained tier stay as they should, the queue arguments written as strings are RabbitMQ's integer and
    boolean, and the alert rule's integer came as a float. A TypeScript program writes `from` and `import`."""
    sent = as_typescript_sends({"vhost": adopted_vhost()}, package.vhost_args())
    assert "from" in sent["vhost"]["migrations"][0]["move"] and "import" in sent["vhost"]
    assert sent["vhost"]["queues"][1]["alerts"]["parked"] == {"for": "5m", "threshold": 2.0}
    rows = {r.name: r for r in record(lambda: _construct("Vhost", "root", sent))}
    assert rows["root-legacy.jobs-input"].import_id == "legacy.jobs@/"
    assert "root-legacy.jobs-wait-2" in rows  # drain_tiers keeps the removed tier until retire
    assert json.loads(rows["root-queue-legacy.ttl"].inputs["settings"]["argumentsJson"]) == {
        "x-message-ttl": 60000, "x-queue-type": "classic", "x-single-active-consumer": True}


def _keywords_as_the_stack_file_writes_them(vhost: Any) -> dict[str, Any]:
    """`vhost` with `from_`, `import_` and `for_` written `from`, `import` and `for`."""
    text = json.dumps(vhost)
    for key in ("from", "import", "for"):
        text = text.replace(f'"{key}_"', f'"{key}"')
    spelled: dict[str, Any] = json.loads(text)
    return spelled


def _stack_spelled(vhost: Any) -> dict[str, Any]:
    """`adopted_vhost()` as a stack file writes it: `from`, `import`, `for`, queue arguments as their values."""
    spelled = _keywords_as_the_stack_file_writes_them(vhost)
    spelled["queues"][-1]["arguments"].update({"x-message-ttl": 60000, "x-single-active-consumer": True})
    return spelled


def test_a_python_caller_writes_from_and_import_with_an_underscore_or_as_the_stack_file_does_alike() -> None:
    typed = _rows(record(lambda: Vhost("root", {"vhost": adopted_vhost()})))
    assert _rows(record(lambda: Vhost("root", {"vhost": _stack_spelled(adopted_vhost())}))) == typed  # type: ignore[typeddict-item]
    assert any(row["import_id"] for row in typed)


def _python_refused(vhost: Any) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as refused:
        Vhost("root", {"vhost": vhost})
    return refused.value.problems


def _wrong(vhost: VhostSpec) -> VhostSpec:
    """`vhost` with a move onto itself, an import of another vhost's queue and a `for` that is no duration."""
    vhost["migrations"][0]["move"]["from_"] = "legacy.jobs.q"
    vhost["import_"] = ["queue orders@shop"]
    vhost["alerts"]["no_consumer"]["for_"] = "soon"
    return vhost


def test_errors_name_a_keyword_key_as_the_caller_wrote_it() -> None:
    """`from_` from Python's typed args, `from` from Python given a stack file's entry and from a stack file."""
    expected = {"import{}[0]": "'orders@shop' is not an ID of this vhost (name@/)",
                "migrations[jobs-to-quorum].move.to": '"legacy.jobs.q" is the queue it moves from; name the successor '
                                                      'queue (a new '
                                         "name: a queue keeps its type and its strategy for life)",
                "alerts.no_consumer.for{}": '"soon" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'}

    def paths(prefix: str, suffix: str) -> dict[str, str]:
        return {f"{prefix}.{key.format(suffix)}": message for key, message in expected.items()}

    stack_spelled = _stack_spelled(_wrong(adopted_vhost()))
    assert dict(_python_refused(_wrong(adopted_vhost()))) == paths("Vhost(root).vhost", "_")
    assert dict(_python_refused(stack_spelled)) == paths("Vhost(root).vhost", "")
    with pytest.raises(ConfigError) as refused:
        load_stack_config({"vhosts": [stack_spelled]})
    assert dict(refused.value.problems) == paths("vhosts[/]", "")


def test_from_another_language_the_error_names_from_and_import_as_the_schema_does(hosted: None) -> None:
    sent = as_typescript_sends({"vhost": _wrong(adopted_vhost())}, package.vhost_args())
    paths = [path for path, _ in _refused("Vhost", "root", sent)]
    assert paths == ["Vhost(root).vhost.import[0]", "Vhost(root).vhost.migrations[jobs-to-quorum].move.to",
                     "Vhost(root).vhost.alerts.noConsumer.for"]


def test_from_another_language_a_moves_step_move_is_refused_at_the_step_it_needs_a_python_stack_for(
        hosted: None) -> None:
    """Its shovels connect as the stack's shovel user, which only a Python program passes (`shovel_access`)."""
    vhost = {"name": "jobs", "queues": [{"name": "jobs.c", "type": "classic"}, {"name": "jobs.q", "type": "quorum"}],
             "migrations": [{"name": "to-quorum", "step": "move", "move": {"from": "jobs.c", "to": "jobs.q"}}]}
    [(path, problem)] = _refused("Vhost", "jobs", {"vhost": vhost})
    assert path == "Vhost(jobs).vhost.migrations[to-quorum].step"
    assert problem.startswith("migration to-quorum moves a queue with shovels, which connect as a shovel user only a "
                              "Python program passes (shovel_access)")


def test_both_spellings_of_one_key_are_refused_and_a_stack_file_takes_only_its_own() -> None:
    vhost = adopted_vhost()
    vhost["migrations"][0]["move"]["from"] = "legacy.jobs.c"  # type: ignore[typeddict-unknown-key]
    assert _python_refused(vhost) == [("Vhost(root).vhost.migrations[jobs-to-quorum].move.from",
                                       "also written as from_; write one (from_ is the typed spelling)")]
    with pytest.raises(ConfigError) as refused:
        load_stack_config({"vhosts": [adopted_vhost()]})
    assert {path: problem for path, problem in refused.value.problems if "_" in path.rsplit(".", 1)[-1]} == {
        "vhosts[/].import_": 'unknown key; did you mean "import"? (allowed: name, existing, exchanges, queues, '
                             "policies, operator_policies, applications, operators, limits, default_queue_type, "
                             "delay_levels, import, migrations, alerts)",
        **{f"vhosts[/].migrations[{name}].move.from_": 'unknown key; did you mean "from"? (allowed: from, to, '
                                                         "external)" for name in ("jobs-to-quorum", "runtime-batch")},
        **{f"vhosts[/].{at}.for_": 'unknown key; did you mean "for"? (allowed: enabled, for, severity, threshold, '
                                   'labels)' for at in ("alerts.no_consumer", "queues[legacy.jobs.q].alerts.parked")}}


def test_an_empty_external_is_the_stack_files_external_true() -> None:
    """`move.external` is `true` or a mapping in a stack file; typed, it is a mapping, and `{}` names what `true`
    does (the old queue alone)."""
    def config(external: object) -> Any:
        vhost = _stack_spelled(adopted_vhost())
        vhost["migrations"][1]["move"]["external"] = external
        return load_vhost(vhost, "vhost").migrations[1]

    assert config({}) == config(True) != config({"error_queue": "runtime.batch.dlq"})
    assert config({}).external is not None


def test_a_components_alerts_are_checked_though_it_registers_no_rule() -> None:
    vhost = adopted_vhost()
    vhost["alerts"]["no_consumer"]["severity"] = "loud"
    assert _python_refused(vhost) == [("Vhost(root).vhost.alerts.no_consumer.severity",
                                       "'loud' is not one of critical, warning, info")]
    queue = {"name": "billing", "retry": {"delays": ["1s"]}, "alerts": {"undeliverable": {}}}
    with pytest.raises(ConfigError) as refused:
        RetryableQueue("billing", {"vhost": "payments", "queue": queue})  # type: ignore[typeddict-item]
    assert [path for path, _ in refused.value.problems] == ["RetryableQueue(billing).queue.alerts.undeliverable"]


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
        from rabbitmq_retry import RetryableQueue, Vhost

        RetryableQueue("billing", {"vhost": "payments", "protect": True,
                                   "queue": {"name": "billing", "retry": {"delays": ["5s"], "max_retries": "6"}}})
        Vhost("jobs", {"vhost": {"name": "jobs", "migrations": [
            {"name": "to-quorum", "step": "move", "move": {"from": "jobs.c", "to": "jobs.q"}}]}})
    """, tmp_path)
    assert wrong.returncode == 1
    assert 'Extra key "protect" for TypedDict "RetryableQueueArgs"' in wrong.stdout
    assert '(expression has type "str", TypedDict item "max_retries" has type "int")' in wrong.stdout
    assert 'Extra key "from" for TypedDict "MoveSpec"' in wrong.stdout
    right = _mypy("""
        from rabbitmq_retry import RetryableQueue, Vhost

        billing = RetryableQueue("billing", {
            "vhost": "payments", "protect_queues": True,
            "queue": {"name": "billing", "type": "quorum", "retry": {"delays": ["5s", "1m"], "max_retries": 6}}})
        shop = Vhost("shop", {"vhost": {"name": "shop", "queues": [
            {"name": "refunds", "retry": {"strategy": "levels", "backoff": {"max": "5m"}, "max_retries": 6}}]}})
        jobs = Vhost("jobs", {"vhost": {"name": "jobs", "existing": True, "import_": ["queue jobs.c@jobs"], "queues": [
            {"name": "jobs.c", "type": "classic"}, {"name": "jobs.q", "type": "quorum"}], "migrations": [
            {"name": "to-quorum", "step": "move", "move": {"from_": "jobs.c", "to": "jobs.q"}}]}})
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
