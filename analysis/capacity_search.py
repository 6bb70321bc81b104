"""SLO-capacity search for one configuration: bracketing, then bisection. Pure.

The question (DESIGN §5, "SLO capacity"): the highest request rate (or concurrency) at which the
SLO's percentiles hold and errors stay under its limit. A sweep cannot measure every load level
of every configuration, so it asks :func:`next_load` which load to measure next, measures it, and
appends a :class:`Probe`; :func:`search_result` turns the probes into the estimate, through
``analysis.slo.capacity`` (the same interpolation Compare shows).

The search is stateless: everything is derived from the probes so far, so a sweep can resume
from stored probes. The rules:

* **Start** at ``plan.start`` or, by default, the **geometric mean of low and high**. With no
  prior knowledge of where the capacity lies in [low, high], the geometric midpoint minimises the
  worst-case distance (in log-load, the scale a bisection works in) to the answer; starting at
  ``low`` would spend runs walking up whenever the capacity is far above it, and its one benefit
  (proving "fails already at low" in one run) is the rare case.
* **Bracketing** (no failure yet, or no pass yet). The run's ``ratio`` (worst measured / limit,
  ≤ 1 passes) says how far the load is from the limit. Treating the ratio as proportional to the
  load (through the origin), the crossing is ``L / r``. After a pass the next load is that
  estimate × (1 + precision/2) — a little beyond it, so that the next run most likely fails close
  above the capacity and closes the bracket; after a failure it is the estimate
  × (1 − precision/2). Each step moves by a factor of at least 1 + precision and at most
  :data:`MAX_STEP` (4×): latency curves have a floor (r > 0 at zero load) and a knee, so L / r is
  only a guide, and a tiny ratio at a low load must not throw the search to ``high`` at once.
  Without a usable ratio (no verdict, a zero-tolerance target broken: r = ∞) the step is 2×.
  Loads are clamped to [low, high]: ``high`` passing ends the search (capacity ≥ high), ``low``
  failing ends it (no capacity in range).
* **Bisection** (a passing load ``lo`` below a failing one ``hi``). The crossing is estimated by
  interpolating the two ratios (as ``analysis.slo.capacity`` does), and the probe is nudged by
  0.4 × precision away from the nearer end of the bracket, so that the expected outcome closes
  the bracket against that end. When the bracket is already within (1 + precision)² any load in
  [hi / (1 + p), lo × (1 + p)] closes it whatever the outcome, and the probe is the one of those
  nearest the estimate. Safeguards: the probe stays in the middle 96 % of the bracket (in
  log-load), and after two bisection runs with the same outcome in a row (the interpolation is
  biased, e.g. a convex latency curve) the next probe is the geometric midpoint.
* **Stop** when hi / lo − 1 ≤ precision (for concurrency also when hi − lo ≤ 1: no integer lies
  between), when ``high`` passes or ``low`` fails, or when ``max_runs`` probes are used.
* **Concurrency** loads are integers: every proposal is rounded, and never repeats a measured
  load. Rate loads use the geometric midpoint; concurrency the same, rounded.
* A probe with ``passed is None`` (the run produced no verdict: the engine crashed, nothing
  completed) counts as a **failure** for bracketing and for the estimate, and the note says so.
* Loads that pass **above** the first failure (noise, or a non-monotone curve) are ignored by the
  bracket (the capacity is below the first failure, as in ``analysis.slo.capacity``) and named in
  the note.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pandas as pd

from analysis.slo import capacity
from errors import ConfigError

KINDS: Final = ("rate", "concurrency")
#: Largest factor one bracketing step may move the load by.
MAX_STEP: Final = 4.0
#: Step factor when a run gives no usable ratio.
BLIND_STEP: Final = 2.0
#: Overshoot of a bracketing jump past the estimated crossing, as a share of the precision.
OVERSHOOT: Final = 0.5
#: Nudge of a bisection probe away from the estimated crossing, as a share of the precision.
NUDGE: Final = 0.4
#: Bisection probes stay inside this central share of the bracket (in log-load).
INNER: Final = 0.96


@dataclass(frozen=True)
class SearchPlan:
    """What to search: ``kind`` (``rate`` in req/s or ``concurrency``), the range [low, high],
    the relative width of the final bracket (``precision``), a cap on runs and an optional
    first load (default: the geometric mean of low and high)."""

    kind: str
    low: float
    high: float
    precision: float = 0.1
    max_runs: int = 8
    start: float | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(
                f"capacity search kind is {self.kind!r}; accepted: " + ", ".join(KINDS)
            )
        for name in ("low", "high", "precision"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(float(value)):
                raise ConfigError(f"capacity search {name} is {value!r}; accepted: a number")
        if not self.low > 0:
            raise ConfigError(f"capacity search low is {self.low:g}; accepted: above 0")
        if not self.high > self.low:
            raise ConfigError(
                f"capacity search high is {self.high:g}; accepted: above low ({self.low:g})"
            )
        if self.kind == "concurrency" and round(self.high) <= round(self.low):
            raise ConfigError(
                f"capacity search over concurrency {self.low:g}–{self.high:g} holds one integer "
                "level; accepted: high at least low + 1"
            )
        if self.kind == "concurrency" and round(self.low) < 1:
            raise ConfigError(
                f"capacity search low is {self.low:g}; accepted: a concurrency of 1 or more"
            )
        if not 0.0 < self.precision < 1.0:
            raise ConfigError(
                f"capacity search precision is {self.precision:g}; accepted: above 0, below 1 "
                "(the relative width of the final bracket, e.g. 0.1)"
            )
        if isinstance(self.max_runs, bool) or int(self.max_runs) != self.max_runs:
            raise ConfigError(f"capacity search max_runs is {self.max_runs!r}; accepted: 2 or more")
        if self.max_runs < 2:
            raise ConfigError(f"capacity search max_runs is {self.max_runs}; accepted: 2 or more")
        if self.start is not None and not self.low <= self.start <= self.high:
            raise ConfigError(
                f"capacity search start is {self.start:g}; accepted: between low ({self.low:g}) "
                f"and high ({self.high:g}), or empty for their geometric mean"
            )

    @property
    def integer(self) -> bool:
        return self.kind == "concurrency"

    @property
    def lowest(self) -> float:
        return float(round(self.low)) if self.integer else float(self.low)

    @property
    def highest(self) -> float:
        return float(round(self.high)) if self.integer else float(self.high)

    def first_load(self) -> float:
        if self.start is not None:
            return self._snap(self.start)
        return self._snap(math.sqrt(self.low * self.high))

    def _snap(self, load: float) -> float:
        load = min(max(load, self.lowest), self.highest)
        return float(round(load)) if self.integer else float(load)


@dataclass(frozen=True)
class Probe:
    """One measured load: ``passed`` (None: the run produced no verdict) and ``ratio``, the worst
    measured / limit over the SLO's targets (≤ 1 passes; ``analysis.slo.worst_ratio``)."""

    load: float
    passed: bool | None
    ratio: float | None
    run_id: str | None = None

    @property
    def failed(self) -> bool:
        """A failure for bracketing: failed, or no verdict."""
        return self.passed is not True


@dataclass(frozen=True)
class SearchResult:
    """What a search found. ``capacity``: the interpolated crossing when there is one, else the
    highest passing load (``measured``); None when nothing passed."""

    capacity: float | None
    interpolated: bool
    measured: float | None
    first_failing: float | None
    runs_used: int
    converged: bool
    note: str


@dataclass(frozen=True)
class _State:
    lo: Probe | None  # highest pass below the first failure
    hi: Probe | None  # lowest failure
    same_side_streak: bool  # the last two bisection probes had the same outcome


def _usable(ratio: float | None) -> float | None:
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    return float(ratio)


def _state(probes: Sequence[Probe]) -> _State:
    """The bracket after all probes, and whether bisection is going one way."""
    outcomes: list[bool] = []  # outcome of each probe made while a bracket existed
    lo: Probe | None = None
    hi: Probe | None = None
    for i, p in enumerate(probes):
        seen = probes[:i]
        fails = [q.load for q in seen if q.failed]
        passes = [q.load for q in seen if not q.failed]
        if fails and passes and min(passes) < min(fails):
            outcomes.append(p.failed)
    for p in probes:
        if p.failed and (hi is None or p.load < hi.load):
            hi = p
    for p in probes:
        if not p.failed and (hi is None or p.load < hi.load) and (lo is None or p.load > lo.load):
            lo = p
    streak = len(outcomes) >= 2 and outcomes[-1] == outcomes[-2]
    return _State(lo, hi, streak)


def _closed(plan: SearchPlan, lo: float, hi: float) -> bool:
    if hi / lo - 1.0 <= plan.precision + 1e-12:
        return True
    return plan.integer and hi - lo <= 1


def _interpolate(lo: Probe, hi: Probe) -> float | None:
    r1, r2 = _usable(lo.ratio), _usable(hi.ratio)
    if r1 is None or r2 is None or r2 <= r1 or r1 > 1.0 or r2 < 1.0:
        return None
    return lo.load + (1.0 - r1) / (r2 - r1) * (hi.load - lo.load)


def _bisect_probe(plan: SearchPlan, lo: Probe, hi: Probe, streak: bool) -> float:
    """The next load inside the bracket (before rounding)."""
    a, b = lo.load, hi.load
    mid = math.sqrt(a * b)
    if streak:
        return mid
    est = _interpolate(lo, hi)
    if est is None:
        return mid
    p = plan.precision
    close_if_fails = a * (1.0 + p)  # a failure at or below this closes the bracket
    close_if_passes = b / (1.0 + p)  # a pass at or above this closes it
    if close_if_fails >= close_if_passes:
        return min(max(est, close_if_passes), close_if_fails)
    # Nudge away from the nearer end, so the expected outcome closes against it.
    if math.log(est / a) <= math.log(b / est):
        x = est * (1.0 + NUDGE * p)
    else:
        x = est * (1.0 - NUDGE * p)
    span = math.log(b / a)
    edge = (1.0 - INNER) / 2.0
    return min(max(x, a * math.exp(edge * span)), a * math.exp((1.0 - edge) * span))


def _fit_integer(x: float, lo: float, hi: float, measured: set[float]) -> float | None:
    """An unmeasured integer strictly between lo and hi, nearest x; None when there is none."""
    candidates = [c for c in range(int(lo) + 1, math.ceil(hi)) if float(c) not in measured]
    if not candidates:
        return None
    return float(min(candidates, key=lambda c: (abs(c - x), c)))


def _jump(ratio: float | None, passed: bool, precision: float) -> float:
    """The factor a bracketing step moves the load by (> 1 after a pass, < 1 after a failure)."""
    r = _usable(ratio)
    lo_step = 1.0 + precision
    if passed:
        factor = BLIND_STEP if r is None else (1.0 / r) * (1.0 + OVERSHOOT * precision)
        return min(max(factor, lo_step), MAX_STEP)
    if r is None or r <= 1.0:
        return 1.0 / BLIND_STEP
    factor = (1.0 / r) * (1.0 - OVERSHOOT * precision)
    return min(max(factor, 1.0 / MAX_STEP), 1.0 / lo_step)


def next_load(plan: SearchPlan, probes: Sequence[Probe]) -> float | None:
    """The next load to measure, or None when the search is done (see the module docstring)."""
    if len(probes) >= plan.max_runs:
        return None
    if not probes:
        return plan.first_load()
    measured = {float(p.load) for p in probes}
    st = _state(probes)
    if st.lo is not None and st.hi is not None:
        a, b = st.lo.load, st.hi.load
        if _closed(plan, a, b):
            return None
        x = _bisect_probe(plan, st.lo, st.hi, st.same_side_streak)
        if plan.integer:
            return _fit_integer(x, a, b, measured)
        return None if x in measured else x
    if st.hi is None:  # everything passed so far: go up
        assert st.lo is not None
        top = st.lo
        if top.load >= plan.highest:
            return None  # capacity ≥ high
        x = plan._snap(top.load * _jump(top.ratio, True, plan.precision))
        if plan.integer and x <= top.load:
            x = top.load + 1.0
    else:  # everything failed so far: go down
        bottom = st.hi
        if bottom.load <= plan.lowest:
            return None  # fails already at low
        x = plan._snap(bottom.load * _jump(bottom.ratio, False, plan.precision))
        if plan.integer and x >= bottom.load:
            x = bottom.load - 1.0
    return None if x in measured else x


def search_result(plan: SearchPlan, probes: Sequence[Probe]) -> SearchResult:
    """The capacity the probes show (``analysis.slo.capacity``), with how the search ended."""
    runs = len(probes)
    if not probes:
        return SearchResult(None, False, None, None, 0, False, "no load measured yet")
    frame = pd.DataFrame(
        {
            "load": [float(p.load) for p in probes],
            "passed": [not p.failed for p in probes],
            "ratio": [p.ratio if p.ratio is not None else math.nan for p in probes],
        }
    )
    cap = capacity(plan.kind, frame)
    notes: list[str] = []
    blind = [f"{p.load:g}" for p in probes if p.passed is None]
    if blind:
        notes.append(f"no verdict at {', '.join(blind)}: counted as failing")
    st = _state(probes)
    done = next_load(plan, probes) is None
    if st.lo is not None and st.hi is not None:
        converged = _closed(plan, st.lo.load, st.hi.load)
        if converged:
            notes.append(
                f"bracket {st.lo.load:g}–{st.hi.load:g} within {plan.precision:.0%} "
                f"after {runs} runs"
            )
    elif st.hi is None:
        converged = st.lo is not None and st.lo.load >= plan.highest
        if converged:
            notes.append(f"passes at high ({plan.highest:g}): capacity is at least that")
    else:
        converged = st.hi.load <= plan.lowest
        if converged:
            notes.append(f"fails already at low ({plan.lowest:g}): no capacity in range")
    if not converged:
        if runs >= plan.max_runs:
            notes.append(f"stopped at max_runs ({plan.max_runs}) before reaching the precision")
        elif done:
            notes.append("stopped: no unmeasured load left inside the bracket")
        else:
            notes.append("search not finished")
    if cap.note:
        notes.append(cap.note)
    value = cap.interpolated if cap.interpolated is not None else cap.measured
    return SearchResult(
        capacity=value,
        interpolated=cap.interpolated is not None,
        measured=cap.measured,
        first_failing=cap.first_failing,
        runs_used=runs,
        converged=converged,
        note="; ".join(dict.fromkeys(n for n in notes if n)),
    )


def sample_requests(
    kind: str, loads: Sequence[float], duration_s: float | None, need: int
) -> int | None:
    """Requests a timed rate level must run instead of ``duration_s`` so that its percentile
    can be judged: when the slowest rate of ``loads`` would send fewer than ``need`` requests
    (``analysis.metrics.min_samples_for``) in ``duration_s``, the level runs
    max(``need``, the fastest rate × ``duration_s``) requests; None when the duration is enough,
    or for concurrency levels (their request count is not known in advance)."""
    if kind != "rate" or duration_s is None or not loads or need <= 0:
        return None
    if min(loads) * duration_s >= need:
        return None
    return max(need, math.ceil(max(loads) * duration_s))
