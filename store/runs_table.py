"""Reads of the ``runs`` table: THE run listing (:func:`list_runs`, with filters), one run's
record and tool summary, the runs with their headline figures, a run's series across load
levels, and the store's runs by source. Intent-named, parameterised, DataFrames out."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import run_figures, schema
from store.sql import coerce, distinct_ids, json_object

if TYPE_CHECKING:
    from store.db import Store

#: The columns of a run listing: the runs table's descriptive ones and the engine parameters
#: (the configuration Compare groups by); not the client's parameters.
LIST_COLUMNS: Final = (
    "run_id",
    "name",
    "source",
    "framework",
    "framework_version",
    "model",
    "precision",
    "kv_cache_dtype",
    "gpu_name",
    "gpu_count",
    "workload",
    "arrival",
    "concurrency",
    "target_rate",
    "burstiness",
    "sweep_id",
    "engine_params",
    "started_at",
    "ended_at",
    "duration_s",
    "status",
    "client_bound",
    "client_bound_reason",
    "achieved_rate",
    "source_file",
    "tags",
    "notes",
    "tool_summary",
    "created_at",
)


def existing_run_ids(store: Store, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are already stored."""
    if not run_ids:
        return set()
    runs = schema.runs
    stmt = sa.select(runs.c.run_id).where(runs.c.run_id.in_(list(run_ids)))
    return set(store.read_df(stmt)["run_id"].tolist()) if run_ids else set()


def _tags(value: Any) -> list[str]:
    if not value or isinstance(value, float):  # NULL (read as NaN beside tagged runs)
        return []
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return [str(value)]
    return [str(t) for t in parsed] if isinstance(parsed, list) else [str(parsed)]


def _aggregates_only(value: Any) -> bool:
    if not value:
        return False
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return False
    return bool(isinstance(parsed, dict) and parsed.get("aggregates_only"))


def list_runs(
    store: Store,
    *,
    limit: int | None = 200,
    include: str | None = None,
    run_ids: Sequence[str] | None = None,
    sources: Sequence[str] = (),
    frameworks: Sequence[str] = (),
    models: Sequence[str] = (),
    tag: str | None = None,
    request_counts: bool = False,
    oldest_first: bool = False,
) -> pd.DataFrame:
    """THE run listing: runs newest first (``oldest_first``: the other way), at most ``limit``
    (None: all), from the runs table alone unless ``request_counts`` — so it is instant on any
    store. Every picker, table and command that lists runs reads it.

    Filters are exact matches: ``run_ids`` (only these), ``sources``, ``frameworks``,
    ``models``; ``tag`` keeps runs carrying it. ``include`` adds that run when it exists but fell
    outside the limit (the run in the URL stays selectable). Columns: :data:`LIST_COLUMNS` with
    ``tags`` decoded to lists and ``client_bound`` a nullable bool, ``aggregates_only`` (an
    import holding only the tool's own aggregates, from ``tool_summary``) and, with
    ``request_counts``, ``requests``.
    """
    if limit is not None and limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    runs = schema.runs
    columns: list[sa.ColumnElement[Any]] = [runs.c[c] for c in LIST_COLUMNS]
    source: sa.FromClause = runs
    if request_counts:
        reqs = schema.requests
        counts = (
            sa.select(reqs.c.run_id, sa.func.count().label("requests"))
            .group_by(reqs.c.run_id)
            .subquery()
        )
        columns.append(sa.func.coalesce(counts.c.requests, 0).label("requests"))
        source = runs.outerjoin(counts, counts.c.run_id == runs.c.run_id)
    when = sa.func.coalesce(runs.c.started_at, runs.c.created_at)
    order = when.asc().nulls_first() if oldest_first else when.desc().nulls_last()
    stmt = sa.select(*columns).select_from(source).order_by(order, runs.c.run_id)
    if run_ids is not None:
        stmt = stmt.where(runs.c.run_id.in_([str(r) for r in run_ids]))
    if sources:
        stmt = stmt.where(runs.c.source.in_(list(sources)))
    if frameworks:
        stmt = stmt.where(runs.c.framework.in_(list(frameworks)))
    if models:
        stmt = stmt.where(runs.c.model.in_(list(models)))
    if tag:
        stmt = stmt.where(runs.c.tags.like(f"%{json.dumps(tag)}%"))
    df = store.read_df(stmt if limit is None else stmt.limit(int(limit)))
    if include and include not in set(df["run_id"]):
        extra = store.read_df(stmt.where(runs.c.run_id == include))
        if not extra.empty:
            df = pd.concat([df, extra], ignore_index=True)
            key = pd.to_numeric(df["started_at"]).fillna(pd.to_numeric(df["created_at"]))
            df = (
                df.assign(_order=key)
                .sort_values(
                    ["_order", "run_id"], ascending=[oldest_first, True], na_position="last"
                )
                .drop(columns="_order")
            )
    df = df.reset_index(drop=True)
    df["tags"] = pd.Series([_tags(v) for v in df["tags"]], index=df.index, dtype=object)
    df["aggregates_only"] = pd.Series(
        [_aggregates_only(v) for v in df["tool_summary"]], index=df.index, dtype=bool
    )
    return coerce(df, ints=("requests",), bools=("client_bound",))


def filter_choices(store: Store) -> dict[str, list[str]]:
    """Distinct sources, frameworks, models and tags in the store (for the filter widgets)."""
    runs = schema.runs
    df = store.read_df(sa.select(runs.c.source, runs.c.framework, runs.c.model, runs.c.tags))
    tags = sorted({t for v in df["tags"] for t in _tags(v)}) if not df.empty else []

    def distinct(col: str) -> list[str]:
        return sorted({str(v) for v in df[col].dropna()}) if not df.empty else []

    return {
        "source": distinct("source"),
        "framework": distinct("framework"),
        "model": distinct("model"),
        "tag": tags,
    }


def run_record(store: Store, run_id: str) -> dict[str, Any] | None:
    """One ``runs`` row as a dict (JSON fields decoded), or None."""
    df = store.read_df(sa.select(schema.runs).where(schema.runs.c.run_id == run_id))
    if df.empty:
        return None
    row: dict[str, Any] = {
        str(k): (None if isinstance(v, float) and v != v else v)
        for k, v in df.iloc[0].to_dict().items()
    }
    for key in ("engine_params", "client_params", "tool_summary", "tags"):
        value = row.get(key)
        if isinstance(value, str):
            with contextlib.suppress(json.JSONDecodeError):
                row[key] = json.loads(value)
    return row


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
    return coerce(df, ints=("runs", "requests"))


def latest_runs(store: Store, limit: int = 50) -> pd.DataFrame:
    """The ``limit`` most recent runs, newest first, each with its headline figures.

    Columns: run_id, name, source, framework, framework_version, model, precision,
    kv_cache_dtype, gpu_name, gpu_count, workload, arrival, concurrency, target_rate,
    started_at, status, client_bound, client_bound_reason, requests, ok, errors,
    output_tokens, duration_s, output_throughput (tokens/s), request_throughput (requests/s),
    ttft_n, ttft_p50_ms, ttft_p99_ms, tpot_n, tpot_p50_ms, tpot_p99_ms — percentiles over
    successful requests — and aggregates_only (an import that holds only the tool's own
    aggregates, no per-request rows). The figures come from each run's stored summary
    (``store.run_figures``).
    """
    runs = list_runs(store, limit=limit)
    df = run_figures.attach(store, runs)
    columns = [
        "run_id",
        "name",
        "source",
        "framework",
        "framework_version",
        "model",
        "precision",
        "kv_cache_dtype",
        "gpu_name",
        "gpu_count",
        "workload",
        "arrival",
        "concurrency",
        "target_rate",
        "started_at",
        "status",
        "client_bound",
        "client_bound_reason",
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
    return df[columns].reset_index(drop=True)


def run_tool_summary(store: Store, run_id: str) -> pd.DataFrame:
    """An imported run's own aggregates, as the tool reported them (for cross-checks).

    One row: run_id, source, tool_summary (the decoded JSON object; None when the run has none,
    e.g. a ServeScope run, or when it is not valid JSON). Empty when the run does not exist.
    """
    sql = "SELECT run_id, source, tool_summary FROM runs WHERE run_id = :run_id"
    df = store.read_df(sql, {"run_id": run_id})
    df["tool_summary"] = pd.Series(
        [json_object(v) for v in df["tool_summary"].tolist()], index=df.index, dtype=object
    )
    return df


def run_ids(store: Store) -> list[str]:
    """Every stored run's id, oldest first (for `servescope db prepare`)."""
    return [str(r) for r in list_runs(store, limit=None, oldest_first=True)["run_id"]]


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
    df = run_figures.attach(store, runs, light=True)
    df = df[df["requests"] > 0]  # runs that measured nothing are no load level
    bench = _bench_id(row["client_params"])
    if bench is not None and not (isinstance(row["sweep_id"], str) and row["sweep_id"]):
        same = df[[_bench_id(v) == bench for v in df["client_params"]]]
        if len(same) >= 2:  # one invocation per level (the demo): keep the wider group
            df = same
    df = df.drop(columns=["client_params"])
    conc = pd.to_numeric(df["concurrency"]).astype("float64")
    df["load"] = conc.fillna(pd.to_numeric(df["target_rate"]).astype("float64"))
    df = coerce(df.sort_values(["load", "run_id"]).reset_index(drop=True), bools=("client_bound",))
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


def run_aggregates(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """One row per existing run of ``run_ids`` (in that order) with everything Compare shows.

    Columns: the run's own (run_id, name, source, framework, framework_version, model, gpu_name,
    gpu_count, workload, arrival, target_rate, concurrency, engine_params (JSON text), sweep_id,
    started_at, status, client_bound, client_bound_reason, achieved_rate), tool_summary (decoded
    dict or None), aggregates_only (bool); requests, ok, errors (every non-ok request), timeouts,
    max_output_tokens (the client's cap on output tokens where the run records one:
    :func:`max_output_tokens`; NULL otherwise); error_rate, timeout_rate, input_tokens and
    output_tokens (successful requests), duration_s,
    request_throughput, output_throughput, total_token_throughput, output_throughput_per_gpu;
    for ttft/tpot/e2e/lag/itl: ``*_n``, ``*_mean_ms``, ``*_p50_ms``, ``*_p90_ms``, ``*_p95_ms``,
    ``*_p99_ms`` (successful requests; lag: every request; itl: pooled token gaps). The figures
    come from each run's stored summary (``store.run_figures``), aggregated only when stale.
    """
    ids = distinct_ids(run_ids)
    if not ids:
        return pd.DataFrame(columns=["run_id"])
    runs = list_runs(store, run_ids=ids, limit=None)
    df = run_figures.attach(
        store, runs.drop(columns=["tags", "notes", "source_file", "burstiness"])
    )
    df = df.drop(
        columns=["ended_at", "created_at", "cancelled", "first_sent", "last_sent", "last_done"],
        errors="ignore",
    )
    df["tool_summary"] = pd.Series(
        [json_object(v) for v in df["tool_summary"].tolist()], index=df.index, dtype=object
    )
    caps = _max_output_tokens(store, ids)
    df["max_output_tokens"] = pd.array([caps.get(str(r)) for r in df["run_id"]], dtype="Int64")
    order = {rid: i for i, rid in enumerate(ids)}
    df = df.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)
    for col in ("gpu_count", "concurrency", "target_rate"):
        df[col] = pd.to_numeric(df[col]).astype("float64")  # NULL stays NaN (unknown)
    return coerce(df, ints=_INTS, bools=("client_bound",))


#: client_params keys naming the client's cap on output tokens of every request, in order:
#: ``servescope bench --max-tokens``, SGLang bench_serving's ``--sharegpt-output-len`` and, for
#: its random dataset, ``--random-output-len``.
_MAX_TOKEN_KEYS: Final = ("max_tokens", "max_output_tokens", "sharegpt_output_len")


def max_output_tokens(client_params: Any) -> int | None:
    """The output-token cap a run's ``client_params`` (JSON text or dict) records, or None
    (the workload's own lengths, or a tool that does not say)."""
    params = json_object(client_params)
    if params is None:
        return None
    keys = list(_MAX_TOKEN_KEYS)
    if params.get("dataset_name") == "random":
        keys.append("random_output_len")
    for key in keys:
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if value == value and value > 0:  # not NaN, a cap
            return int(value)
    return None


def _max_output_tokens(store: Store, ids: Sequence[str]) -> dict[str, int]:
    runs = schema.runs
    df = store.read_df(
        sa.select(runs.c.run_id, runs.c.client_params).where(runs.c.run_id.in_(list(ids)))
    )
    out = {}
    for rid, params in zip(df["run_id"], df["client_params"], strict=True):
        cap = max_output_tokens(params)
        if cap is not None:
            out[str(rid)] = cap
    return out


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
