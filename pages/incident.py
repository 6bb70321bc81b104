"""Incident: investigate a window of production traffic — before vs during, and the four
troubleshooting patterns judged on it. The URL (?target=…&from=…&to=…) is shareable."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import incident_panels as panels
from ui.cache import incident as cache_incident
from ui.errors import show_error

st.title("Incident")
st.caption(
    "A window of watched production traffic compared with the same length just before it: "
    "latency percentiles from the engines' own histograms, queueing vs prefill, request and "
    "error rate, prompt lengths, engine state and GPUs — and the troubleshooting patterns "
    "judged on that evidence, each with the numbers that fired it and what to try."
)
try:
    request = panels.request_from_url()
except ServeScopeError as exc:
    show_error(exc)
    request = None

try:
    panels.window_form(cache_incident.incident_choices(request))
    if request is None:
        st.stop()
    view = cache_incident.incident_view(request)
except ServeScopeError as exc:
    show_error(exc)
    st.stop()

panels.render(view)
