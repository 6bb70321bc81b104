"""The Tune page's view model: one parameter sweep, its points and the configuration to run.

:class:`TuneSelection` is what the page asks for (the URL's ``sweep`` and ``x``, the parameter
whose effect chart is shown); :func:`tune_view` resolves it (no sweep, or an unknown one → the
newest) and returns a :class:`TuneView`: the sweeps to pick from, the sweep's record, one row per
point and repeat (``store.sweeps.sweep_points`` plus the figures the recommendation needs), the
capacity-search curves and ``analysis.recommend``'s :class:`~analysis.recommend.Recommendation`.

Figures per point and repeat, from its runs (those named in its ``search`` JSON; else the runs
with ``runs.sweep_id`` whose ``client_params.sweep_point`` is the point): at the highest passing
load, ``throughput_per_gpu`` (output tokens/s per GPU; the endpoint's when the GPU count is
unknown, flagged in ``per_gpu_known``) and ``tokens_per_s_per_user`` (1000 / P50 TPOT). For the
explanation, the best point and its one-parameter neighbours also get ``ttft_p99_by_bucket`` at
the highest load each pair both measured (``store.request_stats.bucket_latency``, buckets with at
least :data:`MIN_BUCKET_SAMPLES` successful requests).

Guard-rails: the memory cap is the SLO profile's ``max_memory_fraction``, unless the sweep's
spec sets its own (``max_memory_fraction`` at its top level or under ``guard_rails``); the
preemption cap (per 1,000 requests) is the spec's ``max_preemptions_per_1k`` (same places).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pandas as pd

from analysis import buckets, recommend, slo
from analysis.metrics import finite_number
from errors import ConfigError, InputError
from services.commands import slo_profiles
from store import request_stats, runs_table
from store import sweeps as sweeps_store
from store.db import Store
from store.sql import MAX_RUNS

SWEEP_PARAM: Final = "sweep"
X_PARAM: Final = "x"
#: Relative capacity difference under which two points are not told apart.
NOISE: Final = 0.05
#: A bucket's P99 TTFT enters the explanation only from this many successful requests.
MIN_BUCKET_SAMPLES: Final = 10
EDGES: Final = buckets.DEFAULT_EDGES


@dataclass(frozen=True)
class TuneSelection:
    """What the Tune page is asked to show: ``sweep`` (None → the newest), ``x`` (the parameter
    of the effect chart; None or unknown → the one whose values move capacity most)."""

    sweep: str | None = None
    x: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> TuneSelection:
        """The selection a URL's ``?sweep=`` and ``?x=`` ask for."""
        return cls(sweep=params.get(SWEEP_PARAM) or None, x=params.get(X_PARAM) or None)

    @classmethod
    def default(cls, sweep_id: str | None = None) -> TuneSelection:
        """The page's first view of ``sweep_id`` (None: the newest sweep)."""
        return cls(sweep=sweep_id)


@dataclass(frozen=True)
class TuneView:
    """Everything the Tune page shows for a (resolved) :class:`TuneSelection`.

    ``sweeps``: ``store.sweeps.sweep_list`` (empty: the store holds none — then nothing else is
    set). ``points``: one row per point and repeat (the ``sweep_points`` columns, ``label``,
    ``at_capacity_run``, ``throughput_per_gpu``, ``tokens_per_s_per_user``, and for the
    explained points ``ttft_p99_by_bucket``). ``curves``: one row per measured load of each
    point and repeat (point_id, label, repeat, step, load, ratio, passed, run_id).
    ``notice``: why the sweep shown is not the one asked for.
    """

    selection: TuneSelection
    sweeps: pd.DataFrame
    sweep: Mapping[str, Any] | None = None
    points: pd.DataFrame = field(default_factory=pd.DataFrame)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    recommendation: recommend.Recommendation | None = None
    params: tuple[str, ...] = ()
    profile: slo.SloProfile | None = None
    profile_error: str | None = None
    per_gpu_known: bool = True
    notice: str | None = None

    @property
    def capacity_unit(self) -> str:
        kinds = [k for k in self.points.get("capacity_kind", pd.Series(dtype=object)) if k]
        return recommend.UNITS.get(str(kinds[0]), "") if kinds else ""

    @property
    def effect(self) -> recommend.ParamEffect | None:
        """The effect of the selected parameter ``selection.x``."""
        if self.recommendation is None:
            return None
        return next((e for e in self.recommendation.effects if e.param == self.selection.x), None)


# --- the builder -------------------------------------------------------------------------------


def tune_view(store: Store, selection: TuneSelection) -> TuneView:
    """The Tune page for ``selection``: the sweep listing; then the chosen sweep's points,
    their runs' figures, the SLO profile it was run under and the recommendation."""
    listing = sweeps_store.sweep_list(store)
    ids = listing["sweep_id"].astype(str).tolist()
    if not ids:
        return TuneView(selection=replace(selection, sweep=None), sweeps=listing)
    notice = None
    sweep_id = selection.sweep if selection.sweep in ids else ids[0]
    if selection.sweep and selection.sweep not in ids:
        notice = f"No sweep {selection.sweep!r} in this store: showing the newest, {sweep_id}."
    record = sweeps_store.sweep_record(store, sweep_id) or {"sweep_id": sweep_id}
    points = sweep_figures(store, sweep_id, sweeps_store.sweep_points(store, sweep_id))
    profile, profile_error = _profile(store, record.get("slo"))
    max_memory, max_preemptions = guard_rails(record.get("spec"), profile)
    slo_name = str(record.get("slo") or "")

    def run(rows: pd.DataFrame) -> recommend.Recommendation:
        return recommend.recommend(
            rows,
            max_memory_fraction=max_memory,
            max_preemptions_per_1k=max_preemptions,
            noise=search_noise(record.get("spec")),
            slo_name=slo_name,
        )

    rec = run(points)
    if rec.best is not None:
        points = with_bucket_ttft(store, points, rec)
        rec = run(points)
    params = tuple(sorted({str(k) for p in points.get("params", []) for k in p}))
    x = _resolve_x(selection.x, rec)
    return TuneView(
        selection=replace(selection, sweep=sweep_id, x=x),
        sweeps=listing,
        sweep=record,
        points=points,
        curves=search_curves(points),
        recommendation=rec,
        params=params,
        profile=profile,
        profile_error=profile_error,
        per_gpu_known=bool(points.attrs.get("per_gpu_known", True)),
        notice=notice,
    )


def recommendation_for(store: Store, sweep_id: str) -> recommend.Recommendation:
    """The recommendation of ``sweep_id`` (what ``servescope sweep`` prints at its end); an
    InputError when the store holds no such sweep."""
    if sweeps_store.sweep_record(store, sweep_id) is None:
        raise InputError(f"no sweep {sweep_id!r} in this store", hint="servescope sweep SPEC.toml")
    view = tune_view(store, TuneSelection(sweep=sweep_id))
    assert view.recommendation is not None
    return view.recommendation


def _profile(store: Store, name: Any) -> tuple[slo.SloProfile | None, str | None]:
    if not name:
        return None, "the sweep names no SLO profile: no memory cap from it"
    entries = slo_profiles.slo_profiles(store)
    if str(name) not in entries:
        return None, f"SLO profile {name!r} is not in this store's catalog: no memory cap from it"
    try:
        return slo.SloProfile.from_entry(entries[str(name)]), None
    except ConfigError as exc:
        return None, exc.message


def _spec_number(spec: Any, key: str) -> float | None:
    if not isinstance(spec, Mapping):
        return None
    for where in (spec, spec.get("guard_rails")):
        if isinstance(where, Mapping) and key in where:
            value = finite_number(where.get(key))
            if value is not None:
                return value
    return None


def search_noise(spec: Any) -> float:
    """How close two capacities may be and still be one: :data:`NOISE`, or the capacity
    search's precision when it is wider (a capacity found to within 20 % cannot tell two points
    5 % apart)."""
    search = (spec or {}).get("load", {}).get("search") if isinstance(spec, Mapping) else None
    precision = finite_number(search.get("precision")) if isinstance(search, Mapping) else None
    return max(NOISE, precision or 0.0)


def guard_rails(spec: Any, profile: slo.SloProfile | None) -> tuple[float | None, float | None]:
    """(memory cap, preemption cap per 1,000 requests) of a sweep: the spec's own, else the
    profile's memory cap; None when unset."""
    memory = _spec_number(spec, "max_memory_fraction")
    if memory is None and profile is not None:
        memory = profile.max_memory_fraction
    return memory, _spec_number(spec, "max_preemptions_per_1k")


def _resolve_x(wanted: str | None, rec: recommend.Recommendation) -> str | None:
    names = [e.param for e in rec.effects]
    if wanted in names:
        return wanted
    if not rec.effects:
        return None
    return max(rec.effects, key=lambda e: (e.range, -names.index(e.param))).param


# --- figures per point ---------------------------------------------------------------------------


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in df.to_dict("records")]


def _probe_runs(row: Mapping[str, Any], fallback: pd.DataFrame) -> list[dict[str, Any]]:
    """A point-repeat's measured loads: its ``search`` entries, else its runs by sweep_point."""
    search = [dict(s) for s in row.get("search") or [] if isinstance(s, Mapping)]
    if any(s.get("run_id") for s in search):
        return search
    if fallback.empty:
        return search
    out = []
    for run in _records(fallback):
        point, repeat = _sweep_point(run.get("client_params") or {})
        if point != str(row.get("point_id")) or repeat != int(row.get("repeat") or 0):
            continue
        load, _ = _load(run)
        known = {s.get("load"): s for s in search}
        entry = dict(known.get(load, {"load": load}))
        entry["run_id"] = run["run_id"]
        out.append(entry)
    return out or search


def _sweep_point(client: Mapping[str, Any]) -> tuple[str, int]:
    """(point_id, repeat) a run's client_params record: ``sweep_point`` is the runner's
    {sweep_id, point_id, repeat, params}, or a bare point id beside ``sweep_repeat``."""
    tag = client.get("sweep_point")
    if isinstance(tag, Mapping):
        return str(tag.get("point_id")), int(finite_number(tag.get("repeat")) or 0)
    return str(tag), int(finite_number(client.get("sweep_repeat")) or 0)


def _load(run: Mapping[str, Any]) -> tuple[float | None, str]:
    conc, rate = finite_number(run.get("concurrency")), finite_number(run.get("target_rate"))
    if conc is not None and (run.get("arrival") in (None, "concurrency") or rate is None):
        return conc, "concurrency"
    return rate, "rate" if rate is not None else ""


def _at_capacity(probes: Sequence[Mapping[str, Any]]) -> str | None:
    """The run at the highest passing load (None: none passed)."""
    passing = [
        p
        for p in probes
        if p.get("passed") is True and p.get("run_id") and finite_number(p.get("load")) is not None
    ]
    if not passing:
        return None
    return str(max(passing, key=lambda p: float(p["load"]))["run_id"])


def sweep_figures(store: Store, sweep_id: str, points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with ``label``, ``probes`` (the measured loads with their runs),
    ``at_capacity_run``, ``throughput_per_gpu`` and ``tokens_per_s_per_user``;
    ``attrs["per_gpu_known"]``: whether every figure is per GPU."""
    out = points.copy()
    out["label"] = (
        [
            recommend.params_label(p) or str(pid)
            for p, pid in zip(out["params"], out["point_id"], strict=True)
        ]
        if not out.empty
        else pd.Series(dtype=object)
    )
    needs_fallback = any(
        not any(isinstance(s, Mapping) and s.get("run_id") for s in (row.get("search") or []))
        for row in _records(out)
        if row.get("status") == recommend.COMPLETED
    )
    fallback = sweeps_store.sweep_runs(store, sweep_id) if needs_fallback else pd.DataFrame()
    probes = [_probe_runs(r, fallback) for r in _records(out)]
    out["probes"] = pd.Series(probes, index=out.index, dtype=object)
    at_cap = [_at_capacity(p) for p in probes]
    out["at_capacity_run"] = pd.Series(at_cap, index=out.index, dtype=object)
    ids = [r for r in dict.fromkeys(at_cap) if r]
    figures: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), MAX_RUNS):
        agg = runs_table.run_aggregates(store, ids[start : start + MAX_RUNS])
        figures.update({str(r["run_id"]): r for r in _records(agg)})
    per_gpu, per_user = [], []
    known = True
    for run_id in at_cap:
        fig = figures.get(run_id or "", {})
        value = finite_number(fig.get("output_throughput_per_gpu"))
        if value is None and fig:
            value = finite_number(fig.get("output_throughput"))
            known = known and value is None
        per_gpu.append(math.nan if value is None else value)
        tpot = finite_number(fig.get("tpot_p50_ms"))
        per_user.append(1000.0 / tpot if tpot else math.nan)
    out["throughput_per_gpu"] = pd.Series(per_gpu, index=out.index, dtype="float64")
    out["tokens_per_s_per_user"] = pd.Series(per_user, index=out.index, dtype="float64")
    out.attrs["per_gpu_known"] = known
    return out


def _bucket_p99(store: Store, run_id: str) -> dict[str, float]:
    rows = request_stats.bucket_latency(store, [run_id], EDGES, metrics=("ttft_ms",))
    labels = buckets.bucket_labels(EDGES)
    out = {}
    for r in _records(rows):
        p99 = finite_number(r.get("p99_ms"))
        if p99 is not None and int(r.get("n") or 0) >= MIN_BUCKET_SAMPLES:
            out[labels[int(r["bucket"])]] = p99
    return out


def _loads(probes: Sequence[Mapping[str, Any]]) -> dict[float, str]:
    out = {}
    for p in probes:
        load = finite_number(p.get("load"))
        if load is not None and p.get("run_id"):
            out[round(load, 6)] = str(p["run_id"])
    return out


def with_bucket_ttft(
    store: Store, points: pd.DataFrame, rec: recommend.Recommendation
) -> pd.DataFrame:
    """``points`` with ``ttft_p99_by_bucket`` ({load: {bucket: P99 TTFT ms}}) for the best point
    and each completed one-parameter neighbour, at the highest load each pair both measured
    (one ``bucket_latency`` read per run involved)."""
    assert rec.best is not None
    best_id = rec.best.point_id
    neighbours = {
        p.point_id
        for p in rec.points
        if p.point_id != best_id
        and p.status == recommend.COMPLETED
        and sum(
            1
            for k in set(p.params) | set(rec.best.params)
            if recommend.value_key(p.params.get(k)) != recommend.value_key(rec.best.params.get(k))
        )
        == 1
    }
    recs = _records(points)
    loads = [
        _loads(r.get("probes") or []) if r.get("status") == recommend.COMPLETED else {}
        for r in recs
    ]
    best_loads: set[float] = set()
    for r, ls in zip(recs, loads, strict=True):
        if r["point_id"] == best_id:
            best_loads |= set(ls)
    wanted: dict[int, set[float]] = {}
    best_wanted: set[float] = set()
    for i, (r, ls) in enumerate(zip(recs, loads, strict=True)):
        if r["point_id"] in neighbours:
            common = set(ls) & best_loads
            if common:
                wanted.setdefault(i, set()).add(max(common))
                best_wanted.add(max(common))
    for i, (r, ls) in enumerate(zip(recs, loads, strict=True)):
        if r["point_id"] == best_id:
            wanted[i] = {load for load in best_wanted if load in ls}
    cache: dict[str, dict[str, float]] = {}
    column: list[Any] = []
    for i, ls in enumerate(loads):
        per_load = {}
        for load in sorted(wanted.get(i, set())):
            run_id = ls[load]
            if run_id not in cache:
                cache[run_id] = _bucket_p99(store, run_id)
            per_load[load] = cache[run_id]
        column.append(per_load or None)
    out = points.copy()
    out["ttft_p99_by_bucket"] = pd.Series(column, index=out.index, dtype=object)
    out.attrs.update(points.attrs)
    return out


def search_curves(points: pd.DataFrame) -> pd.DataFrame:
    """One row per measured load of each point and repeat, in measured order: point_id, label,
    repeat, step, load, ratio, passed, run_id."""
    rows = []
    for r in _records(points):
        for step, probe in enumerate(r.get("probes") or []):
            rows.append(
                {
                    "point_id": r["point_id"],
                    "label": r.get("label") or r["point_id"],
                    "repeat": int(r.get("repeat") or 0),
                    "step": step,
                    "load": finite_number(probe.get("load")),
                    "ratio": finite_number(probe.get("ratio")),
                    "passed": probe.get("passed"),
                    "run_id": probe.get("run_id"),
                }
            )
    columns = ["point_id", "label", "repeat", "step", "load", "ratio", "passed", "run_id"]
    df = pd.DataFrame(rows, columns=columns)
    for col in ("load", "ratio"):
        df[col] = pd.to_numeric(df[col]).astype("float64")
    return df
