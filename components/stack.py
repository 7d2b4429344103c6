"""Read the stack's config from the Pulumi runtime and validate it before any resource exists."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pulumi
import pulumi_rabbitmq as rabbitmq
import yaml
from pulumi.runtime import config as runtime_config

from . import naming
from .checks import TopologyError, check_logical_names, check_vhost
from .config import ConfigError, StackConfig, load_stack_config, password_command, password_problems
from .config.capabilities import end_of_support, version_warnings
from .config.crosschecks import LOCK_OUT
from .config.fields import did_you_mean
from .config.keys import NAMESPACE, PROVIDER_KEYS
from .config.passwords import moves_queues, plain_password_problems
from .entries import VhostPlan
from .guard import (
    AMQP_PORT,
    DELETE_WITH_MESSAGES,
    check_guard_config,
    parse_amqp_port,
    parse_delete_with_messages,
    path_guard,
    queue_guard,
    unplanned_entries,
)
from .layout import stack_children
from .naming import vhost_key
from .plan import plan_vhost
from .resources import DEFAULT_AMQP_PORT, ShovelAccess


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


def project_directory() -> Path:
    """Where Pulumi.yaml and the stack files are: the engine's root directory, else (under Pulumi's mocks,
    which report the literal "root_directory") the directory of this program."""
    root = pulumi.get_root_directory()
    if root and (Path(root) / "Pulumi.yaml").is_file():
        return Path(root)
    return Path(__file__).resolve().parent.parent


def stack_file_passwords() -> tuple[bool, object]:
    """Whether the stack file `Pulumi.<stack>.yaml` exists, and its `rabbitmq-retry:passwords` value as
    written, `{secure: …}` leaves and all (None when absent)."""
    path = project_directory() / f"Pulumi.{pulumi.get_stack()}.yaml"
    if not path.is_file():
        return False, None
    config = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("config") or {}
    return True, config.get(f"{NAMESPACE}:passwords", config.get("passwords"))


def password_storage_problems() -> list[tuple[str, str]]:
    """Passwords stored in plain text: each plain value of the stack file, or, without a stack file, the whole
    key when the engine does not hand it over as a secret."""
    found, written = stack_file_passwords()
    if found and (problems := plain_password_problems(written)):
        return problems
    if f"{NAMESPACE}:passwords" in _all_keys() and not runtime_config.is_config_secret(f"{NAMESPACE}:passwords"):
        return [(f"{NAMESPACE}:passwords", "stored in plain text; set each one with `pulumi config set "
                 f"--secret --path '{NAMESPACE}:passwords.<user>' <password>`")]
    return []


def provider_problems() -> list[tuple[str, str]]:
    """Provider settings that would fail `pulumi up`: a key the provider does not read (misspelt, so its setting
    is silently not used), an endpoint that is not the management API's http(s) URL or ends in "/" (the API
    answers 405), and a provider password in plain text."""
    problems = []
    for key in sorted(k for k in _all_keys() if k.partition(":")[0] == "rabbitmq"):
        if key.partition(":")[2] not in PROVIDER_KEYS:
            guess = did_you_mean(key, [f"rabbitmq:{k}" for k in PROVIDER_KEYS])
            problems.append((key, f"unknown key of the RabbitMQ provider, which ignores it;{guess or ''} (allowed: "
                             + ", ".join(f"rabbitmq:{k}" for k in PROVIDER_KEYS) + ")"))
    endpoint = pulumi.Config("rabbitmq").get("endpoint")
    if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
        problems.append(("rabbitmq:endpoint", f'"{endpoint}" is not an http(s) URL: the provider talks to the '
                         "management API, e.g. http://127.0.0.1:15672 (not the AMQP port)"))
    elif endpoint and endpoint.endswith("/"):
        problems.append(("rabbitmq:endpoint", f'"{endpoint}" ends with "/": the management API answers 405; '
                         "remove the trailing slash"))
    if "rabbitmq:password" in _all_keys() and not runtime_config.is_config_secret("rabbitmq:password"):
        problems.append(("rabbitmq:password", "stored in plain text; use `pulumi config set --secret "
                         "rabbitmq:password` or the RABBITMQ_PASSWORD environment variable"))
    return problems


def provider_username() -> str | None:
    """The user `pulumi up` deploys as: `rabbitmq:username`, else RABBITMQ_USERNAME."""
    return runtime_config.get_config("rabbitmq:username") or os.environ.get("RABBITMQ_USERNAME") or None


def lock_out_problems(config: StackConfig) -> list[tuple[str, str]]:
    """An application whose user is the provider's own: its User resource would replace that user's tags
    (with none) and its password while `pulumi up` still needs them."""
    deployer = provider_username()
    return [(f"vhosts[{i}].{path}", f'"{user}" is the provider\'s user '
             f"(rabbitmq:username or RABBITMQ_USERNAME): {LOCK_OUT}")
            for i, vhost in enumerate(config.vhosts) for user, path in vhost.user_paths() if user == deployer]


def _written_passwords() -> object:
    return _decode(runtime_config.get_config(f"{NAMESPACE}:passwords"))


def read_stack_config() -> StackConfig:
    """Every `rabbitmq-retry:*` key, parsed; raises ConfigError listing every problem. Missing passwords are
    problems only in a real update: a preview gets placeholders (`application_passwords`)."""
    raw = {key.partition(":")[2]: _decode(runtime_config.get_config(key))
           for key in _all_keys() if key.partition(":")[0] == NAMESPACE}
    # The guard's keys are the guard's to parse (`guard.py`); the hook reads them when it runs.
    problems = password_storage_problems() + provider_problems() + check_guard_config(raw)
    try:
        config = load_stack_config(raw)
    except ConfigError as error:
        raise ConfigError(error.problems + problems) from None
    problems += lock_out_problems(config)
    if not pulumi.runtime.is_dry_run():
        problems += password_problems(config, _written_passwords())
    if problems:
        raise ConfigError(problems)
    if config.broker_version is not None and (warning := end_of_support(config.broker_version)):
        pulumi.log.warn(f"broker.version: {warning}")
    for warning in version_warnings(config, config.broker_version):
        pulumi.log.warn(warning)
    return config


def stack_shovel_user() -> str:
    """The user this stack's shovels connect as: its own, named after the Pulumi project and stack
    (`naming.shovel_user`)."""
    return naming.shovel_user(pulumi.get_project(), pulumi.get_stack())


def plan_stack(config: StackConfig, shovel_user: str | None = None) -> list[tuple[str, VhostPlan]]:
    """(Vhost component name, plan) of every vhost, planned and checked once, before any component exists, so
    that problems carry the stack file's key paths and two vhosts' URNs cannot clash. The Vhost components
    register these plans as they are. `shovel_user`: the stack's shovel user; default this program's own
    (`stack_shovel_user()`), which a tool running outside the program passes for the stack it looks at."""
    user = shovel_user or stack_shovel_user()
    plans = [(vhost_key(v.name), plan_vhost(v, f"vhosts[{i}]", user)) for i, v in enumerate(config.vhosts)]
    topology = [problem for _, plan in plans for problem in check_vhost(plan)]
    if problems := topology + check_logical_names(plans):
        raise TopologyError("the stack", problems)
    return plans


def register_guard(plans: list[tuple[str, VhostPlan]]) -> None:
    """Register the queue guard's hook whatever the stack declares: queues deleted by this update (their vhost
    removed from the config included) are bound to it in the state, and the engine cannot delete them without it.
    Warn about each `delete_with_messages` entry that names no queue of the stack: right only for a queue this
    update removes, and a forgotten waiver otherwise."""
    queue_guard()
    path_guard()
    allowed, _ = parse_delete_with_messages(_decode(runtime_config.get_config(f"{NAMESPACE}:{DELETE_WITH_MESSAGES}")))
    for entry in unplanned_entries(allowed, [plan for _, plan in plans]):
        pulumi.log.warn(f'{NAMESPACE}:{DELETE_WITH_MESSAGES} lists "{entry}", which this stack does not declare: it '
                        "lets `pulumi up` delete that queue with its messages only if this update removes it; remove "
                        "the entry once that is done")


def declare_shovel_user(plans: list[tuple[str, VhostPlan]],
                        passwords: Mapping[str, pulumi.Input[str]]) -> ShovelAccess | None:
    """The stack's one shovel user (no tags), named as the plans name it (`stack_shovel_user`), when a migration of
    any vhost moves a queue; each such vhost grants it least-privilege permissions of its own. Its password is
    `passwords.rabbitmq-retry-shovel`; the AMQP port its shovels connect to is `rabbitmq-retry:amqp_port` (default
    5672). None when no migration needs it: then the user leaves the plan, and `pulumi up` deletes it (another
    stack's shovel user, named after its own stack, is not this one's to touch)."""
    registered = stack_children(plans)
    if not registered:
        return None
    name = next(grant.user for _, plan in plans for grant in plan.shovel_permissions)
    user = rabbitmq.User(registered[0][1], name=name,
                         password=pulumi.Output.secret(passwords[naming.SHOVEL_USER]), tags=[])
    port, _ = parse_amqp_port(_decode(runtime_config.get_config(f"{NAMESPACE}:{AMQP_PORT}")))
    return ShovelAccess(user.name, passwords[naming.SHOVEL_USER], port or DEFAULT_AMQP_PORT)


def application_passwords(config: StackConfig) -> dict[str, pulumi.Output[str]]:
    """Each application or operator user's password as a secret. In a preview a missing one is a random
    placeholder that nobody knows, with a warning: `pulumi up` refuses it (`read_stack_config`)."""
    written = _written_passwords()
    passwords = written if isinstance(written, Mapping) else {}
    result = {}
    for vhost in config.vhosts:
        for user, path in vhost.user_paths():
            password = passwords.get(user)
            if not isinstance(password, str) or not password:
                kind = "application" if path.startswith("applications") else "operator"
                pulumi.log.warn(f'no password for {kind} user "{user}": this preview uses a placeholder '
                                f"and `pulumi up` will refuse; set it with {password_command(user)}")
                password = secrets.token_urlsafe(32)
            result[user] = pulumi.Output.secret(password)
    if moves_queues(config):
        password = passwords.get(naming.SHOVEL_USER)
        if not isinstance(password, str) or not password:
            pulumi.log.warn(f'no password for the shovel user "{stack_shovel_user()}" of the migrations: this '
                            f"preview uses a placeholder and `pulumi up` will refuse; set it with "
                            f"{password_command(naming.SHOVEL_USER)}")
            password = secrets.token_urlsafe(32)
        result[naming.SHOVEL_USER] = pulumi.Output.secret(password)
    return result
