"""Plan on a real DuckDB store: GPU prices and saved plans (store.plans), the plan of a store
holding a measured sim run (services.views.plan: "measured" with its source and the model's
error beside it, the rest "model"), lengths taken from a stored run, and ``servescope plan``'s
bad input (one error line, exit 2, nothing stored)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from errors import InputError
from services.commands import demo
from services.views import plan
from store import plans as plans_store
from store.db import Store
from store.lifecycle import open_store

ENGINE = demo.DemoEngine(
    "plan", "H100-SXM-80GB", "llama-3.1-8b", "plan engine", {"max_batch_size": 4}
)
SERVESCOPE = Path(sys.executable).parent / "servescope"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"duckdb:///{tmp_path / 'plan.duckdb'}")
    try:
        yield s
    finally:
        s.dispose()


@pytest.fixture(scope="module")
def measured_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with a real sim run series (concurrency 1 and 4) of llama-3.1-8b on an H100."""
    url = f"duckdb:///{tmp_path_factory.mktemp('plan') / 'measured.duckdb'}"
    s = open_store(url)
    try:
        demo.run_demo(
            s,
            engines=[ENGINE],
            levels=[1, 4],
            requests_per_stream=3,
            max_tokens=16,
            progress=False,
        )
    finally:
        s.dispose()
    return url


# --- store.plans ---------------------------------------------------------------------------------


def test_prices_are_validated_and_replaced(store: Store) -> None:
    assert plans_store.set_price(store, "H100-SXM-80GB", "2.49", note="on demand") == 2.49
    assert plans_store.get_price(store, "H100-SXM-80GB") == 2.49
    plans_store.set_price(store, "H100-SXM-80GB", 1.99)
    assert plans_store.prices(store) == {"H100-SXM-80GB": 1.99}
    for bad in (0, -1, "nan", "inf", "x", None, True):
        with pytest.raises(InputError, match="not a price"):
            plans_store.set_price(store, "L4-24GB", bad)
    with pytest.raises(InputError, match="unknown GPU 'B999'"):
        plans_store.set_price(store, "B999", 2.0)
    assert list(plans_store.list_prices(store)["gpu"]) == ["H100-SXM-80GB"]
    assert plans_store.get_price(store, "L4-24GB") is None
    assert plans_store.delete_price(store, "H100-SXM-80GB")
    assert plans_store.prices(store) == {}


def test_saved_plans_round_trip_by_name(store: Store) -> None:
    spec = plan.PlanSpec(model="llama-3.1-70b", peak_qps=40, avg_qps=15, gpus=("L4-24GB",))
    plans_store.save_plan(store, "q3 review", spec.to_json())
    assert plan.PlanSpec.from_json(plans_store.load_plan(store, "q3 review")) == spec
    changed = plan.PlanSpec(model="llama-3.1-8b", peak_qps=5, avg_qps=1)
    plans_store.save_plan(store, "q3 review", changed.to_json())
    assert list(plans_store.list_plans(store)["name"]) == ["q3 review"]
    assert plan.PlanSpec.from_json(plans_store.load_plan(store, "q3 review")) == changed
    with pytest.raises(InputError, match="no saved plan 'nope'; saved: q3 review"):
        plans_store.load_plan(store, "nope")
    with pytest.raises(InputError, match="not a name"):
        plans_store.save_plan(store, "  ", spec.to_json())
    with pytest.raises(InputError, match="not a JSON object"):
        plans_store.save_plan(store, "x", "[1]")
    assert plans_store.delete_plan(store, "q3 review")
    assert not plans_store.delete_plan(store, "q3 review")


# --- plan_view -----------------------------------------------------------------------------------


def test_an_empty_store_plans_from_the_model_with_costs(store: Store) -> None:
    plans_store.set_price(store, "H100-SXM-80GB", 2.0)
    spec = plan.PlanSpec(
        model="llama-3.1-8b",
        peak_qps=20,
        avg_qps=10,
        gpus=("H100-SXM-80GB",),
        tps=(1, 2),
        precisions=("fp16",),
        headroom=0.25,
    )
    view = plan.plan_view(store, spec)
    assert view.measurements == ()
    assert {o.label for o in view.options} == {"model"}
    for o in view.options:
        assert o.capacity_rps is not None and o.capacity_rps > 0
        assert o.replicas == math.ceil(20 * 1.25 / o.capacity_rps)
        assert o.gpus is not None and o.cost_per_hour is not None
        assert o.gpus == o.replicas * o.tp
        assert o.cost_per_hour == pytest.approx(o.gpus * 2.0)
        assert o.cost_per_1m_output == pytest.approx(o.cost_per_hour / (10 * 3600 * 200) * 1e6)
        assert o.cost_per_1m_total == pytest.approx(o.cost_per_hour / (10 * 3600 * 1200) * 1e6)
    assert view.best is not None and view.best.cost_per_hour == min(
        o.cost_per_hour or math.inf for o in view.options
    )
    assert [(m.tp, m.precision) for m in view.memory] == [(1, "fp16"), (2, "fp16")]
    table = plan.options_table(view)
    assert list(table["From"]) == ["model", "model"]


def test_a_model_too_big_for_the_gpu_does_not_fit_and_says_why(store: Store) -> None:
    spec = plan.PlanSpec(
        model="llama-3.1-70b",
        peak_qps=5,
        avg_qps=1,
        gpus=("L4-24GB",),
        tps=(1,),
        precisions=("fp16", "int4"),
    )
    view = plan.plan_view(store, spec)
    by = {o.precision: o for o in view.options}
    assert by["fp16"].label == "does not fit" and by["fp16"].gpus is None
    assert by["fp16"].note.startswith("weights: 131.4 GiB at FP16/BF16")
    assert by["int4"].label == "does not fit"  # 33.9 GiB of INT4 weights > 0.9 × 22.5 GiB
    assert view.best is None
    assert plan.headline(view) == "No option serves this load: see why below."


def test_unknown_names_are_input_errors(store: Store) -> None:
    for spec, message in (
        (plan.PlanSpec(model="gpt-9"), "unknown model 'gpt-9'"),
        (plan.PlanSpec(gpus=("B999",)), "unknown GPU 'B999'"),
        (plan.PlanSpec(slo="fast"), "unknown SLO profile 'fast'"),
        (plan.PlanSpec(lengths="run:missing"), "no run 'missing'"),
        (plan.PlanSpec(lengths="metrics:http://x/metrics"), "no prompt/generation token"),
    ):
        with pytest.raises(InputError, match=message):
            plan.plan_view(store, spec)
        view = plan.page_view(store, plan.PlanSelection(spec=spec))
        assert view.problem is not None and message in view.problem


def test_a_measured_run_series_is_labelled_measured_with_the_model_error(
    measured_url: str,
) -> None:
    s = open_store(measured_url)
    try:
        spec = plan.PlanSpec(
            model="llama-3.1-8b",
            peak_qps=30,
            avg_qps=10,
            slo="batch-summarisation",
            gpus=("H100-SXM-80GB", "L4-24GB"),
            tps=(1,),
            precisions=("fp16",),
            lengths="run:demo-plan-c4",
        )
        view = plan.plan_view(s, spec)
    finally:
        s.dispose()
    assert view.lengths is not None and view.lengths.source.startswith("run demo-plan-c4")
    measured = [o for o in view.options if o.label == "measured"]
    assert len(measured) == 1
    m = measured[0]
    assert (m.gpu, m.tp, m.precision) == ("H100-SXM-80GB", 1, "fp16")
    assert m.config.startswith("sim · llama-3.1-8b · max_batch_size=4")
    assert m.source == "runs demo-plan-c1, demo-plan-c4"
    # closed-loop runs: the request throughput at the highest concurrency meeting the SLO
    assert m.capacity_rps is not None and m.capacity_rps > 0
    assert "request throughput at concurrency 4" in m.note
    assert m.predicted_rps is not None and m.predicted_rps > 0
    assert m.error == pytest.approx((m.predicted_rps - m.capacity_rps) / m.capacity_rps)
    assert m.replicas == math.ceil(30 * 1.2 / m.capacity_rps)
    other = [o for o in view.options if o.gpu == "L4-24GB"]
    assert [o.label for o in other] == ["model"]
    assert other[0].error is None and other[0].measured_rps is None
    table = plan.options_table(view)
    row = table[table["From"] == "measured"].iloc[0]
    assert row["Source"] == "runs demo-plan-c1, demo-plan-c4"
    assert row["Error"] == pytest.approx(m.error)


# --- the command ---------------------------------------------------------------------------------


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SERVESCOPE), "plan", "--db", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


BASE = (
    "--model",
    "llama-3.1-8b",
    "--peak-qps",
    "40",
    "--avg-qps",
    "15",
    "--gpu",
    "H100-SXM-80GB",
    "--tp",
    "1",
    "2",
    "--precision",
    "fp16",
)


def test_the_command_prints_the_plan_and_saves_it(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'cli.duckdb'}"
    done = _cli(url, "price", "H100-SXM-80GB", "2.5")
    assert done.returncode == 0, done.stderr
    done = _cli(
        url,
        *BASE,
        "--input-tokens",
        "1000",
        "--output-tokens",
        "200",
        "--slo",
        "interactive-chat",
        "--save",
        "peak",
    )
    assert done.returncode == 0, done.stderr
    assert "H100-SXM-80GB" in done.stdout and " model " in done.stdout
    assert "saved plan 'peak'" in done.stdout
    shown = _cli(url, "show", "peak")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1:] == done.stdout.splitlines()[:-1]
    listed = _cli(url, "list")
    assert listed.stdout.startswith("peak ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((*BASE[:6], "--model", "gpt-9"), "unknown model 'gpt-9'"),
        (("--model", "llama-3.1-8b", "--peak-qps", "-1", "--avg-qps", "1"), "peak QPS is -1"),
        (("--model", "llama-3.1-8b", "--peak-qps", "4", "--avg-qps", "5"), "above the peak"),
        ((*BASE, "--gpu", "B999"), "unknown GPU 'B999'"),
        ((*BASE, "--slo", "fast"), "unknown SLO profile 'fast'"),
        ((*BASE, "--precision", "fp3"), "precision fp3"),
        (("price", "H100-SXM-80GB", "0"), "not a price"),
        (("price", "B999", "2"), "unknown GPU 'B999'"),
    ],
)
def test_bad_input_is_one_error_line_exit_2_and_stores_nothing(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    url = f"duckdb:///{tmp_path / 'bad.duckdb'}"
    done = _cli(url, *args, "--save", "x") if args[0] != "price" else _cli(url, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("servescope: error: ") and message in lines[0]
    assert all(line.startswith("  hint: ") for line in lines[1:])
    s = open_store(url)
    try:
        assert plans_store.list_plans(s).empty
        assert plans_store.prices(s) == {}
    finally:
        s.dispose()


def test_lengths_from_a_watched_engine_are_its_length_histograms(measured_url: str) -> None:
    """The demo scraped the sim's /metrics during its runs: the growth of its prompt/output
    length histograms' _sum over their _count (finished requests only) is the plan's lengths.
    (The token counters would also count requests still running at either end of the watch:
    their ratio can exceed max_tokens.)"""
    from store import sample_series

    s = open_store(measured_url)
    try:
        targets = sample_series.last_sample_times(s)
        target = str(targets[targets["kind"] == "engine"]["key"].iloc[0])
        series = sample_series.engine_series(
            s, since=-1e18, metrics=plan.LENGTH_HISTOGRAM_SERIES, targets=[target]
        )
        view = plan.plan_view(s, plan.PlanSpec(lengths=f"metrics:{target}", gpus=("L4-24GB",)))
    finally:
        s.dispose()
    growth = {
        m: float(g["value"].iloc[-1] - g["value"].iloc[0]) for m, g in series.groupby("metric")
    }
    assert view.lengths is not None
    finished = growth["prompt_length_tokens_count"]
    assert finished >= 1
    assert view.lengths.source == (
        f"metrics {target} ({finished:.0f} finished requests, length histograms)"
    )
    assert view.lengths.input_mean == pytest.approx(growth["prompt_length_tokens_sum"] / finished)
    assert view.lengths.output_mean == pytest.approx(
        growth["output_length_tokens_sum"] / growth["output_length_tokens_count"]
    )
    assert 1 <= view.lengths.output_mean <= 16  # the demo's max_tokens
    # a P99 from buckets is interpolated inside its bucket: 16 lies in vLLM's (10, 20]
    assert view.lengths.output_p99 is not None and 10 <= view.lengths.output_p99 <= 20


def test_a_counter_reset_counts_from_zero(store: Store) -> None:
    """An engine restarted mid-watch: its counters drop to a small value and grow again."""
    import pandas as pd

    from store import ingest

    target = "http://gw/vllm/metrics"
    series = {
        "prompt_tokens_total": [100.0, 300.0, 50.0, 250.0],  # +200, reset +50, +200 = 450
        "generation_tokens_total": [10.0, 30.0, 5.0, 25.0],  # +20, +5, +20 = 45
        "requests_finished_total": [1.0, 3.0, 1.0, 3.0],  # +2, +1, +2 = 5
    }
    ingest.add_rows(
        store,
        "engine_samples",
        pd.DataFrame(
            [
                {"target": target, "ts": 1000.0 + i, "metric": m, "engine": "vllm", "value": v}
                for m, values in series.items()
                for i, v in enumerate(values)
            ]
        ),
    )
    lengths = plan.resolve_lengths(store, plan.PlanSpec(lengths=f"metrics:{target}"))
    assert (lengths.input_mean, lengths.output_mean) == (90.0, 9.0)
    assert lengths.source == f"metrics {target} (5 finished requests)"
