"""Importing files uploaded through the dashboard: the importer runner the CLI's ``import``
uses (``collectors.importers.runner``), then the new runs' views prepared as after any import
(``services.commands.prepare``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

import pandas as pd

from collectors.importers.model import ImportOptions, Source
from collectors.importers.runner import FileReport, import_sources
from services.commands import prepare
from services.run_edits import parse_tags
from store.db import Store

#: The import summary's columns.
REPORT_COLUMNS: Final = ("file", "format", "runs", "requests", "samples", "result")


class Upload(Protocol):
    """An uploaded file as the page hands it over (Streamlit's ``UploadedFile``)."""

    @property
    def name(self) -> str: ...

    def getvalue(self) -> bytes: ...


def import_uploads(
    store: Store,
    files: Sequence[Upload],
    *,
    framework: str = "",
    model: str = "",
    gpu_name: str = "",
    gpu_count: int = 0,
    tags: str = "",
    progress: Callable[[int, int, str], object] | None = None,
) -> list[FileReport]:
    """Import ``files`` (each one unit, pairs paired) with the form's metadata (empty fields:
    the file's own; ``tags`` comma-separated) and return one report per unit."""
    options = ImportOptions(
        framework=framework.strip() or None,
        model=model.strip() or None,
        gpu_name=gpu_name.strip() or None,
        gpu_count=gpu_count or None,
        tags=parse_tags(tags),
    )
    sources = [(Source.from_bytes(f.name, f.getvalue()), True) for f in files]
    reports = import_sources(store, sources, options, progress=progress)
    # the new runs' summaries (and large runs' page views), so the first view is quick
    prepare.prepare(store, [run_id for report in reports for run_id in report.run_ids])
    return reports


def reports_table(reports: Sequence[FileReport]) -> pd.DataFrame:
    """The import summary as a table: file → format, runs, requests, samples, result (the
    error, or the warnings once each)."""
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
    return pd.DataFrame(rows, columns=list(REPORT_COLUMNS))
