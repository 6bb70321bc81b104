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

**--runner**: the same question through the real sweep runner. ``servescope sweep`` (via
``cli.main``) runs one sim spec (:data:`RUNNER_SPEC`, written to a temporary folder) twice into a
temporary DuckDB store — ``mode = "grid"``, then ``mode = "efficient"`` — launching a
``servescope sim`` engine per point and measuring each point's SLO capacity over HTTP with the
load generator. Then it reads the stored points (``store.sweeps.sweep_points``) and the
recommendations (``services.views.tune.recommendation_for``) and prints the load runs of each
mode (sum of ``runs_used``), their ratio, each recommendation and whether they agree, and each
mode's wall time. Scenario: llama-3.1-8b on a simulated H100 in real time (``--time-scale 1``),
``short-in-short-out`` capped at 64 output tokens, SLO ``interactive-chat`` (P99 TTFT ≤ 500 ms,
TPOT ≤ 50 ms); grid max_batch_size {4, 8, 16} × max_batched_tokens {256, 2048} ×
kv_memory_fraction {0.3, 0.9} = 12 points (the best is in the last third of the grid order).
About 14 minutes on 2 shared cores (bench/README.md).

    .venv/bin/python bench/sweep_efficiency.py --runner [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import math
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import seeds
from analysis.capacity import ModelShape
from analysis.capacity_search import Probe, SearchPlan, next_load, search_result
from analysis.perf_model import GpuSpec
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


# --- the real runner (--runner) ---------------------------------------------------------------

RUNNER_GRID = {
    "max_batch_size": (4, 8, 16),
    "max_batched_tokens": (256, 2048),
    "kv_memory_fraction": (0.3, 0.9),
}
RUNNER_PRECISION = 0.2
RUNNER_SPEC = """\
# bench/sweep_efficiency.py --runner: the sim, grid vs efficient mode (written per run).
name = "{name}"

[engine]
template = "sim"
model = "llama-3.1-8b"
args = ["--gpu", "H100-SXM-80GB", "--time-scale", "1", "--seed", "0"]
params = {{ prefix_caching = true }}
startup_timeout_s = 60
stop_timeout_s = 10

[grid]
max_batch_size = [4, 8, 16]
max_batched_tokens = [256, 2048]
kv_memory_fraction = [0.3, 0.9]

[load]
workload = "short-in-short-out"
kind = "rate"
search = {{ low = 1, high = 48, precision = {precision}, max_runs = 5 }}
duration_s = 8
warmup = 4
max_tokens = 64
seed = 7

[slo]
profile = "interactive-chat"

[sweep]
repeats = 1
mode = "{mode}"
gpu = "H100-SXM-80GB"
model = "llama-3.1-8b"
"""


def _runner_sweep(folder: Path, url: str, mode: str) -> tuple[str, float, int, str]:
    """Run the spec in ``mode`` through ``cli.main``; (sweep_id, wall s, exit status, output)."""
    import cli
    from store.lifecycle import open_store
    from store.sweeps import sweep_list

    name = f"sim-efficiency-{mode}"
    spec = folder / f"{name}.toml"
    spec.write_text(RUNNER_SPEC.format(name=name, mode=mode, precision=RUNNER_PRECISION))
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["sweep", str(spec), "--db", url, "--quiet"])
    wall = time.perf_counter() - t0
    store = open_store(url)
    try:
        found = sweep_list(store)
        sweep_id = str(found.loc[found["name"] == name, "sweep_id"].iloc[0])
    finally:
        store.dispose()
    return sweep_id, wall, rc, buf.getvalue()


def _params_key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(params.get(k) for k in RUNNER_GRID)


def _grid_label(params: Mapping[str, Any]) -> str:
    return label({k: params.get(k) for k in RUNNER_GRID})


def runner_main(keep: str | None) -> None:
    from services.views.tune import recommendation_for
    from store.lifecycle import open_store
    from store.sweeps import sweep_points

    print(
        f"machine: {platform.machine()} {cpu_model()}, {os_cpus()} cores, "
        f"python {platform.python_version()}"
    )
    n = math.prod(len(v) for v in RUNNER_GRID.values())
    print(
        f"real runner (servescope sweep, sim engines over HTTP): {n} points "
        f"({' × '.join(f'{k} {list(v)}' for k, v in RUNNER_GRID.items())})"
    )
    with contextlib.ExitStack() as stack:
        if keep:
            folder = Path(keep)
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sweep-eff-")))
        url = f"duckdb:///{folder / 'store.duckdb'}"
        out: dict[str, dict[str, Any]] = {}
        for mode in ("grid", "efficient"):
            sweep_id, wall, rc, text = _runner_sweep(folder, url, mode)
            notes = [ln for ln in text.splitlines() if ln.startswith(("efficient:", "note:"))]
            print(
                f"{mode}: sweep {sweep_id} exit {rc} in {wall:.0f} s"
                + "".join(f"\n  {ln}" for ln in notes)
            )
            out[mode] = {"sweep_id": sweep_id, "wall": wall}
        store = open_store(url)
        try:
            for res in out.values():
                df = sweep_points(store, res["sweep_id"])
                res["points"] = df
                res["runs"] = int(df["runs_used"].fillna(0).sum())
                res["measured"] = int((df["status"] != "pruned").sum())
                res["rec"] = recommendation_for(store, res["sweep_id"])
        finally:
            store.dispose()
    grid, eff = out["grid"], out["efficient"]
    g_caps = {
        _params_key(r["params"]): (None if pd_isna(r["capacity"]) else float(r["capacity"]))
        for r in grid["points"].to_dict("records")
    }
    e_rows = {_params_key(r["params"]): r for r in eff["points"].to_dict("records")}
    head = f"  {'point, in grid order':50s} {'prior':>6s} {'grid':>6s} (runs)  efficient (runs)"
    print(f"\ncapacities (req/s):\n{head}")
    for r in grid["points"].to_dict("records"):
        key = _params_key(r["params"])
        e = e_rows.get(key, {})
        prior = e.get("prior")
        e_cap = e.get("capacity")
        e_txt = (
            "pruned"
            if e.get("status") == "pruned"
            else f"{fmt_cap(e_cap)} ({int(e.get('runs_used') or 0)})"
        )
        print(
            f"  {_grid_label(r['params']):50s} {fmt_cap(prior):>6s} {fmt_cap(r['capacity']):>6s} "
            f"({int(r['runs_used'] or 0)})  {e_txt}"
        )
    g_best, e_best = grid["rec"].best, eff["rec"].best
    print(f"\ngrid:      {grid['rec'].headline()}")
    print(f"efficient: {eff['rec'].headline()}")
    ratio = eff["runs"] / grid["runs"] if grid["runs"] else math.nan
    print(
        f"\nload runs: grid {grid['runs']} ({grid['measured']} points), efficient {eff['runs']} "
        f"({eff['measured']} points measured, {n - eff['measured']} pruned); "
        f"efficient / grid = {ratio:.0%} (≤ 40 % required)"
    )
    if g_best is None or e_best is None:
        print("agree: no (a mode has no recommendation)")
        return
    same = _params_key(g_best.params) == _params_key(e_best.params)
    g_cap = g_best.capacity or 0.0
    e_in_grid = g_caps.get(_params_key(e_best.params)) or 0.0
    within = g_cap > 0 and e_in_grid >= g_cap * (1.0 - RUNNER_PRECISION)
    print(
        f"best: grid {_grid_label(g_best.params)} {g_best.capacity_text} req/s; efficient "
        f"{_grid_label(e_best.params)} {e_best.capacity_text} req/s (the grid measured it at "
        f"{e_in_grid:.3g}, {e_in_grid / g_cap:.0%} of its best)"
        if g_cap
        else ""
    )
    print(
        f"agree: {'yes' if same or within else 'no'} — "
        + ("the same point" if same else "different points")
        + f"; within the search precision ({RUNNER_PRECISION:.0%}): {within}"
    )
    print(f"wall time: grid {grid['wall']:.0f} s, efficient {eff['wall']:.0f} s")


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or ""


def os_cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def pd_isna(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_cap(value: Any) -> str:
    return "—" if pd_isna(value) else f"{float(value):.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument(
        "--runner",
        action="store_true",
        help="measure with the real sweep runner (servescope sweep on the sim), grid vs efficient",
    )
    ap.add_argument("--keep", metavar="DIR", help="--runner: keep the spec and store in DIR")
    args = ap.parse_args()
    if args.runner:
        runner_main(args.keep)
        return
    gpu = GpuSpec.from_entry(seeds.entry("gpus", GPU))
    model = ModelShape.from_entry(seeds.entry("models", MODEL))
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
