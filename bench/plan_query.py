"""Plan page benchmark: how long one planning query takes (target < 50 ms).

Generates a DuckDB store shaped like ``servescope demo``'s output — 3 simulated engines of
llama-3.1-8b (two on an H100, one on an A100) × concurrency 1 / 8 / 32, ``max(12, 6 ×
concurrency)`` requests per run, latencies that meet interactive-chat at the low levels and miss
it at 32 — plus two GPU prices and a saved plan. Then times
``services.views.plan.plan_view`` the way the page runs it (one store held open for the build,
``services.store_session.short_lived_store``'s ``held_open``):

  * **cold**: both memos cleared before each query — the performance model's per (deployment,
    workload, SLO) (``analysis.plan.predicted_capacity``) and the measured capacities per
    (store, model, GPUs, profile, runs' fingerprint) (``services.views.plan.memo_measured``):
    every run's figures and SLO attainment read, every option's capacity computed;
  * **warm**: the same query again (memos kept: one fingerprint read, ``store.plans.plan_state``);
  * **new demand**: a different peak, average and headroom each time (what a planner does on
    the page): the capacities come from the memos, replicas and costs are recomputed;
  * the model part alone (``analysis.plan.plan_options`` on the view's inputs, memo cleared).

Each for the default plan (llama-3.1-8b, every catalogue GPU, TP 1/2/4/8, FP16/INT8/INT4) and
for llama-3.1-70b; prints the medians of ``--repeats`` queries.

Usage: python bench/plan_query.py [--repeats 30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import plan as planner  # noqa: E402
from analysis.capacity import ModelShape  # noqa: E402
from analysis.perf_model import GpuSpec  # noqa: E402
from services.views import plan  # noqa: E402
from store import catalog, ingest  # noqa: E402
from store import plans as plans_store  # noqa: E402
from store.db import Store  # noqa: E402
from store.lifecycle import open_store  # noqa: E402

ENGINES = (
    ("h100-8b", "H100-SXM-80GB", {"max_batch_size": 256}),
    ("h100-8b-batch8", "H100-SXM-80GB", {"max_batch_size": 8}),
    ("a100-8b-smallkv", "A100-SXM-80GB", {"kv_memory_fraction": 0.5}),
)
LEVELS = (1, 8, 32)


def build_store(url: str) -> None:
    """The demo-shaped store (see the module docstring)."""
    store = open_store(url)
    try:
        t0 = 1_700_000_000.0
        for e, (key, gpu, params) in enumerate(ENGINES):
            for c in LEVELS:
                run_id = f"demo-{key}-c{c}"
                n = max(12, 6 * c)
                start = t0 + e * 1000 + c * 10
                ingest.add_run(
                    store,
                    {
                        "run_id": run_id,
                        "name": run_id,
                        "source": "servescope",
                        "framework": "sim",
                        "model": "llama-3.1-8b",
                        "gpu_name": gpu,
                        "gpu_count": 1,
                        "workload": "mixed",
                        "arrival": "concurrency",
                        "concurrency": c,
                        "engine_params": json.dumps(params),
                        "started_at": start,
                        "ended_at": start + 20.0,
                        "duration_s": 20.0,
                        "status": "completed",
                        "client_bound": False,
                    },
                )
                slow = 1.0 + c / 8.0  # latency grows with concurrency: c=32 misses the SLO
                ingest.add_requests(
                    store,
                    pd.DataFrame(
                        {
                            "run_id": run_id,
                            "seq": range(n),
                            "status": "ok",
                            "sent_at": [start + i * 0.1 for i in range(n)],
                            "done_at": [start + 1.0 + i * 0.1 for i in range(n)],
                            "input_tokens": [500 + (i * 37) % 1000 for i in range(n)],
                            "output_tokens": 128,
                            "ttft_ms": [60.0 * slow + i % 7 for i in range(n)],
                            "tpot_ms": [9.0 * slow + (i % 5) / 10 for i in range(n)],
                            "e2e_ms": [1300.0 * slow + i for i in range(n)],
                        }
                    ),
                )
        plans_store.set_price(store, "H100-SXM-80GB", 2.49)
        plans_store.set_price(store, "A100-SXM-80GB", 1.29)
        plans_store.save_plan(store, "demo", plan.PlanSpec().to_json())
    finally:
        store.dispose()


#: CPU milliseconds per query of the last :func:`_median_ms` (the process's, every thread).
CPU: dict[str, float] = {}


def _median_ms(
    fn: Callable[[], object], repeats: int, before: Callable[[], None], name: str = ""
) -> float:
    """Median wall milliseconds of ``fn`` over ``repeats`` calls (``before`` untimed before
    each); the median CPU milliseconds go to ``CPU[name]`` (less sensitive to a busy machine)."""
    times, cpu = [], []
    for _ in range(repeats):
        before()
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
        cpu.append((time.process_time() - c) * 1000.0)
    CPU[name] = statistics.median(cpu)
    return statistics.median(times)


def _nothing() -> None:
    return None


def measure(store: Store, spec: plan.PlanSpec, repeats: int) -> dict[str, float]:
    view = plan.plan_view(store, spec)  # first query: imports, DuckDB's first reads

    def clear() -> None:
        planner.predicted_capacity.cache_clear()
        plan._MEASURED.clear()
        plan._READS.clear()

    cold = _median_ms(lambda: plan.plan_view(store, spec), repeats, clear, "cold")
    warm = _median_ms(lambda: plan.plan_view(store, spec), repeats, _nothing, "warm")
    peaks = iter(range(1, 10 * repeats))

    def new_demand() -> object:  # another peak and headroom: memos hit, costs recomputed
        peak = float(next(peaks))
        return plan.plan_view(store, replace(spec, peak_qps=peak, avg_qps=peak / 2, headroom=0.3))

    changed = _median_ms(new_demand, repeats, _nothing, "changed")
    assert view.lengths is not None and view.demand is not None
    inputs = planner.PlanInputs(
        shape=ModelShape.from_entry(
            {k: v for k, v in _model_entry(store, spec.model).items() if v is not None}
        ),
        gpus=tuple(_gpus(store, view)),
        tps=spec.tps,
        precisions=spec.precisions,
        demand=view.demand,
        lengths=view.lengths,
        prices=view.prices,
    )
    targets = planner.slo_targets(500.0, 50.0, 99.0, view.lengths.input_mean)

    def predict(
        gpu: GpuSpec,
        tp: int,
        precision: str,
        params: Mapping[str, Any],
        workload: tuple[float, float],
    ) -> float:
        return planner.predicted_capacity(
            gpu, inputs.shape, precision, tuple(sorted(params.items())), workload, targets
        )

    model = _median_ms(lambda: planner.plan_options(inputs, [], predict), repeats, clear, "model")
    return {
        "options": float(len(view.options)),
        "measured": float(sum(o.label == "measured" for o in view.options)),
        "cold": cold,
        "warm": warm,
        "changed": changed,
        "model": model,
    }


def _model_entry(store: Store, name: str) -> dict[str, object]:
    return catalog.get(store, "models", name)


def _gpus(store: Store, view: plan.PlanView) -> list[GpuSpec]:
    out = []
    for name in view.spec.gpus or view.gpu_names:
        entry = {k: v for k, v in catalog.get(store, "gpus", name).items() if v is not None}
        if entry.get("memory_bytes"):
            out.append(GpuSpec.from_entry(entry))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="build the store in DIR and keep it")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="plan-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.duckdb").unlink(missing_ok=True)  # built afresh each time
    url = f"duckdb:///{folder / 'plan.duckdb'}"
    t = time.perf_counter()
    build_store(url)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"store: 9 demo-shaped runs, 2 prices, 1 saved plan ({time.perf_counter() - t:.1f} s)")
    store = open_store(url)
    try:
        with store.held_open():
            for spec in (
                plan.PlanSpec(),
                plan.PlanSpec(model="llama-3.1-70b", peak_qps=40, avg_qps=15),
            ):
                r = measure(store, spec, args.repeats)
                print(
                    f"{spec.model}: {r['options']:.0f} options ({r['measured']:.0f} measured) — "
                    f"plan_view median cold {r['cold']:.1f} ms, warm {r['warm']:.1f} ms, "
                    f"new demand {r['changed']:.1f} ms; "
                    f"model part alone (cold) {r['model']:.1f} ms  [target < 50 ms]"
                )
                print(
                    f"  CPU time per query: cold {CPU['cold']:.1f} ms, warm {CPU['warm']:.1f} ms, "
                    f"new demand {CPU['changed']:.1f} ms, model part {CPU['model']:.1f} ms"
                )
    finally:
        store.dispose()


if __name__ == "__main__":
    main()
