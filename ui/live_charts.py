"""Pure Plotly builders for the Live page's small charts (no Streamlit, no I/O).

Each takes a long DataFrame (one row per sample) and returns a compact figure with one line per
source; time is shown in UTC; stale sources are drawn dotted so they read as "not current".
"""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd
import plotly.graph_objects as go

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
