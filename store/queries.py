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
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store.db import Store

#: Percentiles (fractions) reported per run in run_detail / run_itl_summary.
DETAIL_QUANTILES: Final[tuple[float, ...]] = (0.5, 0.9, 0.95, 0.99)

#: Percentiles (fractions) reported per input-length bucket (P50 … P99.9).
BUCKET_QUANTILES: Final[tuple[float, ...]] = (0.5, 0.9, 0.95, 0.99, 0.999)

#: Per-request metrics that can be sampled for distributions, and where they live.
SAMPLE_METRICS: Final[Mapping[str, str]] = {
    "ttft_ms": "ttft_ms",
    "tpot_ms": "tpot_ms",
    "e2e_ms": "e2e_ms",
    "itl_ms": "gap_ms",  # token_gaps.gap_ms, pooled
}

OK: Final = "q.status = 'ok'"

_RUN_COLUMNS: Final = (
    "run_id, name, source, framework, framework_version, model, gpu_name, gpu_count, endpoint, "
    "api, host, workload, arrival, target_rate, burstiness, concurrency, sweep_id, started_at, "
    "ended_at, duration_s, status, client_bound, client_bound_reason, achieved_rate, "
    "output_tokens_estimated, engine_params, client_params, notes, tags, created_at"
)


# --- SQL building blocks ---------------------------------------------------------------------


def _pcts(dialect: str, expr: str, qs: Sequence[float], cond: str | None = None) -> list[str]:
    """Continuous (linearly interpolated) percentiles of ``expr``, one SQL expression per q.

    The expressions share one aggregate over the whole list of fractions (DuckDB
    ``quantile_cont(x, [..])``, PostgreSQL ``percentile_cont(ARRAY[..]) WITHIN GROUP``), which
    both engines compute once per group: one sort instead of one per percentile.
    """
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within 0..1, got {q!r}")
    listed = ", ".join(repr(float(q)) for q in qs)
    if dialect == "postgresql":
        agg = f"percentile_cont(ARRAY[{listed}]::double precision[]) WITHIN GROUP (ORDER BY {expr})"
    else:  # duckdb
        agg = f"quantile_cont({expr}, [{listed}])"
    agg = _filtered(agg, cond)
    return [f"({agg})[{i}]" for i in range(1, len(qs) + 1)]


def _filtered(agg: str, cond: str | None) -> str:
    return agg + (f" FILTER (WHERE {cond})" if cond else "")


def _dist_columns(
    dialect: str,
    expr: str,
    prefix: str,
    cond: str | None,
    quantiles: Sequence[float] = DETAIL_QUANTILES,
) -> list[str]:
    """``{prefix}_n, {prefix}_mean_ms, {prefix}_p50_ms …`` aggregate columns over ``expr`` (ms)."""
    cols = [
        f"{_filtered(f'COUNT({expr})', cond)} AS {prefix}_n",
        f"{_filtered(f'AVG({expr})', cond)} AS {prefix}_mean_ms",
    ]
    for q, pct in zip(quantiles, _pcts(dialect, expr, quantiles, cond), strict=True):
        cols.append(f"{pct} AS {prefix}_{_qname(q)}_ms")
    return cols


def _qname(q: float) -> str:
    """0.5 → p50, 0.99 → p99, 0.999 → p99_9."""
    text = f"{q * 100:.3f}".rstrip("0").rstrip(".")
    return "p" + text.replace(".", "_")


#: Throughput (ARCHITECTURE §5) over a relation ``j`` with ok, input_tokens, output_tokens,
#: gpu_count and run_duration_s: successful requests and their tokens per second of the run.
THROUGHPUT_COLUMNS: Final = """
    CAST(COALESCE(j.ok, 0) AS DOUBLE PRECISION) / j.run_duration_s AS request_throughput,
    CAST(COALESCE(j.output_tokens, 0) AS DOUBLE PRECISION) / j.run_duration_s
        AS output_throughput,
    CAST(COALESCE(j.input_tokens, 0) + COALESCE(j.output_tokens, 0) AS DOUBLE PRECISION)
        / j.run_duration_s AS total_token_throughput,
    CAST(COALESCE(j.output_tokens, 0) AS DOUBLE PRECISION)
        / j.run_duration_s / NULLIF(j.gpu_count, 0) AS output_throughput_per_gpu"""

_DURATION: Final = (
    "COALESCE(NULLIF(r.duration_s, 0), NULLIF(r.ended_at - r.started_at, 0), "
    "NULLIF(a.last_done - a.first_sent, 0))"
)


def _coerce(
    df: pd.DataFrame, *, ints: Sequence[str] = (), bools: Sequence[str] = ()
) -> pd.DataFrame:
    """Give both dialects' results the same dtypes: ints (NULL → 0), bools (nullable), floats."""
    for col in ints:
        if col in df:
            df[col] = pd.to_numeric(df[col]).fillna(0).astype("int64")
    for col in bools:
        if col in df:
            df[col] = df[col].astype("boolean")
    float_like = [
        c
        for c in df.columns
        if c not in ints and c.endswith(("_ms", "_s", "_throughput", "_rate", "_at", "_per_gpu"))
    ]
    for col in float_like:
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return df


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
    import that holds only the tool's own aggregates, no per-request rows).
    """
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    d = store.dialect
    ttft_p50, ttft_p99 = _pcts(d, "q.ttft_ms", (0.5, 0.99), OK)
    tpot_p50, tpot_p99 = _pcts(d, "q.tpot_ms", (0.5, 0.99), OK)
    pct_cols = ",\n".join(
        [
            f"{_filtered('COUNT(q.ttft_ms)', OK)} AS ttft_n",
            f"{ttft_p50} AS ttft_p50_ms",
            f"{ttft_p99} AS ttft_p99_ms",
            f"{_filtered('COUNT(q.tpot_ms)', OK)} AS tpot_n",
            f"{tpot_p50} AS tpot_p50_ms",
            f"{tpot_p99} AS tpot_p99_ms",
        ]
    )
    sql = f"""
        WITH latest AS (
            SELECT run_id, name, source, framework, framework_version, model, gpu_name,
                   gpu_count, workload, arrival, concurrency, target_rate, started_at, ended_at,
                   duration_s, created_at, status, client_bound, client_bound_reason,
                   tool_summary
            FROM runs
            ORDER BY COALESCE(started_at, created_at) DESC NULLS LAST, run_id
            LIMIT :limit
        ),
        a AS (
            SELECT q.run_id,
                   COUNT(*) AS requests,
                   {_filtered("COUNT(*)", OK)} AS ok,
                   {_filtered("SUM(q.output_tokens)", OK)} AS output_tokens,
                   MIN(q.sent_at) AS first_sent,
                   MAX(q.done_at) AS last_done,
                   {pct_cols}
            FROM requests q JOIN latest l ON l.run_id = q.run_id
            GROUP BY q.run_id
        ),
        j AS (
            SELECT r.*, a.requests, a.ok, a.output_tokens, a.ttft_n, a.ttft_p50_ms,
                   a.ttft_p99_ms, a.tpot_n, a.tpot_p50_ms, a.tpot_p99_ms,
                   {_DURATION} AS run_duration_s
            FROM latest r LEFT JOIN a ON a.run_id = r.run_id
        )
        SELECT run_id, name, source, framework, framework_version, model, gpu_name, gpu_count,
               workload, arrival, concurrency, target_rate, started_at, status, client_bound,
               client_bound_reason, tool_summary,
               COALESCE(requests, 0) AS requests,
               COALESCE(ok, 0) AS ok,
               COALESCE(requests, 0) - COALESCE(ok, 0) AS errors,
               COALESCE(output_tokens, 0) AS output_tokens,
               run_duration_s AS duration_s,
               CAST(COALESCE(output_tokens, 0) AS DOUBLE PRECISION) / run_duration_s
                   AS output_throughput,
               CAST(COALESCE(ok, 0) AS DOUBLE PRECISION) / run_duration_s AS request_throughput,
               ttft_n, ttft_p50_ms, ttft_p99_ms, tpot_n, tpot_p50_ms, tpot_p99_ms
        FROM j
        ORDER BY COALESCE(started_at, created_at) DESC NULLS LAST, run_id
    """
    df = store.read_df(sql, {"limit": int(limit)})
    summaries = [_json_object(v) for v in df.pop("tool_summary").tolist()]
    df["aggregates_only"] = pd.Series(
        [bool(t and t.get("aggregates_only")) for t in summaries], index=df.index, dtype=bool
    )
    return _coerce(
        df,
        ints=("requests", "ok", "errors", "output_tokens", "ttft_n", "tpot_n"),
        bools=("client_bound",),
    )


# --- one run ---------------------------------------------------------------------------------


def run_detail(store: Store, run_id: str) -> pd.DataFrame:
    """One row: the run's columns plus its summary; empty when the run does not exist.

    Adds: requests, ok, errors (every non-ok request), timeouts, cancelled, input_tokens and
    output_tokens (successful requests), duration_s, request_throughput, output_throughput,
    total_token_throughput, output_throughput_per_gpu, and for ttft/tpot/e2e/lag the sample count
    ``*_n``, ``*_mean_ms`` and ``*_p50_ms … *_p99_ms`` (successful requests; lag: all).
    """
    d = store.dialect
    dist = ",\n".join(
        _dist_columns(d, "q.ttft_ms", "ttft", OK)
        + _dist_columns(d, "q.tpot_ms", "tpot", OK)
        + _dist_columns(d, "q.e2e_ms", "e2e", OK)
        + _dist_columns(d, "q.lag_ms", "lag", None)
    )
    sql = f"""
        WITH r AS (SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = :run_id),
        a AS (
            SELECT COUNT(*) AS requests,
                   {_filtered("COUNT(*)", OK)} AS ok,
                   {_filtered("COUNT(*)", "q.status = 'timeout'")} AS timeouts,
                   {_filtered("COUNT(*)", "q.status = 'cancelled'")} AS cancelled,
                   {_filtered("SUM(q.input_tokens)", OK)} AS input_tokens,
                   {_filtered("SUM(q.output_tokens)", OK)} AS output_tokens,
                   MIN(q.sent_at) AS first_sent,
                   MAX(q.done_at) AS last_done,
                   {dist}
            FROM requests q WHERE q.run_id = :run_id
        ),
        j AS (
            SELECT r.*, a.*, {_DURATION} AS run_duration_s FROM r CROSS JOIN a
        )
        SELECT j.*,
               j.requests - COALESCE(j.ok, 0) AS errors,
               {THROUGHPUT_COLUMNS}
        FROM j
    """
    df = store.read_df(sql, {"run_id": run_id})
    df = df.drop(columns=["duration_s", "first_sent", "last_done"], errors="ignore").rename(
        columns={"run_duration_s": "duration_s"}
    )
    return _coerce(
        df,
        ints=(
            "requests",
            "ok",
            "errors",
            "timeouts",
            "cancelled",
            "input_tokens",
            "output_tokens",
            "ttft_n",
            "tpot_n",
            "e2e_n",
            "lag_n",
        ),
        bools=("client_bound", "output_tokens_estimated"),
    )


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


def _json_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def run_itl_summary(store: Store, run_id: str) -> pd.DataFrame:
    """Pooled inter-token latency of a run's successful requests, from ``token_gaps``.

    One row: itl_n, itl_mean_ms, itl_p50_ms … itl_p99_ms; itl_n = 0 and NULLs when
    the run has no recorded gaps (e.g. an import without per-chunk timings).
    """
    cols = ",\n".join(_dist_columns(store.dialect, "g.gap_ms", "itl", None))
    sql = f"""
        SELECT {cols}
        FROM token_gaps g
        JOIN requests q ON q.run_id = g.run_id AND q.seq = g.seq
        WHERE g.run_id = :run_id AND {OK}
    """
    return _coerce(store.read_df(sql, {"run_id": run_id}), ints=("itl_n",))


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


def run_metric_sample(store: Store, run_id: str, metric: str, limit: int = 20000) -> pd.DataFrame:
    """Values of one metric (``ttft_ms``, ``tpot_ms``, ``e2e_ms`` or ``itl_ms``) for its chart.

    Successful requests only; every value when there are at most ``limit``, else a stride sample
    of about ``limit`` spread over the run. One float column, ``value`` (ms).
    """
    if metric not in SAMPLE_METRICS:
        raise InputError(
            f"unknown metric {metric!r}", hint=f"choose one of {', '.join(SAMPLE_METRICS)}"
        )
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    column = SAMPLE_METRICS[metric]
    if metric == "itl_ms":
        sql = f"""
            WITH g AS (
                SELECT g.seq, g.idx, g.gap_ms
                FROM token_gaps g
                JOIN requests q ON q.run_id = g.run_id AND q.seq = g.seq
                WHERE g.run_id = :run_id AND {OK}
            ),
            n AS (SELECT COUNT(*) AS c FROM g)
            SELECT g.gap_ms AS value
            FROM g CROSS JOIN n
            WHERE MOD(g.seq + g.idx, GREATEST(1, CAST(CEIL(n.c * 1.0 / :limit) AS INTEGER))) = 0
            ORDER BY g.seq, g.idx
            LIMIT :limit
        """
    else:
        sql = f"""
            WITH n AS (
                SELECT COUNT(*) AS c FROM requests q
                WHERE q.run_id = :run_id AND {OK} AND q.{column} IS NOT NULL
            )
            SELECT q.{column} AS value
            FROM requests q CROSS JOIN n
            WHERE q.run_id = :run_id AND {OK} AND q.{column} IS NOT NULL
              AND MOD(q.seq, GREATEST(1, CAST(CEIL(n.c * 1.0 / :limit) AS INTEGER))) = 0
            ORDER BY q.seq
            LIMIT :limit
        """
    df = store.read_df(sql, {"run_id": run_id, "limit": int(limit)})
    if df.empty:
        return pd.DataFrame({"value": pd.Series([], dtype="float64")})
    df["value"] = pd.to_numeric(df["value"]).astype("float64")
    return df


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
