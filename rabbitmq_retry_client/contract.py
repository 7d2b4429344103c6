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
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeGuard

Contract = dict[str, Any]

DEFAULT_STRATEGY = "tiers"
SUPPORTED_STRATEGIES = ("tiers", "native", "levels")
"""What this client can follow; a contract naming any other strategy is refused by `load_contract`."""

_COMMON_KEYS: dict[str, type | tuple[type, ...]] = {
    "vhost": str, "queue": str, "queue_type": str, "max_retries": int, "attempt_header": str,
    "error_exchange": str, "error_queue": str,
}
_CONTRACT_KEYS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "tiers": {**_COMMON_KEYS, "retry_exchange": str, "reject_routes_to": str, "tiers": list},
    "native": {**_COMMON_KEYS, "retry_call": str, "min_delay_ms": int, "max_delay_ms": int, "delivery_limit": int},
    "levels": {**_COMMON_KEYS, "delay_exchange": str, "delay_unit_ms": int, "delay_words": int, "delay_levels": int,
               "max_delay_ms": int, "backoff": Mapping},
}
NATIVE_RETRY_CALL = "basic.reject(requeue=true)"


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


def validate(source: Mapping[str, Any]) -> Contract:
    """The contract as plain data with whole numbers; ContractError listing every problem at once."""
    contract: Contract = whole_numbers(source)
    strategy = strategy_of(contract)
    if strategy not in SUPPORTED_STRATEGIES:
        raise ContractError(f"retry contract for {contract.get('queue')!r} uses strategy {strategy!r}, which this "
                            f"client does not support (supported: {', '.join(SUPPORTED_STRATEGIES)}); "
                            "upgrade rabbitmq-retry or follow README: Writing a consumer by hand")
    problems = [f"{key}: missing or not {getattr(kind, '__name__', kind)}"
                for key, kind in _CONTRACT_KEYS[strategy].items()
                if not isinstance(contract.get(key), kind) or isinstance(contract.get(key), bool)]
    problems += _STRATEGY_PROBLEMS[strategy](contract)
    if problems:
        raise ContractError(f"invalid retry contract for {contract.get('queue')!r}: " + "; ".join(problems))
    return json.loads(json.dumps(contract))  # plain and independent of the caller's dict


def load_contract(source: str | Path | Mapping[str, Any], queue: str | None = None,
                  vhost: str | None = None) -> Contract:
    """Read one queue's contract from a dict or a JSON file.

    Accepts a single contract or the whole stack output (`{vhost: {queue: contract}}`); `queue` and
    `vhost` pick one when there are several, and an ambiguous choice fails instead of guessing.
    """
    data = source if isinstance(source, Mapping) else json.loads(Path(source).read_text())
    found = [c for c in contracts_in(data)
             if (queue is None or c.get("queue") == queue) and (vhost is None or c.get("vhost") == vhost)]
    if len(found) != 1:
        names = sorted(f"{c.get('vhost')}/{c.get('queue')}" for c in contracts_in(data))
        what = "no contract matches" if not found else "several contracts match"
        raise ContractError(f"{what} queue={queue!r} vhost={vhost!r}; available: {', '.join(names) or 'none'}")
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
