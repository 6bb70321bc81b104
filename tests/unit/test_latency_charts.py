"""ui.latency_charts: pure figure builders, compared through fig.to_dict() without
layout.template."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.latency import trend
from ui import latency_charts

MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}
T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def _dict(fig: go.Figure) -> dict[str, Any]:
    d = fig.to_dict()
    d["layout"].pop("template", None)
    return d


def test_bucket_percentiles_groups_bars_and_marks_low_samples() -> None:
    df = pd.DataFrame(
        {
            "bucket": [1, 0, -1],  # drawn in bucket order; −1 (all buckets) is not a bar
            "n": [5, 150, 155],
            "p50_ms": [10.0, 1.0, 9.0],
            "p90_ms": [20.0, 2.0, 9.0],
            "p95_ms": [30.0, 3.0, 9.0],
            "p99_ms": [40.0, 4.0, 9.0],
            "p99_9_ms": [50.0, 5.0, 9.0],
        }
    )
    fig = latency_charts.bucket_percentiles(df, ["<256", "256–1k", "≥1k"], "TTFT")
    x = ["<256 (n=150)", "256–1k (n=5 ⚠)"]
    assert _dict(fig) == {
        "data": [
            {
                "type": "bar",
                "name": name,
                "x": x,
                "y": [float(k), float(10 * k)],
                "marker": {"opacity": [1.0, 0.45]},
                "hovertemplate": f"%{{x}}<br>{name}: %{{y:,.1f}} ms<extra></extra>",
            }
            for k, name in enumerate(["P50", "P90", "P95", "P99", "P99.9"], start=1)
        ],
        "layout": {
            "title": {"text": "TTFT percentiles by bucket (⚠ = fewer than 100 samples)"},
            "barmode": "group",
            "yaxis": {"title": {"text": "TTFT (ms)"}},
            "margin": MARGIN,
        },
    }


def test_bucket_label_marks_low_confidence_p99() -> None:
    assert latency_charts.bucket_label("<256", 99) == "<256 (n=99 ⚠)"
    assert latency_charts.bucket_label("<256", 100) == "<256 (n=100)"


def test_heatmap_places_cells_by_bucket_and_window() -> None:
    df = pd.DataFrame(
        {
            "bucket": [-1, -1, 0, 1],  # −1: a window's total / the whole selection: not cells
            "window": [-1, 0, 0, 2],
            "n": [153, 153, 150, 3],
            "p99_ms": [99.0, 99.0, 12.5, 40.0],
        }
    )
    d = _dict(latency_charts.ttft_heatmap(df, ["<256", "≥256"], t0=T0, window_s=10))
    (trace,) = d["data"]
    trace.pop("colorscale")
    assert trace == {
        "type": "heatmap",
        "x": ["2027-01-15 08:00:00", "2027-01-15 08:00:10", "2027-01-15 08:00:20"],
        "y": ["<256", "≥256"],
        "z": [[12.5, None, None], [None, None, 40.0]],
        "text": [["n=150", "", ""], ["", "", "n=3"]],
        "colorbar": {"title": {"text": "ms"}},
        "hovertemplate": "%{y} @ %{x}<br>P99 TTFT %{z:,.1f} ms (%{text})<extra></extra>",
    }
    assert d["layout"] == {
        "title": {"text": "P99 TTFT by input bucket, 10 s windows"},
        "xaxis": {"title": {"text": "window start (UTC)"}},
        "yaxis": {"title": {"text": "input tokens"}},
        "margin": MARGIN,
    }


def test_scatter_has_a_trace_per_status_and_says_when_sampled() -> None:
    sample = pd.DataFrame(
        {
            "status": ["error", "ok", "ok", "timeout"],
            "input_tokens": [10, 20, 30, 40],
            "ttft_ms": [1.0, 2.0, 3.0, None],  # the timeout has no TTFT: not drawn
        }
    )
    d = _dict(latency_charts.ttft_scatter(sample, stride=50, total=200))
    assert [t["name"] for t in d["data"]] == ["ok", "error"]
    ok = d["data"][0]
    assert ok["type"] == "scattergl"
    assert list(ok["x"]) == [20.0, 30.0]
    assert list(ok["y"]) == [2.0, 3.0]
    assert ok["marker"]["color"] == latency_charts.STATUS_COLOURS["ok"]
    assert d["layout"]["title"]["text"] == (
        "TTFT vs input tokens (3 requests, a 1-in-50 sample of 200)"
    )
    whole = _dict(latency_charts.ttft_scatter(sample))
    assert whole["layout"]["title"]["text"] == "TTFT vs input tokens (3 requests)"


def test_split_stacks_prefill_and_queueing() -> None:
    split = pd.DataFrame(
        {"bucket": ["<256"], "n": [10], "prefill_mean_ms": [5.0], "queue_mean_ms": [2.5]}
    )
    assert _dict(latency_charts.ttft_split(split)) == {
        "data": [
            {
                "type": "bar",
                "name": "prefill (fitted)",
                "x": ["<256 (n=10)"],
                "y": [5.0],
                "hovertemplate": "%{x}<br>prefill %{y:,.1f} ms<extra></extra>",
            },
            {
                "type": "bar",
                "name": "queueing",
                "x": ["<256 (n=10)"],
                "y": [2.5],
                "hovertemplate": "%{x}<br>queueing %{y:,.1f} ms<extra></extra>",
            },
        ],
        "layout": {
            "title": {"text": "Mean TTFT split into prefill and queueing, by input bucket"},
            "barmode": "stack",
            "yaxis": {"title": {"text": "ms"}},
            "margin": MARGIN,
        },
    }


def test_throughput_vs_load_marks_current_and_client_bound_runs() -> None:
    load = pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "load": [1.0, 8.0],
            "output_throughput": [100.0, 700.0],
            "client_bound": [False, True],
        }
    )
    d = _dict(latency_charts.throughput_vs_load(load, current="b"))
    (trace,) = d["data"]
    assert list(trace["x"]) == [1.0, 8.0]
    assert list(trace["y"]) == [100.0, 700.0]
    assert list(trace["marker"]["size"]) == [8, 14]
    assert list(trace["marker"]["symbol"]) == ["circle", "x"]


def test_trend_chart_draws_the_fitted_line_and_slope() -> None:
    ts = np.array([T0, T0 + 1800, T0 + 3600])
    t = trend(ts, [10.0, 20.0, 30.0])
    d = _dict(latency_charts.trend_chart(ts, [10.0, 20.0, 30.0], t, label="TTFT P50", unit="ms"))
    assert [tr["name"] for tr in d["data"]] == ["TTFT P50", "trend"]
    assert list(d["data"][1]["y"]) == [10.0, 30.0]
    assert d["layout"]["title"]["text"] == (
        "TTFT P50 over time · slope +20.00 ms/h (95 % CI +20.00 … +20.00)"
    )


def test_trend_chart_over_a_short_window_says_too_short_instead_of_a_slope() -> None:
    """Issue 10 item 12: no per-hour slope (nor its line) extrapolated from 29 s."""
    ts = T0 + np.arange(0.0, 30.0, 1.0)
    values = 6000.0 - 50.7 * (ts - T0)
    d = _dict(
        latency_charts.trend_chart(ts, values, trend(ts, values), label="TTFT P50", unit="ms")
    )
    assert [tr["name"] for tr in d["data"]] == ["TTFT P50"]
    assert d["layout"]["title"]["text"] == (
        "TTFT P50 over time · too short to judge (needs ≥ 10 min of data, have 29 s)"
    )


def test_empty_inputs_give_titled_empty_figures() -> None:
    assert _dict(latency_charts.bucket_percentiles(pd.DataFrame(), [], "TTFT"))["layout"][
        "title"
    ] == {"text": "TTFT by bucket: no samples"}
    assert _dict(latency_charts.ttft_heatmap(pd.DataFrame(), [], t0=0, window_s=1))["data"] == []
    assert _dict(latency_charts.ttft_scatter(pd.DataFrame()))["data"] == []
    assert _dict(latency_charts.kv_and_queue(pd.DataFrame()))["data"] == []
