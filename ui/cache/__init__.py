"""Cached reads for the pages: the only place with ``st.cache_data`` (ARCHITECTURE §8).

Each page's module wraps its view-model builder (``services.views``): ``ui.cache.home``,
``ui.cache.data``, ``ui.cache.compare``, ``ui.cache.latency``, ``ui.cache.memory``,
``ui.cache.live``. A cached function is keyed by the store URL and hashable arguments (a frozen
selection); inside it opens a short-lived store (``services.store_session``), builds and
disposes the engine. No connection is ever cached (DuckDB lets one process hold the file; a
cached connection would lock out every collector).

This module holds what they share: the TTL, the store URL, the refresh, and the reads several
pages' helpers still make directly.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

import settings
from services import store_session
from services.commands import slo_profiles as slo_profile_catalog
from services.views import imported_runs

TTL_S = settings.cache_ttl_s()

#: Kept for the cache modules that still open their store with it: use
#: ``services.store_session.short_lived_store``.
_store = store_session.short_lived_store


def store_url() -> str:
    """The store URL the dashboard reads (SERVESCOPE_DB)."""
    return store_session.store_url()


def masked_store_url() -> str:
    """The store URL with any password masked, safe to display."""
    return store_session.masked_store_url()


def clear() -> None:
    """Forget every cached result (the sidebar's refresh button, and after every write)."""
    st.cache_data.clear()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _tool_summary(url: str, run_id: str) -> imported_runs.ToolSummary:
    with store_session.short_lived_store(url) as store:
        return imported_runs.tool_summary(store, run_id)


def tool_summary(run_id: str) -> imported_runs.ToolSummary:
    """An imported run's source and the tool's own aggregates
    (``services.views.imported_runs.tool_summary``)."""
    return _tool_summary(store_url(), run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _slo_profiles(url: str) -> dict[str, dict[str, Any]]:
    with store_session.short_lived_store(url) as store:
        return slo_profile_catalog.slo_profiles(store)


def slo_profiles() -> dict[str, dict[str, Any]]:
    """Every SLO profile in the catalog (seeded and the user's), by name."""
    return _slo_profiles(store_url())


def save_slo_profile(entry: dict[str, Any]) -> None:
    """Store ``entry`` as the user's own SLO profile and forget the cached profile list."""
    with store_session.short_lived_store(store_url()) as store:
        slo_profile_catalog.save_slo_profile(store, entry)
    _slo_profiles.clear()
