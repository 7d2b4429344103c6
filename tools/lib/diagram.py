"""Mermaid diagrams of a retryable queue's message path, from its retry contract."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from components.model.durations import format_duration
from components.model.naming import DELIVERY_EXCHANGE, delay_level, requeue_exchange
from components.strategies import levels, native, tiers
from rabbitmq_retry_client.contract import strategy_of

UNSAFE_IN_LABELS = frozenset('"#&<>`|')
"""Quotes end a label, `#…;` is Mermaid's entity syntax, `<`, `>`, `&` are HTML in a label, a backtick
pair makes it a Markdown string, and `|` delimits edge labels."""
CHANGED_STYLE = "fill:#fff3b0,stroke:#d4a000,stroke-width:2px"
REMOVED_STYLE = "fill:#ffd6d6,stroke:#c00,stroke-dasharray: 4 2"


def label(text: str) -> str:
    """`text` inside a quoted Mermaid label, each character that means something there as `#<code>;`."""
    return "".join(f"#{ord(c)};" if c in UNSAFE_IN_LABELS or not c.isprintable() else c for c in text)


def retry_path(contract: Mapping[str, Any], changed: Collection[str] = (), removed: Collection[str] = ()) -> str:
    """input → retry exchange → wait tiers (with delays) → requeue → input; input → error.

    `changed` and `removed` are physical names to highlight (a review marks what a PR touches); each strategy
    draws its own path (`PATHS`)."""
    return PATHS[strategy_of(contract)](contract, changed, removed)


def _tiers_path(contract: Mapping[str, Any], changed: Collection[str], removed: Collection[str]) -> str:
    """Strategy tiers: a reject or a republished copy waits in the tier's TTL queue, then returns via requeue."""
    queue = contract["queue"]
    names = {"input": queue, "retry": contract["retry_exchange"], "requeue": requeue_exchange(queue),
             "error_x": contract["error_exchange"], "error_q": contract["error_queue"]}
    lines = [
        "flowchart LR",
        f'  input[["{label(queue)}"]]',
        f'  retry{{{{"{label(names["retry"])}<br/>direct"}}}}',
        f'  requeue{{{{"{label(names["requeue"])}<br/>fanout"}}}}',
        f'  error_x{{{{"{label(names["error_x"])}<br/>fanout"}}}}',
        f'  error_q[("{label(names["error_q"])}")]',
        f'  input -- "reject (routes to {label(contract["reject_routes_to"])})<br/>or republish with a tier key" '
        "--> retry",
    ]
    for number, tier in enumerate(contract["tiers"], start=1):
        node = f"wait{number}"
        names[node] = tier["queue"]
        lines.append(f'  {node}[("{label(tier["queue"])}<br/>TTL {format_duration(int(tier["delay_ms"]))}")]')
        lines.append(f'  retry -- "{label(tier["routing_key"])}" --> {node}')
        lines.append(f'  {node} -- "expired" --> requeue')
    lines.append("  requeue -- \"only this queue\" --> input")
    lines.append(f'  input -. "after {int(contract["max_retries"])} retries: park" .-> error_x')
    lines.append("  error_x --> error_q")
    return "\n".join(lines + _styles(names, changed, removed))


def _native_path(contract: Mapping[str, Any], changed: Collection[str], removed: Collection[str]) -> str:
    """Strategy native: the message waits in its own queue; the broker parks it past the delivery limit."""
    queue = contract["queue"]
    names = {"input": queue, "error_x": contract["error_exchange"], "error_q": contract["error_queue"]}
    wait = (f"waits min(n × {format_duration(int(contract['min_delay_ms']))}, "
            f"{format_duration(int(contract['max_delay_ms']))}) in place")
    lines = [
        "flowchart LR",
        f'  input[["{label(queue)}<br/>quorum, delivery-limit {int(contract["delivery_limit"])}"]]',
        f'  error_x{{{{"{label(names["error_x"])}<br/>fanout"}}}}',
        f'  error_q[("{label(names["error_q"])}")]',
        f'  input -- "{label(str(contract["retry_call"]))}<br/>{label(wait)}" --> input',
        f'  input -. "after {int(contract["max_retries"])} retries: park (client or delivery limit)" .-> error_x',
        "  error_x --> error_q",
    ]
    return "\n".join(lines + _styles(names, changed, removed))


def _levels_path(contract: Mapping[str, Any], changed: Collection[str], removed: Collection[str]) -> str:
    """Strategy levels: the consumer publishes a copy to the level of its delay's highest 1 bit (not the top one)
    with the delay in the routing key; the vhost's shared levels hold it (level k waits `unit × 2^k` when bit k is
    1), pass it down, and the delivery exchange routes it to this queue only."""
    queue, levels, unit = contract["queue"], int(contract["delay_levels"]), int(contract["delay_unit_ms"])
    backoff = contract["backoff"]
    # The levels node stands for every level: it is marked when the top level (the contract's delay_exchange) is.
    names = {"input": queue, "levels": contract["delay_exchange"], "deliver": DELIVERY_EXCHANGE,
             "error_x": contract["error_exchange"], "error_q": contract["error_queue"]}
    top, longest = format_duration(unit * 2 ** (levels - 1)), format_duration(unit * (2**levels - 1))
    waits = (f"{label(delay_level(0))} … {label(delay_level(levels - 1))}<br/>{levels} levels, level k holds "
             f"{format_duration(unit)} × 2^k<br/>({format_duration(unit)} … {top}, at most {longest} in all)")
    retry = (f"retry n: publish a copy to the level of its delay's highest 1 bit, delay "
             f"min({format_duration(int(backoff['max_ms']))}, {format_duration(int(backoff['initial_ms']))} × "
             f"{backoff['multiplier']:g}^(n-1)) ± {backoff['jitter'] * 100:g}%<br/>key: delay in "
             f"{format_duration(unit)} units as {int(contract['delay_words'])} bits, then {label(queue)}")
    lines = [
        "flowchart LR",
        f'  input[["{label(queue)}"]]',
        f'  levels[("{waits}")]',
        f'  deliver{{{{"{label(DELIVERY_EXCHANGE)}<br/>topic"}}}}',
        f'  error_x{{{{"{label(names["error_x"])}<br/>fanout"}}}}',
        f'  error_q[("{label(names["error_q"])}")]',
        f'  input -- "{retry}" --> levels',
        '  levels -- "expired: on down, waiting again at each 1 bit" --> levels',
        '  levels -- "after level 0" --> deliver',
        '  deliver -- "only this queue" --> input',
        f'  input -. "after {int(contract["max_retries"])} retries: park" .-> error_x',
        "  error_x --> error_q",
    ]
    return "\n".join(lines + _styles(names, changed, removed))


PATHS: Mapping[str, Callable[[Mapping[str, Any], Collection[str], Collection[str]], str]] = {
    tiers.NAME: _tiers_path, native.NAME: _native_path, levels.NAME: _levels_path}
"""The path diagram of each strategy, by the name its contract carries."""


def _styles(names: Mapping[str, str], changed: Collection[str], removed: Collection[str]) -> list[str]:
    lines = []
    for node, name in names.items():
        if name in removed:
            lines.append(f"  style {node} {REMOVED_STYLE}")
        elif name in changed:
            lines.append(f"  style {node} {CHANGED_STYLE}")
    return lines
