"""Store size of a week-long ``servescope watch`` of 4 vLLM targets at 1 Hz, raw vs compacted.

Each scrape's rows are those the watcher writes for the real vLLM capture in
``tests/fixtures/vllm/*.prom`` (parsed by ``collectors.prometheus_text.parse``, turned into rows by
``collectors.watch.ScrapeSource.rows`` with the default ``--raw engine``): 199 ``engine_samples``
and 317 ``engine_raw_samples`` rows per target and scrape. Every scrape repeats them with the
counters advancing (names ``store.retention`` treats as counters grow by a per-series step each
second) and the gauges varying, and keeps every histogram bucket row: the worst case of an
engine whose histograms move every second.

Time compression: a simulated day is ``--day-s`` seconds of 1 Hz scrapes (default 600, i.e. a
compression of 144). Two DuckDB files get the same rows day by day: one never compacted, one
compacted ``--parts`` times a day (default 4: a part stands for 6 real hours)
with ``--raw-for`` one simulated day and 60 s buckets (what ``servescope db compact --raw-for 24h
--bucket 1m`` keeps). Rows per day are linear in time both raw (one per second) and aggregated
(one per minute), so the real figures are the measured file sizes times the compression (an
overestimate by the compression times DuckDB's fixed per-file overhead, a few MiB). DuckDB does
not shrink a file after a delete: the free blocks a compaction leaves are reused by the next
inserts, so the compacted file stops growing at about one raw day plus one part.

    .venv/bin/python bench/watch_store_size.py [--days 7] [--targets 4] [--day-s 600]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.prometheus_text import parse
from collectors.watch import ScrapeSource
from store import ingest, retention
from store.db import Store
from store.lifecycle import open_store

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm"
T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC, a multiple of 60
REAL_DAY_S = 86_400


def scrape_rows(target: str) -> dict[str, pd.DataFrame]:
    """One scrape's rows of the vLLM capture for ``target`` (ts 0)."""
    capture = sorted(FIXTURES.glob("*.prom"))[0]
    rows = ScrapeSource(target).rows(parse(capture.read_text()), 0.0)
    return {table: pd.DataFrame(r) for table, r in rows.items()}


def day_frame(
    one: pd.DataFrame, name_col: str, start: float, seconds: int, day: int
) -> pd.DataFrame:
    """``one`` (a scrape's rows) repeated at 1 Hz from ``start``; counters advance, gauges vary."""
    n = len(one)
    rng = np.random.default_rng(day)
    ticks = np.arange(seconds, dtype="float64")
    frame = one.loc[np.tile(np.arange(n), seconds)].reset_index(drop=True)
    frame["ts"] = start + np.repeat(ticks, n)
    counter = one[name_col].str.endswith(retention.COUNTER_SUFFIXES) | one[name_col].str.contains(
        "_bucket:", regex=False
    )
    step = np.where(counter, 1.0 + np.arange(n) % 5, 0.0)
    elapsed = (day * seconds + ticks)[:, None]
    values = one["value"].to_numpy(dtype="float64")[None, :] + elapsed * step[None, :]
    gauges = rng.random((seconds, n)) * ~counter.to_numpy()[None, :]
    frame["value"] = (values + gauges).ravel()
    return frame


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def rows(store: Store) -> int:
    total = 0
    for table in retention.TABLES:
        total += int(store.read_df(f"SELECT COUNT(*) AS n FROM {table}")["n"].iloc[0])
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--day-s", type=int, default=600, help="seconds of 1 Hz scrapes per day")
    ap.add_argument(
        "--parts", type=int, default=4, help="compactions per simulated day (default 4)"
    )
    args = ap.parse_args(argv)
    factor = REAL_DAY_S / args.day_s
    per_target = [scrape_rows(f"http://engine-{i}:8000") for i in range(args.targets)]
    per_scrape = sum(len(f) for t in per_target for f in t.values())
    with tempfile.TemporaryDirectory() as tmp:
        raw_path, cmp_path = Path(tmp) / "raw.duckdb", Path(tmp) / "compacted.duckdb"
        raw_store = open_store(f"duckdb:///{raw_path}")
        cmp_store = open_store(f"duckdb:///{cmp_path}")
        print(
            f"{args.targets} targets at 1 Hz, {per_scrape} rows per scrape round "
            f"(vLLM capture); a day simulated as {args.day_s} s (compression {factor:g}); "
            f"compacted {args.parts}x a day: raw for 1 day, 60 s buckets; real = file size "
            f"x {factor:g}"
        )
        print(
            f"{'day':>3} {'raw rows':>11} {'raw MiB':>8} {'cmp rows':>10} {'cmp MiB':>8} "
            f"{'real raw GiB':>13} {'real cmp GiB':>13} {'compact s':>9}"
        )
        started = time.perf_counter()
        part_s = args.day_s // args.parts
        for day in range(args.days):
            compact_s = 0.0
            for part in range(args.parts):
                start = T0 + day * args.day_s + part * part_s
                for tables in per_target:
                    for table, one in tables.items():
                        name_col = "metric" if table == "engine_samples" else "name"
                        frame = day_frame(one, name_col, start, part_s, day * args.parts + part)
                        ingest.add_rows(raw_store, table, frame)
                        ingest.add_rows(cmp_store, table, frame)
                t = time.perf_counter()
                retention.compact(cmp_store, now=start + part_s, raw_for_s=args.day_s, bucket_s=60)
                compact_s += time.perf_counter() - t
            raw_store.dispose()
            cmp_store.dispose()
            raw_b, cmp_b = size(raw_path), size(cmp_path)
            print(
                f"{day + 1:>3} {rows(raw_store):>11,} {raw_b / 2**20:>8.1f} "
                f"{rows(cmp_store):>10,} {cmp_b / 2**20:>8.1f} {raw_b * factor / 2**30:>13.2f} "
                f"{cmp_b * factor / 2**30:>13.2f} {compact_s:>9.2f}"
            )
        print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
