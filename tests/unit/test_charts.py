"""ui.charts: pure figure builders, compared through fig.to_dict() without layout.template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ui import charts

MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}


def _dict(fig: go.Figure) -> dict[str, Any]:
    d = fig.to_dict()
    d["layout"].pop("template", None)
    return d


def _samples(values: Sequence[float | None]) -> pd.DataFrame:
    return pd.DataFrame({"value": pd.Series(list(values), dtype="float64")})


def test_histogram_bins_and_marks_percentiles() -> None:
    fig = charts.latency_histogram(
        _samples([1.0, 2.0, 3.0, 4.0]), "TTFT", bins=3, percentiles={"P50": 2.5, "P99": None}
    )
    # bins [1,2) [2,3) [3,4]: the last bin is closed, so 3 and 4 share it
    assert _dict(fig) == {
        "data": [
            {
                "type": "bar",
                "name": "TTFT",
                "x": [1.5, 2.5, 3.5],
                "y": [1, 1, 2],
                "width": 1.0,
                "hovertemplate": "%{x:.2f} ms: %{y} requests<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": "TTFT distribution (n=4)"},
            "xaxis": {"title": {"text": "TTFT (ms)"}},
            "yaxis": {"title": {"text": "count"}},
            "bargap": 0.02,
            "showlegend": False,
            "margin": MARGIN,
            "shapes": [
                {
                    "type": "line",
                    "line": {"dash": "dash", "width": 1},
                    "x0": 2.5,
                    "x1": 2.5,
                    "xref": "x",
                    "y0": 0,
                    "y1": 1,
                    "yref": "y domain",
                }
            ],
            "annotations": [
                {
                    "showarrow": False,
                    "text": "P50",
                    "x": 2.5,
                    "xanchor": "left",
                    "xref": "x",
                    "y": 1,
                    "yanchor": "top",
                    "yref": "y domain",
                }
            ],
        },
    }


def test_histogram_cuts_a_long_tail_and_says_so() -> None:
    values = [float(v) for v in range(1, 1001)] + [100_000.0]  # one huge outlier
    fig = charts.latency_histogram(_samples(values), "E2E", bins=10)
    bar = fig.to_dict()["data"][0]
    tail = float(np.quantile(values, charts.TAIL_QUANTILE))  # ≈ 995.995
    assert sum(bar["y"]) == int(np.count_nonzero(np.asarray(values) <= tail))
    assert max(bar["x"]) < tail
    above = sum(v > tail for v in values)
    assert (
        fig.layout.title.text
        == f"E2E distribution (n=1,001) · {above} above {tail:,.1f} ms not shown"
    )


def test_histogram_of_one_value_and_of_nothing() -> None:
    one = charts.latency_histogram(_samples([5.0, 5.0]), "TPOT", bins=2)
    assert one.to_dict()["data"][0]["y"] == [2, 0]
    empty = _dict(charts.latency_histogram(_samples([None]), "ITL"))
    assert empty == {
        "data": [],
        "layout": {
            "title": {"text": "ITL: no samples"},
            "xaxis": {"title": {"text": "ITL (ms)"}},
            "yaxis": {"title": {"text": "requests"}},
            "margin": MARGIN,
        },
    }


def test_ecdf_small_sample_is_exact() -> None:
    fig = charts.latency_ecdf(_samples([3.0, 1.0, 2.0, None]), "TPOT")
    assert _dict(fig) == {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv"},
                "name": "TPOT",
                "x": [1.0, 2.0, 3.0],
                "y": [0.333333, 0.666667, 1.0],
                "hovertemplate": "%{y:.1%} ≤ %{x:.2f} ms<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": "TPOT ECDF (n=3)"},
            "xaxis": {"title": {"text": "TPOT (ms)"}},
            "yaxis": {"title": {"text": "fraction ≤ x"}, "range": [0, 1.02], "tickformat": ".0%"},
            "showlegend": False,
            "margin": MARGIN,
        },
    }


def test_ecdf_large_sample_is_thinned_to_quantiles() -> None:
    values = [float(v) for v in range(10_001)]  # 0 … 10000
    trace = charts.latency_ecdf(_samples(values), "TTFT").to_dict()["data"][0]
    assert len(trace["x"]) == charts.ECDF_POINTS
    assert trace["x"][0] == 0.0 and trace["x"][-1] == 10_000.0  # min and max kept
    assert trace["y"][250] == 0.5 and trace["x"][250] == 5000.0  # the median
    assert trace["x"] == sorted(trace["x"])
