"""Strategies are modules: the registry maps each name to the module that owns everything about it, and
nothing else in the components chooses by a strategy's name (docs/development.md, "Adding a strategy", says where
a new one goes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.config import RETRY_KEYS, load_queue
from components.config.fields import Problems
from components.config.model import Retry
from components.strategies import DEFAULT, STRATEGIES, strategy_of

COMPONENTS = Path(__file__).resolve().parent.parent / "components"
WRITTEN = {
    "tiers": {"delays": ["1s", "10s"], "max_retries": 3},
    "levels": {"strategy": "levels", "max_retries": 3},
    "native": {"strategy": "native", "min_delay": "1s", "max_retries": 3},
}
"""A valid `retry` block of each strategy."""


def test_every_strategy_has_a_written_example():
    assert set(WRITTEN) == set(STRATEGIES) and DEFAULT in STRATEGIES


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_strategy_parses_its_own_typed_retry_block(name):
    module = STRATEGIES[name]
    assert name == module.NAME
    data = {k: v for k, v in WRITTEN[name].items() if k != "strategy"}
    retry = module.parse_retry(Problems(), "retry", data)
    assert isinstance(retry, Retry) and type(retry) is not Retry and retry.strategy == name
    assert strategy_of(retry) is module
    assert type(load_queue({"name": "q", "retry": WRITTEN[name]}, "q").retry) is type(retry)


def test_the_keys_only_one_strategy_takes_are_retry_keys_of_exactly_one():
    owned = [key for module in STRATEGIES.values() for key in module.RETRY_KEYS]
    assert len(owned) == len(set(owned)) and set(owned) <= set(RETRY_KEYS)


def test_nothing_outside_the_strategies_chooses_by_a_strategy_name():
    """A comparison of a strategy with a name, or a name written as a string, outside `components/strategies/`."""
    names = "|".join(STRATEGIES)
    chooses = re.compile(rf"strategy\s*(==|!=|in)\s|[\"']({names})[\"']")
    found = [f"{path.relative_to(COMPONENTS)}:{number}: {line.strip()}"
             for path in sorted(COMPONENTS.rglob("*.py")) if "strategies" not in path.parts
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if chooses.search(line)]
    assert found == []
