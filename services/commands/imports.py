"""``servescope import PATH... [--format NAME] [--framework X] [--model M] [--gpu G] [--gpus N]
[--name TEXT] [--tag TAG ...] [--replace] [--db URL]`` — register(subparsers) wires it in.

``--tag`` takes several tags (space-separated or the flag repeated); tags given before the
PATHs would swallow them, so a missing PATH says how to write it (PATHs first, or ``--``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from analysis.precision import (
    KV_CACHE_DTYPES,
    WEIGHT_PRECISIONS,
    check_kv_cache_dtype,
    check_precision,
)
from collectors.importers.model import ImportOptions
from collectors.importers.registry import FORMATS
from collectors.importers.runner import FileReport, import_paths
from errors import ExitCode


class _Paths(argparse.Action):
    """PATH... (one or more): when none is left, say why (the tags may have taken them)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        paths = [values] if isinstance(values, str) else list(values or [])
        if not paths:
            tags = getattr(namespace, "tags", None)
            hint = (
                f" (the words after --tag were all read as tags: {' '.join(tags)}); put the "
                "PATHs first, or write -- before them: servescope import --tag a b -- results/"
                if tags
                else ""
            )
            raise argparse.ArgumentError(self, "give at least one result file or folder" + hint)
        setattr(namespace, self.dest, paths)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    formats = "\n".join(f"  {name:<22} {fmt.description}" for name, fmt in FORMATS.items())
    p = subparsers.add_parser(
        "import",
        help="import result files of other benchmark tools (vLLM, SGLang, GuideLLM, AIPerf, …)",
        description="Import result files (or folders of them) into the store. The format is "
        "detected from each file's content; metadata a file lacks can be given here.",
        epilog="formats:\n" + formats,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "paths",
        nargs="*",
        action=_Paths,
        metavar="PATH",
        help="result files or folders (recursive), space-separated",
    )
    p.add_argument(
        "--format", choices=list(FORMATS), help="skip detection: read every file as NAME"
    )
    p.add_argument("--framework", help="serving framework, e.g. vllm, sglang, trtllm")
    p.add_argument("--model", help="model name")
    p.add_argument("--gpu", dest="gpu_name", help='GPU, e.g. "H100 80GB"')
    p.add_argument("--gpus", dest="gpu_count", type=int, help="number of GPUs serving")
    p.add_argument(
        "--precision",
        metavar="P",
        help="weight precision / quantisation served (wins over the file's): "
        f"{', '.join(WEIGHT_PRECISIONS)}, or any gguf-<type>",
    )
    p.add_argument(
        "--kv-cache-dtype",
        metavar="D",
        help=f"KV-cache dtype (wins over the file's): {', '.join(KV_CACHE_DTYPES)}",
    )
    p.add_argument("--name", help="run name (several runs in one file get a suffix each)")
    p.add_argument(
        "--tag",
        dest="tags",
        action="extend",
        nargs="+",
        default=[],
        metavar="TAG",
        help="tags, space-separated or the flag repeated (put the PATHs first, or -- before them)",
    )
    p.add_argument("--replace", action="store_true", help="re-import runs already stored")
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=run)


def _warnings(report: FileReport) -> str:
    counts = Counter(report.warnings)
    return "; ".join(w if n == 1 else f"{w} (×{n})" for w, n in counts.items())


def print_summary(reports: list[FileReport], out: TextIO) -> None:
    """The table at the end: file → format, runs, requests, samples, warnings or error."""
    rows = [r for r in reports if not r.ignored]
    width = min(max([len(r.path) for r in rows] + [4]), 70)
    print(
        f"\n{'file':<{width}}  {'format':<20} {'runs':>5} {'requests':>9} {'samples':>8}  notes",
        file=out,
    )
    for r in rows:
        path = r.path if len(r.path) <= width else "…" + r.path[-(width - 1) :]
        note = f"FAILED: {r.error}" if r.error else _warnings(r)
        print(
            f"{path:<{width}}  {r.format or '-':<20} {r.runs:>5} {r.requests:>9,} "
            f"{r.samples:>8,}  {note}",
            file=out,
        )
    failed = sum(1 for r in rows if r.error)
    ignored = sum(1 for r in reports if r.ignored)
    total_runs = sum(r.runs for r in rows)
    total_req = sum(r.requests for r in rows)
    tail = f"{len(rows)} file(s): {total_runs} run(s), {total_req:,} request(s) imported"
    if ignored:
        tail += f"; {ignored} other file(s) ignored"
    if failed:
        tail += f"; {failed} FAILED"
    print(tail, file=out)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from services.commands import prepare
    from store.lifecycle import open_store

    out = out or sys.stdout
    err = err or sys.stderr
    options = ImportOptions(
        framework=args.framework,
        model=args.model,
        gpu_name=args.gpu_name,
        gpu_count=args.gpu_count,
        precision=check_precision(args.precision),
        kv_cache_dtype=check_kv_cache_dtype(args.kv_cache_dtype),
        name=args.name,
        tags=tuple(args.tags),
        format=args.format,
        replace=args.replace,
    )
    store = open_store(args.db)
    reports = import_paths(store, args.paths, options)
    for r in reports:
        if r.error:
            print(f"servescope import: error: {r.error}", file=err)
    print_summary(reports, out)
    # the new runs' summaries (and large runs' page views), so the first view of them is quick
    prepare.prepare(store, [rid for r in reports for rid in r.run_ids])
    return ExitCode.PARTIAL if any(r.error for r in reports) else ExitCode.OK
