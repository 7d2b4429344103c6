"""The stack's alerting rules as its own program exports them (`alert_rules`), computed from `root`'s own planner
and `components.alerts` with the stack file's config: no engine, broker or secrets. The review computes both sides
this way (BASE's with BASE's components), and `make alerts` writes HEAD's."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from tools.lib.mockrun import root_components
from tools.lib.planned import stack_values


class AlertsError(Exception):
    """The stack's config is refused (the message is the project's own ConfigError or TopologyError)."""


def stack_alert_rules(stack: str, root: Path) -> dict[str, Any] | None:
    """`root`'s stack `stack` as a Prometheus rule file (`{"groups": [...]}`), as the program exports it; None when
    `root`'s components derive no rules (a BASE older than them). AlertsError when the config is refused."""
    with root_components(root):
        try:
            config_module = importlib.import_module("components.config")
            stack_module = importlib.import_module("components.stack")
            alerts = importlib.import_module("components.alerts")
        except ImportError:
            return None
        try:
            config = config_module.load_stack_config(stack_values(stack, root))
            plans = stack_module.plan_stack(config)
        except Exception as error:  # the project's own ConfigError or TopologyError
            raise AlertsError(str(error)) from None
        result: dict[str, Any] = alerts.rule_file(alerts.stack_rules(stack, config.alerts, [p for _, p in plans]))
        return result
