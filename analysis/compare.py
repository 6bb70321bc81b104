"""Comparing runs: series, curves across load, the Pareto frontier, baseline vs candidate. Pure.

- A **series** groups runs that differ only in load: by framework, by configuration (framework
  plus its normalised ``engine_params``), by model, by GPU or by precision (weights and KV cache).
- **Fair-comparison warnings** (:func:`comparison_warnings`): the runs compared differ in what
  is not the subject of the comparison — model, precision, output-token cap, workload or GPU.
- A run's **load** is its concurrency (closed loop) or its target rate (open loop).
- The **Pareto frontier** keeps the runs no other run beats on both throughput per GPU and
  tokens/s per user (interactivity, 1000 / median TPOT).
- **Baseline vs candidate**: for each metric and percentile, the difference candidate −
  baseline with a percentile-bootstrap confidence interval (resampling both runs' samples with a
  seeded RNG). A latency is "regressed" only when the whole interval lies above zero and
  "improved" only when it lies below.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd

from analysis.precision import precision_label
from errors import ConfigError

#: How runs are grouped into series: the choice → a description.
GROUPINGS: Final[Mapping[str, str]] = {
    "configuration": "framework and engine parameters",
    "framework": "framework",
    "model": "model",
    "gpu": "GPU",
    "precision": "precision (weights · KV cache)",
}


def _text(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "?"
    return str(value) or "?"


def params_label(engine_params: Any) -> str:
    """Normalised engine parameters as ``key=value`` pairs in key order ('' when none)."""
    params: Any = engine_params
    if isinstance(engine_params, str):
        try:
            params = json.loads(engine_params) if engine_params else {}
        except json.JSONDecodeError:
            return engine_params
    if not isinstance(params, Mapping) or not params:
        return ""
    parts = []
    for key in sorted(params):
        value = params[key]
        shown = ("on" if value else "off") if isinstance(value, bool) else value
        parts.append(f"{key}={shown}")
    return " ".join(parts)


def series_label(row: Mapping[str, Any], by: str) -> str:
    """The series a run belongs to under grouping ``by`` (see ``GROUPINGS``)."""
    if by not in GROUPINGS:
        raise ConfigError(f"unknown grouping {by!r}", hint=f"choose one of {', '.join(GROUPINGS)}")
    if by == "framework":
        return _text(row.get("framework"))
    if by == "model":
        return _text(row.get("model"))
    if by == "gpu":
        return _gpu_label(row) or "?"
    if by == "precision":
        return _precision_label(row) or "?"
    params = params_label(row.get("engine_params"))
    head = f"{_text(row.get('framework'))} · {_text(row.get('model'))}"
    return f"{head} · {params}" if params else head


def _known(value: Any) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return None if isinstance(value, str) and not value else value


def _gpu_label(row: Mapping[str, Any]) -> str | None:
    """``H100``, ``2× H100`` (``4× ?`` when only the count is known); None when neither is."""
    name, count = _known(row.get("gpu_name")), _known(row.get("gpu_count"))
    try:
        n = int(count) if count is not None else None
    except (TypeError, ValueError):
        n = None
    if name is None and n is None:
        return None
    shown = str(name) if name is not None else "?"
    return shown if n is None or n <= 1 else f"{n}× {shown}"


def _precision_label(row: Mapping[str, Any]) -> str | None:
    return precision_label(_known(row.get("precision")), _known(row.get("kv_cache_dtype")))


def load_of(row: Mapping[str, Any]) -> tuple[float | None, str]:
    """(load, kind) of a run: its concurrency (``"concurrency"``) for closed-loop runs, else its
    target rate (``"rate"``, requests/s); (None, "") when neither is known."""
    arrival = row.get("arrival")
    conc, rate = row.get("concurrency"), row.get("target_rate")

    def num(value: Any) -> float | None:
        if value is None or value is pd.NA:
            return None
        f = float(value)
        return None if math.isnan(f) else f

    c, r = num(conc), num(rate)
    if c is not None and (arrival in (None, "concurrency") or r is None):
        return c, "concurrency"
    if r is not None:
        return r, "rate"
    return None, ""


def curves(runs: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per-run rows with ``series``, ``load`` and ``load_kind`` added, sorted by series and load.

    ``runs`` holds one row per run (runs.run_aggregates columns). Runs with unknown
    load keep ``load`` NaN and sort last within their series.
    """
    out = runs.copy()
    recs = [{str(k): v for k, v in r.items()} for r in runs.to_dict("records")]
    out["series"] = [series_label(r, by) for r in recs]
    loads = [load_of(r) for r in recs]
    out["load"] = pd.Series([x[0] for x in loads], index=runs.index, dtype="float64")
    out["load_kind"] = [x[1] for x in loads]
    if "output_tokens_per_s_per_user" not in out and "tpot_p50_ms" in out:
        tpot = pd.to_numeric(out["tpot_p50_ms"]).astype("float64")
        out["output_tokens_per_s_per_user"] = (1000.0 / tpot.where(tpot > 0)).astype("float64")
    return out.sort_values(["series", "load"], kind="stable", na_position="last").reset_index(
        drop=True
    )


def load_axis_title(kinds: Sequence[str]) -> str:
    """Axis title for the load of a set of runs (concurrency, rate, or both)."""
    found = {k for k in kinds if k}
    if found == {"concurrency"}:
        return "concurrency (requests in flight)"
    if found == {"rate"}:
        return "target rate (requests/s)"
    return "load (concurrency or requests/s)"


def pareto_front(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> np.ndarray:
    """Boolean mask of the points no other point dominates, maximising both ``x`` and ``y``.

    A point is dominated when another is at least as good on both and better on one. NaN
    points are never on the front. Ties (identical points) are both kept.
    """
    xs = np.asarray(x, dtype="float64")
    ys = np.asarray(y, dtype="float64")
    valid = ~(np.isnan(xs) | np.isnan(ys))
    front = np.zeros(xs.shape, dtype=bool)
    idx = np.flatnonzero(valid)
    for i in idx:
        others = idx[idx != i]
        dominated = np.any(
            (xs[others] >= xs[i])
            & (ys[others] >= ys[i])
            & ((xs[others] > xs[i]) | (ys[others] > ys[i]))
        )
        front[i] = not dominated
    return front


# --- baseline vs candidate -------------------------------------------------------------------


@dataclass(frozen=True)
class DiffCI:
    """Candidate − baseline of one percentile of one metric, with its bootstrap interval."""

    metric: str
    percentile: float
    baseline: float | None
    candidate: float | None
    diff: float | None
    low: float | None
    high: float | None
    n_baseline: int
    n_candidate: int

    @property
    def verdict(self) -> str:
        """``regressed`` (interval above 0), ``improved`` (below 0), ``no significant change``
        or ``not enough data``. For latencies, higher is worse."""
        if self.low is None or self.high is None:
            return "not enough data"
        if self.low > 0:
            return "regressed"
        if self.high < 0:
            return "improved"
        return "no significant change"

    @property
    def diff_pct(self) -> float | None:
        if self.diff is None or not self.baseline:
            return None
        return 100.0 * self.diff / self.baseline


def _clean(values: Sequence[float] | np.ndarray | pd.Series) -> np.ndarray:
    arr = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce"), dtype="float64")
    return arr[~np.isnan(arr)]


def _boot_percentiles(
    values: np.ndarray, qs: Sequence[float], n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """(n_boot, len(qs)) percentiles of bootstrap resamples of ``values`` (one sort each)."""
    out = np.empty((n_boot, len(qs)))
    chunk = max(1, 2_000_000 // max(1, values.size))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, values.size, size=(stop - start, values.size))
        out[start:stop] = np.percentile(values[idx], list(qs), axis=1).T
    return out


def _check(percentiles: Sequence[float], confidence: float, n_boot: int) -> None:
    for percentile in percentiles:
        if not 0.0 < percentile < 100.0:
            raise ConfigError(f"percentile must be within 0..100 (exclusive), got {percentile!r}")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be within 0..1 (exclusive), got {confidence!r}")
    if n_boot < 10:
        raise ConfigError(f"n_boot must be at least 10, got {n_boot}")


def bootstrap_diffs(
    baseline: Sequence[float] | np.ndarray | pd.Series,
    candidate: Sequence[float] | np.ndarray | pd.Series,
    percentiles: Sequence[float],
    *,
    metric: str = "",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    min_samples: int = 2,
) -> list[DiffCI]:
    """Percentile-bootstrap CIs of P(candidate) − P(baseline), one per ``percentiles`` (0–100).

    Each replicate resamples both samples with replacement (sizes kept) and takes the
    difference of their percentiles (linear interpolation); the interval is the central
    ``confidence`` share of the replicates. The RNG is seeded, so results repeat.
    """
    _check(percentiles, confidence, n_boot)
    base, cand = _clean(baseline), _clean(candidate)
    qs = list(percentiles)
    pb = np.percentile(base, qs) if base.size else None
    pc = np.percentile(cand, qs) if cand.size else None
    enough = base.size >= min_samples and cand.size >= min_samples
    lows: list[float | None] = [None] * len(qs)
    highs: list[float | None] = [None] * len(qs)
    if enough:
        rng = np.random.default_rng(seed)
        reps = _boot_percentiles(cand, qs, n_boot, rng) - _boot_percentiles(base, qs, n_boot, rng)
        alpha = (1.0 - confidence) / 2.0
        bounds = np.quantile(reps, [alpha, 1.0 - alpha], axis=0)
        lows = [float(v) for v in bounds[0]]
        highs = [float(v) for v in bounds[1]]
    out = []
    for i, q in enumerate(qs):
        b = None if pb is None else float(pb[i])
        c = None if pc is None else float(pc[i])
        d = None if b is None or c is None else c - b
        out.append(DiffCI(metric, q, b, c, d, lows[i], highs[i], base.size, cand.size))
    return out


def bootstrap_diff(
    baseline: Sequence[float] | np.ndarray | pd.Series,
    candidate: Sequence[float] | np.ndarray | pd.Series,
    percentile: float,
    *,
    metric: str = "",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    min_samples: int = 2,
) -> DiffCI:
    """``bootstrap_diffs`` for one percentile."""
    return bootstrap_diffs(
        baseline,
        candidate,
        [percentile],
        metric=metric,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
        min_samples=min_samples,
    )[0]


def compare_samples(
    baseline: Mapping[str, np.ndarray | pd.Series | Sequence[float]],
    candidate: Mapping[str, np.ndarray | pd.Series | Sequence[float]],
    percentiles: Sequence[float] = (50.0, 90.0, 99.0),
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """``bootstrap_diff`` for every metric both sides have, at each of ``percentiles``.

    Columns: metric, percentile, baseline, candidate, diff, diff_pct, low, high, n_baseline,
    n_candidate, verdict.
    """
    rows = []
    for i, metric in enumerate(baseline):
        if metric not in candidate:
            continue
        cis = bootstrap_diffs(
            baseline[metric],
            candidate[metric],
            percentiles,
            metric=metric,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed + i,
        )
        for ci in cis:
            rows.append(
                {
                    "metric": metric,
                    "percentile": ci.percentile,
                    "baseline": ci.baseline,
                    "candidate": ci.candidate,
                    "diff": ci.diff,
                    "diff_pct": ci.diff_pct,
                    "low": ci.low,
                    "high": ci.high,
                    "n_baseline": ci.n_baseline,
                    "n_candidate": ci.n_candidate,
                    "verdict": ci.verdict,
                }
            )
    columns = [
        "metric",
        "percentile",
        "baseline",
        "candidate",
        "diff",
        "diff_pct",
        "low",
        "high",
        "n_baseline",
        "n_candidate",
        "verdict",
    ]
    df = pd.DataFrame(rows, columns=columns)
    for col in ("percentile", "baseline", "candidate", "diff", "diff_pct", "low", "high"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return df


# --- fair-comparison warnings ---------------------------------------------------------------


@dataclass(frozen=True)
class DimensionValue:
    """One value of a dimension among the runs compared, and the runs holding it."""

    value: str  # "unknown" for the runs that do not say
    runs: tuple[str, ...]


@dataclass(frozen=True)
class ComparisonWarning:
    """The runs compared differ in ``dimension`` (``model``, ``precision``, ``max output
    tokens``, ``workload`` or ``GPU``): ``values`` lists each distinct value with its runs."""

    dimension: str
    values: tuple[DimensionValue, ...]
    message: str


def _max_tokens_label(row: Mapping[str, Any]) -> str | None:
    value = _known(row.get("max_output_tokens"))
    if value is None:
        return None
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def _plain(column: str) -> Any:
    def label(row: Mapping[str, Any]) -> str | None:
        value = _known(row.get(column))
        return None if value is None else str(value)

    return label


#: What a fair comparison holds equal: dimension → the label of a run's value (None: unknown).
#: Framework and engine parameters are what the user compares, so they are not here.
FAIRNESS_DIMENSIONS: Final = (
    ("model", _plain("model")),
    ("precision", _precision_label),
    ("max output tokens", _max_tokens_label),
    ("workload", _plain("workload")),
    ("GPU", _gpu_label),
)


def _runs_word(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def comparison_warnings(runs: pd.DataFrame) -> list[ComparisonWarning]:
    """The ways the runs of ``runs`` (one row per run: run_id, model, precision,
    kv_cache_dtype, max_output_tokens, workload, gpu_name, gpu_count — absent columns are
    unknown) differ in what a fair comparison holds equal, in :data:`FAIRNESS_DIMENSIONS` order.

    A dimension warns when two known values differ, or when one value is known for some runs
    and the others do not say ("precision unknown for 2 of 3 runs"); runs that all do not say,
    or all agree, do not warn. Values are listed in order of first appearance.
    """
    if runs.empty:
        return []
    records = [{str(k): v for k, v in r.items()} for r in runs.to_dict("records")]
    ids = [str(r.get("run_id", i)) for i, r in enumerate(records)]
    out: list[ComparisonWarning] = []
    for dimension, label in FAIRNESS_DIMENSIONS:
        groups: dict[str, list[str]] = {}
        unknown: list[str] = []
        for rid, rec in zip(ids, records, strict=True):
            value = label(rec)
            if value is None:
                unknown.append(rid)
            else:
                groups.setdefault(value, []).append(rid)
        if not groups or (len(groups) == 1 and not unknown):
            continue
        values = [DimensionValue(v, tuple(r)) for v, r in groups.items()]
        known = ", ".join(f"{v.value} ({_runs_word(len(v.runs))})" for v in values)
        if len(groups) == 1:
            message = (
                f"{dimension} unknown for {len(unknown)} of {len(ids)} runs "
                f"(the others: {values[0].value})"
            )
        else:
            message = f"{dimension} differs: {known}"
            if unknown:
                message += f"; unknown for {_runs_word(len(unknown))}"
        if unknown:
            values.append(DimensionValue("unknown", tuple(unknown)))
        out.append(ComparisonWarning(dimension, tuple(values), message[:1].upper() + message[1:]))
    return out
