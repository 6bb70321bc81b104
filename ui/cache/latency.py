"""The Latency page's view model, cached (``st.cache_data``, ttl = SERVESCOPE_CACHE_TTL_S) by the
store URL and the selection; each build opens a short-lived store (never a cached connection)."""

from __future__ import annotations

import streamlit as st

from services.store_session import short_lived_store, store_url
from services.views import latency
from ui.cache import TTL_S


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _latency_view(url: str, selection: latency.LatencySelection) -> latency.LatencyView:
    with short_lived_store(url) as store:
        return latency.latency_view(store, selection)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _resolved(url: str, selection: latency.LatencySelection) -> latency.LatencySelection:
    with short_lived_store(url) as store:
        return latency.resolve(store, selection)


def latency_view(selection: latency.LatencySelection) -> latency.LatencyView:
    """``services.views.latency.latency_view`` of the dashboard's store, cached under the
    resolved selection: the first view (no run asked for) and the rerun after the picker
    settled on the newest run are one cache entry."""
    url = store_url()
    return _latency_view(url, _resolved(url, selection))
