"""The Compare page's tables as displayed: pure formatting of its view model
(``services.views.compare.CompareView``), no Streamlit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pandas as pd

from analysis import slo
from analysis.metrics import low_confidence
from services.views.compare import CDF_METRICS, SeriesCapacity
from ui import display

STATS: Final = ("p50", "p90", "p95", "p99")
_LATENCIES: Final = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e"))


def _round(value: Any, digits: int) -> float | None:
    return None if display.is_missing(value) else round(float(value), digits)


def _percent(value: Any, digits: int) -> float | None:
    return None if display.is_missing(value) else round(100.0 * float(value), digits)


def runs_table(rows: pd.DataFrame, profile: slo.SloProfile) -> pd.DataFrame:
    """The per-run table as displayed (row i ↔ run i of ``rows``): figures, attainment,
    goodput, and each SLO target's measured value and verdict."""
    out: list[dict[str, Any]] = []
    for r in display.records(rows):
        row: dict[str, Any] = {
            "run": display.run_label(r),
            "series": r["series"],
            "load": display.load_label(
                r.get("arrival"), r.get("concurrency"), r.get("target_rate")
            ),
            "data": "tool's aggregates only" if r.get("aggregates_only") else "per request",
            "client-bound": display.client_bound_label(
                r.get("client_bound"), r.get("client_bound_reason")
            ),
            "SLO": {True: "pass", False: "FAIL", None: "no data"}[r.get("passed")],
            "requests": _round(r.get("requests"), 0),
            "req/s": _round(r.get("request_throughput"), 3),
            "output tok/s": _round(r.get("output_throughput"), 1),
            "tok/s per GPU": _round(r.get("output_throughput_per_gpu"), 1),
            "goodput req/s": _round(r.get("goodput"), 3),
            "attainment %": _percent(r.get("attainment"), 1),
            "error %": _percent(r.get("error_rate"), 2),
            "timeout %": _percent(r.get("timeout_rate"), 2),
            "lag P99 ms": _round(r.get("lag_p99_ms"), 2),
        }
        for target in r["verdicts"]:
            measured = target.measured
            digits = 4 if target.target == "error_rate" else 3 if "fraction" in target.target else 1
            row[f"{target.label}"] = None if measured is None else round(measured, digits)
            limit = (
                f"≥ {target.limit:g}%"
                if target.target == "ttft_ms" and profile.length_conditioned
                else f"≤ {target.limit:g}"
            )
            row[f"{target.label} {limit}"] = target.verdict + (
                " (low n)" if target.low_confidence else ""
            )
        out.append(row)
    return pd.DataFrame(out)


def percentile_table(rows: pd.DataFrame) -> pd.DataFrame:
    """P50/P90/P95/P99 of TTFT, TPOT, ITL, E2E per run, each with its sample count (ms)."""
    out: list[dict[str, Any]] = []
    for r in display.records(rows):
        for label, prefix in _LATENCIES:
            raw = r.get(f"{prefix}_n")
            n = 0 if raw is None or display.is_missing(raw) else int(raw)
            row: dict[str, Any] = {"run": display.run_label(r), "metric": label, "samples": n}
            for stat in STATS:
                row[stat.upper()] = _round(r.get(f"{prefix}_{stat}_ms"), 2)
            row["P99 confidence"] = (
                "—" if n == 0 else ("low (<100)" if low_confidence(99, n) else "ok")
            )
            out.append(row)
    return pd.DataFrame(out)


def capacity_table(capacities: Sequence[SeriesCapacity]) -> pd.DataFrame:
    """SLO capacity per series: measured, interpolated (marked) and the first failing load."""
    out = []
    for item in capacities:
        cap = item.capacity
        unit = {"": "", "rate": " req/s"}.get(item.load_kind, " concurrent")
        out.append(
            {
                "series": cap.series,
                "capacity (measured)": "—" if cap.measured is None else f"{cap.measured:g}{unit}",
                "capacity (interpolated)": "—"
                if cap.interpolated is None
                else f"≈ {cap.interpolated:.3g}{unit} (interpolated)",
                "first failing load": "—"
                if cap.first_failing is None
                else f"{cap.first_failing:g}{unit}",
                "note": cap.note,
            }
        )
    return pd.DataFrame(out)


def diff_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """``analysis.compare.compare_samples`` as displayed."""
    names = dict(CDF_METRICS)
    return pd.DataFrame(
        {
            "metric": [
                f"{names.get(m, m)} P{p:g}"
                for m, p in zip(diffs["metric"], diffs["percentile"], strict=True)
            ],
            "baseline ms": diffs["baseline"].round(2),
            "candidate ms": diffs["candidate"].round(2),
            "difference ms": diffs["diff"].round(2),
            "difference %": diffs["diff_pct"].round(1),
            "95% CI": [
                "—" if pd.isna(lo) else f"[{lo:+.2f}, {hi:+.2f}]"
                for lo, hi in zip(diffs["low"], diffs["high"], strict=True)
            ],
            "samples": [
                f"{b:,} / {c:,}"
                for b, c in zip(diffs["n_baseline"], diffs["n_candidate"], strict=True)
            ],
            "verdict": diffs["verdict"],
        }
    )
