"""Strategies are modules: the registry maps each name to the module that owns everything about it, and
nothing else in the components chooses by a strategy's name (docs/development.md, "Adding a strategy", says where
a new one goes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.config.load import load_queue
from components.model.fields import Problems
from components.model.keys import RETRY_KEYS
from components.model.stack_config import Retry
from components.strategies import STRATEGIES, strategy_of
from rabbitmq_retry_client.contract import DEFAULT_STRATEGY, SCHEMA

COMPONENTS = Path(__file__).resolve().parent.parent / "components"
WRITTEN = {
    "tiers": {"delays": ["1s", "10s"], "max_retries": 3},
    "levels": {"strategy": "levels", "max_retries": 3},
    "native": {"strategy": "native", "min_delay": "1s", "max_retries": 3},
}
"""A valid `retry` block of each strategy."""


def test_every_strategy_has_a_written_example():
    assert set(WRITTEN) == set(STRATEGIES) and DEFAULT_STRATEGY in STRATEGIES


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


def test_nothing_in_the_client_or_the_tools_compares_a_strategy_with_a_name():
    """The client asks its `strategies` table, the tools ask the strategy modules: no strategy (`x.strategy`,
    `strategy_of(…)`, `contract.get("strategy")`) is compared with a strategy's name. (`"tiers"` is also a key
    of the contract, so a name alone is not looked for here.)"""
    names = "|".join(STRATEGIES)
    compares = re.compile(rf"strategy\S*\s*(==|!=|not in|in)\s*[(\[{{]?\s*[\"']({names})[\"']"
                          rf"|[\"']({names})[\"']\s*(==|!=)\s*\S*strategy")
    root = COMPONENTS.parent
    found = [f"{path.relative_to(root)}:{number}: {line.strip()}"
             for path in sorted([*(root / "rabbitmq_retry_client").rglob("*.py"), *(root / "tools").rglob("*.py")])
             if path != root / "rabbitmq_retry_client" / "strategies.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if compares.search(line)]
    assert found == []


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_strategy_judges_only_the_fields_of_its_own_contract(name):
    """What a change means to a reviewer is the strategy's for its own contract fields; the shared ones are the
    review's (tools/lib/risk.py)."""
    own = set(SCHEMA["$defs"][name]["properties"]) - set(SCHEMA["$defs"]["common"]["properties"])
    assert STRATEGIES[name].REVIEWED_CONTRACT_KEYS.issubset(own)


def test_a_strategy_says_how_a_change_of_its_own_fields_breaks_running_consumers():
    tiers_old = {"retry_exchange": "q.retry", "tiers": [{"routing_key": "wait.1"}, {"routing_key": "wait.2"}]}
    assert STRATEGIES["tiers"].contract_breaks(tiers_old, {**tiers_old, "tiers": [{"routing_key": "wait.1"}]}) == [
        "tier wait.2 removed: consumers in republish mode that still publish retries with routing key wait.2 to "
        "q.retry lose those messages (no queue is bound to that key; the exchange drops them)"]
    levels_old = {"delay_exchange": "rabbitmq-retry.delay.16", "delay_levels": 17, "delay_unit_ms": 1000}
    assert STRATEGIES["levels"].contract_breaks(levels_old, {**levels_old, "delay_levels": 18,
                                                             "delay_exchange": "rabbitmq-retry.delay.17"}) == []
    assert STRATEGIES["levels"].contract_breaks(levels_old, {**levels_old, "delay_levels": 16,
                                                             "delay_exchange": "rabbitmq-retry.delay.15"}) == [
        "delay exchange rabbitmq-retry.delay.16 → rabbitmq-retry.delay.15: consumers still publishing delayed copies "
        "to rabbitmq-retry.delay.16 fail once it is deleted (channel error 404 NOT_FOUND)"]
    assert STRATEGIES["native"].contract_breaks({"min_delay_ms": 1}, {"min_delay_ms": 2}) == []
