"""The vocabulary of a run's weight precision and KV-cache dtype (``runs.precision``,
``runs.kv_cache_dtype``), defined once: ``servescope bench --precision/--kv-cache-dtype``
validates against it and the importers normalise what a file says onto it. Pure.

Weights: a dtype (``fp32``, ``bf16``, ``fp16``, ``fp8``, ``fp4`` …), a quantisation scheme
(``int8``, ``int4``, ``w8a8``, ``w4a16`` …) or method (``gptq``, ``awq``, ``bitsandbytes`` …),
or a GGUF type (``gguf-q4_k_m``; any ``gguf-<type>`` is accepted). KV cache: the engines'
``--kv-cache-dtype`` values (``auto`` = the model's own dtype) and llama.cpp's cache types.
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
