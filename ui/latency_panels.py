"""The Latency page's selection and panels: the selection read from the widgets and the URL, and
the rendering of ``services.views.latency.LatencyView`` (built and cached by ``ui.cache.latency``).

Widgets (keys, URL parameters): the run picker (``run_select``, ``?run=``), the bucket edges
(``latency_edges``, ``?edges=256,1k,4k``), buckets by (``latency_by``, ``?by=``), the metric
(``latency_metric``, ``?metric=``), the window (``latency_window``, ``?window=60-300``, seconds
from the run's first request) and the slowest requests to explain (``latency_top``, ``?top=``).
Figures come from ``ui.latency_charts``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analysis import diagnose
from analysis import latency as latency_analysis
from analysis.buckets import DEFAULT_EDGES, format_tokens
from services.views import latency
from services.views.latency import (
    BY,
    METRICS,
    Diagnosis,
    LatencySelection,
    LatencyView,
    OverTime,
    PrefillSplit,
    SlowestRequests,
)
from services.views.run_window import WINDOW_PARAM
from ui import crosscheck_view, display, latency_charts, state

EDGES_KEY = "latency_edges"
BY_KEY = "latency_by"
METRIC_KEY = "latency_metric"
WINDOW_KEY = "latency_window"
TOP_KEY = "latency_top"


def _top_text(top: Any) -> str:
    return str(int(top))


def selection() -> LatencySelection:
    """The page's selection, from its widgets (their last values) or else the URL."""
    return LatencySelection.from_params(
        {
            latency.RUN_PARAM: state.selected_run(),
            latency.EDGES_PARAM: state.widget_or_url(EDGES_KEY, latency.EDGES_PARAM, str),
            latency.BY_PARAM: state.widget_or_url(BY_KEY, latency.BY_PARAM, str),
            latency.METRIC_PARAM: state.widget_or_url(METRIC_KEY, latency.METRIC_PARAM, str),
            WINDOW_PARAM: state.window_value(WINDOW_PARAM),
            latency.TOP_PARAM: state.widget_or_url(TOP_KEY, latency.TOP_PARAM, _top_text),
        }
    )


# --- what stops the page early -----------------------------------------------------------------


def show_aggregates_only(view: LatencyView) -> None:
    """An aggregate-only import: what cannot be shown, and why, and the tool's own figures."""
    st.warning(
        f"Aggregates only: this {display.md_escape(view.tool.source or 'imported')} run has no "
        "per-request rows, so percentiles by length bucket, the heatmap over time, the scatter, "
        "the slowest requests, the TTFT split and the diagnosis cannot be computed: they all "
        "need each request's length and timings. The tool's own figures:",
        icon=":material/table_chart:",
    )
    table = crosscheck_view.aggregates_table(view.tool.summary)
    if not table.empty:
        st.dataframe(table, hide_index=True, key="latency_tool_aggregates")


def show_no_requests() -> None:
    st.info(
        "This run recorded no requests, so there is nothing to break down. Pick another "
        "run, or measure one with `servescope bench` (see Home)."
    )


def show_no_send_times() -> None:
    st.info(
        "These requests carry no send times (an import without timestamps): the views "
        "over time, the engine state at arrival, the TTFT split and trends need them."
    )


# --- the selections (URL-synced widgets) -------------------------------------------------------


def controls(view: LatencyView) -> None:
    """The page's selection widgets, each mirrored in the URL and first set to the selection
    the view was built for (the window slider only when the requests carry send times)."""
    chosen = view.selection
    left, mid, right = st.columns([3, 2, 2])
    with left:
        edges_input()
    state.init_widget(BY_KEY, chosen.by)
    mid.radio(
        "Buckets by",
        list(BY),
        format_func=BY.__getitem__,
        horizontal=True,
        key=BY_KEY,
        on_change=state.sync_to_url(BY_KEY, latency.BY_PARAM, str),
    )
    state.init_widget(METRIC_KEY, chosen.metric)
    right.selectbox(
        "Metric",
        list(METRICS),
        format_func=METRICS.__getitem__,
        key=METRIC_KEY,
        on_change=state.sync_to_url(METRIC_KEY, latency.METRIC_PARAM, str),
    )
    if view.window is not None:
        state.window_slider(
            WINDOW_KEY,
            view.window.span_s,
            view.window.chosen,
            label="Window (seconds from the run's first request)",
        )
    state.init_widget(TOP_KEY, chosen.top)
    st.number_input(
        "Slowest requests to explain (top N by TTFT)",
        min_value=1,
        max_value=latency.MAX_TOP,
        step=5,
        key=TOP_KEY,
        on_change=state.sync_to_url(TOP_KEY, latency.TOP_PARAM, _top_text),
    )


def edges_input() -> None:
    """The bucket edges text box (``?edges=``); unreadable text is said so (the view then uses
    the default edges)."""
    default = ",".join(format_tokens(e) for e in DEFAULT_EDGES)
    state.init_widget(EDGES_KEY, state.url_value(latency.EDGES_PARAM) or default)
    text = st.text_input(
        "Input-length bucket edges (tokens, k = 1,024)",
        key=EDGES_KEY,
        on_change=state.sync_to_url(EDGES_KEY, latency.EDGES_PARAM, str),
    )
    _, problem = latency.edges_from_text(text)
    if problem is not None:
        st.error(
            display.md_escape(problem.message) + "  \n" + display.md_escape(problem.hint or "")
        )


# --- the panels --------------------------------------------------------------------------------


def render_buckets(view: LatencyView) -> None:
    """Per-bucket percentiles of the chosen metric: chart and table."""
    buckets = view.buckets
    if buckets is None:
        return
    metric = METRICS[buckets.metric]
    st.subheader(f"{metric} percentiles by {BY[buckets.by]}")
    st.plotly_chart(
        latency_charts.bucket_percentiles(buckets.rows, view.labels, metric),
        key="latency_bucket_chart",
    )
    st.dataframe(buckets.table, hide_index=True, key="latency_bucket_table")


def render_over_time(view: LatencyView, over_time: OverTime) -> None:
    """Heatmap of P99 TTFT by bucket × window and the TTFT vs input scatter."""
    st.subheader("Over time")
    st.plotly_chart(
        latency_charts.ttft_heatmap(
            over_time.heatmap, view.labels, t0=over_time.t0, window_s=over_time.window_s
        ),
        key="latency_heatmap",
    )
    st.plotly_chart(
        latency_charts.ttft_scatter(
            over_time.sample, stride=over_time.stride, total=over_time.total
        ),
        key="latency_scatter",
    )
    if over_time.stride > 1:
        stride = over_time.stride
        st.caption(
            f"Sampled: every {stride:,}th request ({len(over_time.sample):,} of "
            f"{over_time.total:,}, at most {latency.SAMPLE_LIMIT:,}); in-flight counts for the "
            f"prefill fit are estimated from this sample × {stride:,}."
        )


def render_slowest(slowest: SlowestRequests) -> None:
    """The top-N slowest requests (by TTFT) with the run's in-flight count and the engine's
    state when each arrived."""
    st.subheader("Why: the slowest requests")
    if slowest.table.empty:
        st.info("No successful request with a TTFT in this selection.")
        return
    st.dataframe(slowest.table, hide_index=True, key="latency_slowest_table")
    if not slowest.engine_sampled:
        st.caption(
            "No engine samples for this run: run `servescope bench` against an endpoint that "
            "serves /metrics (collected automatically), or `servescope watch --metrics URL` "
            "during the run."
        )
    elif slowest.every_target:
        st.caption("Engine state from every target that reported during the run's span.")


def render_prefill(view: LatencyView, prefill: PrefillSplit) -> None:
    """TTFT split into queueing and prefill, with the prefill fit it rests on."""
    st.subheader("Why: queueing vs prefill")
    fit = prefill.fit
    if fit is None:
        st.info(
            "Too few lightly loaded requests to fit prefill per input token (need "
            f"{latency_analysis.MIN_FIT_POINTS} sent with at most "
            f"{latency_analysis.LIGHT_MAX_IN_FLIGHT:g} in flight, with two input lengths) in "
            "this run or a lighter run of its series. A concurrency-1 run of the same engine "
            "gives the fit."
        )
        return
    r2 = "—" if fit.r2 is None else f"{fit.r2:.2f}"
    where = (
        ""
        if prefill.fit_run_id == view.run_id
        else f" of run {display.md_escape(prefill.fit_run_id)} (lighter load)"
    )
    st.caption(
        f"Prefill ≈ {fit.intercept_ms:,.1f} ms + {fit.ms_per_token * 1000:,.2f} ms per 1k "
        f"input tokens, fitted on {fit.n:,} requests{where} sent with ≤ {fit.light_max:g} "
        f"in flight (R² {r2}); queueing = TTFT − prefill."
    )
    if prefill.split is not None:
        st.plotly_chart(latency_charts.ttft_split(prefill.split), key="latency_split_chart")


def render_diagnosis(view: LatencyView, diagnosis: Diagnosis) -> None:
    """The findings, each with its evidence table, chart and actions; or "no issue found"."""
    st.subheader("Diagnosis")
    if not diagnosis.findings:
        st.success("No issue found by the four rules.", icon=":material/check_circle:")
        if diagnosis.missing:
            st.caption(
                "Not checked for lack of data: "
                + display.md_escape("; ".join(diagnosis.missing))
                + "."
            )
        return
    for finding in diagnosis.findings:
        with st.container(border=True, key=f"finding_{finding.rule}"):
            st.markdown(f"**{finding.rule}. {display.md_escape(finding.title)}**")
            st.markdown(display.md_escape(finding.summary))
            st.dataframe(
                pd.DataFrame(
                    {"evidence": list(finding.evidence), "value": list(finding.evidence.values())}
                ),
                hide_index=True,
                key=f"finding_{finding.rule}_evidence",
            )
            chart = finding_chart(finding, view, diagnosis)
            if chart is not None:
                st.plotly_chart(chart, key=f"finding_{finding.rule}_chart")
            st.markdown("\n".join(f"- {display.md_escape(a)}" for a in finding.actions))


def finding_chart(
    finding: diagnose.Finding, view: LatencyView, diagnosis: Diagnosis
) -> go.Figure | None:
    """The chart that shows a finding's evidence."""
    evidence = diagnosis.evidence
    if finding.chart == "kv_queue" and evidence.engine is not None:
        return latency_charts.kv_and_queue(evidence.engine)
    if finding.chart == "buckets":
        ttft = diagnosis.ttft_by_input[diagnosis.ttft_by_input["metric"] == "ttft_ms"]
        return latency_charts.bucket_percentiles(ttft, view.labels, "TTFT")
    if finding.chart == "load" and evidence.load is not None:
        return latency_charts.throughput_vs_load(evidence.load, current=view.run_id)
    if finding.chart == "trend":
        return latency_charts.trend_chart(
            diagnosis.timeline["window_start"].to_numpy(),
            diagnosis.timeline["ttft_p50_ms"].to_numpy(),
            evidence.latency_trend,
            label=evidence.latency_label,
            unit="ms",
        )
    return None
