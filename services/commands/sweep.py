"""``servescope sweep SPEC.toml``: measure an engine over a grid of parameters, find each
configuration's SLO capacity, and print the recommendation.

Per point (and repeat) of the spec's grid: launch the engine (``collectors.engine_launcher``:
a template or a custom command, its own process group, a free port, its log under the sweep's
folder), wait for health, run the load (fixed levels, or the SLO-capacity search of
``analysis.capacity_search``, one ``run_bench`` per level: live /metrics and GPU collection as
``bench`` does), stop the engine, and record the point (``store.sweep_records``). A point whose
engine fails to start, times out, runs out of memory or crashes is recorded with its status,
reason and log tail; the sweep goes on. ``--resume`` measures only what is left, each resumed
point as a new attempt with runs of its own (the earlier attempt kept in ``attempts``); Ctrl-C,
SIGTERM or any failure stops the engine, records the point as interrupted and the sweep too
(exit 130 / 143). Each engine's process group is recorded at launch, so ``--resume`` and
``--cleanup`` stop an engine left by a sweep killed outright. A level judged from fewer requests
than its percentile needs is inconclusive (``analysis.slo.judged``). Secrets in the engine's
environment and arguments are shown and stored masked. The format of the spec and each status:
docs/tune.md.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shlex
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

import seeds
from analysis import engine_series, slo, sweep_order
from analysis.capacity import ModelShape
from analysis.capacity_search import (
    Probe,
    SearchPlan,
    next_load,
    sample_requests,
    search_result,
)
from analysis.metrics import min_samples_for
from analysis.perf_model import GpuSpec
from analysis.sweep_spec import (
    CLIENT_PARAMS,
    Point,
    SweepSpec,
    engine_params,
    expand,
    format_value,
    parse_spec,
)
from collectors import engine_launcher as launcher
from collectors.endpoint_identity import identify_sync
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import BenchInterrupted, run_bench
from collectors.loadgen.workloads import parse_workload
from collectors.redact import argv_secrets, redact, redact_argv
from errors import ConfigError, EndpointError, ExitCode, InputError
from services.views.compare import read_rows
from store import catalog, ingest, runs_table, sample_timelines
from store import sweep_records as records
from store.db import Store
from store.lifecycle import open_store

EPILOG = """\
examples:
  servescope sweep examples/sim-sweep.toml
  servescope sweep examples/sim-sweep.toml --dry-run      # every launch command and the load plan
  servescope sweep examples/sim-sweep.toml --resume       # the latest interrupted sweep of its name
  servescope sweep examples/sim-sweep.toml --resume SWEEP_ID
  servescope sweep --cleanup                                # engines left by a killed sweep
exit codes: 0 every point completed · 1 some points failed (recorded with their reason and
  log tail) · 2 bad spec or store (nothing stored) · 3 no point completed · 130 Ctrl-C
  · 143 SIGTERM.
The spec format and what each point status means: docs/tune.md.
"""

#: Placeholder shown for the port in --dry-run when each launch picks a free one.
PORT_PLACEHOLDER = "PORT"


@dataclass
class PointResult:
    """What one point (repeat) came to: the ``sweep_points`` row."""

    row: dict[str, Any]
    run_ids: list[str] = field(default_factory=list)


@dataclass
class Sweep:
    """A sweep being run: the spec, its points, where rows and logs go."""

    spec: SweepSpec
    points: list[Point]
    store: Store
    sweep_id: str
    log_dir: Path
    profile: slo.SloProfile
    progress: bool = True
    out: TextIO = sys.stdout
    environ: Mapping[str, str] | None = None

    @property
    def need(self) -> int:
        """The fewest requests a level needs to judge the SLO's percentile."""
        return min_samples_for(self.profile.percentile)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)


# --- spec → launch plans -----------------------------------------------------------------------


def load_spec(path: str, env: Mapping[str, str] | None = None) -> SweepSpec:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"sweep spec {path!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"sweep spec {path!r} cannot be read: {exc}") from None
    return parse_spec(text, env=os.environ if env is None else env)


def launch_plan(spec: SweepSpec, point: Point, port: int | str) -> launcher.LaunchPlan:
    """The launch of ``point`` (InputError when the template cannot express its params)."""
    e = spec.engine
    return launcher.render(
        template=e.template,
        command=e.command,
        params=engine_params(point.params),
        model=e.model,
        port=port,
        binary=e.binary,
        args=e.args,
        env=e.env,
    )


def stored_engine_params(spec: SweepSpec, point: Point) -> dict[str, Any]:
    """runs.engine_params of a point's runs: its engine params in the normalised vocabulary.
    llama.cpp's ``ctx_size`` is the TOTAL context of its slots, not a request's limit: it is
    kept as ``ctx_size``, with ``max_model_len`` = ctx_size / slots beside it."""
    params = engine_params(point.params)
    total, slots = params.get("ctx_size"), params.get("max_batch_size")
    llama = spec.engine.template == "llamacpp"
    if llama and isinstance(total, int) and isinstance(slots, int) and slots > 0:
        params.setdefault("max_model_len", total // slots)
    return params


def check_catalog_names(spec: SweepSpec, store: Store | None) -> list[str]:
    """The workload and the SLO profile must exist: in the store's catalog (a ConfigError
    naming the valid ones), or, without a store (--dry-run), among the seeds (a note only)."""
    notes = []
    for kind, name in (("workloads", spec.load.workload), ("slo_profiles", spec.slo.profile)):
        if store is not None:
            catalog.get(store, kind, name)
        elif name not in {e["name"] for e in seeds.entries(kind)}:
            notes.append(f"note: {kind[:-1]} {name!r} is not in the seeded catalog")
    return notes


def validate(spec: SweepSpec, points: Sequence[Point]) -> dict[str, launcher.LaunchPlan]:
    """Every point's launch command, rendered once, and every point's load, checked as ``bench``
    checks its flags: a bad template, param or load fails here, before anything is launched or
    stored."""
    for p in points:
        levels = _fixed_levels(spec, p) or (spec.load.search.low if spec.load.search else 1.0,)
        cfg = _bench_config(spec, "validate", p, 0, "http://127.0.0.1:1", levels, "validate")
        try:
            cfg.validated()
        except InputError as exc:
            raise InputError(
                f"[load] of point {p.point_id} ({p.label}): {exc.message}", hint=exc.hint
            ) from None
    if spec.engine.endpoint:
        return {}
    port: int | str = spec.engine.port or PORT_PLACEHOLDER
    return {p.point_id: launch_plan(spec, p, port) for p in points}


def stored_spec(spec: SweepSpec) -> dict[str, Any]:
    """The spec as stored in ``sweeps.spec``: environment names only (``SweepSpec.to_json``),
    and the secret values of the command line (after ``--api-key``, ``--hf-token``,
    ``--token``, a flag the template marks, in ``NAME_KEY=…``) masked."""
    out = spec.to_json()
    e = spec.engine
    flags = launcher.TEMPLATES[e.template].secret_flags if e.template in launcher.TEMPLATES else ()
    secrets = [*e.env.values(), *argv_secrets(e.args, flags)]
    if e.command:
        with contextlib.suppress(ValueError):
            secrets += argv_secrets(shlex.split(e.command), flags)
    engine = out["engine"]
    engine["args"] = redact_argv(list(e.args), flags)
    for key in ("command", "endpoint", "model", "binary"):
        if isinstance(engine.get(key), str):
            engine[key] = redact(engine[key], secrets)
    return dict(out)


def dry_run(spec: SweepSpec, points: Sequence[Point], out: TextIO) -> int:
    plans = validate(spec, points)
    for note in check_catalog_names(spec, None):
        print(note, file=out)
    profile = next((e for e in seeds.entries("slo_profiles") if e["name"] == spec.slo.profile), {})
    if few := sample_note(spec, float(profile.get("percentile", 99.0))):
        print(few, file=out)
    engine = spec.engine.endpoint or spec.engine.label
    print(
        f"sweep {spec.name}: {len(points)} point(s) × {spec.repeats} repeat(s), mode "
        f"{spec.mode}, engine {engine}, SLO {spec.slo.profile}",
        file=out,
    )
    print(f"load: {spec.load.describe()}", file=out)
    for p in points:
        print(f"\n{p.point_id}  {p.label}", file=out)
        if p.point_id in plans:
            print(f"  $ {plans[p.point_id].display}", file=out)
        else:
            print(f"  endpoint {spec.engine.endpoint} (already running)", file=out)
        levels = _fixed_levels(spec, p)
        if levels:
            print(f"  load: {spec.load.kind} {', '.join(f'{v:g}' for v in levels)}", file=out)
    print("\n--dry-run: nothing launched, nothing stored", file=out)
    return ExitCode.OK


# --- one point ---------------------------------------------------------------------------------


def _fixed_levels(spec: SweepSpec, point: Point) -> tuple[float, ...]:
    kind = spec.load.kind
    if kind in point.params:
        return (float(point.params[kind]),)
    return spec.load.levels


def _bench_config(
    spec: SweepSpec,
    sweep_id: str,
    point: Point,
    repeat: int,
    url: str,
    levels: Sequence[float],
    run_id: str,
    need: int = 0,
) -> BenchConfig:
    """The bench of one or more levels of a point; a timed rate level too short to send
    ``need`` requests (the percentile's minimum sample) runs that many requests instead."""
    load = spec.load
    client = {k: v for k, v in point.params.items() if k in CLIENT_PARAMS}
    conc = tuple(round(v) for v in levels) if load.kind == "concurrency" else ()
    rate = tuple(float(v) for v in levels) if load.kind == "rate" else ()
    requests, duration = load.requests, load.duration_s
    if (extended := sample_requests(load.kind, rate, duration, need)) is not None:
        requests, duration = extended, None
    return BenchConfig(
        endpoint=url,
        api=load.api,
        model=spec.engine.model if spec.engine.endpoint else None,
        workload=load.workload,
        concurrency=conc,
        rate=rate,
        arrival=load.arrival,
        requests=requests,
        duration_s=duration,
        warmup=load.warmup,
        max_tokens=client.get("max_tokens", load.max_tokens),
        slo=spec.slo.profile,
        engine_params=stored_engine_params(spec, point),
        name=f"{spec.name} {point.label}",
        seed=load.seed,
        timeout_s=load.timeout_s,
        run_id=run_id,
        sweep_id=sweep_id,
        tags=("sweep", spec.name),
        notes=f"servescope sweep {sweep_id}: point {point.point_id} ({point.label}), "
        f"repeat {repeat}",
    )


def _evaluate(sw: Sweep, run_ids: Sequence[str]) -> dict[str, tuple[bool | None, float | None]]:
    """Each run's SLO verdict and worst ratio (measured / limit), as Compare judges it, but
    accounting for the sample (``analysis.slo.judged``): a percentile from fewer requests than
    it needs is *inconclusive* (None), never a pass or a fail; the sweep says so."""
    if not run_ids:
        return {}
    rows = read_rows(sw.store, run_ids, sw.profile, "configuration")
    out: dict[str, tuple[bool | None, float | None]] = {}
    for rec in rows.to_dict("records"):
        verdicts = rec.get("verdicts")
        results = list(verdicts) if isinstance(verdicts, list) else []
        passed = slo.judged(results) if results else None
        if (
            passed is None
            and results
            and (why := slo.inconclusive_reason(results, sw.profile.percentile))
        ):
            sw.say(f"  {rec['run_id']}: inconclusive: {why}")
        ratio = rec.get("worst_ratio")
        out[str(rec["run_id"])] = (
            passed,
            None if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)) else ratio,
        )
    return out


def _tag_runs(
    sw: Sweep, run_ids: Sequence[str], point: Point, repeat: int, command: str, attempt: int
) -> None:
    """client_params of each run gets the launch command and the point: relaunch as it ran."""
    for run_id in run_ids:
        rec = runs_table.run_record(sw.store, run_id)
        if rec is None:
            continue
        cp = rec.get("client_params")
        cp = dict(cp) if isinstance(cp, Mapping) else {}
        cp["launch_command"] = command
        cp["sweep_point"] = {
            "sweep_id": sw.sweep_id,
            "point_id": point.point_id,
            "repeat": repeat,
            "attempt": attempt,
            "params": dict(point.params),
        }
        ingest.update_run(sw.store, run_id, client_params=cp)


def _preemptions_per_1k(store: Store, run_id: str, requests: int) -> float | None:
    """Increase of preemptions_total over the run's span, per 1,000 requests (None: no data)."""
    src = sample_timelines.run_sources(store, run_id)
    if not src or not src.get("targets") or src.get("since") is None or not requests:
        return None
    tl = sample_timelines.engine_timeline(
        store,
        src["targets"],
        since=float(src["since"]),
        until=float(src["until"]),
        metrics=("preemptions_total",),
    )
    if tl.empty:
        return None
    total = sum(
        engine_series.counter_increase(part.sort_values("ts")["max_value"].to_numpy())
        for _, part in tl.groupby("target")
    )
    return 1000.0 * total / requests


def _guard_figures(
    sw: Sweep, run_ids: Sequence[str], at_capacity: str | None, requests: Mapping[str, int]
) -> tuple[float | None, float | None]:
    """(peak GPU memory fraction over the runs, preemptions per 1,000 requests at capacity)."""
    peak = None
    if run_ids:
        states = sample_timelines.run_states(sw.store, run_ids)
        have = states[states["gpu_samples"] > 0]["mem_peak_fraction"].dropna()
        peak = float(have.max()) if not have.empty else None
    pre = None
    if at_capacity is not None:
        pre = _preemptions_per_1k(sw.store, at_capacity, requests.get(at_capacity, 0))
    return peak, pre


def _measure(
    sw: Sweep,
    point: Point,
    repeat: int,
    url: str,
    command: str,
    alive: Callable[[], bool],
    *,
    start: float | None = None,
    attempt: int = 1,
) -> PointResult:
    """Run the point's load against ``url``; the capacity figures of the point's row."""
    spec, load = sw.spec, sw.spec.load
    base = attempt_base(sw.sweep_id, point.point_id, repeat, attempt)
    row: dict[str, Any] = {"capacity_kind": load.kind}
    run_ids: list[str] = []
    requests: dict[str, int] = {}
    probes: list[Probe] = []
    levels = _fixed_levels(spec, point)
    if levels:
        outcome = run_bench(
            _bench_config(sw.spec, sw.sweep_id, point, repeat, url, levels, base, sw.need),
            sw.store,
            progress=sw.progress,
        )
        run_ids = outcome.run_ids
        requests = {lvl.run_id: lvl.requests for lvl in outcome.levels}
        _tag_runs(sw, run_ids, point, repeat, command, attempt)
        verdicts = _evaluate(sw, run_ids)
        for lvl, level in zip(outcome.levels, levels, strict=False):
            passed, ratio = verdicts.get(lvl.run_id, (None, None))
            probes.append(Probe(level, passed, ratio, lvl.run_id))
        cap = slo.capacity(
            load.kind,
            pd.DataFrame(
                {
                    "load": [p.load for p in probes],
                    "passed": [p.passed if p.passed is not None else False for p in probes],
                    "ratio": [p.ratio if p.ratio is not None else math.nan for p in probes],
                }
            ),
        )
        blind = [f"{p.load:g}" for p in probes if p.passed is None]
        notes = [cap.note] if cap.note else []
        if blind:  # as the search says it (analysis.capacity_search.search_result)
            notes.append(f"no verdict at {', '.join(blind)}: counted as failing")
        row |= {
            "capacity": cap.interpolated if cap.interpolated is not None else cap.measured,
            "capacity_interpolated": cap.is_interpolated,
            "capacity_note": "; ".join(notes) or None,
            "runs_used": len(run_ids),
        }
        measured: float | None = cap.measured
    else:
        assert load.search is not None
        s = load.search
        first = s.start
        if first is None and start is not None:  # the efficient mode's calibrated prior
            first = min(max(start, s.low), s.high)
        plan = SearchPlan(load.kind, s.low, s.high, s.precision, s.max_runs, first)
        step = 0
        while alive():
            value = next_load(plan, probes)
            if value is None:
                break
            run_id = f"{base}-s{step}"
            outcome = run_bench(
                _bench_config(sw.spec, sw.sweep_id, point, repeat, url, [value], run_id, sw.need),
                sw.store,
                progress=sw.progress,
            )
            step += 1
            run_ids += outcome.run_ids
            for lvl in outcome.levels:
                requests[lvl.run_id] = lvl.requests
            _tag_runs(sw, outcome.run_ids, point, repeat, command, attempt)
            rid = outcome.run_ids[0] if outcome.run_ids else None
            passed, ratio = _evaluate(sw, [rid]).get(rid, (None, None)) if rid else (None, None)
            if not alive():
                passed = None  # the engine died under this load: no verdict
            load_value = float(round(value)) if load.kind == "concurrency" else value
            probes.append(Probe(load_value, passed, ratio, rid))
            sw.say(
                f"  {point.label} r{repeat}: {load.kind} {load_value:g} → "
                + (
                    "pass"
                    if passed
                    else "FAIL"
                    if passed is False
                    else "no verdict (counted as failing)"
                )
                + (f" (worst ratio {ratio:.2f})" if ratio is not None else "")
            )
        res = search_result(plan, probes)
        row |= {
            "capacity": res.capacity,
            "capacity_interpolated": res.interpolated,
            "capacity_note": res.note or None,
            "runs_used": res.runs_used,
        }
        measured = res.measured
    row["search"] = [
        {"load": p.load, "run_id": p.run_id, "passed": p.passed, "ratio": p.ratio} for p in probes
    ]
    at_cap = next((p.run_id for p in probes if measured is not None and p.load == measured), None)
    row["peak_memory_fraction"], row["preemptions"] = _guard_figures(sw, run_ids, at_cap, requests)
    return PointResult(row, run_ids)


def attempt_base(sweep_id: str, point_id: str, repeat: int, attempt: int) -> str:
    """The prefix of the run ids of one attempt at a point (repeat): ``SWEEP-POINT-rR`` for the
    first, ``SWEEP-POINT-rR-aN`` for the N-th (a resume's), so no attempt shares a run."""
    base = f"{sweep_id}-{point_id}-r{repeat}"
    return base if attempt <= 1 else f"{base}-a{attempt}"


def attempt_runs(
    store: Store, sweep_id: str, point_id: str, repeat: int, attempt: int
) -> list[str]:
    """The runs stored by one attempt at a point (repeat), from their ids."""
    from store.sweeps import sweep_runs

    base = attempt_base(sweep_id, point_id, repeat, attempt) + "-"
    later = re.compile(re.escape(f"{sweep_id}-{point_id}-r{repeat}-") + r"a\d+-")
    ids = [str(r) for r in sweep_runs(store, sweep_id)["run_id"]]
    return [r for r in ids if r.startswith(base) and (attempt > 1 or not later.match(r))]


#: The columns of a point's row that one attempt measures: reset when a new attempt starts.
_MEASURED: tuple[str, ...] = (
    "capacity",
    "capacity_kind",
    "capacity_interpolated",
    "capacity_note",
    "runs_used",
    "search",
    "peak_memory_fraction",
    "preemptions",
    "framework_version",
)


def _earlier_attempts(sw: Sweep, point: Point, repeat: int) -> tuple[int, list[dict[str, Any]]]:
    """This attempt's number and the attempts before it, kept: a point left ``interrupted`` or
    ``running`` by an earlier process is measured again as a new attempt with its own runs;
    what the earlier one measured (its runs, ended ``interrupted``) stays, marked, apart."""
    old = records.point_row(sw.store, sw.sweep_id, point.point_id, repeat)
    if old is None:
        return 1, []
    kept = list(old.get("attempts") or [])
    previous = int(old.get("attempt") or 1)
    kept.append(
        {
            "attempt": previous,
            "status": old.get("status"),
            "started_at": old.get("started_at"),
            "ended_at": old.get("ended_at"),
            "error": old.get("error"),
            "launch_command": old.get("launch_command"),
            "run_ids": attempt_runs(sw.store, sw.sweep_id, point.point_id, repeat, previous),
            "log_tail": old.get("log_tail"),
        }
    )
    return previous + 1, kept


def run_point(
    sw: Sweep,
    point: Point,
    repeat: int,
    *,
    start: float | None = None,
    prior: float | None = None,
) -> PointResult:
    """Launch, measure, stop one point (repeat); record it. Failures of the engine are recorded
    and returned; anything else (a stop signal, a failure of the sweep itself) escapes only
    after the engine is stopped and the point recorded ``interrupted``."""
    spec = sw.spec
    key = {"sweep_id": sw.sweep_id, "point_id": point.point_id, "repeat": repeat}
    attempt, attempts = _earlier_attempts(sw, point, repeat)
    row: dict[str, Any] = {
        **key,
        "params": dict(point.params),
        "status": "running",
        "started_at": time.time(),
        "ended_at": None,
        "error": None,
        "log_tail": None,
        "prior": prior,
        "attempt": attempt,
        "attempts": attempts or None,
        "engine_pgid": None,
        "engine_start": None,
        **dict.fromkeys(_MEASURED),
    }
    engine: launcher.Engine | None = None
    suffix = "" if attempt <= 1 else f"-a{attempt}"
    log_path = sw.log_dir / f"{point.point_id}-r{repeat}{suffix}.log"
    secrets: tuple[str, ...] = ()
    status, error = "completed", None
    result = PointResult({})
    try:
        if spec.engine.endpoint:
            url, command, alive = spec.engine.endpoint, f"(endpoint {spec.engine.endpoint})", _yes
            row |= {"launch_command": command}
            records.record_point(sw.store, row)
        else:
            port = spec.engine.port or launcher.free_port()
            plan = launch_plan(spec, point, port)
            command, secrets = plan.display, plan.secrets
            row |= {"launch_command": command, "framework": plan.framework}
            records.record_point(sw.store, row)
            sw.say(f"{point.point_id} {point.label} r{repeat}: $ {command}")
            engine = launcher.launch(plan, log_path=log_path, port=port, environ=sw.environ)
            # recorded at once: a sweep killed from here on leaves an engine --resume can stop
            row |= {
                "engine_pgid": engine.proc.pid,
                "engine_start": launcher.process_start(engine.proc.pid),
            }
            records.record_point(sw.store, row)
            launcher.wait_healthy(engine, spec.engine.startup_timeout_s)
            url, alive = engine.url, engine.alive
        who = identify_sync(url, timeout_s=5.0)
        if who.framework:
            row |= {"framework": who.framework, "framework_version": who.version}
        result = _measure(sw, point, repeat, url, command, alive, start=start, attempt=attempt)
        row |= result.row
        failure = engine.failure() if engine is not None else None
        if failure is not None:  # it died during the load
            status, error = failure.status, failure.reason
    except launcher.LaunchFailure as f:
        status, error = f.status, f.reason
    except BaseException as exc:
        failure = engine.failure() if engine is not None else None
        if isinstance(exc, BenchInterrupted):
            result.run_ids = exc.run_ids
        if isinstance(exc, KeyboardInterrupt):
            why = "interrupted by a stop signal"
        elif isinstance(exc, EndpointError | ConfigError | InputError) and failure is not None:
            status, error = failure.status, f"{failure.reason} ({exc.message})"
            why = ""
        elif isinstance(exc, EndpointError):
            status, error, why = "crashed", exc.message, ""
        else:
            message = exc.message if isinstance(exc, ConfigError | InputError) else repr(exc)
            why = f"the sweep stopped: {message}"
        if why:
            row |= {"status": "interrupted", "error": why}
            _close(sw, engine, row, log_path, secrets)
            raise
    row |= {"status": status, "error": error}
    _close(sw, engine, row, log_path, secrets)
    result.row = row
    return result


def _yes() -> bool:
    return True


def _close(
    sw: Sweep,
    engine: launcher.Engine | None,
    row: dict[str, Any],
    log: Path,
    secrets: Sequence[str] = (),
) -> None:
    """Stop the engine (if any), keep its log tail (secrets masked), record the point (one
    transaction). The engine is stopped even when recording fails."""
    try:
        if engine is not None:
            launcher.stop(engine, sw.spec.engine.stop_timeout_s)
    finally:
        if log.exists():
            row["log_tail"] = launcher.log_tail(log, secrets=secrets) or None
        row["ended_at"] = time.time()
        row["engine_pgid"] = row["engine_start"] = None
        if row.get("error"):
            row["error"] = redact(" ".join(str(row["error"]).split())[:500], secrets)
        records.record_point(sw.store, row)


# --- the sweep ----------------------------------------------------------------------------------


def prior_lengths(entry: Mapping[str, Any]) -> dict[str, float]:
    """A workload catalog entry as the prior reads it: the expected input and output lengths,
    weighted over a mixture's shapes (``mixed``), and the shared prefix's expected length."""
    w = parse_workload(entry)
    total = sum(s.weight for s in w.shapes)
    out = {
        "input_tokens": sum(s.weight * s.input.expected for s in w.shapes) / total,
        "output_tokens": sum(s.weight * s.output.expected for s in w.shapes) / total,
    }
    if w.prefix_tokens is not None:
        out["prefix_tokens"] = w.prefix_tokens.expected
    return out


def _priors(sw: Sweep, points: Sequence[Point]) -> list[float] | None:
    """The performance model's capacity prior of each point (analysis.sweep_order), or None
    (with a note) when it cannot be computed for this workload, GPU or model."""
    spec = sw.spec
    try:
        gpu = GpuSpec.from_entry(catalog.get(sw.store, "gpus", str(spec.prior_gpu)))
        model = ModelShape.from_entry(catalog.get(sw.store, "models", str(spec.prior_model)))
        workload = prior_lengths(catalog.get(sw.store, "workloads", spec.load.workload))
        limits = (sw.profile.ttft_ms, sw.profile.tpot_ms, sw.profile.percentile)
        extra = {} if spec.load.max_tokens is None else {"max_tokens": spec.load.max_tokens}
        return [
            sweep_order.prior_capacity({**extra, **p.params}, gpu, model, workload, limits)
            for p in points
        ]
    except (ConfigError, InputError, KeyError, TypeError, ValueError) as exc:
        sw.say(f"note: mode efficient: no prior ({exc}); every point measured in grid order")
        return None


def _say_row(sw: Sweep, point: Point, repeat: int, row: Mapping[str, Any]) -> None:
    cap = row.get("capacity")
    sw.say(
        f"{point.point_id} {point.label} r{repeat}: {row['status']}"
        + (f", capacity {cap:.3g}" if cap is not None else "")
        + (f" — {row['error']}" if row.get("error") else "")
    )


def _grid_loop(sw: Sweep, todo: Sequence[tuple[Point, int]], rows: list[dict[str, Any]]) -> None:
    for point, repeat in todo:
        rows.append(run_point(sw, point, repeat).row)
        _say_row(sw, point, repeat, rows[-1])


def _stored_capacities(sw: Sweep, points: Sequence[Point]) -> dict[int, float | None]:
    """On a resume: the capacity of each point already measured (mean over its completed
    repeats; None when none completed), by index."""
    from store.sweeps import sweep_points

    df = sweep_points(sw.store, sw.sweep_id)
    index = {p.point_id: i for i, p in enumerate(points)}
    out: dict[int, float | None] = {}
    for pid, group in df.groupby("point_id"):
        if pid not in index or not group["status"].isin(list(records.FINAL_STATUSES)).all():
            continue
        if (group["status"] == "pruned").all():
            continue
        caps = group.loc[group["status"] == "completed", "capacity"].dropna()
        out[index[str(pid)]] = float(caps.mean()) if not caps.empty else None
    return out


def _efficient_loop(
    sw: Sweep,
    points: Sequence[Point],
    priors: Sequence[float],
    done: set[tuple[str, int]],
    rows: list[dict[str, Any]],
) -> None:
    """Best prior first; stop when no remaining point can beat the incumbent (the rest are
    recorded ``pruned``, with their prior and why)."""
    plan = sweep_order.EfficientPlan.from_priors(priors)
    measured = _stored_capacities(sw, points)
    while (i := plan.next_point(measured)) is not None:
        point = points[i]
        start = plan.expected(i, measured)
        caps: list[float] = []
        for repeat in range(sw.spec.repeats):
            if (point.point_id, repeat) in done:
                continue
            row = run_point(sw, point, repeat, start=start, prior=priors[i]).row
            rows.append(row)
            _say_row(sw, point, repeat, row)
            if row["status"] == "completed" and row.get("capacity") is not None:
                caps.append(float(row["capacity"]))
        measured[i] = sum(caps) / len(caps) if caps else None
    incumbent = plan.incumbent(measured)
    optimism = plan.optimism(measured)
    pruned = [i for i in range(len(points)) if i not in measured]
    for i in pruned:
        why = (
            f"pruned: prior {priors[i]:.3g} × (1 + {optimism:.2f}) < incumbent {incumbent[1]:.3g}"
            if incumbent is not None
            else "pruned"
        )
        for repeat in range(sw.spec.repeats):
            if (points[i].point_id, repeat) in done:
                continue
            row = {
                "sweep_id": sw.sweep_id,
                "point_id": points[i].point_id,
                "repeat": repeat,
                "params": dict(points[i].params),
                "status": "pruned",
                "prior": priors[i],
                "error": why,
            }
            records.record_point(sw.store, row)
            rows.append(row)
    runs = sum(int(r.get("runs_used") or 0) for r in rows)
    sw.say(
        f"efficient: measured {len(measured)} of {len(points)} points ({runs} load runs now), "
        f"{len(pruned)} pruned"
    )


def _new_sweep_id(name: str) -> str:
    return f"{name[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def _log_dir(store: Store, sweep_id: str, override: str | None) -> Path:
    if override:
        return Path(override) / sweep_id
    database = store.engine.url.database if store.dialect == "duckdb" else None
    if database and database != ":memory:":
        return Path(database).resolve().parent / "sweeps" / sweep_id
    return Path("data") / "sweeps" / sweep_id


def reclaim(store: Store, sweep_id: str, out: TextIO, stop_timeout_s: float = 10.0) -> int:
    """Tidy what a sweep killed outright (kill -9, a lost machine) left of ``sweep_id``: stop
    each engine it had launched (its recorded process group, when the leader is still that
    engine), mark its points left ``running`` as ``interrupted`` and its runs left ``running``
    as ``interrupted``. Refuses (InputError) while the sweep's own process still runs. Returns
    the number of engines stopped."""
    header = records.sweep_header(store, sweep_id) or {}
    here = header.get("host") in (None, socket.gethostname())
    if header.get("status") == "running" and here:
        pid, start = _whole(header.get("runner_pid")), _real(header.get("runner_start"))
        if pid and pid != os.getpid() and launcher.is_running(pid, start):
            raise InputError(
                f"sweep {sweep_id!r} is still running (process {pid})",
                hint="stop that process first (Ctrl-C or SIGTERM records its point)",
            )
    stopped = 0
    for left in records.left_running(store, sweep_id):
        pgid = _whole(left.get("engine_pgid"))
        note = "the sweep process ended without recording this point (killed)"
        if (
            pgid
            and here
            and launcher.stop_group(pgid, _real(left.get("engine_start")), stop_timeout_s)
        ):
            stopped += 1
            note += f"; its engine (process group {pgid}) was stopped later"
            print(f"stopped the engine left by sweep {sweep_id} (process group {pgid})", file=out)
        records.record_point(
            store,
            {
                "sweep_id": sweep_id,
                "point_id": left["point_id"],
                "repeat": int(left["repeat"]),
                "status": "interrupted",
                "error": note,
                "engine_pgid": None,
                "engine_start": None,
            },
        )
    from store.sweeps import sweep_runs

    runs = sweep_runs(store, sweep_id)
    for run_id in runs.loc[runs["status"] == "running", "run_id"]:
        ingest.update_run(store, str(run_id), status="interrupted")
    return stopped


def _whole(value: Any) -> int | None:
    try:
        return None if value is None or pd.isna(value) else int(value)
    except (TypeError, ValueError):
        return None


def _real(value: Any) -> float | None:
    try:
        return None if value is None or pd.isna(value) else float(value)
    except (TypeError, ValueError):
        return None


def cleanup(store: Store, out: TextIO) -> int:
    """``sweep --cleanup``: :func:`reclaim` every sweep of this host left ``running`` whose
    process is gone, and record it ``interrupted``; returns the engines stopped."""
    stopped = 0
    for sw in records.unfinished_sweeps(store):
        sid = str(sw["sweep_id"])
        if sw.get("host") not in (None, socket.gethostname()):
            print(f"sweep {sid}: ran on {sw['host']}, not here: left alone", file=out)
            continue
        try:
            stopped += reclaim(store, sid, out)
        except InputError as exc:
            print(f"sweep {sid}: {exc.message}: left alone", file=out)
            continue
        records.finish_sweep(store, sid, "interrupted")
        print(f"sweep {sid}: recorded interrupted; resume with --resume {sid}", file=out)
    print(f"cleanup: {stopped} engine(s) stopped", file=out)
    return stopped


def profile_of(store: Store, spec: SweepSpec) -> slo.SloProfile:
    return slo.SloProfile.from_entry(catalog.get(store, "slo_profiles", spec.slo.profile))


def run_sweep(
    spec: SweepSpec,
    store: Store,
    *,
    resume: str | None = None,
    log_dir: str | None = None,
    progress: bool = True,
    out: TextIO = sys.stdout,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """Run (or resume: ``resume`` = a sweep id, or ``"latest"``) the sweep; returns its id and
    the rows of the points measured now. A stop signal records the point and the sweep as
    interrupted and propagates (KeyboardInterrupt / BenchInterrupted)."""
    points = expand(spec)
    validate(spec, points)
    check_catalog_names(spec, store)
    profile = profile_of(store, spec)
    done: set[tuple[str, int]] = set()
    if resume:
        sweep_id = resume
        if resume == "latest":
            found = records.latest_resumable(store, spec.name)
            if found is None:
                raise InputError(
                    f"no interrupted sweep named {spec.name!r} to resume in {store.url}",
                    hint="run it without --resume, or give --resume SWEEP_ID",
                )
            sweep_id = found
        header = records.sweep_header(store, sweep_id)
        if header is None:
            raise InputError(f"no sweep {sweep_id!r} in {store.url} to resume")
        if header.get("name") != spec.name:
            raise InputError(
                f"sweep {sweep_id!r} is named {header.get('name')!r}, the spec {spec.name!r}",
                hint="resume it with the spec it ran",
            )
        reclaim(store, sweep_id, out, spec.engine.stop_timeout_s)
        done = records.completed_point_ids(store, sweep_id)
    else:
        sweep_id = _new_sweep_id(spec.name)
    sw = Sweep(
        spec,
        points,
        store,
        sweep_id,
        _log_dir(store, sweep_id, log_dir),
        profile,
        progress=progress,
        out=out,
        environ=environ,
    )
    e = spec.engine
    records.start_sweep(
        store,
        {
            "sweep_id": sweep_id,
            "name": spec.name,
            "engine": e.label,
            "launch_template": e.template or e.command or e.endpoint,
            "grid": {k: list(v) for k, v in spec.grid.items()},
            "workload": spec.load.workload,
            "slo": spec.slo.profile,
            "spec": stored_spec(spec),
            "mode": spec.mode,
            "host": socket.gethostname(),
            "runner_pid": os.getpid(),
            "runner_start": launcher.process_start(os.getpid()),
            **({} if resume else {"started_at": time.time()}),
        },
    )
    todo = [(p, r) for p in points for r in range(spec.repeats) if (p.point_id, r) not in done]
    priors = _priors(sw, points) if spec.mode == "efficient" else None
    if note := sample_note(spec, profile.percentile):
        sw.say(note)
    sw.say(
        f"sweep {sweep_id}: {len(todo)} of {len(points) * spec.repeats} point run(s) to measure"
        + (f" ({len(done)} already done)" if done else "")
        + f"; logs in {sw.log_dir}"
    )
    rows: list[dict[str, Any]] = []
    try:
        if priors is None:
            _grid_loop(sw, todo, rows)
        else:
            _efficient_loop(sw, points, priors, done, rows)
    except KeyboardInterrupt:
        records.finish_sweep(store, sweep_id, "interrupted")
        sw.say(f"sweep {sweep_id} interrupted: resume with --resume {sweep_id}")
        raise
    except BaseException:  # the point is recorded and its engine stopped (run_point)
        records.finish_sweep(store, sweep_id, "failed")
        sw.say(f"sweep {sweep_id} failed: resume with --resume {sweep_id}")
        raise
    records.finish_sweep(store, sweep_id, "completed")
    return sweep_id, rows


def summary_table(store: Store, sweep_id: str) -> str:
    """The points of the sweep: params, repeat, status, capacity, runs, error."""
    from store.sweeps import sweep_points  # the pages' read of the same rows

    df = sweep_points(store, sweep_id)
    if df.empty:
        return "(no points)"
    names = sorted({k for p in df["params"] for k in p})
    header = [*names, "rep", "status", "capacity", "runs", "error"]
    lines = []
    for rec in df.to_dict("records"):
        params = rec["params"]
        cap = rec.get("capacity")
        capacity = "—" if cap is None or pd.isna(cap) else f"{cap:.3g}"
        if capacity != "—" and rec.get("capacity_interpolated"):
            capacity += "~"
        runs = rec.get("runs_used")
        lines.append(
            [
                *(format_value(params[n]) if n in params else "" for n in names),
                str(rec["repeat"]),
                str(rec["status"]),
                capacity,
                "" if runs is None or pd.isna(runs) else str(int(runs)),
                (str(rec.get("error") or ""))[:60],
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), *(fmt.format(*r) for r in lines)]).rstrip()


def headline(store: Store, sweep_id: str) -> str:
    """The recommendation's one line (services.views.tune.recommendation_for)."""
    from services.views.tune import recommendation_for

    return recommendation_for(store, sweep_id).headline()


def caveats(store: Store, sweep_id: str) -> list[str]:
    """The recommendation's warnings, as the Tune page shows them ("The top two are not
    separated …", a spread of repeats beyond the noise): printed under the headline."""
    from services.views.tune import recommendation_for

    return [f"caveat: {w}" for w in recommendation_for(store, sweep_id).warnings]


def sample_note(spec: SweepSpec, percentile: float) -> str | None:
    """A note when each level's ``requests`` are too few to judge the SLO's percentile (every
    level would be inconclusive), or when timed rate levels may be extended to the minimum;
    None otherwise."""
    need = min_samples_for(percentile)
    n, load = spec.load.requests, spec.load
    if n is not None and n < need:
        return (
            f"note: {n} requests per level are too few to judge P{percentile:g} (needs {need}): "
            "every level will be inconclusive; raise [load].requests or use duration_s"
        )
    lowest = load.levels or ((load.search.low,) if load.search else ())
    if sample_requests(load.kind, lowest, load.duration_s, need) is not None:
        return (
            f"note: a rate level that would send fewer than {need} requests in "
            f"{load.duration_s:g} s runs {need} requests instead (P{percentile:g} needs {need})"
        )
    if load.kind == "concurrency" and load.duration_s is not None:
        return (
            f"note: a level that completes fewer than {need} requests in {load.duration_s:g} s "
            f"is inconclusive (P{percentile:g} needs {need})"
        )
    return None


def exit_status(store: Store, sweep_id: str) -> int:
    """0 when every point completed (points the efficient mode pruned were decided without
    running: they are not failures), 1 when some failed, 3 when none completed."""
    from store.sweeps import sweep_points

    statuses = [s for s in sweep_points(store, sweep_id)["status"] if s != "pruned"]
    if statuses and all(s == "completed" for s in statuses):
        return ExitCode.OK
    if any(s == "completed" for s in statuses):
        return ExitCode.PARTIAL
    return ExitCode.FAILED


# --- the command --------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``sweep`` subcommand (``set_defaults(func=run)``)."""
    p = subparsers.add_parser(
        "sweep",
        help="sweep engine parameters: launch, measure SLO capacity, recommend",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("spec", metavar="SPEC.toml", nargs="?", help="the sweep spec (docs/tune.md)")
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        default=None,
        metavar="SWEEP_ID",
        help="measure only what is left of an interrupted sweep (default: the latest of the "
        "spec's name)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print every point's launch command and the load plan; launch and store nothing",
    )
    p.add_argument(
        "--cleanup",
        action="store_true",
        help="stop the engines of sweeps killed outright (kill -9) and record them interrupted; "
        "no spec needed",
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.add_argument(
        "--log-dir", help="folder for the engines' logs (default: sweeps/ beside the store)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope sweep``."""
    if args.cleanup:
        if args.spec or args.resume or args.dry_run:
            raise InputError("--cleanup takes no spec, --resume or --dry-run")
        store = open_store(args.db)
        try:
            cleanup(store, sys.stdout)
            return ExitCode.OK
        finally:
            store.dispose()
    if not args.spec:
        raise InputError(
            "a sweep spec is required", hint="servescope sweep SPEC.toml, or sweep --cleanup"
        )
    spec = load_spec(args.spec)
    if args.dry_run:
        return dry_run(spec, expand(spec), sys.stdout)
    validate(spec, expand(spec))  # a bad template or param: before the store is opened
    store = open_store(args.db)
    try:
        sweep_id, _ = run_sweep(
            spec,
            store,
            resume=args.resume,
            log_dir=args.log_dir,
            progress=not args.quiet,
            out=sys.stdout,
        )
        print(f"\nsweep {sweep_id}: {spec.name}")
        print(summary_table(store, sweep_id))
        print(headline(store, sweep_id))
        for line in caveats(store, sweep_id):
            print(line)
        return exit_status(store, sweep_id)
    finally:
        store.dispose()
