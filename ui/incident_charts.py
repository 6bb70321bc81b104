"""Pure Plotly builders for the incident page (no Streamlit, no I/O): latency per sub-window
with the window under investigation shaded, the TTFT split into queueing and prefill before vs
during, the prompt-length distribution before vs during, and engine state with the GPUs on one
time axis. Time is shown in UTC."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis import engine_series, length_mix
from analysis.incident import LATENCY_LABELS
from services.views.incident import IncidentView

GIB = 1024**3
_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}
_DURING = {"fillcolor": "rgba(214, 39, 40, 0.10)", "line_width": 0}
BEFORE_COLOUR, DURING_COLOUR = "#7f7f7f", "#d62728"


def _times(ts: pd.Series | list[float]) -> pd.Series:
    ms = (pd.Series(ts, dtype="float64") * 1000.0).round().astype("int64")
    return pd.to_datetime(ms, unit="ms", utc=True)


def _utc(ts: float) -> pd.Timestamp:
    return pd.Timestamp(round(ts * 1000), unit="ms", tz="UTC")


def _shade(fig: go.Figure, view: IncidentView, **where: object) -> None:
    """Shade the window under investigation (the "during" span)."""
    fig.add_vrect(x0=_utc(view.request.start), x1=_utc(view.request.end), **_DURING, **where)


def latency_chart(view: IncidentView) -> go.Figure:
    """P99 (solid) and P50 (dotted) of each latency histogram per sub-window, log scale; the
    window under investigation shaded."""
    fig = go.Figure()
    title = f"Latency per {view.window_s:g} s window (P99 solid, P50 dotted)"
    drawn = False
    for hist, label in LATENCY_LABELS.items():
        df = view.windows.get(hist)
        if df is None or df.empty or not (df["count"] > 0).any():
            continue
        ok = df[df["count"] > 0]
        for q, dash in (("p99", "solid"), ("p50", "dot")):
            if q not in ok:
                continue
            fig.add_trace(
                go.Scatter(
                    x=_times(ok["window_end"]),
                    y=ok[q].astype("float64") * 1000.0,
                    mode="lines+markers",
                    marker={"size": 4},
                    name=f"{label} {q.upper()}",
                    legendgroup=hist,
                    line={"dash": dash, "width": 1.5},
                )
            )
            drawn = True
    fig.update_layout(
        title={"text": title if drawn else f"{title}: no requests", "font": {"size": 14}},
        height=340,
        margin=_MARGIN,
        yaxis_title="ms",
        yaxis_type="log",
        legend={"orientation": "h", "y": -0.2, "font": {"size": 10}},
    )
    _shade(fig, view)
    return fig


def ttft_split_chart(view: IncidentView) -> go.Figure:
    """Mean TTFT before vs during, split into queueing, prefill and the rest (ms)."""
    fig = go.Figure()
    spans = (("before", view.before), ("during", view.during))
    parts: dict[str, list[float]] = {"queueing": [], "prefill": [], "rest": []}
    for _, span in spans:
        ttft = span.latency.get("ttft_seconds")
        queue = span.latency.get("queue_time_seconds")
        prefill = span.latency.get("prefill_time_seconds")
        total = ttft.mean if ttft is not None and ttft.mean is not None else math.nan
        q = queue.mean if queue is not None and queue.mean is not None else math.nan
        p = prefill.mean if prefill is not None and prefill.mean is not None else math.nan
        known = sum(x for x in (q, p) if not math.isnan(x))
        parts["queueing"].append(q * 1000.0)
        parts["prefill"].append(p * 1000.0)
        parts["rest"].append(max(total - known, 0.0) * 1000.0)
    for name, colour in (("queueing", "#d62728"), ("prefill", "#1f77b4"), ("rest", "#c7c7c7")):
        fig.add_trace(
            go.Bar(x=[s for s, _ in spans], y=parts[name], name=name, marker_color=colour)
        )
    empty = all(math.isnan(v) for v in parts["rest"])
    title = "Mean TTFT: queueing vs prefill"
    fig.update_layout(
        title={"text": title + (": no TTFT histogram" if empty else ""), "font": {"size": 14}},
        barmode="stack",
        height=300,
        margin=_MARGIN,
        yaxis_title="ms",
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _bucket_label(lo: float, hi: float) -> str:
    if math.isinf(hi):
        return f">{lo:,.0f}"
    return f"≤{hi:,.0f}" if lo == 0 else f"{lo:,.0f}–{hi:,.0f}"


def prompt_length_chart(view: IncidentView) -> go.Figure:
    """Share of requests per prompt-length bucket, before vs during."""
    fig = go.Figure()
    title = "Prompt length before vs during"
    dists = (
        ("before", view.prompt_before, BEFORE_COLOUR),
        ("during", view.prompt_during, DURING_COLOUR),
    )
    drawn = False
    for name, d, colour in dists:
        if d.total <= 0:
            continue
        labels = [_bucket_label(lo, hi) for lo, hi in zip(d.lowers, d.edges, strict=True)]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[s * 100 for s in d.shares],
                name=f"{name} ({length_mix.describe(d)})",
                marker_color=colour,
            )
        )
        drawn = True
    if drawn and not math.isnan(view.length_distance):
        title += f" (KS distance {view.length_distance:.2f})"
    fig.update_layout(
        title={
            "text": title if drawn else f"{title}: no prompt-length histogram",
            "font": {"size": 14},
        },
        barmode="group",
        height=300,
        margin=_MARGIN,
        xaxis_title="prompt tokens",
        yaxis_title="% of requests",
        legend={"orientation": "h", "y": -0.35, "font": {"size": 10}},
    )
    return fig


def _summed(state: pd.DataFrame, metric: str, how: str = "sum") -> pd.DataFrame:
    part = state[state["metric"] == metric]
    if part.empty:
        return part
    wide = part.pivot_table(index="ts", columns="target", values="value", aggfunc="last")
    wide = wide.sort_index().ffill()
    value = wide.max(axis=1) if how == "max" else wide.sum(axis=1, min_count=1)
    return pd.DataFrame({"ts": wide.index.to_numpy(dtype="float64"), "value": value.to_numpy()})


def preemption_rate(view: IncidentView) -> pd.DataFrame:
    """Preemptions per second, averaged over each sub-window of the charts and summed over the
    targets (resets handled): columns window_end, rate."""
    rates = engine_series.rate_series(view.state, "preemptions_total")
    if rates.empty:
        return pd.DataFrame({"window_end": [], "rate": []})
    origin = view.request.before[0]
    index = ((rates["ts"] - origin) / view.window_s).apply(math.ceil).clip(lower=1)
    per_target = rates.assign(w=index).groupby(["w", "target"], sort=True)["rate"].mean()
    summed = per_target.groupby(level="w").sum()
    ends = origin + summed.index.to_numpy(dtype="float64") * view.window_s
    return pd.DataFrame({"window_end": ends, "rate": summed.to_numpy()})


def state_chart(view: IncidentView) -> go.Figure:
    """Engine state and the GPUs on one time axis: running and waiting requests (summed over
    targets), KV-cache usage (the fullest target), preemptions per second, GPU memory used and
    utilisation (%); the window under investigation shaded."""
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(
            "Requests running / waiting",
            "KV-cache usage (%)",
            "Preemptions per second (mean per window)",
            "GPU memory used / utilisation (%)",
        ),
    )
    state = view.state
    if not state.empty:
        for metric, name, colour in (
            ("requests_running", "running", "#1f77b4"),
            ("requests_waiting", "waiting", "#d62728"),
        ):
            s = _summed(state, metric)
            if not s.empty:
                fig.add_trace(
                    go.Scatter(x=_times(s["ts"]), y=s["value"], name=name, mode="lines",
                               line={"color": colour, "width": 1.5}),
                    row=1, col=1,
                )  # fmt: skip
        kv = _summed(state, "kv_cache_usage", "max")
        if not kv.empty:
            fig.add_trace(
                go.Scatter(x=_times(kv["ts"]), y=kv["value"] * 100, name="KV usage",
                           mode="lines", line={"color": "#9467bd", "width": 1.5}),
                row=2, col=1,
            )  # fmt: skip
        per_window = preemption_rate(view)
        if not per_window.empty:
            fig.add_trace(
                go.Scatter(x=_times(per_window["window_end"]), y=per_window["rate"],
                           name="preemptions/s", mode="lines+markers", marker={"size": 4},
                           line={"color": "#ff7f0e", "width": 1.5}),
                row=3, col=1,
            )  # fmt: skip
    gpus = view.gpus
    if not gpus.empty:
        for (host, index), part in gpus.sort_values("ts").groupby(["host", "gpu_index"]):
            used = pd.to_numeric(part["mem_used_bytes"], errors="coerce")
            total = pd.to_numeric(part["mem_total_bytes"], errors="coerce")
            fig.add_trace(
                go.Scatter(x=_times(part["ts"]), y=(used / total * 100).to_numpy(),
                           name=f"{host} GPU {index} memory", mode="lines",
                           line={"width": 1.5}),
                row=4, col=1,
            )  # fmt: skip
            util = pd.to_numeric(part["util_gpu"], errors="coerce")
            if util.notna().any():
                fig.add_trace(
                    go.Scatter(x=_times(part["ts"]), y=(util * 100).to_numpy(),
                               name=f"{host} GPU {index} utilisation", mode="lines",
                               line={"width": 1, "dash": "dot"}),
                    row=4, col=1,
                )  # fmt: skip
    title = "Engine state and GPUs"
    if state.empty and gpus.empty:
        title += ": no samples"
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=720,
        margin=_MARGIN,
        legend={"orientation": "h", "y": -0.08, "font": {"size": 10}},
    )
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_yaxes(range=[0, 105], row=4, col=1)
    for row in range(1, 5):
        _shade(fig, view, row=row, col=1)
    return fig
