"""Reads about the store itself (row counts, schema version) for `servescope db info`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from store import schema

if TYPE_CHECKING:
    from store.db import Store


def table_counts(store: Store) -> dict[str, int]:
    """Rows per table, in schema order."""
    counts: dict[str, int] = {}
    with store.connect() as conn:
        for table in schema.metadata.sorted_tables:
            counts[table.name] = int(
                conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() or 0
            )
    return counts
