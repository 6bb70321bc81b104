"""Pure Plotly builders for the Live page (no Streamlit, no I/O).

Each takes long DataFrames (one row per sample or window) and returns a figure; time is shown in
UTC; stale sources are drawn dotted so they read as "not current". ``timeline_figure`` puts the
windowed latency, traffic, engine state and GPUs on one shared time axis (breached windows
shaded red); ``selected_range`` reads a box selection on it back as epoch seconds;
``length_mix_figure`` draws the production length mix.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.length_mix import LengthDist

GIB = 1024**3
HEIGHT = 220
_MARGIN = {"l": 10, "r": 10, "t": 36, "b": 10}


def _times(ts: pd.Series) -> pd.Series:
    # whole milliseconds: plotly converts to datetime, which cannot hold nanoseconds
    ms = (ts.astype("float64") * 1000.0).round().astype("int64")
    return pd.to_datetime(ms, unit="ms", utc=True)


def _frame(title: str, y_title: str, *, y_range: list[float] | None = None) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=HEIGHT,
        margin=_MARGIN,
        yaxis_title=y_title,
        showlegend=True,
        legend={"orientation": "h", "y": -0.25, "font": {"size": 10}},
    )
    if y_range is not None:
        fig.update_yaxes(range=y_range)
    return fig


def source_lines(
    df: pd.DataFrame,
    *,
    title: str,
    y_title: str,
    key: str = "target",
    value: str = "value",
    stale: Collection[str] = (),
    scale: float = 1.0,
    y_range: list[float] | None = None,
    labels: dict[str, str] | None = None,
) -> go.Figure:
    """One line per ``key`` (target or host) of ``value`` over ``ts``; stale ones dotted."""
    fig = _frame(title, y_title, y_range=y_range)
    if df.empty:
        fig.update_layout(title={"text": f"{title}: no samples"})
        return fig
    for name, part in df.sort_values("ts").groupby(key, sort=True):
        shown = (labels or {}).get(str(name), str(name))
        fig.add_trace(
            go.Scatter(
                x=_times(part["ts"]),
                y=part[value].astype("float64") * scale,
                mode="lines",
                name=shown + (" (stale)" if name in stale else ""),
                line={"dash": "dot" if name in stale else "solid", "width": 1.5},
            )
        )
    return fig


def engine_metric_chart(
    series: pd.DataFrame,
    metric: str,
    *,
    title: str,
    y_title: str,
    stale: Collection[str] = (),
    scale: float = 1.0,
    y_range: list[float] | None = None,
    labels: dict[str, str] | None = None,
) -> go.Figure:
    """A normalised gauge (``series``: target, ts, metric, value) per target over time."""
    part = series[series["metric"] == metric] if not series.empty else series
    return source_lines(
        part,
        title=title,
        y_title=y_title,
        stale=stale,
        scale=scale,
        y_range=y_range,
        labels=labels,
    )


def rate_chart(
    rates: pd.DataFrame,
    *,
    title: str,
    y_title: str,
    stale: Collection[str] = (),
    labels: dict[str, str] | None = None,
) -> go.Figure:
    """Counter rates (``rates``: target, ts, rate) per target over time."""
    return source_lines(
        rates, title=title, y_title=y_title, value="rate", stale=stale, labels=labels
    )


def _gpu_key(df: pd.DataFrame) -> pd.Series:
    return df["host"].astype(str) + " / GPU " + df["gpu_index"].astype(str)


def gpu_memory_chart(gpus: pd.DataFrame, *, stale: Collection[str] = ()) -> go.Figure:
    """Used GPU memory (GiB) per GPU over time, with each GPU's total as a dashed line."""
    fig = _frame("GPU memory used", "GiB")
    if gpus.empty:
        fig.update_layout(title={"text": "GPU memory used: no samples"})
        return fig
    df = gpus.assign(gpu=_gpu_key(gpus)).sort_values("ts")
    for name, part in df.groupby("gpu", sort=True):
        host = str(part["host"].iloc[0])
        dotted = host in stale
        fig.add_trace(
            go.Scatter(
                x=_times(part["ts"]),
                y=part["mem_used_bytes"].astype("float64") / GIB,
                mode="lines",
                name=str(name) + (" (stale)" if dotted else ""),
                line={"dash": "dot" if dotted else "solid", "width": 1.5},
            )
        )
        total = part["mem_total_bytes"].astype("float64").dropna()
        if not total.empty:
            fig.add_trace(
                go.Scatter(
                    x=[_times(part["ts"]).iloc[0], _times(part["ts"]).iloc[-1]],
                    y=[total.iloc[-1] / GIB] * 2,
                    mode="lines",
                    name=f"{name} total",
                    line={"dash": "dash", "width": 1},
                    showlegend=False,
                )
            )
    return fig


def gpu_util_chart(gpus: pd.DataFrame, *, stale: Collection[str] = ()) -> go.Figure:
    """GPU utilisation (%) per GPU over time."""
    df = gpus.assign(gpu=_gpu_key(gpus)) if not gpus.empty else gpus.assign(gpu=[])
    df = df.dropna(subset=["util_gpu"]) if not df.empty else df
    stale_gpus = {
        g for g, h in zip(df.get("gpu", []), df.get("host", []), strict=False) if h in stale
    }
    return source_lines(
        df,
        title="GPU utilisation",
        y_title="%",
        key="gpu",
        value="util_gpu",
        stale=stale_gpus,
        scale=100.0,
        y_range=[0, 100],
    )


# --- the on-call timeline: latency, traffic, engine state and GPUs on one time axis ----------

#: Colours of the percentile lines (ascending percentiles), the SLO limit and breaches.
_PCT_COLOURS = ("#9ecae1", "#4292c6", "#fd8d3c", "#08306b")
BREACH_COLOUR = "#d62728"
TIMELINE_ROW_PX = 165


@dataclass(frozen=True)
class LatencyRow:
    """One latency row of the timeline: its title, windows (``summed_histogram_windows``
    columns, seconds) and the SLO limit drawn on it (seconds; None: none)."""

    title: str
    windows: pd.DataFrame
    limit_s: float | None = None
    limit_label: str = ""


def window_mid(windows: pd.DataFrame) -> pd.Series:
    """Each window's midpoint (epoch seconds): where its percentile is drawn."""
    return (windows["window_start"].astype("float64") + windows["window_end"].astype("float64")) / 2


def _pct_label(column: str) -> str:
    return "P" + column[1:].replace("_", ".")


def _latency_traces(
    fig: go.Figure, row: int, spec: LatencyRow, columns: Sequence[str], slo_column: str | None
) -> None:
    w = spec.windows
    if w.empty:
        return
    x = _times(window_mid(w))
    for i, col in enumerate(columns):
        if col not in w.columns:
            continue
        judged = col == slo_column
        phrase = w.get(f"{col}_precision", pd.Series([""] * len(w))).fillna("").astype(str)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=w[col].astype("float64"),
                mode="lines+markers",
                name=_pct_label(col),  # the row's title says which latency
                legendgroup=_pct_label(col),
                showlegend=row == 1,
                line={"width": 2.2 if judged else 1.2, "color": _PCT_COLOURS[i % 4]},
                marker={"size": 4 if judged else 3},
                customdata=phrase,
                hovertemplate="%{y:.3f} s · %{customdata}<extra>%{fullData.name}</extra>",
            ),
            row=row,
            col=1,
        )
    if spec.limit_s is not None:
        lo, hi = float(w["window_start"].min()), float(w["window_end"].max())
        fig.add_trace(
            go.Scatter(
                x=_times(pd.Series([lo, hi])),
                y=[spec.limit_s, spec.limit_s],
                mode="lines",
                name=spec.limit_label or f"{spec.title} SLO limit",
                line={"dash": "dash", "color": BREACH_COLOUR, "width": 1.2},
                hovertemplate="%{y:.3f} s<extra>%{fullData.name}</extra>",
            ),
            row=row,
            col=1,
        )


def _breach_markers(
    fig: go.Figure, row: int, spec: LatencyRow, flags: pd.Series | None, slo_column: str | None
) -> None:
    """Red crosses (trace ``breach``) on the judged percentile of the windows whose ``flags``
    are True."""
    w = spec.windows
    if flags is None or w.empty or slo_column is None or slo_column not in w.columns:
        return
    hit = w[w["window_start"].isin(flags[flags].index)]
    if hit.empty:
        return
    fig.add_trace(
        go.Scatter(
            x=_times(window_mid(hit)),
            y=hit[slo_column].astype("float64"),
            mode="markers",
            name="breach",
            legendgroup="breach",
            showlegend=not any(t.name == "breach" for t in fig.data),
            marker={"symbol": "x", "size": 10, "color": BREACH_COLOUR},
            hovertemplate="breach: %{y:.3f} s<extra>%{fullData.name}</extra>",
        ),
        row=row,
        col=1,
    )


def timeline_figure(
    latency: Sequence[LatencyRow],
    *,
    columns: Sequence[str],
    slo_column: str | None = None,
    breach_flags: Sequence[pd.Series | None] = (),
    breaches: pd.DataFrame | None = None,
    requests: pd.DataFrame | None = None,
    state: pd.DataFrame | None = None,
    preemptions: pd.DataFrame | None = None,
    gpus: pd.DataFrame | None = None,
    labels: Mapping[str, str] | None = None,
    stale: Collection[str] = (),
    stale_hosts: Collection[str] = (),
) -> go.Figure:
    """The on-call timeline: one row per latency histogram (percentiles ``columns`` per window,
    the SLO limit dashed, breached windows crossed on ``slo_column``), then requests/s with the
    error rate, running and waiting requests, KV-cache usage with preemptions/s, and GPU memory
    and utilisation — all on one shared time axis. ``breaches`` (window_start, window_end,
    reason) are shaded red across every row. ``breach_flags``: per latency row, a boolean
    Series indexed by window_start (that row's own breach), or None."""
    n_lat = len(latency)
    titles = [
        *(f"{r.title} (s)" for r in latency),
        "Requests/s · error rate %",
        "Running · waiting requests",
        "KV-cache usage % · preemptions/s",
        "GPU memory used % · utilisation %",
    ]
    rows = len(titles)
    specs = [[{"secondary_y": i in (n_lat, n_lat + 2)}] for i in range(rows)]
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035,
        subplot_titles=titles,
        specs=specs,
    )
    for i, spec in enumerate(latency, start=1):
        _latency_traces(fig, i, spec, columns, slo_column)
        flags = breach_flags[i - 1] if i - 1 < len(breach_flags) else None
        _breach_markers(fig, i, spec, flags, slo_column)
        fig.update_yaxes(rangemode="tozero", row=i, col=1)
    r_req = n_lat + 1
    if requests is not None and not requests.empty:
        x = _times(window_mid(requests))
        fig.add_trace(
            go.Scatter(
                x=x,
                y=requests["request_rate"].astype("float64"),
                mode="lines+markers",
                name="requests/s",
                line={"width": 1.5, "color": "#2ca02c"},
                marker={"size": 3},
            ),
            row=r_req,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=requests["error_rate"].astype("float64") * 100.0,
                mode="lines+markers",
                name="error rate %",
                line={"width": 1.2, "color": BREACH_COLOUR, "dash": "dot"},
                marker={"size": 3},
            ),
            row=r_req,
            col=1,
            secondary_y=True,
        )
    shown = dict(labels or {})
    engine = state if state is not None else pd.DataFrame(columns=["target", "metric"])
    for metric, dash in (("requests_running", "solid"), ("requests_waiting", "dash")):
        part = engine[engine["metric"] == metric] if not engine.empty else engine
        for name, df in (
            part.sort_values("ts").groupby("target", sort=True) if not part.empty else []
        ):
            label = shown.get(str(name), str(name))
            fig.add_trace(
                go.Scatter(
                    x=_times(df["ts"]),
                    y=df["value"].astype("float64"),
                    mode="lines",
                    name=f"{metric.split('_')[1]} · {label}"
                    + (" (stale)" if name in stale else ""),
                    line={"dash": "dot" if name in stale else dash, "width": 1.3},
                ),
                row=n_lat + 2,
                col=1,
            )
    kv = engine[engine["metric"] == "kv_cache_usage"] if not engine.empty else engine
    for name, df in kv.sort_values("ts").groupby("target", sort=True) if not kv.empty else []:
        label = shown.get(str(name), str(name))
        fig.add_trace(
            go.Scatter(
                x=_times(df["ts"]),
                y=df["value"].astype("float64") * 100.0,
                mode="lines",
                name=f"KV % · {label}" + (" (stale)" if name in stale else ""),
                line={"width": 1.3, "dash": "dot" if name in stale else "solid"},
            ),
            row=n_lat + 3,
            col=1,
        )
    fig.update_yaxes(range=[0, 100], row=n_lat + 3, col=1, secondary_y=False)
    for row in (r_req, n_lat + 3):  # rates and counts start at 0 on both sides
        fig.update_yaxes(rangemode="tozero", row=row, col=1, secondary_y=True)
    fig.update_yaxes(rangemode="tozero", row=r_req, col=1, secondary_y=False)
    pre = preemptions if preemptions is not None else pd.DataFrame(columns=["target"])
    for name, df in pre.sort_values("ts").groupby("target", sort=True) if not pre.empty else []:
        label = shown.get(str(name), str(name))
        fig.add_trace(
            go.Scatter(
                x=_times(df["ts"]),
                y=df["rate"].astype("float64"),
                mode="lines",
                name=f"preemptions/s · {label}",
                line={"width": 1.0, "dash": "dash", "color": "#9467bd"},
            ),
            row=n_lat + 3,
            col=1,
            secondary_y=True,
        )
    if gpus is not None and not gpus.empty:
        g = gpus.assign(gpu=_gpu_key(gpus)).sort_values("ts")
        for name, df in g.groupby("gpu", sort=True):
            dotted = str(df["host"].iloc[0]) in stale_hosts
            used = df["mem_used_bytes"].astype("float64") / df["mem_total_bytes"].astype("float64")
            fig.add_trace(
                go.Scatter(
                    x=_times(df["ts"]),
                    y=used * 100.0,
                    mode="lines",
                    name=f"memory % · {name}",
                    line={"width": 1.3, "dash": "dot" if dotted else "solid"},
                ),
                row=n_lat + 4,
                col=1,
            )
            if df["util_gpu"].notna().any():
                fig.add_trace(
                    go.Scatter(
                        x=_times(df["ts"]),
                        y=df["util_gpu"].astype("float64") * 100.0,
                        mode="lines",
                        name=f"util % · {name}",
                        line={"width": 1.0, "dash": "dash"},
                    ),
                    row=n_lat + 4,
                    col=1,
                )
        fig.update_yaxes(range=[0, 105], row=n_lat + 4, col=1)
    for rec in (breaches if breaches is not None else pd.DataFrame()).to_dict("records"):
        x0, x1 = _times(pd.Series([float(rec["window_start"]), float(rec["window_end"])]))
        fig.add_shape(  # one band over every row (the x axes are matched)
            type="rect",
            xref="x",
            yref="paper",
            x0=x0,
            x1=x1,
            y0=0,
            y1=1,
            fillcolor=BREACH_COLOUR,
            opacity=0.15,
            line_width=0,
            layer="below",
            name="breach",
        )
    fig.update_layout(
        height=TIMELINE_ROW_PX * rows,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        legend={"orientation": "h", "y": -0.04, "font": {"size": 10}},
        dragmode="select",
        selectdirection="h",
        hovermode="x unified",
    )
    fig.update_annotations(font_size=12)
    return fig


def selected_range(selection: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """The time range (epoch seconds, ascending) a box selection on the timeline covers, else
    the span of the selected points (one point: lo == hi); None when nothing is selected.
    Plotly reports date axes as ``"2026-12-02 00:55:12.345"`` (UTC here: the figures draw
    UTC)."""
    if not selection:
        return None
    xs: list[Any] = []
    for box in selection.get("box") or []:
        xs += list(box.get("x") or [])
    if not xs:
        xs = [p.get("x") for p in selection.get("points") or [] if p.get("x") is not None]
    stamps = [_epoch(x) for x in xs]
    values = [s for s in stamps if s is not None]
    if not values:
        return None
    return min(values), max(values)


def _epoch(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return float(x) / 1000.0  # plotly's numeric dates are milliseconds
    try:
        stamp = pd.Timestamp(str(x))
    except (ValueError, TypeError):
        return None
    if stamp is pd.NaT:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return float(stamp.timestamp())


# --- the production length mix ---------------------------------------------------------------


def bucket_labels(edges: Sequence[float]) -> list[str]:
    """``(lo, le]`` bucket names: ``≤128``, ``129–256``, …, ``>4 096`` for the +Inf bucket."""
    out = []
    lo = 0.0
    for i, le in enumerate(edges):
        if math.isinf(le):
            out.append(f">{lo:,.0f}".replace(",", " "))
        elif i == 0:
            out.append(f"≤{le:,.0f}".replace(",", " "))
        else:
            out.append(f"{lo:,.0f}–{le:,.0f}".replace(",", " "))
        lo = le
    return out


def length_mix_figure(dists: Sequence[tuple[str, LengthDist | None]]) -> go.Figure:
    """One bar chart per length distribution (title, dist): the share of requests per bucket
    (%), the count in the hover; an empty or missing distribution says so in its title."""
    titles = [f"{t}: no requests" if d is None or d.total <= 0 else t for t, d in dists]
    fig = make_subplots(rows=1, cols=max(1, len(dists)), subplot_titles=titles)
    for i, (title, dist) in enumerate(dists, start=1):
        if dist is None or dist.total <= 0:
            continue
        fig.add_trace(
            go.Bar(
                x=bucket_labels(dist.edges),
                y=[s * 100.0 for s in dist.shares],
                customdata=list(dist.counts),
                name=title,
                hovertemplate=(
                    "%{x} tokens: %{y:.1f} % (%{customdata:,.0f} requests)<extra></extra>"
                ),
            ),
            row=1,
            col=i,
        )
        fig.update_yaxes(title_text="% of requests", row=1, col=i)
        fig.update_xaxes(title_text="tokens", type="category", row=1, col=i)
    fig.update_layout(height=HEIGHT + 40, margin=_MARGIN, showlegend=False)
    fig.update_annotations(font_size=13)
    return fig
