"""SQL building blocks shared by the store's read modules (``queries``, ``run_stats``,
``compare_queries``, ``latency_queries`` …): percentile aggregates that mean the same on DuckDB
and PostgreSQL, filtered aggregates, and the dtype coercion that makes both dialects' results
alike. Only constants of these modules are formatted into SQL; values are bound parameters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pandas as pd

#: Percentiles (fractions) reported per run in run_detail / run_itl_summary.
DETAIL_QUANTILES: Final[tuple[float, ...]] = (0.5, 0.9, 0.95, 0.99)

#: Percentiles (fractions) reported per input-length bucket (P50 … P99.9).
BUCKET_QUANTILES: Final[tuple[float, ...]] = (0.5, 0.9, 0.95, 0.99, 0.999)

#: Per-request metrics that can be sampled for distributions, and where they live.
SAMPLE_METRICS: Final[Mapping[str, str]] = {
    "ttft_ms": "ttft_ms",
    "tpot_ms": "tpot_ms",
    "e2e_ms": "e2e_ms",
    "itl_ms": "gap_ms",  # token_gaps.gap_ms, pooled
}

OK: Final = "q.status = 'ok'"

# --- SQL building blocks ---------------------------------------------------------------------


def _pcts(dialect: str, expr: str, qs: Sequence[float], cond: str | None = None) -> list[str]:
    """Continuous (linearly interpolated) percentiles of ``expr``, one SQL expression per q.

    The expressions share one aggregate over the whole list of fractions (DuckDB
    ``quantile_cont(x, [..])``, PostgreSQL ``percentile_cont(ARRAY[..]) WITHIN GROUP``), which
    both engines compute once per group: one sort instead of one per percentile.
    """
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within 0..1, got {q!r}")
    listed = ", ".join(repr(float(q)) for q in qs)
    if dialect == "postgresql":
        agg = f"percentile_cont(ARRAY[{listed}]::double precision[]) WITHIN GROUP (ORDER BY {expr})"
    else:  # duckdb
        agg = f"quantile_cont({expr}, [{listed}])"
    agg = _filtered(agg, cond)
    return [f"({agg})[{i}]" for i in range(1, len(qs) + 1)]


def _filtered(agg: str, cond: str | None) -> str:
    return agg + (f" FILTER (WHERE {cond})" if cond else "")


def _dist_columns(
    dialect: str,
    expr: str,
    prefix: str,
    cond: str | None,
    quantiles: Sequence[float] = DETAIL_QUANTILES,
) -> list[str]:
    """``{prefix}_n, {prefix}_mean_ms, {prefix}_p50_ms …`` aggregate columns over ``expr`` (ms)."""
    cols = [
        f"{_filtered(f'COUNT({expr})', cond)} AS {prefix}_n",
        f"{_filtered(f'AVG({expr})', cond)} AS {prefix}_mean_ms",
    ]
    for q, pct in zip(quantiles, _pcts(dialect, expr, quantiles, cond), strict=True):
        cols.append(f"{pct} AS {prefix}_{_qname(q)}_ms")
    return cols


def _qname(q: float) -> str:
    """0.5 → p50, 0.99 → p99, 0.999 → p99_9."""
    text = f"{q * 100:.3f}".rstrip("0").rstrip(".")
    return "p" + text.replace(".", "_")


#: Throughput (ARCHITECTURE §5) over a relation ``j`` with ok, input_tokens, output_tokens,
#: gpu_count and run_duration_s: successful requests and their tokens per second of the run.
THROUGHPUT_COLUMNS: Final = """
    CAST(COALESCE(j.ok, 0) AS DOUBLE PRECISION) / j.run_duration_s AS request_throughput,
    CAST(COALESCE(j.output_tokens, 0) AS DOUBLE PRECISION) / j.run_duration_s
        AS output_throughput,
    CAST(COALESCE(j.input_tokens, 0) + COALESCE(j.output_tokens, 0) AS DOUBLE PRECISION)
        / j.run_duration_s AS total_token_throughput,
    CAST(COALESCE(j.output_tokens, 0) AS DOUBLE PRECISION)
        / j.run_duration_s / NULLIF(j.gpu_count, 0) AS output_throughput_per_gpu"""

_DURATION: Final = (
    "COALESCE(NULLIF(r.duration_s, 0), NULLIF(r.ended_at - r.started_at, 0), "
    "NULLIF(a.last_done - a.first_sent, 0))"
)


def _coerce(
    df: pd.DataFrame, *, ints: Sequence[str] = (), bools: Sequence[str] = ()
) -> pd.DataFrame:
    """Give both dialects' results the same dtypes: ints (NULL → 0), bools (nullable), floats."""
    for col in ints:
        if col in df:
            df[col] = pd.to_numeric(df[col]).fillna(0).astype("int64")
    for col in bools:
        if col in df:
            df[col] = df[col].astype("boolean")
    float_like = [
        c
        for c in df.columns
        if c not in ints and c.endswith(("_ms", "_s", "_throughput", "_rate", "_at", "_per_gpu"))
    ]
    for col in float_like:
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return df


def _json_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
