"""The component package as other languages see it: its schema from the SDK's own analyzer, and args written
the way a TypeScript program's SDK sends them (camelCase keys, every number a float, secrets as secrets)."""

import json
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import yaml

if TYPE_CHECKING:
    from rabbitmq_retry import VhostSpec

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
        if typing.get_origin(hint) in {typing.NotRequired, typing.Required}:  # type: ignore[comparison-overlap]
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


def stack_vhosts(stack: str, folder: Path = ROOT) -> list[dict[str, Any]]:
    """The `vhosts` entries of `Pulumi.<stack>.yaml` (in `folder`)."""
    config = yaml.safe_load((folder / f"Pulumi.{stack}.yaml").read_text())["config"]
    vhosts: list[dict[str, Any]] = config["rabbitmq-retry:vhosts"]
    return vhosts


SECRET_VALUES: dict[int, str] = {}
"""What each secret made by `secret` holds, by the Output's id: the wire test encodes it as the engine would."""


def secret(value: str) -> pulumi.Output[str]:
    """A secret, as `Config.require_secret` gives a Python program and a secret input a TypeScript one."""
    output = pulumi.Output.secret(value)
    SECRET_VALUES[id(output)] = value
    return output


APPLICATION = {"user": "billing-app", "publishes": ["orders"], "consumes": ["orders.billing"],
               "topic_permissions": [{"exchange": "orders", "write": "^order\\."}],
               "limits": {"max_connections": 10, "max_channels": 50}}


def adopted_vhost() -> "VhostSpec":
    """The existing vhost "/" of `tests/recordings/Pulumi.every.yaml` (an adopted queue, `import`), written the typed
    way (mypy checks it), with every key that is a keyword or a string standing for another type: migrations of each
    kind (`move.from_`, an external move), a plain queue's arguments as strings, alerting rules (`for_`)."""
    every = stack_vhosts("every", ROOT / "tests" / "recordings")[1]
    return {
        "name": every["name"],
        "exchanges": every["exchanges"],
        "import_": every["import"],
        "queues": [*every["queues"],
                   {"name": "legacy.jobs.q", "type": "quorum", "retry": {"delays": ["10s"]},
                    "alerts": {"parked": {"for_": "5m", "threshold": 2}}},
                   {"name": "legacy.batch", "type": "classic", "retry": {"delays": ["1m"]}},
                   {"name": "legacy.ttl", "type": "classic",
                    "arguments": {"x-message-ttl": "60000", "x-queue-type": "classic",
                                  "x-single-active-consumer": "true"}}],
        "migrations": [
            {"name": "jobs-to-quorum", "step": "retire", "move": {"from_": "legacy.jobs.c", "to": "legacy.jobs.q"}},
            {"name": "runtime-batch", "step": "retire",
             "move": {"from_": "runtime.batch", "to": "legacy.batch",
                      "external": {"error_queue": "runtime.batch.dlq", "queues": ["runtime.batch.wait"]}}},
            {"name": "jobs-tiers", "step": "drain", "drain_tiers": {"queue": "legacy.jobs", "delays": ["10s", "1m"]}},
        ],
        "alerts": {"labels": {"team": "ops"}, "no_consumer": {"for_": "10m", "severity": "warning"}},
    }


def vhost_args() -> type:
    from rabbitmq_retry import VhostArgs

    return VhostArgs


def cases() -> dict[str, tuple[type, type, str, Callable[[], dict[str, Any]]]]:
    """What the package tests construct both ways: component, its args type, name, and a function making the
    args as a Python program writes them (a new secret Output each call)."""
    from rabbitmq_retry import DelayLevels, DelayLevelsArgs, RetryableQueue, RetryableQueueArgs, Vhost, VhostArgs

    dev, prod = stack_vhosts("dev")[0], stack_vhosts("prod")[0]
    return {
        "dev-vhost": (Vhost, VhostArgs, "shop", lambda: {"vhost": dev}),
        "prod-vhost": (Vhost, VhostArgs, "shop", lambda: {"vhost": prod, "protect_queues": True,
                                                          "retain_error_queues": True}),
        "vhost-with-application": (Vhost, VhostArgs, "shop", lambda: {
            "vhost": {**dev, "applications": [APPLICATION]}, "passwords": {"billing-app": secret("s3cret")}}),
        "vhost-with-policies": (Vhost, VhostArgs, "shop", lambda: {"vhost": {**dev, "policies": [
            {"name": "reports-ttl", "pattern": "^reports$", "priority": 5, "apply_to": "queues",
             "definition": {"message-ttl": "60000", "overflow": "reject-publish"}}], "operator_policies": [
            {"name": "cap", "pattern": ".*", "definition": {"max-length": "100000"}}]}}),
        "vhost-with-migrations-and-import": (Vhost, VhostArgs, "root", lambda: {"vhost": adopted_vhost()}),
        "standalone-tiers": (RetryableQueue, RetryableQueueArgs, "billing", lambda: {
            "vhost": "payments", "protect_queues": True, "retain_error_queues": True,
            "queue": {"name": "billing", "type": "quorum", "bindings": [{"exchange": "amq.topic", "external": True,
                                                                        "routing_key": "billing.#"}],
                      "max_length": 100000, "retry": {"delays": ["5s", "1m", "10m"], "max_retries": 6,
                                                      "error_max_length": 1000}}}),
        "standalone-native": (RetryableQueue, RetryableQueueArgs, "push", lambda: {
            "vhost": "payments", "queue": {"name": "push", "type": "quorum", "quorum_group_size": 3,
                                           "retry": {"strategy": "native", "min_delay": "1s", "max_delay": "30s",
                                                     "max_retries": 5}}}),
        "standalone-levels": (DelayLevels, DelayLevelsArgs, "payments-levels", lambda: {
            "vhost": "payments", "delay_levels": {"unit": "1s", "max_delay": "1h", "quorum_group_size": 3}}),
    }
