"""Intent-named reads → DataFrames (ARCHITECTURE §4, §11.6). The dashboard reads only through these.

Everything is aggregated in SQL, so a store with millions of requests never loads them all:
percentiles use linear interpolation (DuckDB ``quantile_cont``, PostgreSQL ``percentile_cont``,
both the same definition as ``analysis.metrics.percentile``); distributions come back as a
deterministic stride sample of at most ``limit`` values.

Definitions (ARCHITECTURE §5, docs/metrics.md): latency percentiles and throughput count
successful requests (``status = 'ok'``) only; run duration is the run's own ``duration_s``, else
``ended_at − started_at``, else first send → last completion.

Every statement is ``text()`` with bound parameters; the only pieces formatted into SQL are
constants of this module (column names from a fixed map, percentile fractions).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import rollups, run_stats
from store.db import Store
from store.sql import (
    BUCKET_QUANTILES,
    OK,
    SAMPLE_METRICS,
    _coerce,
    _dist_columns,
    _json_object,
    _qname,
)

_RUN_COLUMNS: Final = (
    "run_id, name, source, framework, framework_version, model, gpu_name, gpu_count, endpoint, "
    "api, host, workload, arrival, target_rate, burstiness, concurrency, sweep_id, started_at, "
    "ended_at, duration_s, status, client_bound, client_bound_reason, achieved_rate, "
    "output_tokens_estimated, engine_params, client_params, notes, tags, created_at"
)


# --- the store as a whole --------------------------------------------------------------------


def store_overview(store: Store) -> pd.DataFrame:
    """Runs by source, framework and model: runs, requests, first and last start.

    Columns: source, framework, model, runs, requests, first_started_at, last_started_at.
    Empty when the store holds no runs.
    """
    sql = """
        WITH per_run AS (
            SELECT run_id, COUNT(*) AS n FROM requests GROUP BY run_id
        )
        SELECT r.source, r.framework, r.model,
               COUNT(*) AS runs,
               SUM(COALESCE(p.n, 0)) AS requests,
               MIN(COALESCE(r.started_at, r.created_at)) AS first_started_at,
               MAX(COALESCE(r.started_at, r.created_at)) AS last_started_at
        FROM runs r LEFT JOIN per_run p ON p.run_id = r.run_id
        GROUP BY r.source, r.framework, r.model
        ORDER BY runs DESC, r.source, r.framework, r.model
    """
    df = store.read_df(sql)
    return _coerce(df, ints=("runs", "requests"))


def latest_runs(store: Store, limit: int = 50) -> pd.DataFrame:
    """The ``limit`` most recent runs, newest first, each with its headline figures.

    Columns: run_id, name, source, framework, framework_version, model, gpu_name, gpu_count,
    workload, arrival, concurrency, target_rate, started_at, status, client_bound,
    client_bound_reason, requests, ok, errors, output_tokens, duration_s, output_throughput
    (tokens/s), request_throughput (requests/s), ttft_n, ttft_p50_ms, ttft_p99_ms, tpot_n,
    tpot_p50_ms, tpot_p99_ms — percentiles over successful requests — and aggregates_only (an
    import that holds only the tool's own aggregates, no per-request rows). The figures come
    from each run's stored summary (``store.run_stats``).
    """
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    sql = """
        SELECT run_id, name, source, framework, framework_version, model, gpu_name, gpu_count,
               workload, arrival, concurrency, target_rate, started_at, ended_at, duration_s,
               status, client_bound, client_bound_reason, tool_summary
        FROM runs
        ORDER BY COALESCE(started_at, created_at) DESC NULLS LAST, run_id
        LIMIT :limit
    """
    runs = store.read_df(sql, {"limit": int(limit)})
    df = run_stats.figures(runs, run_stats.get(store, runs["run_id"].tolist()))
    summaries = [_json_object(v) for v in df["tool_summary"].tolist()]
    df["aggregates_only"] = pd.Series(
        [bool(t and t.get("aggregates_only")) for t in summaries], index=df.index, dtype=bool
    )
    columns = [
        *(c for c in runs.columns if c not in ("ended_at", "duration_s", "tool_summary")),
        "requests",
        "ok",
        "errors",
        "output_tokens",
        "duration_s",
        "output_throughput",
        "request_throughput",
        "ttft_n",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "tpot_n",
        "tpot_p50_ms",
        "tpot_p99_ms",
        "aggregates_only",
    ]
    return _coerce(df[columns].reset_index(drop=True), bools=("client_bound",))


# --- one run ---------------------------------------------------------------------------------

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
    *(c for c in run_stats.COLUMNS if c.startswith(("ttft_", "tpot_", "e2e_", "lag_"))),
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
    df = run_stats.figures(runs, run_stats.get(store, runs["run_id"].tolist()))
    keep = [c for c in runs.columns if c not in ("duration_s",)] + list(_DETAIL_FIGURES)
    return _coerce(df[keep], bools=("client_bound", "output_tokens_estimated"))


def run_tool_summary(store: Store, run_id: str) -> pd.DataFrame:
    """An imported run's own aggregates, as the tool reported them (for cross-checks).

    One row: run_id, source, tool_summary (the decoded JSON object; None when the run has none,
    e.g. a ServeScope run, or when it is not valid JSON). Empty when the run does not exist.
    """
    sql = "SELECT run_id, source, tool_summary FROM runs WHERE run_id = :run_id"
    df = store.read_df(sql, {"run_id": run_id})
    df["tool_summary"] = pd.Series(
        [_json_object(v) for v in df["tool_summary"].tolist()], index=df.index, dtype=object
    )
    return df


def run_itl_summary(store: Store, run_id: str) -> pd.DataFrame:
    """Pooled inter-token latency of a run's requests that did not fail, from ``token_gaps``
    (through the run's stored summary).

    One row: itl_n, itl_mean_ms, itl_p50_ms … itl_p99_ms; itl_n = 0 and NULLs when
    the run has no recorded gaps (e.g. an import without per-chunk timings).
    """
    cols = [c for c in run_stats.COLUMNS if c.startswith("itl_")]
    stats = run_stats.get(store, [run_id])
    if stats.empty:
        row = {c: [0 if c == "itl_n" else np.nan] for c in cols}
        return _coerce(pd.DataFrame(row), ints=("itl_n",))
    return _coerce(stats[cols].reset_index(drop=True), ints=("itl_n",))


def run_requests(store: Store, run_id: str, limit: int = 5000) -> pd.DataFrame:
    """A run's request rows, ordered by seq: all of them up to ``limit``, else a stride sample.

    The stride sample keeps every k-th ``seq`` (k = ⌈requests / limit⌉), so it spans the whole
    run evenly; it never returns more than ``limit`` rows.
    """
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    sql = """
        WITH n AS (SELECT COUNT(*) AS c FROM requests WHERE run_id = :run_id)
        SELECT q.seq, q.status, q.http_status, q.input_tokens, q.output_tokens,
               q.cached_tokens, q.ttft_ms, q.tpot_ms, q.e2e_ms, q.lag_ms, q.sent_at,
               q.finish_reason, q.error
        FROM requests q CROSS JOIN n
        WHERE q.run_id = :run_id
          AND MOD(q.seq, GREATEST(1, CAST(CEIL(n.c * 1.0 / :limit) AS INTEGER))) = 0
        ORDER BY q.seq
        LIMIT :limit
    """
    df = store.read_df(sql, {"run_id": run_id, "limit": int(limit)})
    return _coerce(df, ints=("seq",))


#: Values per metric Home draws a run's histograms and ECDFs from.
SAMPLE_LIMIT: Final = 20_000


def run_metric_sample(
    store: Store, run_id: str, metric: str, limit: int = SAMPLE_LIMIT
) -> pd.DataFrame:
    """Values of one metric (``ttft_ms``, ``tpot_ms``, ``e2e_ms`` or ``itl_ms``) for its chart.

    Successful requests only (ITL: the gaps of requests that did not fail); every value when
    there are at most ``limit``, else a stride sample of about ``limit`` spread over the run.
    One float column, ``value`` (ms). Kept as a rollup of the run (``store.rollups``).
    """
    if metric not in SAMPLE_METRICS:
        raise InputError(
            f"unknown metric {metric!r}", hint=f"choose one of {', '.join(SAMPLE_METRICS)}"
        )
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    column = SAMPLE_METRICS[metric]
    if metric == "itl_ms":  # the gaps of requests that did not fail (as run_stats pools them)
        rows = """
            FROM token_gaps g
            WHERE g.run_id = :run_id AND NOT EXISTS (
                SELECT 1 FROM requests q
                WHERE q.run_id = g.run_id AND q.seq = g.seq AND q.status <> 'ok'
            )
        """
        pick, order = "g.gap_ms", "g.seq, g.idx"
        stride_key = "MOD(g.seq + g.idx, :k) = 0"
    else:
        rows = f"FROM requests q WHERE q.run_id = :run_id AND {OK} AND q.{column} IS NOT NULL"
        pick, order = f"q.{column}", "q.seq"
        stride_key = "MOD(q.seq, :k) = 0"
    sql = f"SELECT {pick} AS value {rows} AND {stride_key} ORDER BY {order} LIMIT :limit"

    def stride() -> int:
        """Every k-th value: k from the run's stored summary's count when there is one."""
        stats = run_stats.stored(store, [run_id])
        if stats is not None and not stats.empty:
            n = int(stats[f"{metric.removesuffix('_ms')}_n"].iloc[0])
        else:
            n = int(store.read_df(f"SELECT COUNT(*) AS c {rows}", {"run_id": run_id})["c"][0])
        return max(1, -(-n // int(limit)))

    def compute() -> pd.DataFrame:
        df = store.read_df(sql, {"run_id": run_id, "limit": int(limit), "k": stride()})
        if df.empty:
            return pd.DataFrame({"value": pd.Series([], dtype="float64")})
        df["value"] = pd.to_numeric(df["value"]).astype("float64")
        return df

    params = {"metric": metric, "limit": int(limit)}
    return rollups.cached_run(store, run_id, "run_metric_sample", params, compute)


def run_errors(store: Store, run_id: str, limit: int = 10) -> pd.DataFrame:
    """The most frequent failures of a run: status, http_status, error, count (newest kinds first
    on ties). Empty when every request succeeded."""
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    sql = """
        SELECT q.status, q.http_status, q.error, COUNT(*) AS count
        FROM requests q
        WHERE q.run_id = :run_id AND q.status <> 'ok'
        GROUP BY q.status, q.http_status, q.error
        ORDER BY count DESC, q.status, q.error
        LIMIT :limit
    """
    return _coerce(store.read_df(sql, {"run_id": run_id, "limit": int(limit)}), ints=("count",))


# --- across runs -----------------------------------------------------------------------------


def latency_by_bucket(
    store: Store,
    metric: str = "ttft_ms",
    edges: Sequence[int] = (256, 1024, 4096, 16384, 65536),
    run_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Percentiles of ``metric`` per input-length bucket, over successful requests.

    ``edges`` are the buckets' lower bounds after the first (see ``analysis.buckets``): bucket
    ``i`` holds ``edges[i-1] <= input_tokens < edges[i]``. ``run_ids`` restricts to those runs
    (None: every run). ``itl_ms`` pools the token gaps of the requests in each bucket.
    Columns: bucket (index into ``analysis.buckets.bucket_labels(edges)``), n, mean_ms, p50_ms,
    p90_ms, p95_ms, p99_ms, p99_9_ms; only buckets with samples, in bucket order.
    """
    if metric not in SAMPLE_METRICS:
        raise InputError(
            f"unknown metric {metric!r}", hint=f"choose one of {', '.join(SAMPLE_METRICS)}"
        )
    bounds = [int(e) for e in edges]
    if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
        raise InputError(f"bucket edges {bounds} must be a non-empty increasing list")
    params: dict[str, Any] = {f"e{i}": e for i, e in enumerate(bounds)}
    case = (
        "CASE "
        + " ".join(f"WHEN q.input_tokens < :e{i} THEN {i}" for i in range(len(bounds)))
        + f" ELSE {len(bounds)} END"
    )
    expr = "g.gap_ms" if metric == "itl_ms" else f"q.{SAMPLE_METRICS[metric]}"
    source = (
        "token_gaps g JOIN requests q ON q.run_id = g.run_id AND q.seq = g.seq"
        if metric == "itl_ms"
        else "requests q"
    )
    where = [OK, "q.input_tokens IS NOT NULL", f"{expr} IS NOT NULL"]
    if run_ids is not None:
        if not run_ids:
            return pd.DataFrame(
                columns=["bucket", "n", "mean_ms", *(f"{_qname(q)}_ms" for q in BUCKET_QUANTILES)]
            )
        where.append("q.run_id IN :run_ids")
        params["run_ids"] = list(run_ids)
    cols = _dist_columns(store.dialect, "v", "x", None, BUCKET_QUANTILES)
    sql = f"""
        WITH b AS (
            SELECT {case} AS bucket, {expr} AS v
            FROM {source}
            WHERE {" AND ".join(where)}
        )
        SELECT bucket, {", ".join(cols)}
        FROM b
        GROUP BY bucket
        ORDER BY bucket
    """
    stmt = sa.text(sql)
    if run_ids is not None:
        stmt = stmt.bindparams(sa.bindparam("run_ids", expanding=True))
    df = store.read_df(stmt, params)
    df.columns = [c[2:] if c.startswith("x_") else c for c in df.columns]
    return _coerce(df, ints=("bucket", "n"))
