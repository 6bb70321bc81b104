"""A parameter sweep stored as ``servescope sweep`` stores one (sweeps, sweep_points, and runs
with sweep_id, engine_params = the point's params and client_params' launch_command and
sweep_point = {sweep_id, point_id, repeat, params}), for the Tune
tests: integration (tests/integration/test_tune_view.py), AppTest and chromium.

The sweep ``sw-new`` (newest) is max_batch_size {64, 128, 256} × max_batched_tokens
{2048, 8192} under interactive-chat with a 90 % memory cap in its spec:

| point | mbs | mbt  | status    | capacity (req/s) | note                             |
|-------|-----|------|-----------|------------------|----------------------------------|
| a     | 64  | 2048 | completed | 9                |                                  |
| b     | 64  | 8192 | completed | 7                |                                  |
| c     | 128 | 2048 | completed | 14, 14.4 (2 rep) | the recommendation (mean 14.2)   |
| d     | 128 | 8192 | completed | 11               |                                  |
| e     | 256 | 2048 | oom       | —                | log tail with Markdown and HTML  |
| f     | 256 | 8192 | completed | 20               | peak memory 97 %: rejected       |

Each completed point measured the rates 4, 8 and 16 req/s, one run each: 30 requests of 200
input tokens (TTFT 100 ms) and 30 of 5,000 (TTFT ``LONG_TTFT[point] × load / 8`` ms), so the
P99 TTFT of the 4k–16k bucket at 16 req/s is c 1,200 ms, d 2,000 ms (−40 %), a 3,000 (−60 %).
``sw-old`` is an older sweep of one point that failed to start.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from store import ingest, schema
from store.lifecycle import open_store

SWEEP = "sw-new"
OLD_SWEEP = "sw-old"
T0 = 1_760_000_000.0
LOADS = (4.0, 8.0, 16.0)
LONG_TTFT = {"a": 1500.0, "b": 1800.0, "c": 600.0, "d": 1000.0, "f": 500.0}
TPOT = {"a": 20.0, "b": 25.0, "c": 22.0, "d": 30.0, "f": 15.0}


def _p(mbs: int, mbt: int) -> dict[str, int]:
    return {"max_batch_size": mbs, "max_batched_tokens": mbt}


#: point → (params, status, [capacity per repeat], ratios at LOADS, peak memory fraction)
POINTS: dict[str, tuple[dict[str, int], str, list[float], tuple[float, ...], float]] = {
    "a": (_p(64, 2048), "completed", [9.0], (0.5, 0.9, 1.6), 0.7),
    "b": (_p(64, 8192), "completed", [7.0], (0.6, 1.1, 2.0), 0.7),
    "c": (_p(128, 2048), "completed", [14.0, 14.4], (0.4, 0.7, 1.2), 0.8),
    "d": (_p(128, 8192), "completed", [11.0], (0.5, 0.95, 1.5), 0.8),
    "e": (_p(256, 2048), "oom", [], (), 0.0),
    "f": (_p(256, 8192), "completed", [20.0], (0.3, 0.6, 0.9), 0.97),
}
LOG_TAIL = (
    "INFO loading weights\n"
    "WARNING <b>kv cache</b> is **tight** [link](http://x)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
)
ERROR = "engine exited: CUDA out of memory"


def run_id(point: str, repeat: int, load: float) -> str:
    return f"{SWEEP}-{point}-r{repeat}-L{load:g}"


def _requests(rid: str, point: str, load: float, started: float) -> pd.DataFrame:
    n = 60
    long = [i % 2 == 1 for i in range(n)]
    return pd.DataFrame(
        {
            "run_id": rid,
            "seq": range(n),
            "status": "ok",
            "sent_at": [started + i * 0.1 for i in range(n)],
            "first_token_at": [started + i * 0.1 + 0.1 for i in range(n)],
            "done_at": [started + i * 0.1 + 2.0 for i in range(n)],
            "input_tokens": [5000 if x else 200 for x in long],
            "output_tokens": 100,
            "ttft_ms": [LONG_TTFT[point] * load / 8.0 if x else 100.0 for x in long],
            "tpot_ms": TPOT[point],
            "e2e_ms": 2000.0,
        }
    )


def _command(params: dict[str, int]) -> str:
    return (
        f"servescope sim --port 8000 --max-batch-size {params['max_batch_size']} "
        f"--max-batched-tokens {params['max_batched_tokens']}"
    )


def _full(table: sa.Table, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row with every column (an executemany takes its columns from the first row)."""
    return [{c.name: r.get(c.name) for c in table.columns} for r in rows]


def store_sweep(url: str) -> None:
    """Store both sweeps (see the module docstring) in the store at ``url``."""
    store = open_store(url)
    try:
        rows: list[dict[str, Any]] = []
        clock = T0
        for point, (params, status, caps, ratios, memory) in POINTS.items():
            for repeat, cap in enumerate(caps or [None]):
                search = []
                if status == "completed":
                    for load, ratio in zip(LOADS, ratios, strict=True):
                        rid = run_id(point, repeat, load)
                        clock += 30.0
                        ingest.add_run(
                            store,
                            {
                                "run_id": rid,
                                "source": "servescope",
                                "framework": "sim",
                                "model": "llama-3.1-8b",
                                "gpu_name": "H100-SXM-80GB",
                                "gpu_count": 1,
                                "workload": "mixed",
                                "arrival": "poisson",
                                "target_rate": load,
                                "engine_params": params,
                                "client_params": {
                                    "launch_command": _command(params),
                                    "sweep_point": {
                                        "sweep_id": SWEEP,
                                        "point_id": point,
                                        "repeat": repeat,
                                        "params": params,
                                    },
                                },
                                "sweep_id": SWEEP,
                                "started_at": clock,
                                "ended_at": clock + 8.0,
                                "duration_s": 8.0,
                                "status": "completed",
                            },
                        )
                        ingest.add_requests(store, _requests(rid, point, load, clock))
                        search.append(
                            {"load": load, "run_id": rid, "passed": ratio <= 1.0, "ratio": ratio}
                        )
                rows.append(
                    {
                        "sweep_id": SWEEP,
                        "point_id": point,
                        "repeat": repeat,
                        "params": json.dumps(params),
                        "status": status,
                        "launch_command": _command(params),
                        "framework": "sim",
                        "framework_version": "0.1",
                        "started_at": clock,
                        "ended_at": clock + 1.0,
                        "capacity": cap,
                        "capacity_kind": "rate" if cap is not None else None,
                        "capacity_interpolated": cap is not None,
                        "capacity_note": "",
                        "runs_used": len(search),
                        "search": json.dumps(search),
                        "peak_memory_fraction": memory if status == "completed" else None,
                        "preemptions": 0.0 if status == "completed" else None,
                        "error": ERROR if status != "completed" else None,
                        "log_tail": LOG_TAIL if status != "completed" else None,
                    }
                )
        with store.connect() as conn:
            conn.execute(
                sa.insert(schema.sweeps),
                _full(
                    schema.sweeps,
                    [
                        {
                            "sweep_id": SWEEP,
                            "name": "batching on the sim",
                            "engine": "sim",
                            "grid": json.dumps(
                                {
                                    "max_batch_size": [64, 128, 256],
                                    "max_batched_tokens": [2048, 8192],
                                }
                            ),
                            "workload": "mixed",
                            "slo": "interactive-chat",
                            "status": "completed",
                            "created_at": T0,
                            "started_at": T0,
                            "ended_at": clock,
                            "mode": "grid",
                            "spec": json.dumps({"guard_rails": {"max_memory_fraction": 0.9}}),
                        },
                        {
                            "sweep_id": OLD_SWEEP,
                            "name": "an old sweep",
                            "engine": "vllm",
                            "slo": "interactive-chat",
                            "status": "failed",
                            "created_at": T0 - 86400.0,
                            "started_at": T0 - 86400.0,
                            "mode": "grid",
                            "spec": json.dumps({}),
                        },
                    ],
                ),
            )
            conn.execute(
                sa.insert(schema.sweep_points),
                _full(
                    schema.sweep_points,
                    [
                        *rows,
                        {
                            "sweep_id": OLD_SWEEP,
                            "point_id": "z",
                            "repeat": 0,
                            "params": json.dumps({"max_batch_size": 32}),
                            "status": "failed_to_start",
                            "error": "vllm: command not found",
                            "log_tail": "bash: vllm: command not found",
                        },
                    ],
                ),
            )
    finally:
        store.dispose()


#: A small sweep for the real runner (``servescope sweep``): the sim at 20× speed, two points,
#: three fixed rates of 24 requests each (about a minute here), judged at P95 (code-completion):
#: a P99 from 24 requests is inconclusive (it needs 100, docs/tune.md), P95 needs 20.
SMALL_SPEC = """\
name = "sim-small"
[engine]
template = "sim"
model = "llama-3.1-8b"
args = ["--gpu", "H100-SXM-80GB", "--time-scale", "20", "--seed", "0"]
startup_timeout_s = 60
stop_timeout_s = 10
[grid]
max_batch_size = [2, 32]
[load]
workload = "short-in-short-out"
kind = "rate"
levels = [2, 8, 32]
requests = 24
warmup = 2
max_tokens = 32
seed = 7
[slo]
profile = "code-completion"
max_memory_fraction = 0.95
[sweep]
repeats = 1
mode = "grid"
"""


def run_real_sweep(url: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """``servescope sweep`` of :data:`SMALL_SPEC` into the store at ``url``; skips when the
    runner (services/commands/sweep.py) is not in this checkout."""
    if importlib.util.find_spec("services.commands.sweep") is None:
        pytest.skip("services/commands/sweep.py (the sweep runner) is not in this checkout")
    spec = folder / "small-sweep.toml"
    spec.write_text(SMALL_SPEC)
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-m", "cli", "sweep", str(spec), "--db", url, "--quiet"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
