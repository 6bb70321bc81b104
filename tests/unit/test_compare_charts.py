"""ui.compare_charts: figure specs through fig.to_dict() without layout.template."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ui import compare_charts as charts

MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}
SLO_LINE = {"color": "crimson", "dash": "dash", "width": 1}


def _dict(fig: go.Figure) -> dict[str, Any]:
    d = fig.to_dict()
    d["layout"].pop("template", None)
    return d


def _curves() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "series": ["a", "a", "b"],
            "load": [1.0, 8.0, 4.0],
            "load_kind": ["concurrency"] * 3,
            "output_throughput": [10.0, 50.0, 20.0],
            "ttft_p99_ms": [100.0, 300.0, None],
            "output_tokens_per_s_per_user": [100.0, 50.0, 80.0],
            "output_throughput_per_gpu": [10.0, 50.0, 5.0],
        }
    )


def test_latency_vs_load_with_slo_line_skips_series_without_data() -> None:
    assert _dict(charts.latency_vs_load(_curves(), "ttft", 99, 200.0)) == {
        "data": [
            {
                "hovertemplate": "load %{x}: %{y:.2f}<extra>%{fullData.name}</extra>",
                "mode": "lines+markers",
                "name": "a",
                "x": [1.0, 8.0],
                "y": [100.0, 300.0],
                "type": "scatter",
            }
        ],
        "layout": {
            "shapes": [
                {
                    "line": SLO_LINE,
                    "type": "line",
                    "x0": 0,
                    "x1": 1,
                    "xref": "x domain",
                    "y0": 200.0,
                    "y1": 200.0,
                    "yref": "y",
                }
            ],
            "annotations": [
                {
                    "showarrow": False,
                    "text": "SLO TTFT 200",
                    "x": 1,
                    "xanchor": "right",
                    "xref": "x domain",
                    "y": 200.0,
                    "yanchor": "bottom",
                    "yref": "y",
                }
            ],
            "title": {"text": "TTFT P99 vs load"},
            "legend": {"title": {"text": "series"}},
            "margin": MARGIN,
            "xaxis": {"title": {"text": "concurrency (requests in flight)"}},
            "yaxis": {"title": {"text": "TTFT P99 (ms)"}},
        },
    }


def test_throughput_vs_load_one_trace_per_series() -> None:
    d = _dict(charts.throughput_vs_load(_curves()))
    assert [(t["name"], t["x"], t["y"]) for t in d["data"]] == [
        ("a", [1.0, 8.0], [10.0, 50.0]),
        ("b", [4.0], [20.0]),
    ]
    assert d["layout"]["yaxis"] == {"title": {"text": "output tokens/s"}}
    assert "shapes" not in d["layout"]


def test_pareto_chart_draws_the_frontier() -> None:
    d = _dict(charts.pareto_chart(_curves()))
    # b (80, 5) is dominated by a@1 (100, 10); the frontier is a@8 then a@1, sorted by x
    assert d["data"][-1] == {
        "hoverinfo": "skip",
        "line": {"color": "black", "dash": "dot"},
        "mode": "lines",
        "name": "Pareto frontier",
        "x": [50.0, 100.0],
        "y": [50.0, 10.0],
        "type": "scatter",
    }
    assert [(t["name"], t["text"]) for t in d["data"][:-1]] == [("a", ["1", "8"]), ("b", ["4"])]
    assert d["layout"]["xaxis"] == {"title": {"text": "tokens/s per user (1000 / median TPOT)"}}


def test_latency_cdfs_per_run_with_slo() -> None:
    samples = pd.DataFrame({"run_id": ["x", "x", "y"], "value": [3.0, 1.0, 2.0]})
    d = _dict(charts.latency_cdfs(samples, {"x": "X", "y": "Y", "z": "Z"}, "TTFT", slo_limit=2.5))
    assert [(t["name"], t["x"], t["y"]) for t in d["data"]] == [
        ("X (n=2)", [1.0, 3.0], [0.5, 1.0]),
        ("Y (n=1)", [2.0], [1.0]),
    ]
    assert d["layout"]["shapes"][0]["x0"] == 2.5
    assert d["layout"]["title"] == {"text": "TTFT CDF"}


def test_cdf_is_capped_at_cdf_points() -> None:
    samples = pd.DataFrame({"run_id": "x", "value": [float(i) for i in range(10_000)]})
    d = _dict(charts.latency_cdfs(samples, {"x": "X"}, "E2E"))
    assert len(d["data"][0]["x"]) == charts.CDF_POINTS
    assert d["data"][0]["x"][0] == 0.0 and d["data"][0]["x"][-1] == 9999.0


def test_empty_inputs_say_no_data() -> None:
    empty = pd.DataFrame(columns=["series", "load", "load_kind", "output_throughput"])
    assert _dict(charts.throughput_vs_load(empty))["layout"]["title"] == {
        "text": "Output throughput vs load: no data"
    }
    assert _dict(charts.pareto_chart(empty))["data"] == []
    none = pd.DataFrame({"run_id": [], "value": []})
    assert _dict(charts.latency_cdfs(none, {}, "TPOT"))["layout"]["title"] == {
        "text": "TPOT CDF: no data"
    }
