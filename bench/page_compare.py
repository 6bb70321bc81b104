"""Compare page benchmark: its reads and a full render over a large generated store.

Generates a DuckDB store shaped like `servescope demo` output, scaled up: 3 simulated engines ×
concurrency 1/8/32 (9 runs, framework 'sim', engine_params JSON), ``--requests`` request rows in
all (default 10M) and ``--gaps`` token gaps per request (default 2, pooled ITL), then prints,
each the median of ``--repeats`` cold runs (no Streamlit cache):

  * every read the page's view-model builder makes (runs_table.list_runs, the SLO profiles,
    runs_table.run_aggregates, slo_attainment, request_samples and the ITL metric_samples),
    both aggregated from the rows (no stored rollups) and served from the stored per-run
    rollups, and the pure work on top (per-run shaping, verdicts, capacity, tables, charts, the
    bootstrap);
  * the builder itself (``services.views.compare.compare_view``, all 9 runs, the page's
    defaults): with nothing stored, right after ``prepare``, and with its rollups stored;
  * Home on the same store (its newest run), first view and cold view;
  * the whole page rendered by Streamlit's AppTest with all 9 runs selected (target < 2 s):
    its very first view (nothing stored: every aggregate computed), the first view after
    ``services.commands.prepare.prepare`` (what `servescope import` / `bench` do when they finish),
    and a
    cold view (fresh Streamlit cache; rollups the earlier views stored).

Usage: python bench/page_compare.py [--requests 10000000] [--gaps 2] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import compare, slo  # noqa: E402
from services.commands import prepare, slo_profiles  # noqa: E402
from services.views import compare as compare_views  # noqa: E402
from store import ingest, request_rows, request_stats, runs_table  # noqa: E402
from store.db import Store  # noqa: E402
from store.lifecycle import open_store  # noqa: E402

ENGINES = (
    ("h100-8b", {"max_batch_size": 256, "prefix_caching": True}, 1.0),
    ("h100-8b-batch8", {"max_batch_size": 8, "prefix_caching": True}, 1.6),
    ("h100-8b-nocache", {"max_batch_size": 256, "prefix_caching": False}, 1.25),
)
LEVELS = (1, 8, 32)


def make_requests(run_id: str, n: int, conc: int, slow: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    seq = np.arange(n, dtype=np.int64)
    sent = 1_790_000_000.0 + seq * (0.05 / conc)
    input_tokens = np.minimum(rng.lognormal(6.5, 1.2, n), 60_000).astype(np.int64) + 1
    output_tokens = rng.integers(2, 512, n)
    load = 1.0 + conc / 16.0
    ttft = (15.0 + input_tokens * 0.02) * slow * load + rng.exponential(20.0 * load, n)
    tpot = rng.normal(8.0 * slow * load, 1.5, n).clip(2.0)
    e2e = ttft + tpot * (output_tokens - 1)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": seq,
            "scheduled_at": sent,
            "sent_at": sent + 0.0002,
            "first_token_at": sent + ttft / 1000,
            "done_at": sent + e2e / 1000,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_ms": e2e,
            "lag_ms": rng.exponential(0.3, n),
            "status": np.where(rng.random(n) < 0.005, "error", "ok"),
            "http_status": 200,
        }
    )


def make_gaps(run_id: str, n: int, per_request: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": np.repeat(np.arange(n, dtype=np.int64), per_request),
            "idx": np.tile(np.arange(per_request, dtype=np.int64), n),
            "gap_ms": rng.gamma(4.0, 2.5, n * per_request),
        }
    )


def generate(url: str, total: int, gaps: int) -> list[str]:
    store = open_store(url)
    ids: list[str] = []
    try:
        per_run = total // (len(ENGINES) * len(LEVELS))
        i = 0
        for name, params, slow in ENGINES:
            for conc in LEVELS:
                run_id = f"bench-{name}-c{conc}"
                ids.append(run_id)
                duration = per_run * 0.05 / conc
                ingest.add_run(
                    store,
                    {
                        "run_id": run_id,
                        "name": f"{name} c={conc}",
                        "source": "servescope",
                        "framework": "sim",
                        "model": "llama-3.1-8b",
                        "gpu_name": "H100-SXM-80GB",
                        "gpu_count": 1,
                        "workload": "mixed",
                        "arrival": "concurrency",
                        "concurrency": conc,
                        "engine_params": params,
                        "started_at": 1_790_000_000.0 + i,
                        "duration_s": duration,
                        "status": "completed",
                        "client_bound": False,
                    },
                )
                for start in range(0, per_run, 2_000_000):
                    n = min(2_000_000, per_run - start)
                    df = make_requests(run_id, n, conc, slow, seed=i * 1000 + start)
                    df["seq"] += start
                    ingest.add_requests(store, df)
                    if gaps:
                        g = make_gaps(run_id, n, gaps, seed=i * 1000 + start + 1)
                        g["seq"] += start
                        ingest.add_token_gaps(store, g)
                i += 1
    finally:
        store.dispose()
    return ids


def clear_rollups(url: str) -> None:
    store = open_store(url)
    try:
        with store.connect() as conn:
            conn.exec_driver_sql("DELETE FROM run_rollups")
    finally:
        store.dispose()


def timed(
    fn: Callable[[], Any], repeats: int, before: Callable[[], None] | None = None
) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000_000, help="request rows in all")
    ap.add_argument("--gaps", type=int, default=2, help="token gaps per request")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--distributions",
        action="store_true",
        help="render with the sampled views on (CDFs, bootstrap; off by default above 1M)",
    )
    ap.add_argument("--keep", type=Path, help="folder for the store (kept; reused if present)")
    args = ap.parse_args()

    folder = args.keep or Path(tempfile.mkdtemp(prefix="servescope-bench-compare-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / f"compare-{args.requests}-{args.gaps}.duckdb"
    url = f"duckdb:///{db}"
    if db.exists():
        store = open_store(url)
        ids = runs_table.list_runs(store, limit=50)["run_id"].tolist()[::-1]
        store.dispose()
        print(f"store: reusing {db}")
    else:
        t0 = time.perf_counter()
        ids = generate(url, args.requests, args.gaps)
        print(
            f"store: generated {args.requests:,} requests + {args.requests * args.gaps:,} token "
            f"gaps in 9 runs in {time.perf_counter() - t0:.1f} s ({db.stat().st_size / 1e9:.2f} GB)"
        )

    profile = slo.SloProfile(
        name="interactive-chat", percentile=99, ttft_ms=500, tpot_ms=50, e2e_ms=20000
    )
    th = profile.sql_thresholds()

    def with_store(fn: Callable[[Store], Any]) -> Callable[[], Any]:
        def run() -> Any:
            store = open_store(url)  # like ui.cache_compare: a short-lived store per read
            try:
                return fn(store)
            finally:
                store.dispose()

        return run

    rows: list[tuple[str, float]] = []
    reads: dict[str, Callable[[Store], Any]] = {
        "candidates (picker)": lambda s: runs_table.list_runs(s),
        "SLO profiles": lambda s: slo_profiles.slo_profiles(s),
        "run_aggregates (9 runs)": lambda s: runs_table.run_aggregates(s, ids),
        "slo_attainment (9 runs)": lambda s: request_stats.slo_attainment(s, ids, th),
    }
    results: dict[str, Any] = {}
    for label, fn in reads.items():
        seconds, _ = timed(with_store(fn), args.repeats, before=lambda: clear_rollups(url))
        rows.append((f"{label}, aggregated", seconds))
        seconds, results[label] = timed(with_store(fn), args.repeats)
        rows.append((f"{label}, stored rollups", seconds))
    samples: dict[str, Callable[[Store], Any]] = {
        "request_samples TTFT/TPOT/E2E (9 × ≤5,000)": lambda s: request_rows.request_samples(
            s, ids, 5000
        ),
        "metric_samples ITL (9 × ≤5,000)": lambda s: request_rows.metric_samples(
            s, ids, "itl_ms", 5000
        ),
    }
    for label, fn in samples.items():
        seconds, _ = timed(with_store(fn), args.repeats, before=lambda: clear_rollups(url))
        rows.append((f"{label}, aggregated", seconds))
        seconds, _ = timed(with_store(fn), args.repeats)
        rows.append((f"{label}, stored", seconds))

    def pure() -> Any:
        from ui import compare_charts, compare_tables

        per = compare_views.per_run(
            results["run_aggregates (9 runs)"],
            results["slo_attainment (9 runs)"],
            profile,
            "configuration",
        )
        compare_tables.runs_table(per, profile)
        compare_tables.percentile_table(per)
        compare_tables.capacity_table(compare_views.capacity(per))
        compare_charts.pareto_chart(per)
        compare_charts.latency_vs_load(per, "ttft", 99, 500.0)
        return per

    seconds, per = timed(pure, args.repeats)
    rows.append(("shaping, verdicts, capacity, charts", seconds))

    def boot() -> Any:
        base = np.random.default_rng(0).gamma(4, 25, 5000)
        cand = base * 1.05
        return compare.compare_samples(
            {m: base for m in ("ttft", "tpot", "itl", "e2e")},
            {m: cand for m in ("ttft", "tpot", "itl", "e2e")},
            (50.0, 90.0, 95.0, 99.0),
            n_boot=300,
        )

    seconds, _ = timed(boot, args.repeats)
    rows.append(("bootstrap 4 metrics × 4 pcts (300 reps)", seconds))

    # the page's view model, as ui.cache.compare builds it on a cache miss (one Store per build)
    selection = compare_views.CompareSelection(runs=tuple(ids), distributions=args.distributions)
    build = with_store(lambda s: compare_views.compare_view(s, selection))
    seconds, _ = timed(build, args.repeats, before=lambda: clear_rollups(url))
    rows.append(("view-model builder (9 runs), nothing stored", seconds))
    clear_rollups(url)
    with_store(lambda s: prepare.prepare(s, ids))()
    seconds, _ = timed(build, 1)
    rows.append(("view-model builder, right after prepare (1 build)", seconds))
    seconds, _ = timed(build, args.repeats)
    rows.append(("view-model builder, rollups stored", seconds))

    os.environ["SERVESCOPE_DB"] = url
    # the bench renders the page itself, as a browser would get it
    import streamlit as st  # noqa: TID251
    from streamlit.testing.v1 import AppTest  # noqa: TID251

    page = str(ROOT / "pages" / "compare.py")

    def render() -> float:
        st.cache_data.clear()
        at = AppTest.from_file(page, default_timeout=120)
        at.query_params["runs"] = ",".join(ids)
        at.session_state["compare_distributions"] = args.distributions
        t0 = time.perf_counter()
        at.run()
        elapsed = time.perf_counter() - t0
        assert not at.exception, [e.value for e in at.exception]
        return elapsed

    def refreshed() -> None:
        clear_rollups(url)
        seconds, _ = timed(with_store(lambda s: prepare.prepare(s, ids)), 1)
        refresh_s.append(seconds)

    render()  # imports and first-use costs out of the way
    first = [(clear_rollups(url), render())[1] for _ in range(args.repeats)]
    refresh_s: list[float] = []
    after_refresh = [(refreshed(), render())[1] for _ in range(args.repeats)]
    renders = [render() for _ in range(args.repeats)]
    at = AppTest.from_file(page, default_timeout=120)
    at.query_params["runs"] = ",".join(ids)
    at.session_state["compare_distributions"] = args.distributions
    at.run()
    t0 = time.perf_counter()
    at.run()  # a rerun with warm caches (a widget change)
    warm = time.perf_counter() - t0

    def render_home() -> float:  # Home on the same store: its newest run (1.1M requests)
        st.cache_data.clear()
        home = AppTest.from_file(str(ROOT / "pages" / "home.py"), default_timeout=120)
        t0 = time.perf_counter()
        home.run()
        elapsed = time.perf_counter() - t0
        assert not home.exception, [e.value for e in home.exception]
        return elapsed

    home_first = [(clear_rollups(url), render_home())[1] for _ in range(args.repeats)]
    home_cold = [render_home() for _ in range(args.repeats)]

    print(f"\nCompare page reads, {args.requests:,} requests, median of {args.repeats} (cold):")
    for label, seconds in rows:
        print(f"  {label:<52} {seconds * 1000:9.1f} ms")
    mode = "on" if args.distributions else "off"
    print(f"\nFull page render (AppTest, all 9 runs, CDFs {mode}), median of {args.repeats}:")
    print(f"  {'first view, nothing stored':<52} {statistics.median(first):7.3f} s")
    print(f"  {'prepare of the 9 runs (after ingest)':<52} {statistics.median(refresh_s):7.3f} s")
    print(f"  {'first view after that refresh':<52} {statistics.median(after_refresh):7.3f} s")
    print(
        f"  {'cold view (fresh Streamlit cache, rollups stored)':<52} "
        f"{statistics.median(renders):7.3f} s"
    )
    print(f"  {'rerun with warm Streamlit caches':<52} {warm:7.3f} s")
    print(
        f"\nHome page (newest run, 1.1M requests): first view, nothing stored "
        f"{statistics.median(home_first):.3f} s; cold view {statistics.median(home_cold):.3f} s"
    )
    passing = per[["series", "load", "passed"]].to_dict("records")
    print(
        "\nverdicts: " + json.dumps([[r["series"][-30:], r["load"], r["passed"]] for r in passing])
    )
    for label, values in (
        ("first view", first),
        ("view after refresh", after_refresh),
        ("cold view", renders),
    ):
        target = "met" if statistics.median(values) < 2.0 else "MISSED"
        print(f"target < 2 s, {label}: {target}")
    if not args.keep:
        print(f"(store left in {folder}; delete it when done)")


if __name__ == "__main__":
    main()
