"""analysis.diagnose: each rule fires on a constructed case (with its evidence numbers) and
stays silent on a healthy one; no finding without its inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import diagnose, latency
from analysis.latency import trend


def _engine(
    kv: list[float], waiting: list[float], preempt: list[float] | None = None
) -> pd.DataFrame:
    ts = [float(i) for i in range(len(kv))]
    parts = [
        pd.DataFrame({"target": "t", "ts": ts, "metric": "kv_cache_usage", "value": kv}),
        pd.DataFrame({"target": "t", "ts": ts, "metric": "requests_waiting", "value": waiting}),
    ]
    if preempt is not None:
        parts.append(
            pd.DataFrame({"target": "t", "ts": ts, "metric": "preemptions_total", "value": preempt})
        )
    return pd.concat(parts, ignore_index=True)


# --- rule 1 ---------------------------------------------------------------------------------


def test_kv_saturation_fires_with_full_kv_and_growing_queue() -> None:
    inp = diagnose.DiagnosisInput(
        engine=_engine([0.5, 0.95, 0.97, 0.99], [0, 1, 4, 8], [0, 0, 1, 3])
    )
    (f,) = diagnose.diagnose(inp)
    assert f.rule == 1 and f.chart == "kv_queue"
    assert f.evidence["peak KV usage"] == "99%"
    assert f.evidence["samples with KV ≥ 90%"] == "75% of 4"
    assert f.evidence["waiting requests (peak)"] == "8"
    assert f.evidence["waiting, first half → second half (mean)"] == "0.5 → 6.0"
    assert f.evidence["preemptions"] == "3"
    assert any("kv_memory_fraction" in a for a in f.actions)


def test_kv_saturation_silent_when_healthy_or_without_a_queue() -> None:
    assert (
        diagnose.kv_saturation(
            diagnose.DiagnosisInput(engine=_engine([0.3, 0.4, 0.5, 0.4], [0, 2, 3, 4]))
        )
        is None
    )
    # full KV but nothing waits: the engine is just well used
    assert (
        diagnose.kv_saturation(diagnose.DiagnosisInput(engine=_engine([0.95] * 4, [0] * 4))) is None
    )
    # full KV, a steady (not growing) queue and no preemptions
    assert (
        diagnose.kv_saturation(diagnose.DiagnosisInput(engine=_engine([0.95] * 4, [3, 3, 3, 3])))
        is None
    )
    assert diagnose.kv_saturation(diagnose.DiagnosisInput()) is None


# --- rule 2 ---------------------------------------------------------------------------------


def _buckets(short_p50: float, short_p99: float, long_median: float = 8000.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "bucket": ["<256", "4k–16k"],
            "n": [800, 200],
            "median_input": [150.0, long_median],
            "p50_ms": [short_p50, 400.0],
            "p99_ms": [short_p99, 900.0],
        }
    )


def test_length_mixing_fires_on_a_heavy_tail_of_short_requests() -> None:
    inp = diagnose.DiagnosisInput(
        ttft_p50_ms=50.0, ttft_mean_ms=80.0, ttft_p99_ms=1200.0, buckets=_buckets(40.0, 1100.0)
    )
    (f,) = diagnose.diagnose(inp)
    assert f.rule == 2 and f.chart == "buckets"
    assert "24.0× its median" in f.summary
    assert f.evidence["TTFT mean / P50 / P99"] == "80 ms / 50 ms / 1,200 ms"
    assert f.evidence["shortest bucket <256 P50 → P99"] == "40 → 1,100 ms (n=800)"
    assert f.evidence["requests above the shortest bucket"] == "20%"
    assert any("chunked prefill" in a for a in f.actions)


def test_length_mixing_silent_when_tail_is_tight_or_lengths_similar() -> None:
    tight = diagnose.DiagnosisInput(
        ttft_p50_ms=50.0, ttft_mean_ms=55.0, ttft_p99_ms=120.0, buckets=_buckets(40.0, 100.0)
    )
    assert diagnose.tail_from_length_mixing(tight) is None
    similar = diagnose.DiagnosisInput(
        ttft_p50_ms=50.0, ttft_p99_ms=1200.0, buckets=_buckets(40.0, 1100.0, long_median=300.0)
    )
    assert diagnose.tail_from_length_mixing(similar) is None
    # the tail lives only in the long bucket: prefill cost, not blocking
    own_tail = diagnose.DiagnosisInput(
        ttft_p50_ms=50.0, ttft_p99_ms=1200.0, buckets=_buckets(40.0, 60.0)
    )
    assert diagnose.tail_from_length_mixing(own_tail) is None


# --- rule 3 ---------------------------------------------------------------------------------


def _load(util: float, kv: float = math.nan, client: bool = False) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "load": [1.0, 8.0, 32.0],
            "throughput": [100.0, 700.0, 720.0],
            "client_bound": [False, False, client],
            "gpu_util": [0.2, 0.6, util],
            "kv_max": [0.1, 0.5, kv],
        }
    )


@pytest.mark.parametrize(
    ("util", "kv", "client", "kind"),
    [
        (0.97, math.nan, False, "GPU-bound"),
        (0.70, 0.95, False, "GPU-bound"),
        (0.30, math.nan, False, "CPU-bound"),
        (0.97, math.nan, True, "client-bound"),
        (math.nan, math.nan, False, "unknown resource"),
    ],
)
def test_plateau_fires_and_names_the_bound(util: float, kv: float, client: bool, kind: str) -> None:
    (f,) = diagnose.diagnose(diagnose.DiagnosisInput(load=_load(util, kv, client)))
    assert f.rule == 3 and f.chart == "load"
    assert kind in f.title
    assert f.evidence["load step"] == "8 → 32"
    assert f.evidence["throughput"] == "700 → 720 tok/s"
    assert "+3%" in f.summary  # 720 / 700 − 1


def test_plateau_with_an_unfilled_batch_is_batch_limited() -> None:
    load = _load(0.97).assign(concurrency=[1.0, 8.0, 32.0], running_max=[1.0, 8.0, 8.0])
    (f,) = diagnose.diagnose(diagnose.DiagnosisInput(load=load))
    assert "batch-limited" in f.title
    assert "at most 8 requests ran at once while 32 were offered" in f.summary
    assert f.evidence["most requests running at the plateau"] == "8"
    assert any("max_batch_size" in a for a in f.actions)
    # a full batch (32 of 32) is not batch-limited: the GPU is the bound
    full = _load(0.97).assign(concurrency=[1.0, 8.0, 32.0], running_max=[1.0, 8.0, 32.0])
    (g,) = diagnose.diagnose(diagnose.DiagnosisInput(load=full))
    assert "GPU-bound" in g.title


def test_plateau_silent_while_throughput_scales() -> None:
    scaling = pd.DataFrame(
        {
            "load": [1.0, 8.0, 32.0],
            "throughput": [100.0, 700.0, 2000.0],
            "client_bound": False,
            "gpu_util": 0.9,
            "kv_max": 0.5,
        }
    )
    assert diagnose.throughput_plateau(diagnose.DiagnosisInput(load=scaling)) is None
    assert diagnose.throughput_plateau(diagnose.DiagnosisInput(load=scaling.head(1))) is None


# --- rule 4 ---------------------------------------------------------------------------------


def test_degradation_fires_on_rising_latency_and_memory() -> None:
    ts = np.arange(0, 3600, 60.0)
    rng = np.random.default_rng(1)
    lat = trend(ts, 100 + ts / 36 + rng.normal(0, 2, ts.size))  # 100 → ~200 ms over an hour
    mem = trend(ts, 40 * 2**30 + ts * 2**20)  # +1 MiB/s
    (f,) = diagnose.diagnose(
        diagnose.DiagnosisInput(latency_trend=lat, memory_trend=mem, memory_total_bytes=80 * 2**30)
    )
    assert f.rule == 4 and f.chart == "trend"
    assert lat is not None and lat.ci_low * 3600 < 100 < lat.ci_high * 3600  # true: 100 ms/h
    s, lo, hi = lat.per_hour()
    assert f.evidence["TTFT P50 slope"] == f"{s:+,.1f} ms/h (95 % CI {lo:+,.1f} … {hi:+,.1f}, n=60)"
    assert f.evidence["GPU memory slope"].startswith("+3,600 MiB/h")
    assert "GPU memory over the run" in f.evidence


def test_degradation_silent_on_flat_short_or_noisy_series() -> None:
    ts = np.arange(0, 3600, 60.0)
    flat = trend(ts, np.full(ts.size, 100.0) + np.sin(ts))
    assert diagnose.degradation(diagnose.DiagnosisInput(latency_trend=flat)) is None
    short = trend(np.arange(0, 30, 1.0), np.arange(0, 30, 1.0) * 10 + 100)
    assert (
        diagnose.degradation(diagnose.DiagnosisInput(latency_trend=short)) is None
    )  # 29 s < 10 min
    small = trend(ts, 100 + ts / 3600)  # +1 % over the hour: significant but immaterial
    assert diagnose.degradation(diagnose.DiagnosisInput(latency_trend=small)) is None


# --- together --------------------------------------------------------------------------------


def test_trend_rule_needs_ten_minutes_of_data() -> None:
    """Issue 10 item 12: a 29-second run showed "TTFT P50 slope −182,356.2 ms/h ↓"."""
    ts = np.arange(0.0, 30.0, 1.0)  # 29 s of windows, TTFT falling 6,000 → 4,500 ms
    short = trend(ts, 6000.0 - 50.7 * ts)
    assert short is not None and short.significant  # the fit alone would claim a trend
    need = "too short to judge (needs ≥ 10 min of data, have {})"
    assert latency.trend_too_short(short) == need.format("29 s")
    assert latency.MIN_TREND_SPAN_S == 600.0
    just = trend([0.0, 300.0, 600.0], [1.0, 2.0, 3.0])
    assert just is not None and latency.trend_too_short(just) is None
    almost = trend([0.0, 300.0, 599.0], [1.0, 2.0, 3.0])
    assert almost is not None
    assert latency.trend_too_short(almost) == need.format("9.9 min")


def test_duration_text() -> None:
    """Rounded down: a window just short of the rule never reads as long enough."""
    assert [latency.duration_text(s) for s in (29.9, 89.9, 90.0, 570.0, 600.0, 5400.0, 9000.0)] == [
        "29 s",
        "89 s",
        "1.5 min",
        "9.5 min",
        "10 min",
        "1.5 h",
        "2.5 h",
    ]


def test_degradation_needs_the_trend_window_and_says_so() -> None:
    """A rising latency over 9 minutes is no finding (rule 4 needs 10); missing_inputs says why."""
    ts = np.arange(0.0, 540.0, 10.0)  # 530 s
    rising = trend(ts, 100 + ts / 2)  # doubles and more: would fire over a long run
    inp = diagnose.DiagnosisInput(latency_trend=rising)
    assert diagnose.degradation(inp) is None
    assert diagnose.missing_inputs(inp)[-1] == (
        "a long enough window for a trend (rule 4): needs ≥ 10 min of data, have 8.8 min"
    )
    long_ts = np.arange(0.0, 660.0, 10.0)
    (f,) = diagnose.diagnose(
        diagnose.DiagnosisInput(latency_trend=trend(long_ts, 100 + long_ts / 2))
    )
    assert f.rule == 4


def test_healthy_run_has_no_finding_and_missing_inputs_are_named() -> None:
    ts = np.arange(0, 900, 10.0)
    healthy = diagnose.DiagnosisInput(
        engine=_engine([0.4, 0.5, 0.45, 0.5], [0, 0, 1, 0], [0, 0, 0, 0]),
        ttft_p50_ms=50.0,
        ttft_mean_ms=55.0,
        ttft_p99_ms=110.0,
        buckets=_buckets(40.0, 90.0),
        load=pd.DataFrame(
            {
                "load": [1.0, 8.0],
                "throughput": [100.0, 750.0],
                "client_bound": False,
                "gpu_util": 0.5,
                "kv_max": 0.5,
            }
        ),
        latency_trend=trend(ts, 50 + np.sin(ts)),
    )
    assert diagnose.diagnose(healthy) == []
    assert diagnose.missing_inputs(healthy) == []
    assert len(diagnose.missing_inputs(diagnose.DiagnosisInput())) == 4


# --- the rules' inputs from the Latency page's reads ------------------------------------------


def _heatmap() -> pd.DataFrame:
    """ttft_heatmap's shape: cells (bucket ≥ 0, window ≥ 0), per window (bucket −1) and the whole
    selection (bucket −1, window −1)."""
    return pd.DataFrame(
        {
            "bucket": [-1, -1, -1, 0, 1, 0],
            "window": [-1, 0, 1, 0, 0, 1],
            "n": [30, 20, 10, 15, 5, 10],
            "mean_ms": [60.0, 50.0, 80.0, 40.0, 80.0, 80.0],
            "p50_ms": [55.0, 45.0, 75.0, 40.0, 80.0, 75.0],
            "p99_ms": [190.0, 150.0, 200.0, 60.0, 150.0, 200.0],
        }
    )


def test_heatmap_ttft_is_the_whole_selection_row() -> None:
    assert diagnose.heatmap_ttft(_heatmap()) == {
        "ttft_mean_ms": 60.0,
        "ttft_p50_ms": 55.0,
        "ttft_p99_ms": 190.0,
    }
    assert diagnose.heatmap_ttft(_heatmap().iloc[1:]) == {}
    assert diagnose.heatmap_ttft(_heatmap().iloc[0:0]) == {}


def test_ttft_over_time_places_each_window_from_t0() -> None:
    timeline = diagnose.ttft_over_time(_heatmap(), t0=1000.0, window_s=30.0)
    assert timeline["window_start"].tolist() == [1000.0, 1030.0]
    assert timeline["ttft_p50_ms"].tolist() == [45.0, 75.0]
    empty = diagnose.ttft_over_time(None, t0=0.0, window_s=1.0)
    assert empty.empty and list(empty.columns) == ["window_start", "ttft_p50_ms"]


def test_input_buckets_name_buckets_and_take_median_input_of_ok_requests() -> None:
    by_input = pd.DataFrame(
        {
            "metric": ["ttft_ms", "ttft_ms"],
            "bucket": [0, 2],
            "n": [3, 1],
            "p50_ms": [10.0, 90.0],
            "p99_ms": [40.0, 95.0],
        }
    )
    sample = pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "error", "ok"],
            "input_tokens": [100.0, 200.0, 50.0, 10.0, 5000.0],
        }
    )
    buckets = diagnose.input_buckets(by_input, (256, 1024), sample)
    assert buckets["bucket"].tolist() == ["<256", "≥1k"]
    assert buckets["n"].tolist() == [3, 1]
    assert buckets["median_input"].tolist() == [100.0, 5000.0]  # the error's 10 left out
    assert "median_input" not in diagnose.input_buckets(by_input, (256, 1024)).columns


def test_load_points_put_each_runs_state_beside_its_level() -> None:
    levels = pd.DataFrame(
        {
            "run_id": ["c1", "c8"],
            "load": [1.0, 8.0],
            "concurrency": [1, 8],
            "output_throughput": [100.0, 700.0],
            "client_bound": pd.array([None, True], dtype="boolean"),
        }
    )
    states = pd.DataFrame(
        {
            "run_id": ["c1", "c8"],
            "gpu_util": [0.2, 0.9],
            "kv_max": [0.1, 0.95],
            "running_max": [1.0, 8.0],
        }
    )
    load = diagnose.load_points(levels, states)
    assert load["throughput"].tolist() == [100.0, 700.0]
    assert load["client_bound"].tolist() == [False, True]  # unknown: not client-bound
    assert load["gpu_util"].tolist() == [0.2, 0.9]
    assert load["concurrency"].dtype == "float64"
    empty = diagnose.load_points(levels.iloc[0:0], states.iloc[0:0])
    assert empty.empty and list(empty.columns) == list(diagnose.LOAD_COLUMNS)


def test_diagnosis_input_keeps_what_each_rule_needs() -> None:
    heatmap = _heatmap()
    inp = diagnose.diagnosis_input(
        ttft=diagnose.heatmap_ttft(heatmap),
        buckets=pd.DataFrame(),
        timeline=diagnose.ttft_over_time(heatmap, t0=0.0, window_s=30.0),
        engine=pd.DataFrame(),
        load=pd.DataFrame(),
    )
    assert (inp.ttft_p50_ms, inp.ttft_mean_ms, inp.ttft_p99_ms) == (55.0, 60.0, 190.0)
    assert inp.buckets is None and inp.engine is None  # empty frames: nothing to look at
    assert inp.latency_trend is None  # two windows are no trend
    nan = diagnose.diagnosis_input(
        ttft={"ttft_p50_ms": math.nan, "ttft_p99_ms": None},
        buckets=pd.DataFrame(),
        timeline=diagnose.ttft_over_time(None, t0=0.0, window_s=1.0),
        engine=None,
        load=pd.DataFrame(),
    )
    assert (nan.ttft_p50_ms, nan.ttft_mean_ms, nan.ttft_p99_ms) == (None, None, None)
