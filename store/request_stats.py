"""Percentiles of requests and token gaps over a selection (runs × a window on ``sent_at``),
aggregated in SQL: by length bucket (THE bucket-percentile read, :func:`bucket_latency`), by
time window (:func:`ttft_heatmap`, :func:`latency_timeline`), and against an SLO
(:func:`slo_attainment`). Percentiles are linearly interpolated (DuckDB ``quantile_cont``,
PostgreSQL ``percentile_cont``), latency statistics count successful requests only, every
statement is ``text()`` with bound parameters, and a read of one whole run is kept as a rollup.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pandas as pd

from errors import InputError
from store import rollups, run_figures
from store.db import Store
from store.selection import bucket_case, cached_if_whole_run, read_with_run_ids, request_filter
from store.sql import (
    BUCKET_QUANTILES,
    OK,
    coerce,
    dist_columns,
    distinct_ids,
    filtered,
    pcts,
    qname,
    with_lists,
)

#: The request metrics reported per bucket (ITL pools ``token_gaps``).
BUCKET_METRICS: Final[tuple[str, ...]] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
#: Bucketing by input (prompt) or output (generated) length.
BY_COLUMN: Final[dict[str, str]] = {"input": "input_tokens", "output": "output_tokens"}

_PCT_COLS: Final = tuple(f"{qname(q)}_ms" for q in BUCKET_QUANTILES)


# --- the run as a whole ----------------------------------------------------------------------


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
    bucket_case(BY_COLUMN[by], edges, {})  # validates the edges
    key = {"edges": [int(e) for e in edges], "by": by, "metrics": list(metrics)}
    return cached_if_whole_run(
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
    where, params = request_filter(run_ids, since, until)
    case = bucket_case(column, edges, params)
    d = store.dialect
    scanned = [m for m in ("ttft_ms", "tpot_ms", "e2e_ms") if m in metrics]
    parts: list[pd.DataFrame] = []
    if scanned:
        cols: list[str] = []
        for metric in scanned:
            cols += dist_columns(d, f"q.{metric}", metric[:-3], OK, BUCKET_QUANTILES)
        sql = f"""
            SELECT {case} AS bucket, {", ".join(cols)}
            FROM requests q
            WHERE {" AND ".join(where)} AND q.{column} IS NOT NULL
            GROUP BY 1 ORDER BY 1
        """
        wide = read_with_run_ids(store, sql, params)
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
    return coerce(out.reset_index(drop=True), ints=("bucket", "n"))


def _itl_by_bucket(
    store: Store,
    run_ids: Sequence[str],
    edges: Sequence[int],
    by: str,
    since: float | None,
    until: float | None,
) -> pd.DataFrame:
    where, params = request_filter(run_ids, since, until)
    case = bucket_case(BY_COLUMN[by], edges, params)
    cols = ", ".join(dist_columns(store.dialect, "g.gap_ms", "x", None, BUCKET_QUANTILES))
    sql = f"""
        SELECT {case} AS bucket, {cols}
        FROM token_gaps g JOIN requests q ON q.run_id = g.run_id AND q.seq = g.seq
        WHERE {" AND ".join(where)} AND {OK} AND q.{BY_COLUMN[by]} IS NOT NULL
        GROUP BY 1 ORDER BY 1
    """
    df = read_with_run_ids(store, sql, params)
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
    request_filter(run_ids, since, until)
    bucket_case("input_tokens", edges, {})
    key = {"edges": [int(e) for e in edges], "t0": float(t0), "window_s": float(window_s)}
    return cached_if_whole_run(
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
    where, params = request_filter(run_ids, since, until)
    case = bucket_case("input_tokens", edges, params)
    params.update({"t0": float(t0), "w": float(window_s)})
    p50, p99 = pcts(store.dialect, "c.ttft_ms", (0.5, 0.99))
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
    return coerce(read_with_run_ids(store, sql, params), ints=("bucket", "window", "n"))


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
    request_filter(run_ids, since, until)
    key = {"t0": float(t0), "window_s": float(window_s)}
    return cached_if_whole_run(
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
    where, params = request_filter(run_ids, since, until)
    params.update({"t0": float(t0), "w": float(window_s)})
    d = store.dialect
    t50, t99 = pcts(d, "q.ttft_ms", (0.5, 0.99), OK)
    e50, e99 = pcts(d, "q.e2e_ms", (0.5, 0.99), OK)
    sql = f"""
        SELECT CAST(FLOOR((q.sent_at - :t0) / :w) AS INTEGER) AS window,
               {filtered("COUNT(*)", OK)} AS n,
               COUNT(*) FILTER (WHERE q.status <> 'ok') AS errors,
               {t50} AS ttft_p50_ms, {t99} AS ttft_p99_ms,
               {e50} AS e2e_p50_ms, {e99} AS e2e_p99_ms,
               SUM(q.output_tokens) FILTER (WHERE {OK}) AS output_tokens
        FROM requests q
        WHERE {" AND ".join(where)} AND q.sent_at IS NOT NULL
        GROUP BY 1 ORDER BY 1
    """
    df = coerce(
        read_with_run_ids(store, sql, params), ints=("window", "n", "errors", "output_tokens")
    )
    df.insert(1, "window_start", float(t0) + df["window"].astype("float64") * float(window_s))
    return df


# --- requests ---------------------------------------------------------------------------------


# --- the series a run belongs to ---------------------------------------------------------------


_MET_COUNTS: Final = ("requests", "ok", "ttft_met", "tpot_met", "e2e_met", "met")


def slo_attainment(
    store: Store, run_ids: Sequence[str], thresholds: Mapping[str, float]
) -> pd.DataFrame:
    """Per run, how many requests met each SLO target, computed in SQL (and kept per run and
    thresholds as a rollup, ``store.rollups``, until the run's rows change).

    ``thresholds`` (``analysis.slo.SloProfile.sql_thresholds``): ``ttft_base``, ``ttft_per_1k``
    (TTFT limit = ttft_base + ttft_per_1k × input_tokens / 1000), ``tpot``, ``e2e`` in ms; +inf
    for no target. A request meets TTFT/E2E when it succeeded and its value is within the limit,
    TPOT also when its TPOT is undefined (fewer than two output tokens).

    Columns: run_id, requests, ok, ttft_met, tpot_met, e2e_met, met (all three), duration_s,
    goodput (met / duration, requests/s), attainment (met / requests). Runs without requests
    are absent.
    """
    ids = distinct_ids(run_ids)
    needed = ("ttft_base", "ttft_per_1k", "tpot", "e2e")
    missing = [k for k in needed if k not in thresholds]
    if missing:
        raise InputError(f"SLO thresholds lack {', '.join(missing)}; give {', '.join(needed)}")
    columns = [*("run_id",), *_MET_COUNTS, "duration_s", "goodput", "attainment"]
    if not ids:
        return pd.DataFrame(columns=columns)
    params = {k: float(thresholds[k]) for k in needed}
    counts = rollups.cached_runs(
        store, ids, "slo_attainment", params, lambda stale: _met_counts(store, stale, params)
    )
    timed = run_figures.get(store, ids)
    df = counts.merge(timed[["run_id", "duration_s"]], on="run_id").sort_values("run_id")
    df = df.reset_index(drop=True)
    df["goodput"] = df["met"].astype("float64") / df["duration_s"]
    df["attainment"] = df["met"].astype("float64") / df["requests"].astype("float64").replace(
        0.0, float("nan")
    )
    return coerce(df[columns], ints=_MET_COUNTS)


def _met_counts(store: Store, run_ids: list[str], params: Mapping[str, float]) -> pd.DataFrame:
    return _met_counts_many(store, run_ids, [params])[0]


def _met_counts_many(
    store: Store, run_ids: list[str], sets: Sequence[Mapping[str, float]]
) -> list[pd.DataFrame]:
    """The attainment counts of ``run_ids`` under each threshold set, from ONE scan."""
    dbl = "DOUBLE PRECISION"
    cols: list[str] = []
    bound: dict[str, Any] = {"run_ids": run_ids}
    for k, params in enumerate(sets):
        bound.update({f"{name}_{k}": float(v) for name, v in params.items()})
        ttft = (
            f"q.ttft_ms <= CAST(:ttft_base_{k} AS {dbl}) + CAST(:ttft_per_1k_{k} AS {dbl}) "
            f"* COALESCE(q.input_tokens, 0) / 1000.0"
        )
        tpot = f"(q.tpot_ms IS NULL OR q.tpot_ms <= CAST(:tpot_{k} AS {dbl}))"
        e2e = f"q.e2e_ms <= CAST(:e2e_{k} AS {dbl})"
        cols += [
            f"{filtered('COUNT(*)', f'{OK} AND {ttft}')} AS ttft_met_{k}",
            f"{filtered('COUNT(*)', f'{OK} AND {tpot}')} AS tpot_met_{k}",
            f"{filtered('COUNT(*)', f'{OK} AND {e2e}')} AS e2e_met_{k}",
            f"{filtered('COUNT(*)', f'{OK} AND {ttft} AND {tpot} AND {e2e}')} AS met_{k}",
        ]
    sql = f"""
        SELECT q.run_id, COUNT(*) AS requests, {filtered("COUNT(*)", OK)} AS ok,
               {", ".join(cols)}
        FROM requests q WHERE q.run_id IN :run_ids
        GROUP BY q.run_id
    """
    wide = store.read_df(with_lists(sql), bound)
    out = []
    for k in range(len(sets)):
        names = {f"{c}_{k}": c for c in ("ttft_met", "tpot_met", "e2e_met", "met")}
        part = wide[["run_id", "requests", "ok", *names]].rename(columns=names)
        out.append(coerce(part.reset_index(drop=True), ints=_MET_COUNTS))
    return out


def prepare_attainment(
    store: Store, run_ids: Sequence[str], threshold_sets: Sequence[Mapping[str, float]]
) -> None:
    """Keep :func:`slo_attainment`'s counts of ``run_ids`` under several threshold sets (every
    stored SLO profile) from one scan of their requests, instead of one scan per set."""
    ids = distinct_ids(run_ids)
    needed = ("ttft_base", "ttft_per_1k", "tpot", "e2e")
    sets = [{k: float(t[k]) for k in needed} for t in threshold_sets]
    if not ids or not sets:
        return
    versions = rollups.versions(store, ids)  # read before the rows they will vouch for
    started = time.perf_counter()
    frames = _met_counts_many(store, [r for r in ids if r in versions], sets)
    elapsed_ms = (time.perf_counter() - started) * 1000
    for params, frame in zip(sets, frames, strict=True):
        per_run = {
            r: (v, frame[frame["run_id"] == r].reset_index(drop=True)) for r, v in versions.items()
        }
        rollups.keep(store, "slo_attainment", params, per_run, elapsed_ms / len(sets))
