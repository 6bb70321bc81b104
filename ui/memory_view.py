"""The Memory page's selection and panels: the selection read from the widgets and the URL, and
the rendering of ``services.views.memory.MemoryView`` (built and cached by ``ui.cache.memory``).

Widgets (keys, URL parameters): the run picker (``run_select``, ``?run=``), the window slider
(``memory_window``, ``?window=a-b``, seconds from the run's start), the SLO profile
(``memory_slo``, ``?slo=``), the memory cap (``memory_cap``, ``?cap=``), the overlaid runs
(``memory_overlay``, ``?overlay=a,b``) and Memory vs load's series (``ui.memory_load_panels``:
``?series=a,b,c``, ``?sweep=<id>&point=<id>``).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from analysis import latency
from services.views import memory
from services.views.memory import MemorySelection, MemoryView, TrendFigure
from ui import display, memory_charts, memory_load_panels, state

WINDOW_KEY = "memory_window"
SLO_KEY = "memory_slo"
CAP_KEY = "memory_cap"
OVERLAY_KEY = "memory_overlay"
#: The SLO profile select box's "no profile" entry.
NO_PROFILE = "(none)"


def _slo_text(name: Any) -> str:
    return "" if name == NO_PROFILE else str(name)


def _cap_text(cap: Any) -> str:
    return f"{float(cap):g}"


def _overlay_text(run_ids: Any) -> str:
    return ",".join(str(r) for r in run_ids)


def selection() -> MemorySelection:
    """The page's selection, from its widgets (their last values) or else the URL."""
    return MemorySelection.from_params(
        {
            memory.RUN_PARAM: state.selected_run(),
            memory.WINDOW_PARAM: state.window_value(memory.WINDOW_PARAM),
            memory.SLO_PARAM: state.widget_or_url(SLO_KEY, memory.SLO_PARAM, _slo_text),
            memory.CAP_PARAM: state.widget_or_url(CAP_KEY, memory.CAP_PARAM, _cap_text),
            memory.OVERLAY_PARAM: state.widget_or_url(
                OVERLAY_KEY, memory.OVERLAY_PARAM, _overlay_text
            ),
            memory.SERIES_PARAM: memory_load_panels.series_text(),
            memory.SWEEP_PARAM: state.url_value(memory.SWEEP_PARAM),
            memory.POINT_PARAM: state.widget_or_url(
                memory_load_panels.POINT_KEY, memory.POINT_PARAM
            ),
        }
    )


def show_no_span() -> None:
    st.info(
        "This run recorded no start or end time and no requests, so there is no span to "
        "draw. Pick another run, or measure one with `servescope bench` (see Home)."
    )


def note_aggregates_only(view: MemoryView) -> None:
    """For an aggregate-only import: say that the latency trend cannot be shown, and why."""
    if view.aggregates_only:
        st.warning(
            f"Aggregates only: this {display.md_escape(view.source or 'imported')} run has no "
            "per-request rows, so the latency trend cannot be computed. Engine and GPU samples "
            "are shown when they were collected during its span (`servescope watch`).",
            icon=":material/table_chart:",
        )


def window_slider(view: MemoryView) -> None:
    """The window slider (``memory_window``, ``?window=a-b``) over the run's span."""
    state.window_slider(
        WINDOW_KEY, view.span_s, view.window, label="Window (seconds from the run's start)"
    )


def cap_control(view: MemoryView) -> None:
    """The SLO profile select box (``memory_slo``, ``?slo=``) and the memory cap: the profile's
    ``max_memory_fraction`` when it has one, else the number box ``memory_cap`` (``?cap=``)."""
    state.init_widget(SLO_KEY, view.slo or NO_PROFILE)
    left, right = st.columns(2)
    left.selectbox(
        "SLO profile (memory cap)",
        [NO_PROFILE, *view.slo_profiles],
        key=SLO_KEY,
        on_change=state.sync_to_url(SLO_KEY, memory.SLO_PARAM, _slo_text),
    )
    if view.cap_from_profile:
        right.metric("Memory cap", f"{view.cap:.0%}", help=f"from SLO profile {view.slo}")
        return
    state.init_widget(CAP_KEY, view.cap)
    right.number_input(
        "Memory cap (fraction of GPU memory)",
        min_value=0.05,
        max_value=1.0,
        step=0.05,
        key=CAP_KEY,
        on_change=state.sync_to_url(CAP_KEY, memory.CAP_PARAM, _cap_text),
    )


def summary_figures(view: MemoryView) -> list[tuple[str, str, str]]:
    """(label, value, help) of the headline figures: GPU memory peak/mean and headroom, KV
    peak/mean, preemptions."""
    figures = view.figures
    gib = memory_charts.GIB
    out: list[tuple[str, str, str]] = []
    if figures.gpu_peak_bytes is not None:
        total = figures.gpu_total_bytes or 0.0
        out += [
            (
                "GPU memory peak",
                f"{figures.gpu_peak_bytes / gib:,.1f} GiB",
                f"of {total / gib:,.1f} GiB, all GPUs",
            ),
            (
                "GPU memory mean",
                f"{(figures.gpu_mean_bytes or 0.0) / gib:,.1f} GiB",
                "mean over the window",
            ),
            (
                "Headroom to cap",
                f"{(figures.headroom_bytes or 0.0) / gib:+,.1f} GiB",
                f"cap {view.cap:.0%} × total − peak used; negative: the cap is exceeded",
            ),
        ]
    if figures.kv_peak is not None:
        out += [
            ("KV usage peak", f"{figures.kv_peak:.0%}", "fullest target"),
            ("KV usage mean", f"{figures.kv_mean or 0.0:.0%}", "mean over the window"),
        ]
    if figures.preemptions is not None:
        out.append(("Preemptions", display.fmt_count(figures.preemptions), ""))
    return out


def render_timeline(view: MemoryView) -> None:
    """The headline figures and memory, KV, queue and preemptions on one time axis."""
    figures = summary_figures(view)
    if figures:
        for col, (label, value, help_text) in zip(st.columns(len(figures)), figures, strict=True):
            col.metric(label, value, help=help_text or None)
    if not view.has_samples:
        st.info(
            "No engine or GPU samples for this run's span. `servescope bench` records the "
            "endpoint's /metrics during each run (add `--dcgm URL` for GPU memory); "
            "`servescope watch --metrics URL --gpu` collects them for any time window."
        )
        return
    if view.gpu.empty:
        st.caption(
            "No GPU samples: memory is shown through the engine's KV-cache usage. Collect GPU "
            "memory with `servescope bench --dcgm URL` or `servescope watch --gpu`."
        )
    st.plotly_chart(
        memory_charts.memory_timeline(view.engine, view.gpu, cap_fraction=view.cap),
        key="memory_timeline_chart",
    )


def render_trends(view: MemoryView) -> None:
    """Slopes of GPU memory (else KV usage) and of TTFT P50 with 95 % CIs, or "too short to
    judge" over a window shorter than the trend rule's; leak and fragmentation warnings."""
    st.subheader("Trends")
    cols = st.columns(2)
    for col, figure in zip(cols, (view.memory_trend, view.latency_trend), strict=True):
        if figure is not None:
            _trend_metric(col, figure)
    for warning in view.warnings:
        st.warning(
            f"**{display.md_escape(warning.title)}**  \n"
            + "  \n".join(
                f"{display.md_escape(k)}: {display.md_escape(v)}"
                for k, v in warning.evidence.items()
            ),
            icon=":material/warning:",
        )


def _trend_metric(col: Any, figure: TrendFigure) -> None:
    """The slope per hour, or "too short to judge" with the window it needs under it."""
    fit = figure.trend
    short = latency.trend_too_short(fit) if fit is not None else None
    if fit is None or short is None:
        col.metric(figure.label, _slope(fit, figure.unit), help=_interval(fit, figure.unit))
        return
    col.metric(
        figure.label,
        latency.TOO_SHORT,
        help=f"{short}: a slope per hour is not extrapolated from it.",
    )
    col.caption(latency.trend_window_need(fit.span_s))


def _slope(fit: latency.Trend | None, unit: str) -> str:
    if fit is None:
        return "—"
    mark = " ↑" if fit.rising else (" ↓" if fit.significant else "")
    return f"{fit.slope * 3600:+,.1f} {unit}{mark}"


def _interval(fit: latency.Trend | None, unit: str) -> str:
    if fit is None:
        return "fewer than 3 points: no trend"
    low, high = fit.ci_low * 3600, fit.ci_high * 3600
    verdict = "significant" if fit.significant else "not significant (the interval spans 0)"
    return f"95 % CI {low:+,.2f} … {high:+,.2f} {unit}, n={fit.n}; {verdict}"


def overlay_picker(view: MemoryView, choices: dict[str, str]) -> None:
    """Runs to overlay (``memory_overlay``, ``?overlay=a,b``), aligned at their start."""
    state.init_widget(OVERLAY_KEY, list(view.overlay))
    st.multiselect(
        "Overlay other runs (aligned at their start)",
        [r for r in choices if r != view.run_id],
        format_func=lambda r: choices.get(r, r),
        key=OVERLAY_KEY,
        on_change=state.sync_to_url(OVERLAY_KEY, memory.OVERLAY_PARAM, _overlay_text),
    )


def render_overlay(view: MemoryView, choices: dict[str, str]) -> None:
    """The run and the overlaid ones, aligned at their start; which have no samples."""
    if view.aligned is None:
        return
    if view.aligned.empty:
        st.info("None of these runs has engine or GPU samples.")
        return
    st.plotly_chart(
        memory_charts.aligned_runs_chart(view.aligned, choices), key="memory_overlay_chart"
    )
    drawn = set(view.aligned["run_id"])
    shown = [str(view.run_id), *view.overlay]
    missing = [choices.get(r, r) for r in shown if r not in drawn]
    if missing:
        st.caption("No samples for: " + display.md_escape(", ".join(missing)))
