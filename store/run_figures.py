"""Each run's summary — counts, tokens, time span and P50…P99 of every latency metric — kept as
a rollup (``store.rollups``) so that Home, Compare and Latency read it instead of sorting a
run's millions of rows again; and the figures derived from it and the run's own columns
(duration, throughput, error rates: ARCHITECTURE §5, docs/metrics.md), in one place.

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
import sqlalchemy as sa

from errors import StoreError
from store import rollups
from store.db import Store
from store.sql import DETAIL_QUANTILES, OK, _coerce, _dist_columns, _filtered, _qname

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
        for s in ("n", "mean_ms", *(f"{_qname(q)}_ms" for q in DETAIL_QUANTILES))
    ),
)

_KIND: Final = "run_stats"

log = logging.getLogger("servescope.run_stats")


def _stmt(sql: str) -> sa.TextClause:
    return sa.text(sql).bindparams(sa.bindparam("run_ids", expanding=True))


def compute(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """The summary of ``run_ids`` aggregated from their rows (one scan of ``requests`` and one
    of ``token_gaps``); one row per run that has requests. Prefer :func:`get`."""
    ids = list(run_ids)
    if not ids:
        return _empty()
    d = store.dialect
    dist = ",\n".join(
        _dist_columns(d, "q.ttft_ms", "ttft", OK)
        + _dist_columns(d, "q.tpot_ms", "tpot", OK)
        + _dist_columns(d, "q.e2e_ms", "e2e", OK)
        + _dist_columns(d, "q.lag_ms", "lag", None)
    )
    itl = ",\n".join(_dist_columns(d, "g.gap_ms", "itl", None))
    sql = f"""
        WITH a AS (
            SELECT q.run_id,
                   COUNT(*) AS requests,
                   {_filtered("COUNT(*)", OK)} AS ok,
                   {_filtered("COUNT(*)", "q.status = 'timeout'")} AS timeouts,
                   {_filtered("COUNT(*)", "q.status = 'cancelled'")} AS cancelled,
                   {_filtered("SUM(q.input_tokens)", OK)} AS input_tokens,
                   {_filtered("SUM(q.output_tokens)", OK)} AS output_tokens,
                   COUNT(q.sent_at) AS sent_n,
                   MIN(q.sent_at) AS first_sent,
                   MAX(q.sent_at) AS last_sent,
                   MAX(q.done_at) AS last_done,
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
        SELECT a.*, i.* FROM a LEFT JOIN i ON i.i_run_id = a.run_id
    """
    df = store.read_df(_stmt(sql), {"run_ids": ids}).drop(columns=["i_run_id"])
    return _typed(df[list(COLUMNS)])


def _empty() -> pd.DataFrame:
    return _typed(pd.DataFrame({c: pd.Series([], dtype=object) for c in COLUMNS}))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df = _coerce(df, ints=COUNTS)
    for col in COLUMNS[1:]:
        if col not in COUNTS:
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


def light(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """What :func:`figures` needs of each run — counts, tokens, first send, last send and last
    completion — from the stored summaries when every one is fresh, else from one cheap scan
    (no percentiles, nothing kept): for reads that want throughput, not latency."""
    kept = stored(store, run_ids)
    if kept is not None:
        return kept
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if not ids:
        return _empty()[["run_id", *_LIGHT_COUNTS, "first_sent", "last_sent", "last_done"]]
    sql = f"""
        SELECT q.run_id,
               COUNT(*) AS requests,
               {_filtered("COUNT(*)", OK)} AS ok,
               {_filtered("COUNT(*)", "q.status = 'timeout'")} AS timeouts,
               {_filtered("SUM(q.input_tokens)", OK)} AS input_tokens,
               {_filtered("SUM(q.output_tokens)", OK)} AS output_tokens,
               MIN(q.sent_at) AS first_sent,
               MAX(q.sent_at) AS last_sent,
               MAX(q.done_at) AS last_done
        FROM requests q WHERE q.run_id IN :run_ids
        GROUP BY q.run_id
    """
    df = _coerce(store.read_df(_stmt(sql), {"run_ids": ids}), ints=_LIGHT_COUNTS)
    for col in ("first_sent", "last_sent", "last_done"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return df


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


def figures(runs: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (rows of the runs table: run_id, duration_s, started_at, ended_at, gpu_count …)
    joined with their ``stats`` (from :func:`get`), plus the derived figures.

    Adds every summary column (a run without requests gets 0 counts and NaN statistics),
    ``errors`` (every non-ok request), ``error_rate``, ``timeout_rate``, ``duration_s`` (the
    run's own, else ended − started, else first send → last completion), and
    ``request_throughput``, ``output_throughput``, ``total_token_throughput`` (successful
    requests and their tokens per second) and ``output_throughput_per_gpu``. Keeps ``runs``'
    order and index.
    """
    out = runs.merge(stats, on="run_id", how="left", suffixes=("", "_stats"))
    out.index = runs.index
    for name in COUNTS:
        if name in out or name in _LIGHT_COUNTS:
            out[name] = pd.to_numeric(out[name]).fillna(0).astype("int64")
    requests = out["requests"].astype("float64").replace(0.0, np.nan)
    out["errors"] = out["requests"] - out["ok"]
    out["error_rate"] = out["errors"] / requests
    out["timeout_rate"] = out["timeouts"] / requests

    def num(name: str) -> pd.Series:
        if name not in out:
            return pd.Series(np.nan, index=out.index, dtype="float64")
        return pd.to_numeric(out[name]).astype("float64")

    duration = num("duration_s").where(num("duration_s") != 0)
    span = (num("ended_at") - num("started_at")).where(lambda s: s != 0)
    measured = (num("last_done") - num("first_sent")).where(lambda s: s != 0)
    duration = duration.fillna(span).fillna(measured)
    out["duration_s"] = duration
    out["request_throughput"] = out["ok"] / duration
    out["output_throughput"] = out["output_tokens"] / duration
    out["total_token_throughput"] = (out["input_tokens"] + out["output_tokens"]) / duration
    gpus = num("gpu_count").where(lambda s: s != 0)
    out["output_throughput_per_gpu"] = out["output_throughput"] / gpus
    return out
