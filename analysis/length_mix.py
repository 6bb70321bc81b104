"""Length distributions from histograms, and how far two of them are apart (pure).

A production length mix reaches ServeScope as an engine's prompt/generation length histogram
(cumulative counts per upper bound ``le``, ``+Inf`` last); a benchmark's reaches it as the raw
lengths of its requests. Both become a :class:`LengthDist`: requests per bucket on ascending
upper bounds, a bucket being ``(previous edge, edge]`` and the first one starting at 0.

**Inside a bucket the lengths are taken as uniform** (piecewise-uniform CDF, linear between the
edges), the same assumption ``histogram_quantile`` makes. An open ``+Inf`` bucket has no width:
its requests are only known to exceed the last finite edge, so its mass sits beyond every finite
edge (the CDF is flat inside it and reaches 1 only at infinity).

**Distance** (:func:`distance`): the Kolmogorov–Smirnov distance, the largest absolute gap
between the two CDFs, evaluated at every edge of either distribution (the union of both edge
sets; between two edges both CDFs are linear, so the largest gap is at an edge). It lies in
0..1: 0 for the same shares on the same buckets, 1 when every request of one lies below every
request of the other. At or above :data:`MATERIAL_DISTANCE` a benchmark's lengths "differ
materially" from production's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from analysis.engine_series import histogram_quantile

#: At or above this KS distance a benchmark's length mix differs materially from production's
#: (a fifth of the requests on the other side of some length).
MATERIAL_DISTANCE: Final = 0.2


@dataclass(frozen=True)
class LengthDist:
    """Requests per length bucket: ``edges`` are the upper bounds (ascending, the last may be
    inf), ``counts`` the requests in each bucket (not cumulative), same length."""

    edges: tuple[float, ...]
    counts: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.edges) != len(self.counts):
            raise ValueError(
                f"edges and counts must have the same length, got {len(self.edges)} edges "
                f"and {len(self.counts)} counts"
            )
        if any(math.isnan(e) for e in self.edges) or any(
            b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)
        ):
            raise ValueError(f"edges must be strictly ascending numbers, got {list(self.edges)}")
        if any(math.isinf(e) for e in self.edges[:-1]) or (self.edges and self.edges[0] < 0):
            raise ValueError(
                f"edges must be finite and >= 0 (only the last may be inf), got {list(self.edges)}"
            )
        if any(not math.isfinite(c) or c < 0 for c in self.counts):
            raise ValueError(f"counts must be finite and >= 0, got {list(self.counts)}")

    @property
    def lowers(self) -> tuple[float, ...]:
        """Each bucket's lower bound (exclusive): 0 for the first, the previous edge after."""
        return (0.0, *self.edges[:-1]) if self.edges else ()

    @property
    def total(self) -> float:
        """The number of requests."""
        return float(sum(self.counts))

    @property
    def shares(self) -> tuple[float, ...]:
        """Each bucket's share of the requests (all 0 when there are none)."""
        t = self.total
        return tuple(c / t if t > 0 else 0.0 for c in self.counts)

    @property
    def open_ended(self) -> bool:
        """True when the last bucket is ``+Inf`` and holds requests."""
        return bool(self.edges) and math.isinf(self.edges[-1]) and self.counts[-1] > 0

    @property
    def mean_estimate(self) -> float:
        """The mean from bucket midpoints (the ``+Inf`` bucket at its lower bound, so an
        underestimate when it holds requests); NaN when there are no requests."""
        if self.total <= 0:
            return math.nan
        mids = [
            lo if math.isinf(hi) else (lo + hi) / 2
            for lo, hi in zip(self.lowers, self.edges, strict=True)
        ]
        return float(sum(s * m for s, m in zip(self.shares, mids, strict=True)))

    def cumulative(self) -> list[tuple[float, float]]:
        """(upper bound, cumulative count), ``+Inf`` last (added when the edges end finite)."""
        pairs = list(zip(self.edges, np.cumsum(self.counts).tolist(), strict=True))
        if not pairs or not math.isinf(pairs[-1][0]):
            pairs.append((math.inf, self.total))
        return [(float(le), float(c)) for le, c in pairs]

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1), interpolated inside its bucket as ``histogram_quantile``
        does; a rank in the ``+Inf`` bucket answers the last finite edge. NaN when empty."""
        value = histogram_quantile(q, self.cumulative())
        return math.nan if value is None else float(value)

    def cdf(self, x: float) -> float:
        """The share of requests at or below ``x`` (piecewise uniform; NaN when empty)."""
        t = self.total
        if t <= 0:
            return math.nan
        below = 0.0
        for lo, hi, c in zip(self.lowers, self.edges, self.counts, strict=True):
            if x >= hi:
                below += c
            elif x > lo and not math.isinf(hi):
                below += c * (x - lo) / (hi - lo)
                break
            else:
                break
        return min(1.0, below / t)


def from_buckets(pairs: Sequence[tuple[float, float]]) -> LengthDist:
    """A distribution from (upper bound, cumulative count) pairs, as ``bucket_increase``
    returns them (any order; cumulative counts made monotone first, as exporters may round)."""
    pts = sorted((float(le), float(c)) for le, c in pairs)
    if not pts:
        return LengthDist((), ())
    edges = tuple(le for le, _ in pts)
    cum = np.maximum.accumulate(np.maximum([c for _, c in pts], 0.0))
    counts = np.diff(cum, prepend=0.0)
    return LengthDist(edges, tuple(float(c) for c in counts))


def from_lengths(values: Sequence[float] | np.ndarray, edges: Sequence[float]) -> LengthDist:
    """Raw lengths binned on ``edges`` (upper bounds, ``(lo, le]`` as Prometheus buckets);
    a ``+Inf`` bucket is added when the edges end finite, so no length is dropped. NaN
    values are ignored."""
    e = [float(x) for x in edges]
    if not e or not math.isinf(e[-1]):
        e.append(math.inf)
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    idx = np.searchsorted(np.asarray(e), v, side="left")
    counts = np.bincount(idx, minlength=len(e))[: len(e)]
    return LengthDist(tuple(e), tuple(float(c) for c in counts))


def distance(a: LengthDist, b: LengthDist) -> float:
    """The Kolmogorov–Smirnov distance (0..1) between the two piecewise-uniform CDFs,
    evaluated at the union of both edge sets; NaN when either has no requests."""
    if a.total <= 0 or b.total <= 0:
        return math.nan
    points = sorted({e for e in (*a.edges, *b.edges) if math.isfinite(e)})
    if not points:
        return 0.0
    return float(max(abs(a.cdf(x) - b.cdf(x)) for x in points))


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


def describe(d: LengthDist, unit: str = "tokens") -> str:
    """``"P50 ≈ 410, P90 ≈ 1 800 tokens (n = 12 345)"``; a P90 in the ``+Inf`` bucket reads
    ``"P90 > 4 096"``; ``"no requests (n = 0)"`` when empty."""
    if d.total <= 0:
        return "no requests (n = 0)"
    parts = []
    finite = [e for e in d.edges if math.isfinite(e)]
    for q in (0.5, 0.9):
        value = d.quantile(q)
        rank = q * d.total
        cum = np.cumsum(d.counts)
        i = int(np.searchsorted(cum, rank, side="left"))
        in_inf = i < len(d.edges) and math.isinf(d.edges[i]) and finite
        label = f"P{round(q * 100)}"
        parts.append(
            f"{label} > {_fmt_int(finite[-1])}" if in_inf else f"{label} ≈ {_fmt_int(value)}"
        )
    return f"{', '.join(parts)} {unit} (n = {_fmt_int(d.total)})"
