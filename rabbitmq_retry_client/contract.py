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
native retry call come from it. `validate` also checks the ranges the client relies on, with messages that name
the key.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from jsonschema import Draft202012Validator

Contract = dict[str, Any]

SCHEMA_PATH = Path(__file__).with_name("contract.schema.json")
"""The contract's JSON Schema (draft 2020-12)."""
SCHEMA: Mapping[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
_STRATEGY = SCHEMA["properties"]["strategy"]
DEFAULT_STRATEGY: str = _STRATEGY["default"]
"""The strategy of a contract that names none (every contract exported before strategies existed)."""
SUPPORTED_STRATEGIES: tuple[str, ...] = tuple(_STRATEGY["enum"])
"""What this client can follow; a contract naming any other strategy is refused by `load_contract`."""
NATIVE_RETRY_CALL: str = SCHEMA["$defs"]["native"]["properties"]["retry_call"]["const"]
_JSON_TYPES: Mapping[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float),
                                                      "array": list, "object": Mapping, "null": type(None)}


def _shape(strategy: str) -> tuple[list[str], dict[str, Mapping[str, Any]]]:
    """The keys the schema requires of a contract of `strategy` (common keys first) and every key it describes."""
    parts = [SCHEMA["$defs"]["common"], SCHEMA["$defs"][strategy]]
    return ([key for part in parts for key in part["required"]],
            {key: spec for part in parts for key, spec in part["properties"].items()})


_SHAPES = {strategy: _shape(strategy) for strategy in SUPPORTED_STRATEGIES}


def _type_name(spec: Mapping[str, Any]) -> str:
    kinds = spec["type"] if "type" in spec else [type(spec["const"]).__name__]
    return " or ".join(getattr(_JSON_TYPES.get(kind), "__name__", kind)
                       for kind in ([kinds] if isinstance(kinds, str) else kinds))


def _fits(value: object, spec: Mapping[str, Any]) -> bool:
    """`value` is of a type the schema allows (a boolean is never a number)."""
    kinds = spec["type"] if "type" in spec else [{str: "string", int: "integer"}[type(spec["const"])]]
    allowed = tuple(_JSON_TYPES[kind] for kind in ([kinds] if isinstance(kinds, str) else kinds))
    return isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)


def _key_problems(contract: Contract, strategy: str) -> list[str]:
    """The top-level keys against the schema: required ones present, every one of its type, enum or value
    (`retry_call` has a message of its own); nested values are checked by the strategy's own problems."""
    required, described = _SHAPES[strategy]
    problems = []
    for key in [*required, *(k for k in described if k not in required and k in contract)]:
        spec, value = described[key], contract.get(key)
        if key == "strategy":
            continue
        if key not in contract or not _fits(value, spec):
            problems.append(f"{key}: missing or not {_type_name(spec)}" if key in required
                            else f"{key}: not {_type_name(spec)}")
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"{key}: {value!r} is not one of {', '.join(map(str, spec['enum']))}")
        elif "const" in spec and key != "retry_call" and value != spec["const"]:
            problems.append(f"{key}: {value!r} is not {spec['const']!r}")
    return problems


class ContractError(ValueError):
    """The contract is missing, ambiguous, malformed or of a strategy this client cannot follow."""


def _is_contract(value: object) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and "queue" in value and ("retry_exchange" in value or "strategy" in value)


def contracts_in(data: object) -> Iterator[Mapping[str, Any]]:
    """A single contract, or every contract nested in `retry_contracts` ({vhost: {queue: contract}})."""
    if _is_contract(data):
        yield data
    elif isinstance(data, Mapping):
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


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _tiers_problems(contract: Contract) -> list[str]:
    tiers = contract.get("tiers") or []
    problems = [] if tiers else ["tiers: empty"]
    if not isinstance(tiers, list):
        return problems  # its type is reported with the other keys
    for i, tier in enumerate(tiers):
        if not (isinstance(tier, Mapping) and isinstance(tier.get("routing_key"), str)
                and isinstance(tier.get("delay_ms"), int)):
            problems.append(f"tiers[{i}]: needs routing_key (string) and delay_ms (integer)")
    return problems


def _native_problems(contract: Contract) -> list[str]:
    if isinstance(contract.get("retry_call"), str) and contract["retry_call"] != NATIVE_RETRY_CALL:
        return [f"retry_call: {contract['retry_call']!r} is not {NATIVE_RETRY_CALL}, the only call this client makes"]
    return []


def _levels_problems(contract: Contract) -> list[str]:
    """The ranges the routing key and the back-off rely on (the types are checked with the other keys)."""
    problems = []
    backoff = contract.get("backoff")
    if isinstance(backoff, Mapping):
        for key in ("initial_ms", "max_ms"):
            if not _whole(backoff.get(key)):
                problems.append(f"backoff.{key}: missing or not int")
            elif backoff[key] < 0:
                problems.append(f"backoff.{key}: {backoff[key]} is below 0")
        multiplier, jitter = backoff.get("multiplier"), backoff.get("jitter")
        if not _number(multiplier):
            problems.append("backoff.multiplier: missing or not a number")
        elif multiplier < 1:
            problems.append(f"backoff.multiplier: {multiplier} is below 1")
        if not _number(jitter):
            problems.append("backoff.jitter: missing or not a number")
        elif not 0 <= jitter < 1:
            problems.append(f"backoff.jitter: {jitter} is not at least 0 and below 1")
    unit, words, levels = contract.get("delay_unit_ms"), contract.get("delay_words"), contract.get("delay_levels")
    if _whole(unit) and unit < 1:
        problems.append(f"delay_unit_ms: {unit} is below 1")
    if _whole(words) and _whole(levels) and not 1 <= levels <= words:
        problems.append(f"delay_levels: {levels} is not between 1 and delay_words ({words})")
    # Optional: contracts written before it name the top level only. Its length and last name are checked only
    # when delay_levels and delay_exchange are themselves valid (their own problems are reported above).
    exchanges, top = contract.get("delay_exchanges"), contract.get("delay_exchange")
    if exchanges is not None:
        names = isinstance(exchanges, list) and all(isinstance(e, str) for e in exchanges)
        checkable = _whole(words) and _whole(levels) and 1 <= levels <= words and isinstance(top, str)
        if not names or (checkable and (len(exchanges) != levels or exchanges[-1] != top)):
            problems.append(f"delay_exchanges: expected one exchange name per level ({levels}), level 0 first, the "
                            f"last being delay_exchange ({top})")
    return problems


_STRATEGY_PROBLEMS = {"tiers": _tiers_problems, "native": _native_problems, "levels": _levels_problems}
_VALIDATOR = Draft202012Validator(SCHEMA)


def _where(path: Iterator[str | int] | Any) -> str:
    """`tiers[0].delay_ms` for the path (`tiers`, 0, `delay_ms`)."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def _schema_problems(contract: Contract, reported: list[str]) -> list[str]:
    """Whatever else the JSON Schema refuses, one `key: why` each; a key already reported by the checks above (with
    their messages) is not reported again."""
    seen = {problem.split(":", 1)[0].split(".", 1)[0].split("[", 1)[0] for problem in reported}
    problems = []
    for error in sorted(_VALIDATOR.iter_errors(contract), key=lambda e: [str(p) for p in e.absolute_path]):
        where = _where(error.absolute_path)
        if error.validator == "required" and not where:
            continue  # a missing top-level key is reported by `_key_problems`
        if (where.split(".", 1)[0].split("[", 1)[0] or "contract") in seen:
            continue
        problems.append(f"{where or 'contract'}: {error.message}")
    return list(dict.fromkeys(problems))


def validate(source: Mapping[str, Any]) -> Contract:
    """The contract as plain data with whole numbers; ContractError listing every problem at once."""
    contract: Contract = whole_numbers(source)
    strategy = strategy_of(contract)
    if strategy not in SUPPORTED_STRATEGIES:
        raise ContractError(f"retry contract for {contract.get('queue')!r} uses strategy {strategy!r}, which this "
                            f"client does not support (supported: {', '.join(SUPPORTED_STRATEGIES)}); "
                            "upgrade rabbitmq-retry or follow docs/contract.md by hand")
    problems = _key_problems(contract, strategy) + _STRATEGY_PROBLEMS[strategy](contract)
    problems += _schema_problems(contract, problems)
    if problems:
        raise ContractError(f"invalid retry contract for {contract.get('queue')!r}: " + "; ".join(problems))
    return json.loads(json.dumps(contract))  # plain and independent of the caller's dict


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
        names = sorted(f"{c.get('vhost')}/{c.get('queue')}" for c in contracts_in(data))
        what = "no contract matches" if not found else "several contracts match"
        hint = ("; name one with --queue (and --vhost), or see every error queue with `rabbitmq-retry parked summary`"
                if found else "")
        raise ContractError(f"{what} queue={queue!r} vhost={vhost!r}{hint}; available: {', '.join(names) or 'none'}")
    return validate(found[0])


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
