"""The stack's settings from the Pulumi runtime: the program's one source of `StackSettings`
(components/config/stack_settings.py parses them), and of the guard's and the provider's settings when a hook runs.

The only module that reads `pulumi.runtime.config`. Under Pulumi's mocks (the tools, tools/lib/evaluation.py) the
runtime holds a stack file's values as the engine would hand them over, so the tools parse through here too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from ..config.capabilities import end_of_support, version_warnings
from ..config.crosschecks import LOCK_OUT
from ..config.passwords import password_problems
from ..config.pulumi_yaml import StackFileError, load
from ..config.stack_settings import (
    GuardSettings,
    ProviderSettings,
    StackSettings,
    parse_guard_settings,
    parse_provider_settings,
    parse_stack_settings,
    written_passwords,
)
from ..model.key_paths import with_paths
from ..model.problems import ConfigError
from ..model.stack_config import StackConfig
from .boundary import reported


def runtime_values() -> tuple[dict[str, Any], set[str]]:
    """Every config key the engine handed over (`namespace:key` → text), and those that are secrets."""
    # Pulumi has no public API that lists config keys; unknown (misspelt) keys are only
    # detectable from the runtime's own map.
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    return ({key: runtime_config.get_config(key) for key in keys},
            {key for key in keys if runtime_config.is_config_secret(key)})


def project_directory() -> Path:
    """Where Pulumi.yaml and the stack files are: the engine's root directory (the tools' mocks give the directory
    of the stack file they evaluate), else (under Pulumi's own default mocks, which report the literal
    "root_directory") the directory of this program."""
    root = pulumi.get_root_directory()
    if root and Path(root).is_dir():
        return Path(root)
    return Path(__file__).resolve().parent.parent


def stack_file_passwords() -> tuple[bool, object]:
    """Whether the stack file `Pulumi.<stack>.yaml` exists, and its `rabbitmq-retry:passwords` value as
    written, `{secure: …}` leaves and all (None when absent)."""
    path = project_directory() / f"Pulumi.{pulumi.get_stack()}.yaml"
    if not path.is_file():
        return False, None
    try:
        return True, written_passwords(load(path))
    except StackFileError as error:  # the engine read it; only a stricter reading can refuse it
        raise ConfigError([(path.name, str(error))]) from None


def provider_username(provider: ProviderSettings) -> str | None:
    """The user `pulumi up` deploys as: `rabbitmq:username`, else RABBITMQ_USERNAME."""
    return provider.username or os.environ.get("RABBITMQ_USERNAME") or None


def lock_out_problems(config: StackConfig, deployer: str | None) -> list[tuple[str, str]]:
    """An application whose user is the provider's own: its User resource would replace that user's tags
    (with none) and its password while `pulumi up` still needs them."""
    return [(f"{at}.{path}", f'"{user}" is the provider\'s user '
             f"(rabbitmq:username or RABBITMQ_USERNAME): {LOCK_OUT}")
            for at, vhost in with_paths("", "vhosts", config.vhosts)
            for user, path in vhost.user_paths() if user == deployer]


@reported
def read_stack_settings() -> StackSettings:
    """Everything the stack says, parsed; raises ConfigError listing every problem. Missing passwords are
    problems only in a real update: a preview gets placeholders (`stack.application_passwords`)."""
    values, secret_keys = runtime_values()
    settings, problems = parse_stack_settings(values, secret_keys, stack_file_passwords())
    config = settings.config
    problems += lock_out_problems(config, provider_username(settings.provider))
    if not pulumi.runtime.is_dry_run():
        problems += password_problems(config, settings.passwords)
    if problems:
        raise ConfigError(problems)
    if config.broker_version is not None and (warning := end_of_support(config.broker_version)):
        pulumi.log.warn(f"broker.version: {warning}")
    for warning in version_warnings(config, config.broker_version):
        pulumi.log.warn(warning)
    return settings


def runtime_guard_settings() -> GuardSettings:
    """The guard's keys as the engine hands them over now (a hook runs long after the program read them);
    ConfigError when they are wrong."""
    values, _ = runtime_values()
    guard, problems = parse_guard_settings(values)
    if problems:
        raise ConfigError(problems)
    return guard


def runtime_provider_settings() -> ProviderSettings:
    """The default provider's `rabbitmq:*` settings as the engine hands them over."""
    values, secret_keys = runtime_values()
    return parse_provider_settings(values, secret_keys)[0]
