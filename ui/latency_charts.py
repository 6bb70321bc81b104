"""Pure Plotly figure builders for the Latency page (no Streamlit, no I/O).

Inputs are the DataFrames of ``store.latency_queries`` and ``analysis.latency``; bucket indices
are turned into labels with ``analysis.buckets.bucket_labels``. Percentiles from too few
samples are marked (``analysis.metrics.low_confidence``): a ⚠ in the bucket's label and a
lighter bar.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.latency import BUCKET_PERCENTILES, Trend, trend_too_short
from analysis.metrics import low_confidence

MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}
STATUS_COLOURS = {"ok": "#2e7d32", "error": "#c62828", "timeout": "#ef6c00", "cancelled": "#757575"}


def _empty(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": title}, margin=MARGIN)
    return fig


def _times(ts: pd.Series | np.ndarray | Sequence[float]) -> list[str]:
    """Epoch seconds → ISO UTC strings (stable in figure specs)."""
    return [
        pd.Timestamp(float(t), unit="s").strftime("%Y-%m-%d %H:%M:%S")
        for t in np.asarray(ts, dtype="float64")
    ]


def bucket_label(label: str, n: int) -> str:
    """``"<256 (n=42 ⚠)"``: the bucket and its sample count, ⚠ when its P99 is low-confidence."""
    return f"{label} (n={n:,}{' ⚠' if low_confidence(99.0, n) else ''})"


def bucket_percentiles(df: pd.DataFrame, labels: Sequence[str], metric: str) -> go.Figure:
    """Grouped bars: P50 … P99.9 of ``metric`` per bucket (rows of one metric of
    ``bucket_latency``); buckets whose P99 is low-confidence are drawn lighter."""
    df = df[df["bucket"] >= 0] if not df.empty else df  # −1: every bucket together
    if df.empty:
        return _empty(f"{metric} by bucket: no samples")
    df = df.sort_values("bucket")
    x = [bucket_label(labels[int(b)], int(n)) for b, n in zip(df["bucket"], df["n"], strict=True)]
    low = [low_confidence(99.0, int(n)) for n in df["n"]]
    fig = go.Figure()
    for col, name, _ in BUCKET_PERCENTILES:
        fig.add_trace(
            go.Bar(
                x=x,
                y=[round(float(v), 3) for v in df[col]],
                name=name,
                marker={"opacity": [0.45 if lo else 1.0 for lo in low]},
                hovertemplate=f"%{{x}}<br>{name}: %{{y:,.1f}} ms<extra></extra>",
            )
        )
    fig.update_layout(
        title={"text": f"{metric} percentiles by bucket (⚠ = fewer than 100 samples)"},
        barmode="group",
        yaxis_title=f"{metric} (ms)",
        margin=MARGIN,
    )
    return fig


def ttft_heatmap(
    df: pd.DataFrame, labels: Sequence[str], *, t0: float, window_s: float
) -> go.Figure:
    """P99 TTFT per bucket (rows) × time window (columns, start time UTC); empty cells blank."""
    df = df[df["bucket"] >= 0] if not df.empty else df  # −1: every bucket together
    if df.empty:
        return _empty("P99 TTFT over time: no samples")
    df = df[df["window"] >= 0]
    windows = list(range(int(df["window"].min()), int(df["window"].max()) + 1))
    buckets = sorted({int(b) for b in df["bucket"]})
    z: list[list[float | None]] = [[None] * len(windows) for _ in buckets]
    text = [[""] * len(windows) for _ in buckets]
    for b, w, n, p in zip(df["bucket"], df["window"], df["n"], df["p99_ms"], strict=True):
        i, j = buckets.index(int(b)), windows.index(int(w))
        z[i][j] = round(float(p), 3)
        text[i][j] = f"n={int(n):,}"
    fig = go.Figure(
        go.Heatmap(
            x=_times([t0 + w * window_s for w in windows]),
            y=[labels[b] for b in buckets],
            z=z,
            text=text,
            colorscale="YlOrRd",
            colorbar={"title": {"text": "ms"}},
            hovertemplate="%{y} @ %{x}<br>P99 TTFT %{z:,.1f} ms (%{text})<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": f"P99 TTFT by input bucket, {window_s:g} s windows"},
        xaxis_title="window start (UTC)",
        yaxis_title="input tokens",
        margin=MARGIN,
    )
    return fig


def ttft_scatter(sample: pd.DataFrame, *, stride: int = 1, total: int | None = None) -> go.Figure:
    """TTFT vs input tokens, one trace per status; the title says when it is a sample."""
    pts = sample.dropna(subset=["ttft_ms", "input_tokens"]) if not sample.empty else sample
    if pts.empty:
        return _empty("TTFT vs input tokens: no samples")
    title = f"TTFT vs input tokens ({len(pts):,} requests"
    if stride > 1:
        title += f", a 1-in-{stride:,} sample of {total:,}" if total else f", 1 in {stride:,}"
    fig = go.Figure()
    for status in sorted(pts["status"].dropna().unique(), key=lambda s: (s != "ok", s)):
        part = pts[pts["status"] == status]
        fig.add_trace(
            go.Scattergl(
                x=part["input_tokens"].astype("float64").tolist(),
                y=part["ttft_ms"].astype("float64").round(3).tolist(),
                mode="markers",
                name=str(status),
                marker={"size": 4, "color": STATUS_COLOURS.get(str(status), "#1565c0")},
                hovertemplate="%{x:,} tokens: %{y:,.1f} ms<extra>" + str(status) + "</extra>",
            )
        )
    fig.update_layout(
        title={"text": title + ")"},
        xaxis_title="input tokens",
        yaxis_title="TTFT (ms)",
        margin=MARGIN,
    )
    return fig


def ttft_split(split: pd.DataFrame) -> go.Figure:
    """Stacked bars per bucket: mean prefill (fitted) and mean queueing = TTFT − prefill."""
    if split.empty:
        return _empty("TTFT split: no fit")
    x = [f"{b} (n={int(n):,})" for b, n in zip(split["bucket"], split["n"], strict=True)]
    fig = go.Figure(
        [
            go.Bar(
                x=x,
                y=split["prefill_mean_ms"].round(3).tolist(),
                name="prefill (fitted)",
                hovertemplate="%{x}<br>prefill %{y:,.1f} ms<extra></extra>",
            ),
            go.Bar(
                x=x,
                y=split["queue_mean_ms"].round(3).tolist(),
                name="queueing",
                hovertemplate="%{x}<br>queueing %{y:,.1f} ms<extra></extra>",
            ),
        ]
    )
    fig.update_layout(
        title={"text": "Mean TTFT split into prefill and queueing, by input bucket"},
        barmode="stack",
        yaxis_title="ms",
        margin=MARGIN,
    )
    return fig


def kv_and_queue(engine: pd.DataFrame) -> go.Figure:
    """KV-cache usage (top) and waiting / running requests (bottom) over time, all targets."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    if engine.empty:
        fig.update_layout(title={"text": "Engine state: no samples"}, margin=MARGIN)
        return fig
    for (target, metric), part in engine.groupby(["target", "metric"], sort=True):
        if metric not in ("kv_cache_usage", "requests_waiting", "requests_running"):
            continue
        row = 1 if metric == "kv_cache_usage" else 2
        fig.add_trace(
            go.Scatter(
                x=_times(part["ts"]),
                y=part["value"].round(4).tolist(),
                mode="lines",
                name=f"{metric} · {target}",
            ),
            row=row,
            col=1,
        )
    fig.update_yaxes(title_text="KV usage", range=[0, 1.05], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="requests", row=2, col=1)
    fig.update_layout(title={"text": "KV-cache usage and queue"}, margin=MARGIN)
    return fig


def throughput_vs_load(load: pd.DataFrame, *, current: str | None = None) -> go.Figure:
    """Output tokens/s against load (concurrency or rate) across the series' runs."""
    pts = load.dropna(subset=["load", "output_throughput"]) if not load.empty else load
    if pts.empty:
        return _empty("Throughput vs load: no other load levels")
    fig = go.Figure(
        go.Scatter(
            x=pts["load"].astype("float64").tolist(),
            y=pts["output_throughput"].astype("float64").round(3).tolist(),
            mode="lines+markers",
            name="output tokens/s",
            marker={
                "size": [14 if r == current else 8 for r in pts["run_id"]],
                "symbol": [
                    "x" if bool(cb) else "circle" for cb in pts["client_bound"].fillna(False)
                ],
            },
            hovertemplate="load %{x:g}: %{y:,.0f} tok/s<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": "Throughput vs load (× = client-bound run)"},
        xaxis_title="load (concurrency or req/s)",
        yaxis_title="output tokens/s",
        margin=MARGIN,
    )
    return fig


def trend_chart(
    ts: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    fitted: Trend | None,
    *,
    label: str,
    unit: str,
) -> go.Figure:
    """Values over time with the fitted trend line and its slope's 95 % interval in the title;
    over a window shorter than the trend rule's, no line and "too short to judge (…)" instead."""
    t = np.asarray(ts, dtype="float64")
    v = np.asarray(values, dtype="float64")
    if t.size == 0:
        return _empty(f"{label} over time: no samples")
    fig = go.Figure(go.Scatter(x=_times(t), y=np.round(v, 3).tolist(), mode="markers", name=label))
    title = f"{label} over time"
    short = trend_too_short(fitted) if fitted is not None else None
    if short is not None:
        title += f" · {short}"
    elif fitted is not None:
        x0, x1 = float(np.nanmin(t)), float(np.nanmax(t))
        fig.add_trace(
            go.Scatter(
                x=_times([x0, x1]),
                y=[round(fitted.start_value, 3), round(fitted.end_value, 3)],
                mode="lines",
                name="trend",
                line={"dash": "dash"},
            )
        )
        s, lo, hi = fitted.per_hour()
        title += f" · slope {s:+,.2f} {unit}/h (95 % CI {lo:+,.2f} … {hi:+,.2f})"
    fig.update_layout(title={"text": title}, yaxis_title=unit, margin=MARGIN)
    return fig
