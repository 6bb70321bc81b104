"""Helpers of the Data page: import uploads, list and filter runs, rename, tag, delete, download.

Reads go through ``store.data_queries`` and writes through ``store.ingest`` with a short-lived
store per call (ARCHITECTURE §4: never a cached connection); every write clears the page caches
so the next read sees it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import pandas as pd
import streamlit as st

import settings
from collectors.importers import FileReport, ImportOptions, Source, import_sources
from services.commands import prepare
from store import data_queries, ingest
from store.db import Store

#: Streamlit's own upload limit (server.maxUploadSize, 200 MB by default); stated on the page.
MAX_UPLOAD_MB = 200
DOWNLOAD_FORMATS = ("csv", "parquet")


class Upload(Protocol):
    """What the page hands over: Streamlit's UploadedFile (name + bytes)."""

    name: str

    def getvalue(self) -> bytes: ...


@contextmanager
def _store() -> Iterator[Store]:
    store = Store.open(settings.db_url())
    try:
        yield store
    finally:
        store.dispose()


def _changed() -> None:
    st.cache_data.clear()


def import_uploads(
    files: Sequence[Upload],
    *,
    framework: str = "",
    model: str = "",
    gpu_name: str = "",
    gpu_count: int = 0,
    tags: str = "",
    progress: Callable[[int, int, str], object] | None = None,
) -> list[FileReport]:
    """Import uploaded files (one unit each, pairs paired) and return the reports."""
    options = ImportOptions(
        framework=framework.strip() or None,
        model=model.strip() or None,
        gpu_name=gpu_name.strip() or None,
        gpu_count=gpu_count or None,
        tags=parse_tags(tags),
    )
    sources = [(Source.from_bytes(f.name, f.getvalue()), True) for f in files]
    with _store() as store:
        reports = import_sources(store, sources, options, progress=progress)
        # the new runs' summaries (and large runs' page views), so the first view is quick
        prepare.prepare(store, [rid for r in reports for rid in r.run_ids])
    _changed()
    return reports


def reports_frame(reports: Sequence[FileReport]) -> pd.DataFrame:
    """The import summary as a table: file → format, runs, requests, notes."""
    rows = [
        {
            "file": r.path,
            "format": r.format or "",
            "runs": r.runs,
            "requests": r.requests,
            "samples": r.samples,
            "result": f"FAILED: {r.error}" if r.error else "; ".join(dict.fromkeys(r.warnings)),
        }
        for r in reports
    ]
    return pd.DataFrame(rows, columns=["file", "format", "runs", "requests", "samples", "result"])


def parse_tags(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def filter_choices() -> dict[str, list[str]]:
    with _store() as store:
        return data_queries.filter_choices(store)


def runs_table(
    sources: Sequence[str] = (),
    frameworks: Sequence[str] = (),
    models: Sequence[str] = (),
    tag: str | None = None,
) -> pd.DataFrame:
    """Runs for the listing, with readable columns (tags joined, start as UTC time)."""
    with _store() as store:
        df = data_queries.runs_listing(
            store, sources=sources, frameworks=frameworks, models=models, tag=tag
        )
    if df.empty:
        return df
    out = df.copy()
    out["tags"] = out["tags"].map(", ".join)
    started = pd.to_numeric(out["started_at"].fillna(out["created_at"]), errors="coerce")
    out["started"] = pd.to_datetime(started, unit="s", utc=True).dt.strftime("%Y-%m-%d %H:%M")
    cols = [
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
    ]
    return out[cols]


def run_label(row: Mapping[Any, Any]) -> str:
    return f"{row['name']}  ({row['run_id']})"


def rename_run(run_id: str, name: str) -> None:
    with _store() as store:
        ingest.update_run(store, run_id, name=name.strip())
    _changed()


def set_tags(run_id: str, tags: str) -> None:
    with _store() as store:
        ingest.update_run(store, run_id, tags=list(parse_tags(tags)))
    _changed()


def delete_run(run_id: str) -> None:
    with _store() as store:
        ingest.delete_run(store, run_id)
    _changed()


def requests_download(run_id: str, fmt: str) -> bytes:
    """A run's request rows as CSV or Parquet bytes."""
    with _store() as store:
        df = data_queries.run_requests_all(store, run_id)
    if fmt == "csv":
        return df.to_csv(index=False).encode("utf-8")
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()
