"""The Memory page's view models: GPU memory, KV-cache usage, queue and preemptions of one run on
one time axis, their headline figures, trends and warnings, and other runs overlaid
(:class:`MemoryView`); and memory against load across a run series (:class:`MemoryLoadView`).

URL: ``?run=<id>&window=60-300&overlay=<id>,<id>&slo=<profile>&cap=0.9`` (window: seconds from
the run's start); ``?series=<id>,<id>,…`` (runs that differ in load) or ``?sweep=<id>`` (with
``&point=<point id>``: one point's runs) asks for Memory vs load. Engine series (KV usage,
running/waiting, preemptions) come from the targets the bench recorded with the run (else every
target that reported during its span); GPU memory from ``gpu_samples`` of its hosts (NVML
``--gpu`` or DCGM ``--dcgm``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pandas as pd

import seeds
from analysis import capacity, engine_series, latency, memory_load, perf_model, precision
from analysis.memory_load import Knee
from errors import ConfigError, InputError
from services.commands import slo_profiles
from services.views.run_window import WINDOW_PARAM, parse_window, run_window
from sim.engine import EngineConfig
from store import request_rows, request_stats, run_series, runs_table, sample_timelines, sweeps
from store.db import Store
from store.sql import MAX_RUNS, json_object

#: The memory cap (fraction of GPU memory) when neither the URL nor an SLO profile sets one.
DEFAULT_CAP: Final = 0.90
#: Runs offered in the pickers (plus the one asked for).
RUNS_LIMIT: Final = 200
#: The URL parameters of the page's selections.
RUN_PARAM: Final = "run"
CAP_PARAM: Final = "cap"
SLO_PARAM: Final = "slo"
OVERLAY_PARAM: Final = "overlay"  # run ids, comma-separated
SERIES_PARAM: Final = "series"  # run ids, comma-separated: Memory vs load of these runs
SWEEP_PARAM: Final = "sweep"  # a sweep id: Memory vs load of its runs
POINT_PARAM: Final = "point"  # a sweep point id: only that point's runs

_ENGINE_COLUMNS: Final = ("target", "metric", "ts", "value", "max_value", "samples")
_MIB: Final = 2**20


@dataclass(frozen=True)
class MemorySelection:
    """What the Memory page is asked to show; the defaults are the page's first view."""

    run_id: str | None = None  # None: the newest run
    window: tuple[float, float] | None = None  # seconds from the run's start; None: all of it
    cap: float = DEFAULT_CAP  # used when the SLO profile sets no memory cap
    slo: str | None = None  # an SLO profile whose max_memory_fraction is the cap
    overlay: tuple[str, ...] = ()  # other runs overlaid at their start
    series: tuple[str, ...] = ()  # Memory vs load of these runs
    sweep: str | None = None  # Memory vs load of this sweep's runs (``series`` first)
    point: str | None = None  # the sweep point whose runs form the series (None: the largest)

    @property
    def names_series(self) -> bool:
        """True when the selection asks for Memory vs load (a series or a sweep)."""
        return bool(self.series) or self.sweep is not None

    @classmethod
    def default(cls, run_id: str | None = None) -> MemorySelection:
        """The page's first view of ``run_id`` (the newest run when None)."""
        return cls(run_id=run_id)

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> MemorySelection:
        """The selection a URL's query parameters describe (unreadable values: defaults)."""
        try:
            cap = float(params.get(CAP_PARAM) or DEFAULT_CAP)
        except ValueError:
            cap = DEFAULT_CAP
        overlay = tuple(r for r in (params.get(OVERLAY_PARAM) or "").split(",") if r)
        series = tuple(dict.fromkeys(r for r in (params.get(SERIES_PARAM) or "").split(",") if r))
        return cls(
            run_id=params.get(RUN_PARAM) or None,
            window=parse_window(params.get(WINDOW_PARAM)),
            cap=cap,
            slo=params.get(SLO_PARAM) or None,
            overlay=overlay,
            series=series[:MAX_RUNS],
            sweep=params.get(SWEEP_PARAM) or None,
            point=params.get(POINT_PARAM) or None,
        )


@dataclass(frozen=True)
class MemoryFigures:
    """The headline figures (None: no such samples): GPU memory summed over the run's GPUs."""

    gpu_peak_bytes: float | None = None
    gpu_mean_bytes: float | None = None
    gpu_total_bytes: float | None = None
    headroom_bytes: float | None = None  # cap × total − peak; negative: the cap is exceeded
    kv_peak: float | None = None  # 0..1, the fullest target
    kv_mean: float | None = None
    preemptions: float | None = None  # None: the engine reports no preemption counter


@dataclass(frozen=True)
class TrendFigure:
    """A slope to show: what it measures, its unit per hour, and the fit (None: < 3 points)."""

    label: str
    unit: str
    trend: latency.Trend | None


@dataclass(frozen=True)
class MemoryView:
    """Everything the Memory page shows. ``run_id`` None: the store holds no run; ``span``
    None: the run recorded no time at all (nothing else is read)."""

    runs: pd.DataFrame  # the run choices (runs_table.list_runs), newest first
    selection: MemorySelection = MemorySelection()  # as resolved (run, window, profile, overlay)
    run_id: str | None = None
    span: tuple[float, float] | None = None  # the run's [start, end], epoch seconds
    span_s: float = 1.0  # the window slider's range (whole seconds, ≥ 1)
    window: tuple[float, float] = (0.0, 1.0)  # the window shown, seconds from the run's start
    since: float = 0.0  # the window, epoch seconds
    until: float = 0.0
    source: str = ""  # the run's source (the tool of an import)
    aggregates_only: bool = False  # an import of the tool's aggregates, no request rows
    slo_profiles: tuple[str, ...] = ()
    slo: str | None = None  # the chosen profile (None: none)
    cap: float = DEFAULT_CAP
    cap_from_profile: bool = False  # True: ``cap`` is the profile's max_memory_fraction
    engine: pd.DataFrame = field(default_factory=pd.DataFrame)  # engine_timeline, binned
    gpu: pd.DataFrame = field(default_factory=pd.DataFrame)  # gpu_timeline, binned
    figures: MemoryFigures = MemoryFigures()
    memory_trend: TrendFigure | None = None
    latency_trend: TrendFigure | None = None
    warnings: tuple[latency.MemoryWarning, ...] = ()
    overlay: tuple[str, ...] = ()  # the other runs overlaid (known runs only)
    aligned: pd.DataFrame | None = None  # sample_timelines.aligned_runs; None: no overlay

    @property
    def has_samples(self) -> bool:
        """True when the window holds engine or GPU samples."""
        return not (self.engine.empty and self.gpu.empty)


def memory_view(store: Store, selection: MemorySelection) -> MemoryView:
    """The Memory page for ``selection``: the run asked for (else the newest), its window,
    samples, headline figures, trends, warnings and overlay."""
    listed = runs_table.list_runs(store, limit=RUNS_LIMIT, include=selection.run_id)
    run_ids = [str(r) for r in listed["run_id"]]
    if not run_ids:
        return MemoryView(runs=listed, selection=selection)
    run_id = selection.run_id if selection.run_id in run_ids else run_ids[0]
    sources = sample_timelines.run_sources(store, run_id)
    span = _span(sources)
    if span is None:
        return MemoryView(runs=listed, selection=replace(selection, run_id=run_id), run_id=run_id)
    span_s, window, since, until = _window(span, selection.window)
    source, aggregates_only = _aggregates_only(store, listed, run_id)
    profile_names, slo, cap, cap_from_profile = _cap(store, selection)
    engine, gpu = _samples(store, sources, since, until)
    overlay = tuple(r for r in selection.overlay if r in run_ids and r != run_id)
    resolved = replace(
        selection,
        run_id=run_id,
        window=None if window == (0.0, span_s) else window,
        slo=slo,
        overlay=overlay,
    )
    return MemoryView(
        runs=listed,
        selection=resolved,
        run_id=run_id,
        span=span,
        span_s=span_s,
        window=window,
        since=since,
        until=until,
        source=source,
        aggregates_only=aggregates_only,
        slo_profiles=profile_names,
        slo=slo,
        cap=cap,
        cap_from_profile=cap_from_profile,
        engine=engine,
        gpu=gpu,
        figures=memory_figures(engine, gpu, cap),
        memory_trend=memory_trend(engine, gpu),
        latency_trend=_latency_trend(store, run_id, since, until),
        warnings=tuple(latency.memory_warnings(_gpu_memory(gpu), engine)),
        overlay=overlay,
        aligned=sample_timelines.aligned_runs(store, (run_id, *overlay)) if overlay else None,
    )


def _span(sources: Mapping[str, Any]) -> tuple[float, float] | None:
    """The run's [start, end] (at least 1 s long); None when it recorded no time."""
    since, until = sources.get("since"), sources.get("until")
    if since is None or until is None:
        return None
    return float(since), max(float(until), float(since) + 1.0)


def _window(
    span: tuple[float, float], wanted: tuple[float, float] | None
) -> tuple[float, tuple[float, float], float, float]:
    """(slider range in whole seconds, the window in seconds from the start clamped to it,
    its absolute since, until); the whole range is the whole run."""
    chosen = run_window(*span, wanted)
    since, until = chosen.bounds
    return (
        chosen.span_s,
        chosen.chosen,
        span[0] if since is None else since,
        span[1] if until is None else until,
    )


def _aggregates_only(store: Store, listed: pd.DataFrame, run_id: str) -> tuple[str, bool]:
    """(the run's source, True when it is an import of the tool's aggregates only: flagged so
    in its tool summary, and no request rows)."""
    row = listed[listed["run_id"] == run_id].iloc[0]
    source = str(row["source"]) if isinstance(row["source"], str) else ""
    if not bool(row["aggregates_only"]):
        return source, False
    span = request_rows.request_span(store, (run_id,))
    return source, span.empty or int(span["requests"].iloc[0]) == 0


def _cap(
    store: Store, selection: MemorySelection
) -> tuple[tuple[str, ...], str | None, float, bool]:
    """(SLO profile names, the chosen one, the memory cap, whether the profile set it): the
    profile's ``max_memory_fraction`` when it has a valid one, else the selection's cap."""
    profiles = slo_profiles.slo_profiles(store)
    names = tuple(profiles)
    slo = selection.slo if selection.slo in names else None
    if slo is not None:
        cap = profiles[slo].get("max_memory_fraction")
        if isinstance(cap, int | float) and 0 < float(cap) <= 1:
            return names, slo, float(cap), True
    return names, slo, selection.cap, False


def _samples(
    store: Store, sources: Mapping[str, Any], since: float, until: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's engine and GPU samples in [since, until], binned."""
    targets = tuple(sources.get("targets") or ())
    hosts = tuple(sources.get("hosts") or ())
    engine = (
        sample_timelines.engine_timeline(store, targets, since=since, until=until)
        if targets
        else pd.DataFrame()
    )
    gpu = (
        sample_timelines.gpu_timeline(store, hosts, since=since, until=until)
        if hosts
        else pd.DataFrame()
    )
    if engine.empty:
        engine = pd.DataFrame(columns=list(_ENGINE_COLUMNS))
    return engine, gpu


def memory_figures(engine: pd.DataFrame, gpu: pd.DataFrame, cap: float) -> MemoryFigures:
    """GPU memory peak, mean and headroom to ``cap`` (summed over GPUs per instant), KV usage
    peak and mean, preemptions (the counters' increase, restarts counted from zero)."""
    figures: dict[str, float | None] = {}
    if not gpu.empty:
        columns = ["mem_used_bytes", "mem_used_max_bytes", "mem_total_bytes"]
        per_instant = gpu.groupby("ts")[columns].sum()
        peak = float(per_instant["mem_used_max_bytes"].max())
        total = float(per_instant["mem_total_bytes"].max())
        figures |= {
            "gpu_peak_bytes": peak,
            "gpu_mean_bytes": float(per_instant["mem_used_bytes"].mean()),
            "gpu_total_bytes": total,
            "headroom_bytes": cap * total - peak,
        }
    kv = engine[engine["metric"] == "kv_cache_usage"]
    if not kv.empty:
        figures |= {"kv_peak": float(kv["max_value"].max()), "kv_mean": float(kv["value"].mean())}
    counters = engine[engine["metric"] == "preemptions_total"]
    if not counters.empty:
        figures["preemptions"] = sum(
            engine_series.counter_increase(part.sort_values("ts")["value"].to_numpy())
            for _, part in counters.groupby("target")
        )
    return MemoryFigures(**figures)


def memory_trend(engine: pd.DataFrame, gpu: pd.DataFrame) -> TrendFigure:
    """The slope of GPU memory used (MiB, summed over GPUs) or, without GPU samples, of the
    fullest target's KV usage (percentage points)."""
    if not gpu.empty:
        per_instant = gpu.groupby("ts", as_index=False)["mem_used_bytes"].sum()
        fit = latency.trend(
            per_instant["ts"].to_numpy(), per_instant["mem_used_bytes"].to_numpy() / _MIB
        )
        return TrendFigure("GPU memory slope", "MiB/h", fit)
    kv = engine[engine["metric"] == "kv_cache_usage"]
    fullest = kv.groupby("ts")["value"].max()
    fit = latency.trend(fullest.index.to_numpy(dtype="float64"), fullest.to_numpy() * 100)
    return TrendFigure("KV usage slope", "pp/h", fit)


def _latency_trend(store: Store, run_id: str, since: float, until: float) -> TrendFigure:
    """The slope of TTFT P50 per time window (the windows of the pages' views over time)."""
    timeline = request_stats.latency_timeline(
        store,
        (run_id,),
        t0=since,
        window_s=latency.heatmap_window_s(until - since),
        since=since,
        until=until,
    )
    timeline = timeline[timeline["n"] > 0]
    fit = latency.trend(timeline["window_start"].to_numpy(), timeline["ttft_p50_ms"].to_numpy())
    return TrendFigure("TTFT P50 slope", "ms/h", fit)


def _gpu_memory(gpu: pd.DataFrame) -> pd.DataFrame:
    """GPU memory as ``analysis.latency.memory_warnings`` reads it."""
    columns = ["ts", "mem_used_bytes", "mem_total_bytes"]
    return pd.DataFrame(columns=columns) if gpu.empty else gpu[columns]


# --- Memory vs load ------------------------------------------------------------------------------

#: Why a series has no prediction when its GPU or model is not in the catalogue.
NOT_IN_CATALOGUE: Final = "no prediction: GPU/model not in the catalogue"
#: Engine parameters (normalised keys) → the sim's EngineConfig fields they set.
_ENGINE_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    "tensor_parallel": ("tp", int),
    "max_batch_size": ("max_batch_size", int),
    "kv_memory_fraction": ("kv_memory_fraction", float),
    "max_batched_tokens": ("max_batched_tokens", int),
    "block_size": ("block_size", int),
    "num_gpu_blocks": ("num_gpu_blocks", int),
}


@dataclass(frozen=True)
class SeriesGroup:
    """Runs of a sweep that form one series (same point), and how to name it."""

    label: str
    point: str  # the ``?point=`` value that picks it
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class Prediction:
    """The performance model's KV capacity for the series' deployment; ``capacity_tokens``
    None: no prediction, ``note`` says why."""

    capacity_tokens: float | None = None
    block_size: int = 16
    max_batch_size: float | None = None  # the engine's cap on running sequences, when known
    source: str = ""  # how the capacity was obtained (shown under the chart)
    note: str = ""  # why there is no prediction


@dataclass(frozen=True)
class MemoryLoadView:
    """Memory vs load: one row per run of the series (``analysis.memory_load.POINT_COLUMNS``,
    ordered by load), the predicted capacity and the knees. ``points`` with fewer than 2
    load levels: not enough for a series (``like`` says which runs could form one)."""

    selection: MemorySelection
    kind: str | None = None  # concurrency | rate (None: no run with a load level)
    run_ids: tuple[str, ...] = ()  # the series
    points: pd.DataFrame = field(default_factory=pd.DataFrame)
    excluded: tuple[tuple[str, str], ...] = ()  # (run, why it is not in the series)
    differing: tuple[str, ...] = ()  # what the series' runs do not share (should be none)
    prediction: Prediction = Prediction()
    measured_knee: Knee | None = None
    predicted_knee: float | None = None
    groups: tuple[SeriesGroup, ...] = ()  # a sweep's series (points)
    group: str | None = None  # the one shown
    like: tuple[str, ...] = ()  # without a series asked for: the runs like the current one

    @property
    def levels(self) -> int:
        """Distinct load levels measured."""
        return 0 if self.points.empty else int(self.points["load"].nunique())

    @property
    def enough(self) -> bool:
        """True with at least 2 load levels (something to plot against load)."""
        return self.levels >= 2

    @property
    def over_time_selection(self) -> MemorySelection:
        """The selection of the over-time view shown with it: the run asked for, else the
        series' highest-load run."""
        if self.selection.run_id is not None or not self.run_ids:
            return self.selection
        return replace(self.selection, run_id=self.run_ids[-1])


def memory_load_view(store: Store, selection: MemorySelection) -> MemoryLoadView:
    """Memory vs load for the series the selection names (``series``, else ``sweep``); without
    one, only ``like``: the runs sharing the current run's model, GPU, engine parameters,
    workload and kind of load (the series the page offers)."""
    if not selection.names_series:
        return MemoryLoadView(selection=selection, like=_like(store, selection.run_id))
    groups: tuple[SeriesGroup, ...] = ()
    group = None
    if selection.series:
        listed = _listed(store, selection.series)
    else:
        listed, groups = _sweep_groups(store, str(selection.sweep))
        chosen = next((g for g in groups if g.point == selection.point), None)
        chosen = chosen or max(groups, key=lambda g: len(g.run_ids), default=None)
        group = chosen.point if chosen else None
        listed = listed[listed["run_id"].isin(chosen.run_ids if chosen else ())]
    kind, members, excluded = _members(listed, selection.series)
    if kind is None or members.empty:
        return MemoryLoadView(selection=selection, excluded=excluded, groups=groups, group=group)
    records = [{str(k): v for k, v in r.items()} for r in members.to_dict("records")]
    prediction = predict(records[0])
    figures = run_series.series_figures(store, list(members["run_id"]))
    table = figures.merge(members[["run_id", "name", "load"]], on="run_id")
    points = memory_load.assemble(
        table,
        kind=kind,
        block_size=prediction.block_size,
        max_batch_size=prediction.max_batch_size,
        capacity_tokens=prediction.capacity_tokens,
    )
    return MemoryLoadView(
        selection=selection,
        kind=kind,
        run_ids=tuple(points["run_id"]),
        points=points,
        excluded=excluded,
        differing=memory_load.differing_keys(records),
        prediction=prediction,
        measured_knee=memory_load.measured_knee(points),
        predicted_knee=memory_load.predicted_knee(
            points,
            kind=kind,
            capacity_tokens=prediction.capacity_tokens,
            max_batch_size=prediction.max_batch_size,
        ),
        groups=groups,
        group=group,
    )


def _listed(store: Store, run_ids: tuple[str, ...]) -> pd.DataFrame:
    listed = runs_table.list_runs(store, limit=None, run_ids=run_ids)
    order = {r: i for i, r in enumerate(run_ids)}
    return listed.sort_values("run_id", key=lambda s: s.map(order)).reset_index(drop=True)


def _members(
    listed: pd.DataFrame, asked: tuple[str, ...]
) -> tuple[str | None, pd.DataFrame, tuple[tuple[str, str], ...]]:
    """(the series' kind of load, its runs with a ``load`` column, the runs left out and why):
    runs without a load level, and runs of the other kind (the kind most runs have wins)."""
    known = set(listed["run_id"])
    excluded = [(r, "not in the store") for r in asked if r not in known]
    loads = [
        memory_load.load_of(r["arrival"], r["concurrency"], r["target_rate"])
        for r in listed.to_dict("records")
    ]
    for run_id, load in zip(listed["run_id"], loads, strict=True):
        if load is None:
            excluded.append((str(run_id), "no concurrency or request rate recorded"))
    kinds = [load[0] for load in loads if load is not None]
    if not kinds:
        return None, listed.iloc[0:0], tuple(excluded)
    kind = max(memory_load.LOAD_KINDS, key=kinds.count)
    keep = [load is not None and load[0] == kind for load in loads]
    for run_id, load in zip(listed["run_id"], loads, strict=True):
        if load is not None and load[0] != kind:
            excluded.append((str(run_id), f"measured at a {load[0]}, the series at a {kind}"))
    members = listed[keep].assign(load=[load[1] for load in loads if load and load[0] == kind])
    return kind, members.reset_index(drop=True), tuple(excluded)


def _sweep_groups(store: Store, sweep_id: str) -> tuple[pd.DataFrame, tuple[SeriesGroup, ...]]:
    """A sweep's runs and its series: runs grouped by what they share besides load (one group
    per point), labelled by the engine parameters that differ between groups."""
    runs = sweeps.sweep_runs(store, sweep_id)
    if runs.empty:
        return runs, ()
    points = {
        str(r): _point_id(cp) for r, cp in zip(runs["run_id"], runs["client_params"], strict=True)
    }
    listed = _listed(store, tuple(str(r) for r in runs["run_id"])[:MAX_RUNS])
    by_key: dict[tuple[str, ...], list[str]] = {}
    for rec in listed.to_dict("records"):
        by_key.setdefault(memory_load.series_key(rec), []).append(str(rec["run_id"]))
    params = {
        key: json_object(listed.loc[listed["run_id"] == ids[0], "engine_params"].iloc[0]) or {}
        for key, ids in by_key.items()
    }
    varied = sorted(
        {k for p in params.values() for k in p if len({str(q.get(k)) for q in params.values()}) > 1}
    )
    groups = []
    for i, (key, ids) in enumerate(by_key.items()):
        point = points.get(ids[0]) or str(i + 1)
        shown = ", ".join(f"{k}={params[key].get(k)}" for k in varied) or f"point {point}"
        groups.append(
            SeriesGroup(label=f"{shown} ({len(ids)} runs)", point=point, run_ids=tuple(ids))
        )
    return listed, tuple(groups)


def _point_id(client_params: Any) -> str:
    """The sweep point the runner recorded with a run (``client_params.sweep_point``), or ""."""
    point = (json_object(client_params) or {}).get("sweep_point")
    return str(point.get("point_id") or "") if isinstance(point, dict) else ""


def _like(store: Store, run_id: str | None) -> tuple[str, ...]:
    """The runs sharing ``run_id``'s (else the newest run's) series key, the run included,
    ordered by load; () when it has no load level or no model."""
    listed = runs_table.list_runs(store, limit=1, include=run_id)
    if listed.empty:
        return ()
    rows = listed[listed["run_id"] == run_id] if run_id in set(listed["run_id"]) else listed
    run = rows.iloc[0].to_dict()
    load = memory_load.load_of(run["arrival"], run["concurrency"], run["target_rate"])
    if load is None or not run.get("model"):
        return ()
    key = memory_load.series_key(run)
    same = runs_table.list_runs(store, limit=RUNS_LIMIT, models=[str(run["model"])])
    like = [
        (memory_load.load_of(r["arrival"], r["concurrency"], r["target_rate"]), str(r["run_id"]))
        for r in same.to_dict("records")
        if memory_load.series_key(r) == key
    ]
    return tuple(r for load, r in sorted((lv[1], r) for lv, r in like if lv is not None))


def catalogue_name(kind: str, value: Any) -> str | None:
    """The catalogue (``seeds/``) name of a run's GPU or model: its name, display name or
    Hugging Face repo (the repo's last part too), case-insensitively; None when unknown."""
    want = str(value or "").strip().lower()
    if not want:
        return None
    for entry in seeds.entries(kind):
        names = {str(entry.get(f) or "").lower() for f in ("name", "display_name", "hf_repo")}
        repo = str(entry.get("hf_repo") or "").lower()
        if want in names - {""} or (repo and repo.rsplit("/", 1)[-1] == want.rsplit("/", 1)[-1]):
            return str(entry["name"])
    return None


def _dtypes(run: Mapping[str, Any]) -> dict[str, Any]:
    """The sim's weight and KV dtype fields for the run's precision and KV-cache dtype (as
    ``servescope sim --dtype / --kv-cache-dtype`` sets them; unknown or auto: the model's)."""
    out: dict[str, Any] = {}
    weights, kv = run.get("precision"), run.get("kv_cache_dtype")
    if isinstance(weights, str) and weights and weights != "auto":
        sized = precision.sized_precision(weights, "precision")
        out |= {"weight_dtype_bytes": capacity.bytes_per_param(sized), "weight_precision": sized}
    if isinstance(kv, str) and kv and kv != "auto":
        out["kv_dtype_bytes"] = precision.kv_cache_bytes(kv, "kv_cache_dtype")
    return out


def predict(run: Mapping[str, Any]) -> Prediction:
    """The KV capacity of ``run``'s deployment: ``num_gpu_blocks × block_size`` when its engine
    parameters set the block count, else ``perf_model.kv_capacity_tokens`` of the sim's
    configuration for its catalogue GPU and model and engine parameters (tensor_parallel,
    kv_memory_fraction, block_size, max_batched_tokens; weight and KV dtypes from its
    precision); ``capacity_tokens`` None with the reason otherwise."""
    params = json_object(run.get("engine_params")) or {}
    kwargs: dict[str, Any] = {}
    for key, (name, kind) in _ENGINE_FIELDS.items():
        value = params.get(key)
        if value is None:
            continue
        try:
            kwargs[name] = kind(value)
        except (TypeError, ValueError):
            return Prediction(note=f"no prediction: engine parameter {key}={value!r} unreadable")
    try:
        kwargs |= _dtypes(run)
    except (ConfigError, InputError) as exc:
        return Prediction(note=f"no prediction: {exc}")
    batch = float(kwargs["max_batch_size"]) if "max_batch_size" in kwargs else None
    block = int(kwargs.get("block_size", 16))
    if kwargs.get("num_gpu_blocks") is not None:
        blocks = int(kwargs["num_gpu_blocks"])
        return Prediction(
            capacity_tokens=float(blocks * block),
            block_size=block,
            max_batch_size=batch,
            source=f"num_gpu_blocks {blocks:,} × block_size {block} (set on the engine)",
        )
    gpu = catalogue_name("gpus", run.get("gpu_name"))
    model = catalogue_name("models", run.get("model"))
    if gpu is None or model is None:
        return Prediction(block_size=block, max_batch_size=batch, note=NOT_IN_CATALOGUE)
    try:
        config = EngineConfig.from_names(gpu, model, **kwargs)
        tokens = perf_model.kv_capacity_tokens(config.deployment())
    except ConfigError as exc:
        return Prediction(block_size=block, max_batch_size=batch, note=f"no prediction: {exc}")
    return Prediction(
        capacity_tokens=float(tokens),
        block_size=block,
        max_batch_size=batch,
        source=(
            f"perf_model.kv_capacity_tokens: {model} on {config.tp}× {gpu}, "
            f"kv_memory_fraction {config.kv_memory_fraction:g}, block_size {block}"
        ),
    )
