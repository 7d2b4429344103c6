"""Application passwords: the command that sets one, and which ones are missing.

Whether passwords are required is the caller's decision (a preview may run without them), so
`load_stack_config` only checks their shape and `password_problems` says what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from ..migrations import kind_of
from ..model.fields import describe
from ..model.key_paths import entry_path, with_paths
from ..model.keys import NAMESPACE
from ..model.naming import SHOVEL_USER
from ..model.stack_config import StackConfig

NOT_A_MAPPING = ("expected a mapping of application user to password, set with "
                 f"`pulumi config set --secret --path '{NAMESPACE}:passwords.<user>' <password>`")
CHANGE_IT = " (and change that password: the plain one may be in version control)"
_DOTTED_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
"""A key Pulumi's property paths take after a dot; any other is written `["…"]`, with `\\"` for a quote."""


def password_path(user: str) -> str | None:
    """The `pulumi config set --path` key of `user`'s password, or None when no property path can spell
    it: inside `["…"]` a backslash before the closing quote would escape it."""
    if user.endswith("\\"):
        return None
    return key_path(f"{NAMESPACE}:passwords", user)


def password_command(user: str) -> str:
    """How to set `user`'s password, as a POSIX shell command (the key in single quotes)."""
    path = password_path(user)
    if path is None:
        return ("no `pulumi config set --path` can name this user (it ends with a backslash and needs "
                '`["…"]`); rename the user')
    quoted = "'" + path.replace("'", "'\\''") + "'"
    return f"`pulumi config set --secret --path {quoted} <password>`"


def password_problems(config: StackConfig, passwords: object) -> list[tuple[str, str]]:
    """Each application or operator user of `config` without a non-empty string password in `passwords` (the
    value of `rabbitmq-retry:passwords`; None when unset), as (key path, what to do)."""
    problems: list[tuple[str, str]] = []
    if passwords is None:
        passwords = {}
    if not isinstance(passwords, Mapping):
        problems.append(("passwords", NOT_A_MAPPING))
        passwords = {}
    for at, vhost in with_paths("", "vhosts", config.vhosts):
        for user, path in vhost.user_paths():
            where, fix = f"{at}.{path}", password_command(user)
            if user not in passwords:
                problems.append((where, f'no password for "{user}": {fix}'))
            elif not isinstance(passwords[user], str):
                problems.append((where, f'the password for "{user}" is {describe(passwords[user])}, '
                                 f"not a string: {fix}"))
            elif not passwords[user]:
                problems.append((where, f'the password for "{user}" is empty: {fix}'))
    return problems + _shovel_password_problems(config, passwords)


def moves_queues(config: StackConfig) -> bool:
    """A migration of the stack moves a queue with shovels (a move in step move): the shovel user is needed."""
    return any(kind_of(m).runs_shovels(m) for vhost in config.vhosts for m in vhost.migrations)


def _shovel_password_problems(config: StackConfig, passwords: Mapping[object, object]) -> list[tuple[str, str]]:
    """The shovel user's password, like an application's, once a migration moves a queue."""
    where = next((entry_path(at, "migrations", vhost.migrations, m.index)
                  for at, vhost in with_paths("", "vhosts", config.vhosts)
                  for m in vhost.migrations if kind_of(m).runs_shovels(m)), None)
    if where is None:
        return []
    # Filed under the shovel users' common name: the stack's own user is named after the Pulumi project and stack
    # (naming.shovel_user), which the config does not know.
    key, fix = SHOVEL_USER, password_command(SHOVEL_USER)
    if key not in passwords:
        return [(where, f"no password for the stack's shovel user, which this migration's shovels connect as: {fix}")]
    if not isinstance(passwords[key], str):
        return [(where, f"the shovel user's password is {describe(passwords[key])}, not a string: {fix}")]
    if not passwords[key]:
        return [(where, f"the shovel user's password is empty: {fix}")]
    return []


def key_path(path: str, key: object) -> str:
    """`path` then `key` the way Pulumi's property paths write it: `.billing`, `["billing.svc"]`, `[0]`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _DOTTED_KEY.fullmatch(str(key)):
        return f"{path}.{key}"
    return f'{path}["{str(key).replace(chr(34), chr(92) + chr(34))}"]'


def _plain_leaves(path: str, value: object) -> Iterator[str]:
    if isinstance(value, Mapping) and set(value) == {"secure"}:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _plain_leaves(key_path(path, key), item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _plain_leaves(key_path(path, index), item)
    elif value is not None:
        yield path


def plain_password_paths(value: object) -> list[str]:
    """The key path of every value under `rabbitmq-retry:passwords`, as written in a stack file, that is not
    encrypted (`{secure: …}`). The engine hands the program the whole map as one secret as soon as one
    value is encrypted, so only the stack file shows the plain ones."""
    return list(_plain_leaves("passwords", value))


def plain_password_problems(value: object) -> list[tuple[str, str]]:
    """Each plain-text value of `plain_password_paths`, with the command that encrypts it; never the value."""
    if not isinstance(value, Mapping) or set(value) == {"secure"}:
        return [(path, "stored in plain text in the stack file; remove it with `pulumi config rm "
                 f"{NAMESPACE}:passwords` and set each password with `pulumi config set --secret --path "
                 f"'{NAMESPACE}:passwords.<user>' <password>`{CHANGE_IT}")
                for path in plain_password_paths(value)]
    return [(path, f"stored in plain text in the stack file; encrypt it: {password_command(str(user))}{CHANGE_IT}")
            for user, item in value.items() for path in _plain_leaves(key_path("passwords", user), item)]
