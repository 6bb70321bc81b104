"""Intent-named reads for the Compare page: several runs side by side, and SLO attainment.

Like ``store.queries``, everything is aggregated in SQL on DuckDB and PostgreSQL alike, so a
store with millions of requests never loads them: one ``GROUP BY run_id`` per read over the
selected runs, percentiles by linear interpolation (``quantile_cont`` / ``percentile_cont``),
SLO thresholds as bound parameters, and distributions as a per-run stride sample of at most
``limit`` values.

Definitions (docs/metrics.md): latency percentiles and throughput count successful requests
only; pooled ITL takes the gaps of every request that did not fail, found with an anti-join
against the few failed requests (4× faster at 10M rows than a join with all of them); client
lag covers every request; duration is the run's ``duration_s``, else ``ended_at −
started_at``, else first send → last completion.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import rollups, run_stats
from store.db import Store
from store.sql import OK, SAMPLE_METRICS, _coerce, _filtered, _json_object

#: Most runs one read compares.
MAX_RUNS: Final = 200
#: Values per run the Compare page draws its CDFs and bootstrap from.
SAMPLE_LIMIT: Final = 5_000

_RUN_META: Final = (
    "run_id, name, source, framework, framework_version, model, gpu_name, gpu_count, workload, "
    "arrival, target_rate, concurrency, engine_params, sweep_id, started_at, ended_at, "
    "duration_s, created_at, status, client_bound, client_bound_reason, achieved_rate, "
    "tool_summary"
)

_INTS: Final = (
    "requests",
    "ok",
    "errors",
    "timeouts",
    "input_tokens",
    "output_tokens",
    "ttft_n",
    "tpot_n",
    "e2e_n",
    "lag_n",
    "itl_n",
)


def candidates(store: Store, limit: int = 500) -> pd.DataFrame:
    """The ``limit`` newest runs to pick from, without touching their requests (fast on any
    store size). Columns: run_id, name, source, framework, model, gpu_name, gpu_count,
    workload, arrival, concurrency, target_rate, sweep_id, started_at, client_bound."""
    if limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    sql = """
        SELECT run_id, name, source, framework, model, gpu_name, gpu_count, workload, arrival,
               concurrency, target_rate, sweep_id, started_at, client_bound
        FROM runs
        ORDER BY COALESCE(started_at, created_at) DESC NULLS LAST, run_id
        LIMIT :limit
    """
    df = store.read_df(sql, {"limit": int(limit)})
    return _coerce(df, bools=("client_bound",))


def _ids(run_ids: Sequence[str]) -> list[str]:
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if len(ids) > MAX_RUNS:
        raise InputError(
            f"{len(ids)} runs selected; compare at most {MAX_RUNS}",
            hint="narrow the selection (e.g. one sweep or one model)",
        )
    return ids


def _stmt(sql: str) -> sa.TextClause:
    return sa.text(sql).bindparams(sa.bindparam("run_ids", expanding=True))


def run_aggregates(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """One row per existing run of ``run_ids`` (in that order) with everything Compare shows.

    Columns: the run's own (run_id, name, source, framework, framework_version, model, gpu_name,
    gpu_count, workload, arrival, target_rate, concurrency, engine_params (JSON text), sweep_id,
    started_at, status, client_bound, client_bound_reason, achieved_rate), tool_summary (decoded
    dict or None), aggregates_only (bool); requests, ok, errors (every non-ok request), timeouts,
    error_rate, timeout_rate, input_tokens and output_tokens (successful requests), duration_s,
    request_throughput, output_throughput, total_token_throughput, output_throughput_per_gpu;
    for ttft/tpot/e2e/lag/itl: ``*_n``, ``*_mean_ms``, ``*_p50_ms``, ``*_p90_ms``, ``*_p95_ms``,
    ``*_p99_ms`` (successful requests; lag: every request; itl: pooled token gaps). The figures
    come from each run's stored summary (``store.run_stats``), aggregated only when stale.
    """
    ids = _ids(run_ids)
    if not ids:
        return pd.DataFrame(columns=["run_id"])
    runs = store.read_df(
        _stmt(f"SELECT {_RUN_META} FROM runs WHERE run_id IN :run_ids"), {"run_ids": ids}
    )
    df = run_stats.figures(runs, run_stats.get(store, runs["run_id"].tolist()))
    df = df.drop(
        columns=["ended_at", "created_at", "cancelled", "first_sent", "last_sent", "last_done"],
        errors="ignore",
    )
    summaries = [_json_object(v) for v in df.pop("tool_summary").tolist()]
    df["tool_summary"] = pd.Series(summaries, index=df.index, dtype=object)
    df["aggregates_only"] = pd.Series(
        [bool(s and s.get("aggregates_only")) for s in summaries], index=df.index, dtype=bool
    )
    order = {rid: i for i, rid in enumerate(ids)}
    df = df.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)
    for col in ("gpu_count", "concurrency", "target_rate"):
        df[col] = pd.to_numeric(df[col]).astype("float64")  # NULL stays NaN (unknown)
    return _coerce(df, ints=_INTS, bools=("client_bound",))


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
    ids = _ids(run_ids)
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
    runs = store.read_df(
        _stmt("SELECT run_id, duration_s, started_at, ended_at FROM runs WHERE run_id IN :run_ids"),
        {"run_ids": ids},
    )
    timed = run_stats.figures(runs, run_stats.get(store, ids))
    df = counts.merge(timed[["run_id", "duration_s"]], on="run_id").sort_values("run_id")
    df = df.reset_index(drop=True)
    df["goodput"] = df["met"].astype("float64") / df["duration_s"]
    df["attainment"] = df["met"].astype("float64") / df["requests"].astype("float64").replace(
        0.0, float("nan")
    )
    return _coerce(df[columns], ints=_MET_COUNTS)


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
            f"{_filtered('COUNT(*)', f'{OK} AND {ttft}')} AS ttft_met_{k}",
            f"{_filtered('COUNT(*)', f'{OK} AND {tpot}')} AS tpot_met_{k}",
            f"{_filtered('COUNT(*)', f'{OK} AND {e2e}')} AS e2e_met_{k}",
            f"{_filtered('COUNT(*)', f'{OK} AND {ttft} AND {tpot} AND {e2e}')} AS met_{k}",
        ]
    sql = f"""
        SELECT q.run_id, COUNT(*) AS requests, {_filtered("COUNT(*)", OK)} AS ok,
               {", ".join(cols)}
        FROM requests q WHERE q.run_id IN :run_ids
        GROUP BY q.run_id
    """
    wide = store.read_df(_stmt(sql), bound)
    out = []
    for k in range(len(sets)):
        names = {f"{c}_{k}": c for c in ("ttft_met", "tpot_met", "e2e_met", "met")}
        part = wide[["run_id", "requests", "ok", *names]].rename(columns=names)
        out.append(_coerce(part.reset_index(drop=True), ints=_MET_COUNTS))
    return out


def prepare_attainment(
    store: Store, run_ids: Sequence[str], threshold_sets: Sequence[Mapping[str, float]]
) -> None:
    """Keep :func:`slo_attainment`'s counts of ``run_ids`` under several threshold sets (every
    stored SLO profile) from one scan of their requests, instead of one scan per set."""
    ids = _ids(run_ids)
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


def samples_ready(store: Store, run_ids: Sequence[str], limit: int = SAMPLE_LIMIT) -> bool:
    """True when :func:`request_samples` and the ITL :func:`metric_samples` of every run of
    ``run_ids`` are stored and fresh (``run_views.prepare`` keeps them for large runs), so
    drawing them costs no scan."""
    ids = _ids(run_ids)
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
    ids = _ids(run_ids)
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
        df = store.read_df(_stmt(sql), {"run_ids": stale, "limit": int(limit)})
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
    ids = _ids(run_ids)
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
        df = store.read_df(_stmt(sql), {"run_ids": stale, "limit": int(limit)})
        df["value"] = pd.to_numeric(df["value"]).astype("float64")
        return df

    params = {"metric": metric, "limit": int(limit)}
    df = rollups.cached_runs(store, ids, "metric_samples", params, compute)
    return df.sort_values("run_id", kind="stable").reset_index(drop=True)
