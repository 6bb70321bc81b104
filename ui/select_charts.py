"""Pure Plotly builders for the Select page (DESIGN §3, §11.8). No Streamlit, no I/O.

Inputs are plain mappings from the Select view model (``services.views.select.SelectView``):
scores per (framework, criterion) on the 0–5 scale, the ranking's per-criterion contributions
and the perturbation shares; labels are passed in, so nothing here knows the catalogue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}


def criteria_radar(
    scores: Mapping[tuple[str, str], float | None],
    frameworks: Sequence[str],
    criteria: Sequence[tuple[str, str]],
    labels: Mapping[str, str],
) -> go.Figure:
    """One closed trace per framework over ``criteria`` ((name, label) pairs): its 0–5 score on
    each (a missing score drawn at 0 and named in the hover text)."""
    fig = go.Figure()
    if not frameworks or not criteria:
        fig.update_layout(title={"text": "Scores by criterion: nothing to show"}, margin=_MARGIN)
        return fig
    theta = [label for _, label in criteria] + [criteria[0][1]]
    for framework in frameworks:
        values = [scores.get((framework, name)) for name, _ in criteria]
        r = [0.0 if v is None else float(v) for v in values]
        text = ["no score" if v is None else f"{float(v):g} / 5" for v in values]
        fig.add_trace(
            go.Scatterpolar(
                r=[*r, r[0]],
                theta=theta,
                text=[*text, text[0]],
                name=labels.get(framework, framework),
                hovertemplate="%{theta}: %{text}<extra>%{fullData.name}</extra>",
                fill="toself",
                opacity=0.55,
            )
        )
    fig.update_layout(
        title={"text": "Scores by criterion (0–5)"},
        polar={"radialaxis": {"range": [0, 5], "dtick": 1}},
        margin=_MARGIN,
        legend={"orientation": "h"},
    )
    return fig


def contributions_bar(
    contributions: Mapping[str, Mapping[str, float]],
    order: Sequence[str],
    criteria: Sequence[tuple[str, str]],
    labels: Mapping[str, str],
) -> go.Figure:
    """The weighted total of each framework in ``order`` (best first, drawn top down) as stacked
    per-criterion contributions (``contributions``: framework → criterion → points)."""
    fig = go.Figure()
    names = [labels.get(f, f) for f in order]
    for criterion, label in criteria:
        x = [float(contributions.get(f, {}).get(criterion, 0.0)) for f in order]
        if not any(x):
            continue
        fig.add_trace(
            go.Bar(
                x=x,
                y=names,
                orientation="h",
                name=label,
                hovertemplate="%{y}: %{x:.2f} points<extra>" + label + "</extra>",
            )
        )
    fig.update_layout(
        title={"text": "Weighted total by criterion"},
        barmode="stack",
        xaxis={"title": {"text": "points (0–5 scale)"}, "range": [0, 5]},
        yaxis={"autorange": "reversed"},
        margin=_MARGIN,
        legend={"orientation": "h"},
    )
    return fig


def first_place_shares(
    shares: Mapping[str, float], labels: Mapping[str, str], spread: float
) -> go.Figure:
    """The share of random ±``spread`` weight perturbations in which each framework ranks first
    (largest first)."""
    order = sorted(shares, key=lambda f: (-shares[f], f))
    fig = go.Figure(
        go.Bar(
            x=[labels.get(f, f) for f in order],
            y=[100.0 * shares[f] for f in order],
            text=[f"{100.0 * shares[f]:.0f} %" for f in order],
            textposition="outside",
            hovertemplate="%{x}: first in %{y:.1f} % of perturbations<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": f"Ranks first under random ±{spread:.0%} weight changes"},
        yaxis={"title": {"text": "% of perturbations"}, "range": [0, 110]},
        margin=_MARGIN,
    )
    return fig
