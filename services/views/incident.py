"""The incident page's view model: a window of watched production traffic, before vs during,
and the four troubleshooting patterns judged on it (``analysis.incident``). Streamlit-free.

URL: ``/incident?target=<target URL>&from=<start>&to=<end>`` (``services.views.traffic.
incident_path`` writes it): ``from``/``to`` in epoch seconds or ISO-8601 (UTC when no offset is
given), ``from`` before ``to``, at most 7 days apart; ``target`` a watched engine target (omitted:
every target with samples in the window, summed). "Before" is the same length immediately
before ``from``.

Reads: :func:`services.views.traffic.traffic` twice over before + during — once in windows as
long as the span (each span's percentiles from its summed bucket increases over the whole span,
its request and error rate) and once in sub-windows (the charts, the burst and trend evidence)
— and each span's prompt-length buckets. (A window over 3.5 days is read span by span: one
read covers at most 7 days.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import pandas as pd

from analysis import histogram_windows as hw
from analysis import incident, length_mix
from analysis.diagnose import Finding
from errors import InputError
from services.views import traffic as tr
from store import sample_series
from store.db import Store

#: The URL's parameters.
TARGET_PARAM: Final = "target"
FROM_PARAM: Final = "from"
TO_PARAM: Final = "to"
#: The form's default range: the last 15 minutes of the newest target.
DEFAULT_SPAN_S: Final = 15 * 60.0
#: Sub-windows per span on the charts (fewer for short spans: at least MIN_SUB_WINDOW_S each).
SUB_WINDOWS: Final = 30
MIN_SUB_WINDOW_S: Final = 10.0
ACCEPTED_TIME: Final = (
    "epoch seconds (1767225600) or ISO-8601 UTC (2026-01-01T00:00:00Z; no offset means UTC)"
)


def parse_time(param: str, text: str) -> float:
    """``text`` as epoch seconds: a number, or an ISO-8601 date-time (no offset: UTC)."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            raise InputError(
                f"{param}={text!r} is not a time; accepted: {ACCEPTED_TIME}",
                hint="the URL's from and to bound the window to investigate",
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{param}={text!r} is not a time; accepted: {ACCEPTED_TIME}")
    return value


def iso_utc(ts: float) -> str:
    """``2026-01-01T00:00:00Z``: what the form shows and writes."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class IncidentRequest:
    """The window to investigate: ``target`` (None: every target) over [start, end]."""

    target: str | None
    start: float
    end: float

    @property
    def span_s(self) -> float:
        return self.end - self.start

    @property
    def before(self) -> tuple[float, float]:
        return incident.before_span(self.start, self.end)

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> IncidentRequest | None:
        """The window the URL names; None when it names none (the page shows its form).
        InputError naming the parameter and what is accepted when one is bad or missing."""
        target = (params.get(TARGET_PARAM) or "").strip() or None
        raw_from = (params.get(FROM_PARAM) or "").strip()
        raw_to = (params.get(TO_PARAM) or "").strip()
        if target is None and not raw_from and not raw_to:
            return None
        for name, raw in ((FROM_PARAM, raw_from), (TO_PARAM, raw_to)):
            if not raw:
                raise InputError(
                    f"{name} is missing; accepted: {ACCEPTED_TIME}",
                    hint="an incident link names target, from and to",
                )
        start, end = parse_time(FROM_PARAM, raw_from), parse_time(TO_PARAM, raw_to)
        if end <= start:
            raise InputError(
                f"from ({iso_utc(start)}) must be before to ({iso_utc(end)})",
                hint="from is the window's start, to its end",
            )
        if end - start > tr.MAX_SPAN_S:
            raise InputError(
                f"from … to spans {(end - start) / 86400:.1f} days; accepted: at most 7 days",
                hint="an incident is minutes to hours: narrow the window",
            )
        return cls(target, start, end)

    def params(self) -> dict[str, str]:
        """The URL's parameters of this request (whole seconds, widened outwards)."""
        out = {FROM_PARAM: str(int(self.start // 1)), TO_PARAM: str(int(-(-self.end // 1)))}
        if self.target:
            out = {TARGET_PARAM: self.target, **out}
        return out

    @property
    def path(self) -> str:
        return tr.incident_path(self.target, self.start, self.end)


@dataclass(frozen=True)
class IncidentChoices:
    """What the form offers: each engine target with its newest sample (then each
    ``model:<name>`` group of targets), and the default window
    (the last 15 minutes of the newest target, or of ``request`` when one was given)."""

    targets: tuple[tuple[str, float], ...]  # (target, last sample ts), newest first
    target: str | None
    start: float
    end: float

    @property
    def empty(self) -> bool:
        return not self.targets


def incident_choices(store: Store, request: IncidentRequest | None = None) -> IncidentChoices:
    """The form's choices; its defaults are ``request`` when given."""
    known = tr.known_targets(store).sort_values("last_ts", ascending=False)
    targets = tuple((str(k), float(t)) for k, t in zip(known["key"], known["last_ts"], strict=True))
    last = dict(targets)
    # then each model's targets, summed (model:<name>), with its newest target's last sample
    targets += tuple(
        (group, max(last.get(t, 0.0) for t in members))
        for group, members in tr.model_groups(store).items()
    )
    if request is not None:
        return IncidentChoices(targets, request.target, request.start, request.end)
    if not targets:
        return IncidentChoices((), None, 0.0, DEFAULT_SPAN_S)
    end = float(math.ceil(targets[0][1]))
    return IncidentChoices(targets, targets[0][0], end - DEFAULT_SPAN_S, end)


def sub_window_s(span_s: float) -> float:
    """The charts' sub-window: the span cut in ``SUB_WINDOWS`` (fewer when they would be
    shorter than ``MIN_SUB_WINDOW_S``), so sub-windows tile each span exactly."""
    n = max(1, min(SUB_WINDOWS, int(span_s // MIN_SUB_WINDOW_S)))
    return span_s / n


@dataclass(frozen=True)
class IncidentView:
    """Everything the incident page shows for one window."""

    request: IncidentRequest
    targets: tuple[str, ...]  # the targets read (all with samples when none was named)
    engine: str | None
    before: incident.SpanSummary
    during: incident.SpanSummary
    findings: tuple[Finding, ...]
    missing: tuple[str, ...]  # what the rules could not judge
    comparison: pd.DataFrame  # analysis.incident.comparison rows
    window_s: float  # the charts' sub-window
    #: Sub-windows over before + during: latency hist → summed_histogram_windows rows.
    windows: dict[str, pd.DataFrame]
    requests: pd.DataFrame  # request_rate_windows over before + during (may be empty)
    state: pd.DataFrame  # engine samples (target, engine, ts, metric, value), before + during
    gpus: pd.DataFrame  # GPU samples, before + during
    prompt_before: length_mix.LengthDist
    prompt_during: length_mix.LengthDist
    length_distance: float  # KS distance of the two prompt-length distributions (NaN: unknown)

    @property
    def empty(self) -> bool:
        """True when the window and the span before it hold no sample at all."""
        return (
            self.state.empty
            and self.gpus.empty
            and not any((df["count"] > 0).any() for df in self.windows.values() if not df.empty)
        )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    parts = [df for df in frames if not df.empty]
    if not parts:
        return frames[0]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _read(
    store: Store, targets: list[str] | None, request: IncidentRequest, window_s: float
) -> list[tr.Traffic]:
    """The span before and the window, in windows of ``window_s`` on one grid from the
    before's start: one read when both fit in one (at most ``MAX_SPAN_S``), else one each."""
    b0, b1 = request.before
    if request.end - b0 <= tr.MAX_SPAN_S:
        return [tr.traffic(store, targets=targets, start=b0, end=request.end, window_s=window_s)]
    return [
        tr.traffic(store, targets=targets, start=lo, end=hi, window_s=window_s)
        for lo, hi in ((b0, b1), (request.start, request.end))
    ]


def _starting(df: pd.DataFrame, start: float, *, exact: bool) -> pd.DataFrame:
    """The windows that start at ``start`` (``exact``) or at or after it."""
    if df.empty:
        return df
    tol = 1e-3  # seconds: epoch floats near 2e9 are exact to ~2e-7 s
    if exact:
        return df[(df["window_start"] - start).abs() <= tol]
    return df[df["window_start"] >= start - tol]


def _prompt_buckets(
    store: Store, targets: tuple[str, ...], spans: tuple[tuple[float, float], ...]
) -> list[list[tuple[float, float]]]:
    """Each span's prompt-length bucket increases, summed over ``targets``."""
    hist = "prompt_length_tokens"
    lo, hi = spans[0][0], spans[-1][1]
    parts = [
        sample_series.engine_histogram_series(store, t, hist, since=lo, until=hi).assign(target=t)
        for t in targets
    ]
    rows = _concat(parts) if parts else pd.DataFrame(columns=["target", "ts", "metric", "value"])
    return [hw.bucket_increase(rows, hist, start=a, end=b) for a, b in spans]


def _request_counts(
    requests: pd.DataFrame, windows: Mapping[str, pd.DataFrame]
) -> tuple[float, ...]:
    """Requests per sub-window: finished-request counters, else the E2E histogram's count (NaN
    where no scrape spans a sub-window)."""
    if not requests.empty and requests["request_rate"].notna().any():
        return tuple(
            float(f) if pd.notna(rate) else math.nan
            for f, rate in zip(requests["finished"], requests["request_rate"], strict=True)
        )
    e2e = windows.get("e2e_seconds")
    if e2e is None or e2e.empty:
        return ()
    return tuple(
        float(c) if int(t) > 0 else math.nan
        for c, t in zip(e2e["count"], e2e["targets"], strict=True)
    )


def incident_view(store: Store, request: IncidentRequest) -> IncidentView:
    """Before vs during ``request``'s window and the patterns judged on it. InputError when the
    target is not one the store has samples of (the known ones listed).

    Two reads through ``traffic``: the two spans as one window each (their percentiles from
    the summed bucket increases over the whole span, their request and error rates), and in
    sub-windows (charts, bursts, trends); plus each span's prompt-length buckets."""
    targets = [request.target] if request.target else None
    b0, b1 = request.before
    w = sub_window_s(request.span_s)
    coarse = _read(store, targets, request, request.span_s)
    fine = _read(store, targets, request, w)
    chosen = tuple(dict.fromkeys(t for part in coarse for t in part.targets))
    spans = ((b0, b1), (request.start, request.end))
    prompts = _prompt_buckets(store, chosen, spans) if chosen else [[], []]
    state = _concat([t.state for t in coarse])
    gpus = _concat([t.gpus for t in coarse])
    before, during = (
        incident.span_summary(
            start=lo,
            end=hi,
            windows={
                h: _starting(df, lo, exact=True)
                for h, df in (
                    (h, _concat([t.windows[h] for t in coarse])) for h in tr.LATENCY_HISTS
                )
            },
            requests=_starting(_concat([t.requests for t in coarse]), lo, exact=True),
            state=state,
            gpus=gpus,
            prompt_buckets=buckets,
        )
        for (lo, hi), buckets in zip(spans, prompts, strict=True)
    )
    windows = {h: _concat([t.windows[h] for t in fine]) for h in tr.LATENCY_HISTS}
    requests = _concat([t.requests for t in fine])
    now = {h: _starting(df, request.start, exact=False) for h, df in windows.items()}
    fine_gpus = _concat([t.gpus for t in fine])
    evidence = incident.IncidentEvidence(
        during=during,
        before=before,
        request_counts=_request_counts(_starting(requests, request.start, exact=False), now),
        sub_window_s=w,
        ttft_p99_trend=incident.window_trend(now["ttft_seconds"]),
        e2e_p99_trend=incident.window_trend(now["e2e_seconds"]),
        memory=incident.memory_trend(
            fine_gpus[fine_gpus["ts"] > request.start] if not fine_gpus.empty else fine_gpus
        ),
    )
    chart_state = _concat([t.state for t in fine])
    if not chart_state.empty:
        chart_state = chart_state[(chart_state["ts"] >= b0) & (chart_state["ts"] <= request.end)]
        chart_state = chart_state.drop_duplicates(subset=["target", "ts", "metric"])
    if not fine_gpus.empty:
        fine_gpus = fine_gpus.drop_duplicates(subset=["host", "gpu_index", "ts"])
    pb, pd_ = before.prompt_lengths, during.prompt_lengths
    engines = {t.engine for t in coarse if t.engine}
    return IncidentView(
        request=request,
        targets=chosen,
        engine=next(iter(engines)) if len(engines) == 1 else None,
        before=before,
        during=during,
        findings=tuple(incident.judge(evidence)),
        missing=tuple(incident.missing_inputs(evidence)),
        comparison=incident.comparison(before, during),
        window_s=w,
        windows=windows,
        requests=requests,
        state=chart_state.reset_index(drop=True),
        gpus=fine_gpus.reset_index(drop=True),
        prompt_before=pb,
        prompt_during=pd_,
        length_distance=length_mix.distance(pb, pd_),
    )
