"""analysis.precision: the weight-precision and KV-cache-dtype vocabulary, one definition."""

from __future__ import annotations

import pytest

from analysis import precision
from errors import InputError


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("fp8", "fp8"),
        ("BF16", "bf16"),
        ("bfloat16", "bf16"),
        ("half", "fp16"),
        ("gptq_marlin", "gptq"),
        ("awq", "awq"),
        ("w4a16", "w4a16"),
        ("gguf-q4_k_m", "gguf-q4_k_m"),
        ("GGUF-IQ3_XXS", "gguf-iq3_xxs"),  # any gguf-<type>
        ("auto", None),  # says nothing about the weights
        ("fp9", None),
        ("", None),
        (None, None),
        (8, None),
    ],
)
def test_weight_precisions_normalise(given: object, expected: str | None) -> None:
    assert precision.normalise_precision(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("auto", "auto"),
        ("fp8", "fp8"),
        ("fp8_e5m2", "fp8_e5m2"),
        ("fp8_e4m3fn", "fp8_e4m3"),
        ("float16", "fp16"),
        ("Q8_0", "q8_0"),
        ("int4", None),
        ("gptq", None),
    ],
)
def test_kv_cache_dtypes_normalise(given: str, expected: str | None) -> None:
    assert precision.normalise_kv_cache_dtype(given) == expected


def test_bad_values_name_the_accepted_ones() -> None:
    with pytest.raises(InputError, match=r"--precision 'fp9'") as exc:
        precision.check_precision("fp9")
    assert exc.value.hint is not None and "w8a8" in exc.value.hint and "gguf-" in exc.value.hint
    with pytest.raises(InputError, match=r"--kv-cache-dtype 'int4'") as exc:
        precision.check_kv_cache_dtype("int4")
    assert exc.value.hint is not None and "fp8_e4m3" in exc.value.hint
    assert precision.check_precision(None) is None
    assert precision.check_kv_cache_dtype("FP8") == "fp8"


def test_labels() -> None:
    assert precision.precision_label("fp8", "fp8") == "fp8 · fp8-kv"
    assert precision.precision_label("int4", None) == "int4"
    assert precision.precision_label(None, "auto") == "? · auto-kv"
    assert precision.precision_label(None, None) is None
