"""Cached reads of the Latency and Memory pages (``st.cache_data``, ttl = SERVESCOPE_CACHE_TTL_S;
see ``ui.cache``: a short-lived ``Store`` per call, never a cached connection)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

import settings
from store import latency_queries, memory_queries
from ui.cache import _store, store_url

TTL_S = settings.cache_ttl_s()
Window = tuple[float | None, float | None]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _runs(url: str, limit: int, run_id: str | None) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.run_list(store, limit, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _request_span(url: str, run_ids: tuple[str, ...], window: Window) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.request_span(store, run_ids, *window)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _ttft_summary(url: str, run_ids: tuple[str, ...], window: Window) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.ttft_summary(store, run_ids, *window)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _bucket_latency(
    url: str,
    run_ids: tuple[str, ...],
    edges: tuple[int, ...],
    by: str,
    window: Window,
    metrics: tuple[str, ...],
) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.bucket_latency(store, run_ids, edges, by, *window, metrics)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _ttft_heatmap(
    url: str,
    run_ids: tuple[str, ...],
    edges: tuple[int, ...],
    t0: float,
    window_s: float,
    window: Window,
) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.ttft_heatmap(
            store, run_ids, edges, t0=t0, window_s=window_s, since=window[0], until=window[1]
        )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _latency_timeline(
    url: str, run_ids: tuple[str, ...], t0: float, window_s: float, window: Window
) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.latency_timeline(
            store, run_ids, t0=t0, window_s=window_s, since=window[0], until=window[1]
        )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _request_sample(
    url: str, run_ids: tuple[str, ...], limit: int, window: Window
) -> tuple[pd.DataFrame, int]:
    with _store(url) as store:
        return latency_queries.request_sample(store, run_ids, limit, *window)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _slowest(
    url: str, run_ids: tuple[str, ...], n: int, metric: str, window: Window
) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.slowest_requests(store, run_ids, n, metric, *window)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _in_flight_at(url: str, run_id: str, instants: tuple[float, ...]) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.in_flight_at(store, run_id, instants)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _load_levels(url: str, run_id: str) -> pd.DataFrame:
    with _store(url) as store:
        return latency_queries.load_levels(store, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_sources(url: str, run_id: str) -> dict[str, Any]:
    with _store(url) as store:
        return memory_queries.run_sources(store, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _engine_timeline(
    url: str, targets: tuple[str, ...], since: float, until: float, max_points: int
) -> pd.DataFrame:
    with _store(url) as store:
        return memory_queries.engine_timeline(
            store, targets, since=since, until=until, max_points=max_points
        )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _gpu_timeline(
    url: str, hosts: tuple[str, ...], since: float, until: float, max_points: int
) -> pd.DataFrame:
    with _store(url) as store:
        return memory_queries.gpu_timeline(
            store, hosts, since=since, until=until, max_points=max_points
        )


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_states(url: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    with _store(url) as store:
        return memory_queries.run_states(store, run_ids)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _aligned_runs(url: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    with _store(url) as store:
        return memory_queries.aligned_runs(store, run_ids)


# --- public ------------------------------------------------------------------------------------

#: Runs offered in the pickers (plus the one in the URL).
RUNS_LIMIT = 200


def runs(run_id: str | None = None) -> pd.DataFrame:
    """The newest runs (and ``run_id``), from the runs table alone: instant on any store."""
    return _runs(store_url(), RUNS_LIMIT, run_id)


def request_span(run_ids: tuple[str, ...], window: Window = (None, None)) -> pd.DataFrame:
    return _request_span(store_url(), run_ids, window)


def ttft_summary(run_ids: tuple[str, ...], window: Window = (None, None)) -> pd.DataFrame:
    return _ttft_summary(store_url(), run_ids, window)


def bucket_latency(
    run_ids: tuple[str, ...],
    edges: tuple[int, ...],
    by: str,
    window: Window = (None, None),
    metrics: tuple[str, ...] = latency_queries.BUCKET_METRICS,
) -> pd.DataFrame:
    return _bucket_latency(store_url(), run_ids, edges, by, window, metrics)


def ttft_heatmap(
    run_ids: tuple[str, ...],
    edges: tuple[int, ...],
    t0: float,
    window_s: float,
    window: Window = (None, None),
) -> pd.DataFrame:
    return _ttft_heatmap(store_url(), run_ids, edges, t0, window_s, window)


def latency_timeline(
    run_ids: tuple[str, ...], t0: float, window_s: float, window: Window = (None, None)
) -> pd.DataFrame:
    return _latency_timeline(store_url(), run_ids, t0, window_s, window)


def request_sample(
    run_ids: tuple[str, ...], limit: int, window: Window = (None, None)
) -> tuple[pd.DataFrame, int]:
    return _request_sample(store_url(), run_ids, limit, window)


def slowest(
    run_ids: tuple[str, ...], n: int, metric: str, window: Window = (None, None)
) -> pd.DataFrame:
    return _slowest(store_url(), run_ids, n, metric, window)


def in_flight_at(run_id: str, instants: tuple[float, ...]) -> pd.DataFrame:
    return _in_flight_at(store_url(), run_id, instants)


def load_levels(run_id: str) -> pd.DataFrame:
    return _load_levels(store_url(), run_id)


def run_sources(run_id: str) -> dict[str, Any]:
    return _run_sources(store_url(), run_id)


def engine_timeline(
    targets: tuple[str, ...], since: float, until: float, max_points: int = 600
) -> pd.DataFrame:
    return _engine_timeline(store_url(), targets, since, until, max_points)


def gpu_timeline(
    hosts: tuple[str, ...], since: float, until: float, max_points: int = 600
) -> pd.DataFrame:
    return _gpu_timeline(store_url(), hosts, since, until, max_points)


def run_states(run_ids: tuple[str, ...]) -> pd.DataFrame:
    """Per run: mean GPU utilisation, peak KV usage, most requests running, peak GPU memory
    fraction (``memory_queries.run_states``)."""
    return _run_states(store_url(), run_ids)


def aligned_runs(run_ids: tuple[str, ...]) -> pd.DataFrame:
    return _aligned_runs(store_url(), run_ids)
