"""Capacity formulas: weight bytes, KV bytes per token, MoE bytes per decode step, the KV budget
and the sequences it holds (issue 14). Pure: dataclasses and numbers in and out.

This module holds the *memory* side of the capacity model for the architectures deployed today
(dense MHA/GQA, mixture-of-experts, multi-head latent attention, quantised weights):

* **Weights by precision** (``PRECISIONS``, defined once in ``analysis.precision``): FP32 4,
  FP16/BF16 2, FP8 1, INT8 1 byte per parameter; INT4 0.5 byte plus the group scales of
  group-wise quantisation (GPTQ/AWQ style: one FP16 scale per ``group_size`` weights →
  ``scale_bytes / group_size`` bytes per parameter, 2/128 = 0.015625 at the common group size
  128); MXFP4 / NVFP4 0.5 byte plus their fixed block scales (1/32, 1/16). A checkpoint may store
  its routed experts in another precision than the rest (``ModelShape.expert_dtype_bytes``;
  :func:`stored_weight_bytes`).
* **KV bytes per token**: MHA/GQA store K and V for every KV head of every layer,
  ``2 × layers × kv_heads × head_dim × dtype bytes``, split across tensor-parallel ranks by KV head;
  MLA (DeepSeek-V2/V3) stores one compressed latent plus the decoupled RoPE key per layer,
  ``(kv_lora_rank + qk_rope_head_dim) × layers × dtype bytes``, replicated on every TP rank.
* **Mixture of experts**: memory holds every parameter, but a decode step reads only the dense
  part (attention, embeddings, norms, routers, shared experts, dense layers) and the routed experts
  the batch's tokens actually picked: ``E × (1 − (1 − k/E)^B)`` of them in expectation.
* **The KV budget** and **max concurrent sequences** in paged blocks, and the project seed's
  **batched-token rule** ``min(B × L, SMs × 2048)``.

:class:`ModelShape` is THE model spec of the project: the catalogue's rows (``seeds/models.toml``
or the store's ``models`` table) become one through :meth:`ModelShape.from_entry`, and
``analysis/perf_model.py`` (step times: bandwidth-bound decode, compute-bound prefill, TP
communication), the simulator and the planner all take it. This module imports nothing from
``perf_model``; ``perf_model`` builds on it.

Units: parameters in billions (``*_params_b``) as in ``seeds/models.toml``; memory in bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from analysis.precision import BLOCK_SCALED, GROUP_QUANTISED, PRECISION_BYTES
from errors import ConfigError

Attention = Literal["mha", "gqa", "mla"]
ATTENTION_KINDS: Final = ("mha", "gqa", "mla")

#: Bytes per parameter of each weight precision, before any quantisation-scale overhead (the one
#: table, ``analysis.precision.PRECISION_BYTES``; repeated here under the name the formulas use).
PRECISIONS: Final[Mapping[str, float]] = PRECISION_BYTES
#: Default group size of group-wise INT4 (GPTQ's and AWQ's usual ``group_size = 128``).
DEFAULT_GROUP_SIZE: Final = 128
#: Bytes of one group scale (FP16). Asymmetric schemes with a 4-bit zero point per group pass 2.5.
DEFAULT_SCALE_BYTES: Final = 2.0

#: Relative tolerance between a MoE entry's stated active parameters and the ones its expert
#: sizes imply (published "active" counts are rounded: DeepSeek-V3's 37B is 37.5B by its config).
ACTIVE_PARAMS_TOLERANCE: Final = 0.05

#: The seed's batched-token rule: at most this many tokens per streaming multiprocessor per step.
TOKENS_PER_SM: Final = 2048


# ---------------------------------------------------------------------------------------------
# Model shape
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What the capacity formulas need to know about a decoder.

    params_b: all parameters (billions), what memory must hold. active_params_b: parameters a
    single token touches (MoE: dense part + top-k routed experts; dense: = params_b); ``None``
    derives it (see below). layers, hidden_size, heads: as in the model's config.json. kv_heads,
    head_dim: the K/V heads (MHA: = heads; GQA: fewer; MQA is GQA with one) and their size.
    attention: ``"mha"``, ``"gqa"`` or ``"mla"`` (multi-head latent attention); MLA also needs
    kv_lora_rank (the latent KV dimension, DeepSeek-V3: 512) and qk_rope_head_dim (the decoupled
    RoPE key, DeepSeek-V3: 64).

    MoE (``experts > 0``): experts = routed experts per MoE layer, experts_per_token = top-k,
    shared_experts = always-active experts per MoE layer (informational: their parameters are
    part of the dense part), expert_params_b = parameters of ONE routed expert summed over all
    MoE layers (billions). The dense part is ``params_b − experts × expert_params_b``; the active
    parameters are ``dense + experts_per_token × expert_params_b``. Construct with either
    expert_params_b or active_params_b (``from_entry`` derives the missing one); given both, they
    must agree within ``ACTIVE_PARAMS_TOLERANCE``.

    Checkpoint: dtype_bytes = bytes per parameter of the published checkpoint (BF16 2, DeepSeek's
    FP8 1); expert_dtype_bytes = the routed experts' bytes per parameter where the checkpoint
    stores them differently (gpt-oss: MXFP4 experts, 0.53125 B, beside BF16 attention and
    embeddings), ``None`` = dtype_bytes. vocab_size, context (max_position_embeddings) and hf_repo
    as in the catalogue (0 / "" when unknown).
    """

    name: str
    params_b: float
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    attention: Attention = "gqa"
    active_params_b: float | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_params_b: float = 0.0
    vocab_size: int = 0
    context: int = 0
    dtype_bytes: float = 2.0
    expert_dtype_bytes: float | None = None
    hf_repo: str = ""

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        for key in ("layers", "hidden_size", "heads", "kv_heads", "head_dim"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{where}: {key} must be ≥ 1, got {getattr(self, key)}")
        if not (math.isfinite(self.params_b) and self.params_b > 0):
            raise ConfigError(f"{where}: params_b must be a positive number, got {self.params_b}")
        if self.attention not in ATTENTION_KINDS:
            raise ConfigError(
                f"{where}: unknown attention {self.attention!r}; "
                f"one of {', '.join(ATTENTION_KINDS)}"
            )
        if self.attention == "mha" and self.kv_heads != self.heads:
            raise ConfigError(
                f"{where}: attention 'mha' has kv_heads = heads, got {self.kv_heads} of "
                f"{self.heads}",
                hint="use attention = 'gqa' for grouped-query attention",
            )
        if self.attention == "gqa" and (
            self.kv_heads > self.heads or self.heads % self.kv_heads != 0
        ):
            raise ConfigError(
                f"{where}: grouped-query attention needs kv_heads dividing heads, got "
                f"{self.kv_heads} KV heads for {self.heads} heads"
            )
        if self.attention == "mla":
            if self.kv_lora_rank < 1 or self.qk_rope_head_dim < 1:
                raise ConfigError(
                    f"{where}: attention 'mla' needs kv_lora_rank and qk_rope_head_dim ≥ 1, got "
                    f"{self.kv_lora_rank} and {self.qk_rope_head_dim}",
                    hint="DeepSeek-V3's config.json: kv_lora_rank 512, qk_rope_head_dim 64",
                )
        elif self.kv_lora_rank or self.qk_rope_head_dim:
            raise ConfigError(
                f"{where}: kv_lora_rank / qk_rope_head_dim apply only to attention = 'mla'"
            )
        if not (math.isfinite(self.dtype_bytes) and self.dtype_bytes > 0):
            raise ConfigError(
                f"{where}: dtype_bytes must be a positive number, got {self.dtype_bytes}"
            )
        if self.expert_dtype_bytes is not None:
            if not self.experts:
                raise ConfigError(f"{where}: expert_dtype_bytes needs experts ≥ 1")
            if not (math.isfinite(self.expert_dtype_bytes) and self.expert_dtype_bytes > 0):
                raise ConfigError(
                    f"{where}: expert_dtype_bytes must be a positive number, got "
                    f"{self.expert_dtype_bytes}"
                )
        self._check_moe(where)

    def _check_moe(self, where: str) -> None:
        if self.experts == 0:
            if self.experts_per_token or self.shared_experts or self.expert_params_b:
                raise ConfigError(
                    f"{where}: experts_per_token / shared_experts / expert_params_b "
                    f"need experts ≥ 1"
                )
            if self.active_params_b is not None and not math.isclose(
                self.active_params_b, self.params_b, rel_tol=1e-9
            ):
                raise ConfigError(
                    f"{where}: active_params_b {self.active_params_b} differs from params_b "
                    f"{self.params_b} but the model has no experts",
                    hint="a mixture-of-experts model gives experts and experts_per_token",
                )
            return
        if self.experts < 0 or not 1 <= self.experts_per_token <= self.experts:
            raise ConfigError(
                f"{where}: needs 1 ≤ experts_per_token ≤ experts, got top-"
                f"{self.experts_per_token} of {self.experts}"
            )
        if self.shared_experts < 0:
            raise ConfigError(f"{where}: shared_experts must be ≥ 0, got {self.shared_experts}")
        if not (math.isfinite(self.expert_params_b) and self.expert_params_b > 0):
            raise ConfigError(
                f"{where}: expert_params_b must be a positive number, got {self.expert_params_b}",
                hint="or give active_params_b and let ModelShape.from_entry derive it",
            )
        if self.experts * self.expert_params_b > self.params_b:
            raise ConfigError(
                f"{where}: {self.experts} experts × {self.expert_params_b}B = "
                f"{self.experts * self.expert_params_b:.3f}B exceed params_b {self.params_b}B"
            )
        if self.active_params_b is not None:
            implied = self.implied_active_params_b
            if not math.isclose(implied, self.active_params_b, rel_tol=ACTIVE_PARAMS_TOLERANCE):
                raise ConfigError(
                    f"{where}: active_params_b {self.active_params_b}B disagrees with the "
                    f"{implied:.3f}B its experts imply (params_b − (experts − top-k) × "
                    f"expert_params_b)",
                    hint="check params_b, experts, experts_per_token and expert_params_b",
                )

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def dense_params_b(self) -> float:
        """Parameters every token reads: all of them minus the routed experts (billions)."""
        return self.params_b - self.experts * self.expert_params_b

    @property
    def implied_active_params_b(self) -> float:
        """dense part + top-k routed experts (= params_b for a dense model)."""
        return self.dense_params_b + self.experts_per_token * self.expert_params_b

    @property
    def active_params(self) -> float:
        """Parameters one token touches (the stated figure when given, else the implied one)."""
        b = self.implied_active_params_b if self.active_params_b is None else self.active_params_b
        return b * 1e9

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ModelShape:
        """Read a catalogue entry: a ``seeds/models.toml`` table or a row of the store's
        ``models`` table. Unknown keys (source, notes, origin …) are ignored, and a key whose
        value is None (a NULL column) or NaN is read as absent.

        attention defaults to ``"mla"`` when kv_lora_rank is present, else ``"mha"`` when
        kv_heads = heads and ``"gqa"`` otherwise. For a MoE entry (``experts`` present) give
        experts_per_token and either expert_params_b or active_params_b; the missing one is
        derived from params_b: ``expert = (params_b − active_params_b) / (experts − top-k)``.
        """
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"model entry without a name: {dict(entry)!r}")
        present = {k: v for k, v in entry.items() if not _missing(v)}
        if "params_b" in entry and "params_b" not in present and entry["params_b"] is not None:
            present["params_b"] = entry["params_b"]  # NaN params_b: say so, not "missing"
        r = _EntryReader(present, f"model {name!r}")
        params_b = r.number("params_b")
        heads = r.integer("heads")
        kv_heads = r.integer("kv_heads")
        kv_lora_rank = r.integer("kv_lora_rank", 0)
        raw_attention = present.get("attention")
        attention: Attention
        if raw_attention is None:
            attention = "mla" if kv_lora_rank else "mha" if kv_heads == heads else "gqa"
        elif raw_attention in ATTENTION_KINDS:
            attention = cast(Attention, raw_attention)
        else:
            raise ConfigError(
                f"model {name!r}: key 'attention' must be one of {', '.join(ATTENTION_KINDS)}, "
                f"got {raw_attention!r}"
            )
        active = r.optional_number("active_params_b")
        experts = r.integer("experts", 0)
        top_k = r.integer("experts_per_token", 0)
        expert_b = r.optional_number("expert_params_b") or 0.0
        if experts and "expert_params_b" not in present:
            if active is None:
                raise ConfigError(
                    f"model {name!r}: a mixture-of-experts entry needs expert_params_b or "
                    f"active_params_b",
                    hint="expert_params_b = one routed expert's parameters summed over layers",
                )
            if not 1 <= top_k < experts:
                raise ConfigError(
                    f"model {name!r}: deriving expert_params_b needs experts_per_token (top-k) "
                    f"in 1 … {experts - 1}, got {top_k}",
                    hint="or give expert_params_b",
                )
            expert_b = (params_b - active) / (experts - top_k)
        elif active is not None and math.isclose(active, params_b, rel_tol=1e-9):
            active = None  # dense entries repeat params_b as active_params_b
        hf_repo = present.get("hf_repo", "")
        return cls(
            name=name,
            params_b=params_b,
            active_params_b=active,
            layers=r.integer("layers"),
            hidden_size=r.integer("hidden_size"),
            heads=heads,
            kv_heads=kv_heads,
            head_dim=r.integer("head_dim"),
            attention=attention,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=r.integer("qk_rope_head_dim", 0),
            experts=experts,
            experts_per_token=top_k,
            shared_experts=r.integer("shared_experts", 0),
            expert_params_b=expert_b,
            vocab_size=r.integer("vocab_size", 0),
            context=r.integer("context", 0),
            dtype_bytes=r.optional_number("dtype_bytes") or 2.0,
            expert_dtype_bytes=r.optional_number("expert_dtype_bytes"),
            hf_repo=hf_repo if isinstance(hf_repo, str) else str(hf_repo),
        )


def _missing(value: Any) -> bool:
    """A catalogue value that stands for "not given": None (a NULL column) or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


class _EntryReader:
    """Typed reads of a catalogue entry's keys, with errors that name the entry and the key."""

    def __init__(self, entry: Mapping[str, Any], where: str) -> None:
        self.entry = entry
        self.where = where

    def integer(self, key: str, default: int | None = None) -> int:
        """The integer under ``key``; ``default`` when absent (None: the key is required)."""
        if key not in self.entry:
            if default is None:
                raise ConfigError(f"{self.where}: missing key {key!r} (an integer)")
            return default
        v = self.entry[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{self.where}: key {key!r} must be an integer, got {v!r}")
        return v

    def number(self, key: str) -> float:
        """The required finite number under ``key``."""
        v = self.optional_number(key)
        if v is None:
            raise ConfigError(f"{self.where}: missing key {key!r} (a number)")
        return v

    def optional_number(self, key: str) -> float | None:
        """The finite number under ``key``, or None when absent."""
        if key not in self.entry:
            return None
        v = self.entry[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ConfigError(f"{self.where}: key {key!r} must be a finite number, got {v!r}")
        return float(v)


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


def bytes_per_param(
    precision: str,
    *,
    group_size: int | None = DEFAULT_GROUP_SIZE,
    scale_bytes: float = DEFAULT_SCALE_BYTES,
) -> float:
    """Bytes one parameter occupies: ``PRECISIONS[precision]`` plus, for group-wise INT4,
    ``scale_bytes / group_size`` (one FP16 scale per group: 0.5 + 2/128 = 0.515625 at 128), and
    for the microscaling formats their fixed block scale (MXFP4 0.5 + 1/32 = 0.53125, NVFP4
    0.5 + 1/16 = 0.5625; group_size and scale_bytes do not apply).

    group_size ``None`` counts no scales (per-channel quantisation). Unknown precision: ConfigError.
    """
    try:
        base = PRECISIONS[precision]
    except KeyError:
        raise ConfigError(
            f"unknown weight precision {precision!r}; one of {', '.join(PRECISIONS)}"
        ) from None
    if precision in BLOCK_SCALED:
        block, scale = BLOCK_SCALED[precision]
        return base + scale / block
    if precision not in GROUP_QUANTISED or group_size is None:
        return base
    if group_size < 1:
        raise ConfigError(f"group_size must be ≥ 1, got {group_size}")
    return base + scale_bytes / group_size


def weight_bytes(
    shape: ModelShape,
    precision: str,
    *,
    group_size: int | None = DEFAULT_GROUP_SIZE,
    scale_bytes: float = DEFAULT_SCALE_BYTES,
) -> float:
    """Bytes of ALL weights (every expert of a MoE model): ``params × bytes_per_param``.

    The precision applies to every parameter; real INT4/FP8 checkpoints often keep embeddings and
    the LM head in 16 bits, so this under-counts them slightly (most for small models with big
    vocabularies).
    """
    return (
        shape.params_b
        * 1e9
        * bytes_per_param(precision, group_size=group_size, scale_bytes=scale_bytes)
    )


def stored_weight_bytes(shape: ModelShape, bytes_per_param: float | None = None) -> float:
    """Bytes of ALL weights with ``bytes_per_param`` for every parameter, or (``None``) as the
    checkpoint stores them: ``dense part × dtype_bytes + routed experts × expert_dtype_bytes``
    (``params × dtype_bytes`` when the experts share the checkpoint's dtype)."""
    if bytes_per_param is not None:
        return shape.params_b * 1e9 * bytes_per_param
    if shape.expert_dtype_bytes is None:
        return shape.params_b * 1e9 * shape.dtype_bytes
    experts_b = shape.experts * shape.expert_params_b
    return (shape.dense_params_b * shape.dtype_bytes + experts_b * shape.expert_dtype_bytes) * 1e9


def step_weight_bytes(
    shape: ModelShape, batch_tokens: int, bytes_per_param: float | None = None
) -> float:
    """Weight bytes one forward pass over ``batch_tokens`` tokens reads (whole model, all ranks
    together), bytes per parameter as in :func:`stored_weight_bytes`.

    Dense model: every weight, whatever the batch. MoE: the dense part + ``expected_distinct_
    experts(E, k, batch_tokens)`` routed experts (batch 1 reads the active parameters; a prefill
    chunk of thousands of tokens touches every expert, i.e. all the weights).
    """
    if not shape.is_moe:
        return stored_weight_bytes(shape, bytes_per_param)
    if batch_tokens < 0:
        raise ValueError(f"batch_tokens must be ≥ 0, got {batch_tokens}")
    dense_b = shape.dtype_bytes if bytes_per_param is None else bytes_per_param
    expert_b = bytes_per_param
    if expert_b is None:
        expert_b = (
            shape.dtype_bytes if shape.expert_dtype_bytes is None else shape.expert_dtype_bytes
        )
    distinct = expected_distinct_experts(shape.experts, shape.experts_per_token, batch_tokens)
    return (shape.dense_params_b * dense_b + distinct * shape.expert_params_b * expert_b) * 1e9


# ---------------------------------------------------------------------------------------------
# KV cache
# ---------------------------------------------------------------------------------------------


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads each of ``tp`` ranks holds: ``ceil(kv_heads / tp)``, at least 1.

    When tp > kv_heads every rank still holds a whole head: the heads are REPLICATED
    (tp / kv_heads ranks share each one), so the KV per rank stops shrinking. vLLM requires
    kv_heads % tp == 0 or tp % kv_heads == 0; for other pairs ceil is the largest share.
    """
    if tp < 1:
        raise ValueError(f"tp must be ≥ 1, got {tp}")
    return max(1, math.ceil(kv_heads / tp))


def kv_bytes_per_token(shape: ModelShape, kv_dtype_bytes: float, tp: int = 1) -> float:
    """KV-cache bytes one token occupies on EACH tensor-parallel rank.

    MHA/GQA: ``2 (K and V) × layers × kv_heads_per_rank(kv_heads, tp) × head_dim × bytes``
    (heads split by TP; replicated once tp > kv_heads, see ``kv_heads_per_rank``).
    MLA (DeepSeek-V2 paper §2.1; vLLM/SGLang cache layout): ``(kv_lora_rank + qk_rope_head_dim) ×
    layers × bytes`` — one compressed latent and one shared RoPE key per layer, no K/V pair and no
    head dimension, so it cannot be split by head: every TP rank holds all of it. At tp = 1 the
    figure is the whole model's.
    """
    if tp < 1:
        raise ValueError(f"tp must be ≥ 1, got {tp}")
    if shape.attention == "mla":
        return float((shape.kv_lora_rank + shape.qk_rope_head_dim) * shape.layers * kv_dtype_bytes)
    heads = kv_heads_per_rank(shape.kv_heads, tp)
    return float(2 * shape.layers * heads * shape.head_dim * kv_dtype_bytes)


def group_kv_bytes_per_token(shape: ModelShape, kv_dtype_bytes: float, tp: int = 1) -> float:
    """KV bytes one token occupies summed over the ``tp`` ranks (``per rank × tp``): the figure
    to divide a group-wide ``kv_budget_bytes`` by. Larger than the tp = 1 figure whenever the KV
    is replicated (MLA at any tp > 1, GQA at tp > kv_heads)."""
    return kv_bytes_per_token(shape, kv_dtype_bytes, tp) * tp


# ---------------------------------------------------------------------------------------------
# Mixture of experts
# ---------------------------------------------------------------------------------------------


def expected_distinct_experts(experts: int, top_k: int, batch_tokens: int) -> float:
    """Expected number of distinct routed experts a batch of ``batch_tokens`` tokens touches in
    one MoE layer: ``E × (1 − (1 − k/E)^B)``.

    Assumes uniform, independent routing: each token picks each expert with probability k/E, so an
    expert is missed by all B tokens with probability (1 − k/E)^B (independence across tokens;
    top-k's without-replacement draw within a token makes the per-token marginal exactly k/E).
    B = 1 gives k; the value grows toward E as B grows. Real routers are skewed (hot experts),
    which touches fewer experts than this — so this is an upper estimate of the bytes read.
    """
    if experts < 1 or not 1 <= top_k <= experts:
        raise ValueError(f"needs 1 ≤ top_k ≤ experts, got top-{top_k} of {experts}")
    if batch_tokens < 0:
        raise ValueError(f"batch_tokens must be ≥ 0, got {batch_tokens}")
    return experts * (1.0 - (1.0 - top_k / experts) ** batch_tokens)


def decode_params_per_step(shape: ModelShape, batch_tokens: int) -> float:
    """Parameters one forward pass over ``batch_tokens`` tokens reads from memory.

    Dense model: all of them, whatever the batch. MoE: the dense part (attention, embeddings,
    routers, shared experts, dense layers) + ``expected_distinct_experts(E, k, B) ×
    expert_params``; at B = 1 that is the active parameters (dense + k experts), at large B all.
    """
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be ≥ 1, got {batch_tokens}")
    if not shape.is_moe:
        return shape.params_b * 1e9
    distinct = expected_distinct_experts(shape.experts, shape.experts_per_token, batch_tokens)
    return (shape.dense_params_b + distinct * shape.expert_params_b) * 1e9


def decode_bytes_per_step(
    shape: ModelShape,
    precision: str,
    batch_tokens: int,
    *,
    group_size: int | None = DEFAULT_GROUP_SIZE,
    scale_bytes: float = DEFAULT_SCALE_BYTES,
) -> float:
    """Weight bytes one decode step of ``batch_tokens`` sequences reads (whole model, all ranks
    together; the KV reads come on top): ``decode_params_per_step × bytes_per_param``."""
    return decode_params_per_step(shape, batch_tokens) * bytes_per_param(
        precision, group_size=group_size, scale_bytes=scale_bytes
    )


# ---------------------------------------------------------------------------------------------
# Budget, sequences, batched tokens
# ---------------------------------------------------------------------------------------------


def kv_budget_bytes(
    total_memory_bytes: float,
    memory_fraction: float,
    weight_bytes: float,
    activation_bytes: float,
) -> float:
    """Bytes left for the KV cache: ``memory_fraction × memory − weights − activations``.

    vLLM's ``--gpu-memory-utilization`` semantics (the fraction covers everything the engine
    allocates). Pass the group's figures (``gpu memory × tp``, all weights, every rank's
    activations) for a group-wide budget, or one rank's for a per-rank one. May be ≤ 0: the model
    does not fit.
    """
    if not 0.0 < memory_fraction <= 1.0:
        raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction}")
    return memory_fraction * total_memory_bytes - weight_bytes - activation_bytes


def max_concurrent_sequences(
    budget_bytes: float,
    kv_bytes_per_token: float,
    tokens_per_sequence: int,
    block_size: int = 16,
) -> int:
    """Sequences of ``tokens_per_sequence`` tokens (prompt + output) whose KV fits at once.

    Paged KV: a sequence holds ``ceil(tokens / block_size)`` whole blocks of ``block_size ×
    kv_bytes_per_token`` bytes, and the budget holds ``floor(budget / block bytes)`` blocks, so
    ``floor(blocks / blocks per sequence)``. block_size 1 is unpaged. Budget and bytes per token
    must cover the same GPUs (group-wide: ``group_kv_bytes_per_token``; per rank:
    ``kv_bytes_per_token``). A budget ≤ 0 holds none.
    """
    if kv_bytes_per_token <= 0:
        raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")
    if tokens_per_sequence < 1 or block_size < 1:
        raise ValueError(
            f"tokens_per_sequence and block_size must be ≥ 1, got {tokens_per_sequence} "
            f"and {block_size}"
        )
    if budget_bytes <= 0:
        return 0
    blocks = math.floor(budget_bytes / (block_size * kv_bytes_per_token))
    return blocks // math.ceil(tokens_per_sequence / block_size)


def max_tokens_per_step(batch: int, seq_len: int, sm_count: int) -> int:
    """The seed's batched-token rule: ``min(B × L, SMs × 2048)`` tokens per engine step.

    A rule of thumb of the project seed (about 2,048 tokens per streaming multiprocessor keep
    the GPU busy without growing the step's latency for nothing), not a measured limit. Without
    an SM count (``sm_count`` 0, e.g. a CPU host) only ``B × L`` applies.
    """
    if batch < 0 or seq_len < 0 or sm_count < 0:
        raise ValueError(f"needs batch, seq_len, sm_count ≥ 0, got {batch}, {seq_len}, {sm_count}")
    if sm_count == 0:
        return batch * seq_len
    return min(batch * seq_len, sm_count * TOKENS_PER_SM)
