"""Intent-named reads for a run series (Memory vs load) → one DataFrame row per run.

Per run, over its span (``started_at`` … ``ended_at``, else its requests' first send … last
completion) and its live sources (the targets and hosts the bench recorded, else every source
that reported during the span, as ``store.sample_timelines.run_sources``): peak GPU memory
(summed over its GPUs per sampling instant), peak and P95 KV-cache usage, preemptions (the
increase of ``preemptions_total`` per target, restarts counted from zero) and its requests'
token moments. Three statements per run set whatever its size — requests, engine samples, GPU
samples — the sample reads one UNION ALL of a branch per run bounded by its span, so a store
of months of 1-second scrapes is read only inside the runs' spans. ``text()`` with bound
parameters; the same SQL runs on DuckDB and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pandas as pd

from store import sql as sqlb
from store.db import Store
from store.sql import distinct_ids, json_object, with_lists

#: The columns of :func:`series_figures`.
FIGURE_COLUMNS: Final[dict[str, str]] = {
    "run_id": "object",
    "since": "float64",  # the span read (NaN: the run recorded no time)
    "until": "float64",
    "requests": "int64",  # every stored request (the denominator of preemptions per 1,000)
    "ok": "int64",
    "sum_out_in": "float64",  # Σ output × input tokens over successful requests
    "sum_out_sq": "float64",  # Σ output²
    "sum_out": "float64",  # Σ output tokens
    "mean_e2e_s": "float64",
    "kv_peak": "float64",  # 0..1, the fullest target
    "kv_p95": "float64",  # over every KV sample of the run's targets
    "preemptions": "float64",  # NaN: no preemption counter reported
    "gpu_peak_bytes": "float64",  # the highest per-instant sum over the run's GPUs
    "gpu_total_bytes": "float64",
    "gpu_peak_fraction": "float64",  # the fullest GPU's peak used / total
}

_ENGINE_METRICS: Final = "('kv_cache_usage', 'preemptions_total')"


def series_figures(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """:data:`FIGURE_COLUMNS` for each of ``run_ids`` that exists (in the order given); NaN
    where a run has no such samples. At most ``store.sql.MAX_RUNS`` runs."""
    ids = distinct_ids(run_ids)
    if not ids:
        return _empty()
    with store.pinned() as one:
        runs = _runs(one, ids)
        if runs.empty:
            return _empty()
        windows = _windows(runs)
        engine = _engine(one, windows)
        gpu = _gpu(one, windows)
    out = runs.drop(columns=["client_params", "first_sent", "last_done"])
    out = out.merge(engine, on="run_id", how="left").merge(gpu, on="run_id", how="left")
    order = {r: i for i, r in enumerate(ids)}
    out = out.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)
    for col in ("requests", "ok"):
        out[col] = pd.to_numeric(out[col]).fillna(0)
    return out[list(FIGURE_COLUMNS)].astype(FIGURE_COLUMNS)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in FIGURE_COLUMNS.items()})


def _runs(store: Store, ids: list[str]) -> pd.DataFrame:
    """The runs' spans, collectors and request moments (one statement)."""
    df = store.read_df(
        with_lists(
            """
            WITH q AS (
                SELECT run_id, COUNT(*) AS requests,
                       COUNT(*) FILTER (WHERE status = 'ok') AS ok,
                       MIN(sent_at) AS first_sent, MAX(done_at) AS last_done,
                       SUM(CAST(output_tokens AS DOUBLE PRECISION) * input_tokens)
                           FILTER (WHERE status = 'ok') AS sum_out_in,
                       SUM(CAST(output_tokens AS DOUBLE PRECISION) * output_tokens)
                           FILTER (WHERE status = 'ok' AND input_tokens IS NOT NULL)
                           AS sum_out_sq,
                       SUM(CAST(output_tokens AS DOUBLE PRECISION))
                           FILTER (WHERE status = 'ok' AND input_tokens IS NOT NULL) AS sum_out,
                       AVG(e2e_ms) FILTER (WHERE status = 'ok') / 1000.0 AS mean_e2e_s
                FROM requests WHERE run_id IN :run_ids GROUP BY run_id
            )
            SELECT r.run_id, r.started_at, r.ended_at, r.client_params,
                   q.requests, q.ok, q.first_sent, q.last_done, q.sum_out_in, q.sum_out_sq,
                   q.sum_out, q.mean_e2e_s
            FROM runs AS r LEFT JOIN q ON q.run_id = r.run_id
            WHERE r.run_id IN :run_ids
            """
        ),
        {"run_ids": ids},
    )
    since = pd.to_numeric(df["started_at"]).fillna(pd.to_numeric(df["first_sent"]))
    until = pd.to_numeric(df["ended_at"]).fillna(pd.to_numeric(df["last_done"])).fillna(since)
    return df.drop(columns=["started_at", "ended_at"]).assign(since=since, until=until)


def _windows(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (run, source kind, source): ``source`` None means every source of that kind
    that reported in the span (the bench recorded none for the run)."""
    out: list[dict[str, Any]] = []
    for rec in runs.to_dict("records"):
        if pd.isna(rec["since"]):
            continue
        collectors = (json_object(rec["client_params"]) or {}).get("collectors")
        collectors = collectors if isinstance(collectors, dict) else {}
        targets = [str(t) for t in collectors.get("targets") or []]
        hosts = [str(h) for h in collectors.get("hosts") or []]
        span = {"run_id": rec["run_id"], "since": float(rec["since"]), "until": rec["until"]}
        if not targets and not hosts:
            out += [{**span, "kind": "engine", "source": None}]
            out += [{**span, "kind": "gpu", "source": None}]
        out += [{**span, "kind": "engine", "source": t} for t in targets]
        out += [{**span, "kind": "gpu", "source": h} for h in hosts]
    return out


def _joined(
    windows: list[dict[str, Any]], kind: str, table: str, key: str, select: str, where: str
) -> tuple[str, dict[str, Any]] | None:
    """``SELECT run_id, {select} FROM {table} AS x`` over the windows of ``kind``: one branch
    per run (its span and its sources, or every source when it recorded none) in one UNION
    ALL. Constant bounds per branch let the engine skip row groups outside the span (samples
    are appended in time order) instead of joining every sample to every window."""
    params: dict[str, Any] = {}
    by_run: dict[str, list[dict[str, Any]]] = {}
    for w in windows:
        if w["kind"] == kind:
            by_run.setdefault(str(w["run_id"]), []).append(w)
    parts = []
    for i, (run_id, mine) in enumerate(by_run.items()):
        p = f"{kind[0]}{i}"
        params |= {f"{p}r": run_id, f"{p}a": mine[0]["since"], f"{p}b": float(mine[0]["until"])}
        terms = [f"x.ts >= :{p}a", f"x.ts <= :{p}b", where]
        sources = [str(w["source"]) for w in mine if w["source"] is not None]
        if sources:
            names = [f"{p}s{j}" for j in range(len(sources))]
            params |= dict(zip(names, sources, strict=True))
            terms.append(f"x.{key} IN ({', '.join(':' + n for n in names)})")
        parts.append(
            f"SELECT CAST(:{p}r AS TEXT) AS run_id, {select} FROM {table} AS x "
            f"WHERE {' AND '.join(terms)}"
        )
    if not parts:
        return None
    return " UNION ALL ".join(parts), params


def _engine(store: Store, windows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per run: kv_peak, kv_p95, preemptions (one statement)."""
    cols = ["run_id", "kv_peak", "kv_p95", "preemptions"]
    joined = _joined(
        windows,
        "engine",
        "engine_samples",
        "target",
        "x.target, x.metric, x.ts, x.value",
        f"x.metric IN {_ENGINE_METRICS}",
    )
    if joined is None:
        return pd.DataFrame(columns=cols)
    samples, params = joined
    kv = "metric = 'kv_cache_usage'"
    pre = "metric = 'preemptions_total'"
    (p95,) = sqlb.pcts(store.dialect, "value", (0.95,), kv)
    df = store.read_df(
        f"""
        WITH s AS ({samples}),
        d AS (
            SELECT run_id, metric, value,
                   value - LAG(value) OVER (PARTITION BY run_id, target, metric ORDER BY ts)
                       AS dv
            FROM s
        )
        SELECT run_id,
               MAX(value) FILTER (WHERE {kv}) AS kv_peak,
               {p95} AS kv_p95,
               COUNT(*) FILTER (WHERE {pre}) AS counter_samples,
               SUM(CASE WHEN dv < 0 THEN value ELSE dv END) FILTER (WHERE {pre}) AS preemptions
        FROM d GROUP BY run_id
        """,
        params,
    )
    counted = pd.to_numeric(df["counter_samples"]) > 0
    increase = pd.to_numeric(df["preemptions"]).astype("float64")
    df["preemptions"] = increase.where(~counted, increase.fillna(0.0)).where(counted)
    return df[cols]


def _gpu(store: Store, windows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per run: gpu_peak_bytes, gpu_total_bytes, gpu_peak_fraction (one statement)."""
    cols = ["run_id", "gpu_peak_bytes", "gpu_total_bytes", "gpu_peak_fraction"]
    joined = _joined(
        windows,
        "gpu",
        "gpu_samples",
        "host",
        "x.ts, x.mem_used_bytes, x.mem_total_bytes",
        "x.mem_used_bytes IS NOT NULL",
    )
    if joined is None:
        return pd.DataFrame(columns=cols)
    samples, params = joined
    return store.read_df(
        f"""
        WITH s AS ({samples}),
        i AS (
            SELECT run_id, ts, SUM(mem_used_bytes) AS used, SUM(mem_total_bytes) AS total,
                   MAX(mem_used_bytes / NULLIF(mem_total_bytes, 0)) AS fraction
            FROM s GROUP BY run_id, ts
        )
        SELECT run_id, MAX(used) AS gpu_peak_bytes, MAX(total) AS gpu_total_bytes,
               MAX(fraction) AS gpu_peak_fraction
        FROM i GROUP BY run_id
        """,
        params,
    )[cols]
