"""Everything a stack says, parsed once into one typed `StackSettings`: the topology (`StackConfig`), the queue
guard's keys, the RabbitMQ provider's and TLS settings, and the passwords as written.

Pure: the source is a mapping of `namespace:key` → text, as the Pulumi engine hands config to the program (JSON
text for structured values). The program reads it from the Pulumi runtime (`components/pulumi/program_settings.py`); the
tools hand a stack file to the same program under Pulumi's mocks (`config/pulumi_yaml.py` reads it as the engine
would, `tools/lib/evaluation.py` runs it), so both parse through `parse_stack_settings`. Every problem is a
(key path, what to fix) pair; the caller raises them together.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from ..model.fields import did_you_mean
from ..model.keys import NAMESPACE, PROVIDER_KEYS
from ..model.problems import ConfigError
from ..model.stack_config import StackConfig
from .capabilities import parse_version
from .load import load_stack_config
from .passwords import plain_password_problems

PROVIDER = "rabbitmq"
"""The RabbitMQ provider's config namespace (`rabbitmq:endpoint`, …)."""
DELETE_WITH_MESSAGES = "delete_with_messages"
AMQP_PORT = "amqp_port"
"""The queue guard's keys (docs/guard.md): the topology parser accepts them (model/keys.py), this module parses
them into `GuardSettings`."""
PASSWORDS_KEY = f"{NAMESPACE}:passwords"
BROKER_KEY = f"{NAMESPACE}:broker"

KeyProblem = tuple[str, str]
"""(key path, what to fix), raised together as one ConfigError; not `components.model.problems.Problem`, which the
plan's checks find with a code."""


def decode(value: Any) -> Any:
    """Structured values arrive as JSON text, booleans as "true"/"false"."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def namespace_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `rabbitmq-retry:*` keys of `values`, without the prefix, decoded."""
    return {key.partition(":")[2]: decode(value) for key, value in values.items()
            if key.partition(":")[0] == NAMESPACE}


def _names_a_queue(entry: str) -> bool:
    """Some `/` has a vhost before it and a queue after it."""
    return any(entry[:i] and entry[i + 1:] for i, char in enumerate(entry) if char == "/")


def parse_delete_with_messages(raw: object) -> tuple[frozenset[str], list[KeyProblem]]:
    """(entries, problems) of `rabbitmq-retry:delete_with_messages`: a list of distinct `<vhost>/<queue>`."""
    path = DELETE_WITH_MESSAGES
    if raw is None:
        return frozenset(), []
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        return frozenset(), [(path, f"expected a list of <vhost>/<queue>, got {type(raw).__name__}: e.g. "
                              '["shop/orders"] ("//orders" for a queue of the default vhost)')]
    problems, seen = [], set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, str) or not _names_a_queue(entry):
            problems.append((f"{path}[{i}]", f"{entry!r} is not <vhost>/<queue>, e.g. \"shop/orders\" "
                             '("//orders" for a queue of the default vhost)'))
        elif entry in seen:
            problems.append((f"{path}[{i}]", f"{entry!r} is listed twice; remove one"))
        seen.add(entry)
    return frozenset(e for e in raw if isinstance(e, str)), problems


def parse_amqp_port(raw: object) -> tuple[int | None, list[KeyProblem]]:
    """`rabbitmq-retry:amqp_port`: the broker's AMQP port as reached from where `pulumi up` runs."""
    if raw is None:
        return None, []
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw < 65536:
        return None, [(AMQP_PORT, f"expected a port number (1-65535), got {raw!r}")]
    return raw, []


@dataclass(frozen=True)
class GuardSettings:
    """The queue guard's keys (components/pulumi/guard.py)."""

    delete_with_messages: frozenset[str] = frozenset()
    """`<vhost>/<queue>` that `pulumi up` may delete with what they hold (reviewed as data loss)."""
    amqp_port: int | None = None
    """The broker's AMQP port as reached from where `pulumi up` runs (None: read it from the broker, else 5672)."""


def parse_guard_settings(values: Mapping[str, Any]) -> tuple[GuardSettings, list[KeyProblem]]:
    """The guard's keys of `values` (`namespace:key` → text); what the hook reads again when it runs."""
    allowed, problems = parse_delete_with_messages(decode(values.get(f"{NAMESPACE}:{DELETE_WITH_MESSAGES}")))
    port, port_problems = parse_amqp_port(decode(values.get(f"{NAMESPACE}:{AMQP_PORT}")))
    return GuardSettings(allowed, port), problems + port_problems


@dataclass(frozen=True)
class ProviderSettings:
    """The RabbitMQ provider's `rabbitmq:*` settings as the stack writes them (None: unset; the provider and the
    tools then fall back to its environment variables, docs/provider.md §9)."""

    endpoint: str | None = None
    username: str | None = None
    password: str | None = None
    """A secret: from a stack file, its placeholder (the tools never decrypt it)."""
    insecure: str | None = None
    cacert_file: str | None = None
    clientcert_file: str | None = None
    clientkey_file: str | None = None
    written: Mapping[str, str] = field(default_factory=dict)
    """Every `rabbitmq:*` key as written (`rabbitmq:cacertFile` → text): what the management client reads."""


_PROVIDER_FIELDS = {"endpoint": "endpoint", "username": "username", "password": "password", "insecure": "insecure",
                    "cacertFile": "cacert_file", "clientcertFile": "clientcert_file", "clientkeyFile": "clientkey_file"}


def parse_provider_settings(values: Mapping[str, Any],
                            secret_keys: Collection[str] = ()) -> tuple[ProviderSettings, list[KeyProblem]]:
    """The provider's settings, and what would fail `pulumi up`: a key the provider does not read (misspelt, so its
    setting is silently not used), an endpoint that is not the management API's http(s) URL or ends in "/" (the API
    answers 405), and a provider password in plain text."""
    written = {key: str(value) for key, value in values.items()
               if key.partition(":")[0] == PROVIDER and value is not None}
    problems = []
    for key in sorted(written):
        if key.partition(":")[2] not in PROVIDER_KEYS:
            guess = did_you_mean(key, [f"{PROVIDER}:{k}" for k in PROVIDER_KEYS])
            problems.append((key, f"unknown key of the RabbitMQ provider, which ignores it;{guess or ''} (allowed: "
                             + ", ".join(f"{PROVIDER}:{k}" for k in PROVIDER_KEYS) + ")"))
    endpoint = written.get(f"{PROVIDER}:endpoint") or None
    if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
        problems.append((f"{PROVIDER}:endpoint", f'"{endpoint}" is not an http(s) URL: the provider talks to the '
                         "management API, e.g. http://127.0.0.1:15672 (not the AMQP port)"))
    elif endpoint and endpoint.endswith("/"):
        problems.append((f"{PROVIDER}:endpoint", f'"{endpoint}" ends with "/": the management API answers 405; '
                         "remove the trailing slash"))
    if f"{PROVIDER}:password" in written and f"{PROVIDER}:password" not in secret_keys:
        problems.append((f"{PROVIDER}:password", "stored in plain text; use `pulumi config set --secret "
                         f"{PROVIDER}:password` or the RABBITMQ_PASSWORD environment variable"))
    typed = {name: written.get(f"{PROVIDER}:{key}") or None for key, name in _PROVIDER_FIELDS.items()}
    return ProviderSettings(**typed, written=written), problems


def password_storage_problems(values: Mapping[str, Any], secret_keys: Collection[str],
                              stack_file: tuple[bool, object]) -> list[KeyProblem]:
    """Passwords stored in plain text: each plain value of the stack file (`stack_file`: whether there is one, and
    its `passwords` value as written, `{secure: …}` leaves and all), or, without a stack file, the whole key when
    it is not handed over as a secret."""
    found, written = stack_file
    if found and (problems := plain_password_problems(written)):
        return problems
    if PASSWORDS_KEY in values and PASSWORDS_KEY not in secret_keys:
        return [(PASSWORDS_KEY, "stored in plain text; set each one with `pulumi config set "
                 f"--secret --path '{PASSWORDS_KEY}.<user>' <password>`")]
    return []


def written_passwords(file_config: Mapping[str, Any]) -> object:
    """A stack file's passwords as written (`config:` of `Pulumi.<stack>.yaml`), `{secure: …}` leaves and all."""
    return file_config.get(PASSWORDS_KEY, file_config.get("passwords"))


@dataclass(frozen=True)
class StackSettings:
    """Everything the stack says, parsed."""

    config: StackConfig
    """The topology: vhosts, defaults, protection, broker version, alerts."""
    guard: GuardSettings
    provider: ProviderSettings
    passwords: object = None
    """`rabbitmq-retry:passwords` as handed over (user → password; from a stack file, placeholders); None unset.
    Shape-checked with the topology; which users lack one is `passwords.password_problems`' business."""

    @property
    def amqp_port(self) -> int | None:
        return self.guard.amqp_port

    @property
    def delete_with_messages(self) -> frozenset[str]:
        return self.guard.delete_with_messages


def parse_stack_settings(values: Mapping[str, Any], secret_keys: Collection[str] = (),
                         stack_file: tuple[bool, object] = (False, None)) -> tuple[StackSettings, list[KeyProblem]]:
    """The settings of `values` (every `namespace:key` → text), and the problems that do not stop the topology from
    being parsed (plain-text passwords, the provider's settings, the guard's keys), for the caller to add its own to
    and raise. ConfigError with every problem when the topology itself is refused."""
    namespace = namespace_of(values)
    guard, guard_problems = parse_guard_settings(values)
    provider, provider_problems = parse_provider_settings(values, secret_keys)
    problems = password_storage_problems(values, secret_keys, stack_file) + provider_problems + guard_problems
    try:
        config = load_stack_config(namespace)
    except ConfigError as error:
        raise ConfigError(error.problems + problems) from None
    return StackSettings(config, guard, provider, namespace.get("passwords")), problems


def without_written_version(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` without `broker.version`, whose checks refuse a stack for the version it is written for: `make
    doctor` examines a stack against the live broker's version instead (`with_written_version` puts it back)."""
    return {key: value for key, value in values.items() if key != BROKER_KEY}


def with_written_version(settings: StackSettings, values: Mapping[str, Any]) -> StackSettings:
    """`settings` (parsed from `without_written_version(values)`) with the `broker.version` of `values`, unchecked."""
    broker = decode(values.get(BROKER_KEY))
    written = broker.get("version") if isinstance(broker, Mapping) else None
    version = parse_version(written) if isinstance(written, str) else None
    return replace(settings, config=replace(settings.config, broker_version=version))
