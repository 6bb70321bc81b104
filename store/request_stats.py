"""Intent-named reads for the Latency page → DataFrames (aggregated in SQL; bounded samples).

Same conventions as ``store.queries`` (whose building blocks this module imports): percentiles
are linearly interpolated (DuckDB ``quantile_cont``, PostgreSQL ``percentile_cont``), latency
statistics count successful requests only, and every statement is ``text()`` with bound
parameters. Every read takes the runs (``run_ids``) and optionally a window on ``sent_at``
(``since`` ≤ sent_at < ``until``, seconds since the epoch), so one run or a slice of one can be
examined. Nothing returns more rows than a stated limit: request samples are a deterministic
stride sample (every k-th ``seq``), the slowest requests a top-N.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import rollups, run_stats
from store.db import Store
from store.queries import latency_by_bucket
from store.sql import BUCKET_QUANTILES, OK, _coerce, _dist_columns, _pcts, _qname

#: The request metrics reported per bucket (ITL pools ``token_gaps``).
BUCKET_METRICS: Final[tuple[str, ...]] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
#: Bucketing by input (prompt) or output (generated) length.
BY_COLUMN: Final[dict[str, str]] = {"input": "input_tokens", "output": "output_tokens"}
#: Most requests a sample returns (the Latency page's scatter and prefill fit).
SAMPLE_LIMIT: Final = 20_000
#: How many of the slowest requests the Latency page explains by default.
DEFAULT_TOP: Final = 20
#: Most slowest requests returned.
TOP_LIMIT: Final = 1_000
#: Sortable latency columns for the slowest requests.
SLOW_METRICS: Final[tuple[str, ...]] = ("ttft_ms", "e2e_ms", "tpot_ms")

_PCT_COLS: Final = tuple(f"{_qname(q)}_ms" for q in BUCKET_QUANTILES)


def _scope(
    run_ids: Sequence[str], since: float | None, until: float | None, alias: str = "q"
) -> tuple[list[str], dict[str, Any]]:
    if not run_ids:
        raise InputError("no run selected", hint="pick a run (?run=<run_id>)")
    where = [f"{alias}.run_id IN :run_ids"]
    params: dict[str, Any] = {"run_ids": list(run_ids)}
    if since is not None:
        where.append(f"{alias}.sent_at >= :since")
        params["since"] = float(since)
    if until is not None:
        where.append(f"{alias}.sent_at < :until")
        params["until"] = float(until)
    return where, params


def _whole_run(
    store: Store,
    run_ids: Sequence[str],
    since: float | None,
    until: float | None,
    kind: str,
    params: dict[str, Any],
    compute: Callable[[], pd.DataFrame],
) -> pd.DataFrame:
    """``compute()``, kept as a rollup of the run when it covers one whole run (the page's
    default view, asked for again and again) — also when the window holds every request of the
    run (by its stored summary); narrower windows and several runs are computed each time."""
    if len(run_ids) != 1:
        return compute()
    if since is not None or until is not None:
        stats = run_stats.stored(store, run_ids)
        if stats is None or stats.empty:
            return compute()
        first, last = stats["first_sent"].iloc[0], stats["last_sent"].iloc[0]
        if stats["sent_n"].iloc[0] != stats["requests"].iloc[0] or pd.isna(first):
            return compute()  # requests without a send time are in no window
        if (since is not None and since > first) or (until is not None and until <= last):
            return compute()
    return rollups.cached_run(store, str(run_ids[0]), kind, params, compute)


def _read(store: Store, sql: str, params: dict[str, Any]) -> pd.DataFrame:
    stmt = sa.text(sql).bindparams(sa.bindparam("run_ids", expanding=True))
    return store.read_df(stmt, params)


def _case(column: str, edges: Sequence[int], params: dict[str, Any]) -> str:
    bounds = [int(e) for e in edges]
    if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
        raise InputError(f"bucket edges {bounds} must be a non-empty increasing list")
    for i, e in enumerate(bounds):
        params[f"e{i}"] = e
    whens = " ".join(f"WHEN q.{column} < :e{i} THEN {i}" for i in range(len(bounds)))
    return f"CASE {whens} ELSE {len(bounds)} END"


# --- the run as a whole ----------------------------------------------------------------------


def run_list(store: Store, limit: int = 200, run_id: str | None = None) -> pd.DataFrame:
    """The ``limit`` newest runs (plus ``run_id`` when given and older), newest first, from the
    ``runs`` table alone — no request aggregates, so it is instant on any store (the run pickers
    of the Latency and Memory pages). Columns: run_id, name, source, framework, model, arrival,
    concurrency, target_rate, client_bound, started_at, tool_summary."""
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    cols = (
        "run_id, name, source, framework, model, arrival, concurrency, target_rate, "
        "client_bound, started_at, created_at, tool_summary"
    )
    sql = f"""
        SELECT {cols} FROM (
            SELECT {cols} FROM runs
            ORDER BY COALESCE(started_at, created_at) DESC NULLS LAST, run_id
            LIMIT :limit
        ) AS newest
        UNION
        SELECT {cols} FROM runs WHERE run_id = :run_id
    """
    df = store.read_df(sql, {"limit": int(limit), "run_id": run_id or ""})
    df["_order"] = pd.to_numeric(df["started_at"]).fillna(pd.to_numeric(df["created_at"]))
    df = df.sort_values(["_order", "run_id"], ascending=[False, True], na_position="last")
    df = df.drop(columns=["_order", "created_at"]).reset_index(drop=True)
    return _coerce(df, bools=("client_bound",))


def request_span(
    store: Store, run_ids: Sequence[str], since: float | None = None, until: float | None = None
) -> pd.DataFrame:
    """One row: requests, ok, first_sent, last_sent, last_done (NULLs when there are none).
    Whole runs are read from their stored summaries (``store.run_stats``)."""
    where, params = _scope(run_ids, since, until)
    stats = run_stats.stored(store, run_ids) if since is None and until is None else None
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
            SELECT COUNT(*) AS requests, {_ok_count()} AS ok,
                   MIN(q.sent_at) AS first_sent, MAX(q.sent_at) AS last_sent,
                   MAX(q.done_at) AS last_done
            FROM requests q WHERE {" AND ".join(where)}
        """
        df = _read(store, sql, params)
    for col in ("first_sent", "last_sent", "last_done"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return _coerce(df, ints=("requests", "ok"))


def _ok_count() -> str:
    return f"COUNT(*) FILTER (WHERE {OK})"


def ttft_summary(
    store: Store, run_ids: Sequence[str], since: float | None = None, until: float | None = None
) -> pd.DataFrame:
    """One row: ttft_n, ttft_mean_ms, ttft_p50_ms … ttft_p99_9_ms over successful requests."""
    where, params = _scope(run_ids, since, until)
    cols = ", ".join(_dist_columns(store.dialect, "q.ttft_ms", "ttft", OK, BUCKET_QUANTILES))
    sql = f"SELECT {cols} FROM requests q WHERE {' AND '.join(where)}"
    return _coerce(_read(store, sql, params), ints=("ttft_n",))


# --- per bucket ------------------------------------------------------------------------------


def bucket_latency(
    store: Store,
    run_ids: Sequence[str],
    edges: Sequence[int],
    by: str = "input",
    since: float | None = None,
    until: float | None = None,
    metrics: Sequence[str] = BUCKET_METRICS,
) -> pd.DataFrame:
    """Per length bucket and metric: count and P50/P90/P95/P99/P99.9 (successful requests).

    ``by``: ``input`` (prompt tokens) or ``output`` (generated tokens); bucket ``i`` holds
    ``edges[i-1] <= tokens < edges[i]``. ``metrics``: any of ttft_ms, tpot_ms, itl_ms, e2e_ms
    (each costs a sort of the selection: ask only for what is shown). TTFT, TPOT and E2E come
    from one scan of ``requests``; ITL pools ``token_gaps`` (by input over whole runs:
    ``queries.latency_by_bucket``). Long format — columns metric, bucket (index), n, mean_ms,
    p50_ms, p90_ms, p95_ms, p99_ms, p99_9_ms — only buckets with samples, in metric order.
    (The selection as a whole: :func:`ttft_summary`.)
    """
    if by not in BY_COLUMN:
        raise InputError(f"unknown bucketing {by!r}", hint="choose input or output")
    unknown = [m for m in metrics if m not in BUCKET_METRICS]
    if unknown or not metrics:
        raise InputError(
            f"unknown metrics {unknown or list(metrics)}",
            hint=f"choose from {', '.join(BUCKET_METRICS)}",
        )
    _case(BY_COLUMN[by], edges, {})  # validates the edges
    key = {"edges": [int(e) for e in edges], "by": by, "metrics": list(metrics)}
    return _whole_run(
        store,
        run_ids,
        since,
        until,
        "bucket_latency",
        key,
        lambda: _bucket_latency(store, run_ids, edges, by, since, until, metrics),
    )


def _bucket_latency(
    store: Store,
    run_ids: Sequence[str],
    edges: Sequence[int],
    by: str,
    since: float | None,
    until: float | None,
    metrics: Sequence[str],
) -> pd.DataFrame:
    column = BY_COLUMN[by]
    where, params = _scope(run_ids, since, until)
    case = _case(column, edges, params)
    d = store.dialect
    scanned = [m for m in ("ttft_ms", "tpot_ms", "e2e_ms") if m in metrics]
    parts: list[pd.DataFrame] = []
    if scanned:
        cols: list[str] = []
        for metric in scanned:
            cols += _dist_columns(d, f"q.{metric}", metric[:-3], OK, BUCKET_QUANTILES)
        sql = f"""
            SELECT {case} AS bucket, {", ".join(cols)}
            FROM requests q
            WHERE {" AND ".join(where)} AND q.{column} IS NOT NULL
            GROUP BY 1 ORDER BY 1
        """
        wide = _read(store, sql, params)
        for metric in scanned:
            p = metric[:-3]
            part = pd.DataFrame(
                {
                    "metric": metric,
                    "bucket": wide["bucket"],
                    "n": wide[f"{p}_n"],
                    "mean_ms": wide[f"{p}_mean_ms"],
                    **{c: wide[f"{p}_{c}"] for c in _PCT_COLS},
                }
            )
            parts.append(part[pd.to_numeric(part["n"]).fillna(0) > 0])
    if "itl_ms" in metrics:
        parts.append(_itl_by_bucket(store, run_ids, edges, by, since, until))
    out = pd.concat([p for p in parts if not p.empty] or parts[:1], ignore_index=True)
    order = {m: i for i, m in enumerate(BUCKET_METRICS)}
    out = out.sort_values(
        ["metric", "bucket"], key=lambda s: s.map(order) if s.name == "metric" else s
    )
    return _coerce(out.reset_index(drop=True), ints=("bucket", "n"))


def _itl_by_bucket(
    store: Store,
    run_ids: Sequence[str],
    edges: Sequence[int],
    by: str,
    since: float | None,
    until: float | None,
) -> pd.DataFrame:
    if by == "input" and since is None and until is None:
        df = latency_by_bucket(store, "itl_ms", edges, run_ids)
        df.insert(0, "metric", "itl_ms")
        return df
    where, params = _scope(run_ids, since, until)
    case = _case(BY_COLUMN[by], edges, params)
    cols = ", ".join(_dist_columns(store.dialect, "g.gap_ms", "x", None, BUCKET_QUANTILES))
    sql = f"""
        SELECT {case} AS bucket, {cols}
        FROM token_gaps g JOIN requests q ON q.run_id = g.run_id AND q.seq = g.seq
        WHERE {" AND ".join(where)} AND {OK} AND q.{BY_COLUMN[by]} IS NOT NULL
        GROUP BY 1 ORDER BY 1
    """
    df = _read(store, sql, params)
    df.columns = [c[2:] if c.startswith("x_") else c for c in df.columns]
    df.insert(0, "metric", "itl_ms")
    return df


def ttft_heatmap(
    store: Store,
    run_ids: Sequence[str],
    edges: Sequence[int],
    *,
    t0: float,
    window_s: float,
    since: float | None = None,
    until: float | None = None,
) -> pd.DataFrame:
    """P99 TTFT per input bucket × time window (windows of ``window_s`` from ``t0`` on sent_at).

    Columns: bucket (index), window (index; starts at ``t0 + window × window_s``), n, mean_ms,
    p50_ms, p99_ms. Only cells with successful requests. From the same scan: rows with
    bucket −1 are every bucket of a window together (TTFT over time, for trends), and the row
    with bucket −1 and window −1 the whole selection (as :func:`ttft_summary`).
    """
    if window_s <= 0:
        raise InputError(f"window must be positive, got {window_s!r} s")
    _scope(run_ids, since, until)
    _case("input_tokens", edges, {})
    key = {"edges": [int(e) for e in edges], "t0": float(t0), "window_s": float(window_s)}
    return _whole_run(
        store,
        run_ids,
        since,
        until,
        "ttft_heatmap",
        key,
        lambda: _ttft_heatmap(store, run_ids, edges, t0, window_s, since, until),
    )


def _ttft_heatmap(
    store: Store,
    run_ids: Sequence[str],
    edges: Sequence[int],
    t0: float,
    window_s: float,
    since: float | None,
    until: float | None,
) -> pd.DataFrame:
    where, params = _scope(run_ids, since, until)
    case = _case("input_tokens", edges, params)
    params.update({"t0": float(t0), "w": float(window_s)})
    p50, p99 = _pcts(store.dialect, "c.ttft_ms", (0.5, 0.99))
    sql = f"""
        WITH c AS (
            SELECT {case} AS bucket,
                   CAST(FLOOR((q.sent_at - :t0) / :w) AS INTEGER) AS win, q.ttft_ms
            FROM requests q
            WHERE {" AND ".join(where)} AND {OK} AND q.ttft_ms IS NOT NULL
              AND q.input_tokens IS NOT NULL AND q.sent_at IS NOT NULL
        )
        SELECT CASE WHEN GROUPING(c.bucket) = 1 THEN -1 ELSE c.bucket END AS bucket,
               CASE WHEN GROUPING(c.win) = 1 THEN -1 ELSE c.win END AS window,
               COUNT(*) AS n, AVG(c.ttft_ms) AS mean_ms, {p50} AS p50_ms, {p99} AS p99_ms
        FROM c
        GROUP BY GROUPING SETS ((c.bucket, c.win), (c.win), ())
        ORDER BY 2, 1
    """
    return _coerce(_read(store, sql, params), ints=("bucket", "window", "n"))


def latency_timeline(
    store: Store,
    run_ids: Sequence[str],
    *,
    t0: float,
    window_s: float,
    since: float | None = None,
    until: float | None = None,
) -> pd.DataFrame:
    """Per time window (by sent_at): n (ok), errors, ttft_p50_ms, ttft_p99_ms, e2e_p50_ms,
    e2e_p99_ms, output_tokens; columns window, window_start (epoch s) first."""
    if window_s <= 0:
        raise InputError(f"window must be positive, got {window_s!r} s")
    _scope(run_ids, since, until)
    key = {"t0": float(t0), "window_s": float(window_s)}
    return _whole_run(
        store,
        run_ids,
        since,
        until,
        "latency_timeline",
        key,
        lambda: _latency_timeline(store, run_ids, t0, window_s, since, until),
    )


def _latency_timeline(
    store: Store,
    run_ids: Sequence[str],
    t0: float,
    window_s: float,
    since: float | None,
    until: float | None,
) -> pd.DataFrame:
    where, params = _scope(run_ids, since, until)
    params.update({"t0": float(t0), "w": float(window_s)})
    d = store.dialect
    t50, t99 = _pcts(d, "q.ttft_ms", (0.5, 0.99), OK)
    e50, e99 = _pcts(d, "q.e2e_ms", (0.5, 0.99), OK)
    sql = f"""
        SELECT CAST(FLOOR((q.sent_at - :t0) / :w) AS INTEGER) AS window,
               {_ok_count()} AS n,
               COUNT(*) FILTER (WHERE q.status <> 'ok') AS errors,
               {t50} AS ttft_p50_ms, {t99} AS ttft_p99_ms,
               {e50} AS e2e_p50_ms, {e99} AS e2e_p99_ms,
               SUM(q.output_tokens) FILTER (WHERE {OK}) AS output_tokens
        FROM requests q
        WHERE {" AND ".join(where)} AND q.sent_at IS NOT NULL
        GROUP BY 1 ORDER BY 1
    """
    df = _coerce(_read(store, sql, params), ints=("window", "n", "errors", "output_tokens"))
    df.insert(1, "window_start", float(t0) + df["window"].astype("float64") * float(window_s))
    return df


# --- requests ---------------------------------------------------------------------------------

_SAMPLE_COLS: Final = (
    "q.run_id, q.seq, q.status, q.sent_at, q.first_token_at, q.done_at, q.input_tokens, "
    "q.output_tokens, q.ttft_ms, q.tpot_ms, q.e2e_ms"
)


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
    where, params = _scope(run_ids, since, until)
    cond = " AND ".join(where)
    stats = run_stats.stored(store, run_ids) if since is None and until is None else None
    if stats is not None:
        total = int(stats["requests"].sum())
    else:
        count = _read(store, f"SELECT COUNT(*) AS c FROM requests q WHERE {cond}", params)
        total = int(count["c"].iloc[0] or 0)
    stride = max(1, -(-total // int(limit)))
    params.update({"k": stride, "limit": int(limit)})
    sql = f"""
        SELECT {_SAMPLE_COLS} FROM requests q
        WHERE {cond} AND MOD(q.seq, :k) = 0
        ORDER BY q.sent_at, q.run_id, q.seq
        LIMIT :limit
    """
    df = _whole_run(
        store,
        run_ids,
        since,
        until,
        "request_sample",
        {"k": stride, "limit": int(limit)},
        lambda: _coerce(_read(store, sql, params), ints=("seq",)),
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
    where, params = _scope(run_ids, since, until)
    params["n"] = int(n)
    sql = f"""
        SELECT {_SAMPLE_COLS} FROM requests q
        WHERE {" AND ".join(where)} AND {OK} AND q.{metric} IS NOT NULL
        ORDER BY q.{metric} DESC, q.run_id, q.seq
        LIMIT :n
    """
    df = _whole_run(
        store,
        run_ids,
        since,
        until,
        "slowest_requests",
        {"n": int(n), "metric": metric},
        lambda: _coerce(_read(store, sql, params), ints=("seq",)),
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


# --- the series a run belongs to ---------------------------------------------------------------


def load_levels(store: Store, run_id: str) -> pd.DataFrame:
    """The run's series across load levels: runs of the same sweep (sweep_id), else with the
    same endpoint, framework, model and workload — narrowed to the same bench invocation
    (client_params.bench_id) when that invocation measured several levels.

    One row per run: run_id, concurrency, target_rate, load (concurrency, else rate),
    client_bound, started_at, ended_at, duration_s, request_throughput, output_throughput
    (tokens/s over successful requests); ordered by load."""
    me = store.read_df(
        "SELECT run_id, sweep_id, endpoint, framework, model, workload, client_params "
        "FROM runs WHERE run_id = :run_id",
        {"run_id": run_id},
    )
    cols = [
        "run_id",
        "concurrency",
        "target_rate",
        "load",
        "client_bound",
        "started_at",
        "ended_at",
        "duration_s",
        "request_throughput",
        "output_throughput",
    ]
    if me.empty:
        return pd.DataFrame(columns=cols)
    row = me.iloc[0]
    if isinstance(row["sweep_id"], str) and row["sweep_id"]:
        cond = "r.sweep_id = :sweep"
        params: dict[str, Any] = {"sweep": row["sweep_id"]}
    else:
        cond = " AND ".join(
            f"r.{c} IS NOT DISTINCT FROM :{c}"
            for c in ("endpoint", "framework", "model", "workload")
        )
        params = {
            c: (None if pd.isna(row[c]) else row[c])
            for c in ("endpoint", "framework", "model", "workload")
        }
    runs = store.read_df(
        "SELECT r.run_id, r.concurrency, r.target_rate, r.client_bound, r.started_at, "
        f"r.ended_at, r.duration_s, r.gpu_count, r.client_params FROM runs r WHERE {cond}",
        params,
    )
    # throughput only: the stored summaries when fresh, else a cheap scan (no percentiles)
    df = run_stats.figures(runs, run_stats.light(store, runs["run_id"].tolist()))
    df = df[df["requests"] > 0]  # runs that measured nothing are no load level
    bench = _bench_id(row["client_params"])
    if bench is not None and not (isinstance(row["sweep_id"], str) and row["sweep_id"]):
        same = df[[_bench_id(v) == bench for v in df["client_params"]]]
        if len(same) >= 2:  # one invocation per level (the demo): keep the wider group
            df = same
    df = df.drop(columns=["client_params"])
    conc = pd.to_numeric(df["concurrency"]).astype("float64")
    df["load"] = conc.fillna(pd.to_numeric(df["target_rate"]).astype("float64"))
    df = _coerce(df.sort_values(["load", "run_id"]).reset_index(drop=True), bools=("client_bound",))
    return df[cols]


def _bench_id(raw: object) -> str | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    bench = value.get("bench_id") if isinstance(value, dict) else None
    return str(bench) if bench else None
