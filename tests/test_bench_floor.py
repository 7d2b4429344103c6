"""The floor comparison's arithmetic and verdicts (bench/floor.py) and P1 judged over rounds
(peers_report.p1_rounds_section), on made-up figures: what the results file says follows from what was measured.
Nothing here measures speed."""

from __future__ import annotations

from bench import floor, peers_report
from bench.accuracy import Outcome, Stat
from bench.strategies import KOMBU, TIERS
from tests.test_bench import table_rows


def _sample(rate: float, broker_us: float, retries: int = 100) -> floor.Sample:
    """A run of `retries` retries (2 deliveries each) at `rate` retries/s and `broker_us` broker CPU per retry."""
    seconds = retries / rate
    return floor.Sample(2 * retries, retries, seconds, 0.004, broker_us * retries / 1e6)


def test_each_round_pairs_ours_with_the_hand_wired_run_of_the_same_round_and_the_median_decides() -> None:
    pair = floor.Pair("quorum", floor.REJECT,
                      ours=[_sample(900, 110), _sample(300, 200), _sample(950, 100)],
                      hand=[_sample(1000, 100), _sample(400, 100), _sample(1000, 100)],
                      loads=["1.0 1.0 1.0", "3.0 2.0 1.0", "1.0 1.0 1.0"])
    assert [round(x, 2) for x in pair.rate_ratios] == [0.9, 0.75, 0.95]
    assert round(pair.rate_ratio or 0, 2) == 0.9 and round(pair.broker_ratio or 0, 2) == 1.1
    assert pair.verdict()[0], "0.90 × the rate and 1.10 × the broker CPU: both at their bound"
    worse = floor.Pair("quorum", floor.REJECT, ours=[_sample(950, 130)], hand=[_sample(1000, 100)], loads=["1 1 1"])
    met, why = worse.verdict()
    assert not met and "1.30 × its broker CPU per retry" in why
    plain = floor.Pair("classic", floor.PLAIN, ours=[floor.Sample(200, 0, 0.1, 0.01, 0.0)],
                       hand=[floor.Sample(200, 0, 0.05, 0.005, 0.0)], loads=["1 1 1"])
    assert plain.ours[0].rate == 2000 and plain.ours[0].client_us == 50
    assert plain.verdict() == (False, "0.50 × bare pika's deliveries/s (target ≥ 0.9)")


def test_the_section_shows_every_row_each_round_with_its_load_and_the_skipped_ones() -> None:
    pairs = [floor.Pair("quorum", floor.REPUBLISH, ours=[_sample(800, 120)], hand=[_sample(1000, 100)],
                        loads=["2.50 1.00 0.50"]),
             floor.Pair("classic", "native", skipped="native runs on quorum queues only, not classic")]
    text = "\n".join(floor.section(pairs, 100, 1))
    rows = table_rows(text, "## P2 against the broker's floor")
    assert rows == [["quorum", "`tiers (republish)`", "800", "1,000", "0.80", "120", "100", "1.20", "20.0", "20.0",
                     "**no**"]]
    assert "- quorum `tiers (republish)`: 800 ÷ 1,000 = 0.80, broker 120 ÷ 100 µs (load 2.50 1.00 0.50)." in text
    assert "- classic `native` skipped: native runs on quorum queues only" in text
    assert "- quorum `tiers (republish)`: 0.80 × the hand-wired retries/s (target ≥ 0.9)" in text


def test_a_republish_row_short_of_the_bare_loop_is_judged_against_the_loop_carrying_what_our_copy_carries() -> None:
    """The contract's headers and `mandatory` cost the bare loop a share, measured alone in the same rounds: ours
    short of the bare loop is met only within the targets of the loop that carries the same."""
    bare = [_sample(1000, 100), _sample(1000, 100), _sample(1000, 100)]
    carrying = [_sample(850, 105), _sample(800, 110), _sample(860, 100)]
    explained = floor.Pair("classic", floor.REPUBLISH, ours=[_sample(800, 100), _sample(780, 100), _sample(790, 95)],
                           hand=bare, loads=["1 1 1"] * 3, carrying=carrying)
    met, why = explained.verdict()
    assert met, why
    assert why.startswith("0.79 × the hand-wired retries/s (target ≥ 0.9), 1.00 × its broker CPU per retry")
    assert "explained by what our copy carries" in why and "runs at 0.85 × the bare loop's retries/s" in why
    assert "ours at 0.94 × that loop's, 0.95 × its broker CPU per retry" in why
    slower = floor.Pair("classic", floor.REPUBLISH, ours=[_sample(700, 100)] * 3, hand=bare, loads=["1 1 1"] * 3,
                        carrying=carrying)
    met, why = slower.verdict()
    assert not met and "not explained" in why and "ours at 0.82 × that loop's" in why
    costlier = floor.Pair("classic", floor.REPUBLISH, ours=[_sample(800, 130)] * 3, hand=bare, loads=["1 1 1"] * 3,
                          carrying=carrying)
    assert not costlier.verdict()[0], "1.24 × the carrying loop's broker CPU"
    alone = floor.Pair("classic", floor.REPUBLISH, ours=[_sample(800, 100)], hand=[_sample(1000, 100)],
                       loads=["1 1 1"])
    assert not alone.verdict()[0], "without the carrying loop measured, nothing explains a shortfall"
    part = explained.carried()
    assert part is not None and part.row == floor.HEADERS and round(part.rate_ratio or 0, 2) == 0.85
    rows = table_rows("\n".join(floor.section([explained, slower, part], 100, 3)), "## P2 against the broker's floor")
    assert [row[-1] for row in rows] == ["explained", "**no**", "information"]


def _outcome(strategy: object, queue_type: str, *p99s: float) -> Outcome:
    return Outcome(strategy, queue_type, tuple(Stat(str(strategy), 1000 * (i + 1), (p,)) for i, p in enumerate(p99s)))  # type: ignore[arg-type]


def test_p1_is_judged_over_every_round_within_max_2_ms_or_10_percent_of_each_peer_s_worst() -> None:
    rounds = [[_outcome(TIERS, "quorum", 3.0, 9.0), _outcome(KOMBU, "quorum", 5.0, 7.5)],
              [_outcome(TIERS, "quorum", 4.0), _outcome(KOMBU, "quorum", 6.0)],
              [_outcome(TIERS, "quorum", 5.0), _outcome(KOMBU, "quorum", 8.0), _outcome(KOMBU, "classic", 100.0)]]
    text = "\n".join(peers_report.p1_rounds_section(rounds))
    assert "Our worst p99 per round: 9.0, 4.0, 5.0 ms; over the rounds 9.0 ms" in text
    assert ("- kombu (quorum): worst 8.0 ms over 3 round(s) (per round 7.5, 6.0, 8.0); ours 9.0 ms is above it by "
            "1.0 ms, tolerance 2.0 ms: met.") in text
    assert "- kombu (classic): worst 100.0 ms over 1 round(s) (per round 100.0); ours 9.0 ms is below it" in text
    rounds[1][0] = _outcome(TIERS, "quorum", 10.5)
    text = "\n".join(peers_report.p1_rounds_section(rounds))
    assert "ours 10.5 ms is above it by 2.5 ms, tolerance 2.0 ms: **not met**." in text
    big = [[_outcome(TIERS, "quorum", 108.0), _outcome(KOMBU, "quorum", 100.0)]]
    assert "tolerance 10.0 ms: met." in "\n".join(peers_report.p1_rounds_section(big)), "10 % above 20 ms"


def test_a_ratio_is_never_rounded_across_its_bound() -> None:
    assert [floor.shown(x, 0.9) for x in (0.8998, 0.8949, 0.95, 0.9)] == ["0.8998", "0.89", "0.95", "0.90"]
    assert floor.shown(1.1004, 1.1) == "1.1004" and floor.shown(1.2, 1.1) == "1.20"
