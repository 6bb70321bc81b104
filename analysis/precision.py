"""The vocabulary of a run's weight precision and KV-cache dtype (``runs.precision``,
``runs.kv_cache_dtype``), defined once: ``servescope bench --precision/--kv-cache-dtype``
validates against it and the importers normalise what a file says onto it. Pure.

Weights: a dtype (``fp32``, ``bf16``, ``fp16``, ``fp8``, ``fp4`` …), a quantisation scheme
(``int8``, ``int4``, ``w8a8``, ``w4a16`` …) or method (``gptq``, ``awq``, ``bitsandbytes`` …),
or a GGUF type (``gguf-q4_k_m``; any ``gguf-<type>`` is accepted). KV cache: the engines'
``--kv-cache-dtype`` values (``auto`` = the model's own dtype) and llama.cpp's cache types.

The same vocabulary says how many bytes a weight or a KV element takes where that is fixed
(``PRECISION_BYTES``, ``GROUP_QUANTISED``, ``BLOCK_SCALED``, ``KV_CACHE_BYTES``): the capacity
formulas (``analysis.capacity``), the step-time physics (``analysis.perf_model``) and the sim's
``--dtype`` / ``--kv-cache-dtype`` read these tables and nothing else. ``sized_precision`` maps a
scheme onto the precision that holds its weights (``w4a16``, ``gptq``, ``awq`` → ``int4``;
``w8a8``, ``w8a16`` → ``int8``); methods without one fixed size (``bitsandbytes``, GGUF k-quants
…) are refused there with the list of sized ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from errors import InputError

#: Weight precisions / quantisation methods accepted (besides any ``gguf-<type>``).
WEIGHT_PRECISIONS: Final = (
    "fp32",
    "bf16",
    "fp16",
    "fp8",
    "fp4",
    "nvfp4",
    "mxfp4",
    "int8",
    "int4",
    "w8a8",
    "w8a16",
    "w4a16",
    "w4a8",
    "gptq",
    "awq",
    "bitsandbytes",
    "compressed-tensors",
    "gguf-q8_0",
    "gguf-q6_k",
    "gguf-q5_k_m",
    "gguf-q4_k_m",
    "gguf-q4_0",
)
#: KV-cache dtypes accepted.
KV_CACHE_DTYPES: Final = (
    "auto",
    "fp16",
    "bf16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "int8",
    "q8_0",
    "q4_0",
)

#: Bytes one weight occupies in each precision whose storage is fixed, before quantisation scales.
PRECISION_BYTES: Final[Mapping[str, float]] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "mxfp4": 0.5,
    "nvfp4": 0.5,
}
#: Precisions stored group-wise with a group size the quantiser chooses (GPTQ/AWQ INT4: one FP16
#: scale per ``group_size`` weights, usually 128). INT8 (per-channel scales) and FP8 (per-tensor,
#: or DeepSeek-V3's 128×128 blocks: 4 B per 16,384 weights) carry scales too small to count.
GROUP_QUANTISED: Final = frozenset({"int4"})
#: Microscaling formats, whose block and scale the format fixes: (weights per block, scale bytes).
#: MXFP4 (OCP Microscaling spec v1.0): one E8M0 byte per 32 FP4 weights → 0.53125 B per weight;
#: NVFP4: one FP8 E4M3 byte per 16 → 0.5625 (its per-tensor FP32 scale is negligible).
BLOCK_SCALED: Final[Mapping[str, tuple[int, float]]] = {"mxfp4": (32, 1.0), "nvfp4": (16, 1.0)}
#: Schemes and methods whose weights live in one of the sized precisions.
SIZED_ALIASES: Final[Mapping[str, str]] = {
    "w8a8": "int8",
    "w8a16": "int8",
    "w4a16": "int4",
    "w4a8": "int4",
    "gptq": "int4",
    "awq": "int4",
}
#: Bytes one KV-cache element occupies for each KV dtype but ``auto`` (llama.cpp's q8_0 / q4_0:
#: blocks of 32 values with one FP16 scale → 34 / 32 and 18 / 32 bytes).
KV_CACHE_BYTES: Final[Mapping[str, float]] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
}

_GGUF: Final = re.compile(r"^gguf-[a-z0-9_]+$")

#: Other spellings (engine flags, torch dtypes) → the vocabulary's word.
WEIGHT_ALIASES: Final[Mapping[str, str]] = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "gptq_marlin": "gptq",
    "awq_marlin": "awq",
    "compressed_tensors": "compressed-tensors",
}
KV_ALIASES: Final[Mapping[str, str]] = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3fn": "fp8_e4m3",
    "fp8_e4m3fnuz": "fp8_e4m3",
}


def _key(text: str) -> str:
    return text.strip().lower()


def normalise_precision(value: Any) -> str | None:
    """A weight precision in the vocabulary's spelling, or None when ``value`` is not one."""
    if not isinstance(value, str) or not value.strip():
        return None
    key = _key(value)
    key = WEIGHT_ALIASES.get(key, key)
    if key in WEIGHT_PRECISIONS or _GGUF.match(key):
        return key
    return None


def normalise_kv_cache_dtype(value: Any) -> str | None:
    """A KV-cache dtype in the vocabulary's spelling, or None when ``value`` is not one."""
    if not isinstance(value, str) or not value.strip():
        return None
    key = _key(value)
    key = KV_ALIASES.get(key, key)
    return key if key in KV_CACHE_DTYPES else None


def check_precision(value: str | None, flag: str = "--precision") -> str | None:
    """``value`` in the vocabulary's spelling (None stays None); else an ``InputError`` naming
    the accepted values."""
    if value is None:
        return None
    found = normalise_precision(value)
    if found is None:
        raise InputError(
            f"{flag} {value!r} is not a known weight precision",
            hint=f"accepted: {', '.join(WEIGHT_PRECISIONS)}, or any gguf-<type>",
        )
    return found


def check_kv_cache_dtype(value: str | None, flag: str = "--kv-cache-dtype") -> str | None:
    """``value`` in the vocabulary's spelling (None stays None); else an ``InputError`` naming
    the accepted values."""
    if value is None:
        return None
    found = normalise_kv_cache_dtype(value)
    if found is None:
        raise InputError(
            f"{flag} {value!r} is not a known KV-cache dtype",
            hint=f"accepted: {', '.join(KV_CACHE_DTYPES)}",
        )
    return found


def sized_precision(value: str, flag: str = "--dtype") -> str:
    """The sized precision (a key of ``PRECISION_BYTES``) that holds ``value``'s weights:
    ``value`` in the vocabulary's spelling, schemes mapped by ``SIZED_ALIASES``. InputError when
    ``value`` is not in the vocabulary or has no fixed size per weight."""
    found = check_precision(value, flag)
    assert found is not None
    sized = SIZED_ALIASES.get(found, found)
    if sized not in PRECISION_BYTES:
        raise InputError(
            f"{flag} {value!r} has no fixed size per weight",
            hint=f"accepted: {', '.join([*PRECISION_BYTES, *SIZED_ALIASES])}",
        )
    return sized


def kv_cache_bytes(value: str, flag: str = "--kv-cache-dtype") -> float:
    """Bytes per KV-cache element of the KV dtype ``value`` (not ``auto``, which is the
    model's own dtype); InputError naming the accepted values otherwise."""
    found = check_kv_cache_dtype(value, flag)
    if found is None or found not in KV_CACHE_BYTES:
        raise InputError(
            f"{flag} {value!r} has no fixed size per element",
            hint=f"accepted: {', '.join(KV_CACHE_BYTES)}",
        )
    return KV_CACHE_BYTES[found]


def precision_label(precision: Any, kv_cache_dtype: Any) -> str | None:
    """``fp8 · fp8-kv`` (``fp8`` when the KV-cache dtype is unknown, ``? · fp8-kv`` when only it
    is known); None when both are unknown."""
    weights = precision if isinstance(precision, str) and precision else None
    kv = kv_cache_dtype if isinstance(kv_cache_dtype, str) and kv_cache_dtype else None
    if weights is None and kv is None:
        return None
    if kv is None:
        return str(weights)
    return f"{weights or '?'} · {kv}-kv"
