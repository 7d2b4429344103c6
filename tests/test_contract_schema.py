"""The retry contract is defined once, by `rabbitmq_retry_client/contract.schema.json`: every contract the
stacks and components export is valid under it (checked by a real JSON Schema validator, as a consumer in another
language would), the Python client refuses what it refuses, and "no strategy means tiers" is its default."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from components.strategies import STRATEGIES
from rabbitmq_retry_client import contract as client
from tests.support.recordings import RECORDINGS

VALIDATOR = Draft202012Validator(client.SCHEMA)


def exported_contracts() -> list[dict[str, Any]]:
    """The contract output of every RetryableQueue the recordings hold (what the program exports today:
    tests/test_recordings.py keeps them equal)."""
    return [row["outputs"]["contract"] for path in sorted(RECORDINGS.glob("*.json"))
            for row in json.loads(path.read_text(encoding="utf-8"))
            if row["type"] == "rabbitmq-retry:index:RetryableQueue" and "contract" in row["outputs"]]


CONTRACTS = exported_contracts()
BY_STRATEGY = {client.strategy_of(c): c for c in CONTRACTS}


def test_the_schema_is_a_json_schema():
    Draft202012Validator.check_schema(client.SCHEMA)


def test_every_strategy_is_exported_by_the_recordings():
    assert set(BY_STRATEGY) == set(STRATEGIES) == set(client.SUPPORTED_STRATEGIES)


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: f"{c['vhost']}/{c['queue']}")
def test_every_exported_contract_is_valid_under_the_schema_and_the_client(contract):
    assert list(VALIDATOR.iter_errors(contract)) == []
    assert client.validate(contract) == contract


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_the_client_refuses_a_contract_without_a_key_the_schema_requires(strategy):
    base = BY_STRATEGY[strategy]
    for key in (k for k in base if k != "strategy"):  # without it a contract is a tiers contract (test below)
        broken = {k: v for k, v in base.items() if k != key}
        if VALIDATOR.is_valid(broken):
            continue  # optional
        with pytest.raises(client.ContractError, match=rf"\b{key}\b"):
            client.validate(broken)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_the_client_refuses_a_contract_whose_key_has_a_type_the_schema_refuses(strategy):
    base = BY_STRATEGY[strategy]
    for key in base:
        for wrong in ("7", 7, [], {}, None):
            broken = {**copy.deepcopy(base), key: wrong}
            if not VALIDATOR.is_valid(broken) and key != "strategy":
                with pytest.raises(client.ContractError):
                    client.validate(broken)


def test_a_contract_without_a_strategy_is_a_tiers_contract_in_the_config_the_schema_and_the_client():
    tiers = BY_STRATEGY["tiers"]
    assert "strategy" not in tiers
    assert client.DEFAULT_STRATEGY == client.SCHEMA["properties"]["strategy"]["default"] == "tiers"
    assert VALIDATOR.is_valid({**tiers, "strategy": "tiers"})
    assert not VALIDATOR.is_valid({**tiers, "strategy": "native"})


def test_the_native_retry_call_is_the_schemas():
    native = BY_STRATEGY["native"]
    assert native["retry_call"] == client.NATIVE_RETRY_CALL == "basic.reject(requeue=true)"
    assert not VALIDATOR.is_valid({**native, "retry_call": "basic.nack(requeue=true)"})
    with pytest.raises(client.ContractError, match="retry_call"):
        client.validate({**native, "retry_call": "basic.nack(requeue=true)"})
