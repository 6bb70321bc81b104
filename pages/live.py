"""Live: the current state of watched engines and GPUs, refreshed in place."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import live_view
from ui.cache import live as cache_live
from ui.errors import show_error

st.title("Live")
st.caption(
    "Running and waiting requests, KV-cache usage, preemptions and throughput of every watched "
    "engine, and each GPU's memory and utilisation. A source with no sample for three "
    "intervals is marked stale."
)

selection = live_view.selection()


@st.fragment(run_every=selection.refresh_s)
def _panels() -> None:
    try:
        view = cache_live.live_view(selection)
    except ServeScopeError as exc:
        show_error(exc)
        return
    live_view.render(view)


_panels()
