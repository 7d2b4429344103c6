"""Read the stack's config from the Pulumi runtime and validate it before any resource exists."""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from .checks import TopologyError, check_logical_names
from .config import ConfigError, StackConfig, load_stack_config
from .naming import vhost_key
from .plan import plan_vhost

NAMESPACE = "rabbitmq-retry"


def _all_keys() -> set[str]:
    # Pulumi has no public API that lists config keys; unknown (misspelt) keys are only
    # detectable from the runtime's own map.
    return set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())


def _decode(value: Any) -> Any:
    """Structured values arrive as JSON text, booleans as "true"/"false"."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def provider_problems() -> list[tuple[str, str]]:
    """Provider settings that would fail `pulumi up` (../shared/notes/provider.md §1, §8)."""
    problems = []
    endpoint = pulumi.Config("rabbitmq").get("endpoint")
    if endpoint and endpoint.endswith("/"):
        problems.append(("rabbitmq:endpoint", f'"{endpoint}" ends with "/": the management API answers 405; '
                         "remove the trailing slash"))
    if "rabbitmq:password" in _all_keys() and not runtime_config.is_config_secret("rabbitmq:password"):
        problems.append(("rabbitmq:password", "stored in plain text; use `pulumi config set --secret "
                         "rabbitmq:password` or the RABBITMQ_PASSWORD environment variable"))
    if f"{NAMESPACE}:passwords" in _all_keys() and not runtime_config.is_config_secret(f"{NAMESPACE}:passwords"):
        problems.append((f"{NAMESPACE}:passwords", "stored in plain text; set each one with `pulumi config set "
                         f"--secret --path '{NAMESPACE}:passwords.<user>' <password>`"))
    return problems


def read_stack_config() -> StackConfig:
    """Every `rabbitmq-retry:*` key, parsed; raises ConfigError listing every problem."""
    raw = {key.partition(":")[2]: _decode(runtime_config.get_config(key))
           for key in _all_keys() if key.partition(":")[0] == NAMESPACE}
    problems = provider_problems()
    try:
        config = load_stack_config(raw)
    except ConfigError as error:
        raise ConfigError(error.problems + problems) from None
    if problems:
        raise ConfigError(problems)
    if clashes := check_logical_names((vhost_key(v.name), plan_vhost(v)) for v in config.vhosts):
        raise TopologyError("the stack", clashes)
    return config
