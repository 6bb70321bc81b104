"""Which windows of production traffic breach an SLO profile (pure).

A benchmark run meets a profile per request (``analysis.slo.request_meets``); production traffic
has no per-request records, only the engines' histograms, so a *window* is judged instead: the
window's percentile (the profile's, e.g. P99) of TTFT and of end-to-end latency, computed from
the summed bucket increases (``analysis.histogram_windows.summed_histogram_windows``), against
the profile's limits, and its error rate against ``max_error_rate``.

- A window in which no request finished is never a breach (nothing was served late).
- A length-conditioned TTFT target (``ttft_base_ms + ttft_ms_per_1k_input × input / 1000``) is
  applied to the window's *mean* prompt length when the prompt-length histogram's windows are
  given, else to ``ttft_base_ms`` alone; the reason says which.
- A percentile in the ``+Inf`` bucket is the highest finite bound (Prometheus' answer), a lower
  bound on the truth; when that bound already exceeds the limit the window breaches, when it
  does not the breach is undecidable and the window is *not* marked (the reason says so).
- A window that **cannot be judged** is said so (``judged`` False, ``unjudged`` the why), never
  counted as met: a judged histogram whose window holds negative or non-finite counts, or whose
  ``_count`` moved while its buckets give no percentile
  (``analysis.histogram_windows.unreadable``), and a percentile in the ``+Inf`` bucket that
  cannot be told against its limit. A breach found in a field that could be read stands.
- Per-request TPOT is not judged: engines export inter-token latency, a per-token
  distribution, not the per-request mean the profile's ``tpot_ms`` bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import pandas as pd

from analysis.engine_series import quantile_name
from analysis.histogram_windows import unreadable
from analysis.slo import SloProfile

#: The profile fields judged on windows and the histogram each is read from.
SLO_HISTS: Final[dict[str, str]] = {"ttft_ms": "ttft_seconds", "e2e_ms": "e2e_seconds"}
#: Short names used in the reasons.
_LABELS: Final = {"ttft_ms": "TTFT", "e2e_ms": "E2E"}
PROMPT_HIST: Final = "prompt_length_tokens"


def quantile_column(profile: SloProfile) -> str:
    """The windows' column holding the profile's percentile: ``p99`` for 99, ``p99_9`` for 99.9."""
    return f"p{quantile_name(profile.quantile)}"


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.3g} s" if ms >= 1000 else f"{ms:.3g} ms"


def _limits(
    field: str, profile: SloProfile, prompt_means: pd.Series | None, n: int
) -> tuple[list[float | None], str]:
    """Per window the limit (ms) of ``field``, and how it was set (for the reason)."""
    if field == "ttft_ms" and profile.length_conditioned:
        if prompt_means is not None:
            limits = [
                profile.ttft_limit_ms(float(m) if m is not None and not pd.isna(m) else None)
                for m in prompt_means
            ]
            return limits, " (limit at the window's mean prompt length)"
        return [profile.ttft_limit_ms(None)] * n, " (base limit: no prompt lengths recorded)"
    return [getattr(profile, field)] * n, ""


def window_breaches(
    windows: Mapping[str, pd.DataFrame],
    profile: SloProfile,
    requests: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per window of ``windows`` (hist → ``summed_histogram_windows`` frame, all on one
    grid): window_start, window_end, breach, then per judged field ``<field>_value_ms``,
    ``<field>_limit_ms``, ``<field>_breach``; ``error_rate``, ``error_limit``, ``error_breach``
    when ``requests`` (``request_rate_windows``) is given; ``reason`` (empty when none);
    ``judged`` (False when a judged histogram could not be read in that window) and
    ``unjudged`` (why not; empty when judged).

    Raises ValueError when the profile's percentile has no column in the windows (compute them
    with that quantile).
    """
    col = quantile_column(profile)
    judged = {
        f: h
        for f, h in SLO_HISTS.items()
        if getattr(profile, f) is not None or (f == "ttft_ms" and profile.length_conditioned)
    }
    grid: pd.DataFrame | None = None
    for each in windows.values():
        if not each.empty:
            grid = each[["window_start", "window_end"]].reset_index(drop=True)
            break
    if requests is not None and grid is None and not requests.empty:
        grid = requests[["window_start", "window_end"]].reset_index(drop=True)
    columns = ["window_start", "window_end", "breach"]
    for f in judged:
        columns += [f"{f}_value_ms", f"{f}_limit_ms", f"{f}_breach"]
    if requests is not None:
        columns += ["error_rate", "error_limit", "error_breach"]
    columns += ["reason", "judged", "unjudged"]
    if grid is None:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    n = len(grid)
    out = grid.copy()
    reasons: list[list[str]] = [[] for _ in range(n)]
    unjudged: list[list[str]] = [[] for _ in range(n)]
    breach = [False] * n
    prompt = windows.get(PROMPT_HIST)
    prompt_means = (
        prompt.set_index("window_start")["mean"]
        .reindex(grid["window_start"])
        .reset_index(drop=True)
        if prompt is not None and not prompt.empty
        else None
    )
    for field, hist in judged.items():
        frame = windows.get(hist)
        values: list[float] = [math.nan] * n
        counts: list[float] = [0.0] * n
        uppers: list[float] = [math.nan] * n
        phrases: list[str] = [""] * n
        notes: list[str] = [""] * n
        if frame is not None and not frame.empty:
            if col not in frame.columns:
                raise ValueError(
                    f"the windows of {hist} have no {col} column; compute them with the "
                    f"profile's percentile ({profile.percentile:g})"
                )
            wf = frame.set_index("window_start").reindex(grid["window_start"])
            values = [float(v) * 1000.0 for v in wf[col].to_numpy(dtype="float64")]
            counts = [float(c) if not pd.isna(c) else 0.0 for c in wf["count"]]
            uppers = [float(v) for v in wf[f"{col}_upper"].to_numpy(dtype="float64")]
            phrases = [str(p) if isinstance(p, str) else "" for p in wf[f"{col}_precision"]]
            if "note" in wf.columns:
                notes = [str(x) if isinstance(x, str) else "" for x in wf["note"]]
        limits, how = _limits(field, profile, prompt_means, n)
        flags: list[bool] = []
        label = f"P{profile.percentile:g} {_LABELS[field]}"
        for i in range(n):
            value, limit = values[i], limits[i]
            if limit is not None and unreadable(notes[i]):
                unjudged[i].append(f"{label}: {notes[i]}")
            hit = bool(
                limit is not None and counts[i] > 0 and not math.isnan(value) and value > limit
            )
            flags.append(hit)
            if hit:
                breach[i] = True
                inside = f" ({phrases[i]})" if phrases[i] else ""
                reasons[i].append(
                    f"{label} {_seconds(value)} > {_seconds(float(limit or 0))}{how}{inside}"
                )
            elif (
                limit is not None
                and counts[i] > 0
                and math.isinf(uppers[i])
                and not math.isnan(value)
                and value <= limit
            ):
                phrase = (
                    f"{label} in the +Inf bucket above {_seconds(value)}: cannot tell against "
                    f"{_seconds(float(limit))}"
                )
                reasons[i].append(phrase)
                unjudged[i].append(phrase)
        out[f"{field}_value_ms"] = values
        out[f"{field}_limit_ms"] = [math.nan if x is None else float(x) for x in limits]
        out[f"{field}_breach"] = flags
    if requests is not None:
        r = (
            requests.set_index("window_start").reindex(grid["window_start"])
            if not requests.empty
            else None
        )
        rates = (
            [float(v) for v in r["error_rate"].to_numpy(dtype="float64")]
            if r is not None
            else [math.nan] * n
        )
        failed = (
            [float(v) if not pd.isna(v) else 0.0 for v in r["failed"]]
            if r is not None
            else [0.0] * n
        )
        eflags = []
        for i, rate in enumerate(rates):
            hit = bool(not math.isnan(rate) and rate > profile.max_error_rate)
            eflags.append(hit)
            if hit:
                breach[i] = True
                reasons[i].append(
                    f"error rate {rate:.1%} > {profile.max_error_rate:.1%} ({failed[i]:.0f} failed)"
                )
        out["error_rate"] = rates
        out["error_limit"] = profile.max_error_rate
        out["error_breach"] = eflags
    out["breach"] = breach
    out["reason"] = ["; ".join(r) for r in reasons]
    out["judged"] = [not u for u in unjudged]
    out["unjudged"] = ["; ".join(u) for u in unjudged]
    return out[columns]
