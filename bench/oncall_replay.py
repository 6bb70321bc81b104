"""On call's evidence, measured: a watched sim driven into KV saturation, and the real vLLM /
SGLang captures replayed through the watcher. Prints the figures the tests assert on.

1. ``tests/oncall_store.py``: ``servescope sim`` (Llama-3.1-8B on an H100 with 256 KV blocks),
   ``servescope watch`` at 0.5 s, calm Poisson load (1 req/s), a 48-stream burst, calm again.
   Printed: the build's wall time, P99 TTFT and queue time of the calm and burst windows (2 s),
   the KV-usage and waiting peaks, the windows breaching ``interactive-chat``, the incident
   view's findings for the burst and how long the view took.
2. ``tests/replay_captures.py``: each capture as 40 scrapes watched into DuckDB; the wall time
   and the per-window P99 TTFT (60 s windows; the surge is windows 4–5, the restart in 7).

    .venv/bin/python bench/oncall_replay.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from oncall_store import build_saturation_store  # noqa: E402
from replay_captures import SGLANG_CAPTURE, VLLM_CAPTURE, build_replay, watch_replay  # noqa: E402

from analysis import slo  # noqa: E402
from analysis.slo_windows import window_breaches  # noqa: E402
from services.commands.slo_profiles import slo_profiles  # noqa: E402
from services.views.incident import IncidentRequest, incident_view  # noqa: E402
from services.views.traffic import traffic  # noqa: E402
from store.lifecycle import open_store  # noqa: E402


def saturation(tmp: Path) -> None:
    s = build_saturation_store(tmp / "saturation")
    print(f"saturation store: {s.wall_s:.1f} s wall, {s.requests} requests")
    print(
        f"  phases (s from calm start): burst {s.burst_start - s.calm_start:.1f}"
        f"–{s.burst_end - s.calm_start:.1f}, end {s.end - s.calm_start:.1f}"
    )
    store = open_store(s.url)
    try:
        span = traffic(store, targets=None, start=s.calm_start, end=s.end + 1.0, window_s=2.0)
        for hist in ("ttft_seconds", "queue_time_seconds"):
            w = span.windows[hist]
            calm = w[(w["window_end"] <= s.burst_start) & (w["count"] > 0)]
            burst = w[
                (w["window_start"] >= s.burst_start + 2.0)
                & (w["window_end"] <= s.burst_end)
                & (w["count"] > 0)
            ]
            print(
                f"  {hist} P99: calm max {calm['p99'].max():.3f} s "
                f"({len(calm)} windows), burst median {burst['p99'].median():.3f} s, "
                f"max {burst['p99'].max():.3f} s ({len(burst)} windows)"
            )
        st = span.state
        kv = st[st["metric"] == "kv_cache_usage"]["value"]
        waiting = st[st["metric"] == "requests_waiting"]["value"]
        print(f"  KV usage peak {kv.max():.0%}, waiting peak {waiting.max():.0f}")
        profile = slo.SloProfile.from_entry(slo_profiles(store)["interactive-chat"])
        judged = window_breaches(span.windows, profile, span.requests)
        print(f"  interactive-chat: {int(judged['breach'].sum())} of {len(judged)} windows breach")
        t0 = time.perf_counter()
        view = incident_view(store, IncidentRequest(s.target, s.burst_start, s.burst_end))
        took = time.perf_counter() - t0
        print(f"  incident view of the burst: {took:.2f} s")
        for f in view.findings:
            print(f"    pattern {f.rule}: {f.title}: {f.summary}")
    finally:
        store.dispose()


def replays(tmp: Path) -> None:
    for capture in (VLLM_CAPTURE, SGLANG_CAPTURE):
        replay = build_replay(capture)
        t0 = time.perf_counter()
        w = watch_replay(replay, tmp / f"{capture.stem}.duckdb")
        took = time.perf_counter() - t0
        store = open_store(w.url)
        try:
            span = traffic(
                store,
                targets=[w.target],
                start=w.ts(0),
                end=w.ts(len(replay.pages) - 1),
                window_s=4 * w.step_s,
            )
        finally:
            store.dispose()
        p99 = ", ".join(f"{v:.3g}" for v in span.windows["ttft_seconds"]["p99"])
        print(
            f"{replay.engine} capture: {len(replay.pages)} scrapes watched in {took:.1f} s; "
            f"hists {', '.join(replay.hists)}; P99 TTFT per 60 s window [s]: {p99}"
        )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        saturation(Path(tmp))
        replays(Path(tmp))


if __name__ == "__main__":
    main()
