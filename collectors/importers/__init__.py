"""Importers of other benchmark tools' result files (DESIGN §6, FORMATS §B).

One module per format, registered in ``registry.FORMATS``; detection by content; every
per-request metric recomputed with our definitions, the tool's own aggregates kept in
``runs.tool_summary``. The ``servescope import`` command is ``services.commands.imports``.
"""

from __future__ import annotations

from .model import ImportOptions, ParsedFile, ParsedRun, Source
from .registry import FORMATS, detect, format_names
from .runner import FileReport, import_paths, import_sources, parse_sources

__all__ = [
    "FORMATS",
    "FileReport",
    "ImportOptions",
    "ParsedFile",
    "ParsedRun",
    "Source",
    "detect",
    "format_names",
    "import_paths",
    "import_sources",
    "parse_sources",
]
