"""Reads of the ``sweeps`` and ``sweep_points`` tables (migration 6) and of a sweep's runs.

``store.sweep_records`` is their only writer (``servescope sweep``); this module only reads:
the sweep listing (newest first), one sweep's record (its JSON columns decoded), its points
(one row per point and repeat, ``params`` decoded to a dict and ``search`` to a list) and the
runs the sweep stored (``runs.sweep_id``), for points whose ``search`` names no runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

import pandas as pd
import sqlalchemy as sa

from store import schema
from store.sql import coerce, json_object

if TYPE_CHECKING:
    from store.db import Store

#: The listing's columns: the sweep's own, then its point counts.
LIST_COLUMNS: Final = (
    "sweep_id",
    "name",
    "engine",
    "workload",
    "slo",
    "status",
    "mode",
    "created_at",
    "started_at",
    "ended_at",
    "host",
)
#: Point statuses that measured something.
COMPLETED: Final = "completed"
#: Point statuses that are a failure of the point (not pending, running, interrupted, pruned).
FAILED_STATUSES: Final = ("failed_to_start", "health_timeout", "crashed", "oom")


def _json(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _json_list(value: Any) -> list[Any]:
    decoded = _json(value)
    return list(decoded) if isinstance(decoded, list) else []


def sweep_list(store: Store) -> pd.DataFrame:
    """Every sweep, newest first (by started_at, else created_at): :data:`LIST_COLUMNS` and
    ``points`` (distinct points), ``completed`` and ``failed`` (point × repeat rows)."""
    sw, sp = schema.sweeps, schema.sweep_points
    failed = sa.case((sp.c.status.in_(list(FAILED_STATUSES)), 1), else_=0)
    done = sa.case((sp.c.status == COMPLETED, 1), else_=0)
    counts = (
        sa.select(
            sp.c.sweep_id,
            sa.func.count(sa.distinct(sp.c.point_id)).label("points"),
            sa.func.sum(done).label("completed"),
            sa.func.sum(failed).label("failed"),
        )
        .group_by(sp.c.sweep_id)
        .subquery()
    )
    when = sa.func.coalesce(sw.c.started_at, sw.c.created_at)
    stmt = (
        sa.select(
            *[sw.c[c] for c in LIST_COLUMNS],
            sa.func.coalesce(counts.c.points, 0).label("points"),
            sa.func.coalesce(counts.c.completed, 0).label("completed"),
            sa.func.coalesce(counts.c.failed, 0).label("failed"),
        )
        .select_from(sw.outerjoin(counts, counts.c.sweep_id == sw.c.sweep_id))
        .order_by(when.desc().nulls_last(), sw.c.sweep_id)
    )
    df = store.read_df(stmt).reset_index(drop=True)
    return coerce(df, ints=("points", "completed", "failed"))


def sweep_record(store: Store, sweep_id: str) -> dict[str, Any] | None:
    """One sweep's row with ``grid`` and ``spec`` decoded (dicts; the text when not JSON);
    None when no such sweep."""
    sw = schema.sweeps
    df = store.read_df(sa.select(sw).where(sw.c.sweep_id == str(sweep_id)))
    if df.empty:
        return None
    row = {str(k): v for k, v in df.iloc[0].to_dict().items()}
    for col in ("grid", "spec"):
        row[col] = _json(row.get(col))
    return {k: (None if v is pd.NA else v) for k, v in row.items()}


def sweep_points(store: Store, sweep_id: str) -> pd.DataFrame:
    """One row per point and repeat of ``sweep_id`` (every ``sweep_points`` column), in the
    order they ran (unstarted ones last, then by point and repeat); ``params`` decoded to a
    dict ({} when unreadable), ``search`` to a list of {load, run_id, passed, ratio}."""
    sp = schema.sweep_points
    stmt = (
        sa.select(sp)
        .where(sp.c.sweep_id == str(sweep_id))
        .order_by(sp.c.started_at.asc().nulls_last(), sp.c.point_id, sp.c.repeat)
    )
    df = store.read_df(stmt).reset_index(drop=True)
    df["params"] = pd.Series(
        [json_object(v) or {} for v in df["params"]], index=df.index, dtype=object
    )
    df["search"] = pd.Series([_json_list(v) for v in df["search"]], index=df.index, dtype=object)
    for col in ("capacity", "peak_memory_fraction", "preemptions", "prior"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    df = coerce(df, ints=("repeat", "runs_used"), bools=("capacity_interpolated",))
    return df


def sweep_runs(store: Store, sweep_id: str) -> pd.DataFrame:
    """The runs stored with ``runs.sweep_id = sweep_id``: run_id, arrival, target_rate,
    concurrency, status, started_at, and engine_params and client_params decoded to dicts (the
    runner records the point in client_params' ``sweep_point``)."""
    runs = schema.runs
    stmt = (
        sa.select(
            runs.c.run_id,
            runs.c.arrival,
            runs.c.target_rate,
            runs.c.concurrency,
            runs.c.status,
            runs.c.started_at,
            runs.c.engine_params,
            runs.c.client_params,
        )
        .where(runs.c.sweep_id == str(sweep_id))
        .order_by(runs.c.started_at.asc().nulls_last(), runs.c.run_id)
    )
    df = store.read_df(stmt).reset_index(drop=True)
    for col in ("engine_params", "client_params"):
        df[col] = pd.Series([json_object(v) or {} for v in df[col]], index=df.index, dtype=object)
    for col in ("target_rate", "concurrency"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return df
