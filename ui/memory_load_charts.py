"""Pure Plotly figure builder of the Memory page's "Memory vs load" (no Streamlit, no I/O).

One figure, one shared load axis (concurrency or request rate): peak GPU memory, KV-cache usage
(peak and P95, with the performance model's predicted usage and its 100 % capacity line), and
preemptions per 1,000 requests (the total in the hover), with the measured and the predicted
knee as vertical lines. Input: ``services.views.memory.MemoryLoadView``.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from services.views.memory import MemoryLoadView
from ui.memory_charts import GIB, MARGIN

ROWS = ("peak GPU memory (GiB)", "KV-cache usage", "preemptions per 1,000 requests")
AXIS = {"concurrency": "concurrency (streams in flight)", "rate": "request rate (req/s)"}


def _values(points: pd.DataFrame, column: str, scale: float = 1.0) -> list[float | None]:
    return [None if pd.isna(v) else round(float(v) / scale, 4) for v in points[column]]


def memory_vs_load(view: MemoryLoadView) -> go.Figure:
    """Peak GPU memory, KV usage (peak, P95, predicted) and preemptions against load."""
    points = view.points
    x = points["load"].tolist()
    names = points["name"].tolist()
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=ROWS
    )
    if points["gpu_peak_bytes"].notna().any():
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_values(points, "gpu_peak_bytes", GIB),
                mode="lines+markers",
                name="peak GPU memory",
                text=names,
                hovertemplate="%{text}<br>%{x}: %{y:,.1f} GiB<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_values(points, "gpu_total_bytes", GIB),
                mode="lines",
                line={"dash": "dash"},
                name="GPU memory total",
            ),
            row=1,
            col=1,
        )
    else:
        _note(fig, "no GPU samples for these runs", 1)
    for column, label, dash in (("kv_peak", "KV peak", None), ("kv_p95", "KV P95", "dot")):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_values(points, column),
                mode="lines+markers",
                line={"dash": dash},
                name=label,
                text=names,
                hovertemplate="%{text}<br>%{x}: %{y:.1%}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    if view.prediction.capacity_tokens is not None:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_values(points, "predicted_kv"),
                mode="lines",
                line={"dash": "dash"},
                name="predicted KV usage",
                customdata=points[["in_flight", "held_tokens"]].round(1).to_numpy(),
                hovertemplate="%{x}: %{y:.1%} predicted<br>%{customdata[0]} sequences × "
                "%{customdata[1]} tokens<extra></extra>",
            ),
            row=2,
            col=1,
        )
        fig.add_hline(
            y=1.0,
            line={"dash": "dot", "color": "grey"},
            annotation_text=f"KV capacity {view.prediction.capacity_tokens:,.0f} tokens",
            annotation_position="bottom left",
            row=2,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            x=x,
            y=_values(points, "preemptions_per_1k"),
            name="preemptions per 1,000 requests",
            customdata=points[["preemptions", "requests"]].to_numpy(),
            hovertemplate="%{x}: %{y:,.1f} per 1,000<br>%{customdata[0]:,.0f} preemptions in "
            "%{customdata[1]:,} requests<extra></extra>",
        ),
        row=3,
        col=1,
    )
    _knees(fig, view)
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text=AXIS.get(view.kind or "", "load"), row=3, col=1)
    fig.update_layout(
        height=760,
        title={"text": "Memory against load"},
        margin=MARGIN,
        legend={"orientation": "h"},
    )
    return fig


def _knees(fig: go.Figure, view: MemoryLoadView) -> None:
    """Both knees as vertical lines through every row, named once on the top row: the lower
    knee's name left of its line, the higher's right of it (close knees do not overprint)."""
    knees = []
    knee = view.measured_knee
    if knee is not None and knee.load is not None:
        knees.append((knee.load, "measured", {"color": "firebrick"}))
    if view.predicted_knee is not None:
        knees.append((view.predicted_knee, "predicted", {"color": "royalblue", "dash": "dash"}))
    knees.sort(key=lambda k: k[0])
    sides = ("top left", "top right") if len(knees) == 2 else ("top right",) * len(knees)
    for (x, which, line), position in zip(knees, sides, strict=True):
        fig.add_vline(
            x=x,
            line=line,
            row=1,
            col=1,
            annotation_text=f"{which} knee {x:,.3g}",
            annotation_position=position,
        )
        for row in range(2, len(ROWS) + 1):  # the same line, unnamed, through the other rows
            fig.add_shape(
                type="line",
                x0=x,
                x1=x,
                y0=0,
                y1=1,
                xref=f"x{row}",
                yref=f"y{row} domain",
                line=line,
            )


def _note(fig: go.Figure, text: str, row: int) -> None:
    fig.add_annotation(
        text=text,
        showarrow=False,
        xref="x domain",
        yref="y domain",
        x=0.5,
        y=0.5,
        row=row,
        col=1,
    )
