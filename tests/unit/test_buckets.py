"""analysis.buckets: labels, assignment at the edges, configuration errors."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import buckets
from errors import ConfigError


def test_default_labels() -> None:
    assert buckets.bucket_labels() == ["<256", "256–1k", "1k–4k", "4k–16k", "16k–64k", "≥64k"]


@pytest.mark.parametrize(
    ("tokens", "label"),
    [
        (0, "<256"),
        (255, "<256"),
        (256, "256–1k"),  # an edge belongs to the bucket it opens
        (1023, "256–1k"),
        (1024, "1k–4k"),
        (4095, "1k–4k"),
        (4096, "4k–16k"),
        (16384, "16k–64k"),
        (65535, "16k–64k"),
        (65536, "≥64k"),
        (1_000_000, "≥64k"),
    ],
)
def test_assign_bucket_edges(tokens: int, label: str) -> None:
    assert buckets.assign_bucket(tokens) == label


def test_unknown_lengths_have_no_bucket() -> None:
    assert buckets.assign_bucket(None) is None
    assert buckets.assign_bucket(float("nan")) is None
    assert buckets.assign_bucket(-1) is None


def test_vectorised_assignment_matches_scalar_and_is_ordered() -> None:
    tokens = pd.Series([70000, 10, None, 300, 1024, 256], index=[5, 4, 3, 2, 1, 0])
    got = buckets.assign_buckets(tokens)
    assert list(got.index) == [5, 4, 3, 2, 1, 0]
    expected = [buckets.assign_bucket(t) for t in [70000, 10, None, 300, 1024, 256]]
    assert [None if pd.isna(v) else v for v in got] == expected
    assert got.cat.ordered
    assert list(got.cat.categories) == buckets.bucket_labels()
    assert got.sort_values().dropna().tolist() == ["<256", "256–1k", "256–1k", "1k–4k", "≥64k"]


def test_custom_edges() -> None:
    edges = buckets.parse_edges("100, 1k")
    assert edges == (100, 1024)
    assert buckets.bucket_labels(edges) == ["<100", "100–1k", "≥1k"]
    assert buckets.assign_bucket(99, edges) == "<100"
    assert buckets.assign_bucket(100, edges) == "100–1k"
    assert buckets.assign_bucket(5000, edges) == "≥1k"
    assert buckets.parse_edges("256,1k,4k,16k,64k") == buckets.DEFAULT_EDGES


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("1k,256", "not strictly increasing"),
        ("256,256", "not strictly increasing"),
        ("256,abc", "'abc' is not a number"),
        ("0,10", "not a positive"),
    ],
)
def test_bad_edges_are_config_errors(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        buckets.parse_edges(text)
    assert info.value.hint


def test_validate_edges_rejects_non_integers() -> None:
    with pytest.raises(ConfigError):
        buckets.validate_edges([256, 1.5])  # type: ignore[list-item]
