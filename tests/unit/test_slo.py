"""analysis.slo against hand-computed expectations."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import slo
from errors import ConfigError

PROFILE = slo.SloProfile(
    name="t", percentile=99, ttft_ms=100.0, tpot_ms=10.0, e2e_ms=1000.0, max_error_rate=0.1
)


def _requests() -> pd.DataFrame:
    # 6 requests over a 2 s run:
    # 0 ok, all within        → meets
    # 1 ok, TTFT 150 > 100    → misses TTFT
    # 2 ok, TPOT 12 > 10      → misses TPOT
    # 3 ok, E2E 1500 > 1000   → misses E2E
    # 4 ok, TPOT undefined (1 token), rest within → meets
    # 5 error                 → misses everything
    return pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "ok", "ok", "error"],
            "input_tokens": [100, 2000, 100, 100, 100, 100],
            "ttft_ms": [50.0, 150.0, 50.0, 50.0, 80.0, None],
            "tpot_ms": [5.0, 5.0, 12.0, 5.0, None, None],
            "e2e_ms": [500.0, 500.0, 500.0, 1500.0, 80.0, None],
        }
    )


def test_request_meets_each_target() -> None:
    meets = slo.request_meets(_requests(), PROFILE)
    assert meets["ttft_met"].tolist() == [True, False, True, True, True, False]
    assert meets["tpot_met"].tolist() == [True, True, False, True, True, False]
    assert meets["e2e_met"].tolist() == [True, True, True, False, True, False]
    assert meets["met"].tolist() == [True, False, False, False, True, False]


def test_goodput_and_attainment() -> None:
    att = slo.attainment(_requests(), PROFILE, duration_s=2.0)
    assert (att.requests, att.ok, att.met) == (6, 5, 2)
    assert att.goodput == pytest.approx(1.0)  # 2 requests meeting all / 2 s
    assert att.attainment == pytest.approx(2 / 6)
    assert slo.goodput(_requests(), PROFILE, None) is None


def test_length_conditioned_ttft() -> None:
    # limit = 40 + 50 ms per 1,000 input tokens: 100 tokens → 45 ms; 2,000 tokens → 140 ms
    prof = slo.SloProfile(name="len", ttft_base_ms=40.0, ttft_ms_per_1k_input=50.0)
    assert prof.ttft_limit_ms(2000) == pytest.approx(140.0)
    meets = slo.request_meets(_requests(), prof)
    assert meets["ttft_met"].tolist() == [False, False, False, False, False, False]
    prof2 = slo.SloProfile(name="len", ttft_base_ms=50.0, ttft_ms_per_1k_input=50.0)
    # 100 tokens → 55 ms: 50 ok, 80 not; 2,000 tokens → 150 ms: 150 ok
    assert slo.request_meets(_requests(), prof2)["ttft_met"].tolist() == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    th = prof2.sql_thresholds()
    assert th["ttft_base"] == 50.0 and th["ttft_per_1k"] == 50.0
    assert math.isinf(th["tpot"]) and math.isinf(th["e2e"])


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("percentile", 97, "'percentile' is 97; accepted: 90, 95, 99"),
        ("ttft_ms", -1.0, "'ttft_ms' is -1; accepted: a number of milliseconds above 0"),
        ("max_error_rate", 1.5, "'max_error_rate' is 1.5; accepted: 0 to 1"),
        ("max_memory_fraction", 0.0, "'max_memory_fraction' is 0; accepted: above 0 up to 1"),
        ("ttft_ms_per_1k_input", 5.0, "'ttft_base_ms' is empty"),
    ],
)
def test_validation_names_field_and_range(field: str, value: float, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        slo.SloProfile.from_entry({"name": "x", field: value})
    assert expected in err.value.message


def test_from_entry_roundtrip_of_a_seed_profile() -> None:
    entry = {
        "name": "interactive-chat",
        "percentile": 99,
        "ttft_ms": 500.0,
        "tpot_ms": 50.0,
        "e2e_ms": 20000.0,
        "max_error_rate": 0.01,
        "source": "ignored",
    }
    prof = slo.SloProfile.from_entry(entry)
    assert prof.ttft_ms == 500.0 and prof.quantile == pytest.approx(0.99)
    assert slo.SloProfile.from_entry(prof.to_entry()) == prof


def test_evaluate_pass_fail_per_target() -> None:
    row = {
        "requests": 200,
        "errors": 30,  # 15% > 10%
        "ttft_n": 170,
        "ttft_p99_ms": 99.0,
        "tpot_n": 170,
        "tpot_p99_ms": 10.5,
        "e2e_n": 50,
        "e2e_p99_ms": 900.0,
    }
    results = {r.target: r for r in slo.evaluate(row, PROFILE)}
    assert results["ttft_ms"].passed is True
    assert results["tpot_ms"].passed is False
    assert results["tpot_ms"].ratio == pytest.approx(1.05)
    assert results["e2e_ms"].passed is True and results["e2e_ms"].low_confidence
    assert results["error_rate"].measured == pytest.approx(0.15)
    assert results["error_rate"].passed is False
    assert slo.overall(list(results.values())) is False
    assert slo.worst_ratio(list(results.values())) == pytest.approx(1.5)


def test_evaluate_without_data_is_no_verdict() -> None:
    results = slo.evaluate({"requests": 0}, PROFILE)
    assert all(r.passed is None for r in results)
    assert slo.overall(results) is None


def test_evaluate_length_conditioned_uses_share_within_target() -> None:
    prof = slo.SloProfile(name="len", percentile=90, ttft_base_ms=50.0, ttft_ms_per_1k_input=1.0)
    # 95 of 100 successful requests within their own limit: 95% ≥ 90% → pass
    ttft = slo.evaluate({"requests": 100, "errors": 0, "ok": 100, "ttft_met": 95}, prof)[0]
    assert ttft.passed is True
    assert ttft.measured == pytest.approx(95.0)
    assert ttft.ratio == pytest.approx(0.5)  # 5% missing of 10% allowed
    fail = slo.evaluate({"requests": 100, "errors": 0, "ok": 100, "ttft_met": 80}, prof)[0]
    assert fail.passed is False and fail.ratio == pytest.approx(2.0)


def _points(loads: list[float], ratios: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"load": loads, "passed": [r <= 1 for r in ratios], "ratio": ratios})


def test_capacity_interpolates_between_last_pass_and_first_fail() -> None:
    # ratio 0.6 at 8, 1.4 at 16: crosses 1 halfway → 12
    cap = slo.capacity("s", _points([1, 8, 16, 32], [0.2, 0.6, 1.4, 3.0]))
    assert cap.measured == 8
    assert cap.first_failing == 16
    assert cap.interpolated == pytest.approx(12.0)
    assert cap.is_interpolated
    # 0.9 at 8, 1.3 at 32: 8 + 0.1/0.4 × 24 = 14
    cap = slo.capacity("s", _points([32, 1, 8], [1.3, 0.5, 0.9]))
    assert cap.interpolated == pytest.approx(14.0)


def test_capacity_edge_cases() -> None:
    all_pass = slo.capacity("s", _points([1, 8], [0.1, 0.5]))
    assert (all_pass.measured, all_pass.interpolated) == (8, None)
    assert "at least" in all_pass.note
    all_fail = slo.capacity("s", _points([1, 8], [1.5, 2.0]))
    assert all_fail.measured is None and all_fail.first_failing == 1
    noisy = slo.capacity("s", _points([1, 8, 32], [0.5, 1.5, 0.9]))
    assert noisy.measured == 1 and "passes again at 32" in noisy.note
    zero_tol = slo.capacity("s", _points([1, 8], [0.5, math.inf]))
    assert zero_tol.measured == 1 and zero_tol.interpolated is None
    empty = slo.capacity("s", pd.DataFrame({"load": [], "passed": [], "ratio": []}))
    assert empty.measured is None


def test_memory_cap_judged_on_gpu_samples_only() -> None:
    prof = slo.SloProfile(name="mem", percentile=99, max_memory_fraction=0.8)
    over = {r.target: r for r in slo.evaluate({"mem_peak_fraction": 0.875, "gpu_samples": 9}, prof)}
    assert over["memory_fraction"].passed is False
    assert over["memory_fraction"].ratio == pytest.approx(0.875 / 0.8)
    under = slo.evaluate({"mem_peak_fraction": 0.55, "gpu_samples": 9, "requests": 5}, prof)
    assert slo.overall(under) is True
    # without GPU samples there is nothing to judge: no verdict, and no failure either
    none = {r.target: r for r in slo.evaluate({"mem_peak_fraction": 0.99, "requests": 5}, prof)}
    assert none["memory_fraction"].passed is None
    assert slo.overall(list(none.values())) is True
    # without a cap there is no memory target at all
    assert "memory_fraction" not in {r.target for r in slo.evaluate({}, PROFILE)}


def _target(passed: bool | None, n: int, target: str = "ttft_ms") -> slo.TargetResult:
    return slo.TargetResult(
        target, "TTFT P99", 1.0, 1.0, passed, n, slo.low_confidence(99, n) if n else False, 1.0
    )


@pytest.mark.parametrize(
    ("targets", "verdict"),
    [
        ([_target(True, 100)], True),  # P99 from 100 samples: judged
        ([_target(False, 100)], False),
        ([_target(True, 20)], None),  # from 20: its maximum, inconclusive either way
        ([_target(False, 20)], None),
        ([_target(True, 20), _target(False, 400, "error_rate")], False),  # a judged fail
        ([_target(None, 0)], None),
    ],
)
def test_a_level_judged_from_too_few_requests_is_inconclusive(
    targets: list[slo.TargetResult], verdict: bool | None
) -> None:
    """Issue 24 case 12: P99 from ~20 requests decided a sweep's pass/fail."""
    assert slo.judged(targets) is verdict
    if verdict is None and targets[0].n:
        assert slo.inconclusive_reason(targets, 99) == "TTFT P99 from 20 samples (needs 100)"
