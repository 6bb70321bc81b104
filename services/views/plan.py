"""The Plan page's view model: GPUs needed at peak, their cost, and the memory of each option.

:class:`PlanSpec` holds a plan's inputs (what ``servescope plan`` takes, what a saved plan
stores as JSON, what the page's URL carries); :meth:`PlanSelection.from_params` reads them from
the URL (a bad value becomes ``problem``, a sentence the page shows, never an exception);
:func:`plan_view` computes a :class:`PlanView` from the store: the catalogue's model and GPUs
(``store.catalog``), the SLO profile, the request lengths (typed, from a stored run, or from a
``watch`` target's token counters), the user's GPU prices (``store.plans``), the measured SLO
capacities of the model's runs and the options of ``analysis.plan``.

**Measured capacity** (per replica, req/s): the model's runs (``runs.model``) whose GPU is a
catalogue GPU of the plan (``gpu_name`` = its name or display name), grouped as Compare groups
them by configuration (framework · model · engine parameters) and by GPU, TP
(``engine_params.tensor_parallel``, else ``gpu_count``, else 1) and precision
(``analysis.plan.plan_precision`` of ``runs.precision``); each group's SLO capacity under the
plan's profile is Compare's (``services.views.compare.read_rows`` + ``capacity``): for
request-rate runs the highest passing rate; for closed-loop (concurrency) runs the request
throughput the highest passing concurrency achieved. Runs a sweep stored are named by their
sweep. A group whose lowest load already fails the SLO measures nothing usable (listed in
``skipped``).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final

import pandas as pd

from analysis import histogram_windows, slo
from analysis import plan as planner
from analysis.capacity import ModelShape
from analysis.engine_series import counter_increase, histogram_quantile
from analysis.metrics import finite_number
from analysis.perf_model import GpuSpec
from errors import ConfigError, InputError
from services.views import compare as compare_view
from store import catalog, runs_table, sample_series
from store import plans as plans_store
from store import sweeps as sweeps_store
from store.db import Store
from store.sql import MAX_RUNS

DEFAULT_MODEL: Final = "llama-3.1-8b"
DEFAULT_SLO: Final = "interactive-chat"
#: The URL's parameters (``/plan?model=&peak=&avg=&in=&out=&slo=&gpus=&tp=&precision=&headroom=``).
PARAMS: Final[Mapping[str, str]] = {
    "model": "model",
    "peak": "peak_qps",
    "avg": "avg_qps",
    "in": "input_tokens",
    "out": "output_tokens",
    "lengths": "lengths",
    "slo": "slo",
    "gpus": "gpus",
    "tp": "tps",
    "precision": "precisions",
    "headroom": "headroom",
    "kvfrac": "kv_memory_fraction",
    "batch": "max_batch_size",
    "kvdtype": "kv_dtype",
}
#: The newest runs of the model read for measured capacities.
RUN_LIMIT: Final = MAX_RUNS
#: A ``metrics:`` target's length histograms: their ``_sum``/``_count`` growth is the mean
#: length of its finished requests (preferred: exact).
LENGTH_HISTOGRAM_SERIES: Final = (
    "prompt_length_tokens_sum",
    "prompt_length_tokens_count",
    "output_length_tokens_sum",
    "output_length_tokens_count",
)
#: Engine counters whose growth gives a ``metrics:`` target's mean lengths (the fallback for
#: engines without length histograms).
LENGTH_COUNTERS: Final = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_finished_total",
)


@dataclass(frozen=True)
class PlanSpec:
    """A plan's inputs. ``gpus`` empty: every GPU of the catalogue whose kind is ``gpu`` (edge
    boards and CPU hosts only when named). ``lengths``: ``"typed"``
    (``input_tokens``/``output_tokens`` are the means), ``"run:<run_id>"`` (the run's mean
    lengths) or ``"metrics:<target>"`` (a ``watch`` target's prompt and generation token
    counters over finished requests). ``headroom``: kept above the peak (0.2 = 20 %)."""

    model: str = DEFAULT_MODEL
    peak_qps: float = 10.0
    avg_qps: float = 5.0
    input_tokens: float = 1000.0
    output_tokens: float = 200.0
    lengths: str = "typed"
    slo: str = DEFAULT_SLO
    gpus: tuple[str, ...] = ()
    tps: tuple[int, ...] = planner.TP_CHOICES
    precisions: tuple[str, ...] = planner.DEFAULT_PRECISIONS
    headroom: float = 0.2
    kv_memory_fraction: float = 0.9
    max_batch_size: int = 256
    kv_dtype: str = "auto"

    def to_json(self) -> str:
        """The spec as a JSON object (lists for the tuples), keys sorted."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> PlanSpec:
        """The spec a JSON object (or its decoded dict) holds; unknown keys are an InputError
        naming them, missing ones take the defaults."""
        data = json.loads(text) if isinstance(text, str) else dict(text)
        if not isinstance(data, Mapping):
            raise InputError("a plan spec must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"plan spec has unknown keys: {', '.join(unknown)}; accepted: "
                + ", ".join(sorted(known))
            )
        return cls.from_values({str(k): v for k, v in data.items()})

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> PlanSpec:
        """The spec of typed values (numbers, lists or comma-separated text); an InputError
        names the first bad one and what is accepted."""
        out: dict[str, Any] = {}
        for key, value in values.items():
            if value is None or value == "":
                continue
            out[key] = _coerce(key, value)
        spec = cls(**out)
        spec.check()
        return spec

    def check(self) -> None:
        """Value checks that need no store (names are checked against the store later)."""
        planner.Demand(self.peak_qps, self.avg_qps, self.headroom)
        planner.Engine(
            kv_memory_fraction=self.kv_memory_fraction,
            max_batch_size=self.max_batch_size,
            kv_dtype=self.kv_dtype,
        )
        if self.lengths == "typed":
            planner.Lengths(self.input_tokens, self.output_tokens)
        elif not self.lengths.startswith(("run:", "metrics:")) or self.lengths[-1] == ":":
            raise InputError(
                f"lengths {self.lengths!r}; accepted: typed, run:<run id> or metrics:<target>"
            )
        if not self.tps or any(t < 1 for t in self.tps):
            raise InputError(f"TP sizes {list(self.tps)}; accepted: integers ≥ 1, e.g. 1,2,4,8")
        bad = [p for p in self.precisions if p not in planner.PLAN_PRECISIONS]
        if not self.precisions or bad:
            raise InputError(
                f"precision {', '.join(bad) or '(none)'}; accepted: "
                + ", ".join(planner.PLAN_PRECISIONS)
            )


_FLOATS: Final = ("peak_qps", "avg_qps", "input_tokens", "output_tokens", "headroom")
_FLOATS_ALL: Final = (*_FLOATS, "kv_memory_fraction")


def _items(value: Any) -> list[str]:
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return [str(v).strip() for v in value if str(v).strip()]


def _coerce(key: str, value: Any) -> Any:
    what = {v: k for k, v in PARAMS.items()}.get(key, key)
    if key in _FLOATS_ALL:
        number = finite_number(value) if not isinstance(value, str) else _parse_float(value)
        if number is None:
            raise InputError(f"{what} is {value!r}; accepted: a number")
        return number
    if key == "max_batch_size":
        number = _parse_float(str(value))
        if number is None or number != int(number):
            raise InputError(f"{what} is {value!r}; accepted: a whole number")
        return int(number)
    if key == "tps":
        out = []
        for item in _items(value):
            if not item.isdigit():
                raise InputError(f"tp {item!r} is not a whole number; accepted: e.g. 1,2,4,8")
            out.append(int(item))
        return tuple(sorted(set(out)))
    if key in ("gpus", "precisions"):
        return tuple(dict.fromkeys(i.lower() if key == "precisions" else i for i in _items(value)))
    if key in ("model", "lengths", "slo", "kv_dtype"):
        return str(value).strip()
    raise InputError(f"unknown plan input {key!r}")


def _parse_float(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class PlanSelection:
    """What the Plan page is asked: the spec its URL names, or the problem with it (the page
    then shows the message and the default spec's form)."""

    spec: PlanSpec = field(default_factory=PlanSpec)
    problem: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> PlanSelection:
        """The spec the URL's parameters (:data:`PARAMS`) name; none → the defaults."""
        values = {PARAMS[k]: params.get(k) for k in PARAMS if params.get(k) not in (None, "")}
        if not values:
            return cls()
        try:
            return cls(spec=PlanSpec.from_values(values))
        except InputError as exc:
            return cls(problem=exc.message)

    def params(self) -> dict[str, str]:
        """The URL's parameters of this spec (what the page writes back)."""
        return spec_params(self.spec)


def spec_params(spec: PlanSpec) -> dict[str, str]:
    """``spec`` as the Plan page's URL parameters."""
    out: dict[str, str] = {}
    for param, key in PARAMS.items():
        value = getattr(spec, key)
        if isinstance(value, tuple):
            text = ",".join(str(v) for v in value)
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        if text:
            out[param] = text
    return out


@dataclass(frozen=True)
class PlanView:
    """Everything the Plan page (and the planning-review report) shows for a spec.

    ``problem``: why nothing was computed (a bad input); then only the choices are set.
    ``options``: ``analysis.plan.PlanOption`` rows, serving ones cheapest first; ``best``: the
    cheapest serving one. ``memory``: GPU × TP × precision memory rows. ``measurements``: the
    measured capacities used; ``skipped``: measured series that gave none, with why.
    """

    spec: PlanSpec
    models: tuple[str, ...] = ()
    gpu_names: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    problem: str | None = None
    profile: slo.SloProfile | None = None
    lengths: planner.Lengths | None = None
    demand: planner.Demand | None = None
    engine: planner.Engine | None = None
    options: tuple[planner.PlanOption, ...] = ()
    best: planner.PlanOption | None = None
    memory: tuple[planner.MemoryRow, ...] = ()
    prices: Mapping[str, float] = field(default_factory=dict)
    measurements: tuple[planner.Measurement, ...] = ()
    skipped: tuple[str, ...] = ()
    runs_read: int = 0
    saved: tuple[str, ...] = ()

    @property
    def any_measured(self) -> bool:
        return any(o.label == "measured" for o in self.options)


# --- the builders --------------------------------------------------------------------------------


def page_view(store: Store, selection: PlanSelection) -> PlanView:
    """The Plan page for ``selection``: the plan of its spec, or the choices and its problem."""
    if selection.problem is not None:
        return replace(_choices(store, selection.spec), problem=selection.problem)
    try:
        return plan_view(store, selection.spec)
    except (InputError, ConfigError) as exc:
        text = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return replace(_choices(store, selection.spec), problem=text)


@dataclass(frozen=True)
class _Reads:
    """What every plan reads besides the runs: the catalogue's models and GPUs and the SLO
    profiles ({name: entry}, unset columns dropped), the prices, the saved plans' names."""

    models: Mapping[str, Mapping[str, Any]]
    gpus: Mapping[str, Mapping[str, Any]]
    profiles: Mapping[str, Mapping[str, Any]]
    prices: Mapping[str, float]
    saved: tuple[str, ...]


#: :class:`_Reads` per (store, catalogue / prices / plans fingerprints), newest last.
_READS: OrderedDict[tuple[Any, ...], _Reads] = OrderedDict()
READS_MEMO: Final = 8


def _by_name(store: Store, kind: str) -> dict[str, dict[str, Any]]:
    return {
        str(e["name"]): {k: v for k, v in e.items() if v is not None and k != "origin"}
        for e in catalog.entries(store, kind)
    }


def _reads(store: Store, model: str) -> tuple[_Reads, tuple[Any, ...]]:
    """(:class:`_Reads`, the fingerprint of ``model``'s runs): one fingerprint read
    (``store.plans.plan_state``), the tables themselves only when it changed."""
    state = plans_store.plan_state(store, model)
    key = (str(store.engine.url), state["catalogue"], state["prices"], state["plans"])
    if key in _READS:
        _READS.move_to_end(key)
        return _READS[key], state["runs"]
    reads = _Reads(
        models=_by_name(store, "models"),
        gpus=_by_name(store, "gpus"),
        profiles={
            str(e["name"]): {k: v for k, v in e.items() if k != "origin"}
            for e in catalog.entries(store, "slo_profiles")
        },
        prices=plans_store.prices(store),
        saved=tuple(plans_store.plan_names(store)),
    )
    _READS[key] = reads
    while len(_READS) > READS_MEMO:
        _READS.popitem(last=False)
    return reads, state["runs"]


def _choices(store: Store, spec: PlanSpec, reads: _Reads | None = None) -> PlanView:
    r = reads if reads is not None else _reads(store, spec.model)[0]
    return PlanView(
        spec=spec,
        models=tuple(r.models),
        gpu_names=tuple(r.gpus),
        profiles=tuple(r.profiles),
        saved=r.saved,
    )


def plan_view(store: Store, spec: PlanSpec) -> PlanView:
    """The plan of ``spec`` against the store; an InputError names an unknown model, GPU, SLO
    profile or run, or lengths the store cannot give. Every read in one transaction (one
    snapshot, one connection)."""
    spec.check()
    with store.pinned() as pinned:
        return _plan_view(pinned, spec)


def _plan_view(store: Store, spec: PlanSpec) -> PlanView:
    reads, runs_state = _reads(store, spec.model)
    model_entries, gpu_entries_by_name, profiles = reads.models, reads.gpus, reads.profiles
    view = _choices(store, spec, reads)
    if spec.model not in view.models:
        raise InputError(
            f"unknown model {spec.model!r}; the catalogue has: {', '.join(view.models)}",
            hint="servescope plan --model NAME (seeds/models.toml)",
        )
    unknown = [g for g in spec.gpus if g not in view.gpu_names]
    if unknown:
        raise InputError(
            f"unknown GPU {unknown[0]!r}; the catalogue has: {', '.join(view.gpu_names)}",
            hint="--gpu takes catalogue names (seeds/gpus.toml)",
        )
    if spec.slo not in profiles:
        raise InputError(
            f"unknown SLO profile {spec.slo!r}; profiles: {', '.join(profiles)}",
            hint="--slo takes a profile of seeds/slo_profiles.toml or one saved on Compare",
        )
    profile = slo.SloProfile.from_entry(profiles[spec.slo])
    model_entry = model_entries[spec.model]
    shape = ModelShape.from_entry(model_entry)
    names = spec.gpus or tuple(
        n for n, e in gpu_entries_by_name.items() if e.get("kind") in (None, "gpu")
    )
    gpu_entries = [gpu_entries_by_name[g] for g in names]
    gpus = tuple(GpuSpec.from_entry(e) for e in gpu_entries if e.get("memory_bytes"))
    lengths = resolve_lengths(store, spec)
    demand = planner.Demand(spec.peak_qps, spec.avg_qps, spec.headroom)
    engine = planner.Engine(
        kv_memory_fraction=spec.kv_memory_fraction,
        max_batch_size=spec.max_batch_size,
        kv_dtype=spec.kv_dtype,
    )
    prices = reads.prices
    measurements, skipped, n_runs = memo_measured(store, spec.model, gpus, profile, runs_state)
    targets_at = _slo_targets(profile)

    def predict(
        gpu: GpuSpec,
        tp: int,
        precision: str,
        params: Mapping[str, Any],
        workload: tuple[float, float],
    ) -> float:
        return planner.predicted_capacity(
            gpu, shape, precision, _hashable(params), workload, targets_at(workload[0])
        )

    inputs = planner.PlanInputs(
        shape=shape,
        gpus=gpus,
        tps=spec.tps,
        precisions=spec.precisions,
        demand=demand,
        lengths=lengths,
        engine=engine,
        prices=prices,
        model_config=_model_config(engine),
    )
    options = tuple(planner.plan_options(inputs, measurements, predict))
    rows = {(o.precision, o.gpu, o.tp): o.memory for o in options}
    memory = tuple(rows[(p, g.name, tp)] for p in spec.precisions for g in gpus for tp in spec.tps)
    return replace(
        view,
        profile=profile,
        lengths=lengths,
        demand=demand,
        engine=engine,
        options=options,
        best=planner.best_option(options),
        memory=memory,
        prices=prices,
        measurements=tuple(measurements),
        skipped=tuple(skipped),
        runs_read=n_runs,
    )


def _model_config(engine: planner.Engine) -> str:
    return (
        f"performance model · kv_memory_fraction={engine.kv_memory_fraction:g} "
        f"max_batch_size={engine.max_batch_size}"
    )


def _hashable(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    out = []
    for k, v in sorted(params.items()):
        if v is None:
            continue
        out.append((str(k), v if isinstance(v, str | int | float | bool) else json.dumps(v)))
    return tuple(out)


def _slo_targets(profile: slo.SloProfile) -> Any:
    def at(input_mean: float) -> planner.SloTargets:
        return planner.slo_targets(
            profile.ttft_ms,
            profile.tpot_ms,
            profile.percentile,
            input_mean,
            ttft_base_ms=profile.ttft_base_ms,
            ttft_ms_per_1k_input=profile.ttft_ms_per_1k_input,
        )

    return at


# --- lengths -------------------------------------------------------------------------------------


def resolve_lengths(store: Store, spec: PlanSpec) -> planner.Lengths:
    """The request lengths ``spec`` names: typed, a stored run's means, or a ``watch`` target's
    (prompt and generation tokens over finished requests, from its counters' growth over every
    stored sample, a counter reset counted from 0)."""
    if spec.lengths == "typed":
        return planner.Lengths(spec.input_tokens, spec.output_tokens)
    kind, _, name = spec.lengths.partition(":")
    if kind == "run":
        return _run_lengths(store, name)
    return _metrics_lengths(store, name)


def _run_lengths(store: Store, run_id: str) -> planner.Lengths:
    rows = runs_table.run_aggregates(store, [run_id])
    if rows.empty:
        raise InputError(
            f"no run {run_id!r} in this store to take the lengths from",
            hint="lengths=run:<run id> names a stored run (servescope bench stores one)",
        )
    row = {str(k): v for k, v in rows.iloc[0].items()}
    ok = finite_number(row.get("ok")) or 0.0
    inp, out = finite_number(row.get("input_tokens")), finite_number(row.get("output_tokens"))
    if ok < 1 or not inp or not out:
        raise InputError(
            f"run {run_id!r} has no successful requests with token counts to take lengths from"
        )
    return planner.Lengths(inp / ok, out / ok, source=f"run {run_id} ({int(ok)} requests)")


def _growth(df: pd.DataFrame) -> dict[str, float]:
    """Each cumulative series' growth over all its samples (a drop is a restart from 0)."""
    growth: dict[str, float] = {}
    for metric, group in df.groupby("metric"):
        values = pd.to_numeric(group.sort_values("ts")["value"]).dropna().to_numpy(dtype=float)
        if len(values) >= 2:
            growth[str(metric)] = counter_increase(values)
    return growth


def _metrics_lengths(store: Store, target: str) -> planner.Lengths:
    """Mean lengths of a watched target's finished requests: from its prompt/output length
    histograms (``_sum``/``_count`` count finished requests only) when it exports them, else
    from its token counters over its finished-request counter (which also count the tokens of
    requests still running at either end of the watch: slightly biased up)."""
    hists = sample_series.engine_series(
        store, since=-1e18, metrics=LENGTH_HISTOGRAM_SERIES, targets=[target]
    )
    h = _growth(hists)
    n_in, n_out = h.get("prompt_length_tokens_count", 0.0), h.get("output_length_tokens_count", 0.0)
    if n_in >= 1 and n_out >= 1 and h.get("prompt_length_tokens_sum", 0.0) > 0:
        p99 = {}
        for hist in ("prompt_length_tokens", "output_length_tokens"):
            rows = sample_series.engine_histogram_series(store, target, hist, since=-1e18)
            rows.insert(0, "target", target)
            pairs = (
                histogram_windows.bucket_increase(
                    rows, hist, start=float(rows["ts"].min()), end=float(rows["ts"].max())
                )
                if len(rows["ts"].unique()) >= 2
                else []
            )
            p99[hist] = histogram_quantile(0.99, pairs) if pairs else None
        return planner.Lengths(
            h["prompt_length_tokens_sum"] / n_in,
            h.get("output_length_tokens_sum", 0.0) / n_out,
            input_p99=p99["prompt_length_tokens"],
            output_p99=p99["output_length_tokens"],
            source=f"metrics {target} ({n_in:.0f} finished requests, length histograms)",
        )
    growth = _growth(
        sample_series.engine_series(store, since=-1e18, metrics=LENGTH_COUNTERS, targets=[target])
    )
    finished = growth.get("requests_finished_total", 0.0)
    prompt = growth.get("prompt_tokens_total", 0.0)
    generated = growth.get("generation_tokens_total", 0.0)
    if finished < 1 or prompt <= 0 or generated <= 0:
        raise InputError(
            f"the store holds no prompt/generation token counters with finished requests for "
            f"target {target!r}",
            hint="servescope watch --metrics URL records them from the engine's /metrics",
        )
    return planner.Lengths(
        prompt / finished,
        generated / finished,
        source=f"metrics {target} ({finished:.0f} finished requests)",
    )


# --- measured capacities -------------------------------------------------------------------------


def _gpu_lookup(gpus: Sequence[GpuSpec]) -> dict[str, str]:
    out: dict[str, str] = {}
    for g in gpus:
        out[g.name.lower()] = g.name
        if g.display_name:
            out[g.display_name.lower()] = g.name
    return out


def _run_tp(row: Mapping[str, Any]) -> int:
    params = row.get("engine_params")
    if isinstance(params, str):
        try:
            params = json.loads(params) if params else {}
        except json.JSONDecodeError:
            params = {}
    tp = finite_number(params.get("tensor_parallel")) if isinstance(params, Mapping) else None
    if tp is None:
        tp = finite_number(row.get("gpu_count"))
    return max(1, int(tp or 1))


def _params(row: Mapping[str, Any]) -> dict[str, Any]:
    params = row.get("engine_params")
    if isinstance(params, str):
        try:
            params = json.loads(params) if params else {}
        except json.JSONDecodeError:
            return {}
    return dict(params) if isinstance(params, Mapping) else {}


#: Measured capacities kept per (store, model, GPUs, profile, runs' fingerprint), newest last.
_MEASURED: OrderedDict[tuple[Any, ...], tuple[list[planner.Measurement], list[str], int]] = (
    OrderedDict()
)
MEASURED_MEMO: Final = 64


def memo_measured(
    store: Store,
    model: str,
    gpus: Sequence[GpuSpec],
    profile: slo.SloProfile,
    runs_state: tuple[Any, ...],
) -> tuple[list[planner.Measurement], list[str], int]:
    """:func:`measured_capacities`, remembered while ``model``'s runs are unchanged
    (``runs_state``: their fingerprint, ``store.plans.plan_state``): a planning query that
    changes the demand, lengths, prices or options reuses the measurements instead of
    re-reading every run's figures and SLO attainment."""
    key = (str(store.engine.url), model, tuple(g.name for g in gpus), profile, runs_state)
    if key in _MEASURED:
        _MEASURED.move_to_end(key)
        return _MEASURED[key]
    result = measured_capacities(store, model, gpus, profile)
    _MEASURED[key] = result
    while len(_MEASURED) > MEASURED_MEMO:
        _MEASURED.popitem(last=False)
    return result


def measured_capacities(
    store: Store, model: str, gpus: Sequence[GpuSpec], profile: slo.SloProfile
) -> tuple[list[planner.Measurement], list[str], int]:
    """(measured capacities, series that gave none with why, runs read) of ``model``'s runs on
    ``gpus`` under ``profile`` (see the module docstring)."""
    listing = runs_table.list_runs(store, limit=RUN_LIMIT, models=[model])
    if listing.empty:
        return [], [], 0
    lookup = _gpu_lookup(gpus)
    recs = [{str(k): v for k, v in r.items()} for r in listing.to_dict("records")]
    keyed: dict[str, tuple[str, int, str]] = {}
    for r in recs:
        gpu = lookup.get(str(r.get("gpu_name") or "").lower())
        precision = planner.plan_precision(r.get("precision"))
        if gpu is None or precision is None or r.get("status") == "running":
            continue
        keyed[str(r["run_id"])] = (gpu, _run_tp(r), precision)
    if not keyed:
        return [], [], len(recs)
    rows = compare_view.read_rows(store, list(keyed), profile, "configuration")
    sweeps = _sweep_names(store, {str(s) for s in rows.get("sweep_id", []) if _text(s)})
    out: list[planner.Measurement] = []
    skipped: list[str] = []
    groups: dict[tuple[str, tuple[str, int, str]], list[int]] = {}
    for i, (run_id, series) in enumerate(zip(rows["run_id"], rows["series"], strict=True)):
        groups.setdefault((str(series), keyed[str(run_id)]), []).append(i)
    for (series, (gpu, tp, precision)), index in sorted(groups.items()):
        group = rows.iloc[index]
        cap = compare_view.capacity(group)[0]
        runs = [str(r) for r in group["run_id"]]
        where = f"{series} on {tp}× {gpu} ({planner.PRECISION_LABELS[precision]})"
        value, upper, how = _capacity_rps(group, cap)
        if value is None:
            skipped.append(f"{where}: {how}")
            continue
        out.append(
            planner.Measurement(
                config=str(series),
                gpu=gpu,
                tp=tp,
                precision=precision,
                capacity_rps=value,
                source=_source(group, runs, sweeps),
                engine_params=_hashable(_params({"engine_params": group["engine_params"].iloc[0]})),
                input_mean=_mean_tokens(group, "input_tokens"),
                output_mean=_mean_tokens(group, "output_tokens"),
                note=how,
                capacity_upper_rps=upper,
            )
        )
    return out, skipped, len(recs)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(value)


def _sweep_names(store: Store, ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    listing = sweeps_store.sweep_list(store)
    return {
        str(r["sweep_id"]): _text(r.get("name")) or str(r["sweep_id"])
        for r in listing.to_dict("records")
        if str(r["sweep_id"]) in ids
    }


def _source(group: pd.DataFrame, runs: list[str], sweeps: Mapping[str, str]) -> str:
    shown = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
    ids = {_text(s) for s in group.get("sweep_id", [])} - {""}
    word = "run" if len(runs) == 1 else "runs"
    if len(ids) == 1:
        sweep_id = next(iter(ids))
        return f"sweep {sweeps.get(sweep_id, sweep_id)} ({word} {shown})"
    return f"{word} {shown}"


def _mean_tokens(group: pd.DataFrame, column: str) -> float | None:
    if "ok" not in group or column not in group:
        return None
    ok = pd.to_numeric(group["ok"], errors="coerce").fillna(0).sum()
    tokens = pd.to_numeric(group[column], errors="coerce").fillna(0).sum()
    return float(tokens / ok) if ok > 0 and tokens > 0 else None


def _capacity_rps(
    group: pd.DataFrame, cap: compare_view.SeriesCapacity
) -> tuple[float | None, float | None, str]:
    """(req/s per replica, the first failing load in req/s, how) of one series' SLO capacity, or
    (None, None, why not). The capacity lies between the two: a rate series' last passing and
    first failing rates; a closed-loop series' request throughput at its highest passing and
    first failing concurrency (a coarse concurrency grid makes the first a loose lower bound)."""
    c = cap.capacity
    if c.measured is None:
        return None, None, c.note or "no load met the SLO"
    note = "no failing load measured: at least this" if c.first_failing is None else ""
    if cap.load_kind == "rate":
        return c.measured, c.first_failing, note
    if cap.load_kind == "concurrency":
        thr = _throughput_at(group, c.measured)
        if thr is None:
            return None, None, "no request throughput at the highest passing concurrency"
        upper = None if c.first_failing is None else _throughput_at(group, c.first_failing)
        how = f"request throughput at concurrency {c.measured:g}, the highest meeting the SLO"
        if upper is not None and upper > thr:
            how += f" (at {c.first_failing:g}, which failed: {upper:.3g} req/s)"
        return thr, upper, "; ".join(n for n in (how, note) if n)
    return None, None, "the runs record no load (rate or concurrency)"


def _throughput_at(group: pd.DataFrame, load: float) -> float | None:
    at = group[pd.to_numeric(group["load"]) == load]
    thr = finite_number(at["request_throughput"].max()) if not at.empty else None
    return thr if thr is not None and thr > 0 else None


# --- tables (the page, the command and the report print the same) --------------------------------


def _money(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"${value:,.{digits}f}"


def options_table(view: PlanView) -> pd.DataFrame:
    """One row per option: configuration, GPU, TP, precision, capacity per replica with where
    it comes from, replicas, GPUs, cost per hour and per 1M tokens, predicted vs measured."""
    rows = []
    for o in view.options:
        rows.append(
            {
                "Configuration": o.config,
                "GPU": o.gpu,
                "TP": o.tp,
                "Precision": planner.PRECISION_LABELS.get(o.precision, o.precision),
                "Capacity / replica (req/s)": o.capacity_rps,
                "From": o.label,
                "Replicas": o.replicas,
                "GPUs": o.gpus,
                "$/GPU-hour": o.usd_per_gpu_hour,
                "$/hour": o.cost_per_hour,
                "$/1M output tokens": o.cost_per_1m_output,
                "$/1M tokens (in+out)": o.cost_per_1m_total,
                "Predicted (req/s)": o.predicted_rps,
                "Measured (req/s)": o.measured_rps,
                "First failing (req/s)": o.measured_upper_rps,
                "Error": o.error,
                "Source": o.source,
                "Note": o.note,
            }
        )
    return pd.DataFrame(rows)


def side_by_side(view: PlanView) -> pd.DataFrame:
    """GPUs needed per GPU × TP (rows) and precision (columns), side by side: the fewest of the
    cell's options, with where its capacity comes from ("12 (measured)"), or why none serves
    ("does not fit: weights", "no load meets the SLO")."""
    cells: dict[tuple[str, int], dict[str, str]] = {}
    best: dict[tuple[str, int, str], planner.PlanOption] = {}
    for o in view.options:
        key = (o.gpu, o.tp, o.precision)
        held = best.get(key)
        if held is None or (o.gpus is not None and (held.gpus is None or o.gpus < held.gpus)):
            best[key] = o
    for (gpu, tp, precision), o in best.items():
        if o.gpus is not None:
            text = f"{o.gpus} ({o.label})"
        elif o.label == "does not fit":
            text = f"does not fit: {o.memory.reason}"
        else:
            text = "no load meets the SLO"
        cells.setdefault((gpu, tp), {})[planner.PRECISION_LABELS.get(precision, precision)] = text
    labels = [planner.PRECISION_LABELS.get(p, p) for p in view.spec.precisions]
    rows = [
        {"GPU": gpu, "TP": tp, **{label: row.get(label, "") for label in labels}}
        for (gpu, tp), row in sorted(cells.items())
    ]
    return pd.DataFrame(rows, columns=["GPU", "TP", *labels])


def memory_table(view: PlanView) -> pd.DataFrame:
    """One row per precision × GPU × TP: weights, KV bytes per token, KV budget and max
    concurrent sequences per GPU, and whether it fits."""
    rows = []
    for m in view.memory:
        rows.append(
            {
                "Precision": planner.PRECISION_LABELS.get(m.precision, m.precision),
                "GPU": m.gpu,
                "TP": m.tp,
                "Weights (GiB)": round(m.weight_gib, 2),
                "Weights / GPU (GiB)": round(m.weight_gib_per_gpu, 2),
                "KV / token / GPU (KiB)": round(m.kv_bytes_per_token / 1024, 1),
                "KV budget / GPU (GiB)": round(m.kv_budget_gib, 2),
                "Max sequences": m.max_sequences,
                "Fits": "yes" if m.fits else m.reason,
            }
        )
    return pd.DataFrame(rows)


def headline(view: PlanView) -> str:
    """One sentence: the cheapest option and what it needs, or why none serves."""
    b, d = view.best, view.demand
    if b is None or d is None or b.gpus is None:
        return "No option serves this load: see why below."
    cost = f", {_money(b.cost_per_hour)}/hour" if b.cost_per_hour is not None else ""
    cap = b.capacity_rps or 0.0
    return (
        f"{b.gpus} × {b.gpu} ({b.replicas} replica{'s' if b.replicas != 1 else ''} of TP {b.tp}, "
        f"{planner.PRECISION_LABELS.get(b.precision, b.precision)}{cost}) serve "
        f"{d.peak_qps:g} req/s peak + {d.headroom:.0%} headroom at {cap:.3g} req/s per replica "
        f"({b.label})"
    )
