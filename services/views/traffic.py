"""Production traffic over a span, from the watched engines' own histograms and counters.

The one loader behind On call: the Live page, the incident view, ``watch --slo`` and the
production length mix all read a span of watched targets through :func:`traffic`, which returns
per-window percentiles (summed over the targets, and per target), request and error rates,
engine state, GPU samples and the span's length histograms — computed as
``docs/oncall.md`` states (``analysis.histogram_windows``). Streamlit-free.

Every read is bounded by the span (plus one window before it, for the first window's baseline),
so a store holding weeks of samples answers from the minutes asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

import pandas as pd

from analysis import histogram_windows as hw
from errors import InputError
from store import sample_series
from store.db import Store

#: Latency histograms (seconds) drawn and judged on production windows.
LATENCY_HISTS: Final = (
    "ttft_seconds",
    "e2e_seconds",
    "queue_time_seconds",
    "prefill_time_seconds",
    "itl_seconds",
)
#: Length histograms (tokens) of finished requests: the production length mix.
LENGTH_HISTS: Final = ("prompt_length_tokens", "output_length_tokens")
#: Engine state read beside the latency (gauges and the preemption counter).
STATE_METRICS: Final = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "preemptions_total",
    "requests_preempted",
    "generation_tokens_total",
)
#: The percentiles computed per window: P50 and every percentile an SLO profile may name.
QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)
#: The longest span one read may cover (seconds): a week.
MAX_SPAN_S: Final = 7 * 86400.0
#: A target value naming every target that serves one model: ``model:<model_name>``.
MODEL_PREFIX: Final = "model:"
#: The page that investigates a window.
INCIDENT_PAGE: Final = "/incident"

_REQUEST_COLUMNS: Final = list(hw.REQUEST_RATE_COLUMNS)


@dataclass(frozen=True)
class Traffic:
    """A span of watched targets, windowed. ``windows``: hist → ``summed_histogram_windows``
    over the targets (latency in seconds, lengths in tokens); ``by_target``: latency hist →
    ``histogram_windows_by_target``; ``requests``: ``request_rate_windows`` summed over engines
    (empty, with its columns, when no engine exports finished/failed counters); ``state``:
    engine samples (target, engine, ts, metric, value) of ``STATE_METRICS``; ``gpus``: GPU
    samples; ``lengths``: length hist → the span's bucket increases ((le, cumulative count))."""

    targets: tuple[str, ...]
    engine: str | None  # the engine when every target runs the same one
    start: float
    end: float
    window_s: float
    windows: dict[str, pd.DataFrame]
    by_target: dict[str, pd.DataFrame]
    requests: pd.DataFrame
    state: pd.DataFrame
    gpus: pd.DataFrame
    lengths: dict[str, list[tuple[float, float]]]

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines of the targets (state rows), sorted."""
        if self.state.empty:
            return (self.engine,) if self.engine else ()
        return tuple(sorted({str(e) for e in self.state["engine"]}))


def known_targets(store: Store) -> pd.DataFrame:
    """Every engine target the store has samples of: columns key (the target), last_ts."""
    df = sample_series.last_sample_times(store)
    return df[df["kind"] == "engine"][["key", "last_ts"]].reset_index(drop=True)


def model_groups(store: Store) -> dict[str, tuple[str, ...]]:
    """``model:<name>`` → the targets serving that model (from the ``model_name`` label of
    their series), for every model the store has seen."""
    groups: dict[str, list[str]] = {}
    for target, model in sample_series.target_models(store).items():
        groups.setdefault(f"{MODEL_PREFIX}{model}", []).append(target)
    return {k: tuple(sorted(v)) for k, v in sorted(groups.items())}


def resolve_targets(store: Store, targets: Sequence[str] | None) -> tuple[str, ...] | None:
    """``targets`` with each ``model:<name>`` replaced by the targets serving that model (None
    stays None: every target). Raises InputError for a model no target serves, listing the
    known ones."""
    if targets is None:
        return None
    if not any(t.startswith(MODEL_PREFIX) for t in targets):
        return tuple(targets)
    groups = model_groups(store)
    out: list[str] = []
    for t in targets:
        if not t.startswith(MODEL_PREFIX):
            out.append(t)
            continue
        if t not in groups:
            listed = ", ".join(groups) or "none (no engine labels its series with model_name)"
            raise InputError(
                f"no watched target serves {t[len(MODEL_PREFIX) :]!r}; known models: {listed}",
                hint="model:<name> sums every target whose series carry model_name=<name>",
            )
        out.extend(groups[t])
    return tuple(dict.fromkeys(out))


def incident_path(target: str | None, start: float, end: float) -> str:
    """The incident view of ``target`` (None: every target) over [start, end]:
    ``/incident?target=<urlencoded>&from=<epoch s>&to=<epoch s>`` (whole seconds, widened
    outwards so the span is covered)."""
    params: dict[str, str] = {}
    if target:
        params["target"] = target
    params["from"] = str(int(start // 1))
    params["to"] = str(int(-(-end // 1)))
    return f"{INCIDENT_PAGE}?{urlencode(params)}"


def _check_span(start: float, end: float, window_s: float) -> None:
    if not (window_s > 0):
        raise InputError(
            f"window is {window_s!r} seconds; accepted: a number of seconds above 0",
        )
    if not end > start:
        raise InputError(f"the span ends ({end:.0f}) before it starts ({start:.0f})")
    if end - start > MAX_SPAN_S:
        raise InputError(
            f"the span is {(end - start) / 86400:.1f} days; accepted: at most 7 days",
            hint="pick a shorter range (an incident is minutes to hours)",
        )


def _histogram_rows(
    store: Store, targets: Sequence[str], hist: str, since: float, until: float
) -> pd.DataFrame:
    parts = []
    for target in targets:
        df = sample_series.engine_histogram_series(store, target, hist, since=since, until=until)
        if not df.empty:
            df.insert(0, "target", target)
            parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["target", "ts", "metric", "value"])
    return pd.concat(parts, ignore_index=True)


def _requests(
    store: Store, engines: dict[str, str], start: float, end: float, window_s: float
) -> pd.DataFrame:
    frames = []
    by_engine: dict[str, list[str]] = {}
    for target, engine in engines.items():
        if engine in hw.FAILURE_SERIES:
            by_engine.setdefault(engine, []).append(target)
    for engine, targets in sorted(by_engine.items()):
        raw = sample_series.engine_raw_series(
            store,
            hw.finished_series_names([engine]),
            since=start - window_s,
            until=end,
            targets=targets,
        )
        if raw.empty:
            continue
        frames.append(hw.request_rate_windows(raw, engine, window_s=window_s, start=start, end=end))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in _REQUEST_COLUMNS})
    if len(frames) == 1:
        return frames[0]
    merged = pd.concat(frames, ignore_index=True)
    rows = []
    for (w0, w1), g in merged.groupby(["window_start", "window_end"], sort=True):
        finished, failed = float(g["finished"].sum()), float(g["failed"].sum())
        reasons: dict[str, float] = {}
        for d in g["failed_by_reason"]:
            for k, v in dict(d).items():
                reasons[k] = reasons.get(k, 0.0) + float(v)
        seen = bool(g["request_rate"].notna().any())
        rows.append(
            {
                "window_start": w0,
                "window_end": w1,
                "finished": finished,
                "failed": failed,
                "request_rate": finished / window_s if seen else float("nan"),
                "failure_rate": failed / window_s if seen else float("nan"),
                "error_rate": failed / finished if finished > 0 else float("nan"),
                "failed_by_reason": reasons,
                "note": "" if finished > 0 else str(g["note"].iloc[0]),
            }
        )
    return pd.DataFrame.from_records(rows, columns=_REQUEST_COLUMNS)


def traffic(
    store: Store,
    *,
    targets: Sequence[str] | None,
    start: float,
    end: float,
    window_s: float,
    quantiles: Sequence[float] = QUANTILES,
    hists: Sequence[str] = (*LATENCY_HISTS, *LENGTH_HISTS),
    by_target: bool = True,
    with_state: bool = True,
) -> Traffic:
    """The span [start, end] of ``targets`` (None: every engine target with samples in it;
    ``model:<name>``: every target serving that model, summed) cut into windows of
    ``window_s`` seconds (the last one covers ``end``).

    ``hists``: the histograms to window (a caller drawing fewer reads less); ``by_target``:
    also each latency histogram per target; ``with_state``: also the engine state and GPU
    samples (a caller that reads them itself passes False: ``state``/``gpus`` are then empty).

    Raises InputError for a bad span (end ≤ start, longer than a week, window ≤ 0) and for a
    named target with no samples at all, listing the known ones.
    """
    _check_span(start, end, window_s)
    targets = resolve_targets(store, targets)
    engines = sample_series.target_engines(store, since=start - window_s, until=end)
    if targets is None:
        chosen = tuple(sorted(engines))
    else:
        chosen = tuple(dict.fromkeys(str(t) for t in targets))
        known = set(known_targets(store)["key"].astype(str))
        unknown = [t for t in chosen if t not in known]
        if unknown:
            listed = ", ".join(sorted(known)[:10]) or "none (start servescope watch)"
            raise InputError(
                f"no samples of target {unknown[0]!r} in this store; known targets: {listed}",
                hint="a target is the /metrics URL servescope watch scraped",
            )
        engines = {t: e for t, e in engines.items() if t in chosen}
    windows: dict[str, pd.DataFrame] = {}
    per_target: dict[str, pd.DataFrame] = {}
    lengths: dict[str, list[tuple[float, float]]] = {}
    unknown_hists = [h for h in hists if h not in (*LATENCY_HISTS, *LENGTH_HISTS)]
    if unknown_hists:
        raise ValueError(
            f"unknown histogram {unknown_hists[0]!r}; known: {', '.join(LATENCY_HISTS)}, "
            f"{', '.join(LENGTH_HISTS)}"
        )
    for hist in hists:
        rows = _histogram_rows(store, chosen, hist, start, end)
        windows[hist] = hw.summed_histogram_windows(
            rows, hist, window_s=window_s, quantiles=quantiles, start=start, end=end
        )
        if hist in LENGTH_HISTS:
            lengths[hist] = hw.bucket_increase(rows, hist, start=start, end=end)
        elif by_target:
            per_target[hist] = hw.histogram_windows_by_target(
                rows, hist, window_s=window_s, quantiles=quantiles, start=start, end=end
            )
    empty_state = pd.DataFrame(columns=["target", "engine", "ts", "metric", "value"])
    state = (
        sample_series.engine_series(
            store, since=start - window_s, until=end, metrics=STATE_METRICS, targets=chosen
        )
        if chosen and with_state
        else empty_state
    )
    distinct = set(engines.values())
    return Traffic(
        targets=chosen,
        engine=next(iter(distinct)) if len(distinct) == 1 else None,
        start=float(start),
        end=float(end),
        window_s=float(window_s),
        windows=windows,
        by_target=per_target,
        requests=_requests(store, engines, start, end, window_s),
        state=state,
        gpus=(
            sample_series.gpu_series(store, since=start, until=end)
            if with_state
            else pd.DataFrame(columns=["host", "gpu_index", "ts"])
        ),
        lengths=lengths,
    )
