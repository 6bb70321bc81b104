"""Pure Plotly builders for the Compare page (DESIGN §3, §11.8). No Streamlit, no I/O.

Inputs are the frames of the Compare view model (``services.views.compare.CompareView``): its
``rows`` (one row per run with ``series``, ``load``, ``load_kind`` and the run's figures, from
``analysis.compare.curves``) and its ``samples`` (``run_id``, ``metric``, ``value``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.colors as plotly_colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

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


#: The CDF grid: panels per row, each panel's plot height, the gap between panel rows (the
#: x-axis title and the next panel's title), the shared legend's columns and the height of one of
#: its rows (px), and the longest legend label (the full one is in the hover).
CDF_GRID_COLS = 2
CDF_PANEL_PX = 260
CDF_GAP_PX = 90
CDF_LEGEND_COLS = 2
CDF_LEGEND_ROW_PX = 30
CDF_LABEL_CHARS = 60
_AXIS_TITLE_PX = 50  # below the bottom panels: tick labels and the x-axis title
#: A legend entry's text width as a fraction of the figure's plot width: entries of exactly
#: 1 / CDF_LEGEND_COLS do not fit beside one another once their symbols are added.
CDF_LEGEND_ENTRY = 0.9 / CDF_LEGEND_COLS


def run_colors(n: int) -> list[str]:
    """One colour per run, the same in every panel: Plotly's ten, or Dark24 for more runs
    (cycled past 24; the line dash then differs, see :func:`latency_cdf_grid`)."""
    palette = plotly_colors.qualitative.Plotly if n <= 10 else plotly_colors.qualitative.Dark24
    return [palette[i % len(palette)] for i in range(n)]


def _short(label: str, chars: int = CDF_LABEL_CHARS) -> str:
    return label if len(label) <= chars else label[: chars - 1].rstrip() + "…"


def _cdf_xy(values: np.ndarray) -> tuple[list[float], list[float]]:
    """A sorted sample's empirical CDF through at most CDF_POINTS quantiles."""
    if values.size <= CDF_POINTS:
        xs, ys = values, np.arange(1, values.size + 1) / values.size
    else:
        ys = np.linspace(0.0, 1.0, CDF_POINTS)
        xs = np.quantile(values, ys)
    return np.round(xs, 6).tolist(), np.round(ys, 6).tolist()


def latency_cdf_grid(
    samples: pd.DataFrame,
    labels: Mapping[str, str],
    metrics: Sequence[tuple[str, str]],
    *,
    slo_limits: Mapping[str, float] | None = None,
) -> go.Figure:
    """Empirical CDFs of several metrics (``samples``: run_id, metric, value in ms), one panel
    per metric (``metrics``: column → name, e.g. ``("ttft_ms", "TTFT")``), with ONE legend for
    all panels below them, so every panel keeps the full width of its column for any number of
    runs. A run has one colour and one legend entry across panels (clicking it hides the run
    everywhere); each curve goes through at most ``CDF_POINTS`` quantiles; a dashed line marks
    a metric's SLO target where ``slo_limits`` has one. The figure's height grows with the
    legend's rows."""
    limits = dict(slo_limits or {})
    rows = max(1, math.ceil(len(metrics) / CDF_GRID_COLS))
    run_ids = list(labels)
    colors = run_colors(len(run_ids))
    usable = not samples.empty and {"run_id", "metric", "value"} <= set(samples.columns)
    titles = []
    curves: list[list[tuple[str, np.ndarray]]] = []
    for metric, name in metrics:
        per_run = []
        of_metric = (
            samples[samples["metric"] == metric]
            if usable
            else pd.DataFrame({"run_id": [], "value": []})
        )
        for run_id in run_ids:
            column = of_metric.loc[of_metric["run_id"] == run_id, "value"]
            values = pd.to_numeric(column).to_numpy(dtype="float64")
            values = np.sort(values[~np.isnan(values)])
            if values.size:
                per_run.append((run_id, values))
        curves.append(per_run)
        titles.append(f"{name} CDF" if per_run else f"{name} CDF: no data")
    grid_px = rows * CDF_PANEL_PX + (rows - 1) * CDF_GAP_PX
    fig = make_subplots(
        rows=rows,
        cols=CDF_GRID_COLS,
        subplot_titles=titles,
        horizontal_spacing=0.08,
        vertical_spacing=CDF_GAP_PX / grid_px,
    )
    shown: set[str] = set()
    for i, ((metric, name), per_run) in enumerate(zip(metrics, curves, strict=True)):
        row, col = i // CDF_GRID_COLS + 1, i % CDF_GRID_COLS + 1
        for run_id, values in per_run:
            k = run_ids.index(run_id)
            xs, ys = _cdf_xy(values)
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={
                        "shape": "hv",
                        "color": colors[k],
                        "dash": "solid" if k < 24 else "dot",
                    },
                    name=_text(_short(labels[run_id])),
                    legendgroup=run_id,
                    showlegend=run_id not in shown,
                    hovertemplate=(
                        f"%{{y:.1%}} ≤ %{{x:.2f}} ms<extra>{_text(labels[run_id])} "
                        f"(n={values.size:,})</extra>"
                    ),
                ),
                row=row,
                col=col,
            )
            shown.add(run_id)
        if metric in limits and per_run:
            fig.add_vline(
                x=float(limits[metric]),
                line={"dash": "dash", "color": "crimson", "width": 1},
                annotation={"text": f"SLO {limits[metric]:g} ms"},
                row=row,
                col=col,
            )
        fig.update_xaxes(title_text=f"{name} (ms)", row=row, col=col)
        fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text="fraction ≤ x", row=row, col=col)
    legend_px = math.ceil(len(shown) / CDF_LEGEND_COLS) * CDF_LEGEND_ROW_PX
    bottom = _AXIS_TITLE_PX + legend_px + 10
    fig.update_layout(
        height=_MARGIN["t"] + grid_px + bottom,
        margin={**_MARGIN, "b": bottom},
        showlegend=bool(shown),
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": -_AXIS_TITLE_PX / grid_px,  # paper units: the grid's height is 1
            "yanchor": "top",
            "entrywidthmode": "fraction",
            "entrywidth": CDF_LEGEND_ENTRY,
            "groupclick": "togglegroup",
        },
    )
    return fig


def _text(label: str) -> str:
    """A run's label as Plotly text: its pseudo-HTML tags and hovertemplate ``%{…}`` defused."""
    return (
        label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("%{", "% {")
    )
