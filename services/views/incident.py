"""The incident page's view model: a window of watched production traffic, before vs during,
and the four troubleshooting patterns judged on it (``analysis.incident``). Streamlit-free.

URL: ``/incident?target=<target URL>&from=<start>&to=<end>`` (``services.views.traffic.
incident_path`` writes it): ``from``/``to`` in epoch seconds or ISO-8601 (UTC when no offset is
given), ``from`` before ``to``, at most 7 days apart; ``target`` a watched engine target (omitted:
every target with samples in the window, summed). "Before" is the same length immediately
before ``from``.

Reads: :func:`services.views.traffic.traffic` four times — each span once as a single window
(its percentiles from the summed bucket increases over the whole span, its request and error
rate, its length histograms) and once in sub-windows (the charts, the burst and trend
evidence).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import pandas as pd

from analysis import incident, length_mix
from analysis.diagnose import Finding
from errors import InputError
from services.views import traffic as tr
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
    """What the form offers: each engine target with its newest sample, and the default window
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


def _concat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    parts = [df for df in (a, b) if not df.empty]
    if not parts:
        return a
    return pd.concat(parts, ignore_index=True) if len(parts) == 2 else parts[0]


def _request_counts(fine: tr.Traffic) -> tuple[float, ...]:
    """Requests per sub-window during: finished-request counters, else the E2E histogram's
    count (NaN where no scrape spans a sub-window)."""
    if not fine.requests.empty and fine.requests["request_rate"].notna().any():
        r = fine.requests
        return tuple(
            float(f) if pd.notna(rate) else math.nan
            for f, rate in zip(r["finished"], r["request_rate"], strict=True)
        )
    e2e = fine.windows.get("e2e_seconds")
    if e2e is None or e2e.empty:
        return ()
    return tuple(
        float(c) if int(t) > 0 else math.nan
        for c, t in zip(e2e["count"], e2e["targets"], strict=True)
    )


def incident_view(store: Store, request: IncidentRequest) -> IncidentView:
    """Before vs during ``request``'s window and the patterns judged on it. InputError when the
    target is not one the store has samples of (the known ones listed)."""
    targets = [request.target] if request.target else None
    b0, b1 = request.before
    w = sub_window_s(request.span_s)
    spans = {}
    fine = {}
    for name, (lo, hi) in (("before", (b0, b1)), ("during", (request.start, request.end))):
        spans[name] = tr.traffic(store, targets=targets, start=lo, end=hi, window_s=hi - lo)
        fine[name] = tr.traffic(store, targets=targets, start=lo, end=hi, window_s=w)
    summaries = {
        name: incident.span_summary(
            start=t.start,
            end=t.end,
            windows=t.windows,
            requests=t.requests,
            state=t.state,
            gpus=t.gpus,
            prompt_buckets=t.lengths.get("prompt_length_tokens", []),
        )
        for name, t in spans.items()
    }
    before, during = summaries["before"], summaries["during"]
    dur = fine["during"]
    evidence = incident.IncidentEvidence(
        during=during,
        before=before,
        request_counts=_request_counts(dur),
        sub_window_s=w,
        ttft_p99_trend=incident.window_trend(dur.windows.get("ttft_seconds", pd.DataFrame())),
        e2e_p99_trend=incident.window_trend(dur.windows.get("e2e_seconds", pd.DataFrame())),
        memory=incident.memory_trend(dur.gpus),
    )
    state = _concat(fine["before"].state, dur.state)
    if not state.empty:
        state = state[(state["ts"] >= b0) & (state["ts"] <= request.end)]
        state = state.drop_duplicates(subset=["target", "ts", "metric"]).reset_index(drop=True)
    pb, pd_ = before.prompt_lengths, during.prompt_lengths
    chosen = tuple(dict.fromkeys((*spans["before"].targets, *spans["during"].targets)))
    return IncidentView(
        request=request,
        targets=chosen,
        engine=spans["during"].engine or spans["before"].engine,
        before=before,
        during=during,
        findings=tuple(incident.judge(evidence)),
        missing=tuple(incident.missing_inputs(evidence)),
        comparison=incident.comparison(before, during),
        window_s=w,
        windows={
            hist: _concat(fine["before"].windows[hist], dur.windows[hist])
            for hist in tr.LATENCY_HISTS
        },
        requests=_concat(fine["before"].requests, dur.requests),
        state=state,
        gpus=_concat(fine["before"].gpus, dur.gpus),
        prompt_before=pb,
        prompt_during=pd_,
        length_distance=length_mix.distance(pb, pd_),
    )
