"""Intent-named reads for the Memory page (and the Latency page's engine state) → DataFrames.

Engine series (KV usage, running/waiting requests, preemptions) and GPU memory, for a run's time
span or any window, binned in SQL to at most ``max_points`` instants per series so that a week of
1-second scrapes still comes back as a few hundred rows: gauges as the bin's mean and max,
counters (``*_total``) as the bin's max (the cumulative value at its end, barring a restart).
Statements are ``text()`` with bound parameters and run on DuckDB and PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import run_figures
from store.db import Store
from store.sample_series import run_live_sources
from store.sql import with_lists

#: The engine metrics the Memory page draws.
MEMORY_METRICS: Final[tuple[str, ...]] = (
    "kv_cache_usage",
    "requests_running",
    "requests_waiting",
    "preemptions_total",
)
#: Default most instants per series.
MAX_POINTS: Final = 600


def _step(since: float, until: float, max_points: int) -> float:
    if max_points < 1:
        raise InputError(f"max_points must be at least 1, got {max_points}")
    if until < since:
        raise InputError(f"window ends ({until}) before it starts ({since})")
    return max((until - since) / max_points, 1e-3)


def engine_timeline(
    store: Store,
    targets: Sequence[str],
    *,
    since: float,
    until: float,
    metrics: Sequence[str] = MEMORY_METRICS,
    max_points: int = MAX_POINTS,
) -> pd.DataFrame:
    """Engine samples of ``targets`` in [since, until], binned (step = span / max_points).

    Columns: target, metric, ts (the bin's start, since + k × step), value (mean; counters:
    max), max_value, samples. Ordered by target, metric, ts. Empty when ``targets`` is empty.
    """
    cols = ["target", "metric", "ts", "value", "max_value", "samples"]
    if not targets or not metrics:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    step = _step(since, until, max_points)
    sql = """
        WITH s AS (
            SELECT target, metric, value,
                   CAST(FLOOR((ts - :since) / :step) AS BIGINT) AS bin
            FROM engine_samples
            WHERE target IN :targets AND metric IN :metrics AND ts >= :since AND ts <= :until
        )
        SELECT target, metric, :since + bin * :step AS ts,
               CASE WHEN metric LIKE '%\\_total' ESCAPE '\\' THEN MAX(value) ELSE AVG(value) END
                   AS value,
               MAX(value) AS max_value, COUNT(*) AS samples
        FROM s
        GROUP BY target, metric, bin
        ORDER BY target, metric, bin
    """
    df = store.read_df(
        with_lists(sql, "targets", "metrics"),
        {
            "targets": list(targets),
            "metrics": list(metrics),
            "since": float(since),
            "until": float(until),
            "step": step,
        },
    )
    for c in ("ts", "value", "max_value"):
        df[c] = pd.to_numeric(df[c]).astype("float64")
    df["samples"] = pd.to_numeric(df["samples"]).astype("int64")
    return df[cols]


def gpu_timeline(
    store: Store,
    hosts: Sequence[str] | None,
    *,
    since: float,
    until: float,
    max_points: int = MAX_POINTS,
) -> pd.DataFrame:
    """GPU samples in [since, until] (``hosts`` None: every host), binned per GPU: columns
    host, gpu_index, ts, mem_used_bytes (mean), mem_used_max_bytes, mem_total_bytes,
    mem_reserved_bytes, util_gpu (mean, 0..1). Ordered by host, gpu_index, ts."""
    step = _step(since, until, max_points)
    params: dict[str, Any] = {"since": float(since), "until": float(until), "step": step}
    where = "ts >= :since AND ts <= :until"
    if hosts is not None:
        if not hosts:
            return _empty_gpu()
        where += " AND host IN :hosts"
        params["hosts"] = list(hosts)
    sql = f"""
        WITH s AS (
            SELECT host, gpu_index, mem_used_bytes, mem_total_bytes, mem_reserved_bytes,
                   util_gpu, CAST(FLOOR((ts - :since) / :step) AS BIGINT) AS bin
            FROM gpu_samples WHERE {where}
        )
        SELECT host, gpu_index, :since + bin * :step AS ts,
               AVG(mem_used_bytes) AS mem_used_bytes, MAX(mem_used_bytes) AS mem_used_max_bytes,
               MAX(mem_total_bytes) AS mem_total_bytes,
               AVG(mem_reserved_bytes) AS mem_reserved_bytes, AVG(util_gpu) AS util_gpu
        FROM s
        GROUP BY host, gpu_index, bin
        ORDER BY host, gpu_index, bin
    """
    stmt = with_lists(sql, "hosts") if hosts is not None else sa.text(sql)
    df = store.read_df(stmt, params)
    if df.empty:
        return _empty_gpu()
    df["gpu_index"] = pd.to_numeric(df["gpu_index"]).astype("int64")
    for c in df.columns[2:]:
        df[c] = pd.to_numeric(df[c]).astype("float64")
    return df


def _empty_gpu() -> pd.DataFrame:
    cols = (
        "host",
        "gpu_index",
        "ts",
        "mem_used_bytes",
        "mem_used_max_bytes",
        "mem_total_bytes",
        "mem_reserved_bytes",
        "util_gpu",
    )
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})


def targets_in_window(store: Store, *, since: float, until: float) -> list[str]:
    """Engine targets with samples in [since, until]."""
    df = store.read_df(
        "SELECT DISTINCT target FROM engine_samples WHERE ts >= :since AND ts <= :until "
        "ORDER BY target",
        {"since": float(since), "until": float(until)},
    )
    return [str(t) for t in df["target"]]


def hosts_in_window(store: Store, *, since: float, until: float) -> list[str]:
    """GPU hosts with samples in [since, until]."""
    df = store.read_df(
        "SELECT DISTINCT host FROM gpu_samples WHERE ts >= :since AND ts <= :until ORDER BY host",
        {"since": float(since), "until": float(until)},
    )
    return [str(h) for h in df["host"]]


def run_sources(store: Store, run_id: str) -> dict[str, Any]:
    """A run's time span and live sources: keys since, until (None when the run recorded no
    time), targets, hosts, recorded (True when the bench recorded its sources; False when they
    are every source that reported during the run's span)."""
    live = run_live_sources(store, run_id)
    if not live:
        return {}
    stats = run_figures.stored(store, [run_id])  # the run's summary, when it is kept
    if stats is not None and not stats.empty:
        span = stats.iloc[0]
    else:
        span = store.read_df(
            "SELECT MIN(sent_at) AS first_sent, MAX(done_at) AS last_done FROM requests "
            "WHERE run_id = :run_id",
            {"run_id": run_id},
        ).iloc[0]
    since = _first_number(live.get("started_at"), span["first_sent"])
    until = _first_number(live.get("ended_at"), span["last_done"])
    if since is not None and until is None:
        until = since
    targets = list(live.get("targets") or [])  # type: ignore[call-overload]
    hosts = list(live.get("hosts") or [])  # type: ignore[call-overload]
    recorded = bool(targets or hosts)
    if since is not None and until is not None and not recorded:
        targets = targets_in_window(store, since=since, until=until)
        hosts = hosts_in_window(store, since=since, until=until)
    return {
        "since": since,
        "until": until,
        "targets": targets,
        "hosts": hosts,
        "recorded": recorded,
    }


def _first_number(*values: object) -> float | None:
    for v in values:
        if v is not None and not pd.isna(v):  # type: ignore[call-overload]
            return float(v)  # type: ignore[arg-type]
    return None


def aligned_runs(store: Store, run_ids: Sequence[str], *, max_points: int = 300) -> pd.DataFrame:
    """Several runs' KV usage and GPU memory on one axis, aligned at each run's start.

    Columns: run_id, series (``kv_cache_usage`` — the fullest target — or ``gpu_mem_used_bytes``
    — summed over the run's GPUs), t (seconds since the run started), value.
    """
    parts: list[pd.DataFrame] = []
    for run_id in run_ids:
        src = run_sources(store, run_id)
        since, until = src.get("since"), src.get("until")
        if since is None or until is None:
            continue
        eng = engine_timeline(
            store,
            src["targets"],
            since=since,
            until=until,
            metrics=("kv_cache_usage",),
            max_points=max_points,
        )
        if not eng.empty:
            kv = eng.groupby("ts", as_index=False)["value"].max()
            parts.append(
                pd.DataFrame(
                    {
                        "run_id": run_id,
                        "series": "kv_cache_usage",
                        "t": kv["ts"] - since,
                        "value": kv["value"],
                    }
                )
            )
        if src["hosts"]:
            gpu = gpu_timeline(store, src["hosts"], since=since, until=until, max_points=max_points)
            if not gpu.empty:
                mem = gpu.groupby("ts", as_index=False)["mem_used_bytes"].sum()
                parts.append(
                    pd.DataFrame(
                        {
                            "run_id": run_id,
                            "series": "gpu_mem_used_bytes",
                            "t": mem["ts"] - since,
                            "value": mem["mem_used_bytes"],
                        }
                    )
                )
    if not parts:
        return pd.DataFrame(
            {
                "run_id": pd.Series(dtype="object"),
                "series": pd.Series(dtype="object"),
                "t": pd.Series(dtype="float64"),
                "value": pd.Series(dtype="float64"),
            }
        )
    return pd.concat(parts, ignore_index=True)


def run_states(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """Per run, over its span and its sources: gpu_util (mean, 0..1), kv_max (the fullest
    target's peak KV usage), running_max (most requests in a target's running batch),
    mem_peak_fraction (the fullest GPU's peak memory used / total, 0..1) and gpu_samples (how
    many GPU samples that rests on); NaN (0 samples) where the run has no such samples. One
    connection for every run (the diagnosis's load levels, Compare's memory cap)."""
    rows = []
    with store.pinned() as one:
        for run_id in run_ids:
            rows.append(_run_state(one, str(run_id)))
    return pd.DataFrame.from_records(rows, columns=list(_STATE_COLUMNS)).astype(_STATE_COLUMNS)


_STATE_COLUMNS: Final[dict[str, Any]] = {
    "run_id": object,
    "gpu_util": "float64",
    "kv_max": "float64",
    "running_max": "float64",
    "mem_peak_fraction": "float64",
    "gpu_samples": "int64",
}


def _run_state(store: Store, run_id: str) -> dict[str, Any]:
    src = run_sources(store, run_id)
    rec: dict[str, Any] = {
        "run_id": run_id,
        "gpu_util": float("nan"),
        "kv_max": float("nan"),
        "running_max": float("nan"),
        "mem_peak_fraction": float("nan"),
        "gpu_samples": 0,
    }
    since, until = src.get("since"), src.get("until")
    if since is None or until is None:
        return rec
    window = {"since": float(since), "until": float(until)}
    if src["hosts"]:
        gpu = store.read_df(
            with_lists(
                "SELECT AVG(util_gpu) AS u, "
                "MAX(mem_used_bytes / NULLIF(mem_total_bytes, 0)) AS m, COUNT(*) AS n "
                "FROM gpu_samples WHERE host IN :hosts AND ts >= :since AND ts <= :until",
                "hosts",
            ),
            {"hosts": list(src["hosts"]), **window},
        ).iloc[0]
        rec["gpu_util"] = _nan(gpu["u"])
        rec["mem_peak_fraction"] = _nan(gpu["m"])
        rec["gpu_samples"] = int(gpu["n"] or 0)
    if src["targets"]:
        peaks = store.read_df(
            with_lists(
                "SELECT metric, MAX(value) AS v FROM engine_samples WHERE target IN "
                ":targets AND metric IN ('kv_cache_usage', 'requests_running') "
                "AND ts >= :since AND ts <= :until GROUP BY metric",
                "targets",
            ),
            {"targets": list(src["targets"]), **window},
        )
        for metric, value in zip(peaks["metric"], peaks["v"], strict=True):
            key = "kv_max" if metric == "kv_cache_usage" else "running_max"
            rec[key] = _nan(value)
    return rec


def _nan(value: object) -> float:
    return float("nan") if value is None or pd.isna(value) else float(value)  # type: ignore[call-overload, arg-type]
