"""``servescope watch``: collect engine /metrics, DCGM, NVML and Prometheus series live.

cli.py calls :func:`register` with its subparsers. The command runs until ``--duration`` or
Ctrl-C (which flushes what is buffered), printing a one-line live status. Exit codes: 0 when
something was collected, ``errors.ExitCode.FAILED`` (3) when every scrape of every target
failed (a CI pipeline can tell), ``SPOOLED`` (4) when the store stayed locked and rows wait in the
spool, 2 for bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import TextIO

from collectors import watch
from errors import ExitCode, InputError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``250ms``, ``1s``, ``0.5``, ``10m``, ``1h`` → seconds."""
    m = _DURATION_RE.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"cannot read the duration {text!r}: write e.g. 250ms, 1s, 10m or 1h"
        )
    return float(m.group(1)) * _UNITS[m.group(2)]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "watch",
        help="collect engine /metrics, GPU (NVML/DCGM) and Prometheus series live into the store",
        description="Scrape engines' /metrics, DCGM exporters, this host's GPUs (NVML) and/or a "
        "Prometheus server on an interval and store the samples. Runs until --duration or "
        "Ctrl-C or SIGTERM (which flush what is buffered). Exit status: 0 when anything was "
        f"collected, {ExitCode.FAILED} when every scrape of every target failed, "
        f"{ExitCode.SPOOLED} when the store stayed locked and rows wait in the spool "
        "(servescope db ingest-spool), 2 for bad input.",
    )
    p.add_argument(
        "--metrics",
        action="extend",
        nargs="+",
        default=[],
        metavar="URL",
        help="engine /metrics URLs, space-separated or the flag repeated (host:port works: "
        "/metrics is added)",
    )
    p.add_argument(
        "--dcgm",
        action="extend",
        nargs="+",
        default=[],
        metavar="URL",
        help="DCGM exporter URLs (:9400/metrics), space-separated or the flag repeated",
    )
    p.add_argument("--gpu", action="store_true", help="sample this host's GPUs through NVML")
    p.add_argument("--prometheus", metavar="URL", help="a Prometheus server to read series from")
    p.add_argument(
        "--match",
        metavar="LABELS",
        help='label matchers for --prometheus, e.g. \'job="vllm",namespace="prod"\'',
    )
    p.add_argument(
        "--interval",
        type=parse_duration,
        default=1.0,
        help="scrape interval (default 1s; at least 250ms)",
    )
    p.add_argument(
        "--duration", type=parse_duration, default=None, help="stop after this long (e.g. 10m)"
    )
    p.add_argument(
        "--raw",
        choices=watch.RAW_MODES,
        default="engine",
        help="raw series kept: the engine's (and DCGM's) families (default), all, or none",
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=run)


class _StatusPrinter:
    """Rewrites one status line on a terminal; elsewhere prints a line every ``every_s``."""

    def __init__(self, stream: TextIO, every_s: float = 10.0) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.every_s = every_s
        self._last = 0.0
        self._width = 0

    def __call__(self, watcher: watch.Watcher) -> None:
        line = watcher.status_line()
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
            self.stream.flush()
        elif time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            print(line, file=self.stream, flush=True)

    def end(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    from store.ingest import BufferedWriter
    from store.lifecycle import open_store

    if args.match and not args.prometheus:
        raise InputError("--match needs --prometheus URL")
    if not (args.metrics or args.dcgm or args.gpu or args.prometheus):
        raise InputError(
            "nothing to watch",
            hint="give --metrics URL..., --dcgm URL..., --gpu or --prometheus URL",
        )
    spec = watch.SourceSpec(
        metrics_urls=args.metrics,
        dcgm_urls=args.dcgm,
        gpu=bool(args.gpu),
        prometheus_url=args.prometheus,
        match=args.match,
        raw=args.raw,
    )
    store = open_store(args.db)
    out = sys.stderr
    printer = _StatusPrinter(out)
    print(f"servescope watch → {store.url}  (Ctrl-C stops)", file=out, flush=True)
    writer = BufferedWriter(store, background=True)
    watcher: watch.Watcher | None = None
    try:
        watcher = watch.watch(
            writer,
            spec,
            interval_s=args.interval,
            duration_s=args.duration,
            on_status=printer,
            on_notes=lambda note: print(note, file=out, flush=True),
        )
    finally:
        writer.close()
        printer.end()
        store.dispose()
    added = sum(watcher.rows_added.values())
    errors = sum(s.errors for s in watcher.states)
    print(
        f"stored {writer.rows_written:,} of {added:,} rows"
        + (f" ({writer.batches_spooled} batch(es) spooled)" if writer.batches_spooled else "")
        + (f"; {errors} failed scrape(s)" if errors else ""),
        file=out,
        flush=True,
    )
    batches_left, rows_left = writer.spooled()
    if rows_left:
        print(
            f"servescope watch: the store stayed locked: {rows_left:,} rows ({batches_left} "
            f"batch(es)) spooled at {writer.spool_dir.resolve()}; they are not in the store yet. "
            f"Run `servescope db ingest-spool --db {store.url}` when the store is free "
            f"(exit {ExitCode.SPOOLED}).",
            file=out,
            flush=True,
        )
    states = watcher.states
    if states and errors and not any(s.scrapes for s in states):
        print(
            f"servescope watch: every scrape failed ({errors} of {errors}, "
            f"{len(states)} target(s)): nothing was collected (exit {ExitCode.FAILED})",
            file=out,
            flush=True,
        )
        return ExitCode.FAILED
    return ExitCode.SPOOLED if rows_left else ExitCode.OK
