"""The Data page's widgets and actions: its selection (the filter widgets), imports of uploaded
files, renames, tags, deletions and downloads.

Every action opens a short-lived store (``services.store_session``; never a cached connection)
and goes through ``services``; every write clears the page caches so the next view reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import pandas as pd
import streamlit as st

from services import run_edits, uploads
from services.store_session import short_lived_store
from services.views import data
from ui import cache

#: Streamlit's own upload limit (server.maxUploadSize, 200 MB by default); stated on the page.
MAX_UPLOAD_MB: Final = 200
DOWNLOAD_FORMATS: Final = data.DOWNLOAD_FORMATS

#: The filter widgets' keys.
SOURCE_KEY: Final = "data_f_source"
FRAMEWORK_KEY: Final = "data_f_framework"
MODEL_KEY: Final = "data_f_model"
TAG_KEY: Final = "data_f_tag"


def selection() -> data.DataSelection:
    """The listing's filters as the widgets hold them (their values are set before a rerun)."""
    state = st.session_state
    return data.DataSelection.from_filters(
        sources=state.get(SOURCE_KEY),
        frameworks=state.get(FRAMEWORK_KEY),
        models=state.get(MODEL_KEY),
        tag=state.get(TAG_KEY),
    )


def import_uploads(
    files: Sequence[uploads.Upload],
    *,
    framework: str = "",
    model: str = "",
    gpu_name: str = "",
    gpu_count: int = 0,
    tags: str = "",
    progress: Callable[[int, int, str], object] | None = None,
) -> pd.DataFrame:
    """Import uploaded files (one unit each, pairs paired); the import summary as a table."""
    with short_lived_store() as store:
        reports = uploads.import_uploads(
            store,
            files,
            framework=framework,
            model=model,
            gpu_name=gpu_name,
            gpu_count=gpu_count,
            tags=tags,
            progress=progress,
        )
    cache.clear()
    return uploads.reports_table(reports)


def run_label(row: Mapping[Any, Any]) -> str:
    """How the run picker names a listed run: its name and id."""
    return f"{row['name']}  ({row['run_id']})"


def rename_run(run_id: str, name: str) -> None:
    """Give the run a new name."""
    with short_lived_store() as store:
        run_edits.rename_run(store, run_id, name)
    cache.clear()


def set_tags(run_id: str, tags: str) -> None:
    """Replace the run's tags with the comma-separated ``tags``."""
    with short_lived_store() as store:
        run_edits.set_tags(store, run_id, tags)
    cache.clear()


def delete_run(run_id: str) -> None:
    """Delete the run with its requests."""
    with short_lived_store() as store:
        run_edits.delete_run(store, run_id)
    cache.clear()


def requests_download(run_id: str, fmt: str) -> bytes:
    """A run's request rows as CSV or Parquet bytes (read when the button is pressed)."""
    with short_lived_store() as store:
        return data.requests_download(store, run_id, fmt)
