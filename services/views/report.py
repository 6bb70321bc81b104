"""The planning-review report's data: what ``servescope report`` (and the download buttons on
Tune and Plan) put in one self-contained HTML file (``ui.report.render_html`` draws it).

:class:`ReportRequest` names what the report is about — runs, a sweep, a capacity plan (stored
by name, or given as its spec's JSON) and a title; :func:`report_data` checks every name against
the store (an unknown one is a ConfigError that names it and says where the valid ones are
listed; nothing is read further) and gathers each section from the pages' own builders, so the
report never holds a second definition of a figure:

- the checklist: ``services.views.select`` (the ranking under the default preset, the measured
  evidence of the runs' model and GPU);
- the SLO table: ``services.views.compare.read_rows`` + ``capacity`` under the SLO profile asked
  for (default: Compare's default profile): attainment, goodput and verdicts per run, SLO
  capacity per series;
- P99 by input length: ``services.views.latency.bucket_percentiles`` per run (the Latency page's
  default view: TTFT by input length, the default edges, the whole run);
- memory curves: ``services.views.memory.memory_view`` per run (GPU memory, KV usage, queue and
  preemptions over time, with the page's headline figures);
- the recommendation: ``services.views.tune.tune_view`` of the sweep (``analysis.recommend``);
- the capacity plan: ``services.views.plan.plan_view`` of the plan's spec.

A section with nothing to show is None (or empty) and the document says what would fill it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import pandas as pd

from analysis import slo
from analysis.buckets import bucket_labels
from errors import ConfigError, InputError
from services.commands import slo_profiles
from services.views import compare as compare_view
from services.views import latency as latency_view
from services.views import memory as memory_view
from services.views import plan as plan_view
from services.views import select as select_view
from services.views import tune as tune_view
from store import plans as plans_store
from store import runs_table
from store import sweeps as sweeps_store
from store.db import Store, mask_url

#: Most runs one report covers (each brings a latency and a memory chart).
MAX_RUNS: Final = 60
DEFAULT_TITLE: Final = "Planning review"
DEFAULT_PROFILE: Final = compare_view.DEFAULT_PROFILE
#: How many valid names an unknown-name error lists.
LISTED_NAMES: Final = 12
RUNS_HINT: Final = "`servescope db runs` lists the stored runs (id first)"


@dataclass(frozen=True)
class ReportRequest:
    """What a report is about. ``run_ids``: the runs of the SLO table, latency and memory
    sections (empty with ``sweep_id``: the sweep's probe runs); ``sweep_id``: a sweep for the
    recommendation; ``plan_name``: a capacity plan stored by name, or ``plan_spec_json``: a
    plan's spec as JSON (``services.views.plan.PlanSpec.to_json``); ``title``: the document's
    title (None: :data:`DEFAULT_TITLE`); ``slo``: the SLO profile of the SLO table (None: the
    default profile)."""

    run_ids: tuple[str, ...] = ()
    sweep_id: str | None = None
    plan_name: str | None = None
    plan_spec_json: str | None = None
    title: str | None = None
    slo: str | None = None

    def __post_init__(self) -> None:
        ids = tuple(dict.fromkeys(str(r).strip() for r in self.run_ids if str(r).strip()))
        object.__setattr__(self, "run_ids", ids)


@dataclass(frozen=True)
class SloSection:
    """The SLO table: one row per run (``compare.read_rows``) under ``profile``, and SLO
    capacity per series (``compare.capacity``)."""

    profile: slo.SloProfile
    rows: pd.DataFrame
    capacity: tuple[compare_view.SeriesCapacity, ...]


@dataclass(frozen=True)
class RunLatency:
    """P99 (and P50 … P99.9) of TTFT by input length of one run; ``buckets`` None: the run has
    no per-request rows (``note`` says why)."""

    run_id: str
    label: str
    labels: tuple[str, ...]
    buckets: latency_view.BucketPercentiles | None
    note: str = ""


@dataclass(frozen=True)
class RunMemory:
    """One run's memory curves (``memory_view``'s binned engine and GPU samples) and headline
    figures; ``note`` says why there are none."""

    run_id: str
    label: str
    engine: pd.DataFrame
    gpu: pd.DataFrame
    figures: memory_view.MemoryFigures
    cap: float
    note: str = ""

    @property
    def has_samples(self) -> bool:
        return not (self.engine.empty and self.gpu.empty)


@dataclass(frozen=True)
class PlanSection:
    """The capacity plan: its name (None: given as a spec), its inputs as (name, value) pairs,
    and the Plan page's view model of them (``services.views.plan.plan_view``)."""

    name: str | None
    inputs: tuple[tuple[str, str], ...]
    view: plan_view.PlanView


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows (see the module's docstring for where each part comes
    from). ``runs``: ``runs_table.run_aggregates`` of the runs, in the order asked for."""

    request: ReportRequest
    title: str
    generated_at: float  # epoch seconds
    store: str  # the store's URL, password masked
    runs: pd.DataFrame
    checklist: select_view.SelectView | None = None
    slo: SloSection | None = None
    slo_problem: str = ""
    latency: tuple[RunLatency, ...] = ()
    memory: tuple[RunMemory, ...] = ()
    tune: tune_view.TuneView | None = None
    plan: PlanSection | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def run_label(self, run_id: str) -> str:
        """A run's name, else its id."""
        for r in self.runs.to_dict("records"):
            if str(r.get("run_id")) == run_id:
                name = r.get("name")
                return str(name) if isinstance(name, str) and name else run_id
        return run_id


# --- the builder -------------------------------------------------------------------------------


def report_data(store: Store, request: ReportRequest) -> ReportData:
    """Check ``request``'s names against ``store`` (ConfigError for an unknown run, sweep, plan
    or SLO profile; InputError past :data:`MAX_RUNS` runs), then gather every section."""
    sweep_id = _check_sweep(store, request.sweep_id)
    tune = (
        tune_view.tune_view(store, tune_view.TuneSelection(sweep=sweep_id))
        if sweep_id is not None
        else None
    )
    run_ids = request.run_ids
    notes: list[str] = []
    if not run_ids and tune is not None:
        run_ids = probe_run_ids(tune)
        if len(run_ids) > MAX_RUNS:
            notes.append(
                f"The sweep measured {len(run_ids)} runs; the run sections show its first "
                f"{MAX_RUNS}."
            )
            run_ids = run_ids[:MAX_RUNS]
    if len(run_ids) > MAX_RUNS:
        raise InputError(
            f"{len(run_ids)} runs asked for; one report covers at most {MAX_RUNS}",
            hint="split the runs over several reports",
        )
    _check_runs(store, run_ids)
    profile, profile_problem = _profile(store, request.slo)
    plan = _plan_section(store, request)
    runs = runs_table.run_aggregates(store, list(run_ids)) if run_ids else pd.DataFrame()
    rows = {str(r["run_id"]): r for r in _records(runs)}
    slo_section, slo_problem = _slo(store, run_ids, profile)
    return ReportData(
        request=request,
        title=(request.title or "").strip() or DEFAULT_TITLE,
        generated_at=time.time(),
        store=mask_url(store.url),
        runs=runs,
        checklist=_checklist(store, runs),
        slo=slo_section,
        slo_problem=profile_problem or slo_problem,
        latency=tuple(_latency(store, r, rows.get(r, {})) for r in run_ids),
        memory=tuple(_memory(store, r, rows.get(r, {}), profile) for r in run_ids),
        tune=tune,
        plan=plan,
        notes=tuple(notes),
    )


def probe_run_ids(tune: tune_view.TuneView) -> tuple[str, ...]:
    """The runs a sweep measured: every probe of every point and repeat (Tune's search
    curves), in the order measured, without repeats."""
    if tune.curves.empty:
        return ()
    return tuple(dict.fromkeys(str(r) for r in tune.curves["run_id"].dropna() if str(r)))


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in df.to_dict("records")]


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return shown + (f" … and {more} more" if more > 0 else "") if names else "none stored"


def _check_runs(store: Store, run_ids: Sequence[str]) -> None:
    """ConfigError naming the runs of ``run_ids`` the store lacks."""
    if not run_ids:
        return
    found = runs_table.list_runs(store, limit=None, run_ids=run_ids)
    known = {str(r) for r in found["run_id"]}
    missing = [r for r in run_ids if r not in known]
    if not missing:
        return
    newest = [str(r) for r in runs_table.list_runs(store, limit=LISTED_NAMES)["run_id"]]
    what = "run" if len(missing) == 1 else "runs"
    raise ConfigError(
        f"unknown {what} {', '.join(repr(m) for m in missing)}: not in {mask_url(store.url)}",
        hint=f"{RUNS_HINT}; the newest: {_listed(newest)}",
    )


def _check_sweep(store: Store, sweep_id: str | None) -> str | None:
    """The sweep's id, or None when none is asked for; ConfigError for an unknown one."""
    if sweep_id is None:
        return None
    listing = sweeps_store.sweep_list(store)
    ids = [str(s) for s in listing["sweep_id"]] if not listing.empty else []
    if sweep_id in ids:
        return sweep_id
    raise ConfigError(
        f"unknown sweep {sweep_id!r}: not in {mask_url(store.url)}",
        hint=f"the Tune page lists the stored sweeps (servescope ui), newest first: {_listed(ids)}",
    )


def _profile(store: Store, name: str | None) -> tuple[slo.SloProfile | None, str]:
    """The SLO table's profile: the one named (ConfigError when unknown or invalid), else the
    default one (None and why, when it is missing or invalid)."""
    profiles = slo_profiles.slo_profiles(store)
    wanted = name or DEFAULT_PROFILE
    if wanted not in profiles:
        if name is None:
            return None, f"the store has no SLO profile {DEFAULT_PROFILE!r}: no SLO table"
        raise ConfigError(
            f"unknown SLO profile {name!r}",
            hint=f"profiles in this store: {_listed(sorted(profiles))}",
        )
    try:
        return slo.SloProfile.from_entry(profiles[wanted]), ""
    except ConfigError as exc:
        if name is not None:
            raise
        return None, f"SLO profile {wanted!r} is invalid: {exc.message}"


def _label(row: Mapping[str, Any], run_id: str) -> str:
    name = row.get("name")
    return str(name) if isinstance(name, str) and name.strip() else run_id


def _slo(
    store: Store, run_ids: Sequence[str], profile: slo.SloProfile | None
) -> tuple[SloSection | None, str]:
    """Compare's rows and capacities for the runs under ``profile``."""
    if not run_ids or profile is None:
        return None, ""
    rows = compare_view.read_rows(store, run_ids, profile, compare_view.DEFAULT_GROUPING)
    return SloSection(profile, rows, compare_view.capacity(rows)), ""


def _most_common(runs: pd.DataFrame, column: str) -> str | None:
    if runs.empty or column not in runs:
        return None
    counts = runs[column].dropna().astype(str).value_counts()
    return str(counts.index[0]) if not counts.empty else None


def _checklist(store: Store, runs: pd.DataFrame) -> select_view.SelectView:
    """Select's ranking under the default preset, its measured evidence from the runs' most
    common model and GPU (when the store measured catalogued frameworks on them)."""
    selection = select_view.SelectSelection(
        model=_most_common(runs, "model"), gpu=_most_common(runs, "gpu_name")
    )
    return select_view.select_view(store, selection)


def _no_requests(row: Mapping[str, Any]) -> str:
    if row.get("aggregates_only"):
        return "an import of the tool's aggregates only: no per-request rows to bucket"
    requests = row.get("requests")
    if requests is None or pd.isna(requests) or int(requests) == 0:
        return "no requests stored"
    return ""


def _latency(store: Store, run_id: str, row: Mapping[str, Any]) -> RunLatency:
    """The Latency page's default bucket view of the run (TTFT by input length)."""
    selection = latency_view.LatencySelection.default(run_id)
    labels = tuple(bucket_labels(selection.edges))
    label = _label(row, run_id)
    note = _no_requests(row)
    if note:
        return RunLatency(run_id, label, labels, None, note)
    buckets = latency_view.bucket_percentiles(store, run_id, selection, (None, None), labels)
    if buckets.rows.empty:
        return RunLatency(run_id, label, labels, None, "no successful request to bucket")
    return RunLatency(run_id, label, labels, buckets)


def _memory(
    store: Store, run_id: str, row: Mapping[str, Any], profile: slo.SloProfile | None
) -> RunMemory:
    """The Memory page's first view of the run (its memory cap from ``profile`` when it sets
    one)."""
    selection = memory_view.MemorySelection(
        run_id=run_id, slo=profile.name if profile is not None else None
    )
    view = memory_view.memory_view(store, selection)
    note = ""
    if view.span is None:
        note = "the run recorded no time span"
    elif not view.has_samples:
        note = (
            "no engine or GPU samples during the run (servescope bench records the endpoint's "
            "/metrics; --dcgm URL adds GPU memory)"
        )
    return RunMemory(
        run_id=run_id,
        label=_label(row, run_id),
        engine=view.engine,
        gpu=view.gpu,
        figures=view.figures,
        cap=view.cap,
        note=note,
    )


def _value_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "all"
    return str(value)


def _plan_spec(store: Store, request: ReportRequest) -> tuple[str | None, plan_view.PlanSpec]:
    """(the plan's name, its spec): the saved plan ``plan_name`` (ConfigError naming the saved
    ones when there is none of that name) or the spec ``plan_spec_json``."""
    if request.plan_name is not None:
        saved = [str(n) for n in plans_store.list_plans(store)["name"]]
        if request.plan_name not in saved:
            raise ConfigError(
                f"unknown plan {request.plan_name!r}: not in {mask_url(store.url)}",
                hint=f"saved plans: {_listed(saved)} (the Plan page's save button, or "
                "`servescope plan … --save NAME`, stores one)",
            )
        return request.plan_name, plan_view.PlanSpec.from_json(
            plans_store.load_plan(store, request.plan_name)
        )
    try:
        return None, plan_view.PlanSpec.from_json(request.plan_spec_json or "{}")
    except ValueError as exc:  # not JSON at all
        raise InputError(
            f"the plan spec is not JSON: {exc}",
            hint="give the JSON the Plan page or `servescope plan … --save NAME` keeps",
        ) from None


def _plan_section(store: Store, request: ReportRequest) -> PlanSection | None:
    """The capacity plan of the request (None: none asked for): the Plan page's view of its
    spec (an unknown model, GPU or profile in it is the InputError ``plan_view`` raises)."""
    if request.plan_name is None and request.plan_spec_json is None:
        return None
    name, spec = _plan_spec(store, request)
    view = plan_view.plan_view(store, spec)
    inputs = tuple((k, _value_text(v)) for k, v in sorted(asdict(spec).items()))
    return PlanSection(name=name, inputs=inputs, view=view)
