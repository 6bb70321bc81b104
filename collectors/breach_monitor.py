"""Judge each closed window of each watched engine target against an SLO profile, as the rows
are scraped (``servescope watch --slo``; docs/watch.md).

The watcher hands its rows to a :class:`MonitoredSink`, which passes them on to the store's
writer unchanged and gives the few series the judgement needs to a :class:`BreachMonitor`: the
TTFT and E2E histograms (``analysis.slo_windows.SLO_HISTS``), the prompt-length histogram (a
length-conditioned TTFT target) and the finished-request counters by reason (the error rate;
the watcher hands a scrape's raw counters over before its histograms). Taking them from the
scrape, not back from the store, makes a window's verdict independent of when the writer
flushes and costs no store read.

The monitor works on a thread of its own, fed through a queue, so the scrape loop never waits
for a judgement. Per target it keeps the histograms carried forward (the watcher hands over a
histogram's buckets only when its count moved) from the last scrape at or before the oldest
window not yet judged.

Windows are (w0, w0 + window_s] on a grid of multiples of ``window_s`` in epoch seconds (UTC),
like Prometheus' evaluation steps: every target shares the same window bounds. A target's window
is judged once a scrape of that target at or after its end arrived, with
``analysis.histogram_windows`` (increase of the buckets over the window, resets handled) and
``analysis.slo_windows.window_breaches``. A target's first window starts at the grid boundary
before its first scrape, so it measures from that first scrape (nothing is extrapolated); the
window in progress when the watch stops is not judged. A target that exports neither
histogram (llama.cpp, Triton) is not judged.

A window whose histograms cannot be read (negative or non-finite counts, requests counted
without usable buckets, a percentile in the ``+Inf`` bucket that cannot be told against its
limit: ``window_breaches``' ``judged`` False) is *not* a judged window: it is counted per target
in ``unjudged`` and handed to ``on_unjudged``, never passed off as a window that met the
profile. A canary gives up on a target after :data:`UNJUDGED_LIMIT` such windows.
"""

from __future__ import annotations

import bisect
import logging
import math
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import histogram_windows, slo_windows
from analysis.slo import SloProfile
from collectors.row_sink import RowSink

log = logging.getLogger("servescope.watch")


@dataclass(frozen=True)
class Breach:
    """One window of one target that breached the profile."""

    target: str
    engine: str | None
    window_start: float
    window_end: float
    #: ``window_breaches``' reason: ``P99 TTFT 2.31 s > 1.5 s (P99 inside the 2.5–5 s bucket)``
    reason: str
    #: the judged row of ``window_breaches`` (values, limits, per-field breach flags)
    row: Mapping[str, Any]


@dataclass(frozen=True)
class Unjudged:
    """One window of one target that could not be judged, and why."""

    target: str
    engine: str | None
    window_start: float
    window_end: float
    #: ``window_breaches``' ``unjudged``: ``P99 TTFT: negative or non-finite counts exported (…)``
    reason: str
    #: how many windows of this target could not be judged so far, this one included
    count: int


#: Windows of one target that could not be judged before ``watch --fail-on-breach`` fails
#: (docs/watch.md): a canary that cannot judge its traffic must not pass.
UNJUDGED_LIMIT = 3


@dataclass
class _Target:
    engine: str | None
    next_w0: float
    current: dict[str, float] = field(default_factory=dict)  # carried-forward histogram values
    snapshots: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)  # finished-request counter rows


_STOP = object()
#: Counter rows kept for a target whose histograms have not arrived (a day at 15 s, 5 series).
RAW_CAP = 100_000


class BreachMonitor:
    """Judges closed windows of every engine target on its own thread.

    ``add(table, rows)`` (from the watcher's side) only filters and enqueues; ``on_breach`` and
    ``on_window`` are called on the monitor's thread. ``stop`` judges what the queued rows
    closed, then ends the thread.
    """

    def __init__(
        self,
        profile: SloProfile,
        *,
        window_s: float,
        on_breach: Callable[[Breach], None],
        on_window: Callable[[str, pd.DataFrame], None] | None = None,
        on_unjudged: Callable[[Unjudged], None] | None = None,
    ) -> None:
        if not window_s > 0 or not math.isfinite(window_s):
            raise ValueError(f"window_s must be > 0 seconds, got {window_s!r}")
        self.profile = profile
        self.window_s = float(window_s)
        self.on_breach = on_breach
        self.on_window = on_window
        self.on_unjudged = on_unjudged
        self.hists = _hists_for(profile)
        self._prefixes = tuple(h + "_" for h in self.hists)
        self._raw_names = frozenset(histogram_windows.finished_series_names())
        self.windows_judged = 0
        #: the targets at least one window of which was judged
        self.judged_targets: set[str] = set()
        self.breaches = 0
        #: per target, the windows that could not be judged
        self.unjudged: dict[str, int] = {}
        self.errors = 0
        self._targets: dict[str, _Target] = {}
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="servescope-slo", daemon=True)

    # --- the watcher's side -------------------------------------------------------------------

    def start(self) -> BreachMonitor:
        self._thread.start()
        return self

    def add(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Keep the rows the judgement reads (cheap: runs on the scraping thread)."""
        if table == "engine_samples":
            kept = [
                (str(r["target"]), float(r["ts"]), r.get("engine"), str(r["metric"]), r["value"])
                for r in rows
                if str(r["metric"]).startswith(self._prefixes)
            ]
            if kept:
                self._queue.put(("hist", kept))
        elif table == "engine_raw_samples":
            raw = [dict(r) for r in rows if r["name"] in self._raw_names]
            if raw:
                self._queue.put(("raw", raw))

    def stop(self, timeout_s: float | None = None) -> None:
        """Judge every window the rows received so far closed (waiting for it, by default:
        a long ``--since`` history may take a while), then end the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout_s)

    # --- the monitor's thread -----------------------------------------------------------------

    def _main(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._take(item)
            except Exception:  # a bug in judging must not stop the watch
                self.errors += 1
                log.exception("judging SLO windows failed")

    def _state(self, target: str, ts: float, engine: Any) -> _Target:
        state = self._targets.get(target)
        if state is None:
            w0 = math.floor(ts / self.window_s) * self.window_s
            state = self._targets[target] = _Target(engine, w0)
        elif state.engine is None and engine is not None:
            state.engine = engine
        return state

    def _take(self, item: tuple[str, list[Any]]) -> None:
        kind, rows = item
        if kind == "raw":
            # the watcher hands a scrape's counters over before its histograms, so they are
            # here when the histograms close a window
            for r in rows:
                state = self._state(str(r["target"]), float(r["ts"]), None)
                state.raw.append(r)
                if not state.snapshots and len(state.raw) > RAW_CAP:
                    # counters without histograms (yet): a backfill's history arrives before its
                    # histograms; a target that never exports them must not grow without bound
                    del state.raw[: RAW_CAP // 2]
            return
        touched: dict[str, float] = {}
        by_scrape: dict[tuple[str, float], list[tuple[str, float]]] = {}
        engines: dict[str, Any] = {}
        for target, ts, engine, metric, value in rows:
            by_scrape.setdefault((target, ts), []).append((metric, float(value)))
            engines[target] = engine
        for (target, ts), values in sorted(by_scrape.items(), key=lambda kv: kv[0][1]):
            state = self._state(target, ts, engines.get(target))
            state.current.update(values)
            state.snapshots.append((ts, dict(state.current)))
            touched[target] = max(ts, touched.get(target, ts))
        for target, latest in touched.items():
            self._judge_closed(target, self._targets[target], latest)

    def _judge_closed(self, target: str, state: _Target, latest: float) -> None:
        while state.next_w0 + self.window_s <= latest:
            w0 = state.next_w0
            w1 = w0 + self.window_s
            self._judge(target, state, w0, w1)
            state.next_w0 = w1
            # keep the baseline of the next window: its last scrape at or before w1
            at_or_before = bisect.bisect_right(state.snapshots, w1, key=lambda snap: snap[0])
            del state.snapshots[: max(at_or_before - 1, 0)]
            end = _upto(state.raw, w1)
            if end:  # from the counters' last scrape at or before w1
                base = float(state.raw[end - 1]["ts"])
                del state.raw[: bisect.bisect_left(state.raw, base, key=_raw_ts)]

    def _judge(self, target: str, state: _Target, w0: float, w1: float) -> None:
        records = [
            {"target": target, "ts": ts, "metric": m, "value": v}
            for ts, values in state.snapshots[
                : bisect.bisect_right(state.snapshots, w1, key=lambda snap: snap[0])
            ]
            for m, v in values.items()
        ]
        if not records:
            return
        rows = pd.DataFrame.from_records(records)
        # end inside the window: exactly one window (w0, w1], whatever the float rounding
        half = w0 + self.window_s / 2
        windows = {
            hist: histogram_windows.summed_histogram_windows(
                rows,
                hist,
                window_s=self.window_s,
                quantiles=(self.profile.quantile,),
                start=w0,
                end=half,
            )
            for hist in self.hists
        }
        requests = None
        raw = state.raw[: _upto(state.raw, w1)]
        if raw and state.engine in histogram_windows.FAILURE_SERIES:
            requests = histogram_windows.request_rate_windows(
                pd.DataFrame.from_records(raw),
                str(state.engine),
                window_s=self.window_s,
                start=w0,
                end=half,
            )
        verdict = slo_windows.window_breaches(windows, self.profile, requests)
        if self.on_window is not None:
            self.on_window(target, verdict)
        for rec in verdict.to_dict("records"):
            breach = bool(rec.get("breach"))
            if breach or bool(rec.get("judged", True)):  # a breach read in one field stands
                self.windows_judged += 1
                self.judged_targets.add(target)
            else:
                self.unjudged[target] = self.unjudged.get(target, 0) + 1
                if self.on_unjudged is not None:
                    self.on_unjudged(
                        Unjudged(
                            target=target,
                            engine=state.engine,
                            window_start=float(rec["window_start"]),
                            window_end=float(rec["window_end"]),
                            reason=str(rec.get("unjudged", "")),
                            count=self.unjudged[target],
                        )
                    )
            if breach:
                self.breaches += 1
                self.on_breach(
                    Breach(
                        target=target,
                        engine=state.engine,
                        window_start=float(rec["window_start"]),
                        window_end=float(rec["window_end"]),
                        reason=str(rec.get("reason", "")),
                        row={str(k): v for k, v in rec.items()},
                    )
                )


def _raw_ts(row: Mapping[str, Any]) -> float:
    return float(row["ts"])


def _upto(raw: list[dict[str, Any]], ts: float) -> int:
    """How many of ``raw`` (in time order) are at or before ``ts``."""
    return bisect.bisect_right(raw, ts, key=_raw_ts)


def _hists_for(profile: SloProfile) -> tuple[str, ...]:
    """The histograms kept: both judged latencies whatever the profile sets (a window is closed
    by whichever the engine exports, so an error-rate-only profile is judged too), and the
    prompt lengths for a length-conditioned TTFT target."""
    hists = list(slo_windows.SLO_HISTS.values())
    if profile.length_conditioned:
        hists.append(slo_windows.PROMPT_HIST)
    return tuple(hists)


class MonitoredSink:
    """A ``RowSink`` that hands every row to ``sink`` and the judged series to ``monitor``."""

    def __init__(self, sink: RowSink, monitor: BreachMonitor) -> None:
        self.sink = sink
        self.monitor = monitor

    def add(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.sink.add(table, rows)
        self.monitor.add(table, rows)
