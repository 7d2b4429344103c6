"""Entry points: a whole stack config, or one vhost or queue for components used outside a stack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..model.alerts import parse_alerts, queue_alerts, vhost_alerts
from ..model.config_entries import ApplicationEntry, OperatorEntry, VhostEntry
from ..model.fields import ABSENT, INVALID, Problems, boolean, describe, did_you_mean, items, mapping, optional
from ..model.key_paths import with_paths
from ..model.keys import BROKER_KEYS, NAMESPACE, TOP_LEVEL_KEYS
from ..model.naming import SHOVEL_USER
from ..model.stack_config import Defaults, DelayLevels, Queue, StackConfig, Vhost
from ..strategies import fits_delay_levels
from .capabilities import TARGET_GROUP_SIZE_FROM, Version, parse_version, version_problems
from .crosschecks import check_users, check_vhost, check_vhost_names
from .parsers import parse_defaults, parse_delay_levels, parse_queue, parse_vhost
from .passwords import NOT_A_MAPPING, key_path, password_command

BUILT_IN_DEFAULTS = Defaults()


def check_passwords_shape(p: Problems, raw: object) -> None:
    """A mapping of user to string; which users need one is `password_problems`' business."""
    if raw is ABSENT or raw is None:
        return
    if not isinstance(raw, Mapping):
        p.add("passwords", NOT_A_MAPPING)
        return
    for user, password in raw.items():
        if not isinstance(password, str):
            p.add(key_path("passwords", user), f"expected a string, got {describe(password)}: "
                  f"{password_command(str(user))}")


def check_password_users(p: Problems, raw: object, vhosts: list[VhostEntry]) -> None:
    """A password filed under a user no application or operator declares is a mistake (a misspelt user, whose
    real one then has no password); not checked when a user entry was itself refused (its name is unknown)."""
    if not isinstance(raw, Mapping):
        return
    entries: list[ApplicationEntry | OperatorEntry] = [*(a for v in vhosts for a in v.applications),
                                                       *(o for v in vhosts for o in v.operators)]
    if any(e.name is None for e in entries) or any({"applications", "operators"} & v.unreadable for v in vhosts):
        return
    declared = sorted({str(e.name) for e in entries})
    migrating = any(not isinstance(v.value, Vhost) or v.value.migrations for v in vhosts)
    for user in raw:
        if user == SHOVEL_USER and not migrating:
            p.add(key_path("passwords", user), "the shovel user's password, and no migration of this stack needs "
                  f"it any more; remove it: pulumi config rm --path '{NAMESPACE}:passwords.{user}'")
        elif user not in declared and user != SHOVEL_USER:
            p.add(key_path("passwords", user), f'no application or operator declares user "{user}";'
                  f"{did_you_mean(user, declared) or ''} file the password under the user that needs it, or remove it"
                  + (f" (users: {', '.join(declared)})" if declared else " (this stack declares no user)"))


def parse_vhosts(p: Problems, top: Mapping[str, Any], defaults: Defaults) -> list[VhostEntry]:
    if "vhosts" not in top:
        p.add("vhosts", "missing; set rabbitmq-retry:vhosts to a list of vhosts (see docs/config.md)")
        return []
    if top["vhosts"] is None:
        p.add("vhosts", "null; list the vhosts, or write [] to manage none (that deletes what this stack created)")
        return []
    vhosts = []
    written = items(p, "vhosts", top["vhosts"])
    for i, (path, raw) in enumerate(with_paths("", "vhosts", written)):
        vhost = parse_vhost(p, path, i, raw, defaults)
        check_vhost(p, vhost)
        vhosts.append(vhost)
    return vhosts


def parse_broker(p: Problems, raw: object) -> Version | None:
    """`broker.version`, e.g. "4.3.6" (quoted: YAML reads 4.3 as a number)."""
    if raw is ABSENT or raw is None:
        return None
    data = mapping(p, "broker", raw, BROKER_KEYS)
    if data is INVALID or "version" not in data:
        if data is not INVALID:
            p.add("broker.version", 'missing; the RabbitMQ version the stack is for, e.g. "4.3.6"')
        return None
    version = parse_version(data["version"]) if isinstance(data["version"], str) else None
    if version is None:
        p.add("broker.version", f'{data["version"]!r} is not a version; write it as a quoted "X.Y.Z", e.g. "4.3.6"')
    return version


def load_stack_config(raw: Mapping[str, Any]) -> StackConfig:
    """Parse the `rabbitmq-retry:` namespace (keys without the prefix); raise ConfigError with all problems.

    Passwords are only shape-checked: see `password_problems` for the users that have none."""
    p = Problems()
    top = mapping(p, "", raw, TOP_LEVEL_KEYS, prefix=f"{NAMESPACE}:")
    top = {} if top is INVALID else top
    protect = optional(top, "protect", lambda v: boolean(p, "protect", v), False)
    retain = optional(top, "retain_error_queues", lambda v: boolean(p, "retain_error_queues", v), False)
    defaults = parse_defaults(p, top.get("defaults", ABSENT))
    vhosts = parse_vhosts(p, top, defaults)
    check_passwords_shape(p, top.get("passwords", ABSENT))
    check_password_users(p, top.get("passwords", ABSENT), vhosts)
    check_users(p, vhosts)
    check_vhost_names(p, vhosts)
    broker_version = parse_broker(p, top.get("broker", ABSENT))
    alerts = parse_alerts(p, top) if _has_alerts(top) else None
    p.raise_if_any()
    config = StackConfig(vhosts=tuple(v.value for v in vhosts if isinstance(v.value, Vhost)), defaults=defaults,
                         protect=protect is True, retain_error_queues=retain is True, broker_version=broker_version,
                         alerts=alerts)
    if broker_version is not None and broker_version >= TARGET_GROUP_SIZE_FROM:
        config = replace(config, vhosts=tuple(_reconciled(v) for v in config.vhosts))
    if broker_version is not None:
        for path, problem in version_problems(config, broker_version):
            p.add(path, problem)
        p.raise_if_any()
    return config


def _has_alerts(top: Mapping[str, Any]) -> bool:
    """Whether any `alerts` key is written: without one the config stays as it always was (`alerts` None)."""
    raw = top.get("vhosts")
    vhosts = [v for v in raw if isinstance(v, Mapping)] if isinstance(raw, list) else []
    queues = [q for v in vhosts if isinstance(v.get("queues"), list) for q in v["queues"] if isinstance(q, Mapping)]
    return any("alerts" in entry for entry in (top, *vhosts, *queues))


def _reconciled(vhost: Vhost) -> Vhost:
    """The vhost for a 4.x broker: each quorum group size also becomes the target of RabbitMQ 4's membership
    reconciliation (`target_group_size`), so that a queue that lost a member grows back to the size asked for."""
    levels = vhost.delay_levels
    return replace(vhost, queues=tuple(replace(q, target_group_size=q.quorum_group_size) for q in vhost.queues),
                   delay_levels=None if levels is None else replace(levels,
                                                                     target_group_size=levels.quorum_group_size))


def load_queue(raw: Mapping[str, Any], path: str, defaults: Defaults = BUILT_IN_DEFAULTS,
               delay_levels: DelayLevels | None = None, levels_path: str = "delay_levels") -> Queue:
    """Parse one queue entry (the shape of a `queues[]` item), for components used outside a stack config.
    `delay_levels`: the levels a queue of strategy `levels` retries through (its backoff must fit in them);
    `levels_path` names where they come from in the problems."""
    p = Problems()
    queue = parse_queue(p, path, 0, raw, defaults).value
    if isinstance(raw, Mapping):
        queue_alerts(p, path, raw)  # checked only: a stack derives its alerting rules from its own file
    p.raise_if_any()
    assert isinstance(queue, Queue)
    if delay_levels is not None:
        check_queue_levels(queue, path, delay_levels, levels_path)
    return queue


def check_queue_levels(queue: Queue, path: str, delay_levels: DelayLevels, levels_path: str) -> None:
    """A `levels` queue's backoff must fit in the delay levels it retries through; ConfigError otherwise."""
    p = Problems()
    if queue.retry is not None:
        fits_delay_levels(p, f"{path}.retry", queue.retry, delay_levels, levels_path)
    p.raise_if_any()


def load_delay_levels(raw: Mapping[str, Any], path: str, defaults: Defaults = BUILT_IN_DEFAULTS) -> DelayLevels:
    """Parse a `delay_levels` mapping, for components used outside a stack config."""
    p = Problems()
    levels = parse_delay_levels(p, path, raw, defaults)
    p.raise_if_any()
    assert isinstance(levels, DelayLevels)
    return levels


def load_vhost(raw: Mapping[str, Any], path: str, defaults: Defaults = BUILT_IN_DEFAULTS) -> Vhost:
    """Parse one vhost entry (the shape of a `vhosts[]` item)."""
    p = Problems()
    entry = parse_vhost(p, path, 0, raw, defaults)
    check_vhost(p, entry)
    if isinstance(raw, Mapping):
        vhost_alerts(p, path, raw)  # checked only: a stack derives its alerting rules from its own file
    p.raise_if_any()
    assert isinstance(entry.value, Vhost)
    return entry.value
