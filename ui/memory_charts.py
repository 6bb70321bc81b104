"""Pure Plotly figure builders for the Memory page (no Streamlit, no I/O).

One figure, one shared time axis (``make_subplots(shared_xaxes=True)``): GPU memory used and
total per GPU, KV-cache usage, running / waiting requests, preemptions per bin. Inputs are the
binned series of ``store.memory_queries``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

MARGIN = {"l": 10, "r": 10, "t": 60, "b": 10}
GIB = 2**30
ROWS = ("GPU memory (GiB)", "KV-cache usage", "requests", "preemptions")


def _times(ts: pd.Series | np.ndarray) -> list[str]:
    return [
        pd.Timestamp(float(t), unit="s").strftime("%Y-%m-%d %H:%M:%S")
        for t in np.asarray(ts, dtype="float64")
    ]


def preemption_steps(engine: pd.DataFrame) -> pd.DataFrame:
    """Preemptions per bin from the cumulative counter (restarts counted from zero):
    columns target, ts, value."""
    parts = []
    for target, part in engine[engine["metric"] == "preemptions_total"].groupby("target"):
        part = part.sort_values("ts")
        v = part["value"].to_numpy(dtype="float64")
        if v.size < 2:
            continue
        d = np.diff(v)
        parts.append(
            pd.DataFrame(
                {
                    "target": target,
                    "ts": part["ts"].to_numpy()[1:],
                    "value": np.where(d < 0, v[1:], d),
                }
            )
        )
    if not parts:
        return pd.DataFrame({"target": [], "ts": [], "value": []})
    return pd.concat(parts, ignore_index=True)


def memory_timeline(
    engine: pd.DataFrame, gpu: pd.DataFrame, *, cap_fraction: float | None = None
) -> go.Figure:
    """GPU memory, KV usage, running/waiting and preemptions on one shared time axis.

    ``cap_fraction``: the SLO profile's memory cap (0..1 of each GPU's total), drawn as a
    dotted line on the GPU-memory row.
    """
    fig = make_subplots(
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05, subplot_titles=ROWS
    )
    if not gpu.empty:
        for (host, idx), part in gpu.groupby(["host", "gpu_index"], sort=True):
            name = f"{host}:{idx}"
            x = _times(part["ts"])
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=(part["mem_used_bytes"] / GIB).round(3).tolist(),
                    mode="lines",
                    name=f"used · {name}",
                ),
                row=1,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=(part["mem_total_bytes"] / GIB).round(3).tolist(),
                    mode="lines",
                    line={"dash": "dash"},
                    name=f"total · {name}",
                ),
                row=1,
                col=1,
            )
            if cap_fraction is not None:
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=(part["mem_total_bytes"] * cap_fraction / GIB).round(3).tolist(),
                        mode="lines",
                        line={"dash": "dot"},
                        name=f"cap {cap_fraction:.0%} · {name}",
                    ),
                    row=1,
                    col=1,
                )
    else:
        fig.add_annotation(
            text="no GPU samples for this span",
            showarrow=False,
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
            row=1,
            col=1,
        )
    rows: Mapping[str, int] = {"kv_cache_usage": 2, "requests_running": 3, "requests_waiting": 3}
    for (target, metric), part in engine.groupby(["target", "metric"], sort=True):
        if metric not in rows:
            continue
        fig.add_trace(
            go.Scatter(
                x=_times(part["ts"]),
                y=part["value"].round(4).tolist(),
                mode="lines",
                name=f"{str(metric).removeprefix('requests_')} · {target}",
            ),
            row=rows[str(metric)],
            col=1,
        )
    steps = preemption_steps(engine) if not engine.empty else pd.DataFrame()
    for target, part in steps.groupby("target", sort=True) if not steps.empty else []:
        fig.add_trace(
            go.Bar(
                x=_times(part["ts"]),
                y=part["value"].round(3).tolist(),
                name=f"preemptions · {target!s}",
            ),
            row=4,
            col=1,
        )
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=2, col=1)
    fig.update_layout(
        height=760,
        title={"text": "Memory, KV cache and queue on one time axis (UTC)"},
        margin=MARGIN,
        legend={"orientation": "h"},
    )
    return fig


def aligned_runs_chart(aligned: pd.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """KV usage (top) and GPU memory used (bottom) of several runs, x = seconds since start."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("KV-cache usage", "GPU memory used (GiB)"),
    )
    for (run_id, series), part in aligned.groupby(["run_id", "series"], sort=True):
        row = 1 if series == "kv_cache_usage" else 2
        y = part["value"] if row == 1 else part["value"] / GIB
        fig.add_trace(
            go.Scatter(
                x=part["t"].round(3).tolist(),
                y=y.round(4).tolist(),
                mode="lines",
                name=labels.get(str(run_id), str(run_id)),
                legendgroup=str(run_id),
                showlegend=row == 1
                or "kv_cache_usage" not in set(aligned.loc[aligned["run_id"] == run_id, "series"]),
            ),
            row=row,
            col=1,
        )
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=1, col=1)
    fig.update_xaxes(title_text="seconds since run start", row=2, col=1)
    fig.update_layout(title={"text": "Runs aligned at their start"}, margin=MARGIN)
    return fig
