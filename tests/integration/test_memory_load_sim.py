"""Memory vs load end to end: ``servescope sim`` (a child process, as the demo runs it) with a KV
cache small enough that preemption starts at a known concurrency, measured by the real load
generator at four levels into a real DuckDB store; then the view: the measured knee lies between
the last clean and the first preempting level, the predicted line is ``perf_model.
kv_capacity_tokens`` of the sim's deployment, and the predicted KV usage matches the tokens the
stored requests held, computed here by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from analysis import perf_model
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from errors import ConfigError
from services.commands.demo import DemoEngine, running_sim
from services.views.memory import MemorySelection, memory_load_view
from sim.engine import EngineConfig
from store import ingest
from store.db import Store
from store.lifecycle import open_store

GPU, MODEL = "A100-SXM-80GB", "llama-3.1-8b"
#: Fixed lengths: a sequence holds at most 256 + 128 tokens (24 blocks of 16).
INPUT, OUTPUT, BLOCK = 256, 128, 16
WORKLOAD = {"name": "fixed-256-128", "input_tokens": INPUT, "output_tokens": OUTPUT}
#: About 150 blocks of KV: 4 sequences never fill it (4 × 24 = 96 blocks); 12 prompts alone
#: need 12 × 16 = 192 blocks, so 12 streams must preempt.
TARGET_TOKENS = 2400
LEVELS = (2, 4, 12, 24)
CLEAN, PREEMPTING = (2, 4), (12, 24)


def _fraction() -> float:
    """The smallest kv_memory_fraction (in 0.001 steps) whose KV capacity, by the performance
    model, holds TARGET_TOKENS: the sim's KV cache then is exactly that capacity."""
    for thousandths in range(100, 1000):
        try:
            config = EngineConfig.from_names(GPU, MODEL, kv_memory_fraction=thousandths / 1000)
        except ConfigError:
            continue  # the weights do not fit yet
        if perf_model.kv_capacity_tokens(config.deployment()) >= TARGET_TOKENS:
            return thousandths / 1000
    raise AssertionError("no kv_memory_fraction gives the target capacity")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, float]]:
    fraction = _fraction()
    params: dict[str, object] = {"kv_memory_fraction": fraction, "max_batch_size": 64}
    engine = DemoEngine("smallkv", GPU, MODEL, "a small KV cache", {**params, "time_scale": 5})
    store = open_store(f"duckdb:///{tmp_path_factory.mktemp('load') / 'store.duckdb'}")
    try:
        with running_sim(engine) as url:
            for c in LEVELS:
                config = BenchConfig(
                    endpoint=url,
                    workload_spec=WORKLOAD,
                    concurrency=(c,),
                    requests=6 * c,
                    ignore_eos=True,
                    seed=3,
                    run_id="kv",  # the level is appended: kv-c2, kv-c4, …
                    name="small kv",
                    engine_params=params,
                    gpu_name=GPU,
                    gpu_count=1,
                    gpu=False,
                    collect_interval_s=0.25,
                )
                run_benchmark(config, store, progress=False)
        yield store, fraction
    finally:
        store.dispose()


def _at(points: pd.DataFrame, load: float, column: str) -> float:
    return float(points[points["load"] == load][column].iloc[0])


def test_the_measured_knee_lies_between_the_clean_and_the_preempting_levels(
    measured: tuple[Store, float],
) -> None:
    store, _ = measured
    ids = tuple(f"kv-c{c}" for c in reversed(LEVELS))  # any order: the view sorts by load
    view = memory_load_view(store, MemorySelection(series=ids))
    assert view.kind == "concurrency" and view.enough and not view.differing
    points = view.points
    assert list(points["load"]) == [float(c) for c in LEVELS]
    for c in CLEAN:
        assert _at(points, float(c), "preemptions") == 0
    for c in PREEMPTING:
        assert _at(points, float(c), "preemptions") > 0
        per_1k = 1000 * _at(points, float(c), "preemptions") / _at(points, float(c), "requests")
        assert _at(points, float(c), "preemptions_per_1k") == pytest.approx(per_1k)
    assert _at(points, 24.0, "kv_peak") > _at(points, 2.0, "kv_peak")
    assert _at(points, 24.0, "kv_p95") <= _at(points, 24.0, "kv_peak")
    knee = view.measured_knee
    assert knee is not None and knee.load is not None
    assert (knee.last_clean, knee.first_preempting) == (4.0, 12.0)
    assert 4.0 <= knee.load <= 12.0


def test_the_prediction_is_the_performance_models_capacity(
    measured: tuple[Store, float],
) -> None:
    store, fraction = measured
    view = memory_load_view(store, MemorySelection(series=tuple(f"kv-c{c}" for c in LEVELS)))
    config = EngineConfig.from_names(GPU, MODEL, kv_memory_fraction=fraction, max_batch_size=64)
    capacity = perf_model.kv_capacity_tokens(config.deployment())
    assert view.prediction.capacity_tokens == capacity
    assert view.prediction.max_batch_size == 64 and view.prediction.block_size == BLOCK
    # by hand from the stored requests: held = Σ O (I + O / 2) / Σ O + block / 2
    requests = store.read_df(
        "SELECT run_id, input_tokens, output_tokens FROM requests WHERE status = 'ok'"
    )
    for c in LEVELS:
        mine = requests[requests["run_id"] == f"kv-c{c}"]
        o, i = mine["output_tokens"].astype(float), mine["input_tokens"].astype(float)
        held = float((o * (i + o / 2)).sum() / o.sum()) + BLOCK / 2
        point = view.points[view.points["load"] == c].iloc[0]
        assert point["held_tokens"] == pytest.approx(held)
        assert point["predicted_kv"] == pytest.approx(c * held / capacity)
    weights = view.points["requests"].astype(float)
    mean_held = float((view.points["held_tokens"] * weights).sum() / weights.sum())
    assert view.predicted_knee == pytest.approx(capacity / mean_held)
    # the model agrees with the measurement: preemption starts between 4 and 12 streams
    assert view.predicted_knee is not None and 4.0 < view.predicted_knee < 12.0


def test_runs_like_one_run_form_its_series(measured: tuple[Store, float]) -> None:
    store, _ = measured
    view = memory_load_view(store, MemorySelection(run_id="kv-c4"))
    assert view.like == tuple(f"kv-c{c}" for c in LEVELS)
    assert view.points.empty  # the page draws the series only once it is asked for


def test_a_gpu_outside_the_catalogue_has_no_prediction(measured: tuple[Store, float]) -> None:
    store, _ = measured
    for c in LEVELS:
        ingest.update_run(store, f"kv-c{c}", gpu_name="Mystery GPU")
    try:
        view = memory_load_view(store, MemorySelection(series=("kv-c2", "kv-c12")))
    finally:
        for c in LEVELS:
            ingest.update_run(store, f"kv-c{c}", gpu_name=GPU)
    assert view.prediction.capacity_tokens is None
    assert view.prediction.note == "no prediction: GPU/model not in the catalogue"
    assert view.predicted_knee is None and view.points["predicted_kv"].isna().all()
    assert view.measured_knee is not None and view.measured_knee.load is not None


def test_series_figures_keep_the_order_asked_and_skip_unknown_runs(
    measured: tuple[Store, float],
) -> None:
    from store import run_series

    store, _ = measured
    figures = run_series.series_figures(store, [f"kv-c{c}" for c in LEVELS] + ["ghost"])
    assert list(figures["run_id"]) == [f"kv-c{c}" for c in LEVELS]
    assert (figures["requests"] == [6 * c for c in LEVELS]).all()
    assert pd.Series(figures["since"] < figures["until"]).all()
