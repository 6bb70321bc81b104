"""Pure Plotly builders for the Plan page and the planning-review report (DESIGN §3). No
Streamlit, no I/O: figures of a ``services.views.plan.PlanView``.

* :func:`gpus_chart`: GPUs needed per option (bars coloured by where the capacity comes from,
  measured or the model), with the cost per hour on hover.
* :func:`cost_chart`: cost per hour per serving option (only where the GPU has a price).
* :func:`memory_chart`: the memory table as grouped bars: weights per GPU and the KV budget per
  GPU for each GPU × TP, one group per precision.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from analysis.plan import PRECISION_LABELS, MemoryRow, PlanOption
from services.views.plan import PlanView

_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}
COLORS = {"measured": "#2a9d8f", "model": "#9bbcd1"}
PRECISION_COLORS = {"fp16": "#264653", "fp8": "#2a9d8f", "int8": "#e9c46a", "int4": "#f4a261"}


def _empty(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": f"{title}: nothing to show"}, margin=_MARGIN)
    return fig


def option_label(o: PlanOption) -> str:
    """``2× H100-SXM-80GB · INT8`` plus the configuration of a measured row."""
    head = f"TP{o.tp} {o.gpu} · {PRECISION_LABELS.get(o.precision, o.precision)}"
    return head if o.label != "measured" else f"{head} · {o.config}"


def _serving(options: Sequence[PlanOption]) -> list[PlanOption]:
    return [o for o in options if o.serves]


def gpus_chart(view: PlanView, limit: int = 20) -> go.Figure:
    """GPUs needed for the peak (with headroom) per serving option, fewest first, coloured by
    where the capacity comes from."""
    shown = sorted(_serving(view.options), key=lambda o: (o.gpus or 0, o.gpu))[:limit]
    if not shown:
        return _empty("GPUs needed per option")
    fig = go.Figure()
    for label in ("measured", "model"):
        group = [o for o in shown if o.label == label]
        if not group:
            continue
        fig.add_trace(
            go.Bar(
                y=[option_label(o) for o in group],
                x=[o.gpus for o in group],
                orientation="h",
                name=f"capacity {label}",
                marker={"color": COLORS[label]},
                customdata=[
                    [
                        o.replicas,
                        o.capacity_rps,
                        "—" if o.cost_per_hour is None else f"${o.cost_per_hour:,.2f}/hour",
                    ]
                    for o in group
                ],
                hovertemplate=(
                    "%{y}: %{x} GPUs (%{customdata[0]} replicas at %{customdata[1]:.3g} req/s)"
                    "<br>%{customdata[2]}<extra></extra>"
                ),
            )
        )
    fig.update_layout(
        title={"text": "GPUs needed per option"},
        xaxis={"title": {"text": "GPUs"}},
        yaxis={"categoryorder": "array", "categoryarray": [option_label(o) for o in shown][::-1]},
        margin=_MARGIN,
        legend={"orientation": "h"},
        barmode="overlay",
        height=max(300, 26 * len(shown) + 120),
    )
    return fig


def cost_chart(view: PlanView, limit: int = 20) -> go.Figure:
    """Cost per hour of each serving option whose GPU has a price, cheapest first, with the
    cost per 1M output tokens on hover."""
    priced = [o for o in _serving(view.options) if o.cost_per_hour is not None]
    shown = sorted(priced, key=lambda o: o.cost_per_hour or 0.0)[:limit]
    if not shown:
        return _empty("Cost per hour (set GPU prices)")
    fig = go.Figure(
        go.Bar(
            y=[option_label(o) for o in shown],
            x=[o.cost_per_hour for o in shown],
            orientation="h",
            marker={"color": [COLORS.get(o.label, "#888888") for o in shown]},
            customdata=[[o.cost_per_1m_output, o.cost_per_1m_total, o.label] for o in shown],
            hovertemplate=(
                "%{y}: $%{x:,.2f}/hour<br>$%{customdata[0]:,.3f} per 1M output tokens, "
                "$%{customdata[1]:,.3f} per 1M tokens (capacity %{customdata[2]})<extra></extra>"
            ),
        )
    )
    fig.update_layout(
        title={"text": "Cost per hour at the peak"},
        xaxis={"title": {"text": "US dollars per hour"}},
        yaxis={"categoryorder": "array", "categoryarray": [option_label(o) for o in shown][::-1]},
        margin=_MARGIN,
        height=max(300, 26 * len(shown) + 120),
    )
    return fig


def memory_chart(rows: Sequence[MemoryRow]) -> go.Figure:
    """Per GPU × TP: the weights per GPU and the KV budget per GPU (GiB) of each precision;
    a precision that does not fit shows no KV bar."""
    if not rows:
        return _empty("Memory per GPU")
    fig = go.Figure()
    precisions = list(dict.fromkeys(r.precision for r in rows))
    for precision in precisions:
        group = [r for r in rows if r.precision == precision]
        label = PRECISION_LABELS.get(precision, precision)
        x = [f"{r.gpu} · TP{r.tp}" for r in group]
        fig.add_trace(
            go.Bar(
                x=x,
                y=[r.weight_gib_per_gpu for r in group],
                name=f"{label} weights",
                offsetgroup=precision,
                marker={"color": PRECISION_COLORS.get(precision, "#888"), "opacity": 0.55},
                hovertemplate=f"{label} weights: %{{y:.1f}} GiB per GPU<extra></extra>",
            )
        )
        fig.add_trace(
            go.Bar(
                x=x,
                y=[max(r.kv_budget_gib, 0.0) if r.fits else 0.0 for r in group],
                base=[r.weight_gib_per_gpu for r in group],
                name=f"{label} KV budget",
                offsetgroup=precision,
                marker={"color": PRECISION_COLORS.get(precision, "#888")},
                customdata=[[r.max_sequences, r.why_not or "fits"] for r in group],
                hovertemplate=(
                    f"{label} KV budget: %{{y:.1f}} GiB per GPU, %{{customdata[0]}} sequences"
                    "<br>%{customdata[1]}<extra></extra>"
                ),
            )
        )
    fig.update_layout(
        title={"text": "Memory per GPU: weights and KV budget"},
        yaxis={"title": {"text": "GiB per GPU"}},
        barmode="group",
        margin=_MARGIN,
        legend={"orientation": "h"},
    )
    return fig
