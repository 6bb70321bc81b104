"""Counter rates with resets, histogram percentiles per window, staleness (hand-computed)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import engine_series


def test_counter_increase_handles_resets() -> None:
    # 10 → 15 (+5), restart → 3 (+3), 3 → 7 (+4)
    assert engine_series.counter_increase([10, 15, 3, 7]) == 12.0
    assert engine_series.counter_increase([5]) == 0.0
    assert engine_series.counter_increase([1, float("nan"), 4]) == 3.0


def test_counter_rate_per_pair() -> None:
    df = pd.DataFrame({"ts": [0.0, 1.0, 3.0, 4.0], "value": [100.0, 110.0, 5.0, 25.0]})
    r = engine_series.counter_rate(df)
    assert r["ts"].tolist() == [1.0, 3.0, 4.0]
    assert r["rate"].tolist() == [10.0, 2.5, 20.0]  # reset: 5 tokens over 2 s


def test_rate_over_uses_the_sample_before_the_window_as_baseline() -> None:
    df = pd.DataFrame({"ts": [0.0, 10.0, 20.0, 30.0], "value": [0.0, 100.0, 300.0, 600.0]})
    assert engine_series.rate_over(df, since=15.0) == pytest.approx((600 - 100) / 20)
    assert engine_series.rate_over(df.head(1), since=0.0) is None


def test_histogram_quantile_matches_prometheus() -> None:
    buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (math.inf, 40.0)]
    # rank 20 → bucket (0.1, 0.5]: 0.1 + 0.4 × (20 − 10) / 20 = 0.3
    assert engine_series.histogram_quantile(0.5, buckets) == pytest.approx(0.3)
    # rank 36 → (0.5, 1.0]: 0.5 + 0.5 × 6 / 10 = 0.8
    assert engine_series.histogram_quantile(0.9, buckets) == pytest.approx(0.8)
    # rank 5 in the first bucket: 0 + 0.1 × 5 / 10
    assert engine_series.histogram_quantile(0.125, buckets) == pytest.approx(0.05)
    # a rank in +Inf answers the largest finite bound
    assert engine_series.histogram_quantile(0.99, [(0.1, 1.0), (math.inf, 10.0)]) == 0.1
    assert engine_series.histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    with pytest.raises(ValueError):
        engine_series.histogram_quantile(1.5, buckets)


def test_staleness_is_three_intervals() -> None:
    assert not engine_series.is_stale(97.5, now=100.0, interval_s=1.0)
    assert engine_series.is_stale(96.9, now=100.0, interval_s=1.0)
    assert engine_series.is_stale(None, now=100.0, interval_s=1.0)
    assert engine_series.estimate_interval([0.0, 0.25, 0.5, 0.75]) == 0.25
    assert engine_series.estimate_interval([3.0]) == 1.0


def test_target_summary() -> None:
    rows = []
    for i in range(11):
        ts = 1000.0 + i
        rows += [
            ("a", "vllm", ts, "requests_running", float(i)),
            ("a", "vllm", ts, "kv_cache_usage", 0.5),
            ("a", "vllm", ts, "generation_tokens_total", 100.0 * i),
            ("a", "vllm", ts, "preemptions_total", float(i // 5)),
        ]
    rows.append(("b", "sglang", 900.0, "requests_waiting", 3.0))
    df = pd.DataFrame(rows, columns=["target", "engine", "ts", "metric", "value"])
    s = engine_series.target_summary(df, now=1011.0).set_index("target")
    assert s.loc["a", "requests_running"] == 10.0
    assert s.loc["a", "generation_tps"] == pytest.approx(100.0)
    assert s.loc["a", "preemptions_per_s"] == pytest.approx(0.2)
    assert not s.loc["a", "stale"]
    assert s.loc["b", "stale"]
    assert s.loc["b", "requests_waiting"] == 3.0
    assert math.isnan(s.loc["b", "generation_tps"])
    assert engine_series.target_summary(df.iloc[0:0], now=0.0).empty
