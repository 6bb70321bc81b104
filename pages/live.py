"""Live: the current state of watched engines and GPUs, refreshed in place."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import live_view
from ui.errors import show_error

st.title("Live")
st.caption(
    "Running and waiting requests, KV-cache usage, preemptions and throughput of every watched "
    "engine, and each GPU's memory and utilisation. A source with no sample for three "
    "intervals is marked stale."
)


@st.fragment(run_every=live_view.refresh_every())
def _panels() -> None:
    try:
        data = live_view.load()
    except ServeScopeError as exc:
        show_error(exc)
        return
    live_view.render(data)


_panels()
