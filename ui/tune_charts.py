"""Pure Plotly builders for the Tune page (DESIGN §3, §11.8). No Streamlit, no I/O.

Inputs come from the Tune view model (``services.views.tune.TuneView``): a parameter's effect
(``analysis.recommend.ParamEffect``), the points' summaries (``PointSummary``) and the
capacity-search curves (one row per measured load: label, repeat, load, ratio, passed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from analysis.recommend import ParamEffect, PointSummary, value_text

_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}


def _empty(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": f"{title}: nothing to show"}, margin=_MARGIN)
    return fig


def effect_chart(effect: ParamEffect | None, unit: str) -> go.Figure:
    """SLO capacity by the parameter's value: bars with the best point's other parameters
    (the recommended value highlighted), and a line of the mean over every completed point."""
    if effect is None or not effect.values:
        return _empty("Effect of a parameter")
    x = [value_text(v.value) for v in effect.values]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=x,
            y=[v.at_best for v in effect.values],
            name="others at the recommended values",
            marker={"color": ["#2a9d8f" if v.is_best else "#9bbcd1" for v in effect.values]},
            hovertemplate=f"{effect.param}=%{{x}}: %{{y:.3g}} {unit}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[v.marginal for v in effect.values],
            mode="lines+markers",
            name="mean over all completed points",
            customdata=[v.n for v in effect.values],
            hovertemplate=(
                f"{effect.param}=%{{x}}: mean %{{y:.3g}} {unit} over %{{customdata}} points"
                "<extra></extra>"
            ),
        )
    )
    fig.update_layout(
        title={"text": f"SLO capacity by {effect.param}"},
        xaxis={"title": {"text": effect.param}, "type": "category"},
        yaxis={"title": {"text": f"SLO capacity ({unit})" if unit else "SLO capacity"}},
        margin=_MARGIN,
        legend={"orientation": "h"},
    )
    return fig


def pareto_chart(
    points: Sequence[PointSummary], best: str | None, per_gpu_known: bool = True
) -> go.Figure:
    """Throughput per GPU against tokens/s per user of each completed point at its capacity;
    the frontier joined, rejected points marked, the recommendation starred."""
    shown = [
        p
        for p in points
        if p.throughput_per_gpu is not None and p.tokens_per_s_per_user is not None
    ]
    if not shown:
        return _empty("Throughput per GPU vs tokens/s per user")
    fig = go.Figure()
    groups = (
        ("on the frontier", [p for p in shown if p.on_front], "circle", "#2a9d8f"),
        ("eligible", [p for p in shown if p.eligible and not p.on_front], "circle", "#9bbcd1"),
        ("rejected (guard-rails)", [p for p in shown if p.rejected], "x", "#e76f51"),
    )
    for name, group, symbol, color in groups:
        if not group:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.tokens_per_s_per_user for p in group],
                y=[p.throughput_per_gpu for p in group],
                text=[p.label for p in group],
                mode="markers",
                name=name,
                marker={"symbol": symbol, "size": 11, "color": color},
                hovertemplate="%{text}<br>%{x:.3g} tok/s per user, %{y:.4g} tok/s<extra></extra>",
            )
        )
    front = sorted((p for p in shown if p.on_front), key=lambda p: p.tokens_per_s_per_user or 0)
    if len(front) > 1:
        fig.add_trace(
            go.Scatter(
                x=[p.tokens_per_s_per_user for p in front],
                y=[p.throughput_per_gpu for p in front],
                mode="lines",
                line={"dash": "dot", "color": "#2a9d8f"},
                name="frontier",
                hoverinfo="skip",
            )
        )
    top = next((p for p in shown if p.point_id == best), None)
    if top is not None:
        fig.add_trace(
            go.Scatter(
                x=[top.tokens_per_s_per_user],
                y=[top.throughput_per_gpu],
                mode="markers",
                name="recommended",
                marker={"symbol": "star", "size": 18, "color": "#f4a261"},
                text=[top.label],
                hovertemplate="recommended: %{text}<extra></extra>",
            )
        )
    per = "per GPU" if per_gpu_known else "(GPU count unknown: per endpoint)"
    fig.update_layout(
        title={"text": "Throughput per GPU vs tokens/s per user, at capacity"},
        xaxis={"title": {"text": "output tokens/s per user (1000 / P50 TPOT)"}},
        yaxis={"title": {"text": f"output tokens/s {per}"}},
        margin=_MARGIN,
        legend={"orientation": "h"},
    )
    return fig


def search_curves(curves: pd.DataFrame, load_title: str) -> go.Figure:
    """Each point's (and repeat's) measured loads against its worst SLO ratio (measured /
    limit; ≤ 1 passes), in load order, with the limit at 1."""
    if curves.empty or curves["ratio"].isna().all():
        return _empty("Capacity search")
    fig = go.Figure()
    key: Any
    for key, group in curves.groupby(["label", "repeat"], sort=True):
        label, repeat = str(key[0]), int(key[1])
        g = group.dropna(subset=["load", "ratio"]).sort_values("load")
        name = label if repeat == 0 else f"{label} (repeat {repeat})"
        fig.add_trace(
            go.Scatter(
                x=g["load"],
                y=g["ratio"],
                mode="lines+markers",
                name=name,
                customdata=g["step"] + 1,
                hovertemplate=(
                    "load %{x:.3g}: worst ratio %{y:.2f} (run %{customdata} of the search)"
                    f"<extra>{name}</extra>"
                ),
            )
        )
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "#e76f51"}, annotation_text="SLO limit")
    fig.update_layout(
        title={"text": "Capacity search: worst SLO ratio by load"},
        xaxis={"title": {"text": load_title}},
        yaxis={"title": {"text": "worst measured / limit (≤ 1 passes)"}},
        margin=_MARGIN,
        legend={"orientation": "h"},
    )
    return fig
