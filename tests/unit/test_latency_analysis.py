"""analysis.latency against hand-computed expectations: in flight, the prefill fit, the TTFT
split, engine state at arrival, trends with confidence intervals, memory warnings."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from analysis import latency


def _requests(sent: list[float], done: list[float], **cols: Sequence[float]) -> pd.DataFrame:
    return pd.DataFrame({"run_id": "r", "sent_at": sent, "done_at": done, "status": "ok", **cols})


def test_in_flight_counts_requests_between_send_and_done() -> None:
    df = _requests([0.0, 1.0, 2.0, 10.0], [5.0, 1.5, 3.0, 11.0])
    # t=1: #0 and #1; t=1.5: #1 is done (done_at is exclusive); t=2: #0 and #2; t=10: #3
    assert latency.in_flight_at(df, [1.0, 1.5, 2.0, 10.0]).tolist() == [2.0, 1.0, 2.0, 1.0]
    assert latency.in_flight_at(df, [1.0], stride=10).tolist() == [20.0]
    # a request that never finished stays in flight
    open_ = _requests([0.0], [math.nan])
    assert latency.in_flight_at(open_, [100.0]).tolist() == [1.0]


def test_with_in_flight_counts_each_run_separately() -> None:
    df = pd.concat(
        [_requests([0.0, 1.0], [5.0, 5.0]), _requests([0.5], [5.0]).assign(run_id="other")],
        ignore_index=True,
    )
    assert latency.with_in_flight(df)["in_flight"].tolist() == [1.0, 2.0, 1.0]


def test_prefill_fit_uses_only_lightly_loaded_requests() -> None:
    # 6 sequential requests: TTFT = 10 + 0.05 × input exactly; then 4 overlapping, queued ones
    inputs = [100, 200, 400, 800, 1600, 3200]
    light = _requests(
        [i * 10.0 for i in range(6)],
        [i * 10.0 + 1 for i in range(6)],
        input_tokens=inputs,
        ttft_ms=[10 + 0.05 * x for x in inputs],
    )
    busy = _requests(
        [100.0] * 4,  # sent together: 4 in flight each
        [110.0] * 4,
        input_tokens=[100, 100, 100, 100],
        ttft_ms=[900.0] * 4,
    )
    sample = latency.with_in_flight(pd.concat([light, busy], ignore_index=True))
    fit = latency.fit_prefill(sample)
    assert fit is not None
    assert fit.ms_per_token == pytest.approx(0.05)
    assert fit.intercept_ms == pytest.approx(10.0)
    assert fit.n == 6
    assert fit.light_max == 1.0
    assert fit.r2 == pytest.approx(1.0)
    assert fit.prefill_ms(np.array([1000.0])).tolist() == pytest.approx([60.0])


def test_prefill_fit_needs_enough_points_and_two_lengths() -> None:
    few = latency.with_in_flight(
        _requests([0.0, 10.0], [1.0, 11.0], input_tokens=[1, 2], ttft_ms=[1.0, 2.0])
    )
    assert latency.fit_prefill(few) is None
    same = latency.with_in_flight(
        _requests(
            [i * 10.0 for i in range(6)],
            [i * 10.0 + 1 for i in range(6)],
            input_tokens=[5] * 6,
            ttft_ms=[1.0] * 6,
        )
    )
    assert latency.fit_prefill(same) is None


def test_queueing_split_sums_to_ttft_per_bucket() -> None:
    fit = latency.PrefillFit(ms_per_token=0.1, intercept_ms=5.0, n=10, r2=1.0, light_max=1)
    sample = pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "error"],
            "input_tokens": [100, 100, 2000, 100],
            "ttft_ms": [15.0, 115.0, 150.0, 1.0],  # prefill 15, 15, 205 → capped at 150
        }
    )
    split = latency.split_ttft(sample, fit)
    assert split["prefill_ms"].tolist() == [15.0, 15.0, 150.0]
    assert split["queue_ms"].tolist() == [0.0, 100.0, 0.0]
    by = latency.ttft_split_by_bucket(sample, fit, (256, 1024))
    assert by["bucket"].tolist() == ["<256", "≥1k"]
    assert by["n"].tolist() == [2, 1]
    assert by["queue_mean_ms"].tolist() == [50.0, 0.0]
    assert by["queue_share"].tolist() == [pytest.approx(50.0 / 65.0), 0.0]


def test_engine_state_at_arrival() -> None:
    series = pd.DataFrame(
        {
            "target": ["a"] * 6 + ["b"] * 2,
            "ts": [0.0, 10.0, 0.0, 10.0, 0.0, 10.0, 0.0, 10.0],
            "metric": ["requests_waiting"] * 2
            + ["kv_cache_usage"] * 2
            + ["preemptions_total"] * 2
            + ["requests_waiting"] * 2,
            "value": [1.0, 5.0, 0.2, 0.9, 0.0, 3.0, 2.0, 2.0],
        }
    )
    reqs = pd.DataFrame({"sent_at": [-1.0, 5.0, 12.0]})
    out = latency.engine_state_at(reqs, series, window_s=3.0)
    assert out["waiting"].tolist()[1:] == [3.0, 7.0]  # a + b, last sample at or before
    assert math.isnan(out["waiting"].iloc[0])  # before any sample
    assert out["kv_usage"].tolist()[1:] == [0.2, 0.9]
    assert math.isnan(out["running"].iloc[1])  # not exposed
    # preemptions: 0 → 3 between t=0 and t=10; only windows reaching t=10 see them
    assert out["preemptions"].tolist() == [0.0, 0.0, 3.0]


def test_counter_increase_handles_restarts() -> None:
    series = pd.DataFrame(
        {
            "target": "a",
            "metric": "preemptions_total",
            "ts": [0.0, 1.0, 2.0, 3.0],
            "value": [5.0, 7.0, 1.0, 4.0],  # restart between 1 and 2
        }
    )
    assert latency.counter_increase_between(series, "preemptions_total", 0.0, 3.0) == 2 + 1 + 3


def test_trend_slope_and_confidence_interval_by_hand() -> None:
    # y = 2 + 3x + e, e = (+1, -1, -1, +1) → OLS slope 3, residual SS 4 - 0 ... by hand:
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = 2 + 3 * x + np.array([1.0, -1.0, -1.0, 1.0])
    t = latency.trend(x, y)
    assert t is not None
    # Sxx = 5; Sxy adds (−1.5·1 + −0.5·−1 + 0.5·−1 + 1.5·1) = 0 to 15 → slope 3, intercept 2
    assert t.slope == pytest.approx(3.0)
    assert t.intercept == pytest.approx(2.0)
    # residuals (1, -1, -1, 1): s² = 4 / 2 = 2; se = sqrt(2 / 5); t(2) = 4.303
    half = 4.303 * math.sqrt(2 / 5)
    assert t.ci_low == pytest.approx(3 - half)
    assert t.ci_high == pytest.approx(3 + half)
    assert t.rising and t.significant
    assert t.change == pytest.approx(9.0)
    assert latency.trend([0.0, 1.0], [1.0, 2.0]) is None
    assert latency.trend([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None


def test_trend_ci_spans_zero_for_noise() -> None:
    t = latency.trend([0.0, 1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 0.0, 1.0, -1.0])
    assert t is not None
    assert t.ci_low < 0 < t.ci_high
    assert not t.significant


def test_t95_table_and_tail() -> None:
    assert latency.t95(1) == 12.706
    assert latency.t95(30) == 2.042
    assert latency.t95(60) == pytest.approx(2.001, abs=0.002)  # exact 2.000
    assert latency.t95(10_000) == pytest.approx(1.96, abs=0.001)


def _engine(kv: list[float], preempt: list[float], step_s: float = 60.0) -> pd.DataFrame:
    ts = [float(i) * step_s for i in range(len(kv))]
    return pd.concat(
        [
            pd.DataFrame({"target": "a", "ts": ts, "metric": "kv_cache_usage", "value": kv}),
            pd.DataFrame(
                {"target": "a", "ts": ts, "metric": "preemptions_total", "value": preempt}
            ),
        ],
        ignore_index=True,
    )


def _gpu(used_gib: list[float], step_s: float = 60.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": [float(i) * step_s for i in range(len(used_gib))],
            "mem_used_bytes": [u * 2**30 for u in used_gib],
            "mem_total_bytes": 80.0 * 2**30,
        }
    )


def test_leak_warning_when_gpu_memory_rises_and_kv_is_flat() -> None:
    used, kv = [40.0, 41.0, 42.0, 43.0, 44.0], [0.5, 0.51, 0.49, 0.5, 0.5]
    warnings = latency.memory_warnings(_gpu(used, step_s=180), _engine(kv, [0] * 5, step_s=180))
    assert [w.kind for w in warnings] == ["leak"]
    assert "MiB/h" in warnings[0].evidence["GPU memory slope"]
    # 4 GiB over 12 minutes = 20 GiB/h = 20,480 MiB/h
    assert warnings[0].evidence["GPU memory slope"].startswith("20,480.0 MiB/h")
    # the same rise within 4 minutes is warm-up as far as anyone can tell: no per-hour leak
    assert latency.memory_warnings(_gpu(used, step_s=60), _engine(kv, [0] * 5, step_s=60)) == []


def test_no_leak_warning_when_kv_grows_with_memory_or_memory_is_flat() -> None:
    assert (
        latency.memory_warnings(
            _gpu([40, 41, 42, 43, 44]), _engine([0.1, 0.3, 0.5, 0.7, 0.9], [0] * 5)
        )
        == []
    )
    assert latency.memory_warnings(_gpu([40, 40, 40, 40, 40]), _engine([0.5] * 5, [0] * 5)) == []


def test_fragmentation_warning_for_preemptions_below_full_kv() -> None:
    warnings = latency.memory_warnings(
        _gpu([]).iloc[0:0], _engine([0.5, 0.6, 0.95, 0.6], [0, 2, 5, 5])
    )
    assert [w.kind for w in warnings] == ["fragmentation"]
    # +2 at t=60 (KV 60 %) counts; +3 at t=120 (KV 95 %, full) does not
    assert warnings[0].evidence["preemptions with KV below 90%"] == "2 of 5"
    assert latency.memory_warnings(_gpu([]).iloc[0:0], _engine([0.95, 0.96, 0.97], [0, 2, 5])) == []
