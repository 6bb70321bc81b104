"""Cached view models for the pages: the only place with ``st.cache_data`` (DESIGN §8).

Each page's module wraps its view-model builder (``services.views``): ``ui.cache.home``,
``ui.cache.data``, ``ui.cache.compare``, ``ui.cache.latency``, ``ui.cache.memory``,
``ui.cache.live``. A cached function is keyed by the store URL and hashable arguments (a frozen
selection); inside it opens a short-lived store (``services.store_session``), builds the view
and disposes the engine. No connection is ever cached (DuckDB lets one process hold the file;
a cached connection would lock out every collector).

This module holds what they share: the TTL, the store URL and the refresh.
"""

from __future__ import annotations

import streamlit as st

import settings
from services import store_session

TTL_S = settings.cache_ttl_s()


def store_url() -> str:
    """The store URL the dashboard reads (SERVESCOPE_DB)."""
    return store_session.store_url()


def masked_store_url() -> str:
    """The store URL with any password masked, safe to display."""
    return store_session.masked_store_url()


def clear() -> None:
    """Forget every cached result (the sidebar's refresh button, and after every write)."""
    st.cache_data.clear()
