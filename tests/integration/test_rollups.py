"""Stored per-run rollups (store.rollups, store.run_stats): served while fresh, invalidated by
every write of the run's rows, never served after a racing write, best effort on a lock."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from errors import ConfigError
from store import ingest, request_stats, rollups, run_figures, runs_table
from store.db import Store
from store.lifecycle import open_store


def _requests(run_id: str, ttfts: list[float], start: int = 0) -> pd.DataFrame:
    n = len(ttfts)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": np.arange(start, start + n),
            "sent_at": 1000.0 + np.arange(start, start + n, dtype="float64"),
            "done_at": 1000.5 + np.arange(start, start + n, dtype="float64"),
            "input_tokens": 100,
            "output_tokens": 10,
            "ttft_ms": ttfts,
            "tpot_ms": 5.0,
            "e2e_ms": [t + 45.0 for t in ttfts],
            "status": "ok",
        }
    )


class Counter:
    """A compute function for ``cached_runs`` that counts the runs it was asked for."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.asked: list[list[str]] = []

    def __call__(self, ids: list[str]) -> pd.DataFrame:
        self.asked.append(list(ids))
        return run_figures.compute(self.store, ids)


@pytest.fixture
def store(store_url: str) -> Store:
    s = open_store(store_url)
    for run_id, ttfts in (("a", [10.0, 20.0, 30.0]), ("b", [100.0, 300.0])):
        ingest.add_run(s, {"run_id": run_id, "started_at": 1000.0, "gpu_count": 2})
        ingest.add_requests(s, _requests(run_id, ttfts))
    ingest.add_run(s, {"run_id": "empty"})
    return s


def test_served_from_the_store_until_the_runs_rows_change(store: Store) -> None:
    count = Counter(store)
    first = rollups.cached_runs(store, ["b", "a", "empty"], "t", {}, count)
    assert count.asked == [["b", "a", "empty"]]
    assert first["run_id"].tolist() == ["b", "a"]  # in the order asked; no row for no requests
    again = rollups.cached_runs(store, ["a", "b", "empty"], "t", {}, count)
    assert count.asked == [["b", "a", "empty"]]  # nothing recomputed, not even the empty run
    assert again["run_id"].tolist() == ["a", "b"]
    pd.testing.assert_frame_equal(again.iloc[[1, 0]].reset_index(drop=True), first)
    # other parameters are another rollup
    rollups.cached_runs(store, ["a"], "t", {"x": 1}, count)
    assert count.asked[-1] == ["a"]

    ingest.add_requests(store, _requests("a", [40.0], start=3))  # a's rows change
    third = rollups.cached_runs(store, ["a", "b"], "t", {}, count)
    assert count.asked[-1] == ["a"]  # only the changed run is aggregated again
    assert third.set_index("run_id").loc["a", "requests"] == 4
    assert third.set_index("run_id").loc["a", "ttft_p50_ms"] == pytest.approx(25.0)
    # a's rollups of its older rows ({} and {"x": 1}) went when the new one was kept: the
    # writer only bumped the version
    kept = rollups.stored(store)
    assert len(kept[(kept["run_id"] == "a") & (kept["kind"] == "t")]) == 1
    assert kept.loc[kept["run_id"] == "a", "data_version"].nunique() == 1


def test_token_gaps_and_reimports_and_deletes_invalidate(store: Store) -> None:
    assert run_figures.get(store, ["a"])["itl_n"].tolist() == [0]
    gaps = pd.DataFrame({"run_id": "a", "seq": [0, 0, 1], "idx": [0, 1, 0], "gap_ms": 2.0})
    ingest.add_token_gaps(store, gaps)
    assert run_figures.get(store, ["a"])["itl_n"].tolist() == [3]

    before = int(store.read_df("SELECT data_version FROM runs WHERE run_id = 'a'").iloc[0, 0])
    # re-imported as aggregates only (no rows): the stored summary must not survive
    ingest.replace_runs(store, [ingest.RunRows({"run_id": "a"})])
    after = int(store.read_df("SELECT data_version FROM runs WHERE run_id = 'a'").iloc[0, 0])
    assert after > before
    assert run_figures.get(store, ["a"]).empty  # the old summary is not served…
    kept = rollups.stored(store)
    assert kept.loc[kept["run_id"] == "a", "data_version"].tolist() == [after]  # …and is gone

    run_figures.get(store, ["b"])
    assert "b" in set(rollups.stored(store)["run_id"])
    ingest.delete_run(store, "b")
    assert "b" not in set(rollups.stored(store)["run_id"])


def test_a_result_that_raced_with_a_write_is_never_served(store: Store) -> None:
    def compute_then_write(ids: list[str]) -> pd.DataFrame:
        result = run_figures.compute(store, ids)  # aggregated from the rows before the write
        ingest.add_requests(store, _requests("a", [1000.0], start=10))
        return result

    stale = rollups.cached_runs(store, ["a"], "run_stats", {}, compute_then_write)
    assert stale["requests"].tolist() == [3]
    assert len(rollups.stored(store)) == 1  # kept, but tagged with the version it reflects
    assert run_figures.get(store, ["a"])["requests"].tolist() == [4]  # not served: recomputed


def test_cheap_results_are_not_kept(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESCOPE_ROLLUP_MIN_MS", "60000")
    assert run_figures.get(store, ["a", "b"])["requests"].tolist() == [3, 2]
    assert rollups.stored(store).empty
    monkeypatch.setenv("SERVESCOPE_ROLLUP_MIN_MS", "soon")
    with pytest.raises(ConfigError, match="SERVESCOPE_ROLLUP_MIN_MS='soon'"):
        run_figures.get(store, ["a"])


def test_single_run_reads_keep_whole_runs_only(store: Store) -> None:
    whole = request_stats.bucket_latency(store, ["a"], [50, 500], metrics=("ttft_ms",))
    kinds = rollups.stored(store)
    assert (kinds["kind"] == "bucket_latency").sum() == 1
    # the same read again comes back equal from the store
    pd.testing.assert_frame_equal(
        request_stats.bucket_latency(store, ["a"], [50, 500], metrics=("ttft_ms",)), whole
    )
    # a window, or several runs, are computed each time and not kept
    request_stats.bucket_latency(store, ["a"], [50, 500], since=1000.5, metrics=("ttft_ms",))
    request_stats.bucket_latency(store, ["a", "b"], [50, 500], metrics=("ttft_ms",))
    assert (rollups.stored(store)["kind"] == "bucket_latency").sum() == 1


def test_figures_derive_duration_and_throughput(store: Store) -> None:
    df = runs_table.run_aggregates(store, ["a", "empty"])
    a, empty = df.iloc[0], df.iloc[1]
    # no duration_s and no ended_at: first send (1000.0) → last completion (1002.5)
    assert a["duration_s"] == pytest.approx(2.5)
    assert a["request_throughput"] == pytest.approx(3 / 2.5)
    assert a["output_throughput_per_gpu"] == pytest.approx(30 / 2.5 / 2)
    assert empty["requests"] == 0 and np.isnan(empty["error_rate"])


def test_a_locked_store_still_answers(
    tmp_path: Path, duckdb_lock: Callable[[Path], AbstractContextManager[None]]
) -> None:
    path = tmp_path / "locked.duckdb"
    store = open_store(f"duckdb:///{path}", lock_timeout_s=0.3)
    ingest.add_run(store, {"run_id": "a"})
    ingest.add_requests(store, _requests("a", [10.0, 20.0]))
    with ExitStack() as held:

        def compute_then_lock(ids: list[str]) -> pd.DataFrame:
            result = run_figures.compute(store, ids)
            held.enter_context(duckdb_lock(path))
            return result

        got = rollups.cached_runs(store, ["a"], "run_stats", {}, compute_then_lock)
        assert got["ttft_p50_ms"].tolist() == [15.0]  # answered although it could not be kept
    assert rollups.stored(store).empty
    store.dispose()


def test_db_prepare_keeps_every_runs_summary(
    store: Store, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import cli

    assert cli.main(["db", "--db", store_url, "prepare"]) == 0
    assert "prepared 3 run(s)" in capsys.readouterr().out
    kept = rollups.stored(store)
    assert sorted(kept.loc[kept["kind"] == "run_stats", "run_id"]) == ["a", "b", "empty"]
    assert cli.main(["db", "--db", store_url, "prepare", "a"]) == 0  # already fresh: no-op
    assert len(rollups.stored(store)) == len(kept)


def test_attainment_of_several_profiles_is_kept_from_one_scan(store: Store) -> None:
    loose = {"ttft_base": 1e9, "ttft_per_1k": 0.0, "tpot": 1e9, "e2e": 1e9}
    tight = {"ttft_base": 25.0, "ttft_per_1k": 0.0, "tpot": 1e9, "e2e": 1e9}
    request_stats.prepare_attainment(store, ["a", "b", "missing"], [loose, tight])
    kept = rollups.stored(store)
    assert sorted(kept.loc[kept["kind"] == "slo_attainment", "run_id"]) == ["a", "a", "b", "b"]
    cols = ["run_id", "params", "computed_at"]
    fresh = kept.loc[kept["kind"] == "slo_attainment", cols].reset_index(drop=True)
    # served from what was kept: the same counts a scan gives, and nothing recomputed
    tight_counts = request_stats.slo_attainment(store, ["a", "b"], tight)
    assert tight_counts["ttft_met"].tolist() == [2, 0]  # a: 10, 20 ≤ 25 < 30; b: 100, 300
    assert request_stats.slo_attainment(store, ["a", "b"], loose)["met"].tolist() == [3, 2]
    after = rollups.stored(store)
    after = after.loc[after["kind"] == "slo_attainment", cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(after, fresh)


def test_light_reads_throughput_without_the_percentiles(store: Store) -> None:
    cheap = run_figures.light_stats(
        store, ["a", "b"]
    )  # nothing kept yet: a scan without percentiles
    assert rollups.stored(store).empty
    assert "ttft_p50_ms" not in cheap and cheap["requests"].tolist() == [3, 2]
    full = run_figures.get(store, ["a", "b"])
    kept = run_figures.light_stats(store, ["a", "b"])  # now the kept summaries themselves
    pd.testing.assert_frame_equal(kept, full)
    assert cheap["output_throughput"].tolist() == pytest.approx(full["output_throughput"].tolist())


def test_concurrent_writes_never_leave_a_stale_summary(store: Store) -> None:
    """A writer adds batches to run a while summaries are read (and kept) over and over: every
    summary read counts at least what was committed before the read began, and once writing
    stops the summary is exact — no rollup computed from older rows is ever served."""
    import threading

    batches, size = 40, 25
    committed = [3]  # run a starts with 3 requests
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for b in range(batches):
                ingest.add_requests(store, _requests("a", [5.0] * size, start=100 + b * size))
                committed.append(committed[-1] + size)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    while not done.is_set() or reads < 3:
        before = committed[-1]
        got = int(run_figures.get(store, ["a"])["requests"].iloc[0])
        assert got >= before  # never older than what was committed before the read
        reads += 1
    thread.join()
    assert not errors
    final = 3 + batches * size
    assert int(run_figures.get(store, ["a"])["requests"].iloc[0]) == final
    assert run_figures.get(store, ["a"])["ttft_n"].tolist() == [final]
