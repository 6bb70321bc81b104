"""Latency (the on-call view): percentiles by length bucket, over time, and why."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import display, latency_panels, measurement_panels, state
from ui.cache import latency as cache_latency
from ui.errors import show_error

st.title("Latency")
st.caption(
    "P50 … P99.9 of TTFT, TPOT, ITL and E2E by input (or output) length, P99 TTFT over time, "
    "the slowest requests beside the engine's state when they arrived, TTFT split into "
    "queueing and prefill, and a diagnosis. Selections are in the URL: share it."
)

try:
    view = cache_latency.latency_view(latency_panels.selection())
except ServeScopeError as exc:
    show_error(exc)
    st.stop()
if view.run_id is None:
    state.show_no_runs()
    st.stop()
state.resolved_run_picker(view.run_id, display.run_choices(view.runs))
if view.aggregates_only:
    latency_panels.show_aggregates_only(view)
    st.stop()
if view.requests == 0:
    latency_panels.show_no_requests()
    st.stop()
latency_panels.controls(view)
latency_panels.render_buckets(view)
if view.over_time is None:
    latency_panels.show_no_send_times()
else:
    latency_panels.render_over_time(view, view.over_time)
if view.slowest is not None:
    latency_panels.render_slowest(view.slowest)
if view.prefill is not None:
    latency_panels.render_prefill(view, view.prefill)
if view.diagnosis is not None:
    latency_panels.render_diagnosis(view, view.diagnosis)
if view.measurement is not None:
    measurement_panels.render_measurement(view.measurement)
