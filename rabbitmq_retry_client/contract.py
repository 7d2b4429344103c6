"""The retry contract a stack exports: reading it from a file, a dict or `pulumi stack output`, and checking it.

Everything a consumer needs (queue, exchanges, tiers, retry budget, attempt header) comes from the contract,
so no name is hard-coded in a client. `strategy` says how the contract describes retries:
- `tiers` (also when absent): one wait queue per delay, `tiers[min(attempt, len(tiers)) - 1]`;
- `native`: RabbitMQ 4.3's delayed retry; `retry_call` (`basic.reject(requeue=true)`) is the only call that
  delays and counts, the broker waits `min(min_delay_ms × n, max_delay_ms)` and parks past `delivery_limit`;
- `levels`: the consumer picks each retry's delay from `backoff` and publishes a copy to `delay_exchange`,
  whose shared binary delay levels hold it that long (the routing key spells the delay in `delay_unit_ms`
  units: see `levels.py`).
A contract with any other strategy is refused rather than followed the wrong way.

The contract is defined once, as a JSON Schema shipped beside this module (`contract.schema.json`, for consumers
in any language): which keys each strategy's contract holds and of which type, the default strategy and the
native retry call come from it, and `validate` checks a contract against it alone (plus the two relations between
keys of a levels contract that JSON Schema cannot state), each problem keyed by its path. `RetryContract` is the
same shape as a TypedDict: the components type the contract they export with it.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeGuard, cast

from jsonschema import Draft202012Validator, ValidationError, validators

from .contract_types import RetryContract

SCHEMA: Mapping[str, Any] = json.loads(Path(__file__).with_name("contract.schema.json").read_text(encoding="utf-8"))
"""The contract's JSON Schema (draft 2020-12), shipped beside this module."""
_STRATEGY = SCHEMA["properties"]["strategy"]
DEFAULT_STRATEGY: str = _STRATEGY["default"]
"""The strategy of a contract that names none (every contract exported before strategies existed)."""
SUPPORTED_STRATEGIES: tuple[str, ...] = tuple(_STRATEGY["enum"])
"""What this client can follow; a contract naming any other strategy is refused by `load_contract`."""
NATIVE_RETRY_CALL: str = SCHEMA["$defs"]["native"]["properties"]["retry_call"]["const"]


Contract = RetryContract
"""The name the client's API has used for the contract since before it was typed."""


class ContractError(ValueError):
    """The contract is missing, ambiguous, malformed or of a strategy this client cannot follow."""


def contracts_in(data: object) -> Iterator[Mapping[str, Any]]:
    """A single contract (a mapping with `queue`, and `retry_exchange` or `strategy`), or every contract nested in
    `retry_contracts` ({vhost: {queue: contract}})."""
    if not isinstance(data, Mapping):
        return
    if "queue" in data and ("retry_exchange" in data or "strategy" in data):
        yield data
    else:
        for value in data.values():
            yield from contracts_in(value)


def whole_numbers(value: Any) -> Any:
    """Pulumi carries numbers as floats (200.0); the contract's numbers are whole."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def strategy_of(contract: Mapping[str, Any]) -> str:
    """The contract's retry strategy; `tiers` when it names none (every contract exported so far)."""
    return str(contract.get("strategy", DEFAULT_STRATEGY))


def _finite_number(checker: Any, value: object) -> bool:
    """JSON's numbers: no boolean, no NaN or infinity (Python's json reads them, no other language's does)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_VALIDATOR = validators.extend(Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
    "number", _finite_number))(SCHEMA)


def _where(path: Iterable[str | int]) -> str:
    """`tiers[0].delay_ms` for the path (`tiers`, 0, `delay_ms`); `contract` for the whole."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "contract"


_KINDS = {"string": "a string", "integer": "an integer", "number": "a number", "object": "an object",
          "array": "an array", "null": "null", "boolean": "a boolean"}


def _problems_of(error: ValidationError) -> Iterator[tuple[str, str]]:
    """A schema error as (path, `path: why`); missing keys are keyed by their own paths, with the type each takes."""
    path = list(error.absolute_path)
    if error.validator != "required":
        yield _where(path), f"{_where(path)}: {error.message}"
        return
    properties: Mapping[str, Any] = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
    present = error.instance if isinstance(error.instance, Mapping) else {}
    for key in [k for k in error.validator_value if k not in present]:  # type: ignore[union-attr]
        where = _where([*path, key])
        yield where, f"{where}: missing{_kind(properties.get(key, {}))}"


def _kind(spec: Mapping[str, Any]) -> str:
    """` (a string)`, ` (an integer or null)`: the type a key's schema takes, or nothing when it names none."""
    kind = spec.get("type")
    kinds = [kind] if isinstance(kind, str) else kind or []
    return f" ({' or '.join(_KINDS[k] for k in kinds)})" if kinds else ""


def _problems(contract: Mapping[str, Any]) -> list[str]:
    """Every schema error, one per path (a type error before the others of its path), in path order."""
    errors = sorted(_VALIDATOR.iter_errors(contract),
                    key=lambda e: ([str(step) for step in e.absolute_path], e.validator != "type"))
    by_path: dict[str, str] = {}
    for error in errors:
        for where, problem in _problems_of(error):
            by_path.setdefault(where, problem)
    return list(by_path.values())


def _levels_relations(contract: Mapping[str, Any]) -> list[str]:
    """What JSON Schema cannot say, between keys of a levels contract (checked once the keys it compares are valid):
    the levels fit the routing key's words, and `delay_exchanges` names one exchange per level, the top one last."""
    words, levels = contract.get("delay_words"), contract.get("delay_levels")
    if not (_whole(words) and _whole(levels)) or min(words, levels) < 1:
        return []
    if levels > words:
        return [f"delay_levels: {levels} is more than delay_words ({words})"]
    exchanges, top = contract.get("delay_exchanges"), contract.get("delay_exchange")
    if not isinstance(exchanges, list) or not isinstance(top, str):
        return []
    if exchanges[-1:] == [top] and len(exchanges) == levels:
        return []
    return [f"delay_exchanges: expected one exchange name per level ({levels}), level 0 first, the last being "
            f"delay_exchange ({top})"]


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(source: Mapping[str, Any]) -> Contract:
    """The contract as plain data with whole numbers, checked against contract.schema.json; ContractError listing
    every problem at once, each keyed by its path (`tiers[0].delay_ms: -1 is less than the minimum of 0`)."""
    contract = whole_numbers(source)
    strategy = strategy_of(contract)
    if strategy not in SUPPORTED_STRATEGIES:
        raise ContractError(f"retry contract for {contract.get('queue')!r} uses strategy {strategy!r}, which this "
                            f"client does not support (supported: {', '.join(SUPPORTED_STRATEGIES)}); "
                            "upgrade rabbitmq-retry or follow docs/contract.md by hand")
    problems = _problems(contract)
    problems += _levels_relations(contract)  # empty for a contract without delay levels
    if problems:
        raise ContractError(f"invalid retry contract for {contract.get('queue')!r}: " + "; ".join(problems))
    return cast(Contract, json.loads(json.dumps(contract)))  # plain and independent of the caller's dict


def read_contracts(path: str | Path) -> Any:
    """The JSON of a contract file; a missing or unreadable file is a ContractError naming the command that writes
    it (`contracts.<stack>.json` names its stack)."""
    path = Path(path)
    stack = path.name.removeprefix("contracts.").removesuffix(".json") if path.name.startswith("contracts.") else ""
    make = f"make contracts STACK={stack or '<stack>'}"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ContractError(f"{path}: no such file; write it with `{make}` in the project (or `pulumi stack output "
                            f"retry_contracts --json > {path}`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ContractError(f"{path}: not a contract file ({error}); write it again with `{make}`") from None


def load_contract(source: str | Path | Mapping[str, Any], queue: str | None = None,
                  vhost: str | None = None) -> Contract:
    """Read one queue's contract from a dict or a JSON file.

    Accepts a single contract or the whole stack output (`{vhost: {queue: contract}}`); `queue` and
    `vhost` pick one when there are several, and an ambiguous choice fails instead of guessing.
    """
    data = source if isinstance(source, Mapping) else read_contracts(source)
    found = [c for c in contracts_in(data)
             if (queue is None or c.get("queue") == queue) and (vhost is None or c.get("vhost") == vhost)]
    if len(found) != 1:
        raise ContractError(_not_one(found, data, queue, vhost))
    return validate(found[0])


def _not_one(found: list[Mapping[str, Any]], data: Any, queue: str | None, vhost: str | None) -> str:
    """Why `load_contract` found none or several, and the contracts there are."""
    names = sorted(f"{c.get('vhost')}/{c.get('queue')}" for c in contracts_in(data))
    what = "no contract matches" if not found else "several contracts match"
    hint = ("; name one with --queue (and --vhost), or see every error queue with `rabbitmq-retry parked summary`"
            if found else "")
    return f"{what} queue={queue!r} vhost={vhost!r}{hint}; available: {', '.join(names) or 'none'}"


def stack_output(stack: str | None = None, cwd: str | Path | None = None) -> dict[str, Any]:
    """`pulumi stack output retry_contracts --json` of `stack` (the selected one when None)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise ContractError("the Pulumi CLI is not installed; pass --contract FILE instead (in the rabbitmq-retry "
                            "repository `make contracts STACK=<stack>` writes one without the CLI)")
    command = [pulumi, "stack", "output", "retry_contracts", "--json", *(["--stack", stack] if stack else [])]
    run = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise ContractError(f"`{' '.join(command[1:])}` failed: {run.stderr.strip() or run.stdout.strip()}")
    try:
        data = json.loads(run.stdout)
    except json.JSONDecodeError as error:
        raise ContractError(f"`{' '.join(command[1:])}` printed no JSON: {error}") from None
    if not isinstance(data, dict):
        raise ContractError(f"`{' '.join(command[1:])}` printed {type(data).__name__}, not a mapping")
    return data
