"""Import files into the store: expand folders, detect formats, pair partner files, parse,
then write each import unit (a file, or a summary + records pair) on its own.

A unit that fails leaves nothing behind and the batch goes on; every failure is reported with
the file, the line or key, what was found and what was expected. Every value a unit would write
is checked against its physical bound (``validate.check_parsed``) before the store sees it.
Runs already stored (same content-hash id) are skipped unless ``replace`` is set, so importing
a file twice changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from errors import ImportFormatError, InputError, ServeScopeError

from .base import Clock, Format, default_clock
from .model import Document, ImportOptions, ParsedFile, Source
from .parsing import gc_paused, load_document
from .registry import FORMATS, detect, get_format
from .validate import check_parsed

if TYPE_CHECKING:
    from store.db import Store

CANDIDATE_SUFFIXES = {".json", ".jsonl", ".yaml", ".yml", ".csv"}
Progress = Callable[[int, int, str], object]


@dataclass
class FileReport:
    """What importing one unit did: the summary table's row."""

    path: str
    format: str | None = None
    runs: int = 0
    requests: int = 0
    samples: int = 0
    skipped_runs: int = 0
    run_ids: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    ignored: bool = False  # a folder's file that is not a result file

    @property
    def ok(self) -> bool:
        return self.error is None


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def expand_paths(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Files to import, as ``(path, explicit)``: folders recurse (sorted, hidden files skipped)."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    f = Path(root) / name
                    if not name.startswith(".") and f.suffix.lower() in CANDIDATE_SUFFIXES:
                        out.append((f, False))
        else:
            out.append((p, True))
    return out


@dataclass
class _Detected:
    doc: Document
    fmt: Format
    explicit: bool


def _group(items: list[_Detected]) -> list[tuple[list[_Detected], list[str]]]:
    """Import units: pair summary + records files of one family (records first)."""
    units: list[tuple[list[_Detected], list[str]]] = []
    families: dict[tuple[str, str], dict[str, list[_Detected]]] = {}
    order: list[tuple[str, str] | int] = []
    singles: dict[int, _Detected] = {}
    for i, item in enumerate(items):
        fmt = item.fmt
        if fmt.family and fmt.pair_key and fmt.role in ("summary", "records"):
            key = (fmt.family, fmt.pair_key(item.doc.source.path))
            if key not in families:
                families[key] = {"summary": [], "records": []}
                order.append(key)
            families[key][fmt.role].append(item)
        else:
            singles[i] = item
            order.append(i)
    for entry in order:
        if isinstance(entry, int):
            units.append(([singles[entry]], []))
            continue
        group = families[entry]
        records, summaries = group["records"], group["summary"]
        # AIPerf writes the same records as JSONL and CSV: keep the JSONL (it has the gaps)
        records.sort(key=lambda d: d.doc.kind == "csv")
        summaries.sort(key=lambda d: d.doc.kind == "csv")
        notes: list[str] = []
        if records:
            extra = records[1:] if entry[0] == "aiperf" else []
            for dup in extra:
                notes.append(
                    f"{dup.doc.source.path}: same requests as {records[0].doc.source.path}; "
                    "not imported twice"
                )
            keep = records[:1] if entry[0] == "aiperf" else records
            for k, rec in enumerate(keep):
                partner = summaries[:1] if k == 0 else []
                units.append(([rec, *partner], notes if k == 0 else []))
            for extra_summary in summaries[1:]:
                units.append(([extra_summary], []))
        else:
            for summary in summaries:
                units.append(([summary], []))
    return units


def _write(store: Store, parsed: ParsedFile, replace: bool, report: FileReport) -> None:
    """Write one import unit in ONE transaction: its runs (with requests and token gaps) and its
    sample tables all land, or none of them do (``ingest.replace_runs``)."""
    from store import ingest, runs_table

    ids = [r.run_id for r in parsed.runs]
    existing = runs_table.existing_run_ids(store, ids) if ids else set()
    todo = [run for run in parsed.runs if replace or run.run_id not in existing]
    skipped = len(parsed.runs) - len(todo)
    samples = {table: frame for table, frame in parsed.samples.items() if len(frame)}
    if todo or samples:
        new_samples = ingest.replace_runs(
            store,
            [ingest.RunRows(run.run, run.requests, run.token_gaps) for run in todo],
            samples=samples,
        )
    else:
        new_samples = 0
    # only now, once the transaction has committed, does the report count anything
    report.skipped_runs = skipped
    report.runs = len(todo)
    report.requests = sum(run.request_count for run in todo)
    report.samples = new_samples
    for run in todo:
        report.warnings.extend(run.warnings)
    report.run_ids = ids
    if skipped:
        report.warnings.append(
            f"{skipped} run(s) already imported (same content): skipped; "
            "use --replace to import again"
        )


def parse_sources(
    sources: Sequence[tuple[Source, bool]],
    options: ImportOptions,
    *,
    clock: Clock = default_clock,
) -> list[tuple[FileReport, ParsedFile | None]]:
    """Detect and parse sources without touching the store (``(report, parsed)`` per unit)."""
    out: list[tuple[FileReport, ParsedFile | None]] = []
    detected: list[_Detected] = []
    forced = get_format(options.format) if options.format else None
    for src, explicit in sources:
        try:
            doc = load_document(src)
            fmt = forced or detect(doc)
        except ImportFormatError as exc:
            if not explicit and (
                exc.reason.startswith("not a recognised") or exc.reason.startswith("empty")
            ):
                out.append(
                    (
                        FileReport(
                            path=src.path, ignored=True, warnings=["not a result file: ignored"]
                        ),
                        None,
                    )
                )
            else:
                out.append((FileReport(path=src.path, error=_one_line(str(exc))), None))
            continue
        detected.append(_Detected(doc, fmt, explicit))
    for unit, notes in _group(detected):
        docs = [d.doc for d in unit]
        fmt = unit[0].fmt
        label = docs[0].source.path + "".join(f" + {d.source.name}" for d in docs[1:])
        report = FileReport(path=label, format=fmt.name, warnings=list(notes))
        try:
            parsed = fmt.parse(docs, options, clock)
            check_parsed(parsed)  # every value against its bound: the store never refuses one
        except ImportFormatError as exc:
            report.error = _one_line(str(exc))
            out.append((report, None))
            continue
        except (
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            ArithmeticError,
            RecursionError,
        ) as exc:
            # a shape no check anticipated: still one line, naming the file
            msg = f"unexpected structure ({type(exc).__name__}: {exc})"
            report.error = _one_line(str(ImportFormatError(docs[0].source.path, msg)))
            out.append((report, None))
            continue
        report.format = parsed.format
        report.warnings.extend(parsed.warnings)
        out.append((report, parsed))
    return out


def import_sources(
    store: Store,
    sources: Sequence[tuple[Source, bool]],
    options: ImportOptions,
    *,
    progress: Progress | None = None,
    clock: Clock = default_clock,
) -> list[FileReport]:
    """Parse and write ``sources``; one report per unit, in order."""
    reports: list[FileReport] = []
    # no cyclic GC while the decoded documents are alive: they are freed (by reference
    # counting) when parse_sources returns, so no collection ever walks their lists
    with gc_paused():
        parsed_units = parse_sources(sources, options, clock=clock)
    total = len(parsed_units)
    for i, (report, parsed) in enumerate(parsed_units):
        if progress is not None:
            progress(i, total, report.path)
        if parsed is not None:
            try:
                _write(store, parsed, options.replace, report)
            except ServeScopeError as exc:
                report.error = _one_line(f"{report.path}: not stored: {exc}")
        reports.append(report)
    if progress is not None:
        progress(total, total, "")
    return reports


def import_paths(
    store: Store,
    paths: Iterable[str | Path],
    options: ImportOptions | None = None,
    *,
    progress: Progress | None = None,
    clock: Clock = default_clock,
) -> list[FileReport]:
    """Import files and folders (recursively) into ``store``."""
    options = options or ImportOptions()
    sources: list[tuple[Source, bool]] = []
    early: list[FileReport] = []
    for path, explicit in expand_paths(paths):
        try:
            sources.append((Source.read(path), explicit))
        except OSError as exc:
            early.append(
                FileReport(path=str(path), error=f"{path}: cannot read ({exc.strerror or exc})")
            )
    if not sources and not early:
        raise InputError("no files to import", hint="give result files or folders that hold them")
    return early + import_sources(store, sources, options, progress=progress, clock=clock)


__all__ = [
    "FORMATS",
    "FileReport",
    "expand_paths",
    "import_paths",
    "import_sources",
    "parse_sources",
]
