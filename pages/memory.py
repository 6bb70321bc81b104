"""Memory: GPU memory, KV-cache usage, queue and preemptions on one time axis; trends, leaks."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import memory_view
from ui.errors import show_error

st.title("Memory")
st.caption(
    "GPU memory used and total per GPU, the engine's KV-cache usage, running and waiting "
    "requests and preemptions on one time axis; headroom against a memory cap; the slope of "
    "memory and of latency with 95 % confidence intervals; leak and fragmentation warnings; "
    "several runs overlaid at their start."
)

run_id, choices = memory_view.pick_run()

try:
    sources, span = memory_view.run_window(run_id)
    if span is None:
        st.info(
            "This run recorded no start or end time and no requests, so there is no span to "
            "draw. Pick another run, or measure one with `servescope bench` (see Home)."
        )
        st.stop()
    memory_view.note_aggregates_only(run_id)
    since, until = memory_view.window(span)
    cap = memory_view.cap_control()
    data = memory_view.load(run_id, sources, since, until)
    memory_view.render_timeline(data, cap)
    memory_view.render_trends(data)
    st.subheader("Runs side by side")
    memory_view.render_overlay(memory_view.overlay_picker(run_id, choices), choices)
except ServeScopeError as exc:
    show_error(exc)
