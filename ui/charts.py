"""Pure Plotly figure builders over DataFrames (DESIGN §3, §11.8). No Streamlit, no I/O.

Distributions are drawn from a sample (``store.request_rows.run_metric_sample``: one ``value``
column); the histogram is binned here, so the figure carries bin counts rather than every value,
and a long tail beyond P99.5 is summarised in the title instead of squashing the bins.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

#: Histogram range ends at this quantile when the tail beyond it is long.
TAIL_QUANTILE = 0.995
#: An ECDF is drawn through at most this many points.
ECDF_POINTS = 501

_PERCENTILE_STYLE: Mapping[str, str] = {"P50": "dash", "P90": "dot", "P99": "dashdot"}


def _values(samples: pd.DataFrame) -> np.ndarray:
    if samples.empty or "value" not in samples:
        return np.empty(0)
    arr = pd.to_numeric(samples["value"]).astype("float64").to_numpy()
    return np.sort(arr[~np.isnan(arr)])


def _empty(title: str, x_title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title={"text": f"{title}: no samples"},
        xaxis_title=x_title,
        yaxis_title=y_title,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    return fig


def _add_markers(fig: go.Figure, percentiles: Mapping[str, float | None] | None) -> None:
    """A labelled vertical line per percentile: the shapes and annotations ``add_vline`` makes,
    set in one layout update (``add_vline`` re-validates the whole layout per line: 16 lines
    cost ~0.4 s of CPU per page)."""
    shapes: list[dict[str, object]] = []
    labels: list[dict[str, object]] = []
    for name, value in (percentiles or {}).items():
        if value is None or np.isnan(value):
            continue
        x = float(value)
        line = {"dash": _PERCENTILE_STYLE.get(name, "dash"), "width": 1}
        shapes.append(
            {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain"}
            | {"line": line}
        )
        labels.append(
            {"text": name, "showarrow": False, "x": x, "xref": "x", "xanchor": "left"}
            | {"y": 1, "yref": "y domain", "yanchor": "top"}
        )
    if shapes:
        fig.update_layout(
            shapes=[*fig.layout.shapes, *shapes], annotations=[*fig.layout.annotations, *labels]
        )


def latency_histogram(
    samples: pd.DataFrame,
    metric: str,
    *,
    bins: int = 60,
    percentiles: Mapping[str, float | None] | None = None,
) -> go.Figure:
    """Histogram of ``samples["value"]`` (ms) with vertical lines at ``percentiles``.

    When P99.5 is far below the maximum (more than 1.5× apart, with ≥ 200 samples), the bins end
    at P99.5 and the title counts the values beyond; the ECDF shows the whole tail.
    """
    values = _values(samples)
    x_title = f"{metric} (ms)"
    if values.size == 0:
        return _empty(metric, x_title, "requests")
    lo, hi = float(values[0]), float(values[-1])
    title = f"{metric} distribution (n={values.size:,})"
    if values.size >= 200:
        tail = float(np.quantile(values, TAIL_QUANTILE))
        if hi - lo > 1.5 * (tail - lo) and tail > lo:
            beyond = int(np.count_nonzero(values > tail))
            title += f" · {beyond:,} above {tail:,.1f} ms not shown"
            hi = tail
    if hi <= lo:
        hi = lo + 1.0
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    fig = go.Figure(
        go.Bar(
            x=((edges[:-1] + edges[1:]) / 2).round(6).tolist(),
            y=counts.tolist(),
            width=float(np.round(edges[1] - edges[0], 9)),
            name=metric,
            hovertemplate="%{x:.2f} ms: %{y} requests<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": title},
        xaxis_title=x_title,
        yaxis_title="count",
        bargap=0.02,
        showlegend=False,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    _add_markers(fig, percentiles)
    return fig


def latency_ecdf(
    samples: pd.DataFrame,
    metric: str,
    *,
    percentiles: Mapping[str, float | None] | None = None,
) -> go.Figure:
    """Empirical CDF of ``samples["value"]`` (ms): the fraction of samples at or below x.

    Drawn through at most ``ECDF_POINTS`` quantiles (linear interpolation), so the figure stays
    small for large samples while keeping its shape, the minimum and the maximum.
    """
    values = _values(samples)
    x_title = f"{metric} (ms)"
    if values.size == 0:
        return _empty(metric, x_title, "fraction ≤ x")
    if values.size <= ECDF_POINTS:
        xs = values
        ys = np.arange(1, values.size + 1) / values.size
    else:
        ys = np.linspace(0.0, 1.0, ECDF_POINTS)
        xs = np.quantile(values, ys)
    fig = go.Figure(
        go.Scatter(
            x=np.round(xs, 6).tolist(),
            y=np.round(ys, 6).tolist(),
            mode="lines",
            line={"shape": "hv"},
            name=metric,
            hovertemplate="%{y:.1%} ≤ %{x:.2f} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": f"{metric} ECDF (n={values.size:,})"},
        xaxis_title=x_title,
        yaxis={"title": {"text": "fraction ≤ x"}, "range": [0, 1.02], "tickformat": ".0%"},
        showlegend=False,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    _add_markers(fig, percentiles)
    return fig
