"""Memory: GPU memory, KV-cache usage, queue and preemptions on one time axis; trends, leaks;
memory against load across a run series."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import display, memory_load_panels, memory_view, state
from ui.cache import memory as cache_memory
from ui.errors import show_error

st.title("Memory")
st.caption(
    "GPU memory used and total per GPU, the engine's KV-cache usage, running and waiting "
    "requests and preemptions on one time axis; headroom against a memory cap; the slope of "
    "memory and of latency with 95 % confidence intervals; leak and fragmentation warnings; "
    "several runs overlaid at their start; memory, KV usage and preemptions against load "
    "across a run series, with the predicted KV capacity and the knee where preemption starts."
)

selection = memory_view.selection()
try:
    load = cache_memory.memory_load_view(selection)
    view = cache_memory.memory_view(load.over_time_selection)
except ServeScopeError as exc:
    show_error(exc)
    st.stop()
if view.run_id is None:
    state.show_no_runs()
    st.stop()
choices = display.run_choices(view.runs)
if selection.names_series:
    st.subheader("Memory vs load")
    memory_load_panels.render(load, choices)
    st.subheader("Over time")
state.resolved_run_picker(view.run_id, choices)
if view.span is None:
    memory_view.show_no_span()
    st.stop()
memory_view.note_aggregates_only(view)
memory_view.window_slider(view)
memory_view.cap_control(view)
memory_view.render_timeline(view)
memory_view.render_trends(view)
st.subheader("Runs side by side")
memory_view.overlay_picker(view, choices)
memory_view.render_overlay(view, choices)
if not selection.names_series:
    st.subheader("Memory vs load")
    memory_load_panels.offer_like(load, choices)
