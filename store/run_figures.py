"""Each run's summary — counts, tokens, time span and P50…P99 of every latency metric — kept as
a rollup (``store.rollups``) so that Home, Compare and Latency read it instead of sorting a
run's millions of rows again; and the figures derived from it and the run's own columns
(duration, throughput, error rates: DESIGN §5, docs/metrics.md), in one place.

Definitions: latency percentiles, tokens and throughput count successful requests only; client
lag covers every request; ITL pools the token gaps of every request that did not fail (found
with an anti-join against the few failed ones); duration is the run's ``duration_s``, else
``ended_at − started_at``, else first send → last completion.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import numpy as np
import pandas as pd

from errors import StoreError
from store import rollups
from store.db import Store
from store.sql import (
    DETAIL_QUANTILES,
    OK,
    coerce,
    dist_columns,
    filtered,
    qname,
    with_lists,
)

#: Metrics summarised per run (``{metric}_n``, ``_mean_ms``, ``_p50_ms`` … ``_p99_ms``).
METRICS: Final = ("ttft", "tpot", "e2e", "lag", "itl")

COUNTS: Final = (
    "requests",
    "ok",
    "timeouts",
    "cancelled",
    "input_tokens",
    "output_tokens",
    "sent_n",  # requests with a send time (an import may have none)
    *(f"{m}_n" for m in METRICS),
)

#: Every column of a run's summary, in order.
COLUMNS: Final = (
    "run_id",
    *COUNTS[:7],
    "first_sent",
    "last_sent",
    "last_done",
    *(
        f"{m}_{s}"
        for m in METRICS
        for s in ("n", "mean_ms", *(f"{qname(q)}_ms" for q in DETAIL_QUANTILES))
    ),
)

#: The figures derived from a run's counts and its own columns (DESIGN §5).
FIGURES: Final = (
    "errors",
    "error_rate",
    "timeout_rate",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "output_throughput_per_gpu",
)

#: THE definition of a run's duration: its own ``duration_s``, else ``ended_at − started_at``,
#: else first send → last completion; only a positive span is a duration. ``r``: runs; ``a``:
#: its counts. (``analysis.metrics.run_duration`` is the same rule without a store.)
DURATION_SQL: Final = (
    "COALESCE(CASE WHEN r.duration_s > 0 THEN r.duration_s END, "
    "CASE WHEN r.ended_at - r.started_at > 0 THEN r.ended_at - r.started_at END, "
    "CASE WHEN a.last_done - a.first_sent > 0 THEN a.last_done - a.first_sent END)"
)


def _per_second(amount: str) -> str:
    return f"CAST({amount} AS DOUBLE PRECISION) / {DURATION_SQL}"


#: A run's counts over ``requests q`` (what the figures need): every request, the successful
#: ones, timeouts, tokens of successful requests, first and last send, last completion.
_COUNTS_SQL: Final = f"""COUNT(*) AS requests,
                   {filtered("COUNT(*)", OK)} AS ok,
                   {filtered("COUNT(*)", "q.status = 'timeout'")} AS timeouts,
                   {filtered("SUM(q.input_tokens)", OK)} AS input_tokens,
                   {filtered("SUM(q.output_tokens)", OK)} AS output_tokens,
                   MIN(q.sent_at) AS first_sent,
                   MAX(q.sent_at) AS last_sent,
                   MAX(q.done_at) AS last_done"""

#: THE definitions of the figures, in SQL over ``runs r`` joined with a run's counts ``a``
#: (requests, ok, timeouts, input_tokens, output_tokens of successful requests, first_sent,
#: last_done): errors are every request that is not ok; throughput counts successful requests
#: and their tokens per second of the run's duration; per GPU divides by a known gpu_count.
#: ``analysis.metrics.run_summary`` is the pure version (no store); a test holds them equal.
FIGURES_SQL: Final = f"""
    COALESCE(a.requests, 0) - COALESCE(a.ok, 0) AS errors,
    CAST(COALESCE(a.requests, 0) - COALESCE(a.ok, 0) AS DOUBLE PRECISION)
        / NULLIF(a.requests, 0) AS error_rate,
    CAST(COALESCE(a.timeouts, 0) AS DOUBLE PRECISION) / NULLIF(a.requests, 0) AS timeout_rate,
    {DURATION_SQL} AS duration_s,
    {_per_second("COALESCE(a.ok, 0)")} AS request_throughput,
    {_per_second("COALESCE(a.output_tokens, 0)")} AS output_throughput,
    {_per_second("COALESCE(a.input_tokens, 0) + COALESCE(a.output_tokens, 0)")}
        AS total_token_throughput,
    {_per_second("COALESCE(a.output_tokens, 0)")} / NULLIF(r.gpu_count, 0)
        AS output_throughput_per_gpu"""

_KIND: Final = "run_stats"

log = logging.getLogger("servescope.run_stats")


def compute(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """The summary and figures of ``run_ids`` aggregated from their rows (one scan of
    ``requests`` and one of ``token_gaps``); one row per run that has requests. Prefer
    :func:`get`."""
    ids = list(run_ids)
    if not ids:
        return _empty()
    d = store.dialect
    dist = ",\n".join(
        dist_columns(d, "q.ttft_ms", "ttft", OK)
        + dist_columns(d, "q.tpot_ms", "tpot", OK)
        + dist_columns(d, "q.e2e_ms", "e2e", OK)
        + dist_columns(d, "q.lag_ms", "lag", None)
    )
    itl = ",\n".join(dist_columns(d, "g.gap_ms", "itl", None))
    sql = f"""
        WITH a AS (
            SELECT q.run_id,
                   {_COUNTS_SQL},
                   {filtered("COUNT(*)", "q.status = 'cancelled'")} AS cancelled,
                   COUNT(q.sent_at) AS sent_n,
                   {dist}
            FROM requests q WHERE q.run_id IN :run_ids
            GROUP BY q.run_id
        ),
        f AS (
            SELECT run_id, seq FROM requests WHERE run_id IN :run_ids AND status <> 'ok'
        ),
        i AS (
            SELECT g.run_id AS i_run_id, {itl}
            FROM token_gaps g
            LEFT JOIN f ON f.run_id = g.run_id AND f.seq = g.seq
            WHERE g.run_id IN :run_ids AND f.seq IS NULL
            GROUP BY g.run_id
        )
        SELECT r.run_id, {_summary_columns()}, {FIGURES_SQL}
        FROM runs r
        JOIN a ON a.run_id = r.run_id
        LEFT JOIN i ON i.i_run_id = r.run_id
    """
    df = store.read_df(with_lists(sql), {"run_ids": ids})
    return _typed(df[[*COLUMNS, *FIGURES]])


def _summary_columns() -> str:
    return ", ".join(f"{'i' if c.startswith('itl_') else 'a'}.{c}" for c in COLUMNS[1:])


def _empty() -> pd.DataFrame:
    return _typed(pd.DataFrame({c: pd.Series([], dtype=object) for c in (*COLUMNS, *FIGURES)}))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = coerce(df, ints=(*COUNTS, "errors"))
    for col in (*COLUMNS[1:], *FIGURES):
        if col in df and col not in (*COUNTS, "errors"):
            df[col] = pd.to_numeric(df[col]).astype("float64")
    df["run_id"] = df["run_id"].astype(object)
    return df


def get(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """The summary of each run of ``run_ids`` that has requests (columns :data:`COLUMNS`), from
    its stored rollup when the run's rows have not changed since, else aggregated (and kept)."""
    return rollups.cached_runs(store, run_ids, _KIND, {}, lambda ids: compute(store, ids))


def stored(store: Store, run_ids: Sequence[str]) -> pd.DataFrame | None:
    """The stored, fresh summaries of ``run_ids``, or None when any is missing or stale
    (nothing is computed: for reads that have a cheaper way than the whole summary)."""
    return rollups.fresh_runs(store, run_ids, _KIND, {})


_LIGHT_COUNTS: Final = ("requests", "ok", "timeouts", "input_tokens", "output_tokens")


def light_stats(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """Each run's counts, span and figures (:data:`FIGURES`) — what throughput needs, no
    percentiles — from the stored summaries when every one is fresh, else from one cheap scan
    (nothing kept): for reads that want throughput, not latency."""
    kept = stored(store, run_ids)
    if kept is not None:
        return kept
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if not ids:
        return _empty()[
            ["run_id", *_LIGHT_COUNTS, "first_sent", "last_sent", "last_done", *FIGURES]
        ]
    sql = f"""
        WITH a AS (
            SELECT q.run_id,
                   {_COUNTS_SQL}
            FROM requests q WHERE q.run_id IN :run_ids
            GROUP BY q.run_id
        )
        SELECT r.run_id, {", ".join(f"a.{c}" for c in _LIGHT_COUNTS)}, a.first_sent,
               a.last_sent, a.last_done, {FIGURES_SQL}
        FROM runs r JOIN a ON a.run_id = r.run_id
    """
    return _typed(store.read_df(with_lists(sql), {"run_ids": ids}))


def refresh(store: Store, run_ids: Sequence[str]) -> bool:
    """Compute and keep the summaries of ``run_ids`` now (after an import or a bench run), so
    the first page that shows them does not wait for it. Best effort: False (and nothing
    raised) when the store refused, e.g. stayed locked — the first view then computes them."""
    ids = list(dict.fromkeys(run_ids))
    try:
        for start in range(0, len(ids), 200):
            get(store, ids[start : start + 200])
    except StoreError as exc:
        log.info("run summaries left to the first view: %s", exc)
        return False
    return True


def attach(store: Store, runs: pd.DataFrame, *, light: bool = False) -> pd.DataFrame:
    """``runs`` (rows of a run listing: run_id and any of the run's own columns) with each run's
    summary and figures (:data:`COLUMNS`, :data:`FIGURES`; the effective ``duration_s`` replaces
    the run's own). A run without requests gets 0 counts and NaN statistics. ``light``: counts
    and figures only (:func:`light_stats`). Keeps ``runs``' order and index."""
    ids = [str(r) for r in runs["run_id"]]
    stats = (light_stats if light else get)(store, ids)
    out = runs.drop(columns=[c for c in FIGURES if c in runs]).merge(
        stats, on="run_id", how="left", suffixes=("", "_stats")
    )
    out.index = runs.index
    for name in (*COUNTS, "errors"):
        if name in out:
            out[name] = pd.to_numeric(out[name]).fillna(0).astype("int64")
    return out


#: What run_detail adds to the run's own columns (its summary without ITL, see run_itl_summary).
_DETAIL_FIGURES: Final = (
    "requests",
    "ok",
    "errors",
    "timeouts",
    "cancelled",
    "input_tokens",
    "output_tokens",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "output_throughput_per_gpu",
    *(c for c in COLUMNS if c.startswith(("ttft_", "tpot_", "e2e_", "lag_"))),
)


def run_detail(store: Store, run_id: str) -> pd.DataFrame:
    """One row: the run's columns plus its summary; empty when the run does not exist.

    Adds: requests, ok, errors (every non-ok request), timeouts, cancelled, input_tokens and
    output_tokens (successful requests), duration_s, request_throughput, output_throughput,
    total_token_throughput, output_throughput_per_gpu, and for ttft/tpot/e2e/lag the sample count
    ``*_n``, ``*_mean_ms`` and ``*_p50_ms … *_p99_ms`` (successful requests; lag: all).
    """
    runs = store.read_df(
        f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = :run_id", {"run_id": run_id}
    )
    df = attach(store, runs)
    keep = [c for c in runs.columns if c not in ("duration_s",)] + list(_DETAIL_FIGURES)
    return coerce(df[keep], bools=("client_bound", "output_tokens_estimated"))


def run_itl_summary(store: Store, run_id: str) -> pd.DataFrame:
    """Pooled inter-token latency of a run's requests that did not fail, from ``token_gaps``
    (through the run's stored summary).

    One row: itl_n, itl_mean_ms, itl_p50_ms … itl_p99_ms; itl_n = 0 and NULLs when
    the run has no recorded gaps (e.g. an import without per-chunk timings).
    """
    cols = [c for c in COLUMNS if c.startswith("itl_")]
    stats = get(store, [run_id])
    if stats.empty:
        row = {c: [0 if c == "itl_n" else np.nan] for c in cols}
        return coerce(pd.DataFrame(row), ints=("itl_n",))
    return coerce(stats[cols].reset_index(drop=True), ints=("itl_n",))


_RUN_COLUMNS: Final = (
    "run_id, name, source, framework, framework_version, model, precision, kv_cache_dtype, "
    "gpu_name, gpu_count, endpoint, "
    "api, host, workload, arrival, target_rate, burstiness, concurrency, sweep_id, started_at, "
    "ended_at, duration_s, status, client_bound, client_bound_reason, achieved_rate, "
    "output_tokens_estimated, engine_params, client_params, notes, tags, created_at"
)
