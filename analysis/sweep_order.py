"""Sample-efficient sweeps: order a grid by a prior from the performance model, prune what cannot
beat the incumbent. Pure.

A sweep of engine parameters spends most of its time measuring configurations that turn out to
be poor. Two things avoid that:

1. **A prior** (:func:`prior_capacity`): a rough SLO capacity (req/s) of one configuration from
   ``analysis.perf_model`` — the same physics as the sim — computed in microseconds. It only has
   to *rank* configurations roughly right, not predict their capacity.
2. **Ordering and pruning** (:func:`order_points`, :func:`can_beat`, :class:`EfficientPlan`):
   measure the best priors first; once the best measured capacity (the *incumbent*) is known,
   a point whose prior, inflated by the prior's observed error, is still below it is not run.

The prior (per configuration; ``in``/``out`` the workload's mean input/output tokens):

* **KV room**: ``perf_model.kv_capacity_tokens`` of the deployment (tensor_parallel,
  kv_memory_fraction, block_size, max_batched_tokens, and optionally weight_dtype_bytes,
  kv_dtype_bytes, precision; a model that does not fit → 0; MoE and MLA models through
  ``analysis.capacity``: all weights held, the experts a step's tokens touch read); with
  ``ctx_size`` (llama.cpp's total context) at most that. A sequence holds on average
  ``in + out/2`` tokens plus half a block of waste, so the KV holds ``B_kv`` sequences; the
  batch is capped at ``B_max = min(max_batch_size, B_kv)``.
* **Queueing allowance**: with Poisson-like arrivals the number of requests in the engine
  fluctuates around its mean B by about √B, so the percentile's z-score (P90 1.28, P95 1.64,
  P99 2.33) times √B must also fit: ``B + z·√B ≤ B_max``; beyond that requests queue and TTFT
  explodes.
* **Decode and prefill share the GPU** (chunked prefill): at rate λ the engine spends the share
  ``u = λ · t_prefill(in)`` of its time on prefill, so one decode iteration of batch B takes
  ``t_step = decode_step_time(B, in + out/2) / (1 − u)`` — the mean TPOT.
* **Little's law** closes the loop: ``B = λ · (TTFT + out · t_step)``, solved by fixed-point
  iteration (B grows with λ; no fixed point below B_max means the rate is infeasible).
* **TTFT** ≈ request overhead + ``t_prefill(in) / (1 − u)`` + half a decode step (the iteration a
  new request waits for). Percentile tails: mean × (1 + 0.5 z) for TTFT (input lengths vary, and
  prefills queue behind each other), mean × (1 + 0.1 z) for TPOT (a request's TPOT averages
  over its many steps). Both must stay within the SLO's limits.
* The **prior** is the largest λ meeting all of that (bisection; it is monotone in λ).
* **prefix_caching** only matters when the workload names shared ``prefix_tokens`` (then those
  are not prefilled again); **max_model_len** (or ``ctx_size / max_batch_size`` for llama.cpp's
  per-slot context) shorter than ``in + out`` makes the prior 0 (requests are rejected).

Left out (so the prior is biased, usually optimistic at high load): the spread of request
lengths, preemption when the KV runs out mid-decode, the per-iteration token budget's effect on
tail TPOT, scheduling order. The pruning rule absorbs the bias by calibrating on measurements.

**Pruning rule.** ``optimism`` is how much better than its prior a configuration may turn out:
``max(floor, margin × max_i(measured_i / prior_i) − 1)`` over the points measured so far (a
systematic bias of the prior cancels: if every prior is half the truth, the ratios are ≈ 2 and
so is the inflation). A point is pruned when ``prior × (1 + optimism) < incumbent`` (the best
measured capacity). Nothing is pruned before ``min_measured`` points have been measured. Since
points are visited best prior first, the first point that cannot beat the incumbent ends the
sweep: every later one has a lower prior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from analysis import capacity, perf_model
from analysis.capacity import ModelShape
from analysis.perf_model import (
    DEFAULT_CALIBRATION,
    Calibration,
    Deployment,
    GpuSpec,
)
from analysis.precision import sized_precision
from errors import ConfigError, InputError

#: z-scores of the percentiles an SLO may target (one-sided normal).
Z_SCORES: Final[Mapping[float, float]] = {90.0: 1.2816, 95.0: 1.6449, 99.0: 2.3263}
#: Engine defaults when a point leaves a parameter out (vLLM's, as the sim uses).
DEFAULTS: Final[Mapping[str, Any]] = {
    "max_batch_size": 256,
    "kv_memory_fraction": 0.9,
    "max_batched_tokens": 8192,
    "block_size": 16,
    "prefix_caching": True,
    "max_model_len": None,
    "tensor_parallel": 1,
    "ctx_size": None,
    # the engine told how many KV blocks to allocate (vLLM's --num-gpu-blocks-override, the sim's
    # num_gpu_blocks): KV room = num_gpu_blocks × block_size instead of the memory budget's
    "num_gpu_blocks": None,
    # the weights' and KV's bytes (None: the checkpoint's, perf_model.Deployment's rules) and the
    # weight precision's name in analysis.precision (picks the FP8 / INT8 tensor peak)
    "weight_dtype_bytes": None,
    "kv_dtype_bytes": None,
    "precision": None,
}
TTFT_TAIL_PER_Z: Final = 0.5
TPOT_TAIL_PER_Z: Final = 0.1
MAX_PREFILL_SHARE: Final = 0.95


def _mean(value: Any, what: str) -> float:
    """A workload length: a number, or a distribution mapping with a ``mean`` (or ``value``)."""
    if isinstance(value, Mapping):
        value = value.get("mean", value.get("value"))
    if value is None or isinstance(value, bool):
        raise ConfigError(f"workload {what} has no mean length; accepted: a number of tokens ≥ 1")
    num = float(value)
    if not num >= 1.0 or not math.isfinite(num):
        raise ConfigError(f"workload {what} is {num:g}; accepted: a number of tokens ≥ 1")
    return num


def _param(params: Mapping[str, Any], name: str) -> Any:
    value = params.get(name)
    return DEFAULTS[name] if value is None else value


def _optional_float(params: Mapping[str, Any], name: str) -> float | None:
    value = _param(params, name)
    return None if value is None else float(value)


def _precision(params: Mapping[str, Any]) -> str | None:
    value = _param(params, "precision")
    if value is None:
        return None
    try:
        return sized_precision(str(value), "precision")
    except InputError as exc:
        raise ConfigError(exc.message, hint=exc.hint) from None


def _z(percentile: float) -> float:
    try:
        return Z_SCORES[float(percentile)]
    except KeyError:
        raise ConfigError(
            f"SLO percentile is {percentile:g}; accepted: " + ", ".join(f"{p:g}" for p in Z_SCORES)
        ) from None


def prior_capacity(
    params: Mapping[str, Any],
    gpu: GpuSpec,
    model: ModelShape,
    workload: Mapping[str, Any],
    slo: tuple[float | None, float | None, float],
    *,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> float:
    """A rough SLO capacity in req/s of one configuration (see the module docstring).

    ``params``: normalised engine parameters (missing ones take :data:`DEFAULTS`);
    ``workload``: ``input_tokens`` and ``output_tokens`` (numbers or ``{mean: …}``), optionally
    ``prefix_tokens`` shared between requests; ``slo``: (TTFT ms, TPOT ms, percentile), a None
    limit is no target. 0.0 when the configuration cannot serve the workload at all.
    """
    inp = _mean(workload.get("input_tokens"), "input_tokens")
    out = _mean(workload.get("output_tokens"), "output_tokens")
    if params.get("max_tokens") is not None:
        out = min(out, float(params["max_tokens"]))
    prefix = float(workload.get("prefix_tokens") or 0.0)
    ttft_ms, tpot_ms, percentile = slo
    z = _z(percentile)
    batch = int(_param(params, "max_batch_size"))
    max_len = params.get("max_model_len")
    if max_len is not None and inp + out > float(max_len):
        return 0.0
    ctx_size = params.get("ctx_size")
    if ctx_size is not None and inp + out > float(ctx_size) / batch:
        return 0.0  # llama.cpp splits its context evenly between its slots
    precision = _precision(params)
    wbytes = _optional_float(params, "weight_dtype_bytes")
    if wbytes is None and precision is not None:
        wbytes = capacity.bytes_per_param(precision)
    dep = Deployment(
        gpu=gpu,
        model=model,
        tp=int(_param(params, "tensor_parallel")),
        kv_memory_fraction=float(_param(params, "kv_memory_fraction")),
        block_size=int(_param(params, "block_size")),
        max_batched_tokens=int(_param(params, "max_batched_tokens")),
        calibration=calibration,
        weight_dtype_bytes=wbytes,
        kv_dtype_bytes=_optional_float(params, "kv_dtype_bytes"),
        weight_precision=precision,
    )
    try:
        kv_tokens = float(perf_model.kv_capacity_tokens(dep))
    except ConfigError:
        return 0.0  # does not fit
    if params.get("num_gpu_blocks") is not None:
        kv_tokens = float(params["num_gpu_blocks"]) * dep.block_size
    if ctx_size is not None:
        kv_tokens = min(kv_tokens, float(ctx_size))
    footprint = inp + out / 2.0 + dep.block_size / 2.0
    b_max = min(float(batch), kv_tokens / footprint)
    if inp + out > kv_tokens or b_max < 1.0:
        return 0.0
    # B + z·√B ≤ B_max  ⇔  √B ≤ (−z + √(z² + 4·B_max)) / 2
    b_cap = ((-z + math.sqrt(z * z + 4.0 * b_max)) / 2.0) ** 2
    context = inp + out / 2.0
    cached = min(prefix, inp - 1.0) if bool(_param(params, "prefix_caching")) else 0.0
    t_prefill = perf_model.prefill_time(dep, round(inp - cached), cached=round(cached))
    ttft_limit = None if ttft_ms is None else ttft_ms / 1000.0 / (1.0 + TTFT_TAIL_PER_Z * z)
    tpot_limit = None if tpot_ms is None else tpot_ms / 1000.0 / (1.0 + TPOT_TAIL_PER_Z * z)

    def step(b: float, share: float) -> float:
        return perf_model.decode_step_time(dep, max(1, math.ceil(b)), context) / (1.0 - share)

    def feasible(rate: float) -> bool:
        share = rate * t_prefill
        if share >= MAX_PREFILL_SHARE:
            return False
        b = max(1.0, rate * calibration.request_overhead_s)
        for _ in range(200):
            t_step = step(b, share)
            ttft = calibration.request_overhead_s + t_prefill / (1.0 - share) + t_step / 2.0
            b_next = rate * (ttft + out * t_step)
            if b_next > b_cap:
                return False
            if abs(b_next - b) <= 1e-3 * max(b, 1.0):
                b = b_next
                break
            b = b_next
        else:
            return False
        t_step = step(b, share)
        ttft = calibration.request_overhead_s + t_prefill / (1.0 - share) + t_step / 2.0
        if tpot_limit is not None and t_step > tpot_limit:
            return False
        return ttft_limit is None or ttft <= ttft_limit

    lo, hi = 0.0, MAX_PREFILL_SHARE / t_prefill
    if not feasible(hi * 1e-6):
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if feasible(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-4 * hi:
            break
    return lo


def order_points(points: Sequence[Mapping[str, Any]], priors: Sequence[float]) -> list[int]:
    """Indices of ``points``, best prior first (ties keep the grid's order)."""
    if len(points) != len(priors):
        raise ConfigError(f"{len(points)} points but {len(priors)} priors: one prior per point")
    return sorted(range(len(points)), key=lambda i: (-float(priors[i]), i))


def can_beat(prior: float, incumbent: float, *, optimism: float) -> bool:
    """Whether a point with this prior might still beat the incumbent's measured capacity:
    ``prior × (1 + optimism) ≥ incumbent``."""
    if optimism < 0:
        raise ConfigError(f"optimism is {optimism:g}; accepted: 0 or more")
    return prior * (1.0 + optimism) >= incumbent


@dataclass(frozen=True)
class EfficientPlan:
    """The sample-efficient visiting order of a grid, given the priors (one per point).

    ``measured`` maps a point's index to its measured SLO capacity (None: no capacity — failed
    to start, or failing already at the lowest load; counted as 0 for the incumbent and left out
    of the calibration). See the module docstring for the pruning rule.
    """

    priors: tuple[float, ...]
    optimism_floor: float = 0.25
    margin: float = 1.1
    min_measured: int = 2

    def __post_init__(self) -> None:
        if any(not math.isfinite(p) or p < 0 for p in self.priors):
            raise ConfigError("every prior must be a finite number ≥ 0")
        if self.optimism_floor < 0 or self.margin < 1.0 or self.min_measured < 1:
            raise ConfigError(
                "EfficientPlan: optimism_floor must be ≥ 0, margin ≥ 1 and min_measured ≥ 1"
            )

    @classmethod
    def from_priors(cls, priors: Sequence[float], **kwargs: Any) -> EfficientPlan:
        return cls(tuple(float(p) for p in priors), **kwargs)

    def order(self) -> list[int]:
        return sorted(range(len(self.priors)), key=lambda i: (-self.priors[i], i))

    def incumbent(self, measured: Mapping[int, float | None]) -> tuple[int, float] | None:
        """The best measured point and its capacity (None before any capacity > 0)."""
        best: tuple[int, float] | None = None
        for i, cap in measured.items():
            if cap is not None and cap > 0 and (best is None or cap > best[1]):
                best = (i, float(cap))
        return best

    def optimism(self, measured: Mapping[int, float | None]) -> float:
        """``max(floor, margin × max(measured / prior) − 1)`` over measured points with a prior
        and a capacity above 0; infinite (prune nothing) before ``min_measured`` measurements."""
        if len(measured) < self.min_measured:
            return math.inf
        ratios = [
            float(cap) / self.priors[i]
            for i, cap in measured.items()
            if cap is not None and cap > 0 and self.priors[i] > 0
        ]
        worst = max(ratios, default=1.0)
        return max(self.optimism_floor, self.margin * worst - 1.0)

    def pruned(self, measured: Mapping[int, float | None]) -> list[int]:
        """The unmeasured points that can no longer beat the incumbent, in visiting order."""
        inc = self.incumbent(measured)
        if inc is None:
            return []
        opt = self.optimism(measured)
        return [
            i
            for i in self.order()
            if i not in measured and not can_beat(self.priors[i], inc[1], optimism=opt)
        ]

    def next_point(self, measured: Mapping[int, float | None]) -> int | None:
        """The next point to run, or None when every remaining point is pruned (or all ran)."""
        inc = self.incumbent(measured)
        opt = self.optimism(measured)
        for i in self.order():
            if i in measured:
                continue
            if inc is not None and not can_beat(self.priors[i], inc[1], optimism=opt):
                return None  # later points have lower priors still
            return i
        return None

    def expected(self, index: int, measured: Mapping[int, float | None]) -> float | None:
        """The prior scaled by the median measured / prior ratio so far: a good ``start`` for
        the point's capacity search (None without a calibration yet)."""
        ratios = sorted(
            float(cap) / self.priors[i]
            for i, cap in measured.items()
            if cap is not None and cap > 0 and self.priors[i] > 0
        )
        if not ratios or self.priors[index] <= 0:
            return None
        n = len(ratios)
        median = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2.0
        return self.priors[index] * median
