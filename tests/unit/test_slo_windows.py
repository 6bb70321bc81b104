"""Windows of production traffic judged against an SLO profile (analysis.slo_windows)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import histogram_windows as hw
from analysis.slo import SloProfile
from analysis.slo_windows import quantile_column, window_breaches

INF = math.inf


def _rows(hist: str, scrapes: list[tuple[float, dict[float, float]]]) -> pd.DataFrame:
    rows = []
    for ts, buckets in scrapes:
        for le, c in buckets.items():
            rows.append(("a", ts, f"{hist}_bucket:{'+Inf' if math.isinf(le) else repr(le)}", c))
        rows.append(("a", ts, f"{hist}_count", buckets[INF]))
        rows.append(("a", ts, f"{hist}_sum", buckets[INF] * 0.5))
    return pd.DataFrame(rows, columns=["target", "ts", "metric", "value"])


def _ttft_windows() -> pd.DataFrame:
    """Three 10 s windows: fast (all ≤ 0.5 s), slow (P99 in (1, 5]), idle (nothing finished)."""
    z = {0.5: 0.0, 1.0: 0.0, 5.0: 0.0, INF: 0.0}
    rows = _rows(
        "ttft_seconds",
        [
            (0.0, z),
            (10.0, {0.5: 100.0, 1.0: 100.0, 5.0: 100.0, INF: 100.0}),
            (20.0, {0.5: 150.0, 1.0: 160.0, 5.0: 200.0, INF: 200.0}),
            (30.0, {0.5: 150.0, 1.0: 160.0, 5.0: 200.0, INF: 200.0}),
        ],
    )
    return hw.summed_histogram_windows(rows, "ttft_seconds", window_s=10.0, start=0.0, end=30.0)


def test_a_window_breaches_when_its_percentile_exceeds_the_limit() -> None:
    profile = SloProfile("tight", percentile=99.0, ttft_ms=1000.0)
    out = window_breaches({"ttft_seconds": _ttft_windows()}, profile)
    assert list(out["breach"]) == [False, True, False]
    slow = out.iloc[1]
    # rank 99 of 100 in (1, 5] holding 40 from 60 → 1 + 4 × 39/40 = 4.9 s
    assert slow["ttft_ms_value_ms"] == pytest.approx(4900.0)
    assert slow["ttft_ms_limit_ms"] == 1000.0
    assert slow["reason"] == "P99 TTFT 4.9 s > 1 s (P99 inside the 1–5 s bucket)"
    # the idle window finished nothing: never a breach
    assert out.iloc[2]["reason"] == "" and not out.iloc[2]["ttft_ms_breach"]


def test_the_profile_percentile_picks_the_column_and_must_have_been_computed() -> None:
    assert quantile_column(SloProfile("p", percentile=95.0, ttft_ms=5.0)) == "p95"
    assert quantile_column(SloProfile("p", percentile=90.0, ttft_ms=5.0)) == "p90"
    with pytest.raises(ValueError, match="p95"):
        window_breaches({"ttft_seconds": _ttft_windows()}, SloProfile("p", 95.0, ttft_ms=5.0))
    p90 = window_breaches({"ttft_seconds": _ttft_windows()}, SloProfile("p", 90.0, ttft_ms=990))
    # P90 of the fast window: 0.45 s; of the slow one (rank 90 in (1, 5] holding 40 from 60):
    # 1 + 4 × 30/40 = 4 s
    assert list(p90["breach"]) == [False, True, False]
    assert p90.iloc[1]["ttft_ms_value_ms"] == pytest.approx(4000.0)


def test_error_rate_and_a_length_conditioned_ttft() -> None:
    profile = SloProfile(
        "len", percentile=99.0, ttft_base_ms=200.0, ttft_ms_per_1k_input=4000.0, max_error_rate=0.05
    )
    prompt = _rows(
        "prompt_length_tokens",
        [
            (0.0, {1000.0: 0.0, INF: 0.0}),
            (10.0, {1000.0: 100.0, INF: 100.0}),
            (20.0, {1000.0: 200.0, INF: 200.0}),
            (30.0, {1000.0: 200.0, INF: 200.0}),
        ],
    )  # mean 0.5 token per request in this synthetic sum → limit ≈ 200 ms
    pw = hw.summed_histogram_windows(
        prompt, "prompt_length_tokens", window_s=10.0, start=0.0, end=30.0
    )
    requests = pd.DataFrame(
        {
            "window_start": [0.0, 10.0, 20.0],
            "window_end": [10.0, 20.0, 30.0],
            "finished": [100.0, 100.0, 0.0],
            "failed": [10.0, 0.0, 0.0],
            "error_rate": [0.1, 0.0, math.nan],
        }
    )
    out = window_breaches(
        {"ttft_seconds": _ttft_windows(), "prompt_length_tokens": pw}, profile, requests
    )
    assert out.iloc[0]["ttft_ms_limit_ms"] == pytest.approx(200.0 + 4000.0 * 0.5 / 1000)
    assert "error rate 10.0% > 5.0% (10 failed)" in out.iloc[0]["reason"]
    assert "limit at the window's mean prompt length" in out.iloc[1]["reason"]
    assert list(out["breach"]) == [True, True, False]
    assert list(out["error_breach"]) == [True, False, False]


def test_no_windows_no_rows() -> None:
    out = window_breaches({"ttft_seconds": _ttft_windows().iloc[0:0]}, SloProfile("p", ttft_ms=1))
    assert out.empty and "breach" in out.columns


def _garbage_windows(buckets_at_20: dict[float, float], count_at_20: float) -> pd.DataFrame:
    """Two 10 s windows: a good one, then one whose scrape at 20 carries ``buckets_at_20``
    (``_count`` ``count_at_20``)."""
    good = {0.5: 100.0, 1.0: 100.0, 5.0: 100.0, INF: 100.0}
    rows = _rows("ttft_seconds", [(0.0, dict.fromkeys(good, 0.0)), (10.0, good)])
    extra = [
        ("a", 20.0, f"ttft_seconds_bucket:{'+Inf' if math.isinf(le) else repr(le)}", c)
        for le, c in buckets_at_20.items()
    ] + [("a", 20.0, "ttft_seconds_count", count_at_20), ("a", 20.0, "ttft_seconds_sum", 1.0)]
    rows = pd.concat([rows, pd.DataFrame(extra, columns=rows.columns)], ignore_index=True)
    return hw.summed_histogram_windows(rows, "ttft_seconds", window_s=10.0, start=0.0, end=20.0)


@pytest.mark.parametrize(
    ("buckets", "note"),
    [
        # negative cumulative counts: garbage, left out of the sum
        ({0.5: -5.0, 1.0: -5.0, 5.0: -5.0, INF: -5.0}, hw.NOTE_INVALID),
        # an infinite count
        ({0.5: 100.0, 1.0: 100.0, 5.0: 100.0, INF: INF}, hw.NOTE_INVALID),
        # NaN buckets are dropped when scraped: _count moved, the buckets carried forward did not
        ({}, hw.NOTE_UNUSABLE_BUCKETS),
        # the +Inf bucket did not move while the others did: no percentile can be read
        ({0.5: 150.0, 1.0: 150.0, 5.0: 150.0}, hw.NOTE_UNUSABLE_BUCKETS),
    ],
)
def test_a_window_of_garbage_buckets_cannot_be_judged_and_is_not_passed(
    buckets: dict[float, float], note: str
) -> None:
    windows = _garbage_windows(buckets, 150.0)
    assert windows["note"].iloc[1].startswith(note)
    assert hw.unreadable(windows["note"].iloc[1]) and not hw.unreadable(windows["note"].iloc[0])
    out = window_breaches({"ttft_seconds": windows}, SloProfile("p", 99.0, ttft_ms=1000.0))
    assert list(out["breach"]) == [False, False]
    assert list(out["judged"]) == [True, False]
    assert out["unjudged"].iloc[0] == ""
    assert out["unjudged"].iloc[1].startswith(f"P99 TTFT: {note}")


def test_a_sum_that_moved_with_nothing_counted_cannot_be_judged() -> None:
    # NaN _count and buckets are dropped when scraped: only _sum moves
    rows = pd.DataFrame(
        [("a", 0.0, "ttft_seconds_sum", 0.0), ("a", 10.0, "ttft_seconds_sum", 5.0)],
        columns=["target", "ts", "metric", "value"],
    )
    windows = hw.summed_histogram_windows(rows, "ttft_seconds", window_s=10.0, start=0.0, end=10.0)
    assert windows["note"].iloc[0].startswith(hw.NOTE_UNUSABLE_BUCKETS)
    out = window_breaches({"ttft_seconds": windows}, SloProfile("p", 99.0, ttft_ms=1000.0))
    assert list(out["judged"]) == [False] and list(out["breach"]) == [False]


def test_a_percentile_in_the_inf_bucket_below_the_limit_cannot_be_judged() -> None:
    windows = _garbage_windows({0.5: 100.0, 1.0: 100.0, 5.0: 100.0, INF: 200.0}, 200.0)
    out = window_breaches({"ttft_seconds": windows}, SloProfile("p", 99.0, ttft_ms=10_000.0))
    assert list(out["judged"]) == [True, False]
    assert "cannot tell against 10 s" in out["unjudged"].iloc[1]
    # above the limit already: a breach, judged
    out = window_breaches({"ttft_seconds": windows}, SloProfile("p", 99.0, ttft_ms=1000.0))
    assert list(out["breach"]) == [False, True] and list(out["judged"]) == [True, True]
