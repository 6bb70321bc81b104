"""First-order step-time model of an LLM serving engine (DESIGN §7).

Pure functions over small dataclasses; no I/O. The reference engine (``sim/``) asks this module how
long each iteration takes, and the capacity planner (``analysis/capacity.py``) uses the same
functions, so the simulator and the planner can never disagree about the physics.

The model, per GPU of a tensor-parallel group of size ``tp``:

* **KV bytes per token** = 2 (K and V) × layers × kv_heads × head_dim × KV dtype bytes.
  Under TP the KV heads are split, so each GPU holds ``1/tp`` of it.
* **KV budget** = kv_memory_fraction × GPU memory − weights/tp − activations (vLLM's
  ``--gpu-memory-utilization`` semantics: the fraction covers everything the engine allocates).
  **KV blocks** = floor(budget / (block_size × KV bytes per token per GPU)).
* **An iteration** (one forward pass of a continuous-batching engine) that computes ``new_tokens``
  tokens for ``num_seqs`` sequences reads every weight once and the KV of every scheduled token's
  context, and performs 2 × active params FLOPs per token plus attention's
  4 × layers × heads × head_dim FLOPs per (query, key) pair:

      t = max(bytes / (η_bw × bandwidth), FLOPs / (η_fl × peak FLOPS))
          + overhead + overhead_per_seq × num_seqs + TP communication

  A decode step of batch B is the case new_tokens = B (memory bound until B is large); a prefill
  of T tokens is the case num_seqs = 1, new_tokens = T (compute bound once T is more than a few
  hundred tokens); a mixed iteration (chunked prefill + decodes) is just the sum of both kinds of
  work, and takes the larger of the memory and compute terms.
* **TP communication**: two all-reduces per layer (after attention and after the MLP), each costing
  a fixed latency plus the activation bytes over the link: ``2 × layers × (allreduce_s +
  new_tokens × hidden × 2 B × 2 (tp−1)/tp / link_bytes_s)``.

η_bw, η_fl and the overheads are calibrated against published measurements by
``bench/sim_calibration.py`` (see DEFAULT_CALIBRATION for the values and the procedure).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from errors import ConfigError

GIB = 1024**3
ACTIVATION_BYTES = 2  # activations are bf16/fp16 regardless of the weight dtype

DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp32": 4.0}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU of the catalog (``seeds/gpus.toml``); units as in the store (bytes, bytes/s)."""

    name: str
    memory_bytes: float
    bandwidth_bytes_s: float
    bf16_tflops: float
    fp8_tflops: float = 0.0
    display_name: str = ""
    sm_count: int = 0
    tdp_w: float = 0.0

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> GpuSpec:
        return cls(
            name=str(entry["name"]),
            memory_bytes=float(entry["memory_bytes"]),
            bandwidth_bytes_s=float(entry["bandwidth_bytes_s"]),
            bf16_tflops=float(entry["bf16_tflops"]),
            fp8_tflops=float(entry.get("fp8_tflops") or 0.0),
            display_name=str(entry.get("display_name") or entry["name"]),
            sm_count=int(entry.get("sm_count") or 0),
            tdp_w=float(entry.get("tdp_w") or 0.0),
        )


@dataclass(frozen=True)
class ModelSpec:
    """One dense (or MoE, via active_params_b) decoder of the catalog (``seeds/models.toml``)."""

    name: str
    params_b: float
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    active_params_b: float | None = None
    vocab_size: int = 0
    context: int = 0
    dtype_bytes: float = 2.0
    hf_repo: str = ""

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ModelSpec:
        return cls(
            name=str(entry["name"]),
            params_b=float(entry["params_b"]),
            active_params_b=float(entry.get("active_params_b") or entry["params_b"]),
            layers=int(entry["layers"]),
            hidden_size=int(entry["hidden_size"]),
            heads=int(entry["heads"]),
            kv_heads=int(entry["kv_heads"]),
            head_dim=int(entry["head_dim"]),
            vocab_size=int(entry.get("vocab_size") or 0),
            context=int(entry.get("context") or 0),
            dtype_bytes=float(entry.get("dtype_bytes") or 2.0),
            hf_repo=str(entry.get("hf_repo") or ""),
        )

    @property
    def active_params(self) -> float:
        """Parameters touched per token (all of them for a dense model)."""
        return (self.active_params_b or self.params_b) * 1e9


@dataclass(frozen=True)
class Calibration:
    """Efficiencies and overheads fitted against real measurements.

    eta_bw: achieved fraction of the memory bandwidth; eta_fl: achieved fraction of the dense
    tensor peak; overhead_s: fixed time per iteration (kernel launches, scheduling, sampling);
    overhead_per_seq_s: time per scheduled sequence (input preparation, sampling, detokenising);
    allreduce_s: latency of one all-reduce under TP; link_bytes_s: one-way GPU-GPU bandwidth;
    request_overhead_s: the API server's fixed latency before a request reaches the scheduler
    (HTTP parsing, chat templating, tokenisation), which lands in every TTFT.
    """

    eta_bw: float = 0.60
    eta_fl: float = 0.45
    overhead_s: float = 1.5e-3
    overhead_per_seq_s: float = 10e-6
    allreduce_s: float = 20e-6
    link_bytes_s: float = 450e9
    request_overhead_s: float = 20e-3


# The defaults above were fitted by bench/sim_calibration.py --fit (coordinate descent over a grid,
# minimising the mean |log(sim / measured)| over the metrics of the 23 calibration points; see that
# script's docstring): eta_bw 0.60, eta_fl 0.45, overhead 1.5 ms, request overhead 20 ms; the
# per-sequence overhead (10 µs) and all-reduce latency (20 µs) kept their priors.
DEFAULT_CALIBRATION = Calibration()


@dataclass(frozen=True)
class Deployment:
    """A model served on ``tp`` GPUs of one kind with an engine configuration."""

    gpu: GpuSpec
    model: ModelSpec
    tp: int = 1
    weight_dtype_bytes: float | None = None  # None: the checkpoint dtype
    kv_dtype_bytes: float | None = None  # None: same as the weights
    kv_memory_fraction: float = 0.9
    block_size: int = 16
    max_batched_tokens: int = 8192
    calibration: Calibration = field(default_factory=Calibration)

    @property
    def weight_bytes_per_param(self) -> float:
        return self.weight_dtype_bytes or self.model.dtype_bytes

    @property
    def kv_bytes_per_elem(self) -> float:
        return self.kv_dtype_bytes or self.weight_bytes_per_param

    @property
    def peak_flops(self) -> float:
        """Dense tensor peak of one GPU for the weight dtype (FP8 only where the GPU has it)."""
        if self.weight_bytes_per_param <= 1.0 and self.gpu.fp8_tflops > 0:
            return self.gpu.fp8_tflops * 1e12
        return self.gpu.bf16_tflops * 1e12


def kv_bytes_per_token(model: ModelSpec, dtype_bytes: float | None = None) -> float:
    """KV-cache bytes one token occupies across the whole model (all GPUs together)."""
    b = model.dtype_bytes if dtype_bytes is None else dtype_bytes
    return 2.0 * model.layers * model.kv_heads * model.head_dim * b


def weight_bytes(model: ModelSpec, bytes_per_param: float | None = None) -> float:
    """Bytes of all weights (embeddings included)."""
    b = model.dtype_bytes if bytes_per_param is None else bytes_per_param
    return model.params_b * 1e9 * b


def activation_bytes(model: ModelSpec, max_batched_tokens: int, tp: int = 1) -> float:
    """Memory an engine keeps outside weights and KV, per GPU.

    1 GiB for the CUDA context, CUDA graphs and allocator slack, plus the activations of the
    largest iteration: ``max_batched_tokens × hidden × 24 bytes / tp`` (a dozen bf16 hidden-sized
    buffers: residual, norms, QKV, the MLP's up/gate). A first-order stand-in for vLLM's profiling
    run; it only matters when weights nearly fill the GPU.
    """
    return GIB + max_batched_tokens * model.hidden_size * 12 * ACTIVATION_BYTES / tp


def kv_budget_bytes(dep: Deployment) -> float:
    """Bytes left for the KV cache on each GPU (may be ≤ 0 when the model does not fit)."""
    weights = weight_bytes(dep.model, dep.weight_bytes_per_param) / dep.tp
    acts = activation_bytes(dep.model, dep.max_batched_tokens, dep.tp)
    return dep.kv_memory_fraction * dep.gpu.memory_bytes - weights - acts


def kv_bytes_per_token_per_gpu(dep: Deployment) -> float:
    return kv_bytes_per_token(dep.model, dep.kv_bytes_per_elem) / dep.tp


def kv_blocks(dep: Deployment) -> int:
    """Paged-KV blocks per engine; raises ConfigError when the model leaves no room for KV."""
    budget = kv_budget_bytes(dep)
    block_bytes = dep.block_size * kv_bytes_per_token_per_gpu(dep)
    blocks = math.floor(budget / block_bytes) if budget > 0 else 0
    if blocks < 1:
        need = weight_bytes(dep.model, dep.weight_bytes_per_param) / dep.tp / GIB
        raise ConfigError(
            f"{dep.model.name} does not fit on {dep.tp}× {dep.gpu.name} with "
            f"kv_memory_fraction={dep.kv_memory_fraction}: weights need {need:.1f} GiB per GPU "
            f"of {dep.gpu.memory_bytes / GIB:.1f} GiB, leaving no KV cache",
            hint="raise --kv-memory-fraction, use --tp N, a larger GPU or --dtype fp8",
        )
    return blocks


def kv_capacity_tokens(dep: Deployment) -> int:
    return kv_blocks(dep) * dep.block_size


def iteration_time(
    dep: Deployment,
    *,
    num_seqs: int,
    new_tokens: int,
    kv_read_tokens: float,
    attn_pairs: float,
) -> float:
    """Seconds one engine iteration takes.

    num_seqs: sequences in the batch; new_tokens: tokens computed (1 per decoding sequence plus
    every prefill-chunk token); kv_read_tokens: Σ over sequences of the context each one attends
    to (tokens whose K/V are read); attn_pairs: Σ over computed tokens of the keys each attends to
    (for a chunk of c tokens after p cached ones: c·p + c(c+1)/2; for a decode at context L: L+1).
    """
    if num_seqs <= 0 or new_tokens <= 0:
        return 0.0
    c = dep.calibration
    m = dep.model
    tp = dep.tp
    mem = weight_bytes(
        m, dep.weight_bytes_per_param
    ) / tp + kv_read_tokens * kv_bytes_per_token_per_gpu(dep)
    flops = (
        2.0 * m.active_params * new_tokens + 4.0 * m.layers * m.heads * m.head_dim * attn_pairs
    ) / tp
    t = max(mem / (c.eta_bw * dep.gpu.bandwidth_bytes_s), flops / (c.eta_fl * dep.peak_flops))
    t += c.overhead_s + c.overhead_per_seq_s * num_seqs
    if tp > 1:
        payload = new_tokens * m.hidden_size * ACTIVATION_BYTES * 2.0 * (tp - 1) / tp
        t += 2 * m.layers * (c.allreduce_s + payload / c.link_bytes_s)
    return t


def decode_step_time(dep: Deployment, batch_size: int, mean_context: float) -> float:
    """One decode iteration of ``batch_size`` sequences whose context averages ``mean_context``."""
    return iteration_time(
        dep,
        num_seqs=batch_size,
        new_tokens=batch_size,
        kv_read_tokens=batch_size * mean_context,
        attn_pairs=batch_size * (mean_context + 1),
    )


def prefill_pairs(chunk: int, cached: int = 0) -> float:
    """Attention (query, key) pairs of a prefill chunk of ``chunk`` tokens after ``cached``."""
    return chunk * cached + chunk * (chunk + 1) / 2.0


def prefill_time(dep: Deployment, tokens: int, cached: int = 0) -> float:
    """Time to prefill ``tokens`` prompt tokens (after ``cached`` prefix-cache hits), alone,
    in chunks of ``max_batched_tokens``."""
    t = 0.0
    done = cached
    end = cached + tokens
    while done < end:
        chunk = min(dep.max_batched_tokens, end - done)
        t += iteration_time(
            dep,
            num_seqs=1,
            new_tokens=chunk,
            kv_read_tokens=done + chunk,
            attn_pairs=prefill_pairs(chunk, done),
        )
        done += chunk
    return t
