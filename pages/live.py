"""Live: production traffic of the watched engines for on call, refreshed in place.

P50/P90/P99 TTFT, E2E and queue time per window from the engines' histograms against an SLO
profile (breaching windows marked and linked to their incident view), request and error rate,
engine state and GPUs on the same time axis, and the production length mix.
URL: ``?slo=&target=&window=&span=&refresh=`` (services/views/live.py).
"""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import live_view
from ui.cache import live as cache_live
from ui.errors import show_error

st.title("Live")
st.caption(
    "Latency percentiles per window from the engines' own histograms, judged against an SLO "
    "profile; request and error rate; running and waiting requests, KV-cache usage, "
    "preemptions and each GPU's memory and utilisation on the same time axis; the production "
    "length mix. A source with no sample for three intervals is marked stale."
)

selection = live_view.selection()
if selection.problem is not None:
    live_view.show_problem(selection)
    st.stop()


@st.fragment(run_every=selection.refresh_s)
def _panels() -> None:
    current = live_view.selection()  # the selectors write the URL; a bad one is refused
    if current.problem is not None:
        live_view.show_problem(current)
        return
    try:
        view = cache_live.live_view(current)
    except ServeScopeError as exc:
        show_error(exc)
        return
    live_view.render(view)


_panels()
