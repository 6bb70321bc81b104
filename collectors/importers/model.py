"""The importers' own small models: what a parsed file becomes before it is written.

A :class:`Source` is one file's bytes (read once, hashed once); a :class:`Document` is its
decoded content (JSON, JSON lines, YAML or CSV tables); an importer turns one or more sources
into a :class:`ParsedFile`: runs with their requests and token gaps, plus sample tables
(``gpu_samples``, ``engine_samples``) for telemetry files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

DocKind = Literal["json", "jsonl", "yaml", "csv"]


@dataclass
class Source:
    """One input file: its display path, bytes and SHA-256."""

    path: str
    data: bytes
    sha256: str

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> Source:
        return cls(path=path, data=data, sha256=hashlib.sha256(data).hexdigest())

    @classmethod
    def read(cls, path: str | Path) -> Source:
        p = Path(path)
        return cls.from_bytes(str(p), p.read_bytes())

    @property
    def name(self) -> str:
        return Path(self.path).name


@dataclass
class Document:
    """Decoded content of a source.

    ``objects`` holds ``(line, value)`` pairs: one pair for a JSON or YAML document (line 1),
    one per non-empty line for JSON lines. ``tables`` holds CSV tables split on blank rows,
    each a list of ``(line, cells)``.
    """

    source: Source
    kind: DocKind
    objects: list[tuple[int, Any]] = field(default_factory=list)
    tables: list[list[tuple[int, list[str]]]] = field(default_factory=list)

    @property
    def first(self) -> Any:
        return self.objects[0][1] if self.objects else None


@dataclass
class ImportOptions:
    """Metadata from the command line or the upload form; a given value wins over the file's."""

    framework: str | None = None
    model: str | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None
    precision: str | None = None  # analysis.precision's vocabulary (validated by the caller)
    kv_cache_dtype: str | None = None
    name: str | None = None
    tags: tuple[str, ...] = ()
    format: str | None = None
    replace: bool = False


@dataclass
class ParsedRun:
    """One run ready to be written: the ``runs`` row, its requests and token gaps."""

    run: dict[str, Any]
    requests: pd.DataFrame | None = None
    token_gaps: pd.DataFrame | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])

    @property
    def request_count(self) -> int:
        return 0 if self.requests is None else len(self.requests)


@dataclass
class ParsedFile:
    """Everything one import unit (a file, or a summary + records pair) produced."""

    format: str
    sources: list[Source]
    runs: list[ParsedRun] = field(default_factory=list)
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return " + ".join(s.path for s in self.sources)
