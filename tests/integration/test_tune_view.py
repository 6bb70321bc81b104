"""services.views.tune and store.sweeps on a real DuckDB store holding a sweep stored as the
runner stores one (tests/tune_sweep.py: sweeps, sweep_points, runs with sweep_id,
engine_params and client_params.sweep_point): the newest sweep chosen, its points with their
runs' figures, the recommendation and its explanation in numbers computed here by hand from
the stored requests, the memory guard-rail from the spec, the failed point with its log tail,
the fallback to the runs by sweep_point when ``search`` names no runs; and (slow) a sweep the
real runner stores (``servescope sweep`` of a small spec) builds the same view, whose headline
is what the runner printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from tune_sweep import ERROR, LOG_TAIL, OLD_SWEEP, SWEEP, TPOT, run_real_sweep, store_sweep

from analysis.compare import pareto_front
from errors import InputError
from services.views.tune import TuneSelection, recommendation_for, tune_view
from store import schema
from store import sweeps as sweeps_store
from store.db import Store
from store.lifecycle import open_store


@pytest.fixture(scope="module")
def stored_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The sweep stored once for the tests that only read it."""
    url = f"duckdb:///{tmp_path_factory.mktemp('tune') / 'tune.duckdb'}"
    store_sweep(url)
    return url


@pytest.fixture
def store(stored_url: str) -> Iterator[Store]:
    s = open_store(stored_url)
    yield s
    s.dispose()


def test_an_empty_store_has_no_sweep(tmp_path: Path) -> None:
    s = open_store(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    try:
        view = tune_view(s, TuneSelection())
        assert view.sweeps.empty and view.recommendation is None and view.sweep is None
        assert view.selection == TuneSelection()
        with pytest.raises(InputError, match="no sweep 'nope'"):
            recommendation_for(s, "nope")
    finally:
        s.dispose()


def test_the_reads_decode_the_json_columns(store: Store) -> None:
    listing = sweeps_store.sweep_list(store)
    assert listing["sweep_id"].tolist() == [SWEEP, OLD_SWEEP]  # newest first
    assert listing[["points", "completed", "failed"]].values.tolist() == [[6, 6, 1], [1, 0, 1]]
    record = sweeps_store.sweep_record(store, SWEEP)
    assert record is not None and record["spec"] == {"guard_rails": {"max_memory_fraction": 0.9}}
    assert record["grid"]["max_batch_size"] == [64, 128, 256]
    assert sweeps_store.sweep_record(store, "nope") is None
    points = sweeps_store.sweep_points(store, SWEEP)
    assert len(points) == 7  # c twice
    c = points[points["point_id"] == "c"].iloc[0]
    assert c["params"] == {"max_batch_size": 128, "max_batched_tokens": 2048}
    assert [s["load"] for s in c["search"]] == [4.0, 8.0, 16.0]
    assert c["search"][2] == {
        "load": 16.0,
        "run_id": "sw-new-c-r0-L16",
        "passed": False,
        "ratio": 1.2,
    }
    runs = sweeps_store.sweep_runs(store, SWEEP)
    assert len(runs) == 5 * 3 + 3  # five completed points, c twice, three loads each
    tag = runs.iloc[0]["client_params"]["sweep_point"]
    assert (tag["point_id"], tag["repeat"], tag["params"]["max_batch_size"]) == ("a", 0, 64)


def test_the_view_recommends_and_explains_in_numbers(store: Store) -> None:
    view = tune_view(store, TuneSelection())
    assert view.selection.sweep == SWEEP and view.notice is None
    rec = view.recommendation
    assert rec is not None and rec.best is not None
    assert rec.best.point_id == "c" and rec.best.capacity == pytest.approx(14.2)
    assert rec.headline() == (
        "Recommended: max_batch_size=128 max_batched_tokens=2048 — SLO capacity 14.2 req/s "
        "under interactive-chat (6 points, 1 rejected: memory, 1 failed)"
    )
    # f has the highest capacity but 97 % peak memory against the spec's 90 % cap
    assert [p.point_id for p in rec.rejected] == ["f"]
    assert rec.limits == {"max_memory_fraction": 0.9}
    # P99 TTFT of the 4k–16k bucket at 16 req/s: c 600 × 2 = 1200 ms, d 1000 × 2, a 1500 × 2
    sentences = [e.sentence for e in rec.explanations]
    assert sentences == [
        "max_batch_size 64 → 128 cut P99 TTFT in the 4k–16k bucket by 60 % (at 16 req/s) and "
        "SLO capacity rose from 9 to 14.2 req/s",
        f"max_batch_size 256 → 128: at max_batch_size=256 the engine ran out of memory ({ERROR}); "
        "at 128 SLO capacity is 14.2 req/s",
        "max_batched_tokens 8192 → 2048 cut P99 TTFT in the 4k–16k bucket by 40 % (at 16 req/s) "
        "and SLO capacity rose from 11 to 14.2 req/s",
    ]
    mbt = rec.explanations[2]
    assert (mbt.ttft_from_ms, mbt.ttft_to_ms) == pytest.approx((2000.0, 1200.0))


def test_figures_at_capacity_and_the_pareto_front(store: Store) -> None:
    view = tune_view(store, TuneSelection(sweep=SWEEP))
    pts = view.points.set_index(["point_id", "repeat"])
    assert pts.loc[("c", 0), "at_capacity_run"] == "sw-new-c-r0-L8"  # 16 failed
    assert pts.loc[("f", 0), "at_capacity_run"] == "sw-new-f-r0-L16"
    assert pts.loc[("c", 0), "tokens_per_s_per_user"] == pytest.approx(1000.0 / TPOT["c"])
    assert (view.points["throughput_per_gpu"].dropna() > 0).all() and view.per_gpu_known
    rec = view.recommendation
    assert rec is not None
    eligible = [p for p in rec.points if p.eligible]
    mask = pareto_front(
        [p.throughput_per_gpu or 0.0 for p in eligible],
        [p.tokens_per_s_per_user or 0.0 for p in eligible],
    )
    assert rec.front == tuple(p.point_id for p, m in zip(eligible, mask, strict=True) if m)
    assert rec.front  # someone is on it
    # the search curves: every measured load of every completed point and repeat
    assert len(view.curves) == 18
    c0 = view.curves[(view.curves["point_id"] == "c") & (view.curves["repeat"] == 0)]
    assert c0["ratio"].tolist() == [0.4, 0.7, 1.2]
    assert c0["passed"].tolist() == [True, True, False]


def test_the_failed_point_keeps_its_error_and_log_tail(store: Store) -> None:
    view = tune_view(store, TuneSelection())
    e = view.points[view.points["point_id"] == "e"].iloc[0]
    assert e["status"] == "oom" and e["error"] == ERROR and e["log_tail"] == LOG_TAIL
    rec = view.recommendation
    assert rec is not None and [p.point_id for p in rec.failed] == ["e"]


def test_effects_and_the_chosen_parameter(store: Store) -> None:
    view = tune_view(store, TuneSelection(x="max_batched_tokens"))
    effect = view.effect
    assert effect is not None and effect.param == "max_batched_tokens"
    assert [(v.value, v.at_best) for v in effect.values] == [
        (2048, pytest.approx(14.2)),
        (8192, 11.0),
    ]
    # unknown x → the parameter whose values move capacity most at the best point
    default = tune_view(store, TuneSelection(x="nope"))
    assert default.selection.x == "max_batch_size"  # 9 → 14.2 beats 11 → 14.2
    assert view.params == ("max_batch_size", "max_batched_tokens")


def test_an_unknown_sweep_shows_the_newest_and_an_older_one_can_be_chosen(store: Store) -> None:
    view = tune_view(store, TuneSelection(sweep="nope"))
    assert view.selection.sweep == SWEEP and view.notice and "nope" in view.notice
    old = tune_view(store, TuneSelection.from_params({"sweep": OLD_SWEEP}))
    rec = old.recommendation
    assert rec is not None and rec.best is None
    assert rec.headline() == "No recommendation: no point completed (1 point, 1 failed)"
    assert recommendation_for(store, SWEEP).best.point_id == "c"  # type: ignore[union-attr]


def test_points_whose_search_names_no_runs_find_them_by_sweep_point(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'no-run-ids.duckdb'}"
    store_sweep(url)
    store = open_store(url)
    try:
        _strip_run_ids(store)
        view = tune_view(store, TuneSelection())
    finally:
        store.dispose()
    pts = view.points.set_index(["point_id", "repeat"])
    assert pts.loc[("c", 1), "at_capacity_run"] == "sw-new-c-r1-L8"
    rec = view.recommendation
    assert rec is not None and rec.best is not None and rec.best.point_id == "c"
    assert rec.explanations[2].ttft_change == pytest.approx(-0.4)


def _strip_run_ids(store: Store) -> None:
    sp = schema.sweep_points
    with store.connect() as conn:
        for row in conn.execute(sa.select(sp.c.point_id, sp.c.repeat, sp.c.search)).all():
            stripped = [
                {k: v for k, v in s.items() if k != "run_id"}
                for s in json.loads(row.search or "[]")
            ]
            conn.execute(
                sa.update(sp)
                .where(sp.c.point_id == row.point_id, sp.c.repeat == row.repeat)
                .values(search=json.dumps(stripped))
            )


@pytest.mark.slow
def test_a_sweep_stored_by_the_real_runner_builds_the_view(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'real.duckdb'}"
    done = run_real_sweep(url, tmp_path)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    store = open_store(url)
    try:
        view = tune_view(store, TuneSelection())
        sweep_id = str(view.selection.sweep)
        printed = recommendation_for(store, sweep_id).headline()
        runs = sweeps_store.sweep_runs(store, sweep_id)
    finally:
        store.dispose()
    rec = view.recommendation
    assert rec is not None and len(rec.points) == 2
    # what the runner printed is the page's headline
    assert printed in done.stdout and printed == rec.headline()
    assert printed.startswith("Recommended: max_batch_size=")
    assert rec.limits == {"max_memory_fraction": 0.95}
    completed = view.points[view.points["status"] == "completed"]
    assert len(completed) == 2
    for row in completed.to_dict("records"):
        assert row["at_capacity_run"] and row["tokens_per_s_per_user"] > 0
        assert len(view.curves[view.curves["point_id"] == row["point_id"]]) == row["runs_used"]
    # the runner's runs carry the sweep and the point (what the fallback read matches)
    assert len(runs) == int(completed["runs_used"].sum())
    tags = {
        (r["sweep_point"]["point_id"], r["sweep_point"]["repeat"]) for r in runs["client_params"]
    }
    assert tags == {(str(p), 0) for p in completed["point_id"]}


def test_the_reads_and_the_view_on_either_dialect(store_url: str) -> None:
    store_sweep(store_url)
    s = open_store(store_url)
    try:
        assert sweeps_store.sweep_list(s)["sweep_id"].tolist() == [SWEEP, OLD_SWEEP]
        points = sweeps_store.sweep_points(s, SWEEP)
        assert points["params"].iloc[0] == {"max_batch_size": 64, "max_batched_tokens": 2048}
        rec = tune_view(s, TuneSelection()).recommendation
    finally:
        s.dispose()
    assert rec is not None and rec.best is not None and rec.best.point_id == "c"
    assert rec.explanations[2].ttft_change == pytest.approx(-0.4)


def test_two_capacities_within_the_searchs_precision_are_not_told_apart() -> None:
    from services.views.tune import NOISE, search_noise

    assert search_noise({"load": {"search": {"precision": 0.2}}}) == 0.2
    assert search_noise({"load": {"search": {"precision": 0.01}}}) == NOISE  # never below it
    assert search_noise({"load": {"levels": [1, 2]}}) == NOISE  # fixed levels: no search
    assert search_noise(None) == NOISE
