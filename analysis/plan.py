"""Capacity planning: how many GPUs a workload needs at peak, what they cost, and why. Pure.

Inputs: the demand (peak and average requests/s, the headroom kept above the peak), the request
lengths (mean input and output tokens), an SLO profile, the engine's memory parameters, and per
option — GPU × tensor-parallel size (TP) × weight precision × framework/configuration — a capacity
per replica: the requests/s one replica (``tp`` GPUs) serves while meeting the SLO.

* **Capacity per replica**: *measured* where the store holds a run series or a sweep point of
  the model on that GPU, TP and precision (:class:`Measurement`, naming the runs or the sweep),
  else the performance model's (:func:`predicted_capacity`: ``analysis.sweep_order.
  prior_capacity``, the same physics as the simulator); always labelled which.
* **Replicas** = ``ceil(peak × (1 + headroom) / capacity)``; **GPUs** = replicas × TP.
* **Cost per hour** = GPUs × the user's price per GPU-hour.
* **Cost per 1M tokens** at the *average* load (the fleet is sized for the peak but paid for
  every hour): ``cost per hour / (avg_qps × 3,600 × tokens per request) × 10⁶``, with tokens per
  request = mean output tokens (*per 1M output tokens*) or mean input + output (*per 1M tokens*).
* **Predicted vs measured**: where both exist, the prediction (made for the measurement's own
  engine parameters and lengths) against the measured bracket (:func:`prediction_error`).
* **Memory** (:func:`memory_row`, ``analysis.capacity``): per GPU of a TP group, weights / TP,
  the KV cache's bytes per token, the KV budget ``kv_memory_fraction × memory − weights/TP −
  activations`` and the concurrent sequences of (input + output) tokens it holds in paged blocks.
  An option *does not fit* when its weights alone exceed the memory fraction ("weights"), or
  when what they leave holds no sequence ("KV cache"), or when TP does not divide the heads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from analysis import capacity, perf_model, sweep_order
from analysis.capacity import ModelShape
from analysis.perf_model import GIB, GpuSpec
from errors import ConfigError, InputError

#: Weight precisions a plan compares (``analysis.capacity.PRECISIONS`` names their bytes).
PLAN_PRECISIONS: Final = ("fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")
DEFAULT_PRECISIONS: Final = ("fp16", "int8", "int4")
PRECISION_LABELS: Final[Mapping[str, str]] = {
    "fp16": "FP16/BF16",
    "fp8": "FP8",
    "int8": "INT8",
    "int4": "INT4",
    "mxfp4": "MXFP4",
    "nvfp4": "NVFP4",
}
#: KV-cache dtypes a plan accepts, and their bytes per element ("auto": 16-bit).
KV_DTYPES: Final[Mapping[str, float]] = {"auto": 2.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}
TP_CHOICES: Final = (1, 2, 4, 8)
#: Mean lengths of a measurement and the plan's differing by more than this get a note.
LENGTH_TOLERANCE: Final = 0.25

Label = Literal["measured", "model", "does not fit"]

#: A run's ``runs.precision`` → the plan's precision (16-bit, or unknown: fp16).
_RUN_PRECISION: Final[Mapping[str, str]] = {
    "fp32": "fp16",
    "bf16": "fp16",
    "fp16": "fp16",
    "auto": "fp16",
    "fp8": "fp8",
    "int8": "int8",
    "w8a8": "int8",
    "w8a16": "int8",
    "gguf-q8_0": "int8",
    "int4": "int4",
    "w4a16": "int4",
    "w4a8": "int4",
    "gptq": "int4",
    "awq": "int4",
    "gguf-q4_k_m": "int4",
    "gguf-q4_0": "int4",
    "mxfp4": "mxfp4",
    "nvfp4": "nvfp4",
}


def plan_precision(run_precision: str | None) -> str | None:
    """The plan's precision of a run's ``precision`` (None or empty: the 16-bit checkpoint);
    None for a precision the plan does not compare (fp4, bitsandbytes …)."""
    if not run_precision:
        return "fp16"
    return _RUN_PRECISION.get(str(run_precision).lower())


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _positive(name: str, value: float, *, zero_ok: bool = False) -> float:
    v = float(value)
    ok = math.isfinite(v) and (v >= 0 if zero_ok else v > 0)
    if not ok:
        accepted = "a finite number ≥ 0" if zero_ok else "a finite number > 0"
        raise InputError(f"{name} is {value!r}; accepted: {accepted}")
    return v


@dataclass(frozen=True)
class Demand:
    """Requests/s at the peak and on average, and the headroom kept above the peak (0.2 = 20 %)."""

    peak_qps: float
    avg_qps: float
    headroom: float = 0.2

    def __post_init__(self) -> None:
        _positive("peak QPS", self.peak_qps)
        _positive("average QPS", self.avg_qps)
        _positive("headroom", self.headroom, zero_ok=True)
        if self.avg_qps > self.peak_qps:
            raise InputError(
                f"average QPS {self.avg_qps:g} is above the peak {self.peak_qps:g}",
                hint="the average load cannot exceed the peak",
            )

    @property
    def sized_qps(self) -> float:
        """The load the fleet is sized for: peak × (1 + headroom)."""
        return self.peak_qps * (1.0 + self.headroom)


@dataclass(frozen=True)
class Lengths:
    """Request lengths in tokens: means (what capacity uses) and, where known, P99s."""

    input_mean: float
    output_mean: float
    input_p99: float | None = None
    output_p99: float | None = None
    source: str = "typed"

    def __post_init__(self) -> None:
        for name in ("input_mean", "output_mean"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 1):
                raise InputError(
                    f"{name.replace('_', ' ')} is {v!r} tokens; accepted: a number ≥ 1"
                )

    @property
    def tokens_per_sequence(self) -> int:
        """Prompt + output tokens a sequence holds at its end (means, rounded up)."""
        return math.ceil(self.input_mean + self.output_mean)

    def workload(self) -> dict[str, float]:
        return {"input_tokens": self.input_mean, "output_tokens": self.output_mean}


@dataclass(frozen=True)
class Engine:
    """The engine parameters every modelled option runs with (vLLM's defaults)."""

    kv_memory_fraction: float = 0.9
    max_batch_size: int = 256
    max_batched_tokens: int = 8192
    block_size: int = 16
    kv_dtype: str = "auto"

    def __post_init__(self) -> None:
        if not 0.0 < self.kv_memory_fraction <= 1.0:
            raise InputError(
                f"kv_memory_fraction is {self.kv_memory_fraction!r}; accepted: above 0 up to 1"
            )
        for name in ("max_batch_size", "max_batched_tokens", "block_size"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} is {getattr(self, name)!r}; accepted: an integer ≥ 1")
        if self.kv_dtype not in KV_DTYPES:
            raise InputError(
                f"kv_dtype is {self.kv_dtype!r}; accepted: {', '.join(KV_DTYPES)}",
            )

    @property
    def kv_dtype_bytes(self) -> float:
        return KV_DTYPES[self.kv_dtype]

    def params(self, tp: int) -> dict[str, Any]:
        """The normalised engine parameters ``prior_capacity`` reads (the KV dtype's bytes
        always given: left out, the model would keep the KV at the weights' precision)."""
        return {
            "tensor_parallel": tp,
            "kv_dtype_bytes": self.kv_dtype_bytes,
            "kv_memory_fraction": self.kv_memory_fraction,
            "max_batch_size": self.max_batch_size,
            "max_batched_tokens": self.max_batched_tokens,
            "block_size": self.block_size,
        }


SloTargets = tuple[float | None, float | None, float]


@dataclass(frozen=True)
class Measurement:
    """A measured SLO capacity (req/s per replica) of one configuration on ``gpu`` at ``tp`` and
    ``precision``: from a run series (``source`` "runs a, b") or a sweep point ("sweep s · point
    p"); ``engine_params`` as the runs record them; the mean lengths it was measured at."""

    config: str
    gpu: str
    tp: int
    precision: str
    capacity_rps: float
    source: str
    engine_params: tuple[tuple[str, Any], ...] = ()
    input_mean: float | None = None
    output_mean: float | None = None
    note: str = ""
    #: the first load that failed the SLO, in req/s (its rate, or the request throughput a
    #: closed-loop series achieved there): the capacity lies in [capacity_rps, capacity_upper_rps]
    capacity_upper_rps: float | None = None


# ---------------------------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------------------------


def replicas_needed(peak_qps: float, headroom: float, capacity_rps: float) -> int:
    """``ceil(peak × (1 + headroom) / capacity)`` (at least 1); capacity must be > 0."""
    if not capacity_rps > 0:
        raise ValueError(f"capacity must be > 0, got {capacity_rps}")
    need = peak_qps * (1.0 + headroom) / capacity_rps
    return max(1, math.ceil(need - 1e-9 * need))


def cost_per_hour(gpus: int, usd_per_gpu_hour: float | None) -> float | None:
    """GPUs × price per GPU-hour; None without a price."""
    return None if usd_per_gpu_hour is None else gpus * usd_per_gpu_hour


def cost_per_million_tokens(
    usd_per_hour: float | None, avg_qps: float, tokens_per_request: float
) -> float | None:
    """Dollars per 10⁶ tokens at the average load: the hour's cost over the tokens served in an
    hour (``avg_qps × 3,600 × tokens per request``); None without a cost."""
    if usd_per_hour is None:
        return None
    tokens_per_hour = avg_qps * 3600.0 * tokens_per_request
    return usd_per_hour / tokens_per_hour * 1e6


def prediction_error(
    predicted: float | None, measured: float | None, upper: float | None = None
) -> float | None:
    """The model's error against a measurement: (predicted − measured) / measured.

    ``upper``: where the measurement is a bracket — the capacity lies between the highest load
    that met the SLO (``measured``) and the first that did not (``upper``: its rate, or for a
    closed-loop series the request throughput it achieved) — a prediction inside the bracket
    has error 0 and one above it is measured against its top: (predicted − upper) / upper.
    None unless both are known and measured > 0."""
    if predicted is None or measured is None or not measured > 0:
        return None
    if upper is not None and upper > measured and predicted > measured:
        return 0.0 if predicted <= upper else (predicted - upper) / upper
    return (predicted - measured) / measured


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryRow:
    """One GPU × TP × precision's memory, per GPU of the TP group (bytes; GiB where named)."""

    gpu: str
    tp: int
    precision: str
    weight_gib: float  # the whole model's weights at this precision
    weight_gib_per_gpu: float
    kv_bytes_per_token: float  # per GPU (MHA/GQA split by KV head, MLA replicated)
    kv_budget_gib: float  # per GPU; ≤ 0 when the weights leave nothing
    max_sequences: int  # concurrent sequences of tokens_per_sequence tokens (per replica)
    tokens_per_sequence: int
    fits: bool
    why_not: str = ""  # "weights: …" or "KV cache: …" or "TP: …"

    @property
    def reason(self) -> str:
        """What does not fit: ``weights``, ``KV cache``, ``TP`` or ""."""
        return self.why_not.split(":", 1)[0] if self.why_not else ""


def memory_row(
    shape: ModelShape, gpu: GpuSpec, tp: int, precision: str, lengths: Lengths, engine: Engine
) -> MemoryRow:
    """The memory of ``shape`` on ``tp`` × ``gpu`` at ``precision`` (see the module docstring)."""
    weights = capacity.weight_bytes(shape, precision)
    per_gpu = weights / tp
    acts = perf_model.activation_bytes(shape, engine.max_batched_tokens, tp)
    budget = capacity.kv_budget_bytes(gpu.memory_bytes, engine.kv_memory_fraction, per_gpu, acts)
    kv_token = capacity.kv_bytes_per_token(shape, engine.kv_dtype_bytes, tp)
    tokens = lengths.tokens_per_sequence
    seqs = capacity.max_concurrent_sequences(budget, kv_token, tokens, engine.block_size)
    why = ""
    usable = engine.kv_memory_fraction * gpu.memory_bytes
    if shape.heads % tp != 0:
        why = f"TP: {tp} GPUs do not split the model's {shape.heads} attention heads evenly"
    elif per_gpu >= usable:
        why = (
            f"weights: {weights / GIB:.1f} GiB at {PRECISION_LABELS.get(precision, precision)} "
            f"are {per_gpu / GIB:.1f} GiB per GPU at TP {tp}, more than "
            f"{engine.kv_memory_fraction:g} × {gpu.memory_bytes / GIB:.1f} GiB = "
            f"{usable / GIB:.1f} GiB"
        )
    elif seqs < 1:
        why = (
            f"KV cache: the weights ({per_gpu / GIB:.1f} GiB per GPU) and activations "
            f"({acts / GIB:.1f} GiB) leave {max(budget, 0.0) / GIB:.2f} GiB per GPU, less than "
            f"one sequence of {tokens} tokens at {kv_token / 1024:.0f} KiB per token"
        )
    return MemoryRow(
        gpu=gpu.name,
        tp=tp,
        precision=precision,
        weight_gib=weights / GIB,
        weight_gib_per_gpu=per_gpu / GIB,
        kv_bytes_per_token=kv_token,
        kv_budget_gib=budget / GIB,
        max_sequences=seqs,
        tokens_per_sequence=tokens,
        fits=not why,
        why_not=why,
    )


# ---------------------------------------------------------------------------------------------
# The performance model's capacity
# ---------------------------------------------------------------------------------------------


def slo_targets(
    ttft_ms: float | None,
    tpot_ms: float | None,
    percentile: float,
    input_mean: float,
    *,
    ttft_base_ms: float | None = None,
    ttft_ms_per_1k_input: float | None = None,
) -> SloTargets:
    """(TTFT ms, TPOT ms, percentile) for ``prior_capacity``; a length-conditioned TTFT
    (base + per 1k input tokens) is taken at the mean input length."""
    if ttft_ms_per_1k_input is not None and ttft_base_ms is not None:
        ttft_ms = ttft_base_ms + ttft_ms_per_1k_input * input_mean / 1000.0
    return (ttft_ms, tpot_ms, float(percentile))


@functools.lru_cache(maxsize=4096)
def predicted_capacity(
    gpu: GpuSpec,
    model: ModelShape,
    precision: str,
    params: tuple[tuple[str, Any], ...],
    workload: tuple[float, float],
    slo: SloTargets,
) -> float:
    """The performance model's SLO capacity (req/s per replica, ``analysis.sweep_order.
    prior_capacity``) of ``model`` at the weight ``precision`` with the engine ``params`` and the
    mean (input, output) tokens; 0.0 when no load meets the SLO or it does not fit. Memoised per
    (deployment, workload, SLO): a page's rerun asks for the same ones."""
    merged = dict(params) | {"precision": precision}
    try:
        return sweep_order.prior_capacity(
            merged,
            gpu,
            model,
            {"input_tokens": workload[0], "output_tokens": workload[1]},
            slo,
        )
    except ConfigError:
        return 0.0


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanOption:
    """One row of the plan: a configuration on ``tp`` × ``gpu`` at ``precision``.

    ``label``: where ``capacity_rps`` comes from ("measured", "model") or "does not fit".
    ``predicted_rps``: the model's capacity for the same configuration (for a measured row: at
    the measurement's parameters and lengths), ``error``: :func:`prediction_error` against the
    measured bracket.
    ``replicas``/``gpus``/costs are None when the option serves nothing (does not fit, or the
    model finds no load meeting the SLO; ``note`` says why).
    """

    config: str
    gpu: str
    tp: int
    precision: str
    label: Label
    capacity_rps: float | None
    source: str
    memory: MemoryRow
    predicted_rps: float | None = None
    measured_rps: float | None = None
    measured_upper_rps: float | None = None
    error: float | None = None
    replicas: int | None = None
    gpus: int | None = None
    usd_per_gpu_hour: float | None = None
    cost_per_hour: float | None = None
    cost_per_1m_output: float | None = None
    cost_per_1m_total: float | None = None
    note: str = ""

    @property
    def serves(self) -> bool:
        return self.replicas is not None


def _priced(
    option: PlanOption, demand: Demand, lengths: Lengths, price: float | None
) -> PlanOption:
    cap = option.capacity_rps
    if cap is None or not cap > 0:
        return replace(option, usd_per_gpu_hour=price)
    replicas = replicas_needed(demand.peak_qps, demand.headroom, cap)
    gpus = replicas * option.tp
    hourly = cost_per_hour(gpus, price)
    return replace(
        option,
        replicas=replicas,
        gpus=gpus,
        usd_per_gpu_hour=price,
        cost_per_hour=hourly,
        cost_per_1m_output=cost_per_million_tokens(hourly, demand.avg_qps, lengths.output_mean),
        cost_per_1m_total=cost_per_million_tokens(
            hourly, demand.avg_qps, lengths.input_mean + lengths.output_mean
        ),
    )


Predict = Callable[[GpuSpec, int, str, Mapping[str, Any], tuple[float, float]], float]


def _length_note(m: Measurement, lengths: Lengths) -> str:
    diffs = []
    for name, theirs, ours in (
        ("input", m.input_mean, lengths.input_mean),
        ("output", m.output_mean, lengths.output_mean),
    ):
        if theirs is not None and abs(theirs - ours) > LENGTH_TOLERANCE * ours:
            diffs.append(f"{name} {theirs:.0f} tokens (the plan: {ours:.0f})")
    if not diffs:
        return ""
    return "measured at mean " + " and ".join(diffs)


@dataclass(frozen=True)
class PlanInputs:
    """Everything :func:`plan_options` reads besides the measurements and the prediction."""

    shape: ModelShape
    gpus: tuple[GpuSpec, ...]
    tps: tuple[int, ...]
    precisions: tuple[str, ...]
    demand: Demand
    lengths: Lengths
    engine: Engine = field(default_factory=Engine)
    prices: Mapping[str, float] = field(default_factory=dict)
    model_config: str = "performance model"


def plan_options(
    inputs: PlanInputs, measurements: Sequence[Measurement], predict: Predict
) -> list[PlanOption]:
    """One row per measured configuration of each GPU × TP × precision (capacity "measured",
    with the model's prediction and its error), else one modelled row (capacity "model", at
    the plan's engine parameters); options whose memory does not fit are kept, labelled.
    Sorted: serving options by cost per hour (GPUs without prices), then the rest."""
    lengths, engine = inputs.lengths, inputs.engine
    workload = (lengths.input_mean, lengths.output_mean)
    out: list[PlanOption] = []
    for gpu in inputs.gpus:
        price = inputs.prices.get(gpu.name)
        for tp in inputs.tps:
            for precision in inputs.precisions:
                mem = memory_row(inputs.shape, gpu, tp, precision, lengths, engine)
                mine = [
                    m
                    for m in measurements
                    if m.gpu == gpu.name and m.tp == tp and m.precision == precision
                ]
                rows: list[PlanOption] = []
                for m in mine:
                    params = engine.params(tp) | dict(m.engine_params) | {"tensor_parallel": tp}
                    at = (m.input_mean or lengths.input_mean, m.output_mean or lengths.output_mean)
                    predicted = predict(gpu, tp, precision, params, at)
                    note = "; ".join(n for n in (m.note, _length_note(m, lengths)) if n)
                    rows.append(
                        PlanOption(
                            config=m.config,
                            gpu=gpu.name,
                            tp=tp,
                            precision=precision,
                            label="measured",
                            capacity_rps=m.capacity_rps,
                            source=m.source,
                            memory=mem,
                            predicted_rps=predicted,
                            measured_rps=m.capacity_rps,
                            measured_upper_rps=m.capacity_upper_rps,
                            error=prediction_error(predicted, m.capacity_rps, m.capacity_upper_rps),
                            note=note,
                        )
                    )
                if not rows:
                    rows.append(_modelled(inputs, gpu, tp, precision, mem, predict, workload))
                out.extend(_priced(r, inputs.demand, lengths, price) for r in rows)
    return sort_options(out)


def _modelled(
    inputs: PlanInputs,
    gpu: GpuSpec,
    tp: int,
    precision: str,
    mem: MemoryRow,
    predict: Predict,
    workload: tuple[float, float],
) -> PlanOption:
    base = PlanOption(
        config=inputs.model_config,
        gpu=gpu.name,
        tp=tp,
        precision=precision,
        label="model",
        capacity_rps=None,
        source="analysis.perf_model (no measurement of this option)",
        memory=mem,
    )
    if not mem.fits:
        return replace(base, label="does not fit", source="", note=mem.why_not)
    predicted = predict(gpu, tp, precision, inputs.engine.params(tp), workload)
    if not predicted > 0:
        return replace(
            base,
            predicted_rps=0.0,
            note="the model finds no load meeting the SLO at these lengths",
        )
    return replace(base, capacity_rps=predicted, predicted_rps=predicted)


def sort_options(options: Sequence[PlanOption]) -> list[PlanOption]:
    """Serving options first, cheapest per hour (or fewest GPUs) first; then the rest."""

    def key(o: PlanOption) -> tuple[int, float, float, str, int, str]:
        cost = o.cost_per_hour if o.cost_per_hour is not None else math.inf
        return (
            0 if o.serves else 1,
            cost,
            float(o.gpus) if o.gpus is not None else math.inf,
            o.gpu,
            o.tp,
            o.precision,
        )

    return sorted(options, key=key)


def best_option(options: Sequence[PlanOption]) -> PlanOption | None:
    """The cheapest serving option per hour among those whose GPU has a price; without any
    price, the one needing the fewest GPUs (then the highest capacity)."""
    serving = [o for o in options if o.serves]
    if not serving:
        return None
    priced = [o for o in serving if o.cost_per_hour is not None]
    if priced:
        return min(priced, key=lambda o: (o.cost_per_hour or 0.0, o.gpus or 0))
    return min(serving, key=lambda o: (o.gpus or 0, -(o.capacity_rps or 0.0)))
