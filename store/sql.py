"""SQL building blocks shared by the store's read modules (``runs_table``, ``run_figures``,
``request_rows``, ``request_stats``, ``sample_series``, ``sample_timelines``): percentile
aggregates that mean the same on DuckDB and PostgreSQL, filtered aggregates, statements with
list parameters, and the dtype coercion that makes both dialects' results alike. Only
constants of these modules are formatted into SQL; values are bound parameters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError

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


def pcts(dialect: str, expr: str, qs: Sequence[float], cond: str | None = None) -> list[str]:
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
    agg = filtered(agg, cond)
    return [f"({agg})[{i}]" for i in range(1, len(qs) + 1)]


def filtered(agg: str, cond: str | None) -> str:
    """``agg FILTER (WHERE cond)``, or ``agg`` when there is no condition."""
    return agg + (f" FILTER (WHERE {cond})" if cond else "")


def dist_columns(
    dialect: str,
    expr: str,
    prefix: str,
    cond: str | None,
    quantiles: Sequence[float] = DETAIL_QUANTILES,
) -> list[str]:
    """``{prefix}_n, {prefix}_mean_ms, {prefix}_p50_ms …`` aggregate columns over ``expr`` (ms)."""
    cols = [
        f"{filtered(f'COUNT({expr})', cond)} AS {prefix}_n",
        f"{filtered(f'AVG({expr})', cond)} AS {prefix}_mean_ms",
    ]
    for q, pct in zip(quantiles, pcts(dialect, expr, quantiles, cond), strict=True):
        cols.append(f"{pct} AS {prefix}_{qname(q)}_ms")
    return cols


def qname(q: float) -> str:
    """0.5 → p50, 0.99 → p99, 0.999 → p99_9."""
    text = f"{q * 100:.3f}".rstrip("0").rstrip(".")
    return "p" + text.replace(".", "_")


def coerce(
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


def json_object(value: Any) -> dict[str, Any] | None:
    """A JSON object column value (text or already decoded) as a dict; None otherwise."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def with_lists(sql: str, *names: str) -> sa.TextClause:
    """``sql`` as a statement whose ``:names`` (default ``:run_ids``) take a list (``IN :name``)."""
    stmt = sa.text(sql)
    for name in names or ("run_ids",):
        stmt = stmt.bindparams(sa.bindparam(name, expanding=True))
    return stmt


#: Most runs one read compares.
#: Most runs one read compares side by side.
MAX_RUNS: Final = 200


def distinct_ids(run_ids: Sequence[str]) -> list[str]:
    """``run_ids`` without repeats, in order; an InputError past :data:`MAX_RUNS`."""
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if len(ids) > MAX_RUNS:
        raise InputError(
            f"{len(ids)} runs selected; compare at most {MAX_RUNS}",
            hint="narrow the selection (e.g. one sweep or one model)",
        )
    return ids
