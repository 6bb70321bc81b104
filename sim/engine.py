"""The reference engine's scheduler: iteration-level continuous batching over paged KV blocks.

One :class:`Scheduler` holds the engine state (waiting and running requests, the block pool, the
prefix cache, the counters). Time is virtual: ``schedule(now)`` plans one iteration and tells how
long it takes (``analysis.perf_model.iteration_time``); ``commit(batch, end)`` applies it at its
end time, emitting one token per sequence that completed its known tokens. Two drivers use the
same scheduler:

* :func:`simulate` runs a list of arrivals in virtual time as fast as the CPU allows (calibration,
  planning, unit tests);
* ``sim.server`` paces the same loop against the wall clock (``time_scale``) and streams tokens.

Scheduling policy (modelled on vLLM v1):

1. Running requests first, in arrival order: each gets the tokens it still needs (1 for a decode,
   the rest of the prompt for a prefill), chunked to the per-iteration token budget
   ``max_batched_tokens``. When the block pool cannot hold a running request's new tokens, the
   most recently admitted running request is **preempted** (its blocks are freed and it goes back
   to the head of the queue, to be recomputed later: vLLM's recompute preemption).
2. If nothing was preempted, waiting requests are admitted in FIFO order while the batch has room
   (``max_batch_size``), budget is left and their blocks fit. With prefix caching, the longest
   run of already computed full blocks of the prompt (hash chain over block-aligned prefixes) is
   reused: those tokens are not computed again, which is what cuts TTFT for shared prefixes.
3. Blocks of finished (or preempted) requests stay in the prefix cache until their memory is
   needed (LRU eviction through the free queue).
"""

from __future__ import annotations

import contextlib
import heapq
import math
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import seeds
from analysis import perf_model
from analysis.capacity import ModelShape
from analysis.perf_model import Calibration, Deployment, GpuSpec
from errors import ConfigError

WAITING = 0
RUNNING = 1
FINISHED = 2

# Histogram bucket bounds copied from a real vLLM v1 /metrics capture
# (tests/fixtures/vllm/metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip
PHASE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TOKEN_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
                 10000.0, 20000.0, 50000.0, 100000.0)  # fmt: skip
ITER_TOKEN_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
                      8192.0, 16384.0)  # fmt: skip


@dataclass(frozen=True)
class EngineConfig:
    """Everything that defines a simulated engine (the normalised engine parameters of §6)."""

    gpu: GpuSpec
    model: ModelShape
    tp: int = 1
    max_batch_size: int = 256
    kv_memory_fraction: float = 0.9
    max_batched_tokens: int = 8192
    block_size: int = 16
    prefix_caching: bool = True
    weight_dtype_bytes: float | None = None  # None: the checkpoint dtype
    kv_dtype_bytes: float | None = None  # None: perf_model.Deployment.kv_bytes_per_elem
    num_gpu_blocks: int | None = None  # override the computed KV capacity (like vLLM's flag)
    # Admission policy: False = vLLM (allocate blocks as tokens arrive; preempt when they run
    # out); True = TensorRT-LLM's GUARANTEED_NO_EVICT (reserve prompt + max output at admission).
    reserve_full_output: bool = False
    calibration: Calibration = field(default_factory=Calibration)
    seed: int = 0
    served_model_name: str | None = None
    weight_precision: str | None = None  # analysis.precision's name of weight_dtype_bytes

    @classmethod
    def from_names(cls, gpu: str, model: str, **kwargs: object) -> EngineConfig:
        """Resolve catalog names (``seeds/``); ConfigError lists the valid names."""
        g = GpuSpec.from_entry(seeds.entry("gpus", gpu))
        m = ModelShape.from_entry(seeds.entry("models", model))
        cfg = cls(gpu=g, model=m, **kwargs)  # type: ignore[arg-type]
        cfg.validate()
        return cfg

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model.name

    def deployment(self) -> Deployment:
        return Deployment(
            gpu=self.gpu,
            model=self.model,
            tp=self.tp,
            weight_dtype_bytes=self.weight_dtype_bytes,
            kv_dtype_bytes=self.kv_dtype_bytes,
            kv_memory_fraction=self.kv_memory_fraction,
            block_size=self.block_size,
            max_batched_tokens=self.max_batched_tokens,
            calibration=self.calibration,
            weight_precision=self.weight_precision,
        )

    def validate(self) -> None:
        checks = [
            (self.tp >= 1, "tp must be ≥ 1"),
            (self.max_batch_size >= 1, "max_batch_size must be ≥ 1"),
            (0.0 < self.kv_memory_fraction <= 1.0, "kv_memory_fraction must be in (0, 1]"),
            (self.max_batched_tokens >= 1, "max_batched_tokens must be ≥ 1"),
            (self.block_size >= 1, "block_size must be ≥ 1"),
            (self.num_gpu_blocks is None or self.num_gpu_blocks >= 1, "num_gpu_blocks must be ≥ 1"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(f"invalid sim configuration: {msg}")
        self.total_blocks()  # raises when the model does not fit

    def total_blocks(self) -> int:
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        return perf_model.kv_blocks(self.deployment())

    def with_overrides(self, **kwargs: object) -> EngineConfig:
        return replace(self, **kwargs)  # type: ignore[arg-type]


class TokenSink(Protocol):
    """Receives a request's tokens as the scheduler commits them (the server's stream writer)."""

    def on_token(self, req: SimRequest, now: float) -> None: ...

    def on_finish(self, req: SimRequest, now: float) -> None: ...


class SimRequest:
    """One request inside the engine. Times are virtual seconds."""

    __slots__ = (
        "arrival",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "finish_reason",
        "finish_time",
        "first_scheduled",
        "first_token_time",
        "itl_sum",
        "last_token_time",
        "max_output",
        "num_computed",
        "num_generated",
        "preemptions",
        "prompt_len",
        "rid",
        "sink",
        "state",
        "token_times",
    )

    def __init__(
        self,
        rid: str,
        prompt_len: int,
        max_output: int,
        arrival: float,
        *,
        block_hashes: Sequence[int] | None = None,
        sink: TokenSink | None = None,
        finish_reason: str = "length",
        record_token_times: bool = False,
    ) -> None:
        self.rid = rid
        self.prompt_len = max(1, int(prompt_len))
        self.max_output = max(1, int(max_output))
        self.arrival = arrival
        self.block_hashes = list(block_hashes) if block_hashes else []
        self.sink = sink
        self.finish_reason = finish_reason  # what it will be when max_output is reached
        self.state = WAITING
        self.num_computed = 0
        self.num_generated = 0
        self.blocks: list[int] = []
        self.cached_tokens = 0
        self.preemptions = 0
        self.first_scheduled: float | None = None
        self.first_token_time: float | None = None
        self.last_token_time = 0.0
        self.finish_time: float | None = None
        self.itl_sum = 0.0
        self.token_times: list[float] | None = [] if record_token_times else None

    @property
    def total_tokens(self) -> int:
        """Tokens whose KV the sequence needs now: the prompt plus all but the newest output."""
        return self.prompt_len + self.num_generated

    @property
    def finished(self) -> bool:
        return self.state == FINISHED


@dataclass
class Batch:
    """One planned iteration: ``items`` are (request, tokens to compute) pairs."""

    items: list[tuple[SimRequest, int]]
    duration: float
    new_tokens: int
    preempted: int


class Histogram:
    """A Prometheus histogram (cumulative buckets rendered by sim.metrics)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        i = 0
        bounds = self.bounds
        n = len(bounds)
        while i < n and value > bounds[i]:
            i += 1
        self.counts[i] += 1
        self.sum += value
        self.count += 1


@dataclass
class EngineStats:
    """Counters and histograms behind /metrics (vLLM v1 semantics, virtual seconds)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prompt_tokens_computed: int = 0
    prompt_tokens_cached: int = 0
    prompt_tokens_recomputed: int = 0
    iterations: int = 0
    busy_time: float = 0.0
    success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(PHASE_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(PHASE_BUCKETS))
    inference: Histogram = field(default_factory=lambda: Histogram(PHASE_BUCKETS))
    prefill: Histogram = field(default_factory=lambda: Histogram(PHASE_BUCKETS))
    decode: Histogram = field(default_factory=lambda: Histogram(PHASE_BUCKETS))
    req_prompt_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    req_generation_tokens: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITER_TOKEN_BUCKETS))


class BlockPool:
    """Paged KV blocks with reference counts and a hash-keyed prefix cache.

    Free blocks sit in an LRU queue; a free block may still carry a cached hash (its content is
    valid until the block is reused), so a cache hit can revive it. Allocation takes the least
    recently freed block and drops its hash.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}  # hash → block id
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def allocate(self, n: int) -> list[int]:
        out: list[int] = []
        free = self.free
        for _ in range(n):
            b, _none = free.popitem(last=False)
            h = self.block_hash[b]
            if h is not None:
                self.block_hash[b] = None
                if self.cached.get(h) == b:
                    del self.cached[h]
            self.ref[b] = 1
            out.append(b)
        return out

    def release(self, blocks: Iterable[int]) -> None:
        # Free in reverse so that a sequence's tail blocks are evicted before its prefix.
        for b in reversed(list(blocks)):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Blocks holding the longest cached prefix of ``hashes`` (not yet referenced)."""
        out: list[int] = []
        for h in hashes:
            b = self.cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def touch(self, blocks: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks (reviving free ones)."""
        for b in blocks:
            if self.ref[b] == 0:
                self.free.pop(b, None)
            self.ref[b] += 1

    def register(self, block: int, h: int) -> None:
        if h not in self.cached:
            self.cached[h] = block
            self.block_hash[block] = h


class Scheduler:
    """Continuous batching over a paged KV cache, advanced one iteration at a time."""

    def __init__(self, config: EngineConfig) -> None:
        config.validate()
        self.config = config
        self.dep = config.deployment()
        self.block_size = config.block_size
        self.pool = BlockPool(config.total_blocks())
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = EngineStats()
        self.max_prompt = min(
            config.model.context or 1 << 30, self.pool.num_blocks * self.block_size
        )

    # --- queries -------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks referenced by live requests (vllm:kv_cache_usage_perc)."""
        return (self.pool.num_blocks - self.pool.num_free) / self.pool.num_blocks

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def check_fits(self, prompt_len: int, max_output: int) -> str | None:
        """Why a request can never run (too long for the context or the whole KV cache)."""
        ctx = self.config.model.context
        if ctx and prompt_len + max_output > ctx:
            return (
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{prompt_len + max_output} tokens ({prompt_len} in the messages, "
                f"{max_output} in the completion)."
            )
        cap = self.pool.num_blocks * self.block_size
        if prompt_len + max_output > cap:
            return (
                f"The request needs {prompt_len + max_output} tokens of KV cache but the engine "
                f"holds only {cap} ({self.pool.num_blocks} blocks of {self.block_size})."
            )
        return None

    # --- mutations -----------------------------------------------------------------------------
    def add(self, req: SimRequest) -> None:
        if req.state == FINISHED:
            return  # aborted before it reached the scheduler
        req.state = WAITING
        self.waiting.append(req)

    def abort(self, req: SimRequest, now: float) -> None:
        """Drop a request (client went away); frees its blocks."""
        if req.state == FINISHED:
            return
        queue: deque[SimRequest] | list[SimRequest] = (
            self.waiting if req.state == WAITING else self.running
        )
        with contextlib.suppress(ValueError):
            queue.remove(req)
        self.pool.release(req.blocks)
        req.blocks = []
        req.state = FINISHED
        req.finish_reason = "abort"
        req.finish_time = now
        self.stats.success["abort"] += 1

    def _preempt(self, victim: SimRequest) -> None:
        self.pool.release(victim.blocks)
        victim.blocks = []
        victim.num_computed = 0
        victim.state = WAITING
        victim.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self, now: float) -> Batch:
        """Plan one iteration starting at ``now``; the caller commits it at now + duration."""
        budget = self.config.max_batched_tokens
        pool = self.pool
        bs = self.block_size
        items: list[tuple[SimRequest, int]] = []
        preempted = 0
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.total_tokens - req.num_computed
            if n > budget:
                n = budget
            need = -(-(req.num_computed + n) // bs) - len(req.blocks)
            if need > 0:
                while need > pool.num_free:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted += 1
                    if victim is req:
                        break
                if req.state != RUNNING:
                    break
                req.blocks.extend(pool.allocate(need))
            items.append((req, n))
            budget -= n
            i += 1

        if not preempted:
            self._admit(items, budget, now)

        new_tokens = 0
        kv_read = 0.0
        pairs = 0.0
        for req, n in items:
            p = req.num_computed
            new_tokens += n
            kv_read += p + n
            pairs += n * p + n * (n + 1) / 2.0
        duration = perf_model.iteration_time(
            self.dep,
            num_seqs=len(items),
            new_tokens=new_tokens,
            kv_read_tokens=kv_read,
            attn_pairs=pairs,
        )
        return Batch(items=items, duration=duration, new_tokens=new_tokens, preempted=preempted)

    def _admit(self, items: list[tuple[SimRequest, int]], budget: int, now: float) -> None:
        pool = self.pool
        bs = self.block_size
        caching = self.config.prefix_caching
        reserve_full = self.config.reserve_full_output
        max_batch = self.config.max_batch_size
        waiting = self.waiting
        running = self.running
        stats = self.stats
        while waiting and budget > 0 and len(running) < max_batch:
            req = waiting[0]
            total = req.total_tokens
            hits: list[int] = []
            if caching and req.block_hashes:
                # Never reuse the block holding the last known token: at least one token must be
                # computed to produce logits (vLLM does the same).
                usable = min(len(req.block_hashes), (total - 1) // bs)
                hits = pool.lookup(req.block_hashes[:usable])
            hit_tokens = len(hits) * bs
            n = min(total - hit_tokens, budget)
            reserve = req.prompt_len + req.max_output if reserve_full else hit_tokens + n
            need = -(-reserve // bs) - len(hits)
            revived = sum(1 for b in hits if pool.ref[b] == 0)
            if need + revived > pool.num_free:
                break
            waiting.popleft()
            if caching:
                stats.prefix_queries += total
                stats.prefix_hits += hit_tokens
            pool.touch(hits)
            req.blocks = hits + pool.allocate(need)
            req.num_computed = hit_tokens
            if req.first_scheduled is None:
                req.first_scheduled = now
                req.cached_tokens = hit_tokens
                stats.prompt_tokens_cached += hit_tokens
                stats.queue.observe(max(0.0, now - req.arrival))
            else:
                stats.prompt_tokens_recomputed += n
            req.state = RUNNING
            running.append(req)
            items.append((req, n))
            budget -= n

    def commit(self, batch: Batch, end: float) -> list[SimRequest]:
        """Apply a planned iteration at virtual time ``end``; returns the requests it finished."""
        stats = self.stats
        stats.iterations += 1
        stats.busy_time += batch.duration
        stats.iteration_tokens.observe(batch.new_tokens)
        bs = self.block_size
        pool = self.pool
        caching = self.config.prefix_caching
        finished: list[SimRequest] = []
        for req, n in batch.items:
            if req.state != RUNNING:
                continue  # aborted or preempted after planning
            before = req.num_computed
            req.num_computed = before + n
            if req.first_token_time is None and before < req.prompt_len:
                stats.prompt_tokens_computed += min(req.num_computed, req.prompt_len) - before
            if caching and req.block_hashes:
                hashes = req.block_hashes
                for j in range(before // bs, min(req.num_computed // bs, len(hashes))):
                    pool.register(req.blocks[j], hashes[j])
            if req.num_computed < req.total_tokens:
                continue  # mid-prefill chunk: no token yet
            req.num_generated += 1
            stats.generation_tokens += 1
            if req.first_token_time is None:
                req.first_token_time = end
                stats.prompt_tokens += req.prompt_len
                stats.ttft.observe(end - req.arrival)
                stats.req_prompt_tokens.observe(req.prompt_len)
            else:
                gap = end - req.last_token_time
                req.itl_sum += gap
                stats.itl.observe(gap)
            req.last_token_time = end
            if req.token_times is not None:
                req.token_times.append(end)
            done = req.num_generated >= req.max_output
            if done:
                self._finish(req, end)
                finished.append(req)
            if req.sink is not None:
                req.sink.on_token(req, end)
                if done:
                    req.sink.on_finish(req, end)
        if finished:
            self.running = [r for r in self.running if r.state == RUNNING]
        return finished

    def _finish(self, req: SimRequest, end: float) -> None:
        stats = self.stats
        req.state = FINISHED
        req.finish_time = end
        self.pool.release(req.blocks)
        req.blocks = []
        stats.success[req.finish_reason] = stats.success.get(req.finish_reason, 0) + 1
        first = req.first_token_time if req.first_token_time is not None else end
        sched = req.first_scheduled if req.first_scheduled is not None else req.arrival
        stats.e2e.observe(end - req.arrival)
        stats.inference.observe(end - sched)
        stats.prefill.observe(first - sched)
        stats.decode.observe(end - first)
        stats.req_generation_tokens.observe(req.num_generated)
        if req.num_generated > 1:
            stats.tpot.observe((end - first) / (req.num_generated - 1))


# --- prompt tokens and prefix hashes ---------------------------------------------------------

BYTES_PER_TOKEN = 4


def count_tokens(text: str | bytes) -> int:
    """Prompt tokens of a text without a tokenizer: ceil(UTF-8 bytes / 4), at least 1.

    English averages ~5.5 bytes per word with its space, so this is ~1.35 tokens per word, close
    to what Llama-3's tokenizer gives; the load generator calibrates words → tokens from ``usage``.
    """
    n = len(text.encode("utf-8")) if isinstance(text, str) else len(text)
    return max(1, -(-n // BYTES_PER_TOKEN))


def prefix_block_hashes(data: bytes, block_size: int) -> list[int]:
    """Chained hashes of the full token blocks of a prompt (a token = 4 bytes of its UTF-8 text).

    Block j's hash covers the whole prefix up to the end of block j, so equal hashes mean equal
    prefixes (the property vLLM's prefix cache relies on).
    """
    step = block_size * BYTES_PER_TOKEN
    out: list[int] = []
    h = 0
    for j in range(len(data) // step):
        h = hash((h, data[j * step : (j + 1) * step]))
        out.append(h)
    return out


def draw_output_len(rng: random.Random, max_tokens: int, ignore_eos: bool) -> tuple[int, str]:
    """Output length and finish reason of one request.

    With ``ignore_eos`` the engine generates exactly ``max_tokens``. Otherwise the "natural" length
    (where the model would emit EOS) is log-normal with a median of 200 tokens and σ = 1.0 (a
    chat-like spread: P10 ≈ 55, P90 ≈ 720 tokens), capped by ``max_tokens`` (then finish_reason
    is ``length``).
    """
    if ignore_eos:
        return max_tokens, "length"
    natural = max(1, int(rng.lognormvariate(math.log(200.0), 1.0)))
    if natural < max_tokens:
        return natural, "stop"
    return max_tokens, "length"


# --- offline driver --------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One request of an offline simulation."""

    time: float
    prompt_len: int
    output_len: int
    block_hashes: tuple[int, ...] = ()


@dataclass(frozen=True)
class RequestResult:
    arrival: float
    prompt_len: int
    output_len: int
    cached_tokens: int
    first_token: float
    finish: float
    preemptions: int
    token_times: tuple[float, ...] = ()

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    @property
    def tpot(self) -> float | None:
        if self.output_len < 2:
            return None
        return (self.finish - self.first_token) / (self.output_len - 1)


@dataclass
class SimulationResult:
    requests: list[RequestResult]
    stats: EngineStats
    duration: float
    peak_running: int
    peak_kv_usage: float


def simulate(
    config: EngineConfig,
    arrivals: Sequence[Arrival] | None = None,
    *,
    closed_loop: tuple[int, Callable[[int], Arrival]] | None = None,
    num_requests: int | None = None,
    record_token_times: bool = False,
) -> SimulationResult:
    """Run requests through the scheduler in virtual time, as fast as possible.

    Either ``arrivals`` (open loop: each request arrives at its time) or ``closed_loop =
    (concurrency, make)`` with ``num_requests``: ``concurrency`` clients each send a new request
    (``make(i)``; its ``time`` is ignored) as soon as their previous one finishes.
    """
    sched = Scheduler(config)
    # A request reaches the scheduler request_overhead_s after it arrives (API server latency).
    delay = config.calibration.request_overhead_s
    pending: list[tuple[float, int, Arrival]] = []
    seq = 0
    if arrivals is not None:
        for a in arrivals:
            pending.append((a.time + delay, seq, a))
            seq += 1
        heapq.heapify(pending)
    made = 0
    total = len(pending)
    if closed_loop is not None:
        conc, make = closed_loop
        total = num_requests if num_requests is not None else conc
        for _ in range(min(conc, total)):
            heapq.heappush(pending, (delay, seq, make(made)))
            seq += 1
            made += 1
    t = 0.0
    results: list[RequestResult] = []
    peak_running = 0
    peak_kv = 0.0
    while pending or sched.has_work():
        while pending and pending[0][0] <= t:
            at, _s, a = heapq.heappop(pending)
            sched.add(
                SimRequest(
                    str(_s),
                    a.prompt_len,
                    a.output_len,
                    at - delay,
                    block_hashes=a.block_hashes,
                    record_token_times=record_token_times,
                )
            )
        if not sched.has_work():
            t = pending[0][0]
            continue
        batch = sched.schedule(t)
        if not batch.items:
            if not pending:
                raise ConfigError("simulation stalled: a request can never fit in the KV cache")
            t = max(t, pending[0][0])
            continue
        t += batch.duration
        peak_running = max(peak_running, sched.num_running)
        peak_kv = max(peak_kv, sched.kv_usage)
        for req in sched.commit(batch, t):
            assert req.first_token_time is not None and req.finish_time is not None
            results.append(
                RequestResult(
                    arrival=req.arrival,
                    prompt_len=req.prompt_len,
                    output_len=req.num_generated,
                    cached_tokens=req.cached_tokens,
                    first_token=req.first_token_time,
                    finish=req.finish_time,
                    preemptions=req.preemptions,
                    token_times=tuple(req.token_times or ()),
                )
            )
            if closed_loop is not None and made < total:
                heapq.heappush(pending, (t + delay, seq, closed_loop[1](made)))
                seq += 1
                made += 1
    start = min((r.arrival for r in results), default=0.0)
    end = max((r.finish for r in results), default=0.0)
    return SimulationResult(
        requests=results,
        stats=sched.stats,
        duration=end - start,
        peak_running=peak_running,
        peak_kv_usage=peak_kv,
    )
