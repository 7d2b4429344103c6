"""Application passwords: the command that sets one, and which ones are missing.

Whether passwords are required is the caller's decision (a preview may run without them), so
`load_stack_config` only checks their shape and `password_problems` says what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .fields import describe
from .model import StackConfig

NAMESPACE = "rabbitmq-retry"
NOT_A_MAPPING = ("expected a mapping of application user to password, set with "
                 f"`pulumi config set --secret --path '{NAMESPACE}:passwords.<user>' <password>`")
_DOTTED_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
"""A key Pulumi's property paths take after a dot; any other is written `["…"]`, with `\\"` for a quote."""


def password_path(user: str) -> str | None:
    """The `pulumi config set --path` key of `user`'s password, or None when no property path can spell
    it: inside `["…"]` a backslash before the closing quote would escape it."""
    if _DOTTED_KEY.fullmatch(user):
        return f"{NAMESPACE}:passwords.{user}"
    if user.endswith("\\"):
        return None
    escaped = user.replace('"', '\\"')
    return f'{NAMESPACE}:passwords["{escaped}"]'


def password_command(user: str) -> str:
    """How to set `user`'s password, as a POSIX shell command (the key in single quotes)."""
    path = password_path(user)
    if path is None:
        return ("no `pulumi config set --path` can name this user (it ends with a backslash and needs "
                '`["…"]`); rename the user')
    quoted = "'" + path.replace("'", "'\\''") + "'"
    return f"`pulumi config set --secret --path {quoted} <password>`"


def password_problems(config: StackConfig, passwords: object) -> list[tuple[str, str]]:
    """Each application user of `config` without a non-empty string password in `passwords` (the value
    of `rabbitmq-retry:passwords`; None when unset), as (key path, what to do)."""
    problems: list[tuple[str, str]] = []
    if passwords is None:
        passwords = {}
    if not isinstance(passwords, Mapping):
        problems.append(("passwords", NOT_A_MAPPING))
        passwords = {}
    for i, vhost in enumerate(config.vhosts):
        for j, app in zip(vhost.application_indexes, vhost.applications, strict=True):
            where, fix = f"vhosts[{i}].applications[{j}].user", password_command(app.user)
            if app.user not in passwords:
                problems.append((where, f'no password for "{app.user}": {fix}'))
            elif not isinstance(passwords[app.user], str):
                problems.append((where, f'the password for "{app.user}" is {describe(passwords[app.user])}, '
                                 f"not a string: {fix}"))
            elif not passwords[app.user]:
                problems.append((where, f'the password for "{app.user}" is empty: {fix}'))
    return problems
