"""What an imported run's file said of itself: its source and the tool's own aggregates
(``runs_table.run_tool_summary``), and whether the run holds nothing else. Shared by the
views that show one run (Home, Latency)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis import crosscheck
from store import runs_table
from store.db import Store


@dataclass(frozen=True)
class ToolSummary:
    """A run's source and its decoded ``tool_summary`` (None for runs that have none, e.g.
    ServeScope's own, or when the stored value is not a JSON object)."""

    source: str = ""
    summary: Mapping[str, Any] | None = None


def tool_summary(store: Store, run_id: str) -> ToolSummary:
    """The run's source and the tool's own aggregates; an empty summary when the run does not
    exist."""
    df = runs_table.run_tool_summary(store, run_id)
    if df.empty:
        return ToolSummary()
    row = df.iloc[0]
    summary = row.get("tool_summary")
    return ToolSummary(
        source=str(row.get("source") or ""),
        summary=summary if isinstance(summary, dict) else None,
    )


def is_aggregates_only(detail: Mapping[str, Any], summary: Mapping[str, Any] | None) -> bool:
    """A run holding only the tool's aggregates: flagged so by its importer, and no request
    rows (``detail["requests"]`` missing or 0)."""
    requests = detail.get("requests")
    no_rows = requests is None or bool(pd.isna(requests)) or int(requests) == 0
    return no_rows and crosscheck.is_aggregates_only(summary)
