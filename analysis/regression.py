"""The regression gate (``servescope compare``): thresholds, changes with bootstrap intervals,
verdicts. Pure.

**Thresholds** (``--fail-on "p99_ttft_ms:+10%,goodput:-5%"``, :func:`parse_fail_on`): each names
a metric of :data:`METRICS` and how far it may move in its *bad* direction before the gate
fails — up for latencies and the error rate, down for goodput and output throughput
(:data:`WORSE_WHEN_HIGHER`). The sign is required and must be the bad direction's
(``p99_ttft_ms:+10%``, ``goodput:-5%``). ``N%`` is relative to the baseline's value; a plain
number is absolute, in the metric's unit (ms, req/s, tok/s, or a 0..1 share for
``error_rate``: ``error_rate:+0.01`` is one percentage point).

**Changes** (:class:`Change`): candidate − baseline with a 95 % percentile-bootstrap interval
of that difference.

- Percentiles of TTFT, TPOT, ITL and E2E come from Compare's bootstrap
  (``analysis.compare.compare_samples``, :func:`percentile_changes` reads its rows).
- Goodput, output throughput and error rate (:func:`run_changes`) resample each run's requests
  with replacement (size kept, every request: failed ones too), seeded. Each is a sum of
  per-request values over a fixed denominator — goodput: requests meeting the SLO profile /
  the run's duration; output throughput: output tokens of successful requests / duration;
  error rate: requests not ``ok`` / requests — so the bootstrap distribution of the sum is
  drawn exactly from a multinomial over the distinct per-request values (no n × replicates
  matrix, whatever the run's size).
- **Run-to-run variation.** Resampling one run's requests holds its duration fixed, so it cannot
  show how much the duration itself varies between repeated runs of one configuration — for a
  closed loop whose requests all succeed and meet the SLO, goodput's interval collapsed to a
  point ([−7.3 %, −7.3 %] between two runs of one mock). What varies between runs is the
  whole run's pace (the host's load, the client's share of the CPU), which one run per side
  cannot measure. So each side's goodput and output throughput replicate is also multiplied by
  a run effect ``exp(σ·z − σ²/2)``, z standard normal, with ``σ`` = ``run_noise``, the
  coefficient of variation of a whole-run rate between repeated runs (:data:`RUN_NOISE`, 5 %
  by default: measured 4.8 % over ten 40-request runs of the loopback mock on the 2-core shared
  machine; ``compare --run-noise`` sets it, e.g. lower from repeated runs on a quiet host). The
  interval then covers that variation, and a regression must exceed it to be significant
  (about ±14 % for two runs at 5 %). The false-positive rate the gate documents — at most
  2.5 % of comparisons of one configuration with itself called a regression — holds when the
  runs' real run-to-run variation is at most ``run_noise``.

**Decision rule** (:func:`judge`), per threshold:

- *beyond the threshold*: the point estimate of the change moves in the bad direction by more
  than the threshold (relative: more than N % of the baseline; a relative threshold over a
  baseline of 0 is crossed by any move in the bad direction);
- *significant*: the 95 % interval of the change lies wholly on the bad side of 0 (excludes
  zero change).

Verdicts, first that applies: ``regression`` (beyond and significant — the only verdict that
fails the gate), ``not significant`` (beyond, but the interval includes 0), ``improved`` (the
interval lies wholly on the good side of 0), ``within threshold``. Same inputs, same seed, same
verdicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd

from analysis.slo import SloProfile, request_meets
from errors import InputError

#: The percentiles and latency metrics a threshold may name (``p99_ttft_ms``): Compare's.
PERCENTILES: Final = (50, 90, 95, 99)
LATENCIES: Final = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
#: ``p99_ttft_ms`` → (``ttft_ms``, 99.0): the column and percentile of Compare's bootstrap rows.
PERCENTILE_METRICS: Final[Mapping[str, tuple[str, float]]] = {
    f"p{p}_{m}": (m, float(p)) for m in LATENCIES for p in PERCENTILES
}
#: Whole-run metrics, bootstrapped over requests (:func:`run_changes`).
RUN_METRICS: Final = ("goodput", "output_throughput", "error_rate")
#: Every metric a threshold may name, in the order the gate's table lists them.
METRICS: Final = (*PERCENTILE_METRICS, *RUN_METRICS)
#: Metrics that regress upward; the others (goodput, output throughput) regress downward.
WORSE_WHEN_HIGHER: Final = frozenset((*PERCENTILE_METRICS, "error_rate"))
UNITS: Final[Mapping[str, str]] = {
    **{m: "ms" for m in PERCENTILE_METRICS},
    "goodput": "req/s",
    "output_throughput": "tok/s",
    "error_rate": "",
}
VERDICTS: Final = ("regression", "not significant", "improved", "within threshold")
#: Replicates and seed of the whole-run bootstrap (the percentiles' are Compare's).
N_BOOT: Final = 1000
SEED: Final = 0
CONFIDENCE: Final = 0.95
#: The run-to-run coefficient of variation of a whole-run rate (goodput, output throughput)
#: that one run per side cannot show, folded into their intervals (module docstring).
RUN_NOISE: Final = 0.05
#: The rates :data:`RUN_NOISE` applies to: sums over the run's duration.
RATE_METRICS: Final = frozenset(("goodput", "output_throughput"))

_FORM: Final = "metric:+N% or metric:-N% (relative to the baseline) or metric:+N (absolute)"
_ITEM: Final = re.compile(r"^\s*([A-Za-z0-9_]+)\s*:\s*([+-])?\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")


def accepted_metrics() -> str:
    """The metrics a threshold may name, compactly (for error messages and ``--help``)."""
    return "p50|p90|p95|p99 of ttft_ms, tpot_ms, itl_ms, e2e_ms (e.g. p99_ttft_ms), " + ", ".join(
        RUN_METRICS
    )


def bad_sign(metric: str) -> int:
    """+1 when ``metric`` regresses upward, −1 when downward."""
    return 1 if metric in WORSE_WHEN_HIGHER else -1


@dataclass(frozen=True)
class Threshold:
    """How far ``metric`` may move in its bad direction: ``amount`` ≥ 0, in % of the baseline
    when ``relative``, else in the metric's unit."""

    metric: str
    amount: float
    relative: bool

    @property
    def label(self) -> str:
        sign = "+" if bad_sign(self.metric) > 0 else "-"
        return f"{sign}{self.amount:g}%" if self.relative else f"{sign}{self.amount:g}"


def parse_fail_on(text: str) -> tuple[Threshold, ...]:
    """``"p99_ttft_ms:+10%,goodput:-5%"`` → thresholds, in the order given. InputError (naming
    the accepted metrics and the form) for an unknown metric, a malformed item, a missing sign,
    a sign that is not the metric's bad direction, or a metric named twice."""
    items = [t for t in (text or "").split(",") if t.strip()]
    if not items:
        raise InputError(
            "--fail-on names no threshold",
            hint=f"give {_FORM}, comma-separated; metrics: {accepted_metrics()}",
        )
    out: list[Threshold] = []
    for item in items:
        match = _ITEM.match(item)
        if match is None:
            raise InputError(
                f"--fail-on item {item.strip()!r} is not of the form {_FORM}",
                hint=f"metrics: {accepted_metrics()}; e.g. p99_ttft_ms:+10%,goodput:-5%",
            )
        metric, sign, number, pct = match.groups()
        metric = metric.lower()
        if metric not in METRICS:
            raise InputError(
                f"--fail-on names an unknown metric {metric!r}",
                hint=f"metrics: {accepted_metrics()}; form: {_FORM}",
            )
        want = "+" if bad_sign(metric) > 0 else "-"
        way = "up" if want == "+" else "down"
        example = f"{metric}:{want}{number}{pct}"
        if sign is None:
            raise InputError(
                f"--fail-on {item.strip()!r} has no sign; {metric} regresses {way}, "
                f"so its threshold is {want}N",
                hint=f"e.g. {example}",
            )
        if sign != want:
            raise InputError(
                f"--fail-on {item.strip()!r}: {metric} regresses {way}, so its threshold "
                f"takes {want!r}, not {sign!r}",
                hint=f"e.g. {example}",
            )
        if any(t.metric == metric for t in out):
            raise InputError(f"--fail-on names {metric} twice", hint="give each metric once")
        amount = float(number)
        if not math.isfinite(amount):
            raise InputError(f"--fail-on {item.strip()!r}: the threshold is not a number")
        out.append(Threshold(metric, amount, relative=pct == "%"))
    return tuple(out)


@dataclass(frozen=True)
class Change:
    """Candidate − baseline of one metric, with the bootstrap interval [low, high] of the
    difference (None when either side has too few values)."""

    metric: str
    baseline: float | None
    candidate: float | None
    low: float | None
    high: float | None
    n_baseline: int
    n_candidate: int
    #: the run-to-run variation (CV per run) folded into the interval; 0 when none
    run_noise: float = 0.0

    @property
    def diff(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate - self.baseline

    def pct(self, value: float | None) -> float | None:
        """``value`` (a difference) in % of the baseline (None over a baseline of 0)."""
        if value is None or not self.baseline:
            return None
        return 100.0 * value / abs(self.baseline)

    @property
    def diff_pct(self) -> float | None:
        return self.pct(self.diff)


@dataclass(frozen=True)
class Judgement:
    """A change against its threshold: ``beyond`` (the point estimate crossed it in the bad
    direction), ``significant`` (the interval lies wholly on the bad side of 0) and the
    verdict (:data:`VERDICTS`)."""

    change: Change
    threshold: Threshold
    beyond: bool
    significant: bool
    verdict: str

    @property
    def failed(self) -> bool:
        return self.verdict == "regression"


def judge(change: Change, threshold: Threshold) -> Judgement:
    """The verdict of ``change`` under ``threshold`` (the rule in the module's docstring).
    InputError when the change has no point estimate or no interval (too little data)."""
    diff = change.diff
    if diff is None or change.low is None or change.high is None:
        raise InputError(
            f"{change.metric}: not enough data to judge (baseline {change.n_baseline} values, "
            f"candidate {change.n_candidate}; a bootstrap needs at least 2 each)"
        )
    s = bad_sign(change.metric)
    worse = s * diff
    if threshold.relative:
        base = abs(change.baseline or 0.0)
        beyond = worse > threshold.amount / 100.0 * base if base > 0 else worse > 0
    else:
        beyond = worse > threshold.amount
    significant = s * change.low > 0 and s * change.high > 0
    better = s * change.low < 0 and s * change.high < 0
    if beyond and significant:
        verdict = "regression"
    elif beyond:
        verdict = "not significant"
    elif better:
        verdict = "improved"
    else:
        verdict = "within threshold"
    return Judgement(change, threshold, beyond, significant, verdict)


def gate(judgements: Sequence[Judgement]) -> bool:
    """True when the gate passes: no judgement is a regression."""
    return not any(j.failed for j in judgements)


# --- percentiles: Compare's bootstrap rows ----------------------------------------------------


def _num(value: Any) -> float | None:
    if value is None or value is pd.NA:
        return None
    f = float(value)
    return None if math.isnan(f) else f


def percentile_changes(diffs: pd.DataFrame, metrics: Sequence[str]) -> dict[str, Change]:
    """The changes of ``metrics`` (``p99_ttft_ms`` …) from Compare's bootstrap rows
    (``analysis.compare.compare_samples``: metric, percentile, baseline, candidate, low, high,
    n_baseline, n_candidate). A metric without a row has no values on either side."""
    out: dict[str, Change] = {}
    for name in metrics:
        column, percentile = PERCENTILE_METRICS[name]
        rows = diffs[(diffs["metric"] == column) & (diffs["percentile"] == percentile)]
        if rows.empty:
            out[name] = Change(name, None, None, None, None, 0, 0)
            continue
        r = rows.iloc[0]
        out[name] = Change(
            name,
            _num(r["baseline"]),
            _num(r["candidate"]),
            _num(r["low"]),
            _num(r["high"]),
            int(r["n_baseline"]),
            int(r["n_candidate"]),
        )
    return out


# --- whole-run metrics: a bootstrap over requests ---------------------------------------------


@dataclass(frozen=True)
class RunRequests:
    """One run's requests as the whole-run metrics need them: per request, whether it met the
    SLO profile (``met``), succeeded (``ok``) and its output tokens when it succeeded (0
    otherwise); and the run's duration (s)."""

    label: str
    met: np.ndarray
    ok: np.ndarray
    output_tokens: np.ndarray
    duration_s: float | None

    @classmethod
    def from_requests(
        cls,
        label: str,
        requests: pd.DataFrame,
        profile: SloProfile | None,
        duration_s: float | None,
    ) -> RunRequests:
        """From the store's request rows (status, input_tokens, output_tokens, ttft_ms, tpot_ms,
        e2e_ms), judged against ``profile`` as Compare's goodput is (``analysis.slo``); without
        a profile no request counts as meeting it (no goodput asked)."""
        ok = (requests["status"] == "ok").to_numpy(dtype=bool)
        if profile is None:
            met = np.zeros(ok.size, dtype=bool)
        else:
            met = request_meets(requests, profile)["met"].to_numpy(dtype=bool)
        tokens = pd.to_numeric(requests["output_tokens"], errors="coerce").to_numpy(
            dtype="float64", na_value=np.nan
        )
        tokens = np.where(ok & np.isfinite(tokens), tokens, 0.0)
        duration = duration_s if duration_s is not None and duration_s > 0 else None
        return cls(label, met, ok, tokens, duration)

    @property
    def n(self) -> int:
        return int(self.ok.size)

    def per_request(self, metric: str) -> tuple[np.ndarray, float | None]:
        """(per-request values, denominator) whose sum / denominator is ``metric``."""
        if metric == "goodput":
            return self.met.astype("float64"), self.duration_s
        if metric == "output_throughput":
            return self.output_tokens, self.duration_s
        if metric == "error_rate":
            return (~self.ok).astype("float64"), float(self.n) if self.n else None
        raise InputError(f"{metric!r} is not a whole-run metric; choose one of {RUN_METRICS}")


def bootstrap_sums(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Sums of ``n_boot`` resamples of ``values`` with replacement (size kept): exactly the
    bootstrap's distribution, drawn as multinomial counts of the distinct values."""
    if values.size == 0:
        return np.zeros(n_boot)
    distinct, counts = np.unique(values, return_counts=True)
    draws = rng.multinomial(values.size, counts / values.size, size=n_boot)
    return np.asarray(draws @ distinct, dtype="float64")


def run_change(
    metric: str,
    baseline: RunRequests,
    candidate: RunRequests,
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
    run_noise: float = RUN_NOISE,
) -> Change:
    """``metric`` (:data:`RUN_METRICS`) of both runs and the percentile-bootstrap interval of
    candidate − baseline; for the rates (:data:`RATE_METRICS`) each side's replicates carry a
    run effect of CV ``run_noise`` (the module's docstring). InputError when a run has no
    duration (goodput, throughput) or no requests, or ``run_noise`` is not within 0..0.5."""
    check_run_noise(run_noise)
    for run in (baseline, candidate):
        _, denominator = run.per_request(metric)
        if denominator is None:
            what = "requests" if metric == "error_rate" else "duration"
            raise InputError(f"run {run.label} has no {what}, so it has no {metric}")
    # one stream per metric, so a metric's interval does not depend on which others are asked
    rng = np.random.default_rng([seed, RUN_METRICS.index(metric)])
    vb, db = baseline.per_request(metric)
    vc, dc = candidate.per_request(metric)
    assert db is not None and dc is not None
    rep_c = bootstrap_sums(vc, n_boot, rng) / dc
    rep_b = bootstrap_sums(vb, n_boot, rng) / db
    noise = run_noise if metric in RATE_METRICS else 0.0
    if noise > 0:  # each run's pace, which resampling its requests cannot show
        rep_c = rep_c * run_effect(noise, n_boot, rng)
        rep_b = rep_b * run_effect(noise, n_boot, rng)
    reps = rep_c - rep_b
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(reps, [alpha, 1.0 - alpha])
    return Change(
        metric,
        float(vb.sum() / db),
        float(vc.sum() / dc),
        float(low),
        float(high),
        baseline.n,
        candidate.n,
        noise,
    )


def run_effect(cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of a whole run's pace factor: lognormal of mean 1 and coefficient of
    variation about ``cv`` (``exp(σ·z − σ²/2)``, σ = ``cv``)."""
    return np.exp(cv * rng.standard_normal(n) - cv * cv / 2.0)


def check_run_noise(cv: float) -> float:
    """``cv`` when it is a run-to-run coefficient of variation the gate takes (0..0.5), else
    InputError."""
    if not (math.isfinite(cv) and 0.0 <= cv <= 0.5):
        raise InputError(
            f"the run-to-run variation must be within 0..50 %, got {cv * 100:g} %",
            hint="e.g. --run-noise 5% (the default), or lower from repeated runs on a quiet host",
        )
    return cv


def run_changes(
    baseline: RunRequests,
    candidate: RunRequests,
    metrics: Sequence[str],
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    run_noise: float = RUN_NOISE,
) -> dict[str, Change]:
    """:func:`run_change` for each of ``metrics``."""
    return {
        m: run_change(m, baseline, candidate, n_boot=n_boot, seed=seed, run_noise=run_noise)
        for m in metrics
    }
