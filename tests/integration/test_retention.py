"""``store.retention.compact`` and ``servescope db compact`` on real stores (DuckDB files, and
PostgreSQL through the ``store_url`` fixture): per-bucket aggregates computed by hand (a gauge's
mean, a counter's first value), histogram counts unchanged at bucket-aligned windows,
idempotence, recent rows and runs' windows kept raw, the dry run writing nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import cli
from analysis.histogram_windows import summed_histogram_windows
from errors import ExitCode, InputError
from store import ingest, retention
from store.db import Store
from store.lifecycle import open_store

T0 = 1_700_000_040.0  # a multiple of 60: minute buckets start at T0 + 60 k
NOW = T0 + 3600.0
RAW_FOR = 1800.0  # cutoff = T0 + 1800


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    yield open_store(store_url)


def _engine(store: Store) -> pd.DataFrame:
    df = store.read_df("SELECT target, ts, metric, engine, value FROM engine_samples")
    return df.sort_values(["target", "metric", "ts"]).reset_index(drop=True)


def test_gauge_mean_and_counter_first_value_per_bucket(store: Store) -> None:
    rows = []
    for i in range(180):  # 3 minutes at 1 Hz, all older than the cutoff
        rows.append({"target": "a", "ts": T0 + i, "metric": "kv_cache_usage", "value": i % 7})
        rows.append(
            {"target": "a", "ts": T0 + i, "metric": "generation_tokens_total", "value": 3 * i}
        )
        rows.append({"target": "b", "ts": T0 + i + 0.5, "metric": "requests_running", "value": i})
    for r in rows:
        r["engine"] = "vllm"
    ingest.add_rows(store, "engine_samples", rows)

    report = retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)

    eng = report.tables[0]
    assert (eng.table, eng.rows_before, eng.rows_after, eng.buckets) == (
        "engine_samples",
        540,
        9,
        9,
    )
    df = _engine(store)
    for k in range(3):
        b = T0 + 60 * k
        seconds = range(60 * k, 60 * k + 60)
        got = df.set_index(["target", "metric", "ts"])["value"]
        assert got[("a", "kv_cache_usage", b)] == pytest.approx(sum(i % 7 for i in seconds) / 60)
        assert got[("a", "generation_tokens_total", b)] == 3 * 60 * k  # first value of the bucket
        assert got[("b", "requests_running", b)] == pytest.approx(60 * k + 29.5)
    assert set(df["engine"]) == {"vllm"}


def test_raw_series_split_by_labels_and_gpu_columns_averaged(store: Store) -> None:
    raw = [
        {"target": "a", "ts": T0 + i, "name": name, "labels": labels, "value": v}
        for i in range(60)
        for name, labels, v in (
            ("vllm:num_requests_running", '{"model":"m"}', float(i)),
            ("vllm:num_requests_running", '{"model":"n"}', 2.0 * i),
            ("vllm:request_success_total", '{"model":"m"}', 10.0 + i),
        )
    ]
    ingest.add_rows(store, "engine_raw_samples", raw)
    gpu = [
        {
            "host": "h",
            "gpu_index": 0,
            "ts": T0 + i,
            "gpu_name": "H100",
            "gpu_uuid": "GPU-1",
            "mem_used_bytes": 1e9 * (i % 2),
            "mem_total_bytes": 80e9,
            "util_gpu": float(i),
            "power_w": 300.0,
            "source": "nvml",
        }
        for i in range(60)
    ]
    ingest.add_rows(store, "gpu_samples", gpu)

    retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)

    df = store.read_df("SELECT ts, name, labels, value FROM engine_raw_samples")
    got = {(r.name, r.labels): (r.ts, r.value) for r in df.itertuples()}
    assert got == {
        ("vllm:num_requests_running", '{"model":"m"}'): (T0, pytest.approx(29.5)),
        ("vllm:num_requests_running", '{"model":"n"}'): (T0, pytest.approx(59.0)),
        ("vllm:request_success_total", '{"model":"m"}'): (T0, 10.0),
    }
    g = store.read_df("SELECT * FROM gpu_samples").to_dict("records")
    assert len(g) == 1
    assert g[0]["ts"] == T0 and g[0]["mem_used_bytes"] == pytest.approx(0.5e9)
    assert g[0]["util_gpu"] == pytest.approx(29.5) and g[0]["power_w"] == pytest.approx(300.0)
    assert (g[0]["gpu_name"], g[0]["gpu_uuid"], g[0]["source"]) == ("H100", "GPU-1", "nvml")


def _histogram_rows(seconds: int) -> list[dict[str, object]]:
    """A TTFT histogram scraped at 1 Hz: each second adds i % 3 requests at 0.05 s, one at 0.3 s
    every 5 s; the target restarts (counters reset) at second 200."""
    rows: list[dict[str, object]] = []
    fast = slow = 0
    total = 0.0
    for i in range(seconds):
        if i == 200:
            fast = slow = 0
            total = 0.0
        fast += i % 3
        slow += 1 if i % 5 == 0 else 0
        total += 0.05 * (i % 3) + (0.3 if i % 5 == 0 else 0.0)
        for metric, value in (
            ("ttft_seconds_bucket:0.1", fast),
            ("ttft_seconds_bucket:0.5", fast + slow),
            ("ttft_seconds_bucket:+Inf", fast + slow),
            ("ttft_seconds_count", fast + slow),
            ("ttft_seconds_sum", total),
        ):
            rows.append(
                {"target": "a", "ts": T0 + i, "metric": metric, "engine": "vllm", "value": value}
            )
    return rows


def test_histogram_counts_unchanged_at_bucket_aligned_windows(store: Store) -> None:
    ingest.add_rows(store, "engine_samples", _histogram_rows(600))
    now = T0 + 480 + RAW_FOR  # cutoff T0 + 480: 8 minutes aggregated, 2 raw
    before = summed_histogram_windows(_engine(store), "ttft_seconds", window_s=60, start=T0)

    report = retention.compact(store, now=now, raw_for_s=RAW_FOR, bucket_s=60)

    assert report.tables[0].buckets == 8 * 5
    after_rows = _engine(store)
    assert len(after_rows) == 8 * 5 + 120 * 5
    after = summed_histogram_windows(after_rows, "ttft_seconds", window_s=60, start=T0)
    assert list(after["window_start"]) == list(before["window_start"])
    # windows without a restart keep their counts exactly; the window holding the restart
    # (second 200, inside (180, 240]) loses what was served between its bucket's start and the
    # restart: the aggregate kept only the value at 180 and the (reset) value at 240
    inf_raw = {
        r["ts"]: r["value"] for r in _histogram_rows(600) if r["metric"] == "ttft_seconds_count"
    }
    lost = inf_raw[T0 + 199] - inf_raw[T0 + 180]
    assert lost > 0
    expected = list(before["count"])
    expected[3] -= lost
    assert list(after["count"]) == expected
    assert after["count"].sum() > 0
    # the cumulative series stays monotone between resets once aggregated
    inf = after_rows[after_rows["metric"] == "ttft_seconds_bucket:+Inf"]
    old = inf[inf["ts"] < T0 + 180]["value"].tolist()
    assert old == sorted(old)


def test_idempotent_and_recent_rows_untouched(store: Store) -> None:
    rows = [
        {
            "target": "a",
            "ts": T0 + i,
            "metric": "kv_cache_usage",
            "engine": "sim",
            "value": float(i),
        }
        for i in range(0, 3600, 2)
    ]
    ingest.add_rows(store, "engine_samples", rows)
    first = retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)
    once = _engine(store)

    again = retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)

    assert first.tables[0].buckets == 30 and first.removed == 900 - 30
    assert again.tables[0].buckets == 0 and again.removed == 0
    pd.testing.assert_frame_equal(_engine(store), once)
    recent = once[once["ts"] >= T0 + RAW_FOR]
    assert recent["value"].tolist() == [float(i) for i in range(1800, 3600, 2)]


def test_samples_in_a_runs_window_stay_raw(store: Store) -> None:
    ingest.add_run(
        store,
        {"run_id": "r1", "source": "servescope", "started_at": T0 + 130, "ended_at": T0 + 190},
    )
    rows = [
        {
            "target": "a",
            "ts": T0 + i,
            "metric": "kv_cache_usage",
            "engine": "sim",
            "value": float(i),
        }
        for i in range(600)
    ]
    ingest.add_rows(store, "engine_samples", rows)

    retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)

    ts = _engine(store)["ts"].tolist()
    kept = [T0 + i for i in range(120, 240)]  # the buckets [120, 180) and [180, 240) overlap r1
    assert [t for t in ts if T0 + 120 <= t < T0 + 240] == kept
    assert [t for t in ts if t < T0 + 120 or t >= T0 + 240] == [
        T0 + 60 * k for k in (0, 1, *range(4, 10))
    ]


def test_a_run_without_end_keeps_everything_after_its_start(store: Store) -> None:
    ingest.add_run(store, {"run_id": "live", "source": "servescope", "started_at": T0 + 300})
    rows = [
        {"target": "a", "ts": T0 + i, "metric": "requests_running", "engine": "sim", "value": 1.0}
        for i in range(600)
    ]
    ingest.add_rows(store, "engine_samples", rows)

    report = retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)

    assert report.tables[0].buckets == 5
    assert len(_engine(store)) == 5 + 300


def test_dry_run_writes_nothing(store: Store) -> None:
    rows = [
        {"target": "a", "ts": T0 + i, "metric": "kv_cache_usage", "engine": "sim", "value": 1.0}
        for i in range(300)
    ]
    ingest.add_rows(store, "engine_samples", rows)
    dry = retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60, dry_run=True)
    assert (dry.tables[0].rows_before, dry.tables[0].rows_after) == (300, 5)
    assert len(_engine(store)) == 300
    real = retention.compact(store, now=NOW, raw_for_s=RAW_FOR, bucket_s=60)
    assert real.tables[0].rows_after == dry.tables[0].rows_after


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"bucket_s": 0.5}, "whole number of seconds"),
        ({"raw_for_s": -1.0}, "raw span"),
        ({"tables": ("requests",)}, "cannot compact requests"),
    ],
)
def test_bad_arguments_refused(tmp_path: Path, kwargs: dict[str, object], fragment: str) -> None:
    s = open_store(f"duckdb:///{tmp_path / 's.duckdb'}")
    with pytest.raises(InputError, match=fragment):
        retention.compact(s, now=NOW, **kwargs)  # type: ignore[arg-type]


def test_db_compact_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"duckdb:///{tmp_path / 's.duckdb'}"
    s = open_store(url)
    old = [
        {"target": "a", "ts": T0 + i, "metric": "kv_cache_usage", "engine": "sim", "value": 1.0}
        for i in range(120)
    ]
    ingest.add_rows(s, "engine_samples", old)
    s.dispose()

    assert (
        cli.main(["db", "--db", url, "compact", "--raw-for", "1h", "--bucket", "1m", "--dry-run"])
        == 0
    )
    out = capsys.readouterr().out
    assert "would compact" in out and "dry run: nothing was written" in out
    assert "engine_samples" in out and "120" in out

    assert cli.main(["db", "--db", url, "compact", "--raw-for", "1h"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "engine_samples" in x)
    assert line.split()[1:] == ["120", "2", "2"]

    assert cli.main(["db", "--db", url, "compact", "--bucket", "500ms"]) == ExitCode.ERROR
    assert "whole number of seconds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["db", "--db", url, "compact", "--raw-for", "two days"])
    assert exc.value.code == 2


def test_watch_compactor_runs_beside_a_writing_watcher(tmp_path: Path) -> None:
    """``watch --retain-raw`` compacts on its own thread while the watcher's background writer
    keeps writing to the same DuckDB file: the old rows are aggregated, every new row is stored."""
    import time

    from services.commands.watch import Compactor
    from store.ingest import BufferedWriter

    s = open_store(f"duckdb:///{tmp_path / 's.duckdb'}")
    now = time.time()
    old_start = (now - 7200) // 60 * 60
    old = [
        {
            "target": "a",
            "ts": old_start + i,
            "metric": "kv_cache_usage",
            "engine": "sim",
            "value": 1.0,
        }
        for i in range(600)
    ]
    ingest.add_rows(s, "engine_samples", old)
    notes: list[str] = []
    writer = BufferedWriter(s, flush_interval_s=0.05, background=True)
    compactor = Compactor(s, raw_for_s=3600, bucket_s=60, every_s=0.1, on_note=notes.append)
    compactor.start()
    try:
        for i in range(40):
            writer.add(
                "engine_samples",
                [
                    {
                        "target": "a",
                        "ts": now + i,
                        "metric": "kv_cache_usage",
                        "engine": "sim",
                        "value": 2.0,
                    }
                ],
            )
            time.sleep(0.02)
    finally:
        compactor.stop()
        writer.close()
    assert notes == []
    assert compactor.runs >= 2 and compactor.removed == 600 - 10
    df = _engine(s)
    assert df[df["ts"] < now]["ts"].tolist() == [old_start + 60 * k for k in range(10)]
    assert df[df["ts"] >= now]["value"].tolist() == [2.0] * 40


def test_watch_refuses_a_bad_downsample_bucket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"duckdb:///{tmp_path / 's.duckdb'}"
    argv = ["watch", "--db", url, "--metrics", "http://127.0.0.1:9/metrics", "--duration", "1s"]
    assert cli.main([*argv, "--downsample", "1.5s"]) == ExitCode.ERROR
    assert "--downsample must be a whole number of seconds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--retain-raw", "a week"])
    assert exc.value.code == 2
