"""Sample-efficient sweep vs the exhaustive grid, on the sim's engine model (issue 13).

Every "run" here is one load level of one configuration, measured by the reference engine's
scheduler (``sim.engine.simulate``) in-process and in virtual time — the same model the
``servescope sim`` server paces against the wall clock, without HTTP, the load generator or the
store. (The sweep runner, ``services/commands/sweep.py``, did not exist when this was written;
this measures the search and the ordering/pruning logic, not the runner.)

Scenario: llama-3.1-8b on one L40S-48GB, Poisson arrivals, lognormal lengths (mean 1024 in /
512 out), SLO P99 TTFT ≤ 2000 ms and P99 TPOT ≤ 100 ms; the grid is max_batch_size ×
kv_memory_fraction × max_batched_tokens. Each run draws its own arrivals (seeded by repeat,
point and load), so repeats differ by sampling noise.

* **grid**: every point, each with a capacity search (``analysis.capacity_search``, rate 0.1–16
  req/s, precision 5 %, ≤ 8 runs) started at the geometric mean of the range.
* **efficient**: ``analysis.sweep_order.EfficientPlan`` over ``prior_capacity``: best prior first,
  pruning what cannot beat the incumbent, each search started at the calibrated prior.

Prints, per repeat and as medians: grid size, runs used by each mode, the best point of each,
their capacities, and whether they agree (same point, or capacities within 5 %).

    .venv/bin/python bench/sweep_efficiency.py [--repeats 5] [--requests 400]
"""

from __future__ import annotations

import argparse
import itertools
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import seeds
from analysis.capacity_search import Probe, SearchPlan, next_load, search_result
from analysis.perf_model import GpuSpec, ModelSpec
from analysis.sweep_order import EfficientPlan, prior_capacity
from sim.engine import Arrival, EngineConfig, simulate

GPU, MODEL = "L40S-48GB", "llama-3.1-8b"
WORKLOAD = {"input_tokens": 1024, "output_tokens": 512}
TTFT_MS, TPOT_MS, PCT = 2000.0, 100.0, 99.0
GRID = {
    "max_batch_size": (16, 32, 64, 128),
    "kv_memory_fraction": (0.5, 0.7, 0.9),
    "max_batched_tokens": (512, 2048, 8192),
}
LOW, HIGH, PRECISION, MAX_RUNS = 0.1, 16.0, 0.05, 8
AGREE = 0.05


def points() -> list[dict[str, Any]]:
    names = list(GRID)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*GRID.values())]


def _lognormal(rng: random.Random, mean: float) -> int:
    sd = mean / 3.0
    s2 = math.log(1.0 + (sd / mean) ** 2)
    draw = rng.lognormvariate(math.log(mean) - s2 / 2.0, math.sqrt(s2))
    return int(min(4 * mean, max(16, round(draw))))


def measure(params: Mapping[str, Any], rate: float, seed: int, requests: int) -> Probe:
    """One run: ``requests`` Poisson arrivals at ``rate`` through the sim; the SLO's verdict."""
    rng = random.Random(seed)
    t = 0.0
    arrivals = []
    for _ in range(requests):
        t += rng.expovariate(rate)
        inp = _lognormal(rng, WORKLOAD["input_tokens"])
        arrivals.append(Arrival(t, inp, _lognormal(rng, WORKLOAD["output_tokens"])))
    cfg = EngineConfig.from_names(GPU, MODEL, seed=seed, **params)
    res = simulate(cfg, arrivals)
    ttft = float(np.percentile([r.ttft for r in res.requests], PCT)) * 1000.0
    tpots = [r.tpot for r in res.requests if r.tpot is not None]
    tpot = float(np.percentile(tpots, PCT)) * 1000.0
    ratio = max(ttft / TTFT_MS, tpot / TPOT_MS)
    return Probe(rate, ratio <= 1.0, ratio)


def search(
    params: Mapping[str, Any], key: int, repeat: int, requests: int, start: float | None
) -> tuple[float | None, int]:
    if start is not None:
        start = min(max(start, LOW), HIGH)
    plan = SearchPlan("rate", LOW, HIGH, precision=PRECISION, max_runs=MAX_RUNS, start=start)
    probes: list[Probe] = []
    while (load := next_load(plan, probes)) is not None:
        seed = hash((repeat, key, round(load, 6))) & 0x7FFFFFFF
        probes.append(measure(params, load, seed, requests))
    res = search_result(plan, probes)
    return res.capacity, res.runs_used


def one_repeat(repeat: int, requests: int, priors: list[float]) -> dict[str, Any]:
    pts = points()
    grid_caps: dict[int, float | None] = {}
    grid_runs = 0
    for i, p in enumerate(pts):
        cap, runs = search(p, i, repeat, requests, None)
        grid_caps[i] = cap
        grid_runs += runs
    plan = EfficientPlan.from_priors(priors)
    eff_caps: dict[int, float | None] = {}
    eff_runs = 0
    while (j := plan.next_point(eff_caps)) is not None:
        cap, runs = search(pts[j], j, repeat, requests, plan.expected(j, eff_caps))
        eff_caps[j] = cap
        eff_runs += runs
    g_best = max(grid_caps, key=lambda k: grid_caps[k] or 0.0)
    e_inc = plan.incumbent(eff_caps)
    e_best = e_inc[0] if e_inc else None
    g_cap = grid_caps[g_best] or 0.0
    e_cap = eff_caps[e_best] or 0.0 if e_best is not None else 0.0
    # the grid's own measurement of the efficient pick (same seeds: the same runs)
    e_in_grid = grid_caps[e_best] or 0.0 if e_best is not None else 0.0
    agree = e_best == g_best or (g_cap > 0 and e_in_grid >= g_cap * (1.0 - AGREE))
    return {
        "grid_runs": grid_runs,
        "eff_runs": eff_runs,
        "eff_points": len(eff_caps),
        "grid_best": g_best,
        "grid_cap": g_cap,
        "eff_best": e_best,
        "eff_cap": e_cap,
        "agree": agree,
        "grid_caps": grid_caps,
    }


def label(p: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    gpu = GpuSpec.from_entry(seeds.entry("gpus", GPU))
    model = ModelSpec.from_entry(seeds.entry("models", MODEL))
    pts = points()
    t0 = time.perf_counter()
    priors = [prior_capacity(p, gpu, model, WORKLOAD, (TTFT_MS, TPOT_MS, PCT)) for p in pts]
    t_prior = time.perf_counter() - t0
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} "
        f"python {platform.python_version()}"
    )
    print(
        f"scenario: {MODEL} on {GPU}, in {WORKLOAD['input_tokens']} / out "
        f"{WORKLOAD['output_tokens']} tokens, P{PCT:g} TTFT ≤ {TTFT_MS:g} ms, TPOT ≤ {TPOT_MS:g} ms"
    )
    print(
        f"grid: {len(pts)} points ({' × '.join(str(len(v)) for v in GRID.values())}); "
        f"priors in {t_prior * 1000:.1f} ms; {args.requests} requests per run"
    )
    rows = []
    for rep in range(args.repeats):
        t = time.perf_counter()
        row = one_repeat(rep, args.requests, priors)
        row["wall_s"] = time.perf_counter() - t
        rows.append(row)
        print(
            f"repeat {rep}: grid {row['grid_runs']} runs, best #{row['grid_best']} "
            f"{label(pts[row['grid_best']])} {row['grid_cap']:.2f} req/s | efficient "
            f"{row['eff_runs']} runs ({row['eff_points']} points, "
            f"{row['eff_runs'] / row['grid_runs']:.0%}), best #{row['eff_best']} "
            f"{row['eff_cap']:.2f} req/s | agree {row['agree']} ({row['wall_s']:.0f} s)"
        )
    if rows:
        caps = rows[0]["grid_caps"]
        order = sorted(range(len(pts)), key=lambda i: -priors[i])
        print("\nrepeat 0, points by prior: prior → measured capacity (req/s)")
        for i in order:
            print(f"  #{i:2d} {label(pts[i]):70s} {priors[i]:6.2f} → {caps[i] or 0.0:6.2f}")
        med = statistics.median
        print(
            f"\nmedian over {len(rows)} repeats: "
            f"grid {med(r['grid_runs'] for r in rows):.0f} runs, "
            f"efficient {med(r['eff_runs'] for r in rows):.0f} runs "
            f"(ratio {med(r['eff_runs'] / r['grid_runs'] for r in rows):.0%}, "
            f"max {max(r['eff_runs'] / r['grid_runs'] for r in rows):.0%}); best capacity grid "
            f"{med(r['grid_cap'] for r in rows):.2f} vs efficient "
            f"{med(r['eff_cap'] for r in rows):.2f}"
            f" req/s; agree in {sum(r['agree'] for r in rows)}/{len(rows)}"
        )


if __name__ == "__main__":
    main()
