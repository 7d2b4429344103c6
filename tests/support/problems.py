"""What a config or a component refuses, as the (key path, message) pairs of its ConfigError: the one helper every
test of the config's refusals uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from components.config import ConfigError, load_stack_config


def problems_of(action: Callable[[], object]) -> list[tuple[str, str]]:
    """The problems of the ConfigError `action` raises (failing the test when it raises none)."""
    with pytest.raises(ConfigError) as error:
        action()
    return error.value.problems


def config_problems(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The problems of a stack's `rabbitmq-retry:*` config (`{"vhosts": [...], ...}`)."""
    return problems_of(lambda: load_stack_config(dict(raw)))
