"""Reads for the Data page and the importers: runs listing with filters, existing run ids,
one run's rows for download and export. Intent-named, parameterised, DataFrames out."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from store import schema

if TYPE_CHECKING:
    from store.db import Store

RUN_LIST_COLUMNS = (
    "run_id",
    "name",
    "source",
    "framework",
    "model",
    "gpu_name",
    "gpu_count",
    "started_at",
    "created_at",
    "source_file",
    "tags",
    "notes",
    "tool_summary",
)


def existing_run_ids(store: Store, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are already stored."""
    if not run_ids:
        return set()
    runs = schema.runs
    stmt = sa.select(runs.c.run_id).where(runs.c.run_id.in_(list(run_ids)))
    return set(store.read_df(stmt)["run_id"].tolist()) if run_ids else set()


def _tags(value: Any) -> list[str]:
    if not value:
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


def runs_listing(
    store: Store,
    *,
    sources: Sequence[str] = (),
    frameworks: Sequence[str] = (),
    models: Sequence[str] = (),
    tag: str | None = None,
    limit: int = 1000,
) -> pd.DataFrame:
    """Runs (newest first) with request counts; ``tags`` decoded to lists, an ``aggregates_only``
    flag from tool_summary. Filters are exact matches; ``tag`` keeps runs carrying it."""
    runs, reqs = schema.runs, schema.requests
    counts = (
        sa.select(reqs.c.run_id, sa.func.count().label("requests"))
        .group_by(reqs.c.run_id)
        .subquery()
    )
    stmt = (
        sa.select(
            *[runs.c[c] for c in RUN_LIST_COLUMNS],
            sa.func.coalesce(counts.c.requests, 0).label("requests"),
        )
        .select_from(runs.outerjoin(counts, counts.c.run_id == runs.c.run_id))
        .order_by(
            sa.func.coalesce(runs.c.started_at, runs.c.created_at).desc().nulls_last(),
            runs.c.run_id,
        )
    )
    if sources:
        stmt = stmt.where(runs.c.source.in_(list(sources)))
    if frameworks:
        stmt = stmt.where(runs.c.framework.in_(list(frameworks)))
    if models:
        stmt = stmt.where(runs.c.model.in_(list(models)))
    if tag:
        stmt = stmt.where(runs.c.tags.like(f"%{json.dumps(tag)}%"))
    df = store.read_df(stmt.limit(limit))
    if df.empty:
        return pd.DataFrame(columns=[*RUN_LIST_COLUMNS, "requests", "aggregates_only"]).drop(
            columns=["tool_summary"]
        )
    df["tags"] = df["tags"].map(_tags)
    df["aggregates_only"] = df["tool_summary"].map(_aggregates_only)
    df["requests"] = df["requests"].astype("int64")
    return df.drop(columns=["tool_summary"])


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


def run_requests_all(store: Store, run_id: str) -> pd.DataFrame:
    """Every request row of a run, in ``seq`` order (downloads, export)."""
    reqs = schema.requests
    stmt = sa.select(reqs).where(reqs.c.run_id == run_id).order_by(reqs.c.seq)
    df = store.read_df(stmt)
    if df.empty:
        return pd.DataFrame(columns=list(schema.REQUEST_COLUMNS))
    return df


def run_token_gaps(store: Store, run_id: str) -> pd.DataFrame:
    """Every token gap of a run, ordered by request and position."""
    gaps = schema.token_gaps
    stmt = sa.select(gaps).where(gaps.c.run_id == run_id).order_by(gaps.c.seq, gaps.c.idx)
    df = store.read_df(stmt)
    if df.empty:
        return pd.DataFrame(columns=list(schema.TOKEN_GAP_COLUMNS))
    return df
