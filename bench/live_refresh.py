"""How long the Live page's view model takes to build, on a DuckDB store holding 4 watched vLLM
targets scraped at 1 Hz for three hours (tests/live_store.py's pattern), the store held open as the
page holds it (``services.store_session.short_lived_store``):

- **refresh**: the part built on every refresh (``live_view(..., with_windows=False)``: targets'
  latest state and staleness, the span's engine state and GPU samples);
- **windows**: the windowed part (``judged_windows``: percentiles of three latency histograms
  plus prompt/output lengths from ``services.views.traffic``, request/error rates, the breach
  judgement), which the page caches and computes again only when a window completes.

Prints the median of 5 builds per (span, window), and the rows the store holds.

    .venv/bin/python bench/live_refresh.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from live_store import seed

from services.store_session import short_lived_store
from services.views.live import LiveSelection, judged_windows, live_view

TARGETS = 4
SEEDED_S = 3 * 3600  # three hours
CASES = ((15, 30), (15, 10), (60, 60), (60, 20), (180, 60))  # (span min, window s)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"duckdb:///{Path(tmp) / 'live.duckdb'}"
        now = float(int(time.time()))
        t0 = time.perf_counter()
        for k in range(TARGETS):
            seed(url, now, target=f"http://10.0.0.{k + 1}:8000/metrics", span_s=SEEDED_S)
        seeded = time.perf_counter() - t0
        with short_lived_store(url) as store:
            rows = store.read_df("SELECT COUNT(*) AS n FROM engine_samples")["n"].iloc[0]
            print(
                f"store: {TARGETS} targets x 3 h at 1 Hz = {rows:,} engine_samples rows "
                f"(seeded in {seeded:.0f} s)"
            )
            for span, window in CASES:
                selection = LiveSelection(span_min=span, window_s=window)
                refresh, windows = [], []
                for _ in range(5):
                    t = time.perf_counter()
                    view = live_view(store, selection, now=now, with_windows=False)
                    refresh.append(time.perf_counter() - t)
                    assert view.windows_request is not None
                    t = time.perf_counter()
                    judged = judged_windows(store, view.windows_request)
                    windows.append(time.perf_counter() - t)
                print(
                    f"span {span:>3} min, window {window:>3} s ({len(judged.judged):>3} windows,"
                    f" {int(judged.judged['breach'].sum()):>2} breaches): refresh median "
                    f"{statistics.median(refresh):.2f} s (max {max(refresh):.2f}), windows "
                    f"median {statistics.median(windows):.2f} s (max {max(windows):.2f})"
                )


if __name__ == "__main__":
    main()
