"""Input-length buckets (DESIGN §5): configurable edges, labels and assignment. Pure.

Edges are the lower bounds of every bucket but the first, in tokens, strictly increasing; a
bucket holds ``lower <= input_tokens < upper``. The default edges give
``<256, 256–1k, 1k–4k, 4k–16k, 16k–64k, ≥64k`` (1k = 1,024 tokens).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from errors import ConfigError

DEFAULT_EDGES: tuple[int, ...] = (256, 1024, 4096, 16384, 65536)


def validate_edges(edges: Iterable[int]) -> tuple[int, ...]:
    """Return ``edges`` as a tuple, or raise ConfigError unless positive and strictly increasing."""
    out = tuple(edges)
    if not out:
        raise ConfigError("input-length bucket edges are empty", hint="e.g. 256,1k,4k,16k,64k")
    for edge in out:
        if isinstance(edge, bool) or not isinstance(edge, int) or edge <= 0:
            raise ConfigError(
                f"input-length bucket edge {edge!r} is not a positive whole number of tokens",
                hint="e.g. 256,1k,4k,16k,64k",
            )
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ConfigError(
            f"input-length bucket edges {list(out)} are not strictly increasing",
            hint="e.g. 256,1k,4k,16k,64k",
        )
    return out


def parse_edges(text: str) -> tuple[int, ...]:
    """Parse ``"256,1k,4k"`` (k = 1,024) into edges; ConfigError names the bad part."""
    edges: list[int] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        try:
            value = int(part[:-1]) * 1024 if part.endswith("k") else int(part)
        except ValueError:
            raise ConfigError(
                f"input-length bucket edge {part!r} is not a number of tokens",
                hint="use whole numbers, optionally with k (×1,024): 256,1k,4k,16k,64k",
            ) from None
        edges.append(value)
    return validate_edges(edges)


def format_tokens(n: int) -> str:
    """``1024 → "1k"``, ``65536 → "64k"``, ``300 → "300"``."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def bucket_labels(edges: Sequence[int] = DEFAULT_EDGES) -> list[str]:
    """One label per bucket, in order: ``["<256", "256–1k", …, "≥64k"]``."""
    edges = validate_edges(edges)
    labels = [f"<{format_tokens(edges[0])}"]
    labels += [f"{format_tokens(a)}–{format_tokens(b)}" for a, b in itertools.pairwise(edges)]
    labels.append(f"≥{format_tokens(edges[-1])}")
    return labels


def bucket_index(input_tokens: float | None, edges: Sequence[int] = DEFAULT_EDGES) -> int | None:
    """Index of the bucket holding ``input_tokens`` (None when unknown or negative)."""
    if input_tokens is None or (isinstance(input_tokens, float) and math.isnan(input_tokens)):
        return None
    if input_tokens < 0:
        return None
    return int(np.searchsorted(np.asarray(validate_edges(edges)), input_tokens, side="right"))


def assign_bucket(input_tokens: float | None, edges: Sequence[int] = DEFAULT_EDGES) -> str | None:
    """Label of the bucket holding ``input_tokens`` (None when unknown)."""
    index = bucket_index(input_tokens, edges)
    return None if index is None else bucket_labels(edges)[index]


def assign_buckets(input_tokens: pd.Series, edges: Sequence[int] = DEFAULT_EDGES) -> pd.Series:
    """Vectorised assignment: an ordered categorical of bucket labels (NaN where unknown)."""
    edges = validate_edges(edges)
    labels = bucket_labels(edges)
    values = pd.to_numeric(input_tokens).astype("float64").to_numpy()
    index = np.searchsorted(np.asarray(edges, dtype="float64"), values, side="right")
    unknown = np.isnan(values) | (values < 0)
    codes = np.where(unknown, -1, index).astype("int64")
    cat = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(labels, ordered=True))
    return pd.Series(cat, index=input_tokens.index, name="bucket")
