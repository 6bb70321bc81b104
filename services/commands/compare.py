"""``servescope compare BASELINE CANDIDATE --fail-on "p99_ttft_ms:+10%,goodput:-5%"`` — the
regression gate for a CI pipeline.

Prints one row per threshold: the metric, the baseline's and the candidate's value, the change,
its 95 % bootstrap interval, the threshold and the verdict (``analysis.regression``: the
thresholds' form, the statistics and the decision rule). Percentiles come from the Compare
page's own bootstrap (``services.views.compare.read_samples`` and ``baseline_vs_candidate``:
the same samples, replicates and seeds, so the page and the gate agree); goodput, output
throughput and error rate from a seeded bootstrap over each run's requests; goodput's and
output throughput's intervals also carry the run-to-run variation one run per side cannot show
(``--run-noise``, default ``regression.RUN_NOISE``).

``--baseline pinned`` (with one positional, the candidate) uses the run pinned for the
candidate's model, GPU and workload (``servescope db pin``); ``--baseline RUN_ID`` names it.

Exit codes: 0 no regression (verdicts ``within threshold``, ``not significant`` or
``improved``); ``ExitCode.FAILED`` (3) at least one ``regression`` (beyond its threshold and
significant); ``ExitCode.ERROR`` (2) bad input — an unknown run, a malformed ``--fail-on``, a
run without per-request rows, no pinned baseline, an unknown SLO profile.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pandas as pd

from analysis import compare as compare_analysis
from analysis import regression, slo
from analysis.metrics import low_confidence
from errors import ExitCode, InputError
from services.commands import db as db_command
from services.commands import slo_profiles
from services.views import compare as compare_view
from store import request_rows, runs_table
from store.db import Store

DEFAULT_PROFILE: Final = compare_view.DEFAULT_PROFILE
PINNED: Final = "pinned"


class _Once(argparse.Action):
    """A flag that may be given once (a second ``--fail-on`` would silently replace the first)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice; give one comma-separated list")
        setattr(namespace, self.dest, values)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``compare`` subcommand to cli.py's parser."""
    p = sub.add_parser(
        "compare",
        help="regression gate: candidate vs baseline run; exit 3 on a significant regression",
        description="Compare a candidate run with a baseline run on the thresholds of "
        "--fail-on and exit 3 when a change is beyond its threshold AND its 95 % bootstrap "
        "interval excludes zero (a significant regression); 0 otherwise; 2 on bad input. "
        f"Metrics: {regression.accepted_metrics()}.",
    )
    p.add_argument(
        "baseline_run",
        nargs="?",
        metavar="BASELINE",
        help="the baseline run id (or give --baseline pinned|RUN_ID and only CANDIDATE)",
    )
    p.add_argument("candidate_run", metavar="CANDIDATE", help="the candidate run id")
    p.add_argument(
        "--baseline",
        dest="baseline_flag",
        metavar="pinned|RUN_ID",
        help="'pinned': the run pinned for the candidate's model, GPU and workload "
        "(servescope db pin); or a run id",
    )
    p.add_argument(
        "--fail-on",
        required=True,
        action=_Once,
        metavar="THRESHOLDS",
        help="comma-separated metric:+N%% (or :-N%%, or an absolute :+N in the metric's unit), "
        "the sign being the metric's bad direction, e.g. 'p99_ttft_ms:+10%%,goodput:-5%%'",
    )
    p.add_argument(
        "--slo",
        metavar="PROFILE",
        help=f"the SLO profile goodput counts against (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--run-noise",
        type=_percent,
        default=regression.RUN_NOISE,
        metavar="PCT",
        help="run-to-run variation of goodput and output throughput between repeated runs of "
        "one configuration (coefficient of variation, 0-50%%), which one run per side cannot "
        f"show: folded into their intervals (default {regression.RUN_NOISE * 100:g}%%; lower "
        "it from repeated runs on a quiet host)",
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=run)


def _percent(text: str) -> float:
    """``5%`` or ``5`` → 0.05 (argparse type of ``--run-noise``)."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw) / 100.0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r} as a percentage: write e.g. 5% or 2.5"
        ) from None
    try:
        return regression.check_run_noise(value)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


@dataclass(frozen=True)
class GateReport:
    """What ``servescope compare`` found: the runs, the profile goodput used (None when no
    goodput threshold), each threshold's judgement, and the fair-comparison warnings."""

    baseline: Mapping[str, Any]
    candidate: Mapping[str, Any]
    pinned: bool
    profile: str | None
    judgements: tuple[regression.Judgement, ...]
    warnings: tuple[compare_analysis.ComparisonWarning, ...]

    @property
    def passed(self) -> bool:
        return regression.gate(self.judgements)


def _record(store: Store, run_id: str, role: str) -> dict[str, Any]:
    run = runs_table.run_record(store, run_id)
    if run is None:
        hint = "`servescope db runs` lists the stored runs"
        if run_id == PINNED:
            hint += "; for the pinned baseline give --baseline pinned CANDIDATE"
        raise InputError(f"{role} run {run_id!r} is not in {store.url}", hint=hint)
    return run


def resolve_runs(
    store: Store, baseline: str | None, flag: str | None, candidate: str
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(baseline record, candidate record, whether the baseline is the pinned one)."""
    if baseline is not None and flag is not None:
        raise InputError(
            "the baseline is given twice (BASELINE and --baseline)",
            hint="give BASELINE CANDIDATE, or --baseline pinned|RUN_ID CANDIDATE",
        )
    if baseline is None and flag is None:
        raise InputError(
            "no baseline: give BASELINE CANDIDATE, or --baseline pinned CANDIDATE",
            hint="`servescope db pin RUN_ID` pins a baseline; `servescope db runs` lists runs",
        )
    cand = _record(store, candidate, "candidate")
    pinned = flag == PINNED
    base_id = db_command.pinned_for(store, cand) if pinned else str(baseline or flag)
    base = _record(store, base_id, "baseline")
    if base_id == candidate:
        raise InputError(
            f"the baseline and the candidate are the same run ({candidate})",
            hint="compare two different runs",
        )
    return base, cand, pinned


def _profile(store: Store, name: str | None) -> slo.SloProfile:
    profiles = slo_profiles.slo_profiles(store)
    wanted = name or DEFAULT_PROFILE
    if wanted not in profiles:
        raise InputError(
            f"unknown SLO profile {wanted!r}",
            hint=f"profiles: {', '.join(sorted(profiles)) or 'none stored'}",
        )
    return slo.SloProfile.from_entry(profiles[wanted])


def _check_per_request(rows: pd.DataFrame, metrics: Sequence[str]) -> None:
    """InputError for a run without per-request rows (every metric bootstraps over them)."""
    for r in rows.to_dict("records"):
        requests = int(r.get("requests") or 0)
        if r.get("aggregates_only") or requests == 0:
            what = "holds only its tool's aggregates" if r.get("aggregates_only") else "has none"
            raise InputError(
                f"run {r['run_id']} has no per-request rows ({what}); "
                f"{', '.join(metrics)} need them for the bootstrap",
                hint="compare runs measured by servescope bench, or imported with per-request "
                "data (e.g. vllm bench serve --save-detailed)",
            )


def compare_runs(
    store: Store,
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    thresholds: Sequence[regression.Threshold],
    *,
    slo_name: str | None = None,
    pinned: bool = False,
    run_noise: float = regression.RUN_NOISE,
) -> GateReport:
    """Judge ``candidate`` against ``baseline`` on ``thresholds`` (``analysis.regression``)."""
    b, c = str(baseline["run_id"]), str(candidate["run_id"])
    metrics = [t.metric for t in thresholds]
    wanted_pct = [m for m in metrics if m in regression.PERCENTILE_METRICS]
    wanted_run = [m for m in metrics if m in regression.RUN_METRICS]
    profile = _profile(store, slo_name) if "goodput" in wanted_run or slo_name else None
    rows = runs_table.run_aggregates(store, [b, c])
    _check_per_request(rows, metrics)
    changes: dict[str, regression.Change] = {}
    if wanted_pct:
        samples = compare_view.read_samples(store, [b, c])
        diffs = compare_view.baseline_vs_candidate(samples, b, c)
        changes |= regression.percentile_changes(diffs, wanted_pct)
    if wanted_run:
        durations = {
            str(r["run_id"]): _duration(r.get("duration_s")) for r in rows.to_dict("records")
        }
        sides = [
            regression.RunRequests.from_requests(
                rid, request_rows.run_requests_all(store, rid), profile, durations.get(rid)
            )
            for rid in (b, c)
        ]
        changes |= regression.run_changes(sides[0], sides[1], wanted_run, run_noise=run_noise)
    judgements = []
    for t in thresholds:
        try:
            judgements.append(regression.judge(changes[t.metric], t))
        except InputError as exc:
            raise InputError(
                f"{exc.message} — baseline {b}, candidate {c}",
                hint="ITL needs the runs' token gaps; TPOT responses of 2+ tokens",
            ) from None
    return GateReport(
        baseline=baseline,
        candidate=candidate,
        pinned=pinned,
        profile=profile.name if profile is not None and "goodput" in wanted_run else None,
        judgements=tuple(judgements),
        warnings=tuple(compare_analysis.comparison_warnings(rows)),
    )


def _duration(value: Any) -> float | None:
    if value is None or value is pd.NA:
        return None
    f = float(value)
    return f if f == f and f > 0 else None


# --- the table ---------------------------------------------------------------------------------


def _value(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    unit = regression.UNITS[metric]
    if metric == "error_rate":
        return f"{value:.4f}"
    if unit == "req/s":
        return f"{value:,.3f} req/s"
    return f"{value:,.1f} {unit}"


def _delta(j: regression.Judgement, value: float | None) -> str:
    """A difference as the threshold states it: % of the baseline, or absolute."""
    if value is None:
        return "-"
    if j.threshold.relative:
        pct = j.change.pct(value)
        if pct is not None:
            return f"{pct:+.1f}%"
    digits = 4 if j.change.metric == "error_rate" else 2
    return f"{value:+,.{digits}f}"


def _low_confidence(j: regression.Judgement) -> bool:
    spec = regression.PERCENTILE_METRICS.get(j.change.metric)
    if spec is None:
        return False
    return low_confidence(spec[1], min(j.change.n_baseline, j.change.n_candidate))


def table_lines(judgements: Sequence[regression.Judgement]) -> list[str]:
    """The gate's table, one line per threshold (columns padded to fit)."""
    header = (
        "metric",
        "baseline",
        "candidate",
        "change",
        "95% interval",
        "threshold",
        "verdict",
        "n (base/cand)",
    )
    rows = [header]
    for j in judgements:
        ch = j.change
        mark = "*" if _low_confidence(j) else ""
        rows.append(
            (
                ch.metric + mark,
                _value(ch.metric, ch.baseline),
                _value(ch.metric, ch.candidate),
                _delta(j, ch.diff),
                f"[{_delta(j, ch.low)}, {_delta(j, ch.high)}]",
                j.threshold.label,
                j.verdict,
                f"{ch.n_baseline:,}/{ch.n_candidate:,}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {1, 2, 3, 4, 5}
    out = []
    for r in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(r)
        ]
        out.append("  ".join(cells).rstrip())
    return out


def _run_label(run: Mapping[str, Any]) -> str:
    name = run.get("name")
    return f"{run['run_id']} ({name})" if name else str(run["run_id"])


def report_lines(report: GateReport) -> list[str]:
    """Everything ``servescope compare`` prints: the runs, the table, notes, the outcome."""
    base = _run_label(report.baseline) + (
        f"  [pinned for {db_command.describe_key(db_command.pin_key(report.baseline))}]"
        if report.pinned
        else ""
    )
    lines = [f"baseline:  {base}", f"candidate: {_run_label(report.candidate)}"]
    if report.profile:
        lines.append(f"goodput against SLO profile {report.profile}")
    lines += ["", *table_lines(report.judgements), ""]
    if any(_low_confidence(j) for j in report.judgements):
        lines.append("* a percentile from too few samples (P99 from < 100): low confidence")
    if any(
        m in regression.PERCENTILE_METRICS for m in (j.change.metric for j in report.judgements)
    ):
        lines.append(
            f"percentiles: Compare's bootstrap ({compare_view.N_BOOT} replicates, up to "
            f"{compare_view.SAMPLE_LIMIT:,} values per run); whole-run metrics: "
            f"{regression.N_BOOT} replicates over requests; intervals are of the change"
        )
    noise = max((j.change.run_noise for j in report.judgements), default=0.0)
    if noise > 0:
        lines.append(
            f"run-to-run: the intervals of goodput and output throughput resample each run's "
            f"requests and vary its pace by {noise * 100:g}% (what one run per side cannot "
            f"show; --run-noise)"
        )
    for w in report.warnings:
        lines.append(f"warning: {w.message}")
    failed = [j for j in report.judgements if j.failed]
    if failed:
        what = ", ".join(
            f"{j.change.metric} {_delta(j, j.change.diff)} beyond {j.threshold.label}"
            for j in failed
        )
        lines.append(f"FAILED: {len(failed)} significant regression(s): {what}")
    else:
        lines.append(
            f"passed: no significant regression beyond the thresholds "
            f"({len(report.judgements)} metric(s))"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope compare``: judge, print, exit 3 on a regression."""
    from store.lifecycle import open_store

    thresholds = regression.parse_fail_on(args.fail_on)
    store = open_store(args.db)
    try:
        base, cand, pinned = resolve_runs(
            store, args.baseline_run, args.baseline_flag, args.candidate_run
        )
        report = compare_runs(
            store,
            base,
            cand,
            thresholds,
            slo_name=args.slo,
            pinned=pinned,
            run_noise=getattr(args, "run_noise", regression.RUN_NOISE),
        )
    finally:
        store.dispose()
    for line in report_lines(report):
        print(line)
    return ExitCode.OK if report.passed else ExitCode.FAILED
