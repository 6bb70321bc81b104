"""The ``project_health`` table (migration 5): each framework's repository health as fetched
from GitHub by ``servescope health``, one row per framework and fetch; the Select page shows the
latest beside the ``project_health`` criterion."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from errors import StoreError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

COLUMNS: tuple[str, ...] = tuple(c.name for c in schema.project_health.columns)


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    table = schema.project_health
    missing = [k for k in ("framework", "fetched_at", "repo") if row.get(k) is None]
    if missing:
        raise StoreError(f"a project_health row needs {', '.join(missing)}: {dict(row)!r}")
    out: dict[str, Any] = {}
    for column in table.columns:
        value = row.get(column.name)
        if column.name == "detail" and value is not None and not isinstance(value, str):
            value = json.dumps(value, sort_keys=True, allow_nan=False)
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        out[column.name] = value
    return out


def add_project_health(store: Store, rows: Iterable[Mapping[str, Any]]) -> int:
    """Store fetched rows in one transaction (``detail``: a dict, JSON-encoded, or JSON text);
    a row of the same framework and ``fetched_at`` is replaced. Returns the rows written."""
    table = schema.project_health
    records = [_row(r) for r in rows]
    if not records:
        return 0
    with store.connect() as conn:
        for record in records:
            conn.execute(
                sa.delete(table).where(
                    table.c.framework == record["framework"],
                    table.c.fetched_at == record["fetched_at"],
                )
            )
        conn.execute(sa.insert(table), records)
    return len(records)


def latest_project_health(store: Store) -> pd.DataFrame:
    """The latest fetch of each framework, one row each, ordered by framework; the table's
    columns (``detail`` as its JSON text). Empty (with the columns) when nothing was fetched."""
    table = schema.project_health
    latest = (
        sa.select(table.c.framework, sa.func.max(table.c.fetched_at).label("fetched_at"))
        .group_by(table.c.framework)
        .subquery("latest")
    )
    query = (
        sa.select(*table.columns)
        .join(
            latest,
            sa.and_(
                table.c.framework == latest.c.framework,
                table.c.fetched_at == latest.c.fetched_at,
            ),
        )
        .order_by(table.c.framework)
    )
    df = store.read_df(query)
    if df.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    return df[list(COLUMNS)].reset_index(drop=True)
