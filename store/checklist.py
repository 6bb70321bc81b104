"""Reads and writes of the framework evaluation checklist: frameworks, criteria, the scores with
their evidence, the history of the user's edits, and weight presets.

The catalog tables are seeded from ``seeds/`` (``store.catalog``); an edited score becomes the
user's own (``origin = 'user'``, never reseeded) and each edit is appended to
``framework_score_edits`` with the row as it was before, so that who changed what, and when,
stays visible. Callers validate entries first (``analysis.checklist``); a write here is one
transaction: all of it or nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import pandas as pd
import sqlalchemy as sa

import seeds
from store import catalog, schema

if TYPE_CHECKING:
    from store.db import Store

#: The checklist's catalog tables, as ``store.catalog`` kinds.
KINDS: Final = ("frameworks", "criteria", "framework_scores", "weight_presets")
#: The columns of a score, as the page and the edit history show them.
SCORE_COLUMNS: Final = (
    "framework",
    "criterion",
    "score",
    "evidence",
    "source_url",
    "checked_on",
    "tags",
    "origin",
    "updated_at",
    "updated_by",
)
#: Edits kept in the history the page shows (newest first).
HISTORY_LIMIT: Final = 200


def _tags(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if not value or not isinstance(value, str):
        return []
    parsed = json.loads(value)
    return [str(v) for v in parsed] if isinstance(parsed, list) else []


def catalog_entries(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every checklist entry as stored (user edits included), by kind, in the shape of the seed
    TOML (scores with ``tags`` as a list): what ``analysis.checklist.Catalog.from_entries``
    takes."""
    out = {kind: catalog.entries(store, kind) for kind in KINDS if kind != "framework_scores"}
    out["framework_scores"] = [
        {str(k): v for k, v in r.items()} for r in scores(store).to_dict("records")
    ]
    return out


def scores(store: Store) -> pd.DataFrame:
    """Every score with its evidence, origin (``seed`` / ``user``) and when and by whom it
    was last changed; ``tags`` as lists. Ordered by framework, criterion."""
    t = schema.framework_scores
    stmt = sa.select(*(t.c[c] for c in SCORE_COLUMNS)).order_by(t.c.framework, t.c.criterion)
    df = store.read_df(stmt)
    df["tags"] = [_tags(v) for v in df["tags"]]
    return df


def edit_scores(store: Store, entries: Sequence[Mapping[str, Any]], *, edited_by: str) -> int:
    """Store ``entries`` (validated score entries: framework, criterion, score, evidence,
    source_url, checked_on, tags) as the user's own, each with an edit-history row holding the
    previous value; one transaction. Returns the number of scores written."""
    table, edits = schema.framework_scores, schema.framework_score_edits
    now = time.time()
    with store.connect() as conn:
        for i, entry in enumerate(entries):
            name = seeds.score_name(str(entry["framework"]), str(entry["criterion"]))
            before = (
                conn.execute(
                    sa.select(*(table.c[c] for c in SCORE_COLUMNS)).where(table.c.name == name)
                )
                .mappings()
                .first()
            )
            row = {
                "framework": str(entry["framework"]),
                "criterion": str(entry["criterion"]),
                "score": float(entry["score"]),
                "evidence": str(entry["evidence"]),
                "source_url": str(entry["source_url"]),
                "checked_on": str(entry["checked_on"]),
                "tags": json.dumps(sorted(_tags(entry.get("tags")))),
            }
            # one edit per (score, instant): several edits in one call stay distinct
            at = now + i * 1e-6
            conn.execute(
                sa.insert(edits).values(
                    name=name,
                    edited_at=at,
                    previous=json.dumps(dict(before), default=str) if before else None,
                    edited_by=edited_by,
                    **row,
                )
            )
            values = row | {
                "origin": "user",
                "seed_hash": None,
                "updated_at": at,
                "updated_by": edited_by,
            }
            if before is None:
                conn.execute(sa.insert(table).values(name=name, **values))
            else:
                conn.execute(sa.update(table).where(table.c.name == name).values(**values))
    return len(entries)


def score_history(store: Store, limit: int = HISTORY_LIMIT) -> pd.DataFrame:
    """The user's score edits, newest first: framework, criterion, edited_at, edited_by, the
    new score and evidence, and the score before (``previous_score``; None for a new one)."""
    e = schema.framework_score_edits
    stmt = (
        sa.select(
            e.c.framework,
            e.c.criterion,
            e.c.edited_at,
            e.c.edited_by,
            e.c.score,
            e.c.evidence,
            e.c.source_url,
            e.c.checked_on,
            e.c.previous,
        )
        .order_by(e.c.edited_at.desc())
        .limit(limit)
    )
    df = store.read_df(stmt)
    previous = [json.loads(p) if isinstance(p, str) and p else {} for p in df["previous"]]
    df["previous_score"] = pd.Series(
        [p.get("score") for p in previous], index=df.index, dtype="float64"
    )
    return df.drop(columns=["previous"])


def presets(store: Store) -> list[dict[str, Any]]:
    """Every weight preset (seeded and the user's), with ``origin``, by name."""
    return catalog.entries(store, "weight_presets")


def save_preset(store: Store, entry: Mapping[str, Any]) -> None:
    """Store a validated weight preset as the user's own (reseeding never touches it)."""
    catalog.save_user_entry(store, "weight_presets", dict(entry))
