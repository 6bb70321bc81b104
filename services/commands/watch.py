"""``servescope watch``: collect engine /metrics, DCGM, NVML and Prometheus series live.

cli.py calls :func:`register` with its subparsers. The command runs until ``--duration`` or
Ctrl-C (which flushes what is buffered), printing a one-line live status. Exit codes: 0 when
something was collected, ``errors.ExitCode.FAILED`` (3) when every scrape of every target
failed (a CI pipeline can tell), ``SPOOLED`` (4) when the store stayed locked and rows wait in the
spool, 2 for bad input.

``--retain-raw``/``--downsample`` compact the sample tables (``store.retention``) on a thread of
their own, at the start and every :data:`COMPACT_EVERY_S` of watching, so a watch of weeks stays
bounded without delaying a scrape (docs/retention.md).

``--slo PROFILE`` judges every closed ``--slo-window`` of every engine target against the
profile on a thread of its own (``collectors.breach_monitor``) and prints one ``BREACH`` line
per breaching window on stdout, with the link to its incident view (``--ui-url``);
``--fail-on-breach`` stops at the first one and exits ``FAILED`` (3): a canary with
``--duration``. A window that cannot be judged (garbage histograms) gets an ``UNJUDGED`` line;
``--fail-on-breach`` also fails once one target has ``UNJUDGED_LIMIT`` of them. ``--since``
first fetches that much of a Prometheus server's history (docs/watch.md).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from analysis.printable import printable
from analysis.slo import SloProfile
from collectors import prometheus, watch
from collectors.breach_monitor import UNJUDGED_LIMIT, Breach, BreachMonitor, MonitoredSink, Unjudged
from collectors.row_sink import RowSink
from errors import ExitCode, InputError, StoreError
from services.views.traffic import incident_path
from store import retention
from store.db import Store

#: How often ``--retain-raw``/``--downsample`` compact while watching (seconds).
COMPACT_EVERY_S = 600.0
#: ``--slo-window``'s default (seconds) and where the incident links point by default.
DEFAULT_SLO_WINDOW_S = 60.0
DEFAULT_UI_URL = "http://127.0.0.1:8501"

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``250ms``, ``1s``, ``0.5``, ``10m``, ``1h``, ``7d`` → seconds (the one duration syntax of
    the command line: watch, db compact, workload from-metrics)."""
    m = _DURATION_RE.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"cannot read the duration {text!r}: write e.g. 250ms, 1s, 10m, 1h or 7d"
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
        f"(servescope db ingest-spool), 2 for bad input; with --slo --fail-on-breach, "
        f"{ExitCode.FAILED} when a window breached the profile.",
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
    p.add_argument(
        "--since",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="with --prometheus: first fetch this much of the server's history (e.g. 2h, at the "
        "--interval step), then go on live; --slo judges the history's windows too",
    )
    p.add_argument(
        "--slo",
        metavar="PROFILE",
        help="judge every closed window of every engine target against this SLO profile (a "
        "seeded one or one saved on Compare) and print a BREACH line with its incident link "
        "on stdout for each window that breaches it",
    )
    p.add_argument(
        "--slo-window",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="length of the judged windows, on a UTC grid (default 60s; at least --interval)",
    )
    p.add_argument(
        "--fail-on-breach",
        action="store_true",
        help=f"with --slo: stop at the first breaching window and exit {ExitCode.FAILED} "
        f"(a canary check with --duration: 0 when no window breached); also stop and exit "
        f"{ExitCode.FAILED} once {UNJUDGED_LIMIT} windows of one target could not be judged",
    )
    p.add_argument(
        "--ui-url",
        default=DEFAULT_UI_URL,
        metavar="URL",
        help=f"the dashboard the incident links point to (default {DEFAULT_UI_URL})",
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


def _check_slo_flags(args: argparse.Namespace) -> None:
    """InputError for an ``--slo``/``--since`` flag that cannot work (before anything starts)."""
    if args.slo is None:
        for flag, given in (
            ("--fail-on-breach", args.fail_on_breach),
            ("--slo-window", args.slo_window is not None),
        ):
            if given:
                raise InputError(f"{flag} needs --slo PROFILE", hint="e.g. --slo interactive-chat")
    else:
        if not (args.metrics or args.prometheus):
            raise InputError(
                "--slo judges engine targets: give --metrics URL... or --prometheus URL"
            )
        window = DEFAULT_SLO_WINDOW_S if args.slo_window is None else args.slo_window
        if not window > 0:
            raise InputError(
                f"--slo-window must be above 0 seconds, got {window:g}", hint="e.g. 60s or 5m"
            )
        if window < args.interval:
            raise InputError(
                f"--slo-window ({window:g} s) is shorter than --interval ({args.interval:g} s): "
                "a window needs the scrapes at both its ends",
                hint="give a window of at least the interval, e.g. --slo-window 60s",
            )
        if not re.match(r"^https?://[^\s/]+", args.ui_url or ""):
            raise InputError(
                f"--ui-url must be the dashboard's http(s) address, got {args.ui_url!r}",
                hint=f"e.g. {DEFAULT_UI_URL}",
            )
    if args.since is not None:
        if not args.prometheus:
            raise InputError("--since reads a Prometheus server's history: it needs --prometheus")
        if not args.since > 0:
            raise InputError(f"--since must be above 0 seconds, got {args.since:g}", hint="e.g. 2h")


def _profile(store: Store, name: str) -> SloProfile:
    """The stored SLO profile ``name``; an InputError listing the profiles when unknown."""
    from services.commands import slo_profiles

    profiles = slo_profiles.slo_profiles(store)
    if name not in profiles:
        raise InputError(
            f"unknown SLO profile {name!r}",
            hint=f"profiles: {', '.join(sorted(profiles)) or 'none stored'} (seeds/"
            "slo_profiles.toml, or saved on Compare)",
        )
    return SloProfile.from_entry(profiles[name])


def utc_range(start: float, end: float) -> str:
    """``2026-12-02 01:05:00–01:06:00 UTC`` (fractions of a second shown when there are)."""
    a = datetime.fromtimestamp(start, UTC)
    b = datetime.fromtimestamp(end, UTC)
    whole = start == int(start) and end == int(end)
    fmt = "%H:%M:%S" if whole else "%H:%M:%S.%f"

    def clock(d: datetime) -> str:
        text = d.strftime(fmt)
        return text if whole else text[:-3]

    tail = clock(b) if a.date() == b.date() else f"{b:%Y-%m-%d} {clock(b)}"
    return f"{a:%Y-%m-%d} {clock(a)}–{tail} UTC"


def breach_line(breach: Breach, ui_url: str) -> str:
    """``BREACH <UTC range> <target> <reason> <ui-url>/incident?target=…&from=…&to=…``, one line
    whatever the target's name holds (``analysis.printable``: the target is one field)."""
    link = ui_url.rstrip("/") + incident_path(breach.target, breach.window_start, breach.window_end)
    return (
        f"BREACH {utc_range(breach.window_start, breach.window_end)} "
        f"{printable(breach.target, field=True)} {printable(breach.reason)} {printable(link)}"
    )


def unjudged_line(window: Unjudged) -> str:
    """``UNJUDGED <UTC range> <target> <why>``: a window that could not be judged."""
    return (
        f"UNJUDGED {utc_range(window.window_start, window.window_end)} "
        f"{printable(window.target, field=True)} {printable(window.reason)}"
    )


def _unjudged_over(monitor: BreachMonitor) -> dict[str, int]:
    """The targets with at least ``UNJUDGED_LIMIT`` windows that could not be judged."""
    return {t: n for t, n in monitor.unjudged.items() if n >= UNJUDGED_LIMIT}


def _backfill(sink: RowSink, args: argparse.Namespace, now: float) -> tuple[float, int]:
    """``--since``: fetch [now − since, now] from Prometheus into ``sink``; returns where the
    live range queries go on (one step after the last one fetched) and the rows handed over."""
    step = max(args.interval, 1.0)
    start = now - args.since
    got = prometheus.import_window(
        sink, args.prometheus, start=start, end=now, step=step, match=args.match, raw=args.raw
    )
    rows = sum(len(r) for r in got.rows.values())
    print(
        f"history from {args.prometheus}: {utc_range(start, now)} at {step:g} s steps, "
        f"{len(got.targets)} engine target(s), {rows:,} rows",
        file=sys.stderr,
        flush=True,
    )
    return start + (math.floor((now - start) / step) + 1) * step, rows


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
    _check_slo_flags(args)
    compacting = args.retain_raw is not None or args.downsample is not None
    raw_for_s = 24 * 3600.0 if args.retain_raw is None else args.retain_raw
    bucket_s = 60.0 if args.downsample is None else args.downsample
    if compacting and (bucket_s < 1 or bucket_s != int(bucket_s)):
        raise InputError(
            f"--downsample must be a whole number of seconds ≥ 1, got {bucket_s:g} s",
            hint="e.g. 1m or 60s",
        )
    store = open_store(args.db)
    try:
        profile = _profile(store, args.slo) if args.slo is not None else None
    except Exception:
        store.dispose()
        raise
    out = sys.stderr
    printer = _StatusPrinter(out)
    print(f"servescope watch → {store.url}  (Ctrl-C stops)", file=out, flush=True)
    writer = BufferedWriter(store, background=True)
    sink: RowSink = writer
    watcher: watch.Watcher | None = None
    holder: list[watch.Watcher] = []
    monitor: BreachMonitor | None = None
    if profile is not None:
        window_s = DEFAULT_SLO_WINDOW_S if args.slo_window is None else args.slo_window

        def on_breach(breach: Breach) -> None:
            print(breach_line(breach, args.ui_url), flush=True)
            if args.fail_on_breach and holder:
                holder[0].request_stop()

        def on_unjudged(window: Unjudged) -> None:
            print(unjudged_line(window), flush=True)
            if args.fail_on_breach and window.count >= UNJUDGED_LIMIT and holder:
                holder[0].request_stop()

        monitor = BreachMonitor(
            profile, window_s=window_s, on_breach=on_breach, on_unjudged=on_unjudged
        ).start()
        sink = MonitoredSink(writer, monitor)
        print(
            f"judging {window_s:g} s windows against the SLO profile {profile.name!r}"
            + (" (stops at the first breach)" if args.fail_on_breach else ""),
            file=out,
            flush=True,
        )

    def on_watcher(w: watch.Watcher) -> None:
        holder.append(w)
        # a --since history that already breached: stop before watching live
        stop = monitor is not None and (monitor.breaches or _unjudged_over(monitor))
        if args.fail_on_breach and stop:
            w.request_stop()

    backfilled = 0
    compactor = None
    if compacting:
        compactor = Compactor(
            store,
            raw_for_s=raw_for_s,
            bucket_s=bucket_s,
            on_note=lambda note: print(note, file=out, flush=True),
        ).start()
    try:
        prometheus_start = None
        if args.since is not None:
            prometheus_start, backfilled = _backfill(sink, args, time.time())
        spec = watch.SourceSpec(
            metrics_urls=args.metrics,
            dcgm_urls=args.dcgm,
            gpu=bool(args.gpu),
            prometheus_url=args.prometheus,
            match=args.match,
            raw=args.raw,
            prometheus_start=prometheus_start,
        )
        watcher = watch.watch(
            sink,
            spec,
            interval_s=args.interval,
            duration_s=args.duration,
            on_status=printer,
            on_notes=lambda note: print(printable(note), file=out, flush=True),
            on_watcher=on_watcher,
        )
    finally:
        if monitor is not None:
            monitor.stop()
        if compactor is not None:
            compactor.stop()
        writer.close()
        printer.end()
        store.dispose()
    # the history's rows went to the writer before the watcher started: count them too
    added = sum(watcher.rows_added.values()) + backfilled
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
    if monitor is not None and profile is not None:
        print(
            f"SLO {profile.name!r}: {monitor.windows_judged} window(s) of "
            f"{len(monitor.judged_targets)} target(s) judged, {monitor.breaches} breach(es)"
            + (
                f"; {sum(monitor.unjudged.values())} window(s) could not be judged"
                if monitor.unjudged
                else ""
            )
            + (f"; {monitor.errors} judgement(s) failed (see the log)" if monitor.errors else ""),
            file=out,
            flush=True,
        )
        unjudged = [
            s.key
            for s in watcher.states
            if s.kind == "metrics"
            and s.engine
            and s.key not in monitor.judged_targets
            and s.key not in monitor.unjudged  # those had their UNJUDGED lines
        ]
        if unjudged:
            print(
                f"not judged (no window closed with a TTFT or E2E histogram): "
                f"{', '.join(printable(t) for t in unjudged)}",
                file=out,
                flush=True,
            )
        if args.fail_on_breach and monitor.breaches:
            print(
                f"servescope watch: a window breached the SLO profile {profile.name!r} "
                f"(exit {ExitCode.FAILED})",
                file=out,
                flush=True,
            )
            return ExitCode.FAILED
        over = _unjudged_over(monitor)
        if args.fail_on_breach and over:
            named = ", ".join(f"{printable(t)} ({n})" for t, n in sorted(over.items()))
            print(
                f"servescope watch: windows could not be judged against the SLO profile "
                f"{profile.name!r} ({UNJUDGED_LIMIT} or more of one target): {named}; a canary "
                f"that cannot judge fails (exit {ExitCode.FAILED})",
                file=out,
                flush=True,
            )
            return ExitCode.FAILED
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
