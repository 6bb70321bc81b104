"""The Data page's view model: the filters' choices and the runs listing they select, and a
run's requests as a download. (The page's writes — imports, renames, tags, deletions — are in
``services.uploads`` and ``services.run_edits``.)"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import pandas as pd

from errors import InputError
from services.commands import export
from store import request_rows, runs_table
from store.db import Store

#: Formats a run's requests download in.
DOWNLOAD_FORMATS: Final = ("csv", "parquet")

#: Most runs listed.
LISTING_LIMIT: Final = 1000
#: The listing's columns, in the order shown.
LISTING_COLUMNS: Final = (
    "run_id",
    "name",
    "source",
    "framework",
    "model",
    "gpu_name",
    "requests",
    "aggregates_only",
    "tags",
    "started",
    "notes",
)


@dataclass(frozen=True)
class DataSelection:
    """The listing's filters: exact matches on source, framework and model (empty: any), and a
    tag the runs carry (None: any)."""

    sources: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    tag: str | None = None

    @classmethod
    def from_filters(
        cls,
        *,
        sources: Iterable[str] | None = None,
        frameworks: Iterable[str] | None = None,
        models: Iterable[str] | None = None,
        tag: str | None = None,
    ) -> DataSelection:
        """The selection the filter widgets' values ask for (None and "" mean any)."""
        return cls(
            sources=tuple(str(s) for s in sources or ()),
            frameworks=tuple(str(f) for f in frameworks or ()),
            models=tuple(str(m) for m in models or ()),
            tag=str(tag) if tag else None,
        )

    @classmethod
    def default(cls) -> DataSelection:
        """No filter: every run."""
        return cls()


@dataclass(frozen=True)
class FilterChoices:
    """The distinct values the filters offer, sorted."""

    sources: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataView:
    """Everything the Data page shows: the filters' choices and the runs they select (newest
    first, columns :data:`LISTING_COLUMNS`: tags joined with ", ", ``started`` as UTC
    ``YYYY-MM-DD HH:MM``)."""

    choices: FilterChoices
    runs: pd.DataFrame

    @property
    def store_empty(self) -> bool:
        """The store holds no runs."""
        return not self.choices.sources


def listing_table(listing: pd.DataFrame) -> pd.DataFrame:
    """``runs_table.list_runs``' rows (with request counts) as the page lists them (see
    :class:`DataView`)."""
    if listing.empty:
        return pd.DataFrame(columns=list(LISTING_COLUMNS))
    out = listing.copy()
    out["tags"] = out["tags"].map(", ".join)
    started = pd.to_numeric(out["started_at"].fillna(out["created_at"]), errors="coerce")
    out["started"] = pd.to_datetime(started, unit="s", utc=True).dt.strftime("%Y-%m-%d %H:%M")
    return out[list(LISTING_COLUMNS)]


def data_view(store: Store, selection: DataSelection) -> DataView:
    """The Data page for ``selection``."""
    choices = runs_table.filter_choices(store)
    listing = runs_table.list_runs(
        store,
        limit=LISTING_LIMIT,
        request_counts=True,
        sources=selection.sources,
        frameworks=selection.frameworks,
        models=selection.models,
        tag=selection.tag,
    )
    return DataView(
        choices=FilterChoices(
            sources=tuple(choices["source"]),
            frameworks=tuple(choices["framework"]),
            models=tuple(choices["model"]),
            tags=tuple(choices["tag"]),
        ),
        runs=listing_table(listing),
    )


def requests_download(store: Store, run_id: str, fmt: str) -> bytes:
    """Every request row of ``run_id`` as CSV or Parquet bytes (``fmt``: one of
    :data:`DOWNLOAD_FORMATS`)."""
    if fmt not in DOWNLOAD_FORMATS:
        raise InputError(
            f"unknown download format {fmt!r}", hint=f"choose one of {', '.join(DOWNLOAD_FORMATS)}"
        )
    return export.table_bytes(request_rows.run_requests_all(store, run_id), fmt)
