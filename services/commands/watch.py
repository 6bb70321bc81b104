"""``servescope watch``: collect engine /metrics, DCGM, NVML and Prometheus series live.

cli.py calls :func:`register` with its subparsers. The command runs until ``--duration`` or
Ctrl-C (which flushes what is buffered), printing a one-line live status. Exit codes: 0 when
something was collected, ``errors.ExitCode.FAILED`` (3) when every scrape of every target
failed (a CI pipeline can tell), ``SPOOLED`` (4) when the store stayed locked and rows wait in the
spool, 2 for bad input.

``--retain-raw``/``--downsample`` compact the sample tables (``store.retention``) on a thread of
their own, at the start and every :data:`COMPACT_EVERY_S` of watching, so a watch of weeks stays
bounded without delaying a scrape (docs/retention.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from collectors import watch
from errors import ExitCode, InputError, StoreError
from store import retention
from store.db import Store

#: How often ``--retain-raw``/``--downsample`` compact while watching (seconds).
COMPACT_EVERY_S = 600.0

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
    p.add_argument(
        "--retain-raw",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="keep samples raw this long, then downsample them (e.g. 24h; default with "
        "--downsample: 24h); compacts at the start and every 10 minutes (db compact)",
    )
    p.add_argument(
        "--downsample",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="bucket of the downsampled samples (e.g. 1m, whole seconds; default with "
        "--retain-raw: 1m)",
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=run)


class Compactor:
    """Runs ``retention.compact`` at the start and every ``every_s`` on its own thread, so the
    scrapes and the writer never wait for it. A failed compaction (the store refused it) is
    reported through ``on_note`` and retried at the next period; it never stops the watch."""

    def __init__(
        self,
        store: Store,
        *,
        raw_for_s: float,
        bucket_s: float,
        every_s: float = COMPACT_EVERY_S,
        on_note: Callable[[str], None] = lambda note: None,
    ) -> None:
        self.store = store
        self.raw_for_s = raw_for_s
        self.bucket_s = bucket_s
        self.every_s = every_s
        self.on_note = on_note
        self.removed = 0
        self.runs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="servescope-compact", daemon=True)

    def start(self) -> Compactor:
        self._thread.start()
        return self

    def compact_once(self) -> None:
        try:
            report = retention.compact(self.store, raw_for_s=self.raw_for_s, bucket_s=self.bucket_s)
        except StoreError as exc:
            self.on_note(f"servescope watch: compaction skipped, retried later: {exc}")
            return
        self.runs += 1
        self.removed += report.removed

    def _main(self) -> None:
        while not self._stop.is_set():
            self.compact_once()
            if self._stop.wait(self.every_s):
                return

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop after the compaction in progress, if any (its transaction completes)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)


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
    compacting = args.retain_raw is not None or args.downsample is not None
    raw_for_s = 24 * 3600.0 if args.retain_raw is None else args.retain_raw
    bucket_s = 60.0 if args.downsample is None else args.downsample
    if compacting and (bucket_s < 1 or bucket_s != int(bucket_s)):
        raise InputError(
            f"--downsample must be a whole number of seconds ≥ 1, got {bucket_s:g} s",
            hint="e.g. 1m or 60s",
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
    compactor = None
    if compacting:
        compactor = Compactor(
            store,
            raw_for_s=raw_for_s,
            bucket_s=bucket_s,
            on_note=lambda note: print(note, file=out, flush=True),
        ).start()
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
        if compactor is not None:
            compactor.stop()
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
    if compactor is not None:
        print(
            f"compacted {compactor.runs} time(s): {compactor.removed:,} old rows replaced by "
            f"{bucket_s:g} s aggregates (raw kept {raw_for_s:g} s)",
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
