"""First-order step-time model of an LLM serving engine (DESIGN §7), for dense, mixture-of-experts
(MoE) and latent-attention (MLA) models.

Pure functions over small dataclasses; no I/O. The reference engine (``sim/``) asks this module how
long each iteration takes, and the planner uses the same functions, so the simulator and the
planner can never disagree about the physics. The model's shape and the memory formulas are
``analysis/capacity.py`` (:class:`~analysis.capacity.ModelShape` is the model spec); this module
adds GPUs, deployments and time.

The model, per GPU of a tensor-parallel group of size ``tp``:

* **Weights** are sharded by TP: each GPU holds ``weights / tp`` (every expert of a MoE model).
  Bytes per parameter: the checkpoint's (``ModelShape.dtype_bytes``; gpt-oss keeps its routed
  experts in MXFP4, ``expert_dtype_bytes`` 0.53125) unless the deployment quantises, with the
  precisions of ``analysis.precision`` (INT4 carries its group scales: 0.5 + 2/128 B).
* **KV bytes per token per GPU** (``capacity.kv_bytes_per_token``): MHA/GQA 2 × layers ×
  kv_heads × head_dim × KV dtype bytes, split by KV head across the TP ranks (replicated once
  tp > kv_heads); MLA (kv_lora_rank + qk_rope_head_dim) × layers × bytes, the same on EVERY rank
  (one latent per layer cannot be split by head).
* **KV budget** = kv_memory_fraction × GPU memory − weights/tp − activations (vLLM's
  ``--gpu-memory-utilization`` semantics: the fraction covers everything the engine allocates).
  **KV blocks** = floor(budget / (block_size × KV bytes per token per GPU)).
* **An iteration** (one forward pass of a continuous-batching engine) that computes ``new_tokens``
  tokens for ``num_seqs`` sequences reads its weights once and the KV of every scheduled token's
  context, and performs 2 × ACTIVE params FLOPs per token plus attention FLOPs per (query, key)
  pair:

      t = max(bytes / (η_bw × bandwidth), FLOPs / (η_fl × peak FLOPS))
          + overhead + overhead_per_seq × num_seqs + TP communication

  *Weights read*: a dense model reads all of them; a MoE model reads its dense part (attention,
  embeddings, routers, shared experts, dense layers) plus the routed experts the iteration's
  ``new_tokens`` tokens touch, ``E × (1 − (1 − k/E)^new_tokens)`` of them in expectation
  (``capacity.step_weight_bytes``): a decode step at batch 1 reads ≈ the active parameters, a
  prefill chunk of thousands of tokens every expert. *Attention FLOPs per pair*: MHA/GQA
  4 × layers × heads × head_dim (QKᵀ and PV); MLA 2 × layers × heads × (head_dim +
  qk_rope_head_dim) + 2 × layers × heads × head_dim — the non-absorbed form engines run for
  prefill, where attention FLOPs matter (queries and keys of qk_nope = head_dim plus the rope
  part, values of head_dim). Decode kernels (FlashMLA) run the absorbed form, 2 × heads ×
  (2 × kv_lora_rank + qk_rope_head_dim) per pair and layer, more FLOPs, but a decode step is
  bandwidth bound: what it pays for is the latent read counted in the bytes.
  *Peak*: the GPU's dense BF16 tensor peak; FP8 weights use the FP8 peak and INT8 (W8A8) the INT8
  peak where the GPU has them (``fp8_tflops``, ``int8_tops`` > 0); weight-only 4-bit formats
  (INT4, MXFP4, NVFP4) dequantise to BF16 and use the BF16 peak. A deployment that gives only
  ``weight_dtype_bytes`` (no precision name) uses the FP8 peak for 1-byte weights.

  A decode step of batch B is the case new_tokens = B (memory bound until B is large); a prefill
  of T tokens is the case num_seqs = 1, new_tokens = T (compute bound once T is more than a few
  hundred tokens); a mixed iteration (chunked prefill + decodes) is just the sum of both kinds of
  work, and takes the larger of the memory and compute terms.
* **TP communication**: two all-reduces per layer (after attention and after the MLP), each costing
  a fixed latency plus the activation bytes over the link: ``2 × layers × (allreduce_s +
  new_tokens × hidden × 2 B × 2 (tp−1)/tp / link_bytes_s)``. Expert parallelism is not modelled:
  experts are sharded by TP like every other weight.

η_bw, η_fl and the overheads are calibrated against published measurements of dense Llama models
by ``bench/sim_calibration.py`` (see DEFAULT_CALIBRATION for the values and the procedure); MoE
and MLA models follow from the same constants through the formulas above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analysis import capacity
from analysis.capacity import ModelShape
from errors import ConfigError

GIB = 1024**3
ACTIVATION_BYTES = 2  # activations are bf16/fp16 regardless of the weight dtype

#: Weight precisions that run on the FP8 / INT8 tensor cores where the GPU has them.
_FP8_PEAK = frozenset({"fp8"})
_INT8_PEAK = frozenset({"int8"})


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator of the catalog (``seeds/gpus.toml``); units as in the store (bytes,
    bytes/s, dense TFLOPS / TOPS). kind: ``gpu``, ``cpu`` (a CPU-only host: memory = system RAM,
    bandwidth = DRAM's) or ``edge`` (a module sharing DRAM with its CPU)."""

    name: str
    memory_bytes: float
    bandwidth_bytes_s: float
    bf16_tflops: float
    fp8_tflops: float = 0.0
    display_name: str = ""
    sm_count: int = 0
    tdp_w: float = 0.0
    kind: str = "gpu"
    vendor: str = ""
    int8_tops: float = 0.0
    link_bytes_s: float = 0.0

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> GpuSpec:
        """A ``seeds/gpus.toml`` entry or a row of the store's ``gpus`` table (NULL → default)."""

        def num(key: str) -> float:
            v = entry.get(key)
            return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

        return cls(
            name=str(entry["name"]),
            memory_bytes=float(entry["memory_bytes"]),
            bandwidth_bytes_s=float(entry["bandwidth_bytes_s"]),
            bf16_tflops=float(entry["bf16_tflops"]),
            fp8_tflops=num("fp8_tflops"),
            display_name=str(entry.get("display_name") or entry["name"]),
            sm_count=int(num("sm_count")),
            tdp_w=num("tdp_w"),
            kind=str(entry.get("kind") or "gpu"),
            vendor=str(entry.get("vendor") or ""),
            int8_tops=num("int8_tops"),
            link_bytes_s=num("link_bytes_s"),
        )


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
    """A model served on ``tp`` GPUs of one kind with an engine configuration.

    weight_dtype_bytes: bytes per parameter the engine holds the weights in (None: the
    checkpoint's); weight_precision: its name in ``analysis.precision`` (``fp8``, ``int8``,
    ``int4`` …), which picks the tensor peak; kv_dtype_bytes: bytes per KV element (None: see
    ``kv_bytes_per_elem``).
    """

    gpu: GpuSpec
    model: ModelShape
    tp: int = 1
    weight_dtype_bytes: float | None = None  # None: the checkpoint dtype
    kv_dtype_bytes: float | None = None  # None: same as the weights
    kv_memory_fraction: float = 0.9
    block_size: int = 16
    max_batched_tokens: int = 8192
    calibration: Calibration = field(default_factory=Calibration)
    weight_precision: str | None = None

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per parameter of the (dense part of the) weights."""
        return self.weight_dtype_bytes or self.model.dtype_bytes

    @property
    def kv_bytes_per_elem(self) -> float:
        """Bytes per KV element: kv_dtype_bytes when set; else a weight override of a whole byte
        or more (FP8, INT8, BF16) sets the KV dtype too; else the model's compute dtype — 2 bytes
        (BF16) for 16-bit checkpoints and for FP8 / MXFP4 / 4-bit weights alike (vLLM's
        ``--kv-cache-dtype auto``: DeepSeek-V3's FP8 checkpoint caches BF16), 4 for FP32."""
        if self.kv_dtype_bytes:
            return self.kv_dtype_bytes
        if self.weight_dtype_bytes and self.weight_dtype_bytes >= 1.0:
            return self.weight_dtype_bytes
        return max(self.model.dtype_bytes, float(ACTIVATION_BYTES))

    @property
    def peak_flops(self) -> float:
        """Dense tensor peak of one GPU for the weight precision (FP8 / INT8 only where the GPU
        has them; weight-only 4-bit formats run at the BF16 peak)."""
        p = self.weight_precision
        if p is None:
            if self.weight_bytes_per_param <= 1.0 and self.gpu.fp8_tflops > 0:
                return self.gpu.fp8_tflops * 1e12
        elif p in _FP8_PEAK and self.gpu.fp8_tflops > 0:
            return self.gpu.fp8_tflops * 1e12
        elif p in _INT8_PEAK and self.gpu.int8_tops > 0:
            return self.gpu.int8_tops * 1e12
        return self.gpu.bf16_tflops * 1e12


def kv_bytes_per_token(model: ModelShape, dtype_bytes: float | None = None) -> float:
    """KV-cache bytes one token occupies across the whole model at tp = 1 (MHA/GQA or MLA)."""
    b = model.dtype_bytes if dtype_bytes is None else dtype_bytes
    return capacity.kv_bytes_per_token(model, b)


def weight_bytes(model: ModelShape, bytes_per_param: float | None = None) -> float:
    """Bytes of all weights (embeddings and every expert included): ``bytes_per_param`` for each
    parameter, or (None) as the checkpoint stores them."""
    return capacity.stored_weight_bytes(model, bytes_per_param)


def deployment_weight_bytes(dep: Deployment) -> float:
    """Bytes of all weights as the deployment holds them (the whole group, not per GPU)."""
    return weight_bytes(dep.model, dep.weight_dtype_bytes)


def activation_bytes(model: ModelShape, max_batched_tokens: int, tp: int = 1) -> float:
    """Memory an engine keeps outside weights and KV, per GPU.

    1 GiB for the CUDA context, CUDA graphs and allocator slack, plus the activations of the
    largest iteration: ``max_batched_tokens × hidden × 24 bytes / tp`` (a dozen bf16 hidden-sized
    buffers: residual, norms, QKV, the MLP's up/gate). A first-order stand-in for vLLM's profiling
    run; it only matters when weights nearly fill the GPU.
    """
    return GIB + max_batched_tokens * model.hidden_size * 12 * ACTIVATION_BYTES / tp


def kv_budget_bytes(dep: Deployment) -> float:
    """Bytes left for the KV cache on each GPU (may be ≤ 0 when the model does not fit)."""
    weights = deployment_weight_bytes(dep) / dep.tp
    acts = activation_bytes(dep.model, dep.max_batched_tokens, dep.tp)
    return dep.kv_memory_fraction * dep.gpu.memory_bytes - weights - acts


def kv_bytes_per_token_per_gpu(dep: Deployment) -> float:
    """KV bytes one token occupies on each GPU of the group (``capacity.kv_bytes_per_token``:
    GQA split by KV head, MLA replicated)."""
    return capacity.kv_bytes_per_token(dep.model, dep.kv_bytes_per_elem, dep.tp)


def kv_blocks(dep: Deployment) -> int:
    """Paged-KV blocks per engine; raises ConfigError when the model leaves no room for KV."""
    budget = kv_budget_bytes(dep)
    block_bytes = dep.block_size * kv_bytes_per_token_per_gpu(dep)
    blocks = math.floor(budget / block_bytes) if budget > 0 else 0
    if blocks < 1:
        need = deployment_weight_bytes(dep) / dep.tp / GIB
        raise ConfigError(
            f"{dep.model.name} does not fit on {dep.tp}× {dep.gpu.name} with "
            f"kv_memory_fraction={dep.kv_memory_fraction}: weights need {need:.1f} GiB per GPU "
            f"of {dep.gpu.memory_bytes / GIB:.1f} GiB, leaving no KV cache",
            hint="raise --kv-memory-fraction, use --tp N, a larger GPU or --dtype fp8 / int4",
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
    weights = capacity.step_weight_bytes(m, new_tokens, dep.weight_dtype_bytes)
    mem = weights / tp + kv_read_tokens * kv_bytes_per_token_per_gpu(dep)
    flops = (2.0 * m.active_params * new_tokens + attention_flops_per_pair(m) * attn_pairs) / tp
    t = max(mem / (c.eta_bw * dep.gpu.bandwidth_bytes_s), flops / (c.eta_fl * dep.peak_flops))
    t += c.overhead_s + c.overhead_per_seq_s * num_seqs
    if tp > 1:
        payload = new_tokens * m.hidden_size * ACTIVATION_BYTES * 2.0 * (tp - 1) / tp
        t += 2 * m.layers * (c.allreduce_s + payload / c.link_bytes_s)
    return t


def attention_flops_per_pair(model: ModelShape) -> float:
    """Attention FLOPs of one (query, key) pair over all layers: MHA/GQA 4 × layers × heads ×
    head_dim (QKᵀ and PV over head_dim each); MLA 2 × layers × heads × (head_dim +
    qk_rope_head_dim) + 2 × layers × heads × head_dim (the non-absorbed form: query/key of the
    no-rope head_dim plus the decoupled rope part, values of head_dim; see the module docstring)."""
    if model.attention == "mla":
        qk = model.head_dim + model.qk_rope_head_dim
        return 2.0 * model.layers * model.heads * qk + 2.0 * model.layers * model.heads * (
            model.head_dim
        )
    return 4.0 * model.layers * model.heads * model.head_dim


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
