"""The levels-encoding benchmark measures what it says: its `msb-28` is exactly the product's key and bindings,
and every candidate encoding holds a copy in exactly the levels of its delay's 1 bits and then delivers it to
its queue (topic matching as RabbitMQ does it, `components/plan/checks.py`). Figures are never asserted."""

from __future__ import annotations

import pytest

from bench import levels_encoding
from bench.__main__ import command
from bench.levels_encoding import ENCODINGS, LEVELS, QUEUE, TODAY, Encoding
from components.model import naming
from components.plan.checks import _topic_matches


def test_todays_encoding_is_the_products_key_and_level_bindings() -> None:
    for units in (0, 1, 5, 512, 1023, 2**LEVELS - 1):
        assert TODAY.key(units, QUEUE) == naming.delay_routing_key(units, QUEUE)
    for level in range(LEVELS):
        assert [TODAY.pattern(level, bit) for bit in "10"] == [naming.delay_level_pattern(level, bit) for bit in "10"]
    assert TODAY.delivery(QUEUE) == naming.delivery_pattern(QUEUE)


def route(encoding: Encoding, units: int) -> list[int]:
    """The levels a copy of `units` waits in, entering at its highest level, as the bindings route it; then it
    must match the delivery binding."""
    held = []
    key = encoding.key(units, QUEUE)
    for level in reversed(range(max(units.bit_length(), 1))):
        ones, zeros = (_topic_matches(encoding.pattern(level, bit), key) for bit in "10")
        assert ones != zeros, f"{encoding.name}: level {level} routes {key!r} to {'both' if ones else 'neither'}"
        held += [level] if ones else []
    assert _topic_matches(encoding.delivery(QUEUE), key)
    return held


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if e.words], ids=lambda e: e.name)
def test_every_encoding_holds_a_copy_in_the_levels_of_its_1_bits_then_delivers_it(encoding: Encoding) -> None:
    for units in (0, 1, 2, 5, 512, 777, 1023, 2**LEVELS - 1):
        assert route(encoding, units) == [k for k in reversed(range(LEVELS)) if units >> k & 1]


def test_the_delays_are_the_same_for_every_encoding_and_all_pass_the_same_levels() -> None:
    units = levels_encoding.delays(200)
    assert units == levels_encoding.delays(200)
    assert {u.bit_length() - 1 for u in units} == {levels_encoding.HIGHEST_BIT}


def test_the_part_is_named_in_the_command_its_results_file_quotes() -> None:
    assert command(False, ["levels-encoding"], None) == ".venv/bin/python -m bench --parts levels-encoding"


def test_a_copy_in_flight_when_the_encoding_changes_waits_by_the_wrong_bits_or_is_never_delivered() -> None:
    """Why adopting a shorter key needs a migration of its own: a copy published with today's key before the
    switch, still waiting when every binding changed, is read at the new positions (a different delay) and then
    matches no delivery binding (the undeliverable queue keeps it). Reversing the bit order alone (`lsb-28`)
    keeps the delivery binding but reads the wrong bits too."""
    units = 0b1000000011  # 515: levels 9, 1 and 0
    key = TODAY.key(units, QUEUE)
    for new in (e for e in ENCODINGS if e.words and e != TODAY):
        held = [k for k in reversed(range(LEVELS)) if _topic_matches(new.pattern(k, "1"), key)]
        assert held != [9, 1, 0], new.name
        assert _topic_matches(new.delivery(QUEUE), key) == (new.words == TODAY.words), new.name
