"""The component package as other languages see it: its schema from the SDK's own analyzer, and args written
the way a TypeScript program's SDK sends them (camelCase keys, every number a float, secrets as secrets)."""

import json
import tomllib
import typing
from pathlib import Path
from typing import Any

import pulumi
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "pulumi-plugin"
"""The folder `pulumi package add` is pointed at."""
GOLDEN_SCHEMA = PLUGIN / "schema.json"
PACKAGE = "rabbitmq-retry"


def version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def provider() -> Any:
    """The SDK's component provider over the components of `rabbitmq_retry`, as `pulumi.run.plugin` builds it
    (the same module walk), at the package's version."""
    import rabbitmq_retry
    from pulumi.provider.experimental.component import ComponentProvider
    from pulumi.provider.experimental.host import components_from_module

    return ComponentProvider(components_from_module(rabbitmq_retry), PACKAGE, version=version())


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(provider().schema)
    return loaded


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _field_hints(typed_dict: type) -> dict[str, Any]:
    hints = {}
    for key, hint in typed_dict.__annotations__.items():
        if typing.get_origin(hint) in (typing.NotRequired, typing.Required):
            hint = typing.get_args(hint)[0]
        hints[key] = hint
    return hints


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def as_typescript_sends(value: Any, hint: Any) -> Any:
    """`value`, typed by `hint` (a TypedDict tree), as the engine hands it over from a TypeScript program: our
    field names camelCase (user data such as header or user names as written), every int a float."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if typing.is_typeddict(hint):
        hints = _field_hints(hint)
        return {camel(key): as_typescript_sends(item, hints[key]) for key, item in value.items()}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return [as_typescript_sends(item, args[0]) for item in value]
    if origin is dict:
        return {key: as_typescript_sends(item, args[1]) for key, item in value.items()}
    return value


def stack_vhosts(stack: str) -> list[dict[str, Any]]:
    """The `vhosts` entries of `Pulumi.<stack>.yaml`."""
    config = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    vhosts: list[dict[str, Any]] = config["rabbitmq-retry:vhosts"]
    return vhosts


def secret(value: str) -> pulumi.Output[str]:
    return pulumi.Output.secret(value)
