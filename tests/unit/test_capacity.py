"""analysis/capacity.py against values computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import seeds
from analysis import capacity as cap
from analysis import perf_model as pm
from analysis.capacity import ModelShape
from errors import ConfigError

KIB = 1024
MIB = 1024**2
GIB = 1024**3

# Shapes from the models' config.json files (num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, head_dim / hidden_size ÷ heads; MLA: kv_lora_rank, qk_rope_head_dim; MoE:
# num_local_experts / n_routed_experts / num_experts, num_experts_per_tok, n_shared_experts).
LLAMA_2_7B: dict[str, Any] = {
    "name": "llama-2-7b",
    "params_b": 6.74,
    "layers": 32,
    "hidden_size": 4096,
    "heads": 32,
    "kv_heads": 32,
    "head_dim": 128,
}
# Mixtral-8x7B: 46.7B parameters, 12.9B active (Mistral's announcement); 8 experts, top-2.
MIXTRAL: dict[str, Any] = {
    "name": "mixtral-8x7b",
    "params_b": 46.7,
    "active_params_b": 12.9,
    "layers": 32,
    "hidden_size": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "experts": 8,
    "experts_per_token": 2,
}
# DeepSeek-V3: 61 layers (first 3 dense, 58 MoE), MLA with kv_lora_rank 512 and
# qk_rope_head_dim 64, 128 heads (num_key_value_heads 128, v_head_dim 128), 256 routed experts,
# top-8, 1 shared; moe_intermediate_size 2048. One routed expert = 3 (gate, up, down) × 7168 ×
# 2048 = 44,040,192 per layer × 58 MoE layers = 2,554,331,136 parameters. 671B in all.
DEEPSEEK_V3: dict[str, Any] = {
    "name": "deepseek-v3",
    "params_b": 671.0,
    "active_params_b": 37.0,
    "layers": 61,
    "hidden_size": 7168,
    "heads": 128,
    "kv_heads": 128,
    "head_dim": 128,
    "attention": "mla",
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "experts": 256,
    "experts_per_token": 8,
    "shared_experts": 1,
    "expert_params_b": 2.554331136,
}
# Qwen3-30B-A3B: 48 layers, hidden 2048, 32 heads, 4 KV heads of 128, 128 experts, top-8,
# moe_intermediate_size 768 → one expert = 3 × 2048 × 768 × 48 = 226,492,416 parameters.
QWEN3_30B_A3B: dict[str, Any] = {
    "name": "qwen3-30b-a3b",
    "params_b": 30.5,
    "active_params_b": 3.3,
    "layers": 48,
    "hidden_size": 2048,
    "heads": 32,
    "kv_heads": 4,
    "head_dim": 128,
    "experts": 128,
    "experts_per_token": 8,
    "expert_params_b": 0.226492416,
}


def shape(entry: dict[str, Any], **changes: Any) -> ModelShape:
    return ModelShape.from_entry({**entry, **changes})


def seed_shape(name: str) -> ModelShape:
    return ModelShape.from_entry(seeds.entry("models", name))


# --- KV bytes per token -------------------------------------------------------------------------


def test_llama_2_7b_fp16_kv_is_half_a_mib_per_token() -> None:
    m = shape(LLAMA_2_7B)
    assert m.attention == "mha"  # kv_heads = heads
    # 2 (K, V) × 32 layers × 32 KV heads × 128 head_dim × 2 bytes = 524,288 = 0.5 MiB
    assert cap.kv_bytes_per_token(m, 2) == 2 * 32 * 32 * 128 * 2 == 524_288 == MIB / 2
    # FP8 KV halves it: 262,144
    assert cap.kv_bytes_per_token(m, 1) == 262_144


def test_llama_3_1_70b_gqa_fp16_kv_is_320_kib_per_token() -> None:
    m = seed_shape("llama-3.1-70b")
    assert m.attention == "gqa"
    # 2 × 80 layers × 8 KV heads × 128 × 2 bytes = 327,680 = 320 KiB
    assert cap.kv_bytes_per_token(m, 2) == 2 * 80 * 8 * 128 * 2 == 327_680 == 320 * KIB


def test_gqa_sharded_by_tp_then_replicated_past_kv_heads() -> None:
    m = seed_shape("llama-3.1-70b")  # 8 KV heads
    # tp 2: 4 heads per rank → 2 × 80 × 4 × 128 × 2 = 163,840 (160 KiB)
    assert cap.kv_bytes_per_token(m, 2, tp=2) == 163_840
    # tp 8: 1 head per rank → 2 × 80 × 1 × 128 × 2 = 40,960 (40 KiB)
    assert cap.kv_bytes_per_token(m, 2, tp=8) == 40_960
    # tp 16 > 8 KV heads: each rank still holds one whole head (two ranks share each head), so the
    # per-rank figure stops at 40 KiB and the group holds 16 × 40 KiB = 640 KiB, twice 320 KiB.
    assert cap.kv_heads_per_rank(8, 16) == 1
    assert cap.kv_bytes_per_token(m, 2, tp=16) == 40_960
    assert cap.group_kv_bytes_per_token(m, 2, tp=8) == 327_680
    assert cap.group_kv_bytes_per_token(m, 2, tp=16) == 655_360 == 2 * 327_680
    # MHA splits by head too: Llama-2-7B at tp 2 = 524,288 / 2
    assert cap.kv_bytes_per_token(shape(LLAMA_2_7B), 2, tp=2) == 262_144
    # kv_heads not divisible by tp (vLLM refuses these): the largest share, ceil(3 / 2) = 2
    assert cap.kv_heads_per_rank(3, 2) == 2
    with pytest.raises(ValueError, match="tp"):
        cap.kv_bytes_per_token(m, 2, tp=0)


def test_deepseek_v3_mla_kv_is_latent_plus_rope_and_replicated() -> None:
    m = shape(DEEPSEEK_V3)
    # (kv_lora_rank 512 + qk_rope_head_dim 64) × 61 layers × 2 bytes = 576 × 122 = 70,272
    assert cap.kv_bytes_per_token(m, 2) == (512 + 64) * 61 * 2 == 70_272
    # one latent per layer, no heads to split: every TP rank holds all of it
    assert cap.kv_bytes_per_token(m, 2, tp=8) == 70_272
    assert cap.group_kv_bytes_per_token(m, 2, tp=8) == 8 * 70_272 == 562_176
    # the same 128 heads as MHA would need 2 × 61 × 128 × 128 × 2 = 3,997,696 (≈ 57 × more)
    as_mha = shape(DEEPSEEK_V3, attention="mha", kv_lora_rank=0, qk_rope_head_dim=0)
    assert cap.kv_bytes_per_token(as_mha, 2) == 3_997_696
    # kv_lora_rank alone makes an entry MLA
    no_kind = {k: v for k, v in DEEPSEEK_V3.items() if k != "attention"}
    assert shape(no_kind).attention == "mla"


def test_perf_model_uses_the_capacity_formulas_on_every_seed_model() -> None:
    for entry in seeds.entries("models"):
        m = ModelShape.from_entry(entry)
        for b in (2.0, 1.0):
            assert pm.kv_bytes_per_token(m, b) == cap.kv_bytes_per_token(m, b), m.name
        if m.expert_dtype_bytes is None:
            assert pm.weight_bytes(m) == pytest.approx(m.params_b * 1e9 * m.dtype_bytes)
        assert pm.weight_bytes(m, 2.0) == pytest.approx(cap.weight_bytes(m, "bf16"))


def test_store_rows_with_null_columns_read_like_the_toml() -> None:
    # the store's models table returns every column; a dense model's MoE/MLA columns are NULL
    # (None), and a pandas read turns NULL doubles into NaN
    columns = ("attention", "kv_lora_rank", "qk_rope_head_dim", "experts", "experts_per_token",
               "shared_experts", "expert_params_b", "expert_dtype_bytes", "active_params_b",
               "vocab_size", "context", "hf_repo", "checked_on")  # fmt: skip
    for entry in seeds.entries("models"):
        row: dict[str, Any] = {c: None for c in columns} | entry | {"origin": "seed"}
        assert ModelShape.from_entry(row) == ModelShape.from_entry(entry), entry["name"]
        nan_row = {k: (math.nan if v is None else v) for k, v in row.items()}
        assert ModelShape.from_entry(nan_row) == ModelShape.from_entry(entry), entry["name"]


# --- weights by precision ------------------------------------------------------------------------


def test_weight_bytes_by_precision_with_int4_group_scales() -> None:
    m = shape(LLAMA_2_7B)  # 6.74B parameters
    assert cap.weight_bytes(m, "fp32") == pytest.approx(6.74e9 * 4)  # 26.96 GB
    assert cap.weight_bytes(m, "fp16") == cap.weight_bytes(m, "bf16") == pytest.approx(13.48e9)
    assert cap.weight_bytes(m, "int8") == cap.weight_bytes(m, "fp8") == pytest.approx(6.74e9)
    # INT4 + one FP16 scale per 128 weights: 0.5 + 2/128 = 0.515625 bytes per parameter
    assert cap.bytes_per_param("int4") == 0.5 + 2 / 128 == 0.515625
    # 6.74e9 × 0.515625 = 3,475,312,500 bytes (3.2 GiB), 3.1 % over the bare 0.5
    assert cap.weight_bytes(m, "int4") == pytest.approx(3_475_312_500)
    # group 64: 0.5 + 2/64 = 0.53125; per-channel (no groups): the bare 0.5
    assert cap.bytes_per_param("int4", group_size=64) == 0.53125
    assert cap.weight_bytes(m, "int4", group_size=None) == pytest.approx(3.37e9)
    # asymmetric (a 4-bit zero point per group as well): 0.5 + 2.5/128 = 0.51953125
    assert cap.bytes_per_param("int4", scale_bytes=2.5) == 0.51953125
    # the group size only matters for group-wise formats
    assert cap.bytes_per_param("int8", group_size=64) == 1.0
    # Mixtral INT4 holds 46.7e9 × 0.515625 = 24,079,687,500 bytes
    assert cap.weight_bytes(shape(MIXTRAL), "int4") == pytest.approx(24_079_687_500)


def test_unknown_precision_and_bad_group_size_are_config_errors() -> None:
    m = shape(LLAMA_2_7B)
    with pytest.raises(ConfigError, match=r"unknown weight precision 'int3'.*fp32, fp16"):
        cap.weight_bytes(m, "int3")
    with pytest.raises(ConfigError, match="group_size"):
        cap.bytes_per_param("int4", group_size=0)


# --- mixture of experts --------------------------------------------------------------------------


def test_expected_distinct_experts() -> None:
    # B = 1: E × (1 − (1 − k/E)) = k exactly
    assert cap.expected_distinct_experts(8, 2, 1) == 2.0
    assert cap.expected_distinct_experts(256, 8, 1) == pytest.approx(8.0)
    assert cap.expected_distinct_experts(8, 2, 0) == 0.0
    # Mixtral B = 8: 8 × (1 − 0.75^8) = 8 × (1 − 0.100112915…) = 7.19909668
    assert cap.expected_distinct_experts(8, 2, 8) == pytest.approx(7.19909668)
    # DeepSeek-V3 B = 32: 256 × (1 − (248/256)^32) = 256 × (1 − 0.362055…) ≈ 163.31
    assert cap.expected_distinct_experts(256, 8, 32) == pytest.approx(163.3138, abs=1e-3)
    # grows monotonically toward E
    values = [cap.expected_distinct_experts(128, 8, b) for b in (1, 2, 4, 16, 64, 256, 1024)]
    assert values == sorted(values)
    assert cap.expected_distinct_experts(128, 8, 1024) == pytest.approx(128, rel=1e-9)
    # top-k = E: every expert at any batch
    assert cap.expected_distinct_experts(4, 4, 3) == 4.0
    with pytest.raises(ValueError, match="top_k"):
        cap.expected_distinct_experts(8, 9, 1)
    with pytest.raises(ValueError, match="batch_tokens"):
        cap.expected_distinct_experts(8, 2, -1)


def test_mixtral_holds_46_7b_but_reads_12_9b_per_token_at_batch_1() -> None:
    m = shape(MIXTRAL)
    # expert_params_b derived so that total = 46.7B and active = 12.9B:
    #   (total − active) / (E − k) = (46.7 − 12.9) / (8 − 2) = 33.8 / 6 = 5.6333B per expert
    assert m.expert_params_b == pytest.approx(33.8 / 6) == pytest.approx(5.6333, abs=1e-4)
    # cross-check with the architecture: one expert is 3 (w1, w2, w3) × 4096 × 14336 (FFN) per
    # layer × 32 layers = 5,637,144,576 ≈ 5.637B — within 0.07 % of the derived 5.633B
    assert m.expert_params_b * 1e9 == pytest.approx(3 * 4096 * 14336 * 32, rel=1e-3)
    # dense part = 46.7 − 8 × 5.6333 = 1.6333B (attention 32 × (2 × 4096² + 2 × 4096 × 1024) =
    # 1.342B, embeddings + LM head 2 × 32000 × 4096 = 0.262B, routers, norms)
    assert m.dense_params_b == pytest.approx(46.7 - 8 * 33.8 / 6) == pytest.approx(1.6333, 1e-4)
    # active = 1.6333 + 2 × 5.6333 = 12.9B
    assert m.active_params == pytest.approx(12.9e9)
    # memory holds all 46.7B: 93.4 GB at FP16
    assert cap.weight_bytes(m, "fp16") == pytest.approx(93.4e9)
    # a decode step at batch 1 reads 12.9B parameters = 25.8 GB at FP16
    assert cap.decode_params_per_step(m, 1) == pytest.approx(12.9e9)
    assert cap.decode_bytes_per_step(m, "fp16", 1) == pytest.approx(25.8e9)
    # batch 8: 1.6333 + 7.19909668 × 5.6333 = 42.1882B (≈ 90 % of all weights)
    assert cap.decode_params_per_step(m, 8) == pytest.approx(
        (1.6333333 + 7.19909668 * 5.6333333) * 1e9, rel=1e-6
    )
    # large batch: every expert, i.e. all 46.7B
    assert cap.decode_params_per_step(m, 4096) == pytest.approx(46.7e9)
    # Mixtral is GQA with 8 KV heads: 2 × 32 × 8 × 128 × 2 = 131,072 bytes per token
    assert cap.kv_bytes_per_token(m, 2) == 131_072


def test_moe_active_params_implied_by_expert_sizes() -> None:
    # DeepSeek-V3: dense = 671 − 256 × 2.554331136 = 17.0913B; active = 17.0913 + 8 × 2.5543 =
    # 37.526B — the published "37B" is rounded (1.4 % off, inside the 5 % tolerance)
    v3 = shape(DEEPSEEK_V3)
    assert v3.implied_active_params_b == pytest.approx(671 - 248 * 2.554331136)
    assert v3.implied_active_params_b == pytest.approx(37.526, abs=1e-3)
    assert v3.active_params == 37.0e9  # the stated figure wins where given
    assert cap.decode_params_per_step(v3, 1) == pytest.approx(37.526e9, rel=1e-4)
    # Qwen3-30B-A3B: dense = 30.5 − 128 × 0.2265 = 1.5090B; active = 1.5090 + 8 × 0.2265 = 3.3209B
    q = shape(QWEN3_30B_A3B)
    assert q.implied_active_params_b == pytest.approx(30.5 - 120 * 0.226492416)
    assert q.implied_active_params_b == pytest.approx(3.3209, abs=1e-4)
    # expert_params_b alone (no active_params_b) is enough
    no_active = {k: v for k, v in QWEN3_30B_A3B.items() if k != "active_params_b"}
    assert shape(no_active).active_params == pytest.approx(3.3209e9, rel=1e-4)


def test_dense_model_reads_all_weights_at_any_batch() -> None:
    m = seed_shape("llama-3.1-8b")
    for b in (1, 8, 256):
        assert cap.decode_params_per_step(m, b) == pytest.approx(8.03e9)
        assert cap.decode_bytes_per_step(m, "fp8", b) == pytest.approx(8.03e9)
    assert cap.decode_bytes_per_step(m, "int4", 1) == pytest.approx(8.03e9 * 0.515625)
    with pytest.raises(ValueError, match="batch_tokens"):
        cap.decode_params_per_step(m, 0)


# --- budget, sequences, batched tokens ----------------------------------------------------------


def test_kv_budget_and_max_concurrent_sequences_by_hand() -> None:
    # Llama-3.1-8B FP16 on one A100-80GB (85,899,345,920 bytes = 81,920 MiB), fraction 0.9:
    # 0.9 × 85,899,345,920 = 77,309,411,328; − weights 8.03e9 × 2 = 16,060,000,000;
    # − activations 1 GiB = 1,073,741,824 → 60,175,669,504 bytes of KV
    m = seed_shape("llama-3.1-8b")
    budget = cap.kv_budget_bytes(85_899_345_920, 0.9, cap.weight_bytes(m, "fp16"), GIB)
    assert budget == pytest.approx(60_175_669_504)
    kv = cap.kv_bytes_per_token(m, 2)  # 2 × 32 × 8 × 128 × 2 = 131,072
    # block of 16 tokens = 2,097,152 bytes → floor(60,175,669,504 / 2,097,152) = floor(28,693.99)
    # = 28,693 blocks; a 3,000-token sequence holds ceil(3000 / 16) = 188 blocks (187.5 rounded
    # up) → 28,693 // 188 = 152 sequences (188 × 153 = 28,764 > 28,693)
    assert cap.max_concurrent_sequences(budget, kv, 3000, 16) == 152
    # unpaged: floor(60,175,669,504 / 131,072) = 459,103 tokens // 3000 = 153 sequences
    assert cap.max_concurrent_sequences(budget, kv, 3000, 1) == 153
    # a sequence that is a whole number of blocks loses nothing: 4096 tokens = 256 blocks →
    # 28,693 // 256 = 112, the same as 459,103 // 4096 = 112
    assert cap.max_concurrent_sequences(budget, kv, 4096, 16) == 112
    assert cap.max_concurrent_sequences(budget, kv, 4096, 1) == 112
    # no room: zero sequences, not an error
    assert cap.max_concurrent_sequences(-1.0, kv, 3000) == 0
    # 16 GiB × 0.9 = 15,461,882,265.6 < 16.06 GB of weights: a negative budget
    assert cap.kv_budget_bytes(16 * GIB, 0.9, cap.weight_bytes(m, "fp16"), GIB) < 0
    with pytest.raises(ValueError, match="memory_fraction"):
        cap.kv_budget_bytes(GIB, 1.5, 0.0, 0.0)
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        cap.max_concurrent_sequences(budget, 0.0, 3000)


def test_group_budget_and_per_rank_budget_agree_under_tp() -> None:
    # Llama-3.1-70B FP16 on 2 × H100-80GB (85,520,809,984 bytes each), fraction 0.9:
    # group budget 0.9 × 171,041,619,968 − 141.1e9 − 2 GiB = 10,689,974,323.2 bytes
    m = seed_shape("llama-3.1-70b")
    group = cap.kv_budget_bytes(2 * 85_520_809_984, 0.9, cap.weight_bytes(m, "fp16"), 2 * GIB)
    assert group == pytest.approx(0.9 * 171_041_619_968 - 141.1e9 - 2 * GIB)
    per_rank = cap.kv_budget_bytes(85_520_809_984, 0.9, cap.weight_bytes(m, "fp16") / 2, GIB)
    assert per_rank == pytest.approx(group / 2)
    # group 327,680 B/token (2 × 163,840): floor(10,689,974,323 / (16 × 327,680)) =
    # floor(2,038.95) = 2,038 blocks → 2,038 // 128 (2,048-token sequences) = 15
    g = cap.max_concurrent_sequences(group, cap.group_kv_bytes_per_token(m, 2, tp=2), 2048)
    r = cap.max_concurrent_sequences(per_rank, cap.kv_bytes_per_token(m, 2, tp=2), 2048)
    assert g == r == 15


def test_max_tokens_per_step_seed_rule() -> None:
    # H100: 132 SMs × 2048 = 270,336 tokens caps B × L = 256 × 2048 = 524,288
    assert cap.max_tokens_per_step(256, 2048, 132) == 132 * 2048 == 270_336
    # small batches are B × L: 8 × 1024 = 8,192
    assert cap.max_tokens_per_step(8, 1024, 132) == 8192
    # L4: 58 SMs × 2048 = 118,784
    assert cap.max_tokens_per_step(64, 4096, 58) == 118_784
    # no SM count (a CPU host): B × L alone
    assert cap.max_tokens_per_step(4, 512, 0) == 2048
    with pytest.raises(ValueError):
        cap.max_tokens_per_step(-1, 512, 132)


# --- catalogue entries ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"layers": None}, r"model 'llama-2-7b': missing key 'layers' \(an integer\)"),
        ({"params_b": None}, r"missing key 'params_b' \(a number\)"),
        ({"heads": "32"}, r"key 'heads' must be an integer, got '32'"),
        ({"heads": True}, r"key 'heads' must be an integer"),
        ({"head_dim": 128.0}, r"key 'head_dim' must be an integer"),
        ({"params_b": float("nan")}, r"key 'params_b' must be a finite number"),
        ({"params_b": 0}, r"params_b must be a positive number"),
        ({"attention": "linear"}, r"key 'attention' must be one of mha, gqa, mla, got 'linear'"),
        ({"attention": "mha", "kv_heads": 8}, r"attention 'mha' has kv_heads = heads"),
        ({"kv_heads": 5}, r"kv_heads dividing heads"),
        ({"attention": "mla"}, r"attention 'mla' needs kv_lora_rank and qk_rope_head_dim"),
        ({"kv_lora_rank": 512, "attention": "gqa"}, r"apply only to attention = 'mla'"),
        ({"experts_per_token": 2}, r"need experts ≥ 1"),
        ({"active_params_b": 3.0}, r"differs from params_b .* no experts"),
        ({"name": None}, r"model entry without a name"),
    ],
)
def test_entry_errors_name_the_model_and_key(changes: dict[str, Any], message: str) -> None:
    entry = {k: v for k, v in {**LLAMA_2_7B, **changes}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        ModelShape.from_entry(entry)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"active_params_b": None}, r"needs expert_params_b or active_params_b"),
        ({"experts_per_token": None}, r"experts_per_token \(top-k\) in 1 … 7, got 0"),
        ({"experts_per_token": 8}, r"in 1 … 7, got 8"),
        ({"expert_params_b": 4.0}, r"active_params_b 12.9B disagrees with the 22.700B"),
        ({"expert_params_b": 6.0}, r"exceed params_b"),
        ({"experts_per_token": 9, "expert_params_b": 5.6}, r"1 ≤ experts_per_token ≤ experts"),
    ],
)
def test_moe_entry_errors(changes: dict[str, Any], message: str) -> None:
    entry = {k: v for k, v in {**MIXTRAL, **changes}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        ModelShape.from_entry(entry)


def test_shape_is_frozen_and_hashable() -> None:
    m = shape(MIXTRAL)
    with pytest.raises(AttributeError):
        m.layers = 1  # type: ignore[misc]
    assert hash(m) == hash(shape(MIXTRAL))
    assert math.isclose(m.params_b, 46.7)


# --- the catalogue's MoE / MLA entries (seeds/models.toml) against the hand-computed cases ------


def test_catalogue_deepseek_entries_are_the_mla_hand_case() -> None:
    for name in ("deepseek-v3", "deepseek-r1"):
        m = seed_shape(name)
        assert m.attention == "mla" and m.is_moe and m.shared_experts == 1
        # (512 + 64) × 61 layers × 2 bytes = 70,272 per token, on every TP rank
        assert cap.kv_bytes_per_token(m, 2) == (512 + 64) * 61 * 2 == 70_272
        assert cap.kv_bytes_per_token(m, 2, tp=8) == 70_272
        # the test dict above carries the same shape as the catalogue
        fields = ("params_b", "layers", "hidden_size", "heads", "kv_heads", "head_dim",
                  "kv_lora_rank", "qk_rope_head_dim", "experts", "experts_per_token",
                  "expert_params_b")  # fmt: skip
        assert {k: getattr(m, k) for k in fields} == {k: DEEPSEEK_V3[k] for k in fields}
        # FP8 checkpoint: 671 GB of weights; batch 1 reads 37.5B parameters
        assert m.dtype_bytes == 1.0
        assert cap.stored_weight_bytes(m) == pytest.approx(671e9)
        assert cap.decode_params_per_step(m, 1) == pytest.approx(37.526e9, rel=1e-4)


def test_catalogue_mixtral_holds_46_7b_and_reads_12_9b_at_batch_1() -> None:
    m = seed_shape("mixtral-8x7b")
    # expert_params_b from the config: 3 × 4096 × 14336 × 32 = 5,637,144,576
    assert m.expert_params_b * 1e9 == pytest.approx(3 * 4096 * 14336 * 32)
    assert cap.weight_bytes(m, "fp16") == pytest.approx(93.4e9)
    # batch 1: 46.70 − 6 × 5.637144576 = 12.877B ≈ the announced 12.9B
    assert cap.decode_params_per_step(m, 1) == pytest.approx(12.9e9, rel=0.005)
    assert cap.decode_params_per_step(m, 4096) == pytest.approx(46.7e9)
    # the hand-case dict (active 12.9B → expert 5.6333B) agrees with the config within 0.07 %
    assert shape(MIXTRAL).expert_params_b == pytest.approx(m.expert_params_b, rel=1e-3)


def test_catalogue_qwen3_moe_entries_match_their_configs() -> None:
    q = seed_shape("qwen3-30b-a3b")
    # one expert = 3 × 2048 × 768 × 48 = 226,492,416; the test dict uses the same figure
    assert q.expert_params_b * 1e9 == 3 * 2048 * 768 * 48 == QWEN3_30B_A3B["expert_params_b"] * 1e9
    assert (q.layers, q.heads, q.kv_heads, q.head_dim, q.experts, q.experts_per_token) == (
        48, 32, 4, 128, 128, 8)  # fmt: skip
    # 2 × 48 × 4 × 128 × 2 = 98,304 bytes of KV per token
    assert cap.kv_bytes_per_token(q, 2) == 98_304
    big = seed_shape("qwen3-235b-a22b")
    # dense 235.09 − 128 × 1.774190592 = 7.9967B; + 8 experts = 22.19B (the card's 22B)
    assert big.implied_active_params_b == pytest.approx(235.09 - 120 * 1.774190592)
    assert big.implied_active_params_b == pytest.approx(22.19, abs=0.01)


def test_catalogue_gpt_oss_mxfp4_experts() -> None:
    m = seed_shape("gpt-oss-120b")
    assert m.expert_dtype_bytes == cap.bytes_per_param("mxfp4") == 0.5 + 1 / 32
    # 2.12844B BF16 + 114.7016B × 0.53125 = 65.19 GB = 60.7 GiB (the card's 60.8 GiB checkpoint)
    assert cap.stored_weight_bytes(m) / GIB == pytest.approx(60.71, abs=0.01)
    # a step at batch 1 reads the dense part in BF16 and 4 experts in MXFP4
    one = (116.83 - 128 * 0.89610624) * 2 + 4 * 0.89610624 * 0.53125
    assert cap.step_weight_bytes(m, 1) == pytest.approx(one * 1e9)
    assert cap.step_weight_bytes(m, 100_000) == pytest.approx(cap.stored_weight_bytes(m))


def test_every_catalogue_model_parses_and_new_ones_say_where_from() -> None:
    for entry in seeds.entries("models"):
        m = ModelShape.from_entry(entry)
        assert entry.get("source"), m.name
        if m.is_moe or m.attention == "mla" or m.name in ("llama-2-13b", "falcon-40b", "qwen-1.8b"):
            assert entry.get("checked_on") == "2026-12-01", m.name
    names = {e["name"] for e in seeds.entries("models")}
    assert {"deepseek-v3", "deepseek-r1", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b",
            "gpt-oss-120b", "llama-2-13b", "falcon-40b", "qwen-1.8b"} <= names  # fmt: skip
    # the seed's dense additions: Llama-2-13B MHA 2 × 40 × 40 × 128 × 2 = 819,200 B per token;
    # Falcon-40B 8 KV groups 2 × 60 × 8 × 64 × 2 = 122,880; Qwen-1.8B 2 × 24 × 16 × 128 × 2
    assert cap.kv_bytes_per_token(seed_shape("llama-2-13b"), 2) == 819_200
    assert cap.kv_bytes_per_token(seed_shape("falcon-40b"), 2) == 122_880
    assert cap.kv_bytes_per_token(seed_shape("qwen-1.8b"), 2) == 196_608


def test_precision_vocabulary_sizes() -> None:
    from analysis import precision

    # every sized precision is a word of the run vocabulary, and bytes_per_param knows it
    for p in precision.PRECISION_BYTES:
        assert precision.normalise_precision(p) == p
        assert cap.bytes_per_param(p) >= precision.PRECISION_BYTES[p]
    assert cap.bytes_per_param("nvfp4") == 0.5 + 1 / 16
    # schemes map onto the precision that holds their weights
    assert precision.sized_precision("W4A16") == precision.sized_precision("gptq") == "int4"
    assert precision.sized_precision("bfloat16") == "bf16"
    assert precision.kv_cache_bytes("fp8_e5m2") == 1.0
    from errors import InputError

    with pytest.raises(InputError, match="no fixed size"):
        precision.sized_precision("bitsandbytes")
    with pytest.raises(InputError, match="not a known weight precision"):
        precision.sized_precision("int3")
    with pytest.raises(InputError, match="no fixed size"):
        precision.kv_cache_bytes("auto")
