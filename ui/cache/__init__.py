"""Cached reads for the pages: the only place with ``st.cache_data`` (ARCHITECTURE §8).

This package holds them all: the shared ones and the Home page's here, the Compare page's in
``ui.cache.compare``, the Latency and Memory pages' in ``ui.cache.latency``.

Each public function resolves the store URL from settings and calls a cached function keyed by
that URL and hashable arguments; the cached function opens a short-lived ``Store``, runs one
``store.queries`` read and disposes the engine. No connection is ever cached (DuckDB lets one
process hold the file; a cached connection would lock out every collector).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import streamlit as st

import settings
from store import catalog, queries
from store.db import Store, mask_url

TTL_S = settings.cache_ttl_s()

#: Runs the home page lists (and offers in its picker).
LATEST_RUNS_LIMIT = 200
#: Most values a distribution chart is drawn from.
SAMPLE_LIMIT = queries.SAMPLE_LIMIT


@contextmanager
def _store(url: str) -> Iterator[Store]:
    store = Store.open(url)
    try:
        yield store
    finally:
        store.dispose()


def store_url() -> str:
    """The store URL the dashboard reads (SERVESCOPE_DB)."""
    return settings.db_url()


def masked_store_url() -> str:
    """The store URL with any password masked, safe to display."""
    return mask_url(settings.db_url())


def clear() -> None:
    """Forget every cached result (the sidebar's refresh button)."""
    st.cache_data.clear()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _store_overview(url: str) -> pd.DataFrame:
    with _store(url) as store:
        return queries.store_overview(store)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _latest_runs(url: str, limit: int) -> pd.DataFrame:
    with _store(url) as store:
        return queries.latest_runs(store, limit)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_detail(url: str, run_id: str) -> pd.DataFrame:
    with _store(url) as store:
        return queries.run_detail(store, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_itl_summary(url: str, run_id: str) -> pd.DataFrame:
    with _store(url) as store:
        return queries.run_itl_summary(store, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_tool_summary(url: str, run_id: str) -> pd.DataFrame:
    with _store(url) as store:
        return queries.run_tool_summary(store, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_metric_sample(url: str, run_id: str, metric: str, limit: int) -> pd.DataFrame:
    with _store(url) as store:
        return queries.run_metric_sample(store, run_id, metric, limit)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_errors(url: str, run_id: str) -> pd.DataFrame:
    with _store(url) as store:
        return queries.run_errors(store, run_id)


def store_overview() -> pd.DataFrame:
    """Runs by source, framework and model (``queries.store_overview``)."""
    return _store_overview(store_url())


def latest_runs(limit: int = LATEST_RUNS_LIMIT) -> pd.DataFrame:
    """The newest runs with their headline figures (``queries.latest_runs``)."""
    return _latest_runs(store_url(), int(limit))


def run_detail(run_id: str) -> pd.DataFrame:
    """One run's columns and summary; empty when it does not exist."""
    return _run_detail(store_url(), run_id)


def run_itl_summary(run_id: str) -> pd.DataFrame:
    """Pooled ITL percentiles of one run."""
    return _run_itl_summary(store_url(), run_id)


def run_tool_summary(run_id: str) -> pd.DataFrame:
    """An imported run's source and own aggregates (``tool_summary``, decoded)."""
    return _run_tool_summary(store_url(), run_id)


def run_metric_sample(run_id: str, metric: str, limit: int = SAMPLE_LIMIT) -> pd.DataFrame:
    """A sample of one metric of one run for its distribution charts."""
    return _run_metric_sample(store_url(), run_id, metric, int(limit))


def run_errors(run_id: str) -> pd.DataFrame:
    """The most frequent failures of one run."""
    return _run_errors(store_url(), run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _slo_profiles(url: str) -> dict[str, dict[str, Any]]:
    with _store(url) as store:
        return {
            n: catalog.get(store, "slo_profiles", n) for n in catalog.names(store, "slo_profiles")
        }


def slo_profiles() -> dict[str, dict[str, Any]]:
    """Every SLO profile in the catalog (seeded and the user's), by name."""
    return _slo_profiles(store_url())


def save_slo_profile(entry: dict[str, Any]) -> None:
    """Store ``entry`` as the user's own SLO profile and forget the cached profile list."""
    with _store(store_url()) as store:
        catalog.save_user_entry(store, "slo_profiles", dict(entry))
    _slo_profiles.clear()
