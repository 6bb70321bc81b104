"""The configuration to run, from a parameter sweep's points, explained in numbers. Pure.

Input: one row per sweep point and repeat (``store.sweeps.sweep_points`` columns: point_id,
repeat, params (dict), status, capacity, capacity_kind, peak_memory_fraction, preemptions,
error, …) plus the figures the view adds per row: ``throughput_per_gpu`` and
``tokens_per_s_per_user`` at capacity (the highest passing load), and optionally
``ttft_p99_by_bucket`` — {load: {bucket label: P99 TTFT ms}} of the point's runs.

Rules:

- A point's **capacity** is the mean over its completed repeats (each repeat's capacity already
  holds the SLO's joint percentile limits: ``analysis.slo.capacity``); its **spread** is
  (max − min) / mean over those repeats.
- A completed point is **eligible** when it has a capacity (some load met the SLO) and passes
  the **guard-rails**: its peak GPU memory fraction (the highest over repeats) is at most
  ``max_memory_fraction`` and its preemptions per 1,000 requests at most
  ``max_preemptions_per_1k`` (a limit left None is not checked; a missing figure passes). A
  point over a guard-rail is **rejected** with the reason, even when its latency passed.
- The **recommendation** is the eligible point of highest capacity (ties: the first in sweep
  order). No eligible point → no recommendation, with the reason. A capacity whose every
  repeat passed its highest load (``capacity_note`` "no failing load measured…") is a lower
  bound, written ``≥ 32``.
- The **Pareto frontier**: eligible points no other eligible point beats on both throughput per
  GPU and tokens/s per user (``analysis.compare.pareto_front``).
- **Effects** per parameter: for each of its values, the capacity of the point with the best
  point's other parameters (``at_best``) and the mean over every completed point with that value
  (``marginal``).
- **Explanation**: for each one-parameter neighbour of the best point (same other parameters),
  a sentence: the change from the neighbour's value to the best's, the input-length bucket whose
  P99 TTFT changed most (relative) at the highest load both measured, and the SLO capacities.
- **Robustness**: a warning when the runner-up's capacity is within ``noise`` (relative) of the
  best's, or their repeat ranges overlap; and when the best point's own spread exceeds ``noise``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import pandas as pd

from analysis.compare import pareto_front
from analysis.metrics import finite_number

COMPLETED: Final = "completed"
#: Statuses of points that failed (the runner's vocabulary, store/schema.py).
FAILED: Final = ("failed_to_start", "health_timeout", "crashed", "oom")
#: How a failed status reads in a sentence.
STATUS_TEXT: Final[Mapping[str, str]] = {
    "failed_to_start": "failed to start",
    "health_timeout": "never became healthy",
    "crashed": "crashed",
    "oom": "ran out of memory",
    "interrupted": "was interrupted",
    "pruned": "was pruned (could not beat the incumbent)",
    "pending": "has not run",
    "running": "is still running",
}
#: How ``analysis.slo.capacity`` notes a capacity that is only a lower bound.
LOWER_BOUND: Final = "no failing load measured"
#: Capacity units by kind.
UNITS: Final[Mapping[str, str]] = {"rate": "req/s", "concurrency": "concurrent requests"}


def fmt(value: float | None) -> str:
    """Three significant figures: ``14.2``, ``11``, ``0.905``; ``?`` when unknown."""
    return "?" if value is None else f"{value:.3g}"


def value_text(value: Any) -> str:
    """A parameter value as written in a label (booleans as on/off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def params_label(params: Mapping[str, Any]) -> str:
    """``max_batch_size=128 max_batched_tokens=2048`` (keys sorted)."""
    return " ".join(f"{k}={value_text(params[k])}" for k in sorted(params))


def fixed_params(params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The parameters every one of several points holds with the same value (a sweep's fixed
    engine settings); empty for fewer than two points."""
    if len(params) < 2:
        return {}
    first = params[0]
    return {
        k: v
        for k, v in first.items()
        if all(k in p and value_key(p[k]) == value_key(v) for p in params[1:])
    }


def value_key(value: Any) -> str:
    """A parameter value's identity: ``128`` and ``128.0`` are one value, ``"128"`` another."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True, default=str)


def _sorted_values(values: Sequence[Any]) -> list[Any]:
    unique = {value_key(v): v for v in values}
    items = list(unique.values())
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return sorted(items, key=float)
    return sorted(items, key=value_text)


@dataclass(frozen=True)
class PointSummary:
    """One sweep point over its repeats."""

    point_id: str
    params: Mapping[str, Any]
    status: str  # completed when any repeat completed, else the first repeat's status
    repeats: int  # completed repeats
    capacity: float | None  # mean over completed repeats
    capacity_min: float | None
    capacity_max: float | None
    capacity_kind: str
    throughput_per_gpu: float | None
    tokens_per_s_per_user: float | None
    peak_memory_fraction: float | None  # highest over repeats
    preemptions_per_1k: float | None  # highest over repeats
    error: str = ""
    rejected: str = ""  # the guard-rail reason, "" when none
    on_front: bool = False
    at_least: bool = False  # no failing load measured: the capacity is a lower bound

    @property
    def capacity_text(self) -> str:
        """``14.2``, or ``≥ 32`` when no load failed (the capacity is at least that)."""
        return ("≥ " if self.at_least else "") + fmt(self.capacity)

    @property
    def label(self) -> str:
        return params_label(self.params) or self.point_id

    @property
    def spread(self) -> float | None:
        """(max − min) / mean capacity over the completed repeats (0 with one repeat)."""
        if self.capacity is None or self.capacity_min is None or self.capacity_max is None:
            return None
        if self.capacity <= 0:
            return None
        return (self.capacity_max - self.capacity_min) / self.capacity

    @property
    def eligible(self) -> bool:
        return self.status == COMPLETED and self.capacity is not None and not self.rejected


@dataclass(frozen=True)
class EffectValue:
    value: Any
    at_best: float | None  # capacity with the best point's other parameters
    marginal: float | None  # mean capacity over completed points with this value
    n: int  # completed points with a capacity behind ``marginal``
    is_best: bool = False


@dataclass(frozen=True)
class ParamEffect:
    param: str
    values: tuple[EffectValue, ...]

    @property
    def range(self) -> float:
        """max − min of the capacities at the best point's other parameters (0 when < 2)."""
        known = [v.at_best for v in self.values if v.at_best is not None]
        return max(known) - min(known) if len(known) >= 2 else 0.0


@dataclass(frozen=True)
class Explanation:
    """The best point against one one-parameter neighbour."""

    param: str
    from_value: Any  # the neighbour's
    to_value: Any  # the best's
    sentence: str
    capacity_from: float | None
    capacity_to: float | None
    bucket: str | None = None
    ttft_from_ms: float | None = None
    ttft_to_ms: float | None = None
    load: float | None = None

    @property
    def ttft_change(self) -> float | None:
        """(to − from) / from of the bucket's P99 TTFT; None without one."""
        if self.ttft_from_ms is None or self.ttft_to_ms is None or self.ttft_from_ms <= 0:
            return None
        return (self.ttft_to_ms - self.ttft_from_ms) / self.ttft_from_ms


@dataclass(frozen=True)
class Recommendation:
    """What :func:`recommend` found."""

    best: PointSummary | None
    reason: str  # why there is no best ("" when there is one)
    points: tuple[PointSummary, ...]
    rejected: tuple[PointSummary, ...]
    front: tuple[str, ...]  # point_ids on the Pareto frontier
    effects: tuple[ParamEffect, ...]
    explanations: tuple[Explanation, ...]
    warnings: tuple[str, ...]
    slo_name: str = ""
    noise: float = 0.05
    limits: Mapping[str, float] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # params every point shares

    @property
    def unit(self) -> str:
        kind = self.best.capacity_kind if self.best is not None else ""
        return UNITS.get(kind, "")

    @property
    def failed(self) -> tuple[PointSummary, ...]:
        return tuple(p for p in self.points if p.status in FAILED)

    def counts(self) -> str:
        """``12 points, 2 rejected: memory, 1 failed``."""
        parts = [f"{len(self.points)} point{'s' if len(self.points) != 1 else ''}"]
        if self.rejected:
            kinds = []
            if any("memory" in p.rejected for p in self.rejected):
                kinds.append("memory")
            if any("preemption" in p.rejected for p in self.rejected):
                kinds.append("preemptions")
            parts.append(f"{len(self.rejected)} rejected: {', '.join(kinds)}")
        if self.failed:
            parts.append(f"{len(self.failed)} failed")
        pruned = sum(1 for p in self.points if p.status == "pruned")
        if pruned:
            parts.append(f"{pruned} pruned")
        return ", ".join(parts)

    def headline(self) -> str:
        """``Recommended: max_batch_size=128 max_batched_tokens=2048 — SLO capacity 14.2 req/s
        under interactive-chat (12 points, 2 rejected: memory)``; or why there is none."""
        if self.best is None:
            return f"No recommendation: {self.reason} ({self.counts()})"
        under = f" under {self.slo_name}" if self.slo_name else ""
        unit = f" {self.unit}" if self.unit else ""
        return (
            f"Recommended: {self.best.label} — SLO capacity {self.best.capacity_text}{unit}"
            f"{under} ({self.counts()})"
        )


# --- per point -------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _highest(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _summaries(points: pd.DataFrame) -> list[PointSummary]:
    records = [{str(k): v for k, v in r.items()} for r in points.to_dict("records")]
    order: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        order.setdefault(str(rec.get("point_id")), []).append(rec)
    out = []
    for point_id, reps in order.items():
        done = [r for r in reps if r.get("status") == COMPLETED]
        caps = [c for c in (finite_number(r.get("capacity")) for r in done) if c is not None]
        kinds = [str(r.get("capacity_kind") or "") for r in done if r.get("capacity_kind")]
        params = reps[0].get("params")
        failed = next((r for r in reps if r.get("status") in FAILED), None)
        out.append(
            PointSummary(
                point_id=point_id,
                params=dict(params) if isinstance(params, Mapping) else {},
                status=COMPLETED if done else str(reps[0].get("status") or ""),
                repeats=len(done),
                capacity=_mean(caps),
                capacity_min=min(caps) if caps else None,
                capacity_max=max(caps) if caps else None,
                capacity_kind=kinds[0] if kinds else "",
                throughput_per_gpu=_mean(
                    [
                        x
                        for x in (finite_number(r.get("throughput_per_gpu")) for r in done)
                        if x is not None
                    ]
                ),
                tokens_per_s_per_user=_mean(
                    [
                        x
                        for x in (finite_number(r.get("tokens_per_s_per_user")) for r in done)
                        if x is not None
                    ]
                ),
                peak_memory_fraction=_highest(
                    [finite_number(r.get("peak_memory_fraction")) for r in done or reps]
                ),
                preemptions_per_1k=_highest(
                    [finite_number(r.get("preemptions")) for r in done or reps]
                ),
                error=str((failed or {}).get("error") or "") if not done else "",
                at_least=bool(caps)
                and all(str(r.get("capacity_note") or "").startswith(LOWER_BOUND) for r in done),
            )
        )
    return out


def _guard(
    point: PointSummary, max_memory: float | None, max_preemptions: float | None
) -> PointSummary:
    if point.status != COMPLETED or point.capacity is None:
        return point
    reasons = []
    mem = point.peak_memory_fraction
    if max_memory is not None and mem is not None and mem > max_memory:
        reasons.append(
            f"peak memory {mem:.0%} of the GPU over the limit {max_memory:.0%}".replace("%", " %")
        )
    pre = point.preemptions_per_1k
    if max_preemptions is not None and pre is not None and pre > max_preemptions:
        reasons.append(
            f"{fmt(pre)} preemptions per 1,000 requests over the limit {fmt(max_preemptions)}"
        )
    if not reasons:
        return point
    return _replace(point, rejected="; ".join(reasons))


def _replace(point: PointSummary, **changes: Any) -> PointSummary:
    return replace(point, **changes)


# --- effects and explanations ----------------------------------------------------------------


def _param_names(points: Sequence[PointSummary]) -> list[str]:
    names: dict[str, None] = {}
    for p in points:
        for k in p.params:
            names.setdefault(str(k), None)
    return sorted(names)


def _others_equal(a: Mapping[str, Any], b: Mapping[str, Any], param: str) -> bool:
    keys = (set(a) | set(b)) - {param}
    return all(k in a and k in b and value_key(a[k]) == value_key(b[k]) for k in keys)


def _effects(points: Sequence[PointSummary], best: PointSummary | None) -> list[ParamEffect]:
    out = []
    for param in _param_names(points):
        values = _sorted_values([p.params[param] for p in points if param in p.params])
        if len(values) < 2:
            continue
        rows = []
        for value in values:
            same = [
                p
                for p in points
                if param in p.params and value_key(p.params[param]) == value_key(value)
            ]
            caps = [p.capacity for p in same if p.status == COMPLETED and p.capacity is not None]
            at_best = None
            is_best = False
            if best is not None:
                is_best = param in best.params and value_key(best.params[param]) == value_key(value)
                match = next((p for p in same if _others_equal(p.params, best.params, param)), None)
                at_best = match.capacity if match is not None else None
            rows.append(EffectValue(value, at_best, _mean(caps), len(caps), is_best))
        out.append(ParamEffect(param, tuple(rows)))
    return out


def _bucket_dicts(points: pd.DataFrame) -> dict[str, dict[float, dict[str, float]]]:
    """point_id → {load: {bucket: P99 TTFT}} averaged over the point's completed repeats."""
    if "ttft_p99_by_bucket" not in points:
        return {}
    sums: dict[str, dict[float, dict[str, list[float]]]] = {}
    for rec in points.to_dict("records"):
        value = rec.get("ttft_p99_by_bucket")
        if rec.get("status") != COMPLETED or not isinstance(value, Mapping):
            continue
        per_load = sums.setdefault(str(rec.get("point_id")), {})
        for load, buckets in value.items():
            lv = finite_number(load)
            if lv is None or not isinstance(buckets, Mapping):
                continue
            slot = per_load.setdefault(round(lv, 6), {})
            for bucket, ms in buckets.items():
                v = finite_number(ms)
                if v is not None:
                    slot.setdefault(str(bucket), []).append(v)
    return {
        pid: {load: {b: float(np.mean(v)) for b, v in bs.items()} for load, bs in loads.items()}
        for pid, loads in sums.items()
    }


def _capacity_clause(before: float | None, after: float | None, unit: str) -> str:
    u = f" {unit}" if unit else ""
    if before is None and after is None:
        return "neither met the SLO at any load"
    if before is None:
        return f"SLO capacity went from none (no load met the SLO) to {fmt(after)}{u}"
    if after is None:
        return f"SLO capacity fell from {fmt(before)}{u} to none"
    if fmt(before) == fmt(after):
        return f"SLO capacity stayed at {fmt(after)}{u}"
    verb = "rose" if after > before else "fell"
    return f"SLO capacity {verb} from {fmt(before)} to {fmt(after)}{u}"


def _explain(
    best: PointSummary,
    neighbour: PointSummary,
    param: str,
    buckets: Mapping[str, Mapping[float, Mapping[str, float]]],
    unit: str,
) -> Explanation:
    old, new = neighbour.params.get(param), best.params.get(param)
    change = f"{param} {value_text(old)} → {value_text(new)}"
    if neighbour.status != COMPLETED:
        what = STATUS_TEXT.get(neighbour.status, neighbour.status or "did not complete")
        why = f" ({neighbour.error})" if neighbour.error else ""
        sentence = (
            f"{change}: at {param}={value_text(old)} the engine {what}{why}; "
            f"at {value_text(new)} SLO capacity is {fmt(best.capacity)}{' ' + unit if unit else ''}"
        )
        return Explanation(param, old, new, sentence, None, best.capacity)
    caps = _capacity_clause(neighbour.capacity, best.capacity, unit)
    if neighbour.rejected:
        caps += f", but {param}={value_text(old)} was rejected: {neighbour.rejected}"
    b_loads = buckets.get(best.point_id, {})
    n_loads = buckets.get(neighbour.point_id, {})
    common = sorted(set(b_loads) & set(n_loads))
    for load in reversed(common):
        before, after = n_loads[load], b_loads[load]
        shared = [b for b in after if b in before and before[b] > 0]
        if not shared:
            continue
        bucket = max(shared, key=lambda b: (abs(after[b] - before[b]) / before[b], b))
        rel = (after[bucket] - before[bucket]) / before[bucket]
        if round(abs(rel) * 100) == 0:
            ttft = f"left P99 TTFT in the {bucket} bucket unchanged"
        else:
            verb = "cut" if rel < 0 else "raised"
            ttft = f"{verb} P99 TTFT in the {bucket} bucket by {abs(rel):.0%}".replace("%", " %")
        at = f" (at {fmt(load)}{' ' + unit if unit else ''})"
        sentence = f"{change} {ttft}{at} and {caps}"
        return Explanation(
            param,
            old,
            new,
            sentence,
            neighbour.capacity,
            best.capacity,
            bucket,
            before[bucket],
            after[bucket],
            load,
        )
    return Explanation(param, old, new, f"{change}: {caps}", neighbour.capacity, best.capacity)


def _explanations(
    points: Sequence[PointSummary],
    best: PointSummary,
    buckets: Mapping[str, Mapping[float, Mapping[str, float]]],
    unit: str,
) -> list[Explanation]:
    out = []
    for param in sorted(best.params):
        for p in points:
            if p.point_id == best.point_id or param not in p.params:
                continue
            if value_key(p.params[param]) == value_key(best.params[param]):
                continue
            if _others_equal(p.params, best.params, param):
                out.append(_explain(best, p, param, buckets, unit))
    order = {value_key(v): i for i, v in enumerate(_sorted_values([e.from_value for e in out]))}
    return sorted(out, key=lambda e: (e.param, order.get(value_key(e.from_value), 0)))


# --- robustness --------------------------------------------------------------------------------


def _warnings(ranked: Sequence[PointSummary], noise: float, unit: str) -> list[str]:
    out: list[str] = []
    if not ranked:
        return out
    best = ranked[0]
    u = f" {unit}" if unit else ""
    if len(ranked) > 1:
        second = ranked[1]
        assert best.capacity is not None and second.capacity is not None
        gap = (best.capacity - second.capacity) / best.capacity if best.capacity > 0 else 0.0
        overlap = (
            best.capacity_min is not None
            and second.capacity_max is not None
            and best.repeats > 1
            and second.repeats > 1
            and second.capacity_max >= best.capacity_min
        )
        if gap <= noise or overlap:
            why = (
                f"within {noise:.0%} noise".replace("%", " %")
                if gap <= noise
                else "their repeats overlap"
            )
            out.append(
                f"The top two are not separated ({why}): {best.label} {fmt(best.capacity)}{u} "
                f"vs {second.label} {fmt(second.capacity)}{u} — treat them as equal, or "
                "rerun both with more repeats."
            )
    spread = best.spread
    if spread is not None and best.repeats > 1 and spread > noise:
        out.append(
            f"The recommended point's {best.repeats} repeats spread {spread:.0%}".replace("%", " %")
            + f" ({fmt(best.capacity_min)}–{fmt(best.capacity_max)}{u}), more than the "
            f"{noise:.0%} noise allowed".replace("%", " %")
        )
    return out


# --- the recommendation ------------------------------------------------------------------------


def _no_best_reason(points: Sequence[PointSummary]) -> str:
    if not points:
        return "the sweep has no points"
    done = [p for p in points if p.status == COMPLETED]
    if not done:
        return "no point completed"
    if all(p.capacity is None for p in done):
        return "no completed point met the SLO at any load"
    return "every point that met the SLO was rejected by the guard-rails"


def recommend(
    points: pd.DataFrame,
    *,
    max_memory_fraction: float | None = None,
    max_preemptions_per_1k: float | None = None,
    noise: float = 0.05,
    slo_name: str = "",
) -> Recommendation:
    """The best configuration of a sweep's ``points`` (see the module's rules)."""
    if points.empty or "point_id" not in points:
        summaries: list[PointSummary] = []
    else:
        summaries = [
            _guard(p, max_memory_fraction, max_preemptions_per_1k) for p in _summaries(points)
        ]
    fixed = fixed_params([p.params for p in summaries])
    # points are told apart by what the sweep varied; what every point shares is said once
    summaries = [
        _replace(p, params={k: v for k, v in p.params.items() if k not in fixed}) for p in summaries
    ]
    limits = {
        k: v
        for k, v in (
            ("max_memory_fraction", max_memory_fraction),
            ("max_preemptions_per_1k", max_preemptions_per_1k),
        )
        if v is not None
    }
    eligible = [p for p in summaries if p.eligible]
    mask = pareto_front(
        [p.throughput_per_gpu if p.throughput_per_gpu is not None else math.nan for p in eligible],
        [
            p.tokens_per_s_per_user if p.tokens_per_s_per_user is not None else math.nan
            for p in eligible
        ],
    )
    front = {p.point_id for p, on in zip(eligible, mask, strict=True) if on}
    summaries = [_replace(p, on_front=p.point_id in front) for p in summaries]
    eligible = [p for p in summaries if p.eligible]
    rejected = tuple(p for p in summaries if p.rejected)
    order = {p.point_id: i for i, p in enumerate(summaries)}
    ranked = sorted(eligible, key=lambda p: (-(p.capacity or 0.0), order[p.point_id]))
    best = ranked[0] if ranked else None
    unit = UNITS.get(best.capacity_kind, "") if best is not None else ""
    explanations = (
        _explanations(summaries, best, _bucket_dicts(points), unit) if best is not None else []
    )
    return Recommendation(
        best=best,
        reason="" if best is not None else _no_best_reason(summaries),
        points=tuple(summaries),
        rejected=rejected,
        front=tuple(p.point_id for p in summaries if p.on_front),
        effects=tuple(_effects(summaries, best)),
        explanations=tuple(explanations),
        warnings=tuple(_warnings(ranked, noise, unit)),
        slo_name=slo_name,
        noise=noise,
        limits=limits,
        fixed=fixed,
    )
