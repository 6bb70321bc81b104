"""Cached reads of the Compare page (see ``ui.cache``: keyed by the store URL and hashable
arguments, a short-lived ``Store`` per read, no connection cached)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

import settings
from analysis import compare
from store import compare_queries
from ui.cache import _store

TTL_S = settings.cache_ttl_s()
#: Runs offered in the picker (newest first).
CANDIDATES_LIMIT = 500
#: Most values per run a CDF (and the bootstrap) is drawn from.
SAMPLE_LIMIT = compare_queries.SAMPLE_LIMIT
#: Bootstrap replicates for baseline vs candidate, and the percentiles compared.
N_BOOT = 300
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
PERCENTILES = (50.0, 90.0, 95.0, 99.0)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _candidates(url: str, limit: int) -> pd.DataFrame:
    with _store(url) as store:
        return compare_queries.candidates(store, limit)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _run_aggregates(url: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    with _store(url) as store:
        return compare_queries.run_aggregates(store, run_ids)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _slo_attainment(
    url: str, run_ids: tuple[str, ...], thresholds: tuple[tuple[str, float], ...]
) -> pd.DataFrame:
    with _store(url) as store:
        return compare_queries.slo_attainment(store, run_ids, dict(thresholds))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _samples(url: str, run_ids: tuple[str, ...], limit: int) -> pd.DataFrame:
    """TTFT, TPOT, E2E (one read) and pooled ITL (another) samples, long: run_id, metric, value."""
    with _store(url) as store:
        wide = compare_queries.request_samples(store, run_ids, limit)
        itl = compare_queries.metric_samples(store, run_ids, "itl_ms", limit)
    long = wide.melt(id_vars="run_id", var_name="metric", value_name="value").dropna()
    itl = itl.assign(metric="itl_ms")[["run_id", "metric", "value"]]
    return pd.concat([long, itl], ignore_index=True)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _baseline_vs_candidate(
    url: str, run_ids: tuple[str, ...], baseline: str, candidate: str, limit: int, n_boot: int
) -> pd.DataFrame:
    samples = _samples(url, run_ids, limit)
    pick = {
        side: {
            m: samples.loc[(samples["run_id"] == rid) & (samples["metric"] == m), "value"].to_numpy(
                dtype="float64"
            )
            for m in METRICS
        }
        for side, rid in (("base", baseline), ("cand", candidate))
    }
    return compare.compare_samples(pick["base"], pick["cand"], PERCENTILES, n_boot=n_boot)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _samples_ready(url: str, run_ids: tuple[str, ...], limit: int) -> bool:
    with _store(url) as store:
        return compare_queries.samples_ready(store, run_ids, limit)


def samples_ready(run_ids: Sequence[str]) -> bool:
    """Whether every run's distribution samples are already stored (drawing them is free)."""
    return _samples_ready(settings.db_url(), tuple(run_ids), SAMPLE_LIMIT)


def candidates(limit: int = CANDIDATES_LIMIT) -> pd.DataFrame:
    """The newest runs to pick from (``compare_queries.candidates``; reads no requests)."""
    return _candidates(settings.db_url(), int(limit))


def run_aggregates(run_ids: Sequence[str]) -> pd.DataFrame:
    """Per-run aggregates of ``run_ids`` (``compare_queries.run_aggregates``)."""
    return _run_aggregates(settings.db_url(), tuple(run_ids))


def slo_attainment(run_ids: Sequence[str], thresholds: Mapping[str, float]) -> pd.DataFrame:
    """Per-run SLO attainment counts and goodput (``compare_queries.slo_attainment``)."""
    return _slo_attainment(
        settings.db_url(),
        tuple(run_ids),
        tuple(sorted((k, float(v)) for k, v in thresholds.items())),
    )


def samples(run_ids: Sequence[str], limit: int = SAMPLE_LIMIT) -> pd.DataFrame:
    """Bounded per-run samples of TTFT, TPOT, ITL and E2E: run_id, metric, value (ms)."""
    return _samples(settings.db_url(), tuple(run_ids), int(limit))


def baseline_vs_candidate(
    run_ids: Sequence[str],
    baseline: str,
    candidate: str,
    limit: int = SAMPLE_LIMIT,
    n_boot: int = N_BOOT,
) -> pd.DataFrame:
    """Percentile differences candidate − baseline with bootstrap CIs (``compare_samples``),
    from the same bounded samples as the CDFs (``samples(run_ids)``, read once)."""
    return _baseline_vs_candidate(
        settings.db_url(), tuple(run_ids), baseline, candidate, int(limit), int(n_boot)
    )
