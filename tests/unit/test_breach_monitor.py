"""``collectors.breach_monitor``: closed windows judged from the scraped rows, on its thread,
against hand-computed cases (the window grid, buckets carried forward, a restart mid-window,
the error rate from the counters of the same scrape, bounded memory)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from analysis.slo import SloProfile
from collectors.breach_monitor import Breach, BreachMonitor, MonitoredSink

T = "http://vllm-0:8000/metrics"
PROFILE = SloProfile(name="chat", percentile=99, ttft_ms=500.0, max_error_rate=0.01)


def scrape(ts: float, buckets: dict[float, float] | None, count: float) -> list[dict[str, Any]]:
    """One scrape's TTFT rows; ``buckets`` None: the count did not move, buckets not handed
    over (as the watcher does)."""
    rows = [
        {"target": T, "ts": ts, "metric": "ttft_seconds_count", "engine": "vllm", "value": count},
        {"target": T, "ts": ts, "metric": "ttft_seconds_sum", "engine": "vllm", "value": count},
        {"target": T, "ts": ts, "metric": "requests_running", "engine": "vllm", "value": 1.0},
    ]
    for le, c in (buckets or {}).items():
        name = f"ttft_seconds_bucket:{'+Inf' if math.isinf(le) else repr(le)}"
        rows.append({"target": T, "ts": ts, "metric": name, "engine": "vllm", "value": c})
    return rows


def cum(fast: float, slow: float) -> dict[float, float]:
    """Cumulative buckets: ``fast`` requests ≤ 0.1 s, ``slow`` in (1, 2.5] s."""
    return {0.1: fast, 1.0: fast, 2.5: fast + slow, math.inf: fast + slow}


class Recorder:
    def __init__(self) -> None:
        self.breaches: list[Breach] = []
        self.added: list[tuple[str, int]] = []

    def __call__(self, breach: Breach) -> None:
        self.breaches.append(breach)

    def add(self, table: str, rows: Any) -> None:
        self.added.append((table, len(rows)))


def run(
    scrapes: list[tuple[str, list[dict[str, Any]]]], window_s: float = 10.0
) -> tuple[BreachMonitor, Recorder]:
    rec = Recorder()
    monitor = BreachMonitor(PROFILE, window_s=window_s, on_breach=rec).start()
    sink = MonitoredSink(rec, monitor)
    for table, rows in scrapes:
        sink.add(table, rows)
    monitor.stop()
    return monitor, rec


def test_windows_on_the_grid_buckets_carried_forward_the_open_window_left() -> None:
    monitor, rec = run(
        [
            ("engine_samples", scrape(1003, cum(0, 0), 0)),  # first scrape: grid w0 = 1000
            ("engine_samples", scrape(1008, cum(10, 0), 10)),
            ("engine_samples", scrape(1013, None, 10)),  # count unchanged: no bucket rows
            ("engine_samples", scrape(1018, cum(10, 10), 20)),
            ("engine_samples", scrape(1023, None, 20)),  # closes (1010, 1020]; (1020, 1030] open
        ]
    )
    # every row reached the store's sink unchanged
    assert rec.added == [("engine_samples", n) for n in (7, 7, 3, 7, 3)]
    assert monitor.windows_judged == 2 and monitor.breaches == 1 and monitor.errors == 0
    (b,) = rec.breaches
    assert (b.target, b.engine, b.window_start, b.window_end) == (T, "vllm", 1010.0, 1020.0)
    # (1010, 1020]: from the scrape at 1008 to the one at 1018: 10 requests in (1, 2.5];
    # P99 = 1 + 1.5 × 0.99 = 2.485 s
    assert b.row["ttft_ms_value_ms"] == pytest.approx(2485.0)
    # (2.485 shown to 3 significant digits)
    assert re.fullmatch(
        r"P99 TTFT 2\.4[89] s > 500 ms \(P99 inside the 1–2\.5 s bucket\)", b.reason
    )


def test_a_restart_mid_window_keeps_what_was_served_before_and_after() -> None:
    monitor, rec = run(
        [
            ("engine_samples", scrape(1005, cum(100, 0), 100)),
            ("engine_samples", scrape(1011, cum(105, 0), 105)),
            ("engine_samples", scrape(1015, cum(0, 3), 3)),  # restarted: counters from 0
            ("engine_samples", scrape(1021, None, 3)),
        ]
    )
    assert monitor.windows_judged == 2
    (b,) = rec.breaches
    # (1010, 1020]: 5 fast before the restart, 3 slow after; rank 0.99 × 8 = 7.92 in (1, 2.5]:
    # 1 + 1.5 × (7.92 − 5) / 3 = 2.46 s
    assert b.window_start == 1010.0
    assert b.row["ttft_ms_value_ms"] == pytest.approx(2460.0)


def raw(ts: float, stop: float, abort: float) -> list[dict[str, Any]]:
    def row(reason: str, value: float) -> dict[str, Any]:
        labels = json.dumps({"engine": "0", "finished_reason": reason}, separators=(",", ":"))
        return {
            "target": T,
            "ts": ts,
            "name": "vllm:request_success_total",
            "labels": labels,
            "value": value,
        }

    return [row("stop", stop), row("abort", abort), row("length", 0.0)]


def test_the_error_rate_from_the_counters_of_the_same_scrapes() -> None:
    scrapes = []
    for ts, fast, stop, abort in ((1002, 0, 0, 0), (1009, 10, 8, 2), (1012, 10, 8, 2)):
        # the watcher hands the raw counters over first
        scrapes.append(("engine_raw_samples", raw(ts, stop, abort)))
        scrapes.append(("engine_samples", scrape(ts, cum(fast, 0), fast)))
    monitor, rec = run(scrapes)
    assert monitor.windows_judged == 1
    (b,) = rec.breaches
    # 10 finished (8 stop + 2 abort): 20 % > 1 %; TTFT fine (every request ≤ 0.1 s)
    assert b.reason == "error rate 20.0% > 1.0% (2 failed)"
    assert not b.row["ttft_ms_breach"]


def test_memory_stays_bounded_to_the_window_in_progress() -> None:
    scrapes = [("engine_samples", scrape(1000 + t, cum(t, 0), t)) for t in range(0, 1000)]
    monitor, rec = run(scrapes)
    assert monitor.windows_judged == 99 and rec.breaches == []
    state = monitor._targets[T]
    assert len(state.snapshots) <= 11  # the next window's baseline and its scrapes


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="window_s"):
        BreachMonitor(PROFILE, window_s=0, on_breach=lambda b: None)
