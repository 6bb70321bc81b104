"""The Memory page's view model, cached (``st.cache_data``, ttl = SERVESCOPE_CACHE_TTL_S) by the
store URL and the selection; each build opens a short-lived store (never a cached connection)."""

from __future__ import annotations

import streamlit as st

from services.store_session import short_lived_store, store_url
from services.views import memory
from ui.cache import TTL_S


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _memory_view(url: str, selection: memory.MemorySelection) -> memory.MemoryView:
    with short_lived_store(url) as store:
        return memory.memory_view(store, selection)


def memory_view(selection: memory.MemorySelection) -> memory.MemoryView:
    """``services.views.memory.memory_view`` of the dashboard's store."""
    return _memory_view(store_url(), selection)
