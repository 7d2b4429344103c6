"""`make bench` cannot rot: its broker-free part (P3) runs on a tiny stack, and the results files and plots are
rendered from known inputs and checked for their structure and verdicts. Figures are never asserted (they
depend on the machine); tests/broker/test_bench.py runs P1 and P2 on tiny inputs against both brokers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bench import accuracy, plan_cost, report, strategies, throughput
from bench.__main__ import main as bench_main
from bench.accuracy import Outcome, Stat
from bench.plan_cost import KINDS, Cost

CONTEXT = report.Context("2026-01-02", "2026-01-02 03:04 UTC", "make bench", False, "2 cores", "abc1234")
PNG = b"\x89PNG\r\n\x1a\n"


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of every row of the tables in the section `heading` (header and separator rows left out)."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("|")]
    return [r for r in rows if not set("".join(r)) <= set("-:") and r[0] not in ("strategy", "queue type", "what")]


def test_p3_measures_a_tiny_stack_in_processes_of_its_own() -> None:
    costs = plan_cost.measure(2, "one", progress=lambda _: None)
    assert [c.kind for c in costs] == list(KINDS)
    by_kind = {c.kind: c for c in costs}
    # The floor registers exactly what the program registered: 2 × (5 queues, 3 exchanges, ...) + the vhost's own.
    assert by_kind["program under mocks"].resources == by_kind["SDK floor"].resources > 2 * 5
    assert all(c.peak_mb > 5 for c in costs)
    # A fresh Python process stays far below this process (pytest, pulumi, matplotlib): peaks are the child's own.
    assert by_kind["check_vhost"].peak_mb < 200


def test_the_spread_layout_shares_the_queues_among_its_vhosts() -> None:
    import yaml

    stack = yaml.safe_load(plan_cost.stack_file(25, plan_cost.SPREAD, "1m"))["config"]
    vhosts = stack["rabbitmq-retry:vhosts"]
    assert len(vhosts) == plan_cost.SPREAD and sum(len(v["queues"]) for v in vhosts) == 25
    assert {len(q["retry"]["delays"]) for v in vhosts for q in v["queues"]} == {3}


def _costs(sizes: tuple[int, int], growth: float) -> list[Cost]:
    return [Cost(kind, queues, layout, plan_cost.layout_vhosts(layout), seconds, 100.0, 10 * queues)
            for queues in sizes for layout in plan_cost.LAYOUTS for kind in KINDS
            for seconds in [(1.0 if queues == sizes[0] else growth) * (2.0 if kind == "make review" else 1.0)]]


@pytest.mark.parametrize(("growth", "verdict"), [(9.5, "yes"), (12.5, "**no**")])
def test_the_plan_cost_file_states_the_growth_ratio_against_the_target(tmp_path: Path, growth: float,
                                                                       verdict: str) -> None:
    costs = _costs((100, 1000), growth)
    text = "\n".join(report.header("P3", CONTEXT, []) + report.p3_section(costs, (100, 1000), "p3.png"))
    rows = table_rows(text, "## P3")
    assert len(rows) == len(costs) + len(KINDS) * len(plan_cost.LAYOUTS)
    ratios = rows[len(costs):]
    assert {(r[0], r[1]) for r in ratios} == {(k, w) for k in KINDS for w in ("1 vhost", "10 vhosts")}
    assert {r[2] for r in ratios} == {f"{growth:.1f}"}
    assert {r[-1] for r in ratios if r[0] != plan_cost.GC_ON} == {verdict}
    assert {r[-1] for r in ratios if r[0] == plan_cost.GC_ON} == {"(anchor)"}, "the program as it was is not judged"
    assert "Target: t1000/t100 ≤ 12." in text and "2 cores" in text and "`abc1234`" in text
    assert (f"with it on (`program, GC on`, the program as it was) 1,000 queues took {growth:.1f}–{growth:.1f} s "
            f"instead of {growth:.1f}–{growth:.1f} s") in text
    report.p3_plot(costs, "P3", tmp_path / "p3.png")
    assert (tmp_path / "p3.png").read_bytes().startswith(PNG)


def test_a_quick_plan_cost_file_does_not_judge_its_ratio_by_the_1000_over_100_target() -> None:
    text = "\n".join(report.p3_section(_costs((10, 100), 5.0), (10, 100), "p3.png"))
    assert "not applicable to t100/t10" in text
    assert {r[-1] for r in table_rows(text, "## P3")[-len(KINDS) * 2:] if r[0] != plan_cost.GC_ON} == {"n/a"}


def _outcomes() -> list[Outcome]:
    return [Outcome(strategies.TIERS, "quorum", (Stat("tiers", 1000, (1.0, 2.0, 3.0)), Stat("tiers", 10000, (600.0,))),
                    seconds=3.0),
            Outcome(strategies.LEVELS, "quorum", skipped="the config parser refuses it: 'levels' is not one of …"),
            Outcome(strategies.NATIVE, "quorum", (Stat("native", 1000, (-2.0, 4.0)),), seconds=4.0),
            Outcome(strategies.SEED_003, "quorum", (Stat("seed-003", 1000, (8000.0, 9000.0)),), seconds=5.0)]


def test_the_p1_section_judges_ours_against_the_target_and_states_the_anchor_ratio(tmp_path: Path) -> None:
    plan = accuracy.Delays(4, (1000, 10000), (1000, 2000), 2, 100)
    text = "\n".join(report.p1_section(_outcomes(), plan, "quorum", "p1.png"))
    rows = {(r[0], r[1]): r for r in table_rows(text, "## P1") if r[1].replace(",", "").isdigit()}
    assert set(rows) == {("`tiers`", "1,000"), ("`tiers`", "10,000"), ("`native`", "1,000"), ("`seed-003`", "1,000")}
    assert rows["`tiers`", "1,000"][5:] == ["3.0", "3.0", "0", "100.0", "yes"]
    assert rows["`tiers`", "10,000"][-2:] == ["500.0", "**no**"]  # 600 ms > 5 % of 10 s
    assert rows["`native`", "1,000"][7] == "1"  # −2 ms is early
    assert rows["`seed-003`", "1,000"][-1] == "(anchor)"
    assert "Our worst p99: **600.0 ms** (tiers (quorum) 10000 ms)" in text
    assert "worst p99 **9,000.0 ms**, **15 ×** our worst p99 (600.0 ms)" in text
    assert "`tiers`: target missed at 10000 ms" in text and "`native`: target met at every delay" in text
    assert "`levels` skipped: the config parser refuses it" in text
    assert "1000, 2000 ms, every message at every attempt" in text
    report.p1_plot(_outcomes(), "P1", tmp_path / "p1.png")
    assert (tmp_path / "p1.png").read_bytes().startswith(PNG)


def test_the_p2_section_gives_each_strategy_the_median_of_its_rounds_ratios_to_the_same_round_s_plain(
        tmp_path: Path) -> None:
    def run(queue_type: str, row: str, deliveries: int, seconds: float, rates: tuple[float, ...],
            ratios: tuple[float, ...] = ()) -> throughput.Run:
        return throughput.Run(queue_type, row, 100, deliveries, seconds, prefetch=10, rates=rates, ratios=ratios,
                              client_us=250.4, broker_us=300.0)

    runs = [run("classic", "plain", 100, 0.1, (900.0, 1000.0, 1100.0)),
            # A slow second round for both: its ratio is paired with its own plain run, so 0.45 is the median.
            run("classic", "tiers (reject)", 400, 1.0, (500.0, 400.0, 450.0), (0.55, 0.40, 0.45)),
            run("quorum", "plain", 100, 0.05, (2000.0, 2000.0, 2000.0)),
            run("quorum", "native", 400, 0.2, (2000.0, 2000.0, 2000.0), (1.0, 1.0, 1.0)),
            throughput.Run("classic", "native", skipped="native runs on quorum queues only, not classic", prefetch=10),
            throughput.Run("classic", "native", skipped="native runs on quorum queues only, not classic", prefetch=50)]
    def text_of(runs: list[throughput.Run]) -> str:
        return "\n".join(report.p2_section(runs, 100, 3, "p2.png"))

    text = text_of(runs)
    rows = {(r[1], r[2]): r for r in table_rows(text, "## P2")}
    assert rows["classic", "`tiers (reject)`"][3:] == ["400", "400", "0.45", "250", "300", "no"]
    assert rows["quorum", "`native`"][3:] == ["400", "2,000", "1.00", "250", "300", "yes"]
    assert rows["quorum", "`plain`"][5] == rows["quorum", "`plain`"][8] == ""
    edge = text_of([run("quorum", "levels", 400, 1.0, (497.0,), (0.497,))])
    assert table_rows(edge, "## P2")[-1][5:] == ["0.497", "250", "300", "no"]  # not "0.50 … no"
    # The plot's bar labels say the same.
    assert [report.ratio_text(x) for x in (0.497, 0.4949, 0.5, 0.504, 0.456)] == ["0.497", "0.49", "0.50", "0.50",
                                                                                  "0.46"]
    assert text.count("- classic `native` skipped: native runs on quorum queues only") == 1
    assert ("- prefetch 10, classic `tiers (reject)`: deliveries/s by round 500, 400, 450; ÷ plain 0.55, 0.40, "
            "0.45.") in text
    report.p2_plot(runs, "P2", tmp_path / "p2.png")
    assert (tmp_path / "p2.png").read_bytes().startswith(PNG)


def test_p2_rounds_pair_each_strategy_run_with_the_plain_run_of_its_round() -> None:
    def runs(row: str, rates: list[float]) -> list[throughput.Run]:
        return [throughput.Run("quorum", row, 100, int(rate), 1.0, prefetch=10, rates=(rate,)) for rate in rates]

    plain, tiers, native = throughput.combine({
        "plain": runs("plain", [1000.0, 500.0, 2000.0]),
        "tiers (reject)": runs("tiers (reject)", [600.0, 250.0, 900.0]),
        "native": [throughput.Run("quorum", "native", skipped="needs 4.3.1", prefetch=10)] * 3})
    assert tiers.ratios == (0.6, 0.5, 0.45) and tiers.ratio == 0.5
    assert (plain.rates, plain.rate, tiers.rate) == ((1000.0, 500.0, 2000.0), 1000.0, 600.0)  # the median rounds
    assert plain.ratio is None and native.skipped == "needs 4.3.1"


def test_each_strategy_entry_says_where_it_runs_and_how_a_message_is_delayed() -> None:
    assert strategies.NATIVE.unsupported((3, 10, 8), "quorum") == (
        "native needs RabbitMQ 4.3.1 or later; this broker is 3.10.8")
    assert strategies.NATIVE.unsupported((4, 3, 6), "classic") == "native runs on quorum queues only, not classic"
    assert strategies.TIERS.unsupported((3, 10, 8), "classic") is None
    contract = {"queue": "orders.billing", "delay_exchange": "rabbitmq-retry.delay.16", "delay_unit_ms": 1000,
                "delay_words": 28, "delay_levels": 17}
    # The design's example: unit 1000 ms, delay 5 s (101: levels 2 and 0), published to level 2 as the client
    # does, or to the top level for a contract that lists no delay_exchanges.
    assert strategies.route(strategies.LEVELS, contract, 5000) == (
        "rabbitmq-retry.delay.16", "0." * 25 + "1.0.1.orders.billing", None)
    listed = {**contract, "delay_exchanges": [f"rabbitmq-retry.delay.{k}" for k in range(17)]}
    assert strategies.route(strategies.LEVELS, listed, 5000)[0] == "rabbitmq-retry.delay.2"
    assert strategies.levels_routing_key(contract, 4001) == "0." * 25 + "1.0.1.orders.billing"  # rounded up
    assert strategies.levels_routing_key(contract, 10**12) == "0." * 11 + "1." * 17 + "orders.billing"  # capped
    assert strategies.route(strategies.SEED_003, {}, 250) == ("", strategies.ANCHOR_DELAY_QUEUE, "250")
    tiers = {"retry_exchange": "q.retry", "tiers": [{"routing_key": "wait.2", "delay_ms": 200}]}
    assert strategies.route(strategies.TIERS, tiers, 200) == ("q.retry", "wait.2", None)
    with pytest.raises(ValueError, match="per attempt"):
        strategies.route(strategies.NATIVE, {}, 200)


def test_a_strategy_the_parser_refuses_is_skipped_with_its_reason_and_ours_are_accepted() -> None:
    tiers = strategies.vhost_config(strategies.TIERS, "quorum", (10, 20), 3)
    native = strategies.vhost_config(strategies.NATIVE, "quorum", (10, 30), 3)
    assert strategies.refused(tiers) is None and strategies.refused(native) is None
    assert "retry.strategy" in (strategies.refused({**tiers, "queues": [
        {**tiers["queues"][0], "retry": {"strategy": "nope"}}]}) or "")
    levels = strategies.vhost_config(strategies.LEVELS, "quorum", (1000, 10000), 3, unit_ms=100)
    assert levels["delay_levels"] == {"unit": "100ms", "max_delay": "20000ms", "type": "quorum"}
    assert levels["queues"][0]["retry"]["backoff"] == {"initial": "1000ms", "multiplier": 2, "max": "10000ms",
                                                       "jitter": 0}


def test_a_results_file_names_the_command_that_made_it() -> None:
    from bench.__main__ import command

    assert command(False, ["p1", "p2", "p3", "alerts"], None) == "make bench"
    assert command(True, ["p3", "p1", "p2"], None) == "BENCH_QUICK=1 make bench"
    assert command(True, ["p3", "alerts", "p1", "p2"], None) == \
        "BENCH_QUICK=1 .venv/bin/python -m bench --parts p3 alerts p1 p2"
    assert command(False, ["p1", "p2"], None) == ".venv/bin/python -m bench --parts p1 p2"
    assert command(True, ["p2"], ["4.3"]) == "BENCH_QUICK=1 .venv/bin/python -m bench --parts p2 --brokers 4.3"
    assert command(False, ["p1", "p2", "p3", "alerts"], None, 20) == \
        ".venv/bin/python -m bench --parts p1 p2 p3 alerts --floor-rounds 20"
    assert command(False, ["floor"], None, 20) == ".venv/bin/python -m bench --parts floor --floor-rounds 20"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: there is nothing to keep the client off")
def test_p2_keeps_the_client_and_the_threads_it_starts_on_one_core_and_gives_the_others_back_after() -> None:
    allowed = os.sched_getaffinity(0)
    seen: list[set[int]] = []
    with throughput.client_core() as core:
        worker = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        worker.start()
        worker.join()
        assert os.sched_getaffinity(0) == {core} and core in allowed
    assert seen == [{core}], "a consumer thread started during P2 inherits the core"
    assert os.sched_getaffinity(0) == allowed


def test_a_broker_name_rabbitmq_brokers_does_not_know_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RABBITMQ_BROKERS", "3.10=127.0.0.1:5672:15672,4.3=127.0.0.1:5673:15673")
    with pytest.raises(SystemExit) as exit_status:
        bench_main(["--brokers", "4.3", "9.9", "--parts", "p1", "--out", str(tmp_path)])
    assert exit_status.value.code == 2
    assert ("--brokers: no broker named 9.9 in RABBITMQ_BROKERS; its brokers are 3.10, 4.3"
            in capsys.readouterr().err)
    assert not any(tmp_path.iterdir())


def test_the_floor_takes_more_rounds_when_asked_and_never_fewer_than_one() -> None:
    from bench.__main__ import FULL, QUICK, arguments, scale_of

    assert scale_of(False, None) == FULL and scale_of(True, None) == QUICK
    assert scale_of(False, 20).floor_rounds == 20 and scale_of(False, 20).floor_messages == FULL.floor_messages
    with pytest.raises(SystemExit):
        arguments(["--floor-rounds", "0"])
