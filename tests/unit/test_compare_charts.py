"""ui.compare_charts: figure specs through fig.to_dict() without layout.template."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest

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


METRICS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))


def _samples(run_ids: list[str], per_run: int = 5) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run_id": r, "metric": m, "value": float(i * 10 + k)}
            for i, r in enumerate(run_ids)
            for m, _ in METRICS
            for k in range(per_run)
        ]
    )


def _labels(n: int) -> dict[str, str]:
    """Labels as long as the demo's (name · framework · model · load)."""
    return {f"r{i}": f"demo sim-{i} c={2**i} · sim · llama-3.1-8b · c={2**i}" for i in range(n)}


def test_latency_cdf_grid_per_run_with_slo() -> None:
    samples = pd.DataFrame(
        {
            "run_id": ["x", "x", "y", "x"],
            "metric": ["ttft_ms", "ttft_ms", "ttft_ms", "e2e_ms"],
            "value": [3.0, 1.0, 2.0, 7.0],
        }
    )
    labels = {"x": "X", "y": "Y", "z": "Z"}
    d = _dict(charts.latency_cdf_grid(samples, labels, METRICS, slo_limits={"ttft_ms": 2.5}))
    assert [(t["name"], t["x"], t["y"], t["xaxis"]) for t in d["data"]] == [
        ("X", [1.0, 3.0], [0.5, 1.0], "x"),
        ("Y", [2.0], [1.0], "x"),
        ("X", [7.0], [1.0], "x4"),
    ]
    assert "X (n=2)" in d["data"][0]["hovertemplate"]
    assert [t["showlegend"] for t in d["data"]] == [True, True, False]  # one entry per run
    assert [t["legendgroup"] for t in d["data"]] == ["x", "y", "x"]
    assert d["data"][0]["line"]["color"] == d["data"][2]["line"]["color"]  # same run, same colour
    assert d["data"][0]["line"]["color"] != d["data"][1]["line"]["color"]
    assert [a["text"] for a in d["layout"]["annotations"][:4]] == [
        "TTFT CDF",
        "TPOT CDF: no data",
        "ITL CDF: no data",
        "E2E CDF",
    ]
    (slo,) = d["layout"]["shapes"]
    assert slo["x0"] == 2.5 and slo["line"] == SLO_LINE and slo["xref"] == "x"
    assert d["layout"]["xaxis"]["title"] == {"text": "TTFT (ms)"}
    assert d["layout"]["yaxis"]["tickformat"] == ".0%"


def test_cdf_is_capped_at_cdf_points() -> None:
    samples = pd.DataFrame(
        {"run_id": "x", "metric": "e2e_ms", "value": [float(i) for i in range(10_000)]}
    )
    d = _dict(charts.latency_cdf_grid(samples, {"x": "X"}, METRICS))
    assert len(d["data"][0]["x"]) == charts.CDF_POINTS
    assert d["data"][0]["x"][0] == 0.0 and d["data"][0]["x"][-1] == 9999.0


@pytest.mark.parametrize("n_runs", [2, 9, 20])
def test_cdf_grid_has_one_legend_below_the_panels_at_any_number_of_runs(n_runs: int) -> None:
    """Issue 10 item 12: four CDFs, each with its own legend beside it, left plots ~50 px wide
    with the demo's 9 runs. One legend for the four panels, below them, in columns."""
    labels = _labels(n_runs)
    d = _dict(charts.latency_cdf_grid(_samples(list(labels)), labels, METRICS))
    layout = d["layout"]
    assert sum(t["showlegend"] for t in d["data"]) == n_runs  # each run once, not once a panel
    assert len(d["data"]) == 4 * n_runs
    legend = layout["legend"]
    assert legend["orientation"] == "h"
    assert legend["y"] < 0 and legend["yanchor"] == "top"  # below the panels, not beside them
    assert legend["entrywidthmode"] == "fraction"
    assert legend["entrywidth"] * charts.CDF_LEGEND_COLS < 1  # the columns fit side by side
    assert legend["groupclick"] == "togglegroup"
    # the panels share the figure's width, whatever the number of runs
    widths = [layout[f"xaxis{i or ''}"]["domain"] for i in ("", 2, 3, 4)]
    assert [round(hi - lo, 2) for lo, hi in widths] == [0.46] * 4
    # room for the legend's rows, below the panels' fixed height
    rows = -(-n_runs // charts.CDF_LEGEND_COLS)
    assert layout["margin"]["b"] == 50 + rows * charts.CDF_LEGEND_ROW_PX + 10
    assert (
        layout["height"] == 40 + 2 * charts.CDF_PANEL_PX + charts.CDF_GAP_PX + layout["margin"]["b"]
    )
    assert len({t["line"]["color"] + t["line"]["dash"] for t in d["data"]}) == n_runs
    names = [t["name"] for t in d["data"] if t["showlegend"]]
    assert max(len(n) for n in names) <= charts.CDF_LABEL_CHARS


def test_cdf_grid_labels_are_shortened_and_escaped() -> None:
    labels = {"x": "**bold** <b>x</b> " + "y" * 60}
    samples = pd.DataFrame({"run_id": ["x"], "metric": ["ttft_ms"], "value": [1.0]})
    (trace,) = _dict(charts.latency_cdf_grid(samples, labels, METRICS))["data"]
    assert trace["name"].startswith("**bold** &lt;b&gt;x&lt;/b&gt; yyy")
    assert trace["name"].endswith("…")
    assert "<b>" not in trace["hovertemplate"].split("<extra>")[1].removesuffix("</extra>")


def test_empty_inputs_say_no_data() -> None:
    empty = pd.DataFrame(columns=["series", "load", "load_kind", "output_throughput"])
    assert _dict(charts.throughput_vs_load(empty))["layout"]["title"] == {
        "text": "Output throughput vs load: no data"
    }
    assert _dict(charts.pareto_chart(empty))["data"] == []
    none = pd.DataFrame({"run_id": [], "value": []})
    d = _dict(charts.latency_cdf_grid(none, {"x": "X"}, METRICS))
    assert [a["text"] for a in d["layout"]["annotations"]] == [
        f"{name} CDF: no data" for _, name in METRICS
    ]
    assert d["data"] == [] and d["layout"]["showlegend"] is False
