"""Pure Plotly builders for the Compare page (ARCHITECTURE §3, §11.8). No Streamlit, no I/O.

Inputs are the frames of ``analysis.compare.curves`` (one row per run with ``series``,
``load``, ``load_kind`` and the run's aggregates) and ``store.compare_queries.metric_samples``
(``run_id``, ``value``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.compare import load_axis_title, pareto_front

#: A CDF is drawn through at most this many points per run.
CDF_POINTS = 201

_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}


def _empty(title: str, x_title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title={"text": f"{title}: no data"},
        xaxis_title=x_title,
        yaxis_title=y_title,
        margin=_MARGIN,
    )
    return fig


def _floats(series: pd.Series) -> list[float | None]:
    arr = pd.to_numeric(series).astype("float64")
    return [None if np.isnan(v) else round(float(v), 6) for v in arr]


def _by_series(curves: pd.DataFrame, column: str) -> list[tuple[str, pd.DataFrame]]:
    if curves.empty or column not in curves:
        return []
    usable = curves[curves["load"].notna() & pd.to_numeric(curves[column]).notna()]
    return [(str(name), group) for name, group in usable.groupby("series", sort=True)]


def metric_vs_load(
    curves: pd.DataFrame,
    column: str,
    *,
    title: str,
    y_title: str,
    slo_limit: float | None = None,
    slo_label: str = "SLO",
) -> go.Figure:
    """One line per series: ``column`` against load, with an optional horizontal SLO line."""
    groups = _by_series(curves, column)
    x_title = load_axis_title(curves["load_kind"].tolist() if "load_kind" in curves else [])
    if not groups:
        return _empty(title, x_title, y_title)
    fig = go.Figure()
    for name, group in groups:
        fig.add_trace(
            go.Scatter(
                x=_floats(group["load"]),
                y=_floats(group[column]),
                mode="lines+markers",
                name=name,
                hovertemplate="load %{x}: %{y:.2f}<extra>%{fullData.name}</extra>",
            )
        )
    if slo_limit is not None:
        fig.add_hline(
            y=float(slo_limit),
            line={"dash": "dash", "color": "crimson", "width": 1},
            annotation={"text": f"{slo_label} {slo_limit:g}"},
        )
    fig.update_layout(
        title={"text": title},
        xaxis_title=x_title,
        yaxis_title=y_title,
        legend={"title": {"text": "series"}},
        margin=_MARGIN,
    )
    return fig


def throughput_vs_load(curves: pd.DataFrame, column: str = "output_throughput") -> go.Figure:
    """Throughput (output tokens/s by default, or ``request_throughput``/``goodput``) vs load."""
    labels = {
        "output_throughput": ("Output throughput vs load", "output tokens/s"),
        "request_throughput": ("Request throughput vs load", "requests/s"),
        "goodput": ("Goodput vs load", "requests/s meeting the SLO"),
    }
    title, y_title = labels.get(column, (f"{column} vs load", column))
    return metric_vs_load(curves, column, title=title, y_title=y_title)


def latency_vs_load(
    curves: pd.DataFrame, metric: str, percentile: float, slo_limit: float | None
) -> go.Figure:
    """P{percentile} of ``metric`` (``ttft`` / ``tpot`` / ``e2e``) vs load, with the SLO line."""
    name = metric.upper()
    pname = f"p{percentile:g}".replace(".", "_")
    return metric_vs_load(
        curves,
        f"{metric}_{pname}_ms",
        title=f"{name} P{percentile:g} vs load",
        y_title=f"{name} P{percentile:g} (ms)",
        slo_limit=slo_limit,
        slo_label=f"SLO {name}",
    )


def pareto_chart(
    curves: pd.DataFrame,
    x: str = "output_tokens_per_s_per_user",
    y: str = "output_throughput_per_gpu",
) -> go.Figure:
    """Throughput per GPU vs tokens/s per user: every run as a marker, the frontier as a line."""
    title = "Throughput per GPU vs tokens/s per user"
    x_title, y_title = "tokens/s per user (1000 / median TPOT)", "output tokens/s per GPU"
    if curves.empty or x not in curves or y not in curves:
        return _empty(title, x_title, y_title)
    xs = pd.to_numeric(curves[x]).astype("float64")
    ys = pd.to_numeric(curves[y]).astype("float64")
    usable = curves[xs.notna() & ys.notna()]
    if usable.empty:
        return _empty(title, x_title, y_title)
    fig = go.Figure()
    for name, group in usable.groupby("series", sort=True):
        loads = [
            "" if pd.isna(v) else f"{float(v):g}" for v in group.get("load", [None] * len(group))
        ]
        fig.add_trace(
            go.Scatter(
                x=_floats(group[x]),
                y=_floats(group[y]),
                mode="markers",
                name=str(name),
                text=loads,
                hovertemplate="load %{text}: %{x:.1f} tok/s/user, %{y:.1f} tok/s/GPU"
                "<extra>%{fullData.name}</extra>",
            )
        )
    front_mask = pareto_front(
        pd.to_numeric(usable[x]).to_numpy(), pd.to_numeric(usable[y]).to_numpy()
    )
    front = usable[front_mask].sort_values(x)
    fig.add_trace(
        go.Scatter(
            x=_floats(front[x]),
            y=_floats(front[y]),
            mode="lines",
            name="Pareto frontier",
            line={"dash": "dot", "color": "black"},
            hoverinfo="skip",
        )
    )
    fig.update_layout(
        title={"text": title},
        xaxis_title=x_title,
        yaxis_title=y_title,
        margin=_MARGIN,
    )
    return fig


def latency_cdfs(
    samples: pd.DataFrame,
    labels: Mapping[str, str],
    metric: str,
    *,
    slo_limit: float | None = None,
) -> go.Figure:
    """Empirical CDF of ``metric`` per run (``samples``: run_id, value in ms), each drawn
    through at most ``CDF_POINTS`` quantiles; a vertical line at the SLO target if given."""
    x_title = f"{metric} (ms)"
    title = f"{metric} CDF"
    if samples.empty:
        return _empty(title, x_title, "fraction ≤ x")
    fig = go.Figure()
    for run_id, label in labels.items():
        values = pd.to_numeric(samples.loc[samples["run_id"] == run_id, "value"]).to_numpy(
            dtype="float64"
        )
        values = np.sort(values[~np.isnan(values)])
        if values.size == 0:
            continue
        if values.size <= CDF_POINTS:
            xs, ys = values, np.arange(1, values.size + 1) / values.size
        else:
            ys = np.linspace(0.0, 1.0, CDF_POINTS)
            xs = np.quantile(values, ys)
        fig.add_trace(
            go.Scatter(
                x=np.round(xs, 6).tolist(),
                y=np.round(ys, 6).tolist(),
                mode="lines",
                line={"shape": "hv"},
                name=f"{label} (n={values.size:,})",
                hovertemplate="%{y:.1%} ≤ %{x:.2f} ms<extra>%{fullData.name}</extra>",
            )
        )
    if not fig.data:
        return _empty(title, x_title, "fraction ≤ x")
    if slo_limit is not None:
        fig.add_vline(
            x=float(slo_limit),
            line={"dash": "dash", "color": "crimson", "width": 1},
            annotation={"text": f"SLO {slo_limit:g} ms"},
        )
    fig.update_layout(
        title={"text": title},
        xaxis_title=x_title,
        yaxis={"title": {"text": "fraction ≤ x"}, "range": [0, 1.02], "tickformat": ".0%"},
        margin=_MARGIN,
    )
    return fig
