"""analysis.regression: the --fail-on parser, the decision rule on hand-built changes, the
percentile changes from Compare's bootstrap rows, and the whole-run bootstrap over requests."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import regression
from analysis.compare import compare_samples
from analysis.regression import Change, RunRequests, Threshold, judge, parse_fail_on
from analysis.slo import SloProfile
from errors import InputError

# --- the parser --------------------------------------------------------------------------------


def test_parse_relative_and_absolute_thresholds_in_order() -> None:
    got = parse_fail_on("p99_ttft_ms:+10%, goodput:-5% ,error_rate:+0.01,output_throughput:-0%")
    assert got == (
        Threshold("p99_ttft_ms", 10.0, relative=True),
        Threshold("goodput", 5.0, relative=True),
        Threshold("error_rate", 0.01, relative=False),
        Threshold("output_throughput", 0.0, relative=True),
    )
    assert [t.label for t in got] == ["+10%", "-5%", "+0.01", "-0%"]


def test_every_compare_percentile_of_every_latency_is_accepted() -> None:
    assert len(regression.PERCENTILE_METRICS) == 16
    assert regression.PERCENTILE_METRICS["p95_itl_ms"] == ("itl_ms", 95.0)
    assert parse_fail_on("P50_TPOT_MS:+3%")[0].metric == "p50_tpot_ms"


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("p99_ttft_ms:-10%", "p99_ttft_ms regresses up, so its threshold takes '+', not '-'"),
        ("goodput:+5%", "goodput regresses down, so its threshold takes '-', not '+'"),
        ("error_rate:-0.01", "takes '+', not '-'"),
    ],
)
def test_a_sign_that_is_not_the_bad_direction_is_refused(text: str, wanted: str) -> None:
    with pytest.raises(InputError) as info:
        parse_fail_on(text)
    assert wanted in info.value.message
    assert info.value.hint is not None and text.split(":")[0] in info.value.hint


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("p98_ttft_ms:+10%", "unknown metric 'p98_ttft_ms'", "p50|p90|p95|p99 of ttft_ms"),
        ("latency:+10%", "unknown metric 'latency'", "goodput, output_throughput, error_rate"),
        ("p99_ttft_ms=10%", "not of the form metric:+N%", "p50|p90|p95|p99"),
        ("p99_ttft_ms:+ten%", "not of the form", "e.g. p99_ttft_ms:+10%,goodput:-5%"),
        ("p99_ttft_ms:+10%%", "not of the form", "metrics:"),
        ("p99_ttft_ms:10%", "has no sign; p99_ttft_ms regresses up", "e.g. p99_ttft_ms:+10%"),
        ("goodput:5%", "has no sign; goodput regresses down", "e.g. goodput:-5%"),
        ("p99_ttft_ms:+10%,p99_ttft_ms:+20%", "names p99_ttft_ms twice", "once"),
        (" , ", "names no threshold", "metric:+N%"),
    ],
)
def test_malformed_fail_on_says_what_is_accepted(text: str, message: str, hint: str) -> None:
    with pytest.raises(InputError) as info:
        parse_fail_on(text)
    assert message in info.value.message
    assert info.value.hint is not None and hint in info.value.hint


# --- the decision rule -------------------------------------------------------------------------

P99_10 = Threshold("p99_ttft_ms", 10.0, relative=True)
GOODPUT_5 = Threshold("goodput", 5.0, relative=True)


def _ttft(base: float, cand: float, low: float, high: float) -> Change:
    return Change("p99_ttft_ms", base, cand, low, high, 1000, 1000)


@pytest.mark.parametrize(
    ("change", "threshold", "verdict", "beyond", "significant"),
    [
        # +30 %, interval [+20, +40] ms: beyond +10 % and significant
        (_ttft(100.0, 130.0, 20.0, 40.0), P99_10, "regression", True, True),
        # +5 % under +10 %, even though significant
        (_ttft(100.0, 105.0, 2.0, 8.0), P99_10, "within threshold", False, True),
        # +30 % but the interval includes 0
        (_ttft(100.0, 130.0, -5.0, 60.0), P99_10, "not significant", True, False),
        # exactly at the threshold is not beyond it
        (_ttft(100.0, 110.0, 5.0, 15.0), P99_10, "within threshold", False, True),
        # −20 %, interval below 0
        (_ttft(100.0, 80.0, -30.0, -10.0), P99_10, "improved", False, False),
        # goodput −20 %: down is bad
        (Change("goodput", 10.0, 8.0, -2.5, -1.5, 9, 9), GOODPUT_5, "regression", True, True),
        # goodput +20 %: improved
        (Change("goodput", 10.0, 12.0, 1.5, 2.5, 9, 9), GOODPUT_5, "improved", False, False),
        # absolute: +0.02 error rate beyond +0.01
        (
            Change("error_rate", 0.01, 0.03, 0.01, 0.03, 9, 9),
            Threshold("error_rate", 0.01, relative=False),
            "regression",
            True,
            True,
        ),
        # relative over a baseline of 0: any significant rise is beyond
        (
            Change("error_rate", 0.0, 0.02, 0.005, 0.035, 9, 9),
            Threshold("error_rate", 50.0, relative=True),
            "regression",
            True,
            True,
        ),
    ],
)
def test_the_decision_rule(
    change: Change, threshold: Threshold, verdict: str, beyond: bool, significant: bool
) -> None:
    j = judge(change, threshold)
    assert (j.verdict, j.beyond, j.significant) == (verdict, beyond, significant)
    assert j.failed == (verdict == "regression")
    assert regression.gate([j]) == (verdict != "regression")


def test_no_interval_is_not_enough_data() -> None:
    with pytest.raises(InputError, match="not enough data"):
        judge(Change("p99_itl_ms", None, None, None, None, 0, 0), P99_10)


def test_change_percentages_are_of_the_baseline() -> None:
    ch = _ttft(200.0, 260.0, 40.0, 80.0)
    assert ch.diff == 60.0
    assert ch.diff_pct == pytest.approx(30.0)
    assert (ch.pct(ch.low), ch.pct(ch.high)) == (pytest.approx(20.0), pytest.approx(40.0))
    assert Change("error_rate", 0.0, 0.1, 0.0, 0.2, 1, 1).diff_pct is None


# --- percentiles through Compare's bootstrap ---------------------------------------------------


def _changes(base: np.ndarray, cand: np.ndarray, metric: str = "p99_ttft_ms") -> Change:
    diffs = compare_samples(
        {"ttft_ms": base}, {"ttft_ms": cand}, (50.0, 90.0, 95.0, 99.0), n_boot=300
    )
    return regression.percentile_changes(diffs, [metric])[metric]


def test_a_clear_30_percent_p99_regression_is_flagged() -> None:
    base = np.linspace(100.0, 200.0, 1001)  # P99 = 100 + 0.99 × 100 = 199 ms
    cand = base * 1.3  # P99 = 258.7 ms: +30 %
    ch = _changes(base, cand)
    assert (ch.baseline, ch.candidate) == (pytest.approx(199.0), pytest.approx(258.7))
    assert ch.diff_pct == pytest.approx(30.0)
    assert ch.low is not None and ch.low > 0
    j = judge(ch, P99_10)
    assert j.verdict == "regression"


def test_a_5_percent_rise_under_a_10_percent_threshold_passes() -> None:
    base = np.linspace(100.0, 200.0, 1001)
    ch = _changes(base, base * 1.05)
    assert ch.diff_pct == pytest.approx(5.0)
    assert judge(ch, P99_10).verdict == "within threshold"


def test_a_noisy_small_sample_with_a_big_point_change_is_not_significant() -> None:
    base = np.arange(10.0, 20.0)  # P99 = 18 + 0.91 × 1 = 18.91
    cand = np.array([10.0, 11, 12, 13, 14, 15, 16, 17, 18, 40])  # P99 = 18 + 0.91 × 22 = 38.02
    ch = _changes(base, cand)
    assert (ch.baseline, ch.candidate) == (pytest.approx(18.91), pytest.approx(38.02))
    assert ch.diff_pct == pytest.approx(101.06, abs=0.01)
    # a resample misses the 40 with chance 0.9^10 ≈ 35 %: the interval reaches below 0
    assert ch.low is not None and ch.low <= 0 < (ch.high or 0)
    assert judge(ch, P99_10).verdict == "not significant"


def test_a_metric_without_rows_has_no_data() -> None:
    diffs = compare_samples({"ttft_ms": np.arange(10.0)}, {"ttft_ms": np.arange(10.0)})
    ch = regression.percentile_changes(diffs, ["p99_e2e_ms"])["p99_e2e_ms"]
    assert ch == Change("p99_e2e_ms", None, None, None, None, 0, 0)


# --- whole-run metrics: the bootstrap over requests --------------------------------------------

PROFILE = SloProfile(name="t", ttft_ms=500.0, tpot_ms=50.0, e2e_ms=20_000.0)


def _requests(n: int, met: int, errors: int = 0, tokens: int = 100) -> pd.DataFrame:
    """``n`` requests: ``met`` within every target, the rest ok but TTFT 900 ms (missing the
    500 ms target) except the last ``errors``, which failed."""
    status = ["ok"] * (n - errors) + ["error"] * errors
    ttft = [100.0] * met + [900.0] * (n - met)
    return pd.DataFrame(
        {
            "status": status,
            "input_tokens": [200] * n,
            "output_tokens": [tokens] * n,
            "ttft_ms": ttft,
            "tpot_ms": [20.0] * n,
            "e2e_ms": [2_000.0] * n,
        }
    )


def test_a_goodput_drop_is_flagged() -> None:
    base = RunRequests.from_requests("b", _requests(1000, 900), PROFILE, 100.0)
    cand = RunRequests.from_requests("c", _requests(1000, 700), PROFILE, 100.0)
    ch = regression.run_change("goodput", base, cand, run_noise=0.0)
    # 900 / 100 s = 9 req/s → 700 / 100 s = 7 req/s: −22.2 %
    assert (ch.baseline, ch.candidate) == (9.0, 7.0)
    assert ch.diff_pct == pytest.approx(-22.22, abs=0.01)
    # binomial sd: √(1000·.9·.1)/100 ≈ 0.095 and √(1000·.7·.3)/100 ≈ 0.145 → the difference's
    # ≈ 0.173: the 95 % interval is about −2 ± 0.34
    assert ch.low is not None and ch.high is not None
    assert ch.low == pytest.approx(-2.34, abs=0.06)
    assert ch.high == pytest.approx(-1.66, abs=0.06)
    assert judge(ch, GOODPUT_5).verdict == "regression"
    # with the run-to-run variation folded in (5 % per run): wider, still a regression
    wide = regression.run_change("goodput", base, cand)
    assert wide.run_noise == regression.RUN_NOISE and ch.run_noise == 0.0
    assert wide.low is not None and wide.high is not None
    assert wide.low < ch.low - 0.2 and wide.high > ch.high + 0.2
    assert judge(wide, GOODPUT_5).verdict == "regression"


def test_a_small_goodput_dip_is_within_threshold_and_the_bootstrap_repeats() -> None:
    base = RunRequests.from_requests("b", _requests(1000, 900), PROFILE, 100.0)
    cand = RunRequests.from_requests("c", _requests(1000, 890), PROFILE, 100.0)
    ch = regression.run_change("goodput", base, cand)
    assert ch.diff_pct == pytest.approx(-1.11, abs=0.01)
    assert judge(ch, GOODPUT_5).verdict == "within threshold"
    assert regression.run_change("goodput", base, cand) == ch


def test_throughput_and_error_rate_count_successful_requests() -> None:
    base = RunRequests.from_requests("b", _requests(1000, 1000, errors=0), PROFILE, 50.0)
    cand = RunRequests.from_requests("c", _requests(1000, 1000, errors=100), PROFILE, 50.0)
    changes = regression.run_changes(base, cand, ["output_throughput", "error_rate"], run_noise=0.0)
    tput, err = changes["output_throughput"], changes["error_rate"]
    assert (tput.baseline, tput.candidate) == (2000.0, 1800.0)  # 100 tok × ok / 50 s
    assert (err.baseline, err.candidate) == (0.0, 0.1)
    assert err.low is not None and err.low > 0.05
    assert judge(err, Threshold("error_rate", 0.01, relative=False)).verdict == "regression"
    assert judge(tput, Threshold("output_throughput", 5.0, True)).verdict == "regression"


def test_bootstrap_sums_match_the_resampling_distribution() -> None:
    values = np.array([0.0, 0.0, 0.0, 1.0, 5.0] * 200)  # mean 1.2, variance 3.76
    sums = regression.bootstrap_sums(values, 4000, np.random.default_rng(1))
    assert sums.mean() == pytest.approx(1000 * 1.2, rel=0.01)
    assert sums.var() == pytest.approx(1000 * 3.76, rel=0.1)
    assert regression.bootstrap_sums(np.array([]), 5, np.random.default_rng(0)).tolist() == [0] * 5


def test_a_run_without_a_duration_has_no_goodput() -> None:
    base = RunRequests.from_requests("b", _requests(10, 10), PROFILE, None)
    cand = RunRequests.from_requests("c", _requests(10, 10), PROFILE, 10.0)
    with pytest.raises(InputError, match="run b has no duration, so it has no goodput"):
        regression.run_change("goodput", base, cand)


def test_without_a_profile_nothing_meets_it() -> None:
    run = RunRequests.from_requests("b", _requests(10, 10), None, 10.0)
    assert not run.met.any() and run.ok.all()


def test_a_run_whose_requests_all_succeed_still_has_an_interval_of_its_pace() -> None:
    # every request met the SLO in both runs: resampling requests alone gave [−7.3 %, −7.3 %]
    base = RunRequests.from_requests("b", _requests(40, 40), PROFILE, 0.578)
    cand = RunRequests.from_requests("c", _requests(40, 40), PROFILE, 0.6235)
    alone = regression.run_change("goodput", base, cand, run_noise=0.0)
    assert alone.low == alone.high == alone.diff  # the collapse the issue found
    assert judge(alone, GOODPUT_5).verdict == "regression"
    ch = regression.run_change("goodput", base, cand)
    assert ch.diff_pct == pytest.approx(-7.3, abs=0.1)
    low, high = ch.pct(ch.low), ch.pct(ch.high)
    assert low is not None and high is not None
    # two runs of CV 5 %: the difference's 95 % band is about ±1.96·√2·5 % ≈ ±13.9 %
    assert high - low == pytest.approx(2 * 13.9, rel=0.15)
    assert low < 0 < high
    assert judge(ch, GOODPUT_5).verdict == "not significant"
    # error rate is a share of the run's requests: no pace in it
    assert regression.run_change("error_rate", base, cand).run_noise == 0.0


@pytest.mark.parametrize("cv", [-0.01, 0.51, math.nan, math.inf])
def test_the_run_noise_is_bounded(cv: float) -> None:
    base = RunRequests.from_requests("b", _requests(10, 10), PROFILE, 10.0)
    with pytest.raises(InputError, match=r"run-to-run variation must be within 0\.\.50 %"):
        regression.run_change("goodput", base, base, run_noise=cv)
