"""The ``quality_runs`` and ``quality_answers`` tables (migration 5): what ``servescope quality``
measured — one header per run (both sides' endpoint, model, framework, version, precision, the
prompt set and its SHA-256, the summary as JSON) and one row per prompt (both answers, whether
each was correct, whether they agree, their similarity, any request error).

The summary JSON is ``analysis.quality.QualitySummary.to_dict()``; ``quality_runs`` flattens its
``overall`` figures into columns (``reference_accuracy``, ``candidate_accuracy``, ``agreement``,
``similarity``, ``retention``, each with ``_lo`` and ``_hi``) for the Select page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from analysis.quality import FIGURES  # the summary's headline figures, one definition
from errors import StoreError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

HEADER_COLUMNS: tuple[str, ...] = tuple(c.name for c in schema.quality_runs.columns)
ANSWER_COLUMNS: tuple[str, ...] = tuple(c.name for c in schema.quality_answers.columns)
#: the summary's overall figures flattened into ``quality_runs``' columns, each with _lo and _hi
FIGURE_COLUMNS: tuple[str, ...] = tuple(
    f"{name}{suffix}" for name in FIGURES for suffix in ("", "_lo", "_hi")
)


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def add_quality_run(
    store: Store, header: Mapping[str, Any], answers: Sequence[Mapping[str, Any]]
) -> None:
    """Store one quality run — its header and every prompt's answers — in one transaction.

    ``header``: ``quality_runs``' columns (``quality_id`` required; ``summary`` a dict, JSON
    encoded, or JSON text); ``answers``: ``quality_answers``' columns (``quality_id`` is taken
    from the header). Unknown keys are refused; a run already stored under that id is replaced.
    """
    qid = header.get("quality_id")
    if not isinstance(qid, str) or not qid:
        raise StoreError("a quality run needs a quality_id")
    unknown = sorted(set(header) - set(HEADER_COLUMNS))
    if unknown:
        raise StoreError(f"quality_runs has no column(s) {', '.join(unknown)}")
    row = {c: _clean(header.get(c)) for c in HEADER_COLUMNS}
    if row["summary"] is not None and not isinstance(row["summary"], str):
        row["summary"] = json.dumps(row["summary"], sort_keys=True, allow_nan=False)
    records: list[dict[str, Any]] = []
    for a in answers:
        unknown = sorted(set(a) - set(ANSWER_COLUMNS))
        if unknown:
            raise StoreError(f"quality_answers has no column(s) {', '.join(unknown)}")
        if not a.get("prompt_id"):
            raise StoreError(f"a quality answer needs a prompt_id: {dict(a)!r}")
        records.append({c: _clean(a.get(c)) for c in ANSWER_COLUMNS} | {"quality_id": qid})
    runs, rows = schema.quality_runs, schema.quality_answers
    with store.connect() as conn:
        conn.execute(sa.delete(rows).where(rows.c.quality_id == qid))
        conn.execute(sa.delete(runs).where(runs.c.quality_id == qid))
        conn.execute(sa.insert(runs), [row])
        if records:
            conn.execute(sa.insert(rows), records)


def _flatten(summary: Any) -> dict[str, Any]:
    try:
        data = json.loads(summary) if isinstance(summary, str) else None
    except json.JSONDecodeError:
        data = None
    overall = data.get("overall") if isinstance(data, dict) else None
    if not isinstance(overall, dict):
        overall = {}
    return {c: overall.get(c) for c in FIGURE_COLUMNS} | {"verdict": (data or {}).get("verdict")}


def quality_runs(store: Store) -> pd.DataFrame:
    """One row per stored quality run, newest first: the header's columns (``summary`` as its
    JSON text) and the overall figures flattened (``FIGURE_COLUMNS``, None where the summary
    lacks them, e.g. retention when the reference got nothing right) and ``verdict``."""
    runs = schema.quality_runs
    df = store.read_df(
        sa.select(*runs.columns).order_by(runs.c.started_at.desc(), runs.c.quality_id)
    )
    flat = pd.DataFrame(
        [_flatten(s) for s in df["summary"]] if len(df) else [],
        columns=[*FIGURE_COLUMNS, "verdict"],
        index=df.index,
    )
    for c in FIGURE_COLUMNS:
        flat[c] = pd.to_numeric(flat[c], errors="coerce").astype(float)
    return pd.concat([df, flat], axis=1)


def quality_answers(store: Store, quality_id: str) -> pd.DataFrame:
    """The per-prompt rows of one quality run, ordered by category and prompt id (empty, with
    the columns, for an unknown id)."""
    rows = schema.quality_answers
    return store.read_df(
        sa.select(*rows.columns)
        .where(rows.c.quality_id == quality_id)
        .order_by(rows.c.category, rows.c.prompt_id)
    )
