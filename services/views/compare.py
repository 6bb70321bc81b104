"""The Compare page's view model: runs side by side against an SLO profile.

:class:`CompareSelection` is what the page asks for (the URL's ``runs``, ``slo``, ``by``, ``base``
and ``cand``, and whether the sampled views are wanted); :func:`compare_view` resolves it against
the store (no runs chosen → the newest; an unknown profile → the default one) and returns a
:class:`CompareView` of everything the page shows: the run and profile choices, one row per run
(the store's figures, SLO attainment, goodput, verdicts, series and load), SLO capacity per
series and, only when wanted, the CDF samples and the baseline-vs-candidate bootstrap.

Aggregate-only imports (``tool_summary.aggregates_only``, no request rows) have no per-request
data: their percentiles, counts and throughput are the tool's own (its definitions, labelled on
the page), and goodput, attainment, CDFs and bootstrap intervals cannot be computed for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pandas as pd

from analysis import compare, crosscheck, metrics, slo
from errors import ConfigError, InputError
from services.commands import slo_profiles
from store import request_rows, request_stats, runs_table, sample_timelines
from store.db import Store

#: Runs offered in the picker (newest first).
CANDIDATES_LIMIT: Final = 500
#: Runs selected by default (the newest) when the selection names none.
DEFAULT_RUNS: Final = 12
DEFAULT_PROFILE: Final = "interactive-chat"
DEFAULT_GROUPING: Final = "configuration"
#: Above this many requests in the selected runs, the sampled views start switched off (unless
#: every run's samples are already stored).
BIG_SELECTION: Final = 1_000_000
#: Most values per run a CDF (and the bootstrap) is drawn from.
SAMPLE_LIMIT: Final = request_rows.DISTRIBUTION_SAMPLE_LIMIT
#: Bootstrap replicates for baseline vs candidate, and the percentiles compared.
N_BOOT: Final = 300
BOOTSTRAP_PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0)
#: The sampled metrics (column → label), in the order the page shows them.
CDF_METRICS: Final = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT"),
    ("itl_ms", "ITL"),
    ("e2e_ms", "E2E"),
)
#: URL parameters of the selection.
RUNS_PARAM: Final = "runs"
SLO_PARAM: Final = "slo"
BY_PARAM: Final = "by"
BASE_PARAM: Final = "base"
CAND_PARAM: Final = "cand"

#: Tool aggregate → our column, for aggregate-only runs.
_TOOL_SCALARS: Final[Mapping[str, str]] = {
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "completed": "ok",
    "failed": "errors",
    "duration_s": "duration_s",
}


def split_ids(text: str | None) -> tuple[str, ...]:
    """``"a,b,,c"`` → ``("a", "b", "c")`` (the ``runs`` URL parameter)."""
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


@dataclass(frozen=True)
class CompareSelection:
    """What the Compare page is asked to show; None fields are resolved by :func:`compare_view`.

    ``runs``: None → the :data:`DEFAULT_RUNS` newest (an explicit empty tuple: none chosen);
    ``slo``: a profile name (None or unknown → :data:`DEFAULT_PROFILE`, else the first);
    ``by``: a grouping of ``analysis.compare.GROUPINGS``; ``baseline``/``candidate``: runs with
    per-request data (None → the first two); ``distributions``: the CDFs and the bootstrap
    (None → on up to :data:`BIG_SELECTION` requests, or when their samples are stored).
    """

    runs: tuple[str, ...] | None = None
    slo: str | None = None
    by: str = DEFAULT_GROUPING
    baseline: str | None = None
    candidate: str | None = None
    distributions: bool | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> CompareSelection:
        """The selection a URL's query parameters (``runs``, ``slo``, ``by``, ``base``,
        ``cand``) ask for; absent or empty ones are left to the defaults."""
        by = params.get(BY_PARAM) or DEFAULT_GROUPING
        return cls(
            runs=split_ids(params.get(RUNS_PARAM)) or None,
            slo=params.get(SLO_PARAM) or None,
            by=by if by in compare.GROUPINGS else DEFAULT_GROUPING,
            baseline=params.get(BASE_PARAM) or None,
            candidate=params.get(CAND_PARAM) or None,
        )

    @classmethod
    def default(cls, run_id: str) -> CompareSelection:
        """The page's view of one run with its defaults and the sampled views on: what
        ``prepare`` computes ahead so that the page's first view of a large run is stored."""
        return cls(runs=(run_id,), distributions=True)


@dataclass(frozen=True)
class SeriesCapacity:
    """SLO capacity of one series, with the kind of load it is measured in (``rate``,
    ``concurrency`` or "" when unknown)."""

    capacity: slo.Capacity
    load_kind: str


@dataclass(frozen=True)
class CompareView:
    """Everything the Compare page shows for a (resolved) :class:`CompareSelection`.

    ``candidates``: the runs to pick from (newest first; empty: the store holds none).
    ``selection``: the selection as resolved (runs that exist, the profile's name, …).
    ``rows``: one row per selected run (``run_aggregates`` columns, filled from the tool for
    aggregate-only runs, plus ttft_met, met, goodput, attainment, verdicts, passed,
    worst_ratio, series, load, load_kind and, under a memory cap, mem_peak_fraction and
    gpu_samples); None when no runs or no valid profile are chosen, or ``problem`` is set.
    ``warnings``: how the selected runs differ in what a fair comparison holds equal (model,
    precision, output-token cap, workload, GPU; ``analysis.compare.comparison_warnings``).
    ``samples`` (run_id, metric, value) and ``diffs`` (``analysis.compare.compare_samples``)
    are None unless the sampled views are on (``diffs`` also needs two different runs).
    """

    candidates: pd.DataFrame
    profile_names: tuple[str, ...]
    selection: CompareSelection
    profile: slo.SloProfile | None = None
    profile_error: str | None = None
    problem: InputError | None = None
    rows: pd.DataFrame | None = None
    capacity: tuple[SeriesCapacity, ...] = ()
    slo_limits: Mapping[str, float] = field(default_factory=dict)
    requests_total: int = 0
    per_request: tuple[str, ...] = ()
    samples: pd.DataFrame | None = None
    diffs: pd.DataFrame | None = None
    warnings: tuple[compare.ComparisonWarning, ...] = ()

    @property
    def aggregates_only(self) -> pd.DataFrame:
        """The selected runs that hold only the tool's aggregates."""
        if self.rows is None or self.rows.empty:
            return pd.DataFrame()
        return self.rows[self.rows["aggregates_only"].astype(bool)]

    @property
    def any_client_bound(self) -> bool:
        """Whether a selected run's latencies include the load generator's own queueing."""
        if self.rows is None or self.rows.empty:
            return False
        return bool(self.rows["client_bound"].astype("boolean").fillna(False).astype(bool).any())


# --- the builder -------------------------------------------------------------------------------


def compare_view(store: Store, selection: CompareSelection) -> CompareView:
    """The Compare page for ``selection``: reads the run choices and the SLO profiles, resolves
    the selection, then the selected runs' figures, attainment (and GPU memory peaks under a
    memory cap), and the samples and bootstrap only when the sampled views are on."""
    candidates = runs_table.list_runs(store, limit=CANDIDATES_LIMIT)
    profiles = slo_profiles.slo_profiles(store)
    names = tuple(profiles)
    resolved = replace(
        selection,
        runs=_resolve_runs(selection.runs, candidates["run_id"].astype(str).tolist()),
        slo=_resolve_name(selection.slo, names, DEFAULT_PROFILE),
        by=selection.by if selection.by in compare.GROUPINGS else DEFAULT_GROUPING,
    )
    view = CompareView(candidates=candidates, profile_names=names, selection=resolved)
    if candidates.empty or resolved.slo is None:
        return view
    try:
        profile = slo.SloProfile.from_entry(profiles[resolved.slo])
    except ConfigError as exc:
        return replace(view, profile_error=exc.message)
    view = replace(view, profile=profile, slo_limits=slo_limits(profile))
    if not resolved.runs:
        return view
    try:
        rows = read_rows(store, resolved.runs, profile, resolved.by)
    except InputError as exc:  # e.g. more runs than one read compares: the page says so
        return replace(view, problem=exc)
    warnings = tuple(compare.comparison_warnings(rows))
    return _with_samples(
        store, replace(view, rows=rows, capacity=capacity(rows), warnings=warnings)
    )


def read_rows(
    store: Store, run_ids: Sequence[str], profile: slo.SloProfile, by: str
) -> pd.DataFrame:
    """The runs' rows as Compare shows them (:func:`per_run`): figures, SLO attainment and
    verdicts under ``profile``, series by ``by`` (the Select page's SLO capacity reads them too)."""
    aggregates = runs_table.run_aggregates(store, run_ids)
    attainment = request_stats.slo_attainment(store, run_ids, profile.sql_thresholds())
    # the memory cap is judged on each run's GPU samples (peak used / total)
    states = (
        None if profile.max_memory_fraction is None else sample_timelines.run_states(store, run_ids)
    )
    return per_run(aggregates, attainment, profile, by, states)


def _with_samples(store: Store, view: CompareView) -> CompareView:
    """The sampled views (CDFs, baseline vs candidate) when the selection wants them."""
    assert view.rows is not None
    total = _requests_total(view.rows)
    per_request = with_requests(view.rows)
    wanted = view.selection.distributions
    if wanted is None:
        wanted = total <= BIG_SELECTION or request_rows.samples_ready(
            store, per_request, SAMPLE_LIMIT
        )
    view = replace(
        view,
        requests_total=total,
        per_request=per_request,
        selection=replace(view.selection, distributions=wanted),
    )
    if not wanted:
        return view
    samples = read_samples(store, per_request)
    baseline, candidate = _resolve_pair(view.selection, per_request)
    diffs = None
    if baseline is not None and candidate is not None and baseline != candidate:
        diffs = baseline_vs_candidate(samples, baseline, candidate)
    return replace(
        view,
        samples=samples,
        diffs=diffs,
        selection=replace(view.selection, baseline=baseline, candidate=candidate),
    )


def _resolve_runs(wanted: tuple[str, ...] | None, choices: Sequence[str]) -> tuple[str, ...]:
    """The chosen runs that exist; the newest :data:`DEFAULT_RUNS` when none were named or
    none of those named exists (an explicit empty choice stays empty)."""
    if wanted is not None and not wanted:
        return ()
    known = set(choices)
    found = tuple(r for r in (wanted or ()) if r in known)
    return found or tuple(choices[:DEFAULT_RUNS])


def _resolve_name(wanted: str | None, names: Sequence[str], default: str) -> str | None:
    if wanted in names:
        return wanted
    if default in names:
        return default
    return names[0] if names else None


def _resolve_pair(
    selection: CompareSelection, per_request: Sequence[str]
) -> tuple[str | None, str | None]:
    """Baseline and candidate among the runs with per-request data (default: the first two)."""
    if len(per_request) < 2:
        return None, None
    base = selection.baseline if selection.baseline in per_request else per_request[0]
    cand = selection.candidate if selection.candidate in per_request else per_request[1]
    return base, cand


def read_samples(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """Bounded per-run samples of TTFT, TPOT, E2E (one read) and pooled ITL (another), long:
    run_id, metric, value (ms); at most :data:`SAMPLE_LIMIT` values per run and metric."""
    wide = request_rows.request_samples(store, run_ids, SAMPLE_LIMIT)
    itl = request_rows.metric_samples(store, run_ids, "itl_ms", SAMPLE_LIMIT)
    long = wide.melt(id_vars="run_id", var_name="metric", value_name="value").dropna()
    itl = itl.assign(metric="itl_ms")[["run_id", "metric", "value"]]
    return pd.concat([long, itl], ignore_index=True)


def baseline_vs_candidate(samples: pd.DataFrame, baseline: str, candidate: str) -> pd.DataFrame:
    """Percentile differences candidate − baseline with seeded bootstrap intervals
    (``analysis.compare.compare_samples``) from ``samples`` (:func:`read_samples`)."""
    metrics = [m for m, _ in CDF_METRICS]
    pick = {
        side: {
            m: samples.loc[(samples["run_id"] == rid) & (samples["metric"] == m), "value"].to_numpy(
                dtype="float64"
            )
            for m in metrics
        }
        for side, rid in (("base", baseline), ("cand", candidate))
    }
    return compare.compare_samples(pick["base"], pick["cand"], BOOTSTRAP_PERCENTILES, n_boot=N_BOOT)


# --- pure shaping ------------------------------------------------------------------------------


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in df.to_dict("records")]


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _number(value: Any) -> float | None:
    return None if _missing(value) else float(value)


def _tool_row(row: dict[str, Any]) -> dict[str, Any]:
    """An aggregate-only run's row with the tool's own figures where it has them."""
    figures = crosscheck.tool_figures(row.get("tool_summary"))
    for key, value in figures.items():
        metric, _, stat = key.partition(".")
        if stat:
            col = f"{metric.removesuffix('_ms')}_{stat}_ms"
            if col in row:
                row[col] = value
        elif key in _TOOL_SCALARS and _TOOL_SCALARS[key] in row:
            row[_TOOL_SCALARS[key]] = value
    ok, failed = figures.get("completed"), figures.get("failed")
    if ok is not None:
        total = ok + (failed or 0.0)
        row["requests"] = int(total)
        row["errors"] = int(failed or 0)
        # the tool's failure share (its completed and failed counts, no request rows of ours)
        rate = metrics.error_rate(total, ok)
        row["error_rate"] = math.nan if rate is None else rate
        for prefix in ("ttft", "tpot", "e2e"):
            if not _missing(row.get(f"{prefix}_p50_ms")):
                row[f"{prefix}_n"] = int(ok)
    per_gpu = metrics.per_gpu(_number(row.get("output_throughput")), _number(row.get("gpu_count")))
    if per_gpu is not None:
        row["output_throughput_per_gpu"] = per_gpu  # the tool's throughput per GPU
    return row


def fill_from_tool(aggregates: pd.DataFrame) -> pd.DataFrame:
    """For aggregate-only runs, take the tool's own figures where ours are missing.

    Percentiles (``ttft_p99_ms`` …) come from ``tool_summary.metrics``; throughput, duration,
    completed and failed counts too. The requests count becomes completed + failed. Other runs
    keep the store's figures as they are.
    """
    if aggregates.empty or "aggregates_only" not in aggregates:
        return aggregates.copy()
    rows = [_tool_row(r) if r.get("aggregates_only") else r for r in _records(aggregates)]
    out = pd.DataFrame(rows, columns=aggregates.columns, index=aggregates.index)
    for col in aggregates.columns:
        if pd.api.types.is_float_dtype(aggregates[col].dtype):
            out[col] = pd.to_numeric(out[col]).astype("float64")
    return out


def per_run(
    aggregates: pd.DataFrame,
    attainment: pd.DataFrame,
    profile: slo.SloProfile,
    by: str,
    states: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per run: aggregates, SLO attainment, goodput, verdicts, series and load.

    Adds ``goodput``, ``attainment``, ``ttft_met``, ``met`` (SQL counts), ``verdicts`` (list of
    ``slo.TargetResult``), ``passed`` (bool or None) and ``worst_ratio``, plus the columns of
    ``analysis.compare.curves``; with ``states`` (``run_states``: the memory cap's evidence)
    also ``mem_peak_fraction`` and ``gpu_samples``.
    """
    if aggregates.empty:
        return aggregates
    merged = fill_from_tool(aggregates)
    att = attainment[["run_id", "ttft_met", "met", "goodput", "attainment"]]
    merged = merged.merge(att, on="run_id", how="left")
    if states is not None and not states.empty:
        memory = states[["run_id", "mem_peak_fraction", "gpu_samples"]]
        merged = merged.merge(memory, on="run_id", how="left")
    verdicts = [slo.evaluate(r, profile) for r in _records(merged)]
    merged["verdicts"] = pd.Series(verdicts, index=merged.index, dtype=object)
    merged["passed"] = pd.Series(
        [slo.overall(v) for v in verdicts], index=merged.index, dtype=object
    )
    merged["worst_ratio"] = pd.Series(
        [slo.worst_ratio(v) for v in verdicts], index=merged.index, dtype="float64"
    )
    return compare.curves(merged, by)


def capacity(rows: pd.DataFrame) -> tuple[SeriesCapacity, ...]:
    """SLO capacity of each series of ``rows`` (:func:`per_run`), by series name."""
    out = []
    for name, group in rows.groupby("series", sort=True):
        points = pd.DataFrame(
            {"load": group["load"], "passed": group["passed"], "ratio": group["worst_ratio"]}
        )
        kinds = [k for k in group["load_kind"] if k]
        out.append(SeriesCapacity(slo.capacity(str(name), points), kinds[0] if kinds else ""))
    return tuple(out)


def with_requests(rows: pd.DataFrame) -> tuple[str, ...]:
    """The runs of ``rows`` that have per-request rows (the CDFs', the bootstrap's)."""
    out = []
    for r in _records(rows):
        if r.get("aggregates_only") or _missing(r.get("requests")):
            continue
        if int(r["requests"]) > 0:
            out.append(str(r["run_id"]))
    return tuple(out)


def _requests_total(rows: pd.DataFrame) -> int:
    if "requests" not in rows:
        return 0
    return int(pd.to_numeric(rows["requests"]).fillna(0).sum())


def slo_limits(profile: slo.SloProfile) -> dict[str, float]:
    """metric → the profile's fixed target (ms) for chart lines; a length-conditioned TTFT
    has no single line."""
    limits = {
        "ttft_ms": None if profile.length_conditioned else profile.ttft_ms,
        "tpot_ms": profile.tpot_ms,
        "e2e_ms": profile.e2e_ms,
    }
    return {k: v for k, v in limits.items() if v is not None}
