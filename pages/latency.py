"""Latency (the on-call view): percentiles by length bucket, over time, and why."""

from __future__ import annotations

import streamlit as st

from analysis.latency import heatmap_window_s
from errors import ServeScopeError
from ui import latency_view
from ui.errors import show_error

st.title("Latency")
st.caption(
    "P50 … P99.9 of TTFT, TPOT, ITL and E2E by input (or output) length, P99 TTFT over time, "
    "the slowest requests beside the engine's state when they arrived, TTFT split into "
    "queueing and prefill, and a diagnosis. Selections are in the URL: share it."
)

run_id, choices = latency_view.pick_run(latency_view.show_empty)

try:
    if latency_view.aggregates_only(run_id):
        st.stop()
    requests, span = latency_view.run_span(run_id)
    if requests == 0:
        st.info(
            "This run recorded no requests, so there is nothing to break down. Pick another "
            "run, or measure one with `servescope bench` (see Home)."
        )
        st.stop()
    sel = latency_view.controls(run_id, span)
    by_input = latency_view.render_buckets(sel)
    if span is None:
        st.info(
            "These requests carry no send times (an import without timestamps): the views "
            "over time, the engine state at arrival, the TTFT split and trends need them."
        )
        latency_view.render_slowest(sel)
        heat, sample, engine, t0, duration = None, None, None, 0.0, 1.0
    else:
        t0 = sel.window[0] if sel.window[0] is not None else span[0]
        t1 = sel.window[1] if sel.window[1] is not None else span[1]
        duration = max(t1 - t0, 1.0)
        heat, sample, stride = latency_view.render_over_time(sel, t0, duration)
        engine = latency_view.render_why(sel, sample, stride).engine
    evidence = latency_view.diagnosis_input(
        sel, by_input, heat, engine, sample, t0=t0, window_s=heatmap_window_s(duration)
    )
    latency_view.render_diagnosis(evidence)
except ServeScopeError as exc:
    show_error(exc)
