"""The Live page's view model: production traffic of watched engines, for the on-call engineer.

``live_view`` reads the last ``span`` of samples (every read bounded by it) and derives what the
page shows:

- windowed P50/P90/P99 of TTFT, E2E and queue time from the engines' own histograms, request and
  error rate per window (``services.views.traffic.traffic``, summed over the shown targets);
- the windows that breach the chosen SLO profile (``analysis.slo_windows.window_breaches``), each
  with the link to its incident view (``services.views.traffic.incident_path``);
- engine state (running, waiting, KV usage, preemptions) per target and GPU memory/utilisation,
  for the same span, so the page draws them on the latency's time axis;
- the production length mix over the span (``analysis.length_mix`` of the length histograms);
- per target its latest gauges and counter rates, and which targets and GPU hosts are stale.

The page rebuilds it on every refresh of its panels: live data is never cached (a cached copy
would be stale by design).

URL (``LiveSelection.from_params``; a bad value is a ``problem`` naming the parameter and what
is accepted, never an exception):

- ``?slo=<profile>``: the SLO profile the windows are judged against (default
  ``interactive-chat``, else the catalog's first);
- ``?target=<url>``: one watched target, or ``model:<name>`` for every target serving that model
  (from the ``model_name`` label of its series), summed (default: every engine target, summed);
- ``?window=<seconds>``: the window of the percentiles, 5..3600 (default 30);
- ``?span=<minutes>``: how much history is shown, 1..180 (default 15), at most 180 windows;
- ``?refresh=<seconds>``: how often the panels refresh, clamped to 1..60 (default 2).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

import pandas as pd

from analysis import engine_series, length_mix, slo, slo_windows
from errors import ConfigError, InputError
from services.commands import slo_profiles
from services.views import traffic as traffic_view
from store import sample_series
from store.db import Store

#: Default aggregation window of the percentiles (seconds) and its bounds.
WINDOW_S: Final = 30
WINDOW_MIN_S: Final = 5
WINDOW_MAX_S: Final = 3600
#: The window sizes the page offers (any whole number in the bounds works in the URL).
WINDOW_CHOICES: Final = (10, 30, 60, 300)
#: Default history shown (minutes) and its bounds.
SPAN_MIN: Final = 15
SPAN_MIN_MIN: Final = 1
SPAN_MAX_MIN: Final = 180
SPAN_CHOICES: Final = (5, 15, 60, 180)
#: At most this many windows per span: the windowed part is computed again whenever a window
#: completes, and must take less than a window (bench/live_refresh.py: 4 targets at 1 Hz).
MAX_WINDOWS: Final = 180
#: A window is judged once this long has passed since it closed (the watcher flushes every 2 s:
#: its last scrapes are stored by then), so a judged window never changes and can be cached.
SETTLE_S: Final = 5.0
#: Default refresh period of the live panels (seconds) and its bounds (out of range: clamped).
REFRESH_S: Final = 2.0
REFRESH_MIN_S: Final = 1.0
REFRESH_MAX_S: Final = 60.0
#: The profile judged when the URL names none (when the catalog has it).
DEFAULT_SLO: Final = "interactive-chat"
#: The latency histograms the page draws, in order.
LATENCY_SHOWN: Final = ("ttft_seconds", "e2e_seconds", "queue_time_seconds")
#: The quantiles always computed (the profile's is added).
QUANTILES: Final = (0.5, 0.9, 0.99)

SLO_PARAM: Final = "slo"
TARGET_PARAM: Final = "target"
WINDOW_PARAM: Final = "window"
SPAN_PARAM: Final = "span"
REFRESH_PARAM: Final = "refresh"

_ENGINE_COLUMNS: Final = ["target", "engine", "ts", "metric", "value"]
#: Engine gauges and counters read for the summary and the state charts.
STATE_READ: Final = (
    *sample_series.LIVE_METRICS,
    "requests_preempted",
)


def _whole(raw: str, param: str, lo: int, hi: int, unit: str) -> int:
    """``raw`` as a whole number in lo..hi, else an InputError naming ``?param=``."""
    accepted = f"a whole number of {unit} from {lo} to {hi}"
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"?{param}={raw} is not accepted: {accepted}") from None
    if not math.isfinite(value) or value != int(value) or not lo <= value <= hi:
        raise InputError(f"?{param}={raw} is not accepted: {accepted}")
    return int(value)


@dataclass(frozen=True)
class LiveSelection:
    """What the Live page is asked to show; the defaults are the page's first view.

    ``problem``: why the URL's parameters were not accepted (the page shows it and nothing
    else); then the other fields are the defaults.
    """

    slo: str | None = None  # None: DEFAULT_SLO, else the catalog's first profile
    target: str | None = None  # None: every engine target, summed
    window_s: int = WINDOW_S  # the percentiles' window
    span_min: int = SPAN_MIN  # how much history is shown
    refresh_s: float = REFRESH_S  # how often the panels refresh
    problem: str | None = None

    @property
    def span_s(self) -> float:
        return float(self.span_min * 60)

    @classmethod
    def default(cls) -> LiveSelection:
        """The page's first view."""
        return cls()

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> LiveSelection:
        """The selection a URL's query parameters describe (see the module's docstring)."""
        try:
            return cls._parse(params)
        except InputError as exc:
            return cls(problem=exc.message)

    @classmethod
    def _parse(cls, params: Mapping[str, str | None]) -> LiveSelection:
        def given(name: str) -> str | None:
            raw = params.get(name)
            return None if raw is None or not str(raw).strip() else str(raw).strip()

        window = given(WINDOW_PARAM)
        span = given(SPAN_PARAM)
        window_s = (
            WINDOW_S
            if window is None
            else _whole(window, WINDOW_PARAM, WINDOW_MIN_S, WINDOW_MAX_S, "seconds")
        )
        span_min = (
            SPAN_MIN
            if span is None
            else _whole(span, SPAN_PARAM, SPAN_MIN_MIN, SPAN_MAX_MIN, "minutes")
        )
        if window_s > span_min * 60:
            raise InputError(
                f"?window={window_s} is longer than ?span={span_min} minutes: accepted a window "
                "no longer than the span"
            )
        if span_min * 60 / window_s > MAX_WINDOWS:
            raise InputError(
                f"?span={span_min} with ?window={window_s} makes "
                f"{math.ceil(span_min * 60 / window_s)} windows: accepted at most {MAX_WINDOWS} "
                f"(a window of at least {math.ceil(span_min * 60 / MAX_WINDOWS)} s for this span)"
            )
        refresh_raw = given(REFRESH_PARAM)
        refresh = REFRESH_S
        if refresh_raw is not None:
            try:
                refresh = float(refresh_raw)
            except ValueError:
                refresh = math.nan
            if not math.isfinite(refresh):
                raise InputError(
                    f"?refresh={refresh_raw} is not accepted: a number of seconds (1 to 60)"
                )
        return cls(
            slo=given(SLO_PARAM),
            target=given(TARGET_PARAM),
            window_s=window_s,
            span_min=span_min,
            refresh_s=min(REFRESH_MAX_S, max(REFRESH_MIN_S, refresh)),
        )

    def params(self) -> dict[str, str]:
        """This selection as the page's URL parameters (defaults left out)."""
        out: dict[str, str] = {}
        if self.slo:
            out[SLO_PARAM] = self.slo
        if self.target:
            out[TARGET_PARAM] = self.target
        if self.window_s != WINDOW_S:
            out[WINDOW_PARAM] = str(self.window_s)
        if self.span_min != SPAN_MIN:
            out[SPAN_PARAM] = str(self.span_min)
        if self.refresh_s != REFRESH_S:
            out[REFRESH_PARAM] = f"{self.refresh_s:g}"
        return out


@dataclass(frozen=True)
class WindowsRequest:
    """Everything the windowed part of the page depends on: complete windows of ``window_s``
    from ``start`` to ``end`` (on the epoch grid) of ``target`` (None: every target), judged
    against ``profile``. Frozen and hashable: the UI caches ``judged_windows`` by it, and as the
    windows are complete and settled (``SETTLE_S``) the result never changes."""

    target: str | None
    start: float
    end: float
    window_s: float
    profile: slo.SloProfile | None


@dataclass(frozen=True)
class JudgedWindows:
    """The windowed part of the page (``judged_windows``)."""

    #: hist -> windows (``summed_histogram_windows`` columns; seconds) for LATENCY_SHOWN
    latency: Mapping[str, pd.DataFrame]
    requests: pd.DataFrame  # request_rate_windows
    #: ``window_breaches`` rows plus ``link`` (the window's incident view); empty without profile
    judged: pd.DataFrame
    lengths: Mapping[str, length_mix.LengthDist]


@dataclass(frozen=True)
class LiveView:
    """Everything the Live page's panels show at ``now``."""

    now: float
    start: float  # the span shown: [start, end]; windows from start (``window_grid``)
    end: float
    span_s: float
    window_s: float  # the percentiles' window
    current: bool  # the span ends now (False: showing the last recorded span)
    #: One row per engine target: latest gauges, counter rates, staleness
    #: (``analysis.engine_series.target_summary``).
    targets: pd.DataFrame
    engine: pd.DataFrame  # target, engine, ts, metric, value (STATE_READ)
    generation_rates: pd.DataFrame  # target, ts, rate: generated tokens per second
    preemption_rates: pd.DataFrame  # target, ts, rate: preemptions per second
    gpus_latest: pd.DataFrame  # each GPU's newest sample
    gpus: pd.DataFrame  # the GPUs' samples in the span (``store.sample_series.gpu_series``)
    target: str | None = None  # the one target shown (None: every engine target, summed)
    target_choices: tuple[str, ...] = ()  # every engine target the store knows
    profiles: tuple[str, ...] = ()  # the catalog's SLO profiles
    profile: slo.SloProfile | None = None
    profile_problem: str | None = None  # why the picked profile cannot be judged
    #: hist -> windows (``summed_histogram_windows`` columns; seconds) for LATENCY_SHOWN
    latency: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)  # request_rate_windows
    #: ``window_breaches`` rows plus ``link`` (the window's incident view); empty without profile
    judged: pd.DataFrame = field(default_factory=pd.DataFrame)
    lengths: Mapping[str, length_mix.LengthDist] = field(default_factory=dict)
    stale_targets: frozenset[str] = field(default_factory=frozenset)
    stale_hosts: frozenset[str] = field(default_factory=frozenset)
    #: what the windowed part is built from (None: no engine target in the span)
    windows_request: WindowsRequest | None = None

    def with_windows(self, windows: JudgedWindows) -> LiveView:
        """This view with its windowed part."""
        return replace(
            self,
            latency=windows.latency,
            requests=windows.requests,
            judged=windows.judged,
            lengths=windows.lengths,
        )

    @property
    def empty(self) -> bool:
        """True when no engine and no GPU has ever reported."""
        return self.targets.empty and self.gpus_latest.empty and not self.target_choices

    @property
    def breaches(self) -> pd.DataFrame:
        """The windows that breach the profile, oldest first (``judged`` rows)."""
        if self.judged.empty or "breach" not in self.judged.columns:
            return self.judged
        return self.judged[self.judged["breach"].astype(bool)].reset_index(drop=True)

    @property
    def quantile_columns(self) -> tuple[str, ...]:
        """The percentile columns of the latency windows (``p50``, ``p90``, …, ascending)."""
        return tuple(f"p{engine_series.quantile_name(q)}" for q in quantiles_for(self.profile))

    @property
    def slo_column(self) -> str | None:
        """The percentile column the profile judges (``p99`` for a P99 profile)."""
        if self.profile is None:
            return None
        return f"p{engine_series.quantile_name(self.profile.quantile)}"

    def investigate_range(self, lo: float, hi: float) -> tuple[float, float]:
        """A range chosen on the timeline as the incident view gets it: clipped to the span;
        a click (lo == hi) or a sliver narrower than a window becomes the window holding it."""
        lo, hi = sorted((lo, hi))
        lo, hi = max(lo, self.start), min(hi, self.end)
        if hi - lo >= self.window_s:
            return lo, hi
        k = max(0, math.floor((min(lo, self.end) - self.start) / self.window_s))
        w0 = self.start + k * self.window_s
        return w0, w0 + self.window_s

    def limit_s(self, hist: str) -> float | None:
        """The profile's fixed limit on ``hist`` in seconds (None: no limit, or one that
        depends on the prompt length: see ``judged``)."""
        if self.profile is None:
            return None
        for name, h in slo_windows.SLO_HISTS.items():
            if h == hist:
                if name == "ttft_ms" and self.profile.length_conditioned:
                    return None
                value = getattr(self.profile, name, None)
                return None if value is None else float(value) / 1000.0
        return None


def quantiles_for(profile: slo.SloProfile | None) -> tuple[float, ...]:
    """P50, P90, P99 and the profile's own percentile, ascending."""
    qs = set(QUANTILES)
    if profile is not None:
        qs.add(profile.quantile)
    return tuple(sorted(qs))


def _profile(
    store: Store, name: str | None
) -> tuple[tuple[str, ...], slo.SloProfile | None, str | None]:
    """(the catalog's profile names, the picked profile, why it cannot be used). A name the
    catalog lacks is an InputError naming the accepted ones."""
    entries = slo_profiles.slo_profiles(store)
    names = tuple(entries)
    if name is None:
        name = DEFAULT_SLO if DEFAULT_SLO in entries else (names[0] if names else None)
        if name is None:
            return names, None, "the store's catalog holds no SLO profile: nothing is judged"
    elif name not in entries:
        raise InputError(
            f"?slo={name} is not an SLO profile of this store; accepted: "
            + (", ".join(names) if names else "none (the catalog is empty)"),
            hint="profiles come from seeds/slo_profiles.toml and those saved on Compare",
        )
    try:
        return names, slo.SloProfile.from_entry(entries[name]), None
    except ConfigError as exc:
        return names, None, f"SLO profile {name!r} cannot be judged: {exc.message}"


def _known_targets(store: Store) -> pd.DataFrame:
    known = traffic_view.known_targets(store)
    if known.empty:
        return pd.DataFrame(
            {"key": pd.Series(dtype="object"), "last_ts": pd.Series(dtype="float64")}
        )
    return known


def live_view(
    store: Store,
    selection: LiveSelection,
    *,
    now: float | None = None,
    with_windows: bool = True,
) -> LiveView:
    """The last ``selection.span_s`` of samples up to ``now`` (default: the clock) or, when
    nothing is that recent, the last recorded span; judged against the selected profile.

    ``with_windows=False`` leaves the windowed part (``judged_windows`` of
    ``view.windows_request``) for the caller to add with ``view.with_windows`` (the page caches
    it: it changes only when a window completes).

    Raises InputError for a ``?slo=`` the catalog lacks or a ``?target=`` the store never saw
    (each naming what is accepted)."""
    if selection.problem is not None:
        raise InputError(selection.problem)
    now = time.time() if now is None else now
    span_s = selection.span_s
    names, profile, profile_problem = _profile(store, selection.slo)
    known = _known_targets(store)
    groups = traffic_view.model_groups(store)
    # each target, then each model whose targets are summed (model:<name>)
    choices = (*sorted(str(k) for k in known["key"]), *groups)
    target = selection.target
    if target is not None and target not in choices:
        raise InputError(
            f"?target={target} is not a watched engine target of this store; accepted: "
            + (", ".join(choices) if choices else "none (no engine has been watched)")
        )
    shown = list(groups.get(target, (target,))) if target is not None else None
    # the span ends now when anything shown reported within it, else at the newest sample
    newest = (
        float(known.loc[known["key"].isin(shown), "last_ts"].max())
        if shown is not None
        else sample_series.latest_sample_ts(store)
    )
    current = newest is not None and newest >= now - span_s
    end = now if current or newest is None else newest
    start, windows_end = window_grid(
        end - (SETTLE_S if current else 0.0), span_s, float(selection.window_s)
    )
    targets_arg = shown
    engine = (
        sample_series.engine_series(
            store, since=start, until=end, metrics=STATE_READ, targets=targets_arg
        )
        if newest is not None
        else pd.DataFrame(columns=_ENGINE_COLUMNS)
    )
    gpus = sample_series.gpu_series(store, since=start, until=end)
    gpus_latest = sample_series.latest_gpu_state(store, since=start)
    summary = engine_series.target_summary(engine, now=now)
    stale_targets = frozenset(str(t) for t in summary.loc[summary["stale"].astype(bool), "target"])
    view = LiveView(
        now=now,
        start=start,
        end=end,
        span_s=span_s,
        window_s=float(selection.window_s),
        current=current,
        targets=summary,
        engine=engine,
        generation_rates=engine_series.rate_series(engine, "generation_tokens_total"),
        preemption_rates=engine_series.rate_series(engine, "preemptions_total"),
        gpus_latest=gpus_latest,
        gpus=gpus,
        target=target,
        target_choices=choices,
        profiles=names,
        profile=profile,
        profile_problem=profile_problem,
        stale_targets=stale_targets,
        stale_hosts=stale_hosts(gpus, gpus_latest, now),
    )
    if summary.empty:
        return view
    request = WindowsRequest(
        target=target,
        start=start,
        end=windows_end,
        window_s=float(selection.window_s),
        profile=profile,
    )
    view = replace(view, windows_request=request)
    return view.with_windows(judged_windows(store, request)) if with_windows else view


def judged_windows(store: Store, request: WindowsRequest) -> JudgedWindows:
    """The windows of ``request``: percentiles of LATENCY_SHOWN, request and error rate
    (``services.views.traffic.traffic``), each judged against the profile with its incident
    link, and the span's length mix."""
    traffic = traffic_view.traffic(
        store,
        targets=[request.target] if request.target is not None else None,
        start=request.start,
        end=request.end,
        window_s=request.window_s,
        quantiles=quantiles_for(request.profile),
        # what the page draws and judges; state and GPUs are read live, outside this cache
        hists=(*LATENCY_SHOWN, *traffic_view.LENGTH_HISTS),
        by_target=False,
        with_state=False,
    )
    latency: dict[str, pd.DataFrame] = {
        h: traffic.windows[h] for h in LATENCY_SHOWN if h in traffic.windows
    }
    judged = pd.DataFrame()
    if request.profile is not None:
        judged = slo_windows.window_breaches(traffic.windows, request.profile, traffic.requests)
        judged = judged.assign(
            link=[
                traffic_view.incident_path(request.target, float(s), float(e))
                for s, e in zip(judged["window_start"], judged["window_end"], strict=True)
            ]
        )
    lengths = {h: length_mix.from_buckets(pairs) for h, pairs in traffic.lengths.items() if pairs}
    return JudgedWindows(latency=latency, requests=traffic.requests, judged=judged, lengths=lengths)


def window_grid(end: float, span_s: float, window_s: float) -> tuple[float, float]:
    """(first window's start, last window's end) of a span ending at ``end``: windows lie on
    multiples of ``window_s`` since the epoch (a refresh does not move them, a window's link
    stays the same) and only complete ones are judged — the last ends at or before ``end``
    (a window still in progress would show a rate over less time than its length) — and they
    cover at least ``span_s``."""
    grid_end = math.floor(end / window_s) * window_s
    return grid_end - math.ceil(span_s / window_s) * window_s, float(grid_end)


def stale_hosts(gpus: pd.DataFrame, gpus_latest: pd.DataFrame, now: float) -> frozenset[str]:
    """GPU hosts whose newest sample is older than three of their sampling intervals at
    ``now``, and hosts with a newest sample but none in the span."""
    if gpus_latest.empty:
        return frozenset()
    stale: set[str] = set()
    for host, part in gpus.groupby("host") if not gpus.empty else []:
        interval = engine_series.estimate_interval(part["ts"].to_numpy())
        if engine_series.is_stale(float(part["ts"].max()), now, interval):
            stale.add(str(host))
    seen = set(gpus["host"].astype(str)) if not gpus.empty else set()
    return frozenset(stale | {str(h) for h in gpus_latest["host"] if str(h) not in seen})


def investigate_path(target: str | None, start: float, end: float) -> str:
    """The incident view of the range [start, end] (a selection on the latency chart)."""
    lo, hi = sorted((start, end))
    return traffic_view.incident_path(target, lo, hi)
