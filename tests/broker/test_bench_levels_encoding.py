"""The levels-encoding benchmark on tiny inputs against each broker, so it cannot rot: every encoding's levels
deliver every copy (a run that loses one raises), and its results file has a row per queue type and encoding.
How fast or how costly is never asserted (bench/results/ has the figures)."""

from __future__ import annotations

from pathlib import Path

from bench import levels_encoding, report
from bench.levels_encoding import ENCODINGS, QUEUE_TYPES
from tests.support.admin import version
from tests.support.mirror import Broker


def test_every_encoding_delivers_every_copy_and_the_results_file_has_a_row_for_each(broker: Broker,
                                                                                    tmp_path: Path) -> None:
    context = report.Context("2026-01-02", "2026-01-02 03:04 UTC", "make bench", True, report.machine(), "test")
    paths = levels_encoding.results_file([broker], context, tmp_path, 20, 1, lambda _: None)
    assert [p.name for p in paths] == ["2026-01-02-levels-encoding.md"]
    text = paths[0].read_text()
    live = ".".join(map(str, version(broker)))
    assert f"## RabbitMQ {live}" in text
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith(("| classic", "| quorum"))]
    assert [(q.strip(), e.strip()) for q, e in rows] == [(q, f"`{e.name}`") for q in QUEUE_TYPES for e in ENCODINGS]
