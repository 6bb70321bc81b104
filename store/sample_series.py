"""Intent-named reads of the live collectors' tables → DataFrames (engine and GPU samples).

Every read is bounded by time (``since``), so a store holding months of samples answers the
Live page from its last minutes only. Statements are ``text()`` with bound parameters; the same
SQL runs on DuckDB and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from store.db import Store

#: The normalised metrics the Live page draws (histogram series are read separately).
LIVE_METRICS: tuple[str, ...] = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "preemptions_total",
    "generation_tokens_total",
    "prompt_tokens_total",
    "requests_finished_total",
)


def _in_list(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, str]]:
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))


def _span_filter(
    column: str,
    values: Sequence[str],
    since: float,
    until: float | None,
    targets: Sequence[str] | None,
) -> tuple[str, dict[str, object]]:
    """The WHERE clause of a bounded sample read: ts in [since, until], ``column`` in
    ``values``, and the targets when given; with its bound parameters."""
    value_sql, params = _in_list("v", list(values))
    where = f"ts >= :since AND ts <= :until AND {column} IN ({value_sql})"
    out: dict[str, object] = {"since": since, "until": until or 1e18, **params}
    if targets:
        target_sql, tparams = _in_list("t", list(targets))
        where += f" AND target IN ({target_sql})"
        out.update(tparams)
    return where, out


def last_sample_times(store: Store, *, since: float | None = None) -> pd.DataFrame:
    """When each engine target and each GPU host last reported: columns kind, key, last_ts.

    ``kind`` is ``engine`` (key = target URL) or ``gpu`` (key = host). With ``since``, only
    sources that reported since then (cheap: samples are appended in time order, so the scan
    skips old row groups); without it, over all time ("last seen …" of a stopped source).
    """
    params = {"since": since if since is not None else -1e18}
    return store.read_df(
        "SELECT 'engine' AS kind, target AS key, MAX(ts) AS last_ts FROM engine_samples "
        "WHERE ts >= :since GROUP BY target "
        "UNION ALL "
        "SELECT 'gpu' AS kind, host AS key, MAX(ts) AS last_ts FROM gpu_samples "
        "WHERE ts >= :since GROUP BY host "
        "ORDER BY kind, key",
        params,
    )


def target_engines(
    store: Store, *, since: float | None = None, until: float | None = None
) -> dict[str, str]:
    """Each engine target with samples in [since, until] → the engine it was detected as
    (``vllm``, ``sglang``, ``sim``, …; the newest detection when it changed)."""
    df = store.read_df(
        "SELECT target, engine, MAX(ts) AS last_ts FROM engine_samples "
        "WHERE ts >= :since AND ts <= :until GROUP BY target, engine ORDER BY target, last_ts",
        {"since": since if since is not None else -1e18, "until": until or 1e18},
    )
    return {str(t): str(e) for t, e in zip(df["target"], df["engine"], strict=True)}


#: Raw series whose labels name the served model (``model_name``): one gauge per engine.
MODEL_LABELLED: tuple[str, ...] = (
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "trtllm_num_requests_running",
)


def target_models(
    store: Store, *, since: float | None = None, until: float | None = None
) -> dict[str, str]:
    """Each engine target whose raw samples in [since, until] carry a ``model_name`` label →
    that model (the newest when it changed). Engines that do not label their series (TGI,
    llama.cpp, Triton) are absent."""
    names, params = _in_list("n", list(MODEL_LABELLED))
    df = store.read_df(
        "SELECT target, labels, MAX(ts) AS last_ts FROM engine_raw_samples "
        f"WHERE ts >= :since AND ts <= :until AND name IN ({names}) "
        "GROUP BY target, labels ORDER BY target, last_ts",
        {"since": since if since is not None else -1e18, "until": until or 1e18, **params},
    )
    out: dict[str, str] = {}
    for target, labels in zip(df["target"], df["labels"], strict=True):
        try:
            model = json.loads(str(labels)).get("model_name")
        except (ValueError, AttributeError):
            continue
        if model:
            out[str(target)] = str(model)
    return out


def latest_sample_ts(store: Store, *, since: float | None = None) -> float | None:
    """The newest sample of any live source (since ``since``), or None when there is none."""
    df = last_sample_times(store, since=since)
    if df.empty or df["last_ts"].isna().all():
        return None
    return float(df["last_ts"].max())


def engine_series(
    store: Store,
    *,
    since: float,
    until: float | None = None,
    metrics: Sequence[str] = LIVE_METRICS,
    targets: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Normalised engine samples in [since, until]: columns target, engine, ts, metric, value."""
    where, params = _span_filter("metric", metrics, since, until, targets)
    return store.read_df(
        f"SELECT target, engine, ts, metric, value FROM engine_samples WHERE {where} "
        "ORDER BY target, ts, metric",
        params,
    )


def engine_histogram_series(
    store: Store, target: str, hist: str, *, since: float, until: float | None = None
) -> pd.DataFrame:
    """One target's stored histogram series (``<hist>_bucket:*``, ``_sum``, ``_count``) in
    [since, until], starting at the last full scrape (one with bucket rows) before ``since``
    as the baseline: columns ts, metric, value.

    The watcher stores a histogram's buckets only when its count moved, so scrapes with only
    ``_count``/``_sum`` rows carry the buckets of the last full one (carry them forward).
    """
    params: dict[str, object] = {
        "target": target,
        "pattern": hist.replace("_", "\\_") + "\\_%",
        "inf": f"{hist}_bucket:+Inf",
        "since": since,
        "until": until or 1e18,
    }
    return store.read_df(
        "SELECT ts, metric, value FROM engine_samples "
        "WHERE target = :target AND metric LIKE :pattern ESCAPE '\\' "
        "AND ts <= :until AND ts >= COALESCE((SELECT MAX(ts) FROM engine_samples "
        "  WHERE target = :target AND metric = :inf AND ts < :since), :since) "
        "ORDER BY ts, metric",
        params,
    )


def engine_raw_series(
    store: Store,
    names: Sequence[str],
    *,
    since: float,
    until: float | None = None,
    targets: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Raw (labelled) engine series of ``names`` in [since, until]: columns target, ts, name,
    labels (canonical JSON), value. For per-window increases pass ``since`` one window early,
    so the first window has its baseline scrape."""
    if not names:
        return pd.DataFrame(columns=["target", "ts", "name", "labels", "value"])
    where, params = _span_filter("name", names, since, until, targets)
    return store.read_df(
        f"SELECT target, ts, name, labels, value FROM engine_raw_samples WHERE {where} "
        "ORDER BY target, name, labels, ts",
        params,
    )


def gpu_series(
    store: Store, *, since: float, until: float | None = None, hosts: Sequence[str] | None = None
) -> pd.DataFrame:
    """GPU samples in [since, until]: host, gpu_index, ts, gpu_name, gpu_uuid, mem_used_bytes,
    mem_total_bytes, util_gpu, util_mem, power_w, temp_c, sm_clock_mhz, source."""
    sql = (
        "SELECT host, gpu_index, ts, gpu_name, gpu_uuid, mem_used_bytes, mem_total_bytes, "
        "util_gpu, util_mem, power_w, temp_c, sm_clock_mhz, source FROM gpu_samples "
        "WHERE ts >= :since AND ts <= :until"
    )
    params: dict[str, object] = {"since": since, "until": until or 1e18}
    if hosts:
        host_sql, hparams = _in_list("h", list(hosts))
        sql += f" AND host IN ({host_sql})"
        params.update(hparams)
    return store.read_df(sql + " ORDER BY host, gpu_index, ts", params)


def latest_gpu_state(store: Store, *, since: float | None = None) -> pd.DataFrame:
    """Each GPU's newest sample (same columns as :func:`gpu_series`), among GPUs that reported
    since ``since`` (default: ever)."""
    return store.read_df(
        "SELECT g.host, g.gpu_index, g.ts, g.gpu_name, g.gpu_uuid, g.mem_used_bytes, "
        "g.mem_total_bytes, g.util_gpu, g.util_mem, g.power_w, g.temp_c, g.sm_clock_mhz, "
        "g.source FROM gpu_samples AS g "
        "JOIN (SELECT host, gpu_index, MAX(ts) AS ts FROM gpu_samples WHERE ts >= :since "
        "GROUP BY host, gpu_index) AS l "
        "ON g.host = l.host AND g.gpu_index = l.gpu_index AND g.ts = l.ts "
        "ORDER BY g.host, g.gpu_index",
        {"since": since if since is not None else -1e18},
    )


def run_live_sources(store: Store, run_id: str) -> dict[str, object]:
    """The live sources recorded with a run (``runs.client_params["collectors"]``, written by
    the bench from ``LiveCollection.stop().to_json()``) and its time span: keys ``started_at``,
    ``ended_at``, ``targets``, ``hosts`` (empty lists when none were recorded)."""
    import json

    df = store.read_df(
        "SELECT started_at, ended_at, client_params FROM runs WHERE run_id = :run_id",
        {"run_id": run_id},
    )
    if df.empty:
        return {}
    row = df.iloc[0]
    collectors: dict[str, object] = {}
    raw = row["client_params"]
    if isinstance(raw, str) and raw:
        try:
            collectors = dict(json.loads(raw).get("collectors") or {})
        except (ValueError, AttributeError):
            collectors = {}
    return {
        "started_at": row["started_at"],
        "ended_at": row["ended_at"],
        "targets": _str_list(collectors.get("targets")),
        "hosts": _str_list(collectors.get("hosts")),
    }


def _str_list(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def sample_counts(
    store: Store, *, since: float | None = None, until: float | None = None
) -> dict[str, int]:
    """Rows per live table in [since, until] (the soak test's 'stored' side)."""
    out: dict[str, int] = {}
    params = {"since": since if since is not None else -1e18, "until": until or 1e18}
    for table in ("engine_samples", "engine_raw_samples", "gpu_samples", "gpu_process_samples"):
        df = store.read_df(
            f"SELECT COUNT(*) AS n FROM {table} WHERE ts >= :since AND ts <= :until", params
        )
        out[table] = int(df["n"].iloc[0])
    return out
