"""Mixture-of-experts and latent-attention models through the reference engine (issue 14):
``servescope sim --model qwen3-30b-a3b`` serves on one H100 and ``servescope bench`` stores a run
against it; the engine's step times, KV pool and /metrics memory follow ``analysis.capacity``."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from analysis import perf_model
from services.commands.demo import DemoEngine, running_sim
from sim.engine import Arrival, EngineConfig, simulate
from sim.server import SimHandle, start_in_thread
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
GPU, MOE = "H100-SXM-80GB", "qwen3-30b-a3b"
MIB = 1024**2


def scrape(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


@pytest.fixture
def sim_thread() -> Iterator[object]:
    handles: list[SimHandle] = []

    def make(gpu: str, model: str, **kw: object) -> SimHandle:
        h = start_in_thread(EngineConfig.from_names(gpu, model, **kw), time_scale=50)
        handles.append(h)
        return h

    yield make
    for h in handles:
        h.stop()


def test_servescope_sim_serves_a_moe_model_and_bench_stores_a_run(tmp_path: Path) -> None:
    db = f"duckdb:///{tmp_path / 'moe.duckdb'}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), SERVESCOPE_SPOOL_DIR=str(tmp_path / "spool"))
    engine = DemoEngine("moe", GPU, MOE, "Qwen3-30B-A3B on one H100", {"time_scale": 10})
    with running_sim(engine) as url:
        models = httpx.get(url + "/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == [MOE]
        assert models[0]["max_model_len"] == 40960
        bench = [sys.executable, "-m", "cli", "bench", "--endpoint", url, "--no-gpu", "--db", db]
        bench += ["--workload", "short-in-short-out", "--max-tokens", "16"]
        bench += ["--concurrency", "4", "--requests", "8"]
        proc = subprocess.run(bench, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = open_store(db)
    try:
        runs = store.read_df("SELECT status, model, framework FROM runs")
        assert runs["status"].tolist() == ["completed"]
        assert runs["model"].tolist() == [MOE]
        assert runs["framework"].tolist() == ["sim"]
        reqs = store.read_df("SELECT status, output_tokens FROM requests")
        assert reqs["status"].tolist() == ["ok"] * 8
        assert (reqs["output_tokens"] >= 1).all()
    finally:
        store.dispose()


def _decode_step(config: EngineConfig, concurrency: int) -> float:
    """The engine's decode step with ``concurrency`` sequences decoding together: the mean gap
    between the last 32 tokens of each request, when every prefill is long done."""
    arrivals = [Arrival(time=0.0, prompt_len=256, output_len=96) for _ in range(concurrency)]
    result = simulate(config, arrivals, record_token_times=True)
    gaps = [(r.token_times[-1] - r.token_times[-33]) / 32 for r in result.requests]
    return sum(gaps) / len(gaps)


def test_moe_decode_is_faster_than_a_dense_model_of_its_size_until_the_batch_grows() -> None:
    moe = EngineConfig.from_names(GPU, MOE)
    dense_model = dataclasses.replace(
        moe.model, experts=0, experts_per_token=0, expert_params_b=0.0, active_params_b=None
    )
    dense = moe.with_overrides(model=dense_model)
    ratios = [_decode_step(moe, b) / _decode_step(dense, b) for b in (1, 16, 128)]
    # batch 1 reads 3.35B of 30.53B parameters: TPOT far below the dense model's
    assert ratios[0] < 0.3
    # more sequences touch more experts: the MoE step approaches the dense one
    assert ratios == sorted(ratios)
    assert ratios[-1] > 0.95


def test_mla_kv_capacity_follows_the_latent_formula(sim_thread) -> None:  # type: ignore[no-untyped-def]
    config = EngineConfig.from_names("H200-SXM-141GB", "deepseek-v3", tp=8)
    dep = config.deployment()
    # per GPU: 0.9 × 143,771 MiB − 671e9 B (FP8) / 8 − (1 GiB + 8192 × 7168 × 24 B / 8), in
    # blocks of 16 tokens × (512 + 64) × 61 × 2 B = 70,272 B per token, replicated on each rank
    budget = 0.9 * 150755819520 - 671e9 / 8 - (1024**3 + 8192 * 7168 * 24 / 8)
    blocks = math.floor(budget / (16 * 70_272))
    assert config.total_blocks() == blocks
    assert perf_model.kv_capacity_tokens(dep) == blocks * 16
    h = sim_thread("H200-SXM-141GB", "deepseek-v3", tp=8)
    m = scrape(h.url)
    info = next(k for k in m if k.startswith("vllm:cache_config_info{"))
    assert f'num_gpu_blocks="{blocks}"' in info


def test_metrics_gpu_memory_of_a_moe_model_counts_all_weights(sim_thread) -> None:  # type: ignore[no-untyped-def]
    # a small KV pool, so that the weights dominate what the GPU holds
    h = sim_thread(GPU, MOE, num_gpu_blocks=100)
    m = scrape(h.url)
    used = [v for k, v in m.items() if k.startswith("DCGM_FI_DEV_FB_USED{")]
    assert len(used) == 1
    # every expert is resident: 30.53e9 × 2 B, + 1 GiB + 8192 × 2048 × 24 B of activations, +
    # 100 blocks × 16 tokens × 98,304 B of KV = 62,693,681,408 B = 59,789.2 MiB
    expected = 30.53e9 * 2 + 1024**3 + 8192 * 2048 * 24 + 100 * 16 * 98_304
    assert used[0] == int(expected // MIB) == 59_789
    # the active parameters alone (3.35B × 2 B ≈ 6.4 GiB) would be a tenth of that
    assert used[0] > 8 * 3.35e9 * 2 / MIB
