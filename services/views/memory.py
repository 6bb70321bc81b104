"""The Memory page's view model: GPU memory, KV-cache usage, queue and preemptions of one run on
one time axis, their headline figures, trends and warnings, and other runs overlaid.

URL: ``?run=<id>&window=60-300&overlay=<id>,<id>&slo=<profile>&cap=0.9`` (window: seconds from
the run's start). Engine series (KV usage, running/waiting, preemptions) come from the targets
the bench recorded with the run (else every target that reported during its span); GPU memory
from ``gpu_samples`` of its hosts (NVML ``--gpu`` or DCGM ``--dcgm``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pandas as pd

from analysis import engine_series, latency
from services.commands import slo_profiles
from services.views.run_window import WINDOW_PARAM, parse_window, run_window
from store import request_rows, request_stats, runs_table, sample_timelines
from store.db import Store

#: The memory cap (fraction of GPU memory) when neither the URL nor an SLO profile sets one.
DEFAULT_CAP: Final = 0.90
#: Runs offered in the pickers (plus the one asked for).
RUNS_LIMIT: Final = 200
#: The URL parameters of the page's selections.
RUN_PARAM: Final = "run"
CAP_PARAM: Final = "cap"
SLO_PARAM: Final = "slo"
OVERLAY_PARAM: Final = "overlay"  # run ids, comma-separated

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
        return cls(
            run_id=params.get(RUN_PARAM) or None,
            window=parse_window(params.get(WINDOW_PARAM)),
            cap=cap,
            slo=params.get(SLO_PARAM) or None,
            overlay=overlay,
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
