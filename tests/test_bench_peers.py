"""The peers' part of `make bench` (bench/peers.py, bench/cluster.py, bench/peers_report.py) rendered from known
inputs: every peer and the cluster get their rows, each ratio is to the peer's own plain run, losses are counted
and said, and issue 25's targets are judged from the figures of the same file. Figures are never asserted;
tests/broker/test_bench.py runs the peers on tiny inputs against both brokers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import accuracy, peers, peers_report, report, strategies
from bench.accuracy import Outcome, Stat
from bench.cluster import ClusterP1
from bench.throughput import FAILURES, Run
from tests.test_bench import PNG
from tests.test_bench import table_rows as rows_with_headers

PLAN = accuracy.Delays(4, (1000, 10000), (1000, 2000), 2, 100)


def table_rows(text: str, heading: str) -> list[list[str]]:
    return [r for r in rows_with_headers(text, heading) if r[0] not in ("prefetch", "messages sent")]


def _stat(name: str, delay_ms: int, *lateness: float) -> Stat:
    return Stat(name, delay_ms, lateness)


def _p1() -> list[Outcome]:
    return [Outcome(strategies.TIERS, "quorum", (_stat("tiers", 1000, 1.0, 5.0),)),
            Outcome(strategies.LEVELS, "quorum", (_stat("levels", 1000, 2.0, 8.0),)),
            Outcome(strategies.SEED_003, "quorum", (_stat("seed-003", 1000, 800.0, 9000.0),)),
            Outcome(strategies.KOMBU, "quorum", (_stat("kombu", 1000, 3.0, 6.0),)),
            Outcome(strategies.KOMBU, "classic", (_stat("kombu", 1000, 3.0, 40.0),)),
            Outcome(peers.DRAMATIQ[0], "classic", (_stat(peers.DRAMATIQ[0].name, 1000, 500.0, 990.0),))]


def test_kombu_is_routed_as_kombu_routes_a_countdown_and_only_in_whole_seconds() -> None:
    exchange, key, expiration = strategies.route(strategies.KOMBU, {}, 5000)
    assert (exchange, expiration) == ("celery_delayed_27", None)
    assert key == "0." * 25 + "1.0.1." + strategies.QUEUE, "28 binary words, most significant first, then the queue"
    with pytest.raises(ValueError, match="whole seconds"):
        strategies.route(strategies.KOMBU, {}, 1500)
    assert peers.whole_seconds(accuracy.FULL).delays_ms == accuracy.FULL.delays_ms
    assert peers.whole_seconds(accuracy.QUICK).delays_ms == (1000,), "the quick plan's 200 and 500 ms dropped"


def test_p1_shows_the_peers_beside_ours_judged_as_peers_and_the_anchor_ratio_ignores_them(tmp_path: Path) -> None:
    text = "\n".join(report.p1_section(_p1(), PLAN, "quorum", "p1.png"))
    rows = {r[0]: r for r in table_rows(text, "## P1") if r[1].replace(",", "").isdigit()}
    assert set(rows) == {"`tiers`", "`levels`", "`seed-003`", "`kombu`", "`kombu (classic)`", "`dramatiq-1000ms`"}
    assert rows["`kombu`"][-1] == rows["`dramatiq-1000ms`"][-1] == "(peer)" and rows["`seed-003`"][-1] == "(anchor)"
    assert "worst p99 **9,000.0 ms**, **1,125 ×** our worst p99 (8.0 ms)" in text, "kombu is no anchor"
    assert ("Peers' worst p99: 6.0 ms (kombu 1000 ms), 40.0 ms (kombu (classic) 1000 ms), 990.0 ms "
            "(dramatiq-1000ms 1000 ms); our worst is **not below** kombu 1000 ms.") in text
    report.p1_plot(_p1(), "P1", tmp_path / "p1.png")
    assert (tmp_path / "p1.png").read_bytes().startswith(PNG)


def _run(row: str, queue_type: str, rate: float, broker_us: float, ratios: tuple[float, ...] = (),
         prefetch: int = 250, messages: int = 100) -> Run:
    deliveries = messages * (FAILURES + 1)
    return Run(queue_type, row, messages if ratios else deliveries, deliveries, deliveries / rate, prefetch=prefetch,
               rates=(rate, rate), ratios=ratios, client_us=100.0, broker_us=broker_us)


def _loops(lost: dict[str, list[int]] | None = None) -> peers.Loops:
    rows = [loop.row for loop in peers.LOOPS]
    judged = [_run(rows[0], "quorum", 3000, 100), _run(rows[1], "quorum", 900, 300, (0.30, 0.31)),
              _run(rows[2], "quorum", 2500, 150), _run(rows[3], "quorum", 400, 900, (0.16, 0.17)),
              _run(rows[4], "classic", 4000, 100), _run(rows[5], "classic", 300, 400, (0.07, 0.08))]
    defaults = [_run(r.row, r.queue_type, r.rate / 2, r.broker_us, r.ratios[:1], loop.default_prefetch)
                for r, loop in zip(judged, peers.LOOPS, strict=True)]
    return peers.Loops(judged, defaults, 2, 100, lost or {row: [0, 0, 0] for row in rows})


def test_the_peers_p2_pairs_each_retry_loop_with_its_own_library_s_plain_and_prices_a_delayed_copy(
        tmp_path: Path) -> None:
    text = "\n".join(peers_report.p2_peers_section(_loops(), "p2-peers.png"))
    rows = table_rows(text, "## P2 beside the peers")
    assert [(r[0], r[2], r[3]) for r in rows[:6]] == [("250", loop.library, f"`{loop.row}`") for loop in peers.LOOPS]
    assert [r[0] for r in rows[6:]] == ["10", "10", "8", "8", "16", "16"], "each library's own default"
    levels, kombu = rows[1], rows[3]
    # 400 deliveries at 300 µs = 120,000 µs over 300 delayed copies: 400 µs a copy.
    assert levels[6:] == ["0.30", "100", "300", "400", "0"] and kombu[6] == "0.17" and kombu[9] == "1,200"
    assert "Messages lost" not in text
    peers_report.p2_peers_plot(_loops(), "P2 peers", tmp_path / "p2-peers.png")
    assert (tmp_path / "p2-peers.png").read_bytes().startswith(PNG)


def test_messages_a_peer_lost_are_counted_per_run_and_explained() -> None:
    lost = {loop.row: [0, 0, 0] for loop in peers.LOOPS}
    lost[peers.LOOPS[3].row] = [760, 0, 12]
    text = "\n".join(peers_report.p2_peers_section(_loops(lost), "p2-peers.png"))
    rows = table_rows(text, "## P2 beside the peers")
    assert rows[3][-1] == "760" and rows[9][-1] == "12", "the judged rounds' sum, then the defaults' run"
    assert f"**Messages lost** (never came back within 5 s of the last delivery, and no queue held them): " \
           f"`{peers.LOOPS[3].row}` 760 + 0 + 12" in text
    assert "TCP_USER_TIMEOUT" in text


@pytest.mark.parametrize(("kombu_us", "kombu_rate", "verdicts"), [
    (900, 400, ("(target ≤ 0.5: met)", "more: met")),
    (500, 1000, ("(target ≤ 0.5: **not met**)", "**not more: not met**"))])
def test_the_targets_are_judged_from_the_same_file_s_figures(kombu_us: float, kombu_rate: float,
                                                            verdicts: tuple[str, str]) -> None:
    loops = _loops()
    loops.judged[3] = _run(peers.LOOPS[3].row, "quorum", kombu_rate, kombu_us, (0.16, 0.17))
    p2 = [Run("quorum", "plain", 100, 400, 1.0, prefetch=250),
          Run("quorum", "tiers (reject)", 100, 400, 1.0, prefetch=250, ratios=(0.6,)),
          Run("quorum", "native", 100, 400, 1.0, prefetch=250, ratios=(0.45,))]
    text = "\n".join(peers_report.targets_section(_p1(), p2, loops))
    assert f"broker CPU per delayed copy (1 s, quorum, prefetch 250): 400 ÷ {kombu_us * 4 / 3:,.0f} µs" in text
    assert verdicts[0] in text and verdicts[1] in text
    assert "P1 worst p99, `levels` against kombu (quorum and classic): 8.0 against 40.0 ms (no worse: met)" in text
    assert ("`tiers` ÷ plain at prefetch 250 (information; judged against the broker's floor below): tiers (reject) "
            "quorum 0.60 (at least 0.5)") in text
    assert "native quorum 0.45 (below 0.5: native quorum)" in text
    assert ("Our worst p99: 8.0 ms (levels (quorum) 1000 ms); every p99 of ours under max(5 % of the delay, "
            "100 ms): yes") in text
    assert ("Our worst p99 below every peer's worst p99 (each over its delays: kombu (quorum) 6.0 ms, kombu (classic) "
            "40.0 ms, dramatiq-1000ms (classic) 990.0 ms): **no**, not below kombu (quorum).") in text
    assert "on quorum queues, our worst 8.0 ms (levels (quorum) 1000 ms) against kombu (quorum) 6.0 ms: **not below**" \
        in text
    assert "on classic queues" not in text, "no strategy of ours ran on classic queues here"


def test_dramatiq_s_holding_says_what_a_kill_did_as_measured() -> None:
    kept = peers.Holding(1000, 1000, 60000, 61000, 1000, 1000, 0, 0, 20.0)
    assert kept.per_message_bytes == 1024.0
    text = "\n".join(peers_report.holding_section([kept]))
    assert table_rows(text, "## What dramatiq")[-1] == ["1,000", "1,000", "58.6 MiB", "59.6 MiB", "1,024 B", "1,000",
                                                         "1,000", "0", "0"]
    assert "none lost, 0 delivered twice" in text
    dropped = peers.Holding(10000, 8000, 60000, 70000, 9990, 9990, 3, 10, 20.0)
    assert "**10 lost**, 3 delivered twice" in "\n".join(peers_report.holding_section([dropped]))


def test_the_cluster_s_p1_stands_beside_the_single_node_s_or_says_why_it_did_not_run() -> None:
    single = [Outcome(strategies.TIERS, "quorum", (_stat("tiers", 1000, 1.0, 5.0),))]
    measured = ClusterP1("4.3", "3 of 3 nodes running", (Outcome(strategies.TIERS, "quorum", (
        _stat("tiers", 1000, 2.0, 150.0),)),), {"tiers": 3})
    text = "\n".join(peers_report.cluster_section(measured, single))
    assert table_rows(text, "## P1 on the three-node 4.3 cluster")[-1] == [
        "`tiers`", "1,000", "1.0", "2.0", "5.0", "150.0", "150.0", "0", "100.0", "**no**"]
    assert "Members of `bench`'s quorum queue after deployment: tiers 3" in text
    skipped = ClusterP1("4.3", skipped="the cluster is not healthy: node 2 down")
    text = "\n".join(peers_report.cluster_section(skipped, single))
    assert "Skipped: the cluster is not healthy: node 2 down" in text
