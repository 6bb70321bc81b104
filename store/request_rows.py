"""Per-request rows of a selection (runs × a window on ``sent_at``) and bounded samples of
them: a run's span and TTFT summary, a deterministic stride sample (every k-th ``seq``), the
slowest requests, requests in flight at given instants, a run's rows for the Home table,
downloads and export, its errors, its token gaps, and per-run metric samples for distributions.
Nothing returns more rows than a stated limit, except the whole-run reads for export."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import rollups, run_figures, schema
from store.db import Store
from store.selection import cached_if_whole_run, read_with_run_ids, request_filter
from store.sql import (
    BUCKET_QUANTILES,
    OK,
    SAMPLE_METRICS,
    coerce,
    dist_columns,
    distinct_ids,
    filtered,
    with_lists,
)

#: The columns of a request sample.
_SAMPLE_COLS: Final = (
    "q.run_id, q.seq, q.status, q.sent_at, q.first_token_at, q.done_at, q.input_tokens, "
    "q.output_tokens, q.ttft_ms, q.tpot_ms, q.e2e_ms"
)

#: Most requests a sample returns (the Latency page's scatter and prefill fit).
SAMPLE_LIMIT: Final = 20_000
#: Values per run the Compare page draws its CDFs and bootstrap from.
DISTRIBUTION_SAMPLE_LIMIT: Final = 5_000


#: How many of the slowest requests the Latency page explains by default.
DEFAULT_TOP: Final = 20


#: Most slowest requests returned.
TOP_LIMIT: Final = 1_000


#: Sortable latency columns for the slowest requests.
SLOW_METRICS: Final[tuple[str, ...]] = ("ttft_ms", "e2e_ms", "tpot_ms")


def request_span(
    store: Store, run_ids: Sequence[str], since: float | None = None, until: float | None = None
) -> pd.DataFrame:
    """One row: requests, ok, first_sent, last_sent, last_done (NULLs when there are none).
    Whole runs are read from their stored summaries (``store.run_figures``)."""
    where, params = request_filter(run_ids, since, until)
    stats = run_figures.stored(store, run_ids) if since is None and until is None else None
    if stats is not None:
        row = {
            "requests": [int(stats["requests"].sum())],
            "ok": [int(stats["ok"].sum())],
            "first_sent": [stats["first_sent"].min()],
            "last_sent": [stats["last_sent"].max()],
            "last_done": [stats["last_done"].max()],
        }
        df = pd.DataFrame(row)
    else:
        sql = f"""
            SELECT COUNT(*) AS requests, {filtered("COUNT(*)", OK)} AS ok,
                   MIN(q.sent_at) AS first_sent, MAX(q.sent_at) AS last_sent,
                   MAX(q.done_at) AS last_done
            FROM requests q WHERE {" AND ".join(where)}
        """
        df = read_with_run_ids(store, sql, params)
    for col in ("first_sent", "last_sent", "last_done"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return coerce(df, ints=("requests", "ok"))


def ttft_summary(
    store: Store, run_ids: Sequence[str], since: float | None = None, until: float | None = None
) -> pd.DataFrame:
    """One row: ttft_n, ttft_mean_ms, ttft_p50_ms … ttft_p99_9_ms over successful requests."""
    where, params = request_filter(run_ids, since, until)
    cols = ", ".join(dist_columns(store.dialect, "q.ttft_ms", "ttft", OK, BUCKET_QUANTILES))
    sql = f"SELECT {cols} FROM requests q WHERE {' AND '.join(where)}"
    return coerce(read_with_run_ids(store, sql, params), ints=("ttft_n",))


def request_sample(
    store: Store,
    run_ids: Sequence[str],
    limit: int = SAMPLE_LIMIT,
    since: float | None = None,
    until: float | None = None,
) -> tuple[pd.DataFrame, int]:
    """Every request (all statuses) when there are at most ``limit``, else every k-th ``seq``
    (k = ⌈requests / limit⌉, spread evenly over the run); returns (rows, k).

    Columns: run_id, seq, status, sent_at, first_token_at, done_at, input_tokens,
    output_tokens, ttft_ms, tpot_ms, e2e_ms; ordered by sent_at. Never more than ``limit`` rows.
    """
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    where, params = request_filter(run_ids, since, until)
    cond = " AND ".join(where)
    stats = run_figures.stored(store, run_ids) if since is None and until is None else None
    if stats is not None:
        total = int(stats["requests"].sum())
    else:
        count = read_with_run_ids(
            store, f"SELECT COUNT(*) AS c FROM requests q WHERE {cond}", params
        )
        total = int(count["c"].iloc[0] or 0)
    stride = max(1, -(-total // int(limit)))
    params.update({"k": stride, "limit": int(limit)})
    sql = f"""
        SELECT {_SAMPLE_COLS} FROM requests q
        WHERE {cond} AND MOD(q.seq, :k) = 0
        ORDER BY q.sent_at, q.run_id, q.seq
        LIMIT :limit
    """
    df = cached_if_whole_run(
        store,
        run_ids,
        since,
        until,
        "request_sample",
        {"k": stride, "limit": int(limit)},
        lambda: coerce(read_with_run_ids(store, sql, params), ints=("seq",)),
    )
    return df, stride


def slowest_requests(
    store: Store,
    run_ids: Sequence[str],
    n: int = 20,
    metric: str = "ttft_ms",
    since: float | None = None,
    until: float | None = None,
) -> pd.DataFrame:
    """The ``n`` successful requests with the highest ``metric`` (ttft_ms, e2e_ms, tpot_ms),
    slowest first; same columns as :func:`request_sample` plus ``rank`` (1 = slowest)."""
    if metric not in SLOW_METRICS:
        raise InputError(
            f"unknown metric {metric!r}", hint=f"choose one of {', '.join(SLOW_METRICS)}"
        )
    if not 1 <= n <= TOP_LIMIT:
        raise InputError(f"n must be within 1..{TOP_LIMIT}, got {n}")
    where, params = request_filter(run_ids, since, until)
    params["n"] = int(n)
    sql = f"""
        SELECT {_SAMPLE_COLS} FROM requests q
        WHERE {" AND ".join(where)} AND {OK} AND q.{metric} IS NOT NULL
        ORDER BY q.{metric} DESC, q.run_id, q.seq
        LIMIT :n
    """
    df = cached_if_whole_run(
        store,
        run_ids,
        since,
        until,
        "slowest_requests",
        {"n": int(n), "metric": metric},
        lambda: coerce(read_with_run_ids(store, sql, params), ints=("seq",)),
    ).copy()
    df.insert(0, "rank", range(1, len(df) + 1))
    return df


def in_flight_at(store: Store, run_id: str, instants: Sequence[float]) -> pd.DataFrame:
    """Exact count of the run's requests in flight (sent_at ≤ t < done_at, or not done) at each
    instant: columns t, in_flight. One scan with a filtered count per instant, limited to the
    requests sent before the last instant and not done before the first (for a handful of
    instants: the slowest requests)."""
    ts = sorted({float(t) for t in instants})
    if not ts:
        return pd.DataFrame(
            {"t": pd.Series(dtype="float64"), "in_flight": pd.Series(dtype="int64")}
        )
    params: dict[str, Any] = {f"t{i}": t for i, t in enumerate(ts)}
    params.update({"run_id": run_id, "lo": ts[0], "hi": ts[-1]})
    counts = ", ".join(
        f"COUNT(*) FILTER (WHERE q.sent_at <= :t{i} AND (q.done_at > :t{i} OR q.done_at IS NULL))"
        f" AS c{i}"
        for i in range(len(ts))
    )
    sql = f"""
        SELECT {counts} FROM requests q
        WHERE q.run_id = :run_id AND q.sent_at <= :hi AND (q.done_at > :lo OR q.done_at IS NULL)
    """

    def compute() -> pd.DataFrame:
        row = store.read_df(sql, params).iloc[0]
        values = [int(row[f"c{i}"] or 0) for i in range(len(ts))]
        return pd.DataFrame(
            {"t": pd.Series(ts, dtype="float64"), "in_flight": pd.Series(values, dtype="int64")}
        )

    return rollups.cached_run(store, run_id, "in_flight_at", {"instants": ts}, compute)


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
    return coerce(df, ints=("seq",))


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
    if metric == "itl_ms":  # the gaps of requests that did not fail (as run_figures pools them)
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
        stats = run_figures.stored(store, [run_id])
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
    return coerce(store.read_df(sql, {"run_id": run_id, "limit": int(limit)}), ints=("count",))


def run_requests_all(store: Store, run_id: str) -> pd.DataFrame:
    """Every request row of a run, in ``seq`` order (downloads, export)."""
    reqs = schema.requests
    stmt = sa.select(reqs).where(reqs.c.run_id == run_id).order_by(reqs.c.seq)
    df = store.read_df(stmt)
    if df.empty:
        return pd.DataFrame(columns=list(schema.REQUEST_COLUMNS))
    return df


def run_token_gaps(store: Store, run_id: str) -> pd.DataFrame:
    """Every token gap of a run, ordered by request and position."""
    gaps = schema.token_gaps
    stmt = sa.select(gaps).where(gaps.c.run_id == run_id).order_by(gaps.c.seq, gaps.c.idx)
    df = store.read_df(stmt)
    if df.empty:
        return pd.DataFrame(columns=list(schema.TOKEN_GAP_COLUMNS))
    return df


def samples_ready(
    store: Store, run_ids: Sequence[str], limit: int = DISTRIBUTION_SAMPLE_LIMIT
) -> bool:
    """True when :func:`request_samples` and the ITL :func:`metric_samples` of every run of
    ``run_ids`` are stored and fresh (``services.commands.prepare`` keeps them for large runs), so
    drawing them costs no scan."""
    ids = distinct_ids(run_ids)
    for kind, params in (
        ("request_samples", {"limit": int(limit)}),
        ("metric_samples", {"metric": "itl_ms", "limit": int(limit)}),
    ):
        if rollups.fresh_runs(store, ids, kind, params) is None:
            return False
    return True


def request_samples(store: Store, run_ids: Sequence[str], limit: int = 20_000) -> pd.DataFrame:
    """TTFT, TPOT and E2E of successful requests, per run, in one read: every request when a
    run has at most ``limit`` successful ones, else a stride sample (every k-th by seq) of about
    ``limit``. Columns: run_id, ttft_ms, tpot_ms, e2e_ms (NULL stays NaN, e.g. the TPOT of a
    one-token response)."""
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    ids = distinct_ids(run_ids)
    columns = ["ttft_ms", "tpot_ms", "e2e_ms"]
    if not ids:
        return pd.DataFrame(
            {"run_id": pd.Series([], dtype=object)}
            | {c: pd.Series([], dtype="float64") for c in columns}
        )
    sql = f"""
        WITH n AS (
            SELECT q.run_id, COUNT(*) AS c FROM requests q
            WHERE q.run_id IN :run_ids AND {OK}
            GROUP BY q.run_id
        ),
        s AS (
            SELECT q.run_id, q.ttft_ms, q.tpot_ms, q.e2e_ms,
                   ROW_NUMBER() OVER (PARTITION BY q.run_id ORDER BY q.seq) AS k
            FROM requests q JOIN n ON n.run_id = q.run_id
            WHERE q.run_id IN :run_ids AND {OK}
              AND MOD(q.seq, GREATEST(1, CAST(CEIL(n.c * 1.0 / :limit) AS INTEGER))) = 0
        )
        SELECT run_id, ttft_ms, tpot_ms, e2e_ms FROM s WHERE k <= :limit ORDER BY run_id, k
    """

    def compute(stale: list[str]) -> pd.DataFrame:
        df = store.read_df(with_lists(sql), {"run_ids": stale, "limit": int(limit)})
        for col in columns:
            df[col] = pd.to_numeric(df[col]).astype("float64")
        return df

    df = rollups.cached_runs(store, ids, "request_samples", {"limit": int(limit)}, compute)
    return df.sort_values("run_id", kind="stable").reset_index(drop=True)


def metric_samples(
    store: Store, run_ids: Sequence[str], metric: str, limit: int = 20_000
) -> pd.DataFrame:
    """Values of ``metric`` (ttft_ms, tpot_ms, e2e_ms or itl_ms) of successful requests, per run:
    every value when a run has at most ``limit``, else a stride sample (every k-th by seq) of
    about ``limit`` spread over the run (for ITL the stride is set from all the run's gaps,
    and the gaps of failed requests are then left out). Columns: run_id, value (ms)."""
    if metric not in SAMPLE_METRICS:
        raise InputError(
            f"unknown metric {metric!r}", hint=f"choose one of {', '.join(SAMPLE_METRICS)}"
        )
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    ids = distinct_ids(run_ids)
    if not ids:
        return pd.DataFrame(
            {"run_id": pd.Series([], dtype=object), "value": pd.Series([], dtype="float64")}
        )
    stride = "GREATEST(1, CAST(CEIL(n.c * 1.0 / :limit) AS INTEGER))"
    if metric == "itl_ms":
        sql = f"""
            WITH n AS (
                SELECT run_id, COUNT(*) AS c FROM token_gaps WHERE run_id IN :run_ids
                GROUP BY run_id
            ),
            f AS (
                SELECT run_id, seq FROM requests WHERE run_id IN :run_ids AND status <> 'ok'
            ),
            s AS (
                SELECT g.run_id, g.gap_ms AS v,
                       ROW_NUMBER() OVER (PARTITION BY g.run_id ORDER BY g.seq, g.idx) AS k
                FROM token_gaps g
                JOIN n ON n.run_id = g.run_id
                LEFT JOIN f ON f.run_id = g.run_id AND f.seq = g.seq
                WHERE g.run_id IN :run_ids AND f.seq IS NULL
                  AND MOD(g.seq + g.idx, {stride}) = 0
            )
            SELECT run_id, v AS value FROM s WHERE k <= :limit ORDER BY run_id, k
        """
    else:
        col = SAMPLE_METRICS[metric]
        sql = f"""
            WITH n AS (
                SELECT q.run_id, COUNT(*) AS c FROM requests q
                WHERE q.run_id IN :run_ids AND {OK} AND q.{col} IS NOT NULL
                GROUP BY q.run_id
            ),
            s AS (
                SELECT q.run_id, q.{col} AS v,
                       ROW_NUMBER() OVER (PARTITION BY q.run_id ORDER BY q.seq) AS k
                FROM requests q JOIN n ON n.run_id = q.run_id
                WHERE q.run_id IN :run_ids AND {OK} AND q.{col} IS NOT NULL
                  AND MOD(q.seq, {stride}) = 0
            )
            SELECT run_id, v AS value FROM s WHERE k <= :limit ORDER BY run_id, k
        """

    def compute(stale: list[str]) -> pd.DataFrame:
        df = store.read_df(with_lists(sql), {"run_ids": stale, "limit": int(limit)})
        df["value"] = pd.to_numeric(df["value"]).astype("float64")
        return df

    params = {"metric": metric, "limit": int(limit)}
    df = rollups.cached_runs(store, ids, "metric_samples", params, compute)
    return df.sort_values("run_id", kind="stable").reset_index(drop=True)
