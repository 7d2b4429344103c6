"""What a config or a component refuses, as the (key path, message) pairs of its ConfigError: the one helper every
test of the config's refusals uses; and what the preview-time checks print."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from components.config.load import load_stack_config
from components.model.problems import ConfigError, Problem


def problems_of(action: Callable[[], object]) -> list[tuple[str, str]]:
    """The problems of the ConfigError `action` raises (failing the test when it raises none)."""
    with pytest.raises(ConfigError) as error:
        action()
    return error.value.problems


def messages(problems: Iterable[Problem]) -> list[str]:
    """What the preview-time checks print for `problems` (`checks.check_vhost`, `stale_policies`, …)."""
    return [problem.message for problem in problems]


def config_problems(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The problems of a stack's `rabbitmq-retry:*` config (`{"vhosts": [...], ...}`)."""
    return problems_of(lambda: load_stack_config(dict(raw)))
