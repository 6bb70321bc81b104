"""Whether a benchmark's lengths represent production's: one panel, used by Compare (per
compared run) and Select (per framework, the runs behind its score).

When the store holds production's length histograms (``servescope watch``), each run or
framework gets a badge — "differs from production" or "representative" — with the KS distance,
and an expander with the one-line reason and both distributions overlaid on production's
buckets. Without production data the panel is one caption pointing to ``servescope watch``.
The distance and its threshold are stated in docs/select.md.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Final

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from analysis.length_mix import MATERIAL_DISTANCE, LengthDist, describe
from services.views.production_mix import (
    HISTS,
    WATCH_HINT,
    MixFlag,
    ProductionMix,
    SideCheck,
)
from services.views.select import SelectView
from ui import display
from ui.cache import production_mix as cache_mix

FLAGGED_LABEL: Final = "differs from production"
MATCHED_LABEL: Final = "representative of production"
_SIDE_TITLES: Final = {"prompt": "Prompt length (tokens)", "output": "Output length (tokens)"}
_MARGIN: Final = {"l": 10, "r": 10, "t": 40, "b": 10}


# --- the chart (pure) ------------------------------------------------------------------------


def _bound(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


def bucket_labels(edges: Sequence[float]) -> list[str]:
    """Production's bucket upper bounds → ``≤ 128``, ``128–512``, …, ``> 8 192``."""
    out = []
    for i, le in enumerate(edges):
        lower = edges[i - 1] if i else None
        if math.isinf(le):
            out.append(f"> {_bound(lower)}" if lower is not None else "all")
        elif lower is None:
            out.append(f"≤ {_bound(le)}")
        else:
            out.append(f"{_bound(lower)}–{_bound(le)}")
    return out


def _shown(production: LengthDist, run: LengthDist) -> slice:
    """The buckets from the first to the last that either distribution fills."""
    used = [i for i, (a, b) in enumerate(zip(production.counts, run.counts, strict=True)) if a or b]
    return slice(used[0], used[-1] + 1) if used else slice(0, 0)


def overlay_chart(checks: Sequence[SideCheck]) -> go.Figure:
    """One panel per side: the share of requests in each of production's buckets, production
    and the run side by side, titled with the KS distance."""
    fig = make_subplots(
        rows=1,
        cols=max(len(checks), 1),
        subplot_titles=[
            f"{_SIDE_TITLES[c.side]}: KS {c.distance:.2f}"
            + (f" ≥ {MATERIAL_DISTANCE:g}" if c.flagged else "")
            for c in checks
        ]
        or ["nothing to compare"],
    )
    for col, check in enumerate(checks, start=1):
        keep = _shown(check.production, check.run)
        labels = bucket_labels(check.production.edges)[keep]
        for name, dist, color in (
            ("production", check.production, "#7f7f7f"),
            ("benchmark", check.run, "#d62728" if check.flagged else "#1f77b4"),
        ):
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=list(dist.shares)[keep],
                    name=name,
                    marker_color=color,
                    legendgroup=name,
                    showlegend=col == 1,
                    hovertemplate="%{x}: %{y:.1%}<extra>" + name + "</extra>",
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(tickformat=".0%", row=1, col=col)
    fig.update_layout(
        barmode="group",
        height=300,
        margin=_MARGIN,
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


# --- the panel -------------------------------------------------------------------------------


def _window_text(mix: ProductionMix) -> str:
    end = dt.datetime.fromtimestamp(mix.end, tz=dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    hours = mix.window_s / 3600
    targets = len(mix.targets)
    sides = [f"{side} {describe(d)}" for side in HISTS if (d := mix.side(side)) is not None]
    return (
        f"Production: {targets} watched target{'s' if targets != 1 else ''}, the {hours:g} h "
        f"before {end} — " + "; ".join(sides) + "."
    )


def _badge(flag: MixFlag) -> None:
    if not flag.checks:
        st.badge("no lengths to compare", icon=":material/help:", color="gray")
    elif flag.flagged:
        st.badge(
            f"{FLAGGED_LABEL} (KS {flag.distance:.2f})", icon=":material/warning:", color="orange"
        )
    else:
        st.badge(
            f"{MATCHED_LABEL} (KS {flag.distance:.2f})",
            icon=":material/check_circle:",
            color="green",
        )


def show_flags(
    mix: ProductionMix, flags: Sequence[MixFlag], labels: Mapping[str, str], *, key: str
) -> None:
    """Under a heading, per flag: a badge and an expander with its reason and the overlay
    chart."""
    st.subheader("Lengths vs production")
    st.caption(
        display.md_escape(_window_text(mix))
        + f" Flagged at a KS distance of {MATERIAL_DISTANCE:g} or more on the bucketed CDFs "
        "(docs/select.md): results measured on other lengths may not hold for production."
    )
    for i, flag in enumerate(flags):
        name = labels.get(flag.label, flag.label)
        left, right = st.columns([2, 3])
        left.markdown(f"**{display.md_escape(name)}**")
        with right:
            _badge(flag)
        with st.expander(f"Lengths of {display.md_escape(name)} vs production"):
            st.markdown(display.md_escape(flag.reason))
            if flag.checks:
                st.plotly_chart(overlay_chart(flag.checks), key=f"{key}_{i}")


def _no_production() -> None:
    st.caption(
        "No production length mix in this store: "
        f"`{WATCH_HINT}` records the engines' prompt and output length histograms, and the "
        "runs here are then flagged when their lengths differ from production's."
    )


def show_for_runs(run_ids: Sequence[str], labels: Mapping[str, str]) -> None:
    """Compare: each run with per-request data against production (a caption when the store
    holds no production lengths; nothing when no run has per-request data)."""
    if not run_ids:
        return
    mix = cache_mix.production()
    if mix is None:
        _no_production()
        return
    flags = cache_mix.flags(mix, [(r, (r,)) for r in run_ids])
    show_flags(mix, flags, labels, key="compare_mix")


def show_for_frameworks(view: SelectView) -> None:
    """Select: per ranked framework with measured runs, the runs behind its SLO capacity (else
    all its evidence runs) pooled against production."""
    order = [r.framework for r in view.ranking.rows] + [e.framework for e in view.ranking.excluded]
    groups = [
        (name, view.evidence[name].capacity_runs or view.evidence[name].run_ids)
        for name in order
        if name in view.evidence and view.evidence[name].run_ids
    ]
    if not groups:
        return
    mix = cache_mix.production()
    if mix is None:
        _no_production()
        return
    flags = cache_mix.flags(mix, groups)
    labels = {name: view.framework_label(name) for name, _ in groups}
    show_flags(mix, flags, labels, key="select_mix")
