"""Metric definitions (DESIGN §5, docs/metrics.md), as pure functions.

Every collector and importer computes per-request metrics through these, so that one set of
definitions holds across sources. ``store.run_figures`` computes the same figures in SQL for
stored runs; the integration tests check that both agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

#: A P99 from fewer samples than this is marked low-confidence (DESIGN §5).
LOW_CONFIDENCE_P99_SAMPLES = 100

#: The percentiles a run summary reports.
SUMMARY_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)


def request_tpot_ms(
    e2e_ms: float | None, ttft_ms: float | None, output_tokens: int | None
) -> float | None:
    """TPOT of one request: (E2E − TTFT) / (output_tokens − 1), defined for output_tokens ≥ 2."""
    if e2e_ms is None or ttft_ms is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e_ms - ttft_ms) / (output_tokens - 1)


def requests_tpot_ms(
    e2e_ms: np.ndarray, ttft_ms: np.ndarray, output_tokens: np.ndarray
) -> np.ndarray:
    """``request_tpot_ms`` over arrays (NaN for "not given"): NaN where it is undefined."""
    e2e = np.asarray(e2e_ms, dtype="float64")
    ttft = np.asarray(ttft_ms, dtype="float64")
    out = np.asarray(output_tokens, dtype="float64")
    ok = (out >= 2) & ~np.isnan(e2e) & ~np.isnan(ttft)
    tpot = np.full(e2e.shape, np.nan)
    np.divide(e2e - ttft, out - 1.0, out=tpot, where=ok)
    return tpot


def _clean(values: Iterable[float | None] | pd.Series) -> np.ndarray:
    series = values if isinstance(values, pd.Series) else pd.Series(list(values), dtype="object")
    arr = pd.to_numeric(series).astype("float64").to_numpy()
    return arr[~np.isnan(arr)]


def percentile(values: Iterable[float | None] | pd.Series, p: float) -> float | None:
    """The ``p``-th percentile (0–100) with linear interpolation; None/NaN ignored.

    Linear interpolation between closest ranks: the same as numpy's default method, DuckDB's
    ``quantile_cont`` and PostgreSQL's ``percentile_cont``. Returns None for no samples.
    """
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {p!r}")
    arr = _clean(values)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, p, method="linear"))


def min_samples_for(p: float) -> int:
    """Fewest samples for which the ``p``-th percentile is not an extrapolation of the maximum.

    P99 needs 100 samples (DESIGN §5), P99.9 needs 1,000, P50 needs 2.
    """
    if not 0.0 <= p < 100.0:
        raise ValueError(f"percentile must be within 0..100 (exclusive), got {p!r}")
    return max(1, math.ceil(round(1.0 / (1.0 - p / 100.0), 6)))


def low_confidence(p: float, n: int) -> bool:
    """True when the ``p``-th percentile of ``n`` samples is low-confidence (P99 from < 100)."""
    return n < min_samples_for(p)


@dataclass(frozen=True)
class Distribution:
    """Percentiles of one metric with the sample count they come from (units of the metric)."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None

    @property
    def p99_low_confidence(self) -> bool:
        return low_confidence(99.0, self.n)


def distribution(values: Iterable[float | None] | pd.Series) -> Distribution:
    """Sample count, mean and P50/P90/P95/P99 (linear interpolation) of ``values``."""
    arr = _clean(values)
    if arr.size == 0:
        return Distribution(0, None, None, None, None, None)
    p50, p90, p95, p99 = (float(v) for v in np.percentile(arr, SUMMARY_PERCENTILES))
    return Distribution(int(arr.size), float(arr.mean()), p50, p90, p95, p99)


def interactivity_tok_s(tpot_ms: float | None) -> float | None:
    """Tokens per second one user sees while a response streams: 1000 / TPOT."""
    if tpot_ms is None or tpot_ms <= 0 or math.isnan(tpot_ms):
        return None
    return 1000.0 / tpot_ms


@dataclass(frozen=True)
class RunSummary:
    """The headline figures of one run (DESIGN §5). Rates are per second of run duration."""

    requests: int
    ok: int
    errors: int  # every request whose status is not ok (error, timeout, cancelled)
    error_rate: float | None
    duration_s: float | None
    input_tokens: int  # of successful requests
    output_tokens: int  # of successful requests
    request_throughput: float | None  # successful requests / s
    output_throughput: float | None  # output tokens / s
    total_token_throughput: float | None  # (input + output) tokens / s
    output_throughput_per_gpu: float | None
    ttft_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    interactivity_tok_s: float | None  # 1000 / median TPOT


def run_duration_s(requests: pd.DataFrame) -> float | None:
    """Fallback run duration from request instants: first send → last completion."""
    if requests.empty or "sent_at" not in requests or "done_at" not in requests:
        return None
    start = pd.to_numeric(requests["sent_at"]).min()
    end = pd.to_numeric(requests["done_at"]).max()
    if pd.isna(start) or pd.isna(end) or end <= start:
        return None
    return float(end - start)


def _positive(value: float | None) -> float | None:
    return float(value) if value is not None and not pd.isna(value) and value > 0 else None


def run_duration(
    requests: pd.DataFrame,
    *,
    duration_s: float | None = None,
    started_at: float | None = None,
    ended_at: float | None = None,
) -> float | None:
    """A run's duration (DESIGN §5): its own ``duration_s``, else ``ended_at −
    started_at``, else first send → last completion; only a positive span counts. The same
    rule as the store's SQL (``store.run_figures.DURATION_SQL``), for where no store is."""
    span = None if started_at is None or ended_at is None else ended_at - started_at
    return _positive(duration_s) or _positive(span) or run_duration_s(requests)


def error_rate(requests: float, ok: float) -> float | None:
    """The share of requests that did not succeed (errors, timeouts, cancelled); None without
    requests. (``store.run_figures.FIGURES_SQL`` says the same in SQL.)"""
    return (requests - ok) / requests if requests else None


def per_gpu(throughput: float | None, gpu_count: float | None) -> float | None:
    """``throughput`` per GPU; None when either is unknown (a GPU count of 0 is unknown)."""
    return throughput / gpu_count if throughput is not None and gpu_count else None


def _rate(amount: float, duration_s: float | None) -> float | None:
    if duration_s is None or duration_s <= 0:
        return None
    return amount / duration_s


def run_summary(
    requests: pd.DataFrame,
    *,
    duration_s: float | None = None,
    started_at: float | None = None,
    ended_at: float | None = None,
    gpu_count: int | None = None,
) -> RunSummary:
    """Summarise a run from its request rows (columns as in ``store.schema.requests``) and its
    own ``duration_s`` / ``started_at`` / ``ended_at`` — the pure twin of the store's figures
    (``store.run_figures``), for where no store is involved; a test holds the two equal.

    Throughput counts successful requests only, over :func:`run_duration`. Latency
    distributions are over successful requests. Per-GPU throughput divides by ``gpu_count``
    when it is known.
    """
    total = len(requests)
    status = requests["status"] if "status" in requests else pd.Series([], dtype="object")
    ok_rows = requests[status == "ok"]
    ok = len(ok_rows)
    duration_s = run_duration(
        requests, duration_s=duration_s, started_at=started_at, ended_at=ended_at
    )

    def tokens(column: str) -> int:
        if column not in ok_rows:
            return 0
        return int(pd.to_numeric(ok_rows[column]).fillna(0).sum())

    def dist(column: str) -> Distribution:
        if column not in ok_rows:
            return distribution([])
        return distribution(ok_rows[column])

    input_tokens, output_tokens = tokens("input_tokens"), tokens("output_tokens")
    output_tps = _rate(output_tokens, duration_s)
    tpot = dist("tpot_ms")
    return RunSummary(
        requests=total,
        ok=ok,
        errors=total - ok,
        error_rate=error_rate(total, ok),
        duration_s=duration_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        request_throughput=_rate(ok, duration_s),
        output_throughput=output_tps,
        total_token_throughput=_rate(input_tokens + output_tokens, duration_s),
        output_throughput_per_gpu=per_gpu(output_tps, gpu_count),
        ttft_ms=dist("ttft_ms"),
        tpot_ms=tpot,
        e2e_ms=dist("e2e_ms"),
        interactivity_tok_s=interactivity_tok_s(tpot.p50),
    )


def finite_number(value: Any) -> float | None:
    """A finite float, or None: missing (None, NA, NaN), infinite, a bool or not a number."""
    if value is None or value is pd.NA or isinstance(value, bool):
        return None
    try:
        num = float(value)
    except (TypeError, ValueError):
        return None
    return num if math.isfinite(num) else None
