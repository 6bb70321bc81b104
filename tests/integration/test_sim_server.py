"""The reference engine over real loopback sockets: API shape and physical behaviour.

Timing is asserted on the engine's own virtual-time histograms in /metrics. These sims keep an
exact virtual clock (``exact_virtual_clock``): a machine too busy to wake the engine on time delays
its tokens on the wall clock but never moves virtual time, so the histograms are the model's
figures whatever the load (a sim served to users instead jumps virtual time forward past 50 ms of
lag). That the wall clock follows the virtual one (× the time scale) is a timing property of the
machine as much as of the sim: one ``slow`` test checks it, which CI runs alone.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from analysis import perf_model
from errors import ConfigError, InputError
from sim import server as sim_server
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread

ROOT = Path(__file__).resolve().parents[2]


# --- helpers -----------------------------------------------------------------------------------


def words(n_tokens: int, seed: int) -> str:
    """A prompt of exactly n_tokens under the sim's rule (ceil(bytes / 4)): 4-byte words."""
    rng = random.Random(seed)
    return "".join(
        rng.choice(("cat ", "dog ", "sun ", "map ", "key ", "red ")) for _ in range(n_tokens)
    )


@dataclass
class StreamResult:
    ttft: float
    token_times: list[float]
    texts: list[str]
    usage: dict[str, object] | None
    finish_reason: str | None
    done: bool
    events: list[dict[str, object]] = field(default_factory=list)

    @property
    def tpot(self) -> float:
        t = self.token_times
        return (t[-1] - t[0]) / (len(t) - 1)


async def stream(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, object],
) -> StreamResult:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    times: list[float] = []
    texts: list[str] = []
    usage = None
    finish = None
    done = False
    events: list[dict[str, object]] = []
    async with client.stream("POST", path, json=body) as resp:
        assert resp.status_code == 200, await resp.aread()
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            ev = json.loads(data)
            events.append(ev)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev["choices"]:
                text = ch.get("text") if "text" in ch else ch["delta"].get("content")
                if text:
                    times.append(time.perf_counter())
                    texts.append(text)
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
    return StreamResult(times[0] - t0, times, texts, usage, finish, done, events)


def scrape(url: str) -> dict[str, float]:
    """/metrics as {series: value} (label sets kept in the key)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def metric(m: dict[str, float], name: str) -> float:
    hits = [v for k, v in m.items() if k == name or k.startswith(name + "{")]
    assert hits, f"{name} not exposed"
    return sum(hits)


def wait_for(cond: object, timeout: float = 10.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return
        time.sleep(interval)
    raise AssertionError("condition not met before the deadline")


@pytest.fixture
def exact_virtual_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sims of a test never jump virtual time forward when they fall behind the wall clock
    (``sim.server.MAX_LAG_WALL_S``): their histograms are then the model's, however busy the
    machine (a stall of 50 ms once added 4.6 ms to a 9.5 ms mean ITL)."""
    monkeypatch.setattr(sim_server, "MAX_LAG_WALL_S", math.inf)


@pytest.fixture
def sim_factory(exact_virtual_clock: None) -> Iterator[object]:
    handles: list[SimHandle] = []

    def make(gpu: str, model: str, time_scale: float = 1.0, **kw: object) -> SimHandle:
        h = start_in_thread(EngineConfig.from_names(gpu, model, **kw), time_scale=time_scale)
        handles.append(h)
        return h

    yield make
    for h in handles:
        h.stop()


# --- API shape ---------------------------------------------------------------------------------


def test_models_health_and_identity(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H100-SXM-80GB", "llama-3.1-8b", time_scale=50)
    with httpx.Client(base_url=h.url) as c:
        assert c.get("/health").status_code == 200
        models = c.get("/v1/models").json()
        (m,) = models["data"]
        assert m["id"] == "llama-3.1-8b" and m["owned_by"] == "servescope-sim"
        assert m["max_model_len"] == 131072
        r = c.get("/nope")
        assert r.status_code == 404 and "error" in r.json()
        assert c.get("/v1/chat/completions").status_code == 405
        assert r.headers["server"] == "servescope-sim"


def test_chat_stream_with_usage(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H100-SXM-80GB", "llama-3.1-8b", time_scale=20)
    messages = [{"role": "user", "content": "Tell me about paged attention please."}]
    prompt_bytes = len(b"<|user|>\nTell me about paged attention please.\n<|assistant|>\n")

    async def go() -> StreamResult:
        async with httpx.AsyncClient(base_url=h.url) as c:
            return await stream(
                c,
                "/v1/chat/completions",
                {
                    "model": "llama-3.1-8b",
                    "messages": messages,
                    "max_tokens": 24,
                    "ignore_eos": True,
                },
            )

    r = asyncio.run(go())
    assert r.done and r.finish_reason == "length"
    assert len(r.texts) == 24
    assert all(re.fullmatch(r" ?[A-Za-z]+|[.,]", t) for t in r.texts)
    assert r.usage == {
        "prompt_tokens": -(-prompt_bytes // 4),
        "completion_tokens": 24,
        "total_tokens": -(-prompt_bytes // 4) + 24,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    first = r.events[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert r.events[-1]["choices"] == []


def test_completions_non_streaming_and_keep_alive(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H100-SXM-80GB", "llama-3.1-8b", time_scale=50)
    with httpx.Client(base_url=h.url) as c:
        bodies = []
        for i in range(3):  # one pooled connection
            resp = c.post(
                "/v1/completions",
                json={"prompt": words(100, i), "max_tokens": 10, "ignore_eos": True},
            )
            assert resp.status_code == 200
            assert resp.headers["connection"] == "keep-alive"
            bodies.append(resp.json())
        b = bodies[0]
        assert b["object"] == "text_completion"
        assert b["usage"]["prompt_tokens"] == 100 and b["usage"]["completion_tokens"] == 10
        assert b["choices"][0]["finish_reason"] == "length" and b["choices"][0]["text"].strip()
        ids = c.post("/v1/completions", json={"prompt": [1, 2, 3, 4, 5], "max_tokens": 2}).json()
        assert ids["usage"]["prompt_tokens"] == 5


def test_errors_are_openai_shaped(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H100-SXM-80GB", "llama-3.1-8b", time_scale=50)
    with httpx.Client(base_url=h.url) as c:
        r = c.post("/v1/chat/completions", json={"model": "gpt-x", "messages": [{"content": "a"}]})
        assert r.status_code == 404 and "gpt-x" in r.json()["error"]["message"]
        r = c.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "x"})
        assert r.status_code == 400
        r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 200_000})
        assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 0})
        assert r.status_code == 400
        # the connection survives errors
        assert c.get("/health").status_code == 200


def test_output_lengths_are_seeded_and_capped(sim_factory) -> None:  # type: ignore[no-untyped-def]
    def lengths(seed: int) -> list[tuple[int, str]]:
        h = sim_factory("H100-SXM-80GB", "qwen2.5-0.5b", time_scale=100, seed=seed)
        out = []
        with httpx.Client(base_url=h.url) as c:
            for i in range(12):
                b = c.post("/v1/completions", json={"prompt": words(20, i), "max_tokens": 300})
                out.append(
                    (
                        b.json()["usage"]["completion_tokens"],
                        b.json()["choices"][0]["finish_reason"],
                    )
                )
        return out

    a, b, other = lengths(7), lengths(7), lengths(8)
    assert a == b and a != other
    assert all(1 <= n <= 300 and (r == "stop") == (n < 300) for n, r in a)
    assert len({n for n, _ in a}) > 3  # a distribution, not a constant


# --- physical behaviour ------------------------------------------------------------------------

# llama-3.1-8b on an L4: a decode step ≈ 80 ms and a 4k-token prefill ≈ 1.2 s of virtual time,
# so at 20× the wall-clock steps are a few ms (measurable) and the tests stay short.
SLOW = ("L4-24GB", "llama-3.1-8b")
SCALE = 20.0


def test_ttft_grows_with_input_length(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(*SLOW, time_scale=SCALE, prefix_caching=False)
    dep = h.config.deployment()

    async def go() -> tuple[list[float], list[float]]:
        wall, engine = [], []
        async with httpx.AsyncClient(base_url=h.url) as c:
            for i, n in enumerate((128, 2048, 8192)):
                before = metric(scrape(h.url), "vllm:time_to_first_token_seconds_sum")
                r = await stream(c, "/v1/completions", {"prompt": words(n, i), "max_tokens": 2})
                wall.append(r.ttft * SCALE)
                after = metric(scrape(h.url), "vllm:time_to_first_token_seconds_sum")
                engine.append(after - before)  # this request's TTFT in virtual seconds
        return wall, engine

    wall, engine = asyncio.run(go())
    assert engine[0] < engine[1] < engine[2]
    assert engine[2] > 5 * engine[0]
    api = h.config.calibration.request_overhead_s  # fixed API-server latency in every TTFT
    assert engine[2] == pytest.approx(api + perf_model.prefill_time(dep, 8192), rel=0.2)
    assert engine[0] == pytest.approx(api + perf_model.prefill_time(dep, 128), rel=0.2)
    # the wall clock never runs ahead of the virtual one (a busy machine can only delay tokens);
    # that it keeps up is test_the_wall_clock_follows_the_virtual_clock's (slow: timing)
    assert all(w >= 0.95 * e for w, e in zip(wall, engine, strict=True)), (wall, engine)
    m = scrape(h.url)
    assert metric(m, "vllm:time_to_first_token_seconds_count") == 3
    assert metric(m, "vllm:prompt_tokens_total") == 128 + 2048 + 8192


def test_ttft_grows_with_queueing(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(*SLOW, time_scale=SCALE, prefix_caching=False, max_batched_tokens=4096)
    waiting_seen: list[float] = []

    async def go() -> list[StreamResult]:
        async with httpx.AsyncClient(base_url=h.url) as c:
            tasks = [
                asyncio.create_task(
                    stream(c, "/v1/completions", {"prompt": words(4096, i), "max_tokens": 3})
                )
                for i in range(6)
            ]
            while not all(t.done() for t in tasks):
                m = (await c.get("/metrics")).text
                found = re.search(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)$", m, re.M)
                assert found
                waiting_seen.append(float(found.group(1)))
                await asyncio.sleep(0.01)
            return [t.result() for t in tasks]

    results = asyncio.run(go())
    # Each 4096-token prompt fills one iteration's budget, so the k-th request waits for k
    # prefills: queue time ≈ (0+1+…+5) × prefill and mean TTFT ≈ 3.5 × prefill (virtual time).
    prefill = perf_model.prefill_time(h.config.deployment(), 4096)
    m = scrape(h.url)
    assert metric(m, "vllm:request_queue_time_seconds_sum") > 0.7 * 15 * prefill
    assert metric(m, "vllm:time_to_first_token_seconds_sum") / 6 > 2.5 * prefill
    assert max(waiting_seen) >= 1
    ttfts = sorted(r.ttft * SCALE for r in results)
    # the client sees the spread: the last request waited for five prefills, which a busy
    # machine can only lengthen (the wall clock never runs ahead of the virtual one)
    assert ttfts[-1] >= 0.95 * 5 * prefill, (ttfts, prefill)


def test_decode_step_grows_with_batch_and_context(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H100-SXM-80GB", "llama-3.1-8b", time_scale=2.0, prefix_caching=False)

    def itl_mean_since(before: dict[str, float]) -> float:
        after = scrape(h.url)
        s = metric(after, "vllm:inter_token_latency_seconds_sum") - metric(
            before, "vllm:inter_token_latency_seconds_sum"
        )
        n = metric(after, "vllm:inter_token_latency_seconds_count") - metric(
            before, "vllm:inter_token_latency_seconds_count"
        )
        return s / n

    async def run(n_streams: int, prompt: int, out: int) -> list[StreamResult]:
        async with httpx.AsyncClient(base_url=h.url) as c:
            return await asyncio.gather(
                *(
                    stream(
                        c,
                        "/v1/completions",
                        {
                            "prompt": words(prompt, 100 * n_streams + i),
                            "max_tokens": out,
                            "ignore_eos": True,
                        },
                    )
                    for i in range(n_streams)
                )
            )

    m0 = scrape(h.url)
    single = asyncio.run(run(1, 64, 40))
    itl_single = itl_mean_since(m0)
    m1 = scrape(h.url)
    asyncio.run(run(1, 30000, 40))
    itl_long = itl_mean_since(m1)
    m2 = scrape(h.url)
    asyncio.run(run(48, 512, 40))
    itl_batch = itl_mean_since(m2)

    dep = h.config.deployment()
    assert itl_single == pytest.approx(perf_model.decode_step_time(dep, 1, 84), rel=0.15)
    assert itl_long > 1.15 * itl_single  # 30k tokens of KV read per step
    assert itl_batch > 1.15 * itl_single  # 48 sequences' KV, per-sequence overhead
    assert len(single[0].token_times) == 40


@pytest.mark.slow  # a timing test: the wall clock keeps up only on a machine not overloaded
def test_the_wall_clock_follows_the_virtual_clock() -> None:
    """The sim as users run it (virtual time jumps past 50 ms of lag): at time scale 20 its
    tokens reach the client when the engine's virtual clock says, within half."""
    h = start_in_thread(EngineConfig.from_names(*SLOW, prefix_caching=False), time_scale=SCALE)
    try:

        async def go() -> tuple[StreamResult, float, StreamResult, float]:
            async with httpx.AsyncClient(base_url=h.url) as c:
                m0 = scrape(h.url)
                long = await stream(
                    c, "/v1/completions", {"prompt": words(8192, 1), "max_tokens": 2}
                )
                m1 = scrape(h.url)
                decode = await stream(
                    c,
                    "/v1/completions",
                    {"prompt": words(64, 2), "max_tokens": 40, "ignore_eos": True},
                )
                m2 = scrape(h.url)
            ttft = metric(m1, "vllm:time_to_first_token_seconds_sum") - metric(
                m0, "vllm:time_to_first_token_seconds_sum"
            )
            itl_sum = metric(m2, "vllm:inter_token_latency_seconds_sum") - metric(
                m1, "vllm:inter_token_latency_seconds_sum"
            )
            itl_n = metric(m2, "vllm:inter_token_latency_seconds_count") - metric(
                m1, "vllm:inter_token_latency_seconds_count"
            )
            return long, ttft, decode, itl_sum / itl_n

        long, ttft, decode, itl = asyncio.run(go())
    finally:
        h.stop()
    assert long.ttft * SCALE == pytest.approx(ttft, rel=0.5)
    assert decode.tpot * SCALE == pytest.approx(itl, rel=0.5)


def test_kv_exhaustion_queues_and_preempts(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(
        "H100-SXM-80GB", "llama-3.1-8b", time_scale=5, num_gpu_blocks=64, prefix_caching=False
    )
    peak = {"usage": 0.0, "waiting": 0.0}

    async def go() -> list[StreamResult]:
        async with httpx.AsyncClient(base_url=h.url) as c:
            tasks = [
                asyncio.create_task(
                    stream(
                        c,
                        "/v1/completions",
                        {"prompt": words(100, i), "max_tokens": 150, "ignore_eos": True},
                    )
                )
                for i in range(16)
            ]
            while not all(t.done() for t in tasks):
                text = (await c.get("/metrics")).text
                for key, name in (
                    ("usage", "kv_cache_usage_perc"),
                    ("waiting", "num_requests_waiting"),
                ):
                    found = re.search(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", text, re.M)
                    assert found
                    peak[key] = max(peak[key], float(found.group(1)))
                await asyncio.sleep(0.01)
            return [t.result() for t in tasks]

    results = asyncio.run(go())
    assert all(r.usage and r.usage["completion_tokens"] == 150 for r in results)
    assert all(len(r.texts) == 150 for r in results)  # recompute never re-sends tokens
    m = scrape(h.url)
    assert metric(m, "vllm:num_preemptions_total") > 0
    assert metric(m, "vllm:prompt_tokens_recomputed_total") > 0
    assert peak["usage"] > 0.9 and peak["waiting"] >= 1
    assert 'num_gpu_blocks="64"' in httpx.get(h.url + "/metrics").text


def test_prefix_caching_cuts_ttft(sim_factory) -> None:  # type: ignore[no-untyped-def]
    system = words(6000, 42)

    def two_turns(caching: bool) -> tuple[StreamResult, StreamResult, dict[str, float]]:
        h = sim_factory(*SLOW, time_scale=SCALE, prefix_caching=caching)

        async def go() -> tuple[StreamResult, StreamResult]:
            async with httpx.AsyncClient(base_url=h.url) as c:
                out = []
                for q in ("What is a KV cache?", "Why does batching help?"):
                    msgs = [{"role": "system", "content": system}, {"role": "user", "content": q}]
                    before = metric(scrape(h.url), "vllm:time_to_first_token_seconds_sum")
                    out.append(
                        await stream(c, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
                    )
                    after = metric(scrape(h.url), "vllm:time_to_first_token_seconds_sum")
                    engine_ttft.append(after - before)  # this turn's TTFT, virtual seconds
                return out[0], out[1]

        engine_ttft: list[float] = []
        a, b = asyncio.run(go())
        ttfts.append(engine_ttft)
        return a, b, scrape(h.url)

    ttfts: list[list[float]] = []
    cold, warm, m_on = two_turns(True)
    assert cold.usage and warm.usage
    assert cold.usage["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = warm.usage["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    assert 5900 <= cached <= 6016 and cached % 16 == 0
    assert ttfts[0][1] < 0.5 * ttfts[0][0]  # the warm turn skips ~6k tokens of prefill
    assert metric(m_on, "vllm:prefix_cache_hits_total") == cached
    _cold_off, warm_off, m_off = two_turns(False)
    assert warm_off.usage and warm_off.usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert metric(m_off, "vllm:prefix_cache_hits_total") == 0
    # engine clock: the two turns' TTFT sum is ≈ 1 prefill with caching, ≈ 2 without
    ttft_on = metric(m_on, "vllm:time_to_first_token_seconds_sum")
    ttft_off = metric(m_off, "vllm:time_to_first_token_seconds_sum")
    assert ttft_on < 0.65 * ttft_off


def test_client_disconnect_aborts_the_request(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H100-SXM-80GB", "llama-3.1-8b", time_scale=1)
    with (
        httpx.Client(base_url=h.url) as c,
        c.stream(
            "POST",
            "/v1/completions",
            json={"prompt": "hi", "max_tokens": 5000, "ignore_eos": True, "stream": True},
        ) as r,
    ):
        next(r.iter_lines())
    wait_for(lambda: metric(scrape(h.url), "vllm:num_requests_running") == 0)
    m = scrape(h.url)
    assert (
        m[
            'vllm:request_success_total{engine="0",finished_reason="abort",model_name="llama-3.1-8b"}'
        ]
        == 1
    )
    assert metric(m, "vllm:kv_cache_usage_perc") == 0


def test_dcgm_memory_and_vllm_names(sim_factory, fixtures_dir: Path) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory("H200-SXM-141GB", "llama-3.1-70b", time_scale=50, tp=2)
    m = scrape(h.url)
    fixtures = fixtures_dir / "vllm"
    text = httpx.get(h.url + "/metrics").text
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    # every vllm family we expose exists in real vLLM with the same type
    names = fixtures / "metric_families_v0.26.0_names_types.txt"
    real = dict(
        line.split() for line in names.read_text().splitlines() if line and not line.startswith("#")
    )
    capture = (fixtures / "metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom").read_text()
    real.update(re.findall(r"^# TYPE (vllm:\S+) (\S+)$", capture, re.M))
    exposed = [name for name in types if name.startswith("vllm:")]
    assert exposed  # the sim does expose vLLM families
    for name in exposed:
        assert real.get(name) == types[name], name
    used = [v for k, v in m.items() if k.startswith("DCGM_FI_DEV_FB_USED{")]
    free = [v for k, v in m.items() if k.startswith("DCGM_FI_DEV_FB_FREE{")]
    assert len(used) == 2 and len(free) == 2  # one series per GPU of the TP group
    total_mib = 150755819520 / 2**20
    assert used[0] + free[0] == pytest.approx(total_mib, rel=0.01)
    assert 0.85 * total_mib < used[0] < 0.9 * total_mib  # vLLM preallocates its KV pool
    key = next(k for k in m if k.startswith("DCGM_FI_DEV_FB_USED{"))
    assert 'modelName="NVIDIA H200"' in key and 'UUID="GPU-' in key and 'gpu="0"' in key
    assert 'framework="sim"' in text


# --- CLI ---------------------------------------------------------------------------------------


def test_register_adds_the_sim_subcommand() -> None:
    import argparse

    from services.commands import sim as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(
        ["sim", "--gpu", "H200-SXM-141GB", "--model", "llama-3.1-70b", "--tp", "2",
         "--prefix-caching", "off", "--max-batch-size", "64", "--dtype", "fp8"]
    )  # fmt: skip
    assert args.func is command.run
    cfg = command.config_from_args(args)
    assert cfg.tp == 2 and not cfg.prefix_caching and cfg.max_batch_size == 64
    assert cfg.deployment().weight_bytes_per_param == 1.0
    bad = parser.parse_args(["sim", "--gpu", "B300"])
    with pytest.raises(ConfigError, match="H100-SXM-80GB"):
        command.config_from_args(bad)
    # --dtype / --kv-cache-dtype take analysis.precision's sized precisions (and schemes)
    int4 = command.config_from_args(
        parser.parse_args(["sim", "--dtype", "w4a16", "--kv-cache-dtype", "q8_0"])
    )
    assert int4.weight_precision == "int4"
    assert int4.deployment().weight_bytes_per_param == 0.5 + 2 / 128  # INT4 + group scales
    assert int4.deployment().kv_bytes_per_elem == 34 / 32
    for flags, message in (
        (["--dtype", "int3"], "--dtype 'int3' is not a known weight precision"),
        (["--dtype", "bitsandbytes"], "--dtype 'bitsandbytes' has no fixed size per weight"),
        (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype 'fp4' is not a known KV-cache dtype"),
    ):
        with pytest.raises(InputError, match=re.escape(message)):
            command.config_from_args(parser.parse_args(["sim", *flags]))


def test_python_m_sim_serves(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sim",
            "--port",
            str(port),
            "--model",
            "qwen2.5-0.5b",
            "--time-scale",
            "10",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return False

        wait_for(up, timeout=30, interval=0.1)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"prompt": "hello", "max_tokens": 3, "ignore_eos": True},
        )
        assert r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode()
    assert "simulated engine" in out and f":{port}" in out
