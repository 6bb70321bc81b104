"""The sweep runner's writes (``sweeps``, ``sweep_points``) and its resume bookkeeping.

Only ``servescope sweep`` writes these tables, through this module; each function is one
transaction. Reads for the pages live in ``store.sweeps``.

- :func:`start_sweep`: the sweep's row (status ``running``), inserted, or on a resume updated.
- :func:`record_point`: upsert one ``sweep_points`` row (key sweep_id, point_id, repeat).
- :func:`finish_sweep`: the sweep's final status and end.
- :func:`completed_point_ids`: the (point_id, repeat) pairs a resume skips: every row whose
  status is final (anything but ``pending``, ``running`` and ``interrupted``).
- :func:`latest_resumable`: the newest sweep of a spec name left ``interrupted``, ``failed``
  or ``running`` (a process killed outright leaves ``running``).
- :func:`point_row`: one point's stored row (a resume's new attempt keeps the old one in
  ``attempts``).
- :func:`left_running`: the points a killed sweep left ``running`` (with their engine's process
  group), and :func:`unfinished_sweeps`: the sweeps left ``running``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any, Final

import sqlalchemy as sa

from store import schema
from store.db import Store

#: Statuses after which a point (repeat) is not measured again by ``--resume``.
FINAL_STATUSES: Final = frozenset(
    {"completed", "failed_to_start", "health_timeout", "crashed", "oom", "pruned"}
)
#: Statuses a resume measures again.
RESUMABLE_STATUSES: Final = frozenset({"pending", "running", "interrupted"})

_JSON_POINT_FIELDS: Final = ("params", "search", "attempts")
_POINT_COLUMNS: Final = frozenset(c.name for c in schema.sweep_points.columns)
_SWEEP_COLUMNS: Final = frozenset(c.name for c in schema.sweeps.columns)


def _json(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def start_sweep(store: Store, sweep: Mapping[str, Any]) -> None:
    """Insert the sweep (``sweep_id`` and any ``sweeps`` columns; grid/spec as dicts), status
    ``running``; when it exists (a resume), update the fields given and set it running."""
    unknown = set(sweep) - _SWEEP_COLUMNS
    if unknown:
        raise ValueError(f"not columns of sweeps: {sorted(unknown)}")
    values = {k: _json(v) if k in ("grid", "spec") else v for k, v in sweep.items()}
    values["status"] = "running"
    sweep_id = values["sweep_id"]
    t = schema.sweeps
    with store.connect() as conn:
        exists = conn.execute(sa.select(t.c.sweep_id).where(t.c.sweep_id == sweep_id)).first()
        if exists:
            update = {k: v for k, v in values.items() if k not in ("sweep_id", "created_at")}
            update["ended_at"] = None
            conn.execute(sa.update(t).where(t.c.sweep_id == sweep_id).values(**update))
        else:
            values.setdefault("created_at", time.time())
            values.setdefault("started_at", values["created_at"])
            conn.execute(sa.insert(t).values(**values))


def record_point(store: Store, row: Mapping[str, Any]) -> None:
    """Upsert one point (repeat): ``sweep_id``, ``point_id``, ``repeat``, ``params`` (dict),
    ``status`` and any other ``sweep_points`` columns (``search``: a list). One transaction."""
    unknown = set(row) - _POINT_COLUMNS
    if unknown:
        raise ValueError(f"not columns of sweep_points: {sorted(unknown)}")
    values = {k: _json(v) if k in _JSON_POINT_FIELDS else v for k, v in row.items()}
    t = schema.sweep_points
    key = (
        (t.c.sweep_id == values["sweep_id"])
        & (t.c.point_id == values["point_id"])
        & (t.c.repeat == int(values["repeat"]))
    )
    with store.connect() as conn:
        exists = conn.execute(sa.select(t.c.point_id).where(key)).first()
        if exists:
            update = {
                k: v for k, v in values.items() if k not in ("sweep_id", "point_id", "repeat")
            }
            conn.execute(sa.update(t).where(key).values(**update))
        else:
            conn.execute(sa.insert(t).values(**values))


def finish_sweep(
    store: Store, sweep_id: str, status: str, *, ended_at: float | None = None
) -> None:
    """Set the sweep's final status (completed | interrupted | failed) and its end."""
    t = schema.sweeps
    with store.connect() as conn:
        conn.execute(
            sa.update(t)
            .where(t.c.sweep_id == sweep_id)
            .values(status=status, ended_at=time.time() if ended_at is None else ended_at)
        )


def completed_point_ids(store: Store, sweep_id: str) -> set[tuple[str, int]]:
    """(point_id, repeat) of every point of ``sweep_id`` already done (completed or failed)."""
    t = schema.sweep_points
    df = store.read_df(
        sa.select(t.c.point_id, t.c.repeat, t.c.status).where(t.c.sweep_id == sweep_id)
    )
    return {
        (str(p), int(r))
        for p, r, s in zip(df["point_id"], df["repeat"], df["status"], strict=True)
        if s in FINAL_STATUSES
    }


def sweep_header(store: Store, sweep_id: str) -> dict[str, Any] | None:
    """The sweep's row (spec and grid decoded), or None: what a resume checks."""
    df = store.read_df(sa.select(schema.sweeps).where(schema.sweeps.c.sweep_id == sweep_id))
    if df.empty:
        return None
    row = {str(k): v for k, v in df.iloc[0].to_dict().items()}
    for key in ("spec", "grid"):
        if isinstance(row.get(key), str):
            with contextlib.suppress(json.JSONDecodeError):
                row[key] = json.loads(row[key])
    return row


def latest_resumable(store: Store, name: str) -> str | None:
    """The newest sweep named ``name`` whose status is ``interrupted``, ``failed`` or
    ``running``."""
    t = schema.sweeps
    df = store.read_df(
        sa.select(t.c.sweep_id)
        .where((t.c.name == name) & t.c.status.in_(["interrupted", "failed", "running"]))
        .order_by(sa.func.coalesce(t.c.started_at, t.c.created_at).desc())
        .limit(1)
    )
    return None if df.empty else str(df["sweep_id"].iloc[0])


def point_row(store: Store, sweep_id: str, point_id: str, repeat: int) -> dict[str, Any] | None:
    """The stored row of one point (repeat), ``params``/``search``/``attempts`` decoded; None
    when it was never recorded."""
    t = schema.sweep_points
    df = store.read_df(
        sa.select(t).where(
            (t.c.sweep_id == sweep_id) & (t.c.point_id == point_id) & (t.c.repeat == int(repeat))
        )
    )
    if df.empty:
        return None
    row = {str(k): v for k, v in df.iloc[0].to_dict().items()}
    for key in _JSON_POINT_FIELDS:
        if isinstance(row.get(key), str):
            with contextlib.suppress(json.JSONDecodeError):
                row[key] = json.loads(row[key])
    return {k: (None if _missing(v) else v) for k, v in row.items()}


def _missing(value: Any) -> bool:
    try:
        return bool(value is None or value != value)  # None, NaN, NA
    except (TypeError, ValueError):
        return False


def left_running(store: Store, sweep_id: str) -> list[dict[str, Any]]:
    """The points of ``sweep_id`` still ``running`` (a sweep killed outright left them): their
    key, ``started_at`` and the engine's ``engine_pgid``/``engine_start`` (None if unknown)."""
    t = schema.sweep_points
    df = store.read_df(
        sa.select(
            t.c.point_id, t.c.repeat, t.c.started_at, t.c.engine_pgid, t.c.engine_start
        ).where((t.c.sweep_id == sweep_id) & (t.c.status == "running"))
    )
    return [
        {str(k): (None if _missing(v) else v) for k, v in rec.items()}
        for rec in df.to_dict("records")
    ]


def unfinished_sweeps(store: Store) -> list[dict[str, Any]]:
    """Every sweep left ``running``: sweep_id, name, host, runner_pid, runner_start."""
    t = schema.sweeps
    df = store.read_df(
        sa.select(t.c.sweep_id, t.c.name, t.c.host, t.c.runner_pid, t.c.runner_start).where(
            t.c.status == "running"
        )
    )
    return [
        {str(k): (None if _missing(v) else v) for k, v in rec.items()}
        for rec in df.to_dict("records")
    ]
