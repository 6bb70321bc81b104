"""SLO profiles, per-request attainment, goodput, pass/fail per target and SLO capacity. Pure.

Definitions (DESIGN §5, docs/metrics.md):

- A request **meets** the profile when it succeeded (``status = 'ok'``) and its TTFT, TPOT and
  E2E are each within their targets. A target the profile leaves out always holds. TPOT is
  undefined for responses of fewer than two tokens: such a request meets the TPOT target. A
  missing TTFT or E2E on a successful request does not meet the target (it cannot be shown to).
- The TTFT target can be **length-conditioned**: ``ttft_base_ms + ttft_ms_per_1k_input ×
  input_tokens / 1000``. When ``ttft_ms_per_1k_input`` is set the fixed ``ttft_ms`` is not used.
- **Goodput** (DistServe): requests per second that meet the profile (all three targets).
- **Pass/fail per target**: the profile's percentile (e.g. P99) of TTFT, TPOT and E2E over
  successful requests must be within the target, and the error rate at most ``max_error_rate``.
  A length-conditioned TTFT target has no single limit; it passes when at least ``percentile`` %
  of the successful requests meet their own limit (the same test as "P-th percentile ≤ limit"
  for a fixed limit).
- **SLO capacity** per series: walking up the load levels, the highest load that passes before
  the first failing one; and, between that point and the first failing one, a linear
  interpolation of where the worst target's ratio (measured / limit) crosses 1, marked as
  interpolated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np
import pandas as pd

from analysis.metrics import low_confidence, min_samples_for
from errors import ConfigError

#: Percentiles a profile may target (the store reports P50/P90/P95/P99 per run).
PERCENTILES: Final = (90.0, 95.0, 99.0)
#: Latency targets in the order they are shown.
LATENCY_TARGETS: Final = ("ttft_ms", "tpot_ms", "e2e_ms")
TARGET_LABELS: Final[Mapping[str, str]] = {
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
    "e2e_ms": "E2E",
    "error_rate": "error rate",
}


def _opt_float(entry: Mapping[str, Any], field: str) -> float | None:
    value = entry.get(field)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ConfigError(f"SLO profile field {field!r} must be a number, got {value!r}")
    try:
        num = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"SLO profile field {field!r} must be a number, got {value!r}") from None
    if math.isnan(num):
        return None
    return num


@dataclass(frozen=True)
class SloProfile:
    """Percentile targets a run must meet. Times in ms, rates and fractions 0..1.

    Construct through ``SloProfile.from_entry`` (catalog entries) or directly; ``validate``
    raises a ConfigError naming the field and its accepted range.
    """

    name: str
    percentile: float = 99.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    max_error_rate: float = 0.01
    max_memory_fraction: float | None = None
    ttft_base_ms: float | None = None
    ttft_ms_per_1k_input: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not self.name or not self.name.strip():
            raise ConfigError("SLO profile field 'name' is empty", hint="give the profile a name")
        if self.percentile not in PERCENTILES:
            raise ConfigError(
                f"SLO profile field 'percentile' is {self.percentile:g}; accepted: "
                + ", ".join(f"{p:g}" for p in PERCENTILES)
            )
        for field in ("ttft_ms", "tpot_ms", "e2e_ms", "ttft_base_ms"):
            value = getattr(self, field)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ConfigError(
                    f"SLO profile field {field!r} is {value:g}; accepted: a number of "
                    "milliseconds above 0, or empty for no target"
                )
        if self.ttft_ms_per_1k_input is not None:
            if not (self.ttft_ms_per_1k_input >= 0 and math.isfinite(self.ttft_ms_per_1k_input)):
                raise ConfigError(
                    f"SLO profile field 'ttft_ms_per_1k_input' is {self.ttft_ms_per_1k_input:g};"
                    " accepted: 0 or more milliseconds per 1,000 input tokens"
                )
            if self.ttft_base_ms is None:
                raise ConfigError(
                    "SLO profile field 'ttft_base_ms' is empty; accepted: a number of "
                    "milliseconds above 0 (a length-conditioned TTFT needs a base)"
                )
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigError(
                f"SLO profile field 'max_error_rate' is {self.max_error_rate:g}; accepted: 0 to 1"
            )
        if self.max_memory_fraction is not None and not 0.0 < self.max_memory_fraction <= 1.0:
            raise ConfigError(
                f"SLO profile field 'max_memory_fraction' is {self.max_memory_fraction:g}; "
                "accepted: above 0 up to 1, or empty for no cap"
            )

    @property
    def length_conditioned(self) -> bool:
        return self.ttft_ms_per_1k_input is not None

    @property
    def quantile(self) -> float:
        return self.percentile / 100.0

    def ttft_limit_ms(self, input_tokens: float | None = None) -> float | None:
        """The TTFT target of a request with ``input_tokens`` (None: no TTFT target)."""
        if self.ttft_ms_per_1k_input is not None and self.ttft_base_ms is not None:
            tokens = 0.0 if input_tokens is None or math.isnan(input_tokens) else input_tokens
            return self.ttft_base_ms + self.ttft_ms_per_1k_input * tokens / 1000.0
        return self.ttft_ms

    def sql_thresholds(self) -> dict[str, float]:
        """The targets as bound parameters for ``store.request_stats.slo_attainment``.

        TTFT limit = ``ttft_base + ttft_per_1k × input_tokens / 1000``; a missing target is
        +inf (always met).
        """
        inf = math.inf
        if self.length_conditioned:
            base = self.ttft_base_ms if self.ttft_base_ms is not None else inf
            per_1k = self.ttft_ms_per_1k_input or 0.0
        else:
            base = self.ttft_ms if self.ttft_ms is not None else inf
            per_1k = 0.0
        return {
            "ttft_base": base,
            "ttft_per_1k": per_1k,
            "tpot": self.tpot_ms if self.tpot_ms is not None else inf,
            "e2e": self.e2e_ms if self.e2e_ms is not None else inf,
        }

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> SloProfile:
        """A profile from a catalog entry (``seeds/slo_profiles.toml`` fields, plus the optional
        ``max_memory_fraction``, ``ttft_base_ms`` and ``ttft_ms_per_1k_input``)."""
        percentile = _opt_float(entry, "percentile")
        max_error = _opt_float(entry, "max_error_rate")
        return cls(
            name=str(entry.get("name") or ""),
            percentile=99.0 if percentile is None else percentile,
            ttft_ms=_opt_float(entry, "ttft_ms"),
            tpot_ms=_opt_float(entry, "tpot_ms"),
            e2e_ms=_opt_float(entry, "e2e_ms"),
            max_error_rate=0.01 if max_error is None else max_error,
            max_memory_fraction=_opt_float(entry, "max_memory_fraction"),
            ttft_base_ms=_opt_float(entry, "ttft_base_ms"),
            ttft_ms_per_1k_input=_opt_float(entry, "ttft_ms_per_1k_input"),
            description=str(entry.get("description") or ""),
        )

    def to_entry(self) -> dict[str, Any]:
        """The catalog entry (fields left empty are omitted)."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


# --- per request -----------------------------------------------------------------------------


def _column(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name]).astype("float64").to_numpy()


def request_meets(requests: pd.DataFrame, profile: SloProfile) -> pd.DataFrame:
    """Per request: ``ok``, ``ttft_met``, ``tpot_met``, ``e2e_met`` and ``met`` (all of them).

    ``requests`` has the store's columns (status, input_tokens, ttft_ms, tpot_ms, e2e_ms).
    """
    status = requests["status"] if "status" in requests else pd.Series([], dtype="object")
    ok = (status == "ok").to_numpy(dtype=bool)
    ttft, tpot, e2e = (_column(requests, c) for c in LATENCY_TARGETS)
    tokens = np.nan_to_num(_column(requests, "input_tokens"), nan=0.0)
    th = profile.sql_thresholds()
    ttft_limit = th["ttft_base"] + th["ttft_per_1k"] * tokens / 1000.0
    with np.errstate(invalid="ignore"):
        ttft_met = ok & (~np.isnan(ttft)) & (ttft <= ttft_limit)
        tpot_met = ok & (np.isnan(tpot) | (tpot <= th["tpot"]))
        e2e_met = ok & (~np.isnan(e2e)) & (e2e <= th["e2e"])
    return pd.DataFrame(
        {
            "ok": ok,
            "ttft_met": ttft_met,
            "tpot_met": tpot_met,
            "e2e_met": e2e_met,
            "met": ttft_met & tpot_met & e2e_met,
        },
        index=requests.index,
    )


@dataclass(frozen=True)
class Attainment:
    """How many requests of a run met the profile, and the goodput that gives."""

    requests: int
    ok: int
    ttft_met: int
    tpot_met: int
    e2e_met: int
    met: int
    duration_s: float | None

    @property
    def attainment(self) -> float | None:
        """Fraction of all requests (failed ones included) that met every target."""
        return self.met / self.requests if self.requests else None

    @property
    def goodput(self) -> float | None:
        """Requests/s that met every target (DistServe)."""
        if not self.duration_s or self.duration_s <= 0:
            return None
        return self.met / self.duration_s

    def ttft_share(self) -> float | None:
        """Fraction of successful requests within their TTFT target."""
        return self.ttft_met / self.ok if self.ok else None


def attainment(requests: pd.DataFrame, profile: SloProfile, duration_s: float | None) -> Attainment:
    """Count the requests meeting ``profile`` (pure twin of the SQL in compare_queries)."""
    meets = request_meets(requests, profile)
    return Attainment(
        requests=len(meets),
        ok=int(meets["ok"].sum()),
        ttft_met=int(meets["ttft_met"].sum()),
        tpot_met=int(meets["tpot_met"].sum()),
        e2e_met=int(meets["e2e_met"].sum()),
        met=int(meets["met"].sum()),
        duration_s=duration_s,
    )


def goodput(requests: pd.DataFrame, profile: SloProfile, duration_s: float | None) -> float | None:
    """Requests/s whose TTFT, TPOT and E2E all meet ``profile`` (DistServe goodput)."""
    return attainment(requests, profile, duration_s).goodput


# --- pass/fail per target --------------------------------------------------------------------


@dataclass(frozen=True)
class TargetResult:
    """One SLO target of one run: measured against the limit."""

    target: str  # ttft_ms | tpot_ms | e2e_ms | error_rate | memory_fraction
    label: str  # "TTFT P99", "error rate"
    measured: float | None
    limit: float | None
    passed: bool | None  # None: no data to judge
    n: int  # samples behind ``measured``
    low_confidence: bool
    ratio: float | None  # measured / limit: ≤ 1 passes

    @property
    def verdict(self) -> str:
        if self.passed is None:
            return "no data"
        return "pass" if self.passed else "FAIL"


def _ratio(measured: float | None, limit: float | None) -> float | None:
    if measured is None or limit is None:
        return None
    if limit <= 0:
        return 0.0 if measured <= 0 else math.inf
    return measured / limit


def _num(value: Any) -> float | None:
    if value is None or value is pd.NA or isinstance(value, bool):
        return None
    try:
        num = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(num) else num


def _pname(percentile: float) -> str:
    return f"p{percentile:g}".replace(".", "_")


def evaluate(row: Mapping[str, Any], profile: SloProfile) -> list[TargetResult]:
    """Pass/fail of each target for one run.

    ``row`` holds the run's aggregates: ``{ttft,tpot,e2e}_n`` and ``{…}_p{percentile}_ms``
    (e.g. ``ttft_p99_ms``; percentiles the profile uses), ``requests`` and ``errors``; for a
    length-conditioned TTFT, ``ok`` and ``ttft_met`` (the SLO attainment counts); for a memory
    cap, ``mem_peak_fraction`` and ``gpu_samples`` (``store.sample_timelines.run_states``).
    """
    results: list[TargetResult] = []
    pct = profile.percentile
    pname = _pname(pct)
    for target in LATENCY_TARGETS:
        prefix = target.removesuffix("_ms")
        n = int(_num(row.get(f"{prefix}_n")) or 0)
        label = f"{TARGET_LABELS[target]} P{pct:g}"
        if target == "ttft_ms" and profile.length_conditioned:
            ok = int(_num(row.get("ok")) or 0)
            met = _num(row.get("ttft_met"))
            share = None if not ok or met is None else met / ok
            passed = None if share is None else share >= profile.quantile
            # ratio: the share missing the target over the share allowed to miss it
            allowed = 1.0 - profile.quantile
            missing = None if share is None else 1.0 - share
            ratio = None if missing is None else _ratio(missing, allowed)
            results.append(
                TargetResult(
                    target,
                    f"TTFT ≤ {profile.ttft_base_ms:g} + {profile.ttft_ms_per_1k_input:g} ms/1k in, "
                    "% of ok",
                    None if share is None else 100.0 * share,
                    pct,
                    passed,
                    ok,
                    low_confidence(pct, ok) if ok else False,
                    ratio,
                )
            )
            continue
        limit = getattr(profile, target)
        if limit is None:
            continue
        measured = _num(row.get(f"{prefix}_{pname}_ms")) if n else None
        passed = None if measured is None else measured <= limit
        results.append(
            TargetResult(
                target,
                label,
                measured,
                limit,
                passed,
                n,
                low_confidence(pct, n) if n else False,
                _ratio(measured, limit),
            )
        )
    if profile.max_memory_fraction is not None:
        results.append(_memory_result(row, profile.max_memory_fraction))
    requests = int(_num(row.get("requests")) or 0)
    errors = int(_num(row.get("errors")) or 0)
    rate = errors / requests if requests else _num(row.get("error_rate"))
    results.append(
        TargetResult(
            "error_rate",
            "error rate",
            rate,
            profile.max_error_rate,
            None if rate is None else rate <= profile.max_error_rate,
            requests,
            False,
            _ratio(rate, profile.max_error_rate),
        )
    )
    return results


def _memory_result(row: Mapping[str, Any], limit: float) -> TargetResult:
    """The memory cap: the fullest GPU's peak used / total during the run (``row``'s
    ``mem_peak_fraction`` over ``gpu_samples`` samples); no data without GPU samples."""
    n = int(_num(row.get("gpu_samples")) or 0)
    measured = _num(row.get("mem_peak_fraction")) if n else None
    return TargetResult(
        "memory_fraction",
        "GPU memory peak",
        measured,
        limit,
        None if measured is None else measured <= limit,
        n,
        False,
        _ratio(measured, limit),
    )


def judged(results: Sequence[TargetResult]) -> bool | None:
    """A load level's verdict that accounts for its sample (what a sweep decides on): False
    when a target measured on enough samples fails; None (*inconclusive*) when a percentile
    target has fewer samples than its percentile needs (``analysis.metrics.min_samples_for``:
    P90 10, P95 20, P99 100, P99.9 1,000), whether it passed or failed — the P99 of 20
    requests is their maximum, one slow request decides it; else :func:`overall`."""
    if any(r.passed is False and not r.low_confidence for r in results):
        return False
    if any(r.low_confidence and r.passed is not None for r in results):
        return None
    return overall(results)


def inconclusive_reason(results: Sequence[TargetResult], percentile: float) -> str:
    """Why :func:`judged` found no verdict: ``TTFT P99 from 20 samples (needs 100)``."""
    need = min_samples_for(percentile)
    return ", ".join(
        f"{r.label} from {r.n} samples (needs {need})"
        for r in results
        if r.low_confidence and r.passed is not None
    )


def overall(results: Sequence[TargetResult]) -> bool | None:
    """The run passes when every target it has data for passes; None when none has data."""
    judged = [r.passed for r in results if r.passed is not None]
    if not judged:
        return None
    return all(judged)


def worst_ratio(results: Sequence[TargetResult]) -> float | None:
    """The largest measured / limit over the targets (≤ 1: every target holds)."""
    ratios = [r.ratio for r in results if r.ratio is not None]
    return max(ratios) if ratios else None


# --- SLO capacity ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Capacity:
    """SLO capacity of one series across its load levels."""

    series: str
    measured: float | None  # highest measured load passing before the first failure
    interpolated: float | None  # estimate between the last passing and first failing load
    first_failing: float | None
    note: str  # why there is no estimate, or a caveat (e.g. passes again above a failure)

    @property
    def is_interpolated(self) -> bool:
        return self.interpolated is not None


def capacity(series: str, points: pd.DataFrame) -> Capacity:
    """SLO capacity from ``points`` (columns ``load``, ``passed``, ``ratio``: worst measured /
    limit, ≤ 1 passing). Loads are walked upwards; rows without a verdict are skipped.

    Interpolation: for the last passing load L₁ (ratio r₁) and the first failing one L₂ (r₂),
    L* = L₁ + (1 − r₁) / (r₂ − r₁) × (L₂ − L₁), marked interpolated. No estimate when r₂ is
    infinite (a zero-tolerance target broken) or a ratio is unknown.
    """
    pts = points.dropna(subset=["load", "passed"]).sort_values("load", kind="stable")
    if pts.empty:
        return Capacity(series, None, None, None, "no load level with a verdict")
    last: Mapping[str, Any] | None = None
    fail: Mapping[str, Any] | None = None
    rows: list[dict[str, Any]] = [{str(k): v for k, v in r.items()} for r in pts.to_dict("records")]
    for i, rec in enumerate(rows):
        if bool(rec["passed"]):
            last = rec
            continue
        fail = rec
        later = [f"{float(r['load']):g}" for r in rows[i + 1 :] if bool(r["passed"])]
        note = f"passes again at {', '.join(later)}: noisy or non-monotonic" if later else ""
        break
    else:
        note = "no failing load measured: capacity is at least the highest load"
    if fail is None:
        assert last is not None
        return Capacity(series, float(last["load"]), None, None, note)
    if last is None:
        return Capacity(series, None, None, float(fail["load"]), "fails already at the lowest load")
    l1, l2 = float(last["load"]), float(fail["load"])
    r1, r2 = _num(last.get("ratio")), _num(fail.get("ratio"))
    if r1 is None or r2 is None or not math.isfinite(r2) or r2 <= r1 or r1 > 1.0:
        extra = "no interpolation: a target with zero tolerance failed or a ratio is unknown"
        return Capacity(series, l1, None, l2, "; ".join(x for x in (note, extra) if x))
    estimate = l1 + (1.0 - r1) / (r2 - r1) * (l2 - l1)
    return Capacity(series, l1, float(min(max(estimate, l1), l2)), l2, note)
