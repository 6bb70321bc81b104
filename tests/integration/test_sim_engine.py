"""The reference engine's scheduler in virtual time (sim.engine.simulate; no sockets)."""

from __future__ import annotations

import math
import random

import pytest

from analysis import perf_model
from errors import ConfigError
from sim.engine import (
    Arrival,
    EngineConfig,
    Scheduler,
    SimRequest,
    count_tokens,
    draw_output_len,
    prefix_block_hashes,
    simulate,
)


def cfg(**kw: object) -> EngineConfig:
    return EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b", **kw)


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_names("H999", "llama-3.1-8b")
    assert "H100-SXM-80GB" in str(err.value) and "H999" in str(err.value)
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_names("H100-SXM-80GB", "gpt-9")
    assert "llama-3.1-8b" in str(err.value)


def test_invalid_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        cfg(kv_memory_fraction=1.5)
    with pytest.raises(ConfigError, match="does not fit"):
        EngineConfig.from_names("L4-24GB", "llama-3.1-70b")


def test_token_counting_rule() -> None:
    assert count_tokens("abcd" * 10) == 10
    assert count_tokens("abcde") == 2  # ceil(bytes / 4)
    assert count_tokens("") == 1
    assert count_tokens("é") == 1  # 2 UTF-8 bytes


def test_prefix_hashes_are_chained() -> None:
    a = prefix_block_hashes(b"x" * 64 * 3 + b"tail", 16)
    b = prefix_block_hashes(b"x" * 64 * 3 + b"other", 16)
    c = prefix_block_hashes(b"y" + b"x" * 64 * 3, 16)
    assert len(a) == 3 and a == b  # full blocks only; the partial tail is not hashed
    assert not set(a) & set(c)  # a different first byte changes every later block's hash


def test_output_length_distribution() -> None:
    rng = random.Random(1)
    fixed = [draw_output_len(rng, 300, True) for _ in range(10)]
    assert fixed == [(300, "length")] * 10
    drawn = [draw_output_len(rng, 500, False) for _ in range(2000)]
    assert all(1 <= n <= 500 for n, _ in drawn)
    assert all(r == ("stop" if n < 500 else "length") for n, r in drawn)
    median = sorted(n for n, _ in drawn)[1000]
    assert 150 <= median <= 260  # log-normal with a median of 200 tokens
    assert 0.15 < sum(1 for _, r in drawn if r == "length") / 2000 < 0.4


def test_single_request_timing_matches_the_perf_model() -> None:
    c = cfg()
    res = simulate(c, [Arrival(0.0, 2000, 50)], record_token_times=True)
    (r,) = res.requests
    dep = c.deployment()
    # the API server's fixed latency, then the prefill
    overhead = c.calibration.request_overhead_s
    assert r.ttft == pytest.approx(overhead + perf_model.prefill_time(dep, 2000))
    assert r.output_len == 50 and len(r.token_times) == 50
    gaps = [b - a for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    # the first decode step attends to the prompt and the first output token
    assert gaps[0] == pytest.approx(perf_model.decode_step_time(dep, 1, 2001), rel=1e-9)
    assert gaps[-1] > gaps[0]  # context grows by one token per step


def test_chunked_prefill_respects_the_token_budget() -> None:
    c = cfg(max_batched_tokens=512)
    res = simulate(c, [Arrival(0.0, 2048, 1)])
    assert res.stats.iterations == 4  # 2048 / 512 chunks, the last one emits the token
    assert res.stats.iteration_tokens.sum == 2048


def test_queueing_grows_ttft_and_max_batch_size_holds() -> None:
    c = cfg(max_batch_size=4)
    res = simulate(c, [Arrival(0.0, 1000, 100) for _ in range(12)])
    ttfts = sorted(r.ttft for r in res.requests)
    assert res.peak_running == 4
    assert ttfts[-1] > 2.5 * ttfts[0]  # the last four waited for two earlier waves
    assert res.stats.queue.count == 12 and res.stats.queue.sum > 0


def test_kv_exhaustion_preempts_and_recomputes() -> None:
    c = cfg(num_gpu_blocks=64, max_batch_size=64)  # 1024 tokens of KV
    res = simulate(c, [Arrival(0.0, 100, 200) for _ in range(16)])
    assert res.stats.preemptions > 0
    assert res.stats.prompt_tokens_recomputed > 0
    assert res.peak_kv_usage == pytest.approx(1.0, abs=0.05)
    assert sorted(r.output_len for r in res.requests) == [200] * 16  # all complete correctly
    assert sum(r.preemptions for r in res.requests) == res.stats.preemptions


def test_reserving_the_full_output_avoids_preemption() -> None:
    c = cfg(num_gpu_blocks=64, max_batch_size=64, reserve_full_output=True)
    res = simulate(c, [Arrival(0.0, 100, 200) for _ in range(16)])
    assert res.stats.preemptions == 0
    assert res.peak_running <= 64 * 16 // 304 + 1
    assert len(res.requests) == 16


def test_prefix_cache_hits_cut_ttft() -> None:
    shared = bytes(random.Random(3).randbytes(4 * 4096))
    hashes_a = prefix_block_hashes(shared + b"question one", 16)
    hashes_b = prefix_block_hashes(shared + b"question two", 16)
    n = count_tokens(shared + b"question one")
    on = simulate(
        cfg(),
        [Arrival(0.0, n, 10, tuple(hashes_a)), Arrival(5.0, n, 10, tuple(hashes_b))],
    )
    off = simulate(
        cfg(prefix_caching=False),
        [Arrival(0.0, n, 10, tuple(hashes_a)), Arrival(5.0, n, 10, tuple(hashes_b))],
    )
    first, second = sorted(on.requests, key=lambda r: r.arrival)
    assert first.cached_tokens == 0
    assert second.cached_tokens == 4096
    assert second.ttft < 0.2 * first.ttft
    assert on.stats.prefix_hits == 4096 and on.stats.prefix_queries == 2 * n
    assert all(r.cached_tokens == 0 for r in off.requests)
    assert max(r.ttft for r in off.requests) > 5 * second.ttft


def test_prefix_cache_survives_until_memory_is_needed() -> None:
    sched = Scheduler(cfg(num_gpu_blocks=8))
    data = bytes(range(256)) * 2  # 128 tokens = 8 blocks
    hashes = prefix_block_hashes(data, 16)
    req = SimRequest("a", 128, 1, 0.0, block_hashes=hashes)
    sched.add(req)
    batch = sched.schedule(0.0)
    sched.commit(batch, batch.duration)
    assert req.finished and sched.kv_usage == 0.0
    assert len(sched.pool.lookup(hashes)) == 8  # freed blocks still hold the prefix
    other = SimRequest("b", 64, 1, 1.0)
    sched.add(other)
    sched.commit(sched.schedule(1.0), 2.0)
    assert len(sched.pool.lookup(hashes)) < 8  # evicted (LRU) to make room


def test_abort_frees_blocks() -> None:
    sched = Scheduler(cfg(num_gpu_blocks=100))
    req = SimRequest("a", 500, 100, 0.0)
    sched.add(req)
    sched.commit(sched.schedule(0.0), 0.1)
    assert sched.kv_usage > 0
    sched.abort(req, 0.2)
    assert sched.kv_usage == 0 and not sched.has_work()
    assert sched.stats.success["abort"] == 1


def test_closed_loop_keeps_concurrency() -> None:
    res = simulate(
        cfg(),
        closed_loop=(8, lambda i: Arrival(0.0, 200, 20 + i % 5)),
        num_requests=40,
    )
    assert len(res.requests) == 40
    assert res.peak_running == 8


def test_overload_is_rejected_when_a_request_can_never_fit() -> None:
    sched = Scheduler(cfg(num_gpu_blocks=4))
    assert sched.check_fits(32, 32) is None
    why = sched.check_fits(100, 10)
    assert why and "KV cache" in why
    why = Scheduler(cfg()).check_fits(131000, 1000)
    assert why and "maximum context length" in why


@pytest.mark.parametrize(
    ("gpu", "model", "tp", "measured_ms"),
    [("H200-SXM-141GB", "llama-3.1-8b", 1, 833.4), ("H200-SXM-141GB", "llama-3-70b", 4, 2077.5)],
)
def test_calibration_regression_fixed_batch(
    gpu: str, model: str, tp: int, measured_ms: float
) -> None:
    """vLLM CI latency tests (calibration rows M27, M26): batch 8, 32 in / 128 out."""
    c = EngineConfig.from_names(gpu, model, tp=tp, max_batch_size=8, prefix_caching=False)
    res = simulate(c, [Arrival(0.0, 32, 128) for _ in range(8)])
    e2e_ms = 1e3 * max(r.e2e for r in res.requests)
    assert math.isclose(e2e_ms, measured_ms, rel_tol=0.2)
