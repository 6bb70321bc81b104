"""Windowed percentiles summed over targets, their precision, and request/error rates (pure).

The on-call questions ("what was P99 TTFT of this model between 14:05 and 14:10, and how many
requests failed?") are answered from the engines' own cumulative histograms and counters, as
Prometheus answers them:

- **summed over targets**: ``histogram_quantile(q, sum by (le) (increase(x_bucket[w])))`` —
  per target and per bucket the increase over the window (every drop between consecutive
  scrapes is a restart from 0, so a target that restarts mid-window keeps what it served before
  and after), summed across the targets of one model, then the quantile (linear interpolation
  inside the bucket; ``analysis.engine_series.histogram_quantile``). Averaging per-target
  percentiles is *not* this, and is never done here;
- **precision**: a percentile from buckets is only known to lie inside its bucket; each
  percentile comes with that bucket's bounds and a phrase ("P99 inside the 0.5–1 s bucket");
  a rank in the ``+Inf`` bucket answers the highest finite bound, as Prometheus does, and says
  the true value is only known to exceed it;
- **request and error rate** per window from the finished-request counters by reason, as the
  raw store keeps them (``engine_raw_samples``: name, labels JSON). Which series count as
  failures is stated per engine in ``FAILURE_SERIES``.

A window is (w0, w0 + window_s]. Its baseline is a target's last scrape at or before w0; a
target with no scrape at or before w0 (it appeared inside the window) takes its first scrape in
the window as baseline (no extrapolation). An empty window has count 0 and NaN percentiles,
with a ``note`` saying why.

A histogram that cannot be read is said so, never passed off as an empty window: a target whose
scrapes spanning the window hold a negative or non-finite count (``NOTE_INVALID``; the target
is left out of the sum and the window has no percentiles), or a window whose ``_count`` moved
while its buckets give no percentile (no ``+Inf`` bucket, or buckets that counted nothing), or
whose ``_sum`` moved while nothing was counted (NaN counts: ``NOTE_UNUSABLE_BUCKETS``).
``unreadable(note)`` tells these notes from an empty window's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.engine_series import counter_increase, histogram_quantile, parse_bucket, quantile_name

NOTE_NO_SCRAPE = "no scrape in this window"
NOTE_NO_REQUESTS = "no request finished in this window"
NOTE_NO_BUCKETS = "no buckets exported (missing or NaN): mean only"
NOTE_INVALID = "negative or non-finite counts exported"
NOTE_UNUSABLE_BUCKETS = "requests finished but the buckets give no percentile"


def unreadable(note: str) -> bool:
    """True for a window ``note`` saying the histogram could not be read (garbage, or requests
    counted without usable buckets), as opposed to a window in which nothing finished."""
    return note.startswith((NOTE_INVALID, NOTE_UNUSABLE_BUCKETS, NOTE_NO_BUCKETS))


@dataclass(frozen=True)
class BucketBounds:
    """The bucket a percentile falls in: (lower, upper]; ``upper`` is inf for the +Inf bucket."""

    lower: float
    upper: float

    @property
    def open_ended(self) -> bool:
        return math.isinf(self.upper)


def quantile_bucket(q: float, buckets: Sequence[tuple[float, float]]) -> BucketBounds | None:
    """The bucket holding the ``q`` rank of ``buckets`` ((upper bound, cumulative count)),
    chosen exactly as ``histogram_quantile`` chooses it; None when the histogram is empty."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within 0..1, got {q!r}")
    pts = sorted((float(le), float(c)) for le, c in buckets)
    if not pts or not math.isinf(pts[-1][0]):
        return None
    bounds = [le for le, _ in pts]
    counts = list(np.maximum.accumulate([c for _, c in pts]))
    if counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    i = next(k for k, c in enumerate(counts) if c >= rank)
    lower = min(0.0, bounds[0]) if i == 0 else bounds[i - 1]
    return BucketBounds(lower, bounds[i])


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def precision_phrase(q: float, bounds: BucketBounds | None, unit: str = "s") -> str:
    """How precisely the buckets place a percentile, in words.

    ``P99 inside the 0.5–1 s bucket``; for the +Inf bucket: ``P99 above 2.5 s (the +Inf
    bucket): the value shown is the highest finite bound, as Prometheus reports it``.
    """
    label = f"P{quantile_name(q).replace('_', '.')}"
    if bounds is None:
        return f"{label}: no requests in the window"
    if bounds.open_ended:
        return (
            f"{label} above {_fmt(bounds.lower)} {unit} (the +Inf bucket): the value shown is "
            "the highest finite bound, as Prometheus reports it; the true value is only known "
            "to exceed it"
        )
    return f"{label} inside the {_fmt(bounds.lower)}–{_fmt(bounds.upper)} {unit} bucket"


def histogram_unit(hist: str) -> str:
    """The unit of a normalised histogram's values: ``tokens`` for the length histograms
    (``*_tokens``), else ``s``."""
    return "tokens" if hist.endswith("_tokens") else "s"


# --- summed over targets -------------------------------------------------------------------


def _target_wide(rows: pd.DataFrame, hist: str) -> pd.DataFrame:
    """One target's histogram series as a ts × metric table, buckets carried forward."""
    mine = rows[rows["metric"].str.startswith(hist + "_")]
    wide = mine.pivot_table(index="ts", columns="metric", values="value", aggfunc="last")
    # the watcher stores buckets only when the count moved: carry the last full scrape forward
    return wide.sort_index().ffill()


def _window_span(ts: np.ndarray, w0: float, w1: float) -> tuple[int, int] | None:
    """Indices (first, last) of the scrapes that measure (w0, w1]: the last at or before w0
    (or the first inside, for a source that appeared mid-window) to the last at or before w1;
    None when fewer than two scrapes span the window."""
    first = max(int(np.searchsorted(ts, w0, side="right")) - 1, 0)
    last = int(np.searchsorted(ts, w1, side="right")) - 1
    return (first, last) if last > first else None


def _window_increase(wide: pd.DataFrame, w0: float, w1: float) -> pd.Series | None:
    """Per-column increase of one target over (w0, w1], resets handled per column; None when
    the target has fewer than two scrapes spanning the window."""
    span = _window_span(wide.index.to_numpy(dtype="float64"), w0, w1)
    if span is None:
        return None
    part = wide.iloc[span[0] : span[1] + 1]
    return part.apply(lambda col: counter_increase(col.to_numpy(dtype="float64")), axis=0)


def _invalid_columns(wide: pd.DataFrame, w0: float, w1: float) -> list[str]:
    """The columns of one target holding a negative or infinite count in the scrapes that
    span (w0, w1] (a cumulative count is finite and never below 0; NaN is never stored)."""
    span = _window_span(wide.index.to_numpy(dtype="float64"), w0, w1)
    if span is None:
        return []
    part = wide.iloc[span[0] : span[1] + 1].to_numpy(dtype="float64")
    with np.errstate(invalid="ignore"):
        bad = (part < 0) | np.isinf(part)
    return [str(c) for c, b in zip(wide.columns, bad.any(axis=0), strict=True) if b]


@dataclass(frozen=True)
class _Summed:
    """One window's increases summed over targets."""

    buckets: dict[float, float]  # le → cumulative count increase
    count: float
    total: float  # increase of _sum
    has_sum: bool
    targets: int  # how many targets had two scrapes spanning the window
    invalid: tuple[str, ...] = ()  # the series holding negative or infinite counts, if any


def _summed_increase(wides: Iterable[pd.DataFrame], hist: str, w0: float, w1: float) -> _Summed:
    """Each target's increase over (w0, w1] (``_window_increase``), summed over the targets:
    buckets by ``le``, the count (``_count``, else the +Inf bucket) and ``_sum``."""
    count_col, sum_col = f"{hist}_count", f"{hist}_sum"
    buckets: dict[float, float] = {}
    count = total = 0.0
    has_sum = False
    contributing = 0
    invalid: list[str] = []
    for wide in wides:
        bad = _invalid_columns(wide, w0, w1)
        if bad:  # garbage: left out of the sum, and the window says so
            invalid.extend(bad)
            continue
        inc = _window_increase(wide, w0, w1)
        if inc is None:
            continue
        contributing += 1
        target_buckets = {}
        for col, value in inc.items():
            le = parse_bucket(str(col), hist)
            if le is not None and not math.isnan(value):
                target_buckets[le] = float(value)
        for le, value in target_buckets.items():
            buckets[le] = buckets.get(le, 0.0) + value
        if count_col in inc.index and not math.isnan(inc[count_col]):
            count += float(inc[count_col])
        elif math.inf in target_buckets:
            count += target_buckets[math.inf]
        if sum_col in inc.index and not math.isnan(inc[sum_col]):
            total += float(inc[sum_col])
            has_sum = True
    return _Summed(buckets, count, total, has_sum, contributing, tuple(invalid))


def summed_histogram_windows(
    rows: pd.DataFrame,
    hist: str,
    *,
    window_s: float,
    quantiles: Sequence[float] = (0.5, 0.9, 0.99),
    start: float | None = None,
    end: float | None = None,
) -> pd.DataFrame:
    """Per-window count, mean and percentiles of ``hist`` summed over the targets in ``rows``.

    ``rows``: columns target, ts, metric, value — the stored ``<hist>_bucket:<le>``, ``_sum``,
    ``_count`` series of the targets of ONE model (``store.sample_series.
    engine_histogram_series`` per target, with a ``target`` column). Windows (w0, w0 + window_s]
    start at ``start`` and step by ``window_s`` while w0 < ``end``, so the last one covers
    ``end`` (defaults: the first and the last scrape of any target).

    Returns columns window_start, window_end, targets (how many contributed), count, mean,
    then per quantile ``p99`` (seconds; tokens for ``*_tokens`` histograms), ``p99_lower``,
    ``p99_upper`` (the bucket it lies in; upper inf for the +Inf bucket) and
    ``p99_precision`` (the phrase), and ``note`` (why a window has no percentiles, else
    empty).
    """
    qcols = [f"p{quantile_name(q)}" for q in quantiles]
    unit = histogram_unit(hist)
    columns = ["window_start", "window_end", "targets", "count", "mean"]
    for c in qcols:
        columns += [c, f"{c}_lower", f"{c}_upper", f"{c}_precision"]
    columns.append("note")
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0 seconds, got {window_s!r}")
    mine = rows[rows["metric"].str.startswith(hist + "_")] if not rows.empty else rows
    if mine.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    wides = {str(t): _target_wide(df, hist) for t, df in mine.groupby("target", sort=True)}
    all_ts = np.concatenate([w.index.to_numpy(dtype="float64") for w in wides.values()])
    lo = float(all_ts.min()) if start is None else float(start)
    hi = float(all_ts.max()) if end is None else float(end)
    out: list[dict[str, object]] = []
    for w0 in np.arange(lo, hi, window_s):
        w1 = float(w0) + window_s
        summed = _summed_increase(wides.values(), hist, float(w0), w1)
        buckets, count, contributing = summed.buckets, summed.count, summed.targets
        total, has_sum = summed.total, summed.has_sum
        rec: dict[str, object] = {
            "window_start": float(w0),
            "window_end": w1,
            "targets": contributing,
            "count": count,
            "mean": total / count if count > 0 and has_sum else math.nan,
        }
        pairs = sorted(buckets.items())
        # the +Inf bucket counts every request: when it did not move, the buckets say nothing
        readable = count > 0 and bool(pairs) and buckets.get(math.inf, 0.0) > 0
        for q, col in zip(quantiles, qcols, strict=True):
            value = histogram_quantile(q, pairs) if readable else None
            bounds = quantile_bucket(q, pairs) if readable else None
            rec[col] = math.nan if value is None else value
            rec[f"{col}_lower"] = math.nan if bounds is None else bounds.lower
            rec[f"{col}_upper"] = math.nan if bounds is None else bounds.upper
            rec[f"{col}_precision"] = "" if bounds is None else precision_phrase(q, bounds, unit)
        if summed.invalid:
            for col in qcols:  # no percentile from the targets that remain: it is not the model's
                rec[col] = rec[f"{col}_lower"] = rec[f"{col}_upper"] = math.nan
                rec[f"{col}_precision"] = ""
            rec["mean"] = math.nan
            shown = ", ".join(sorted(set(summed.invalid))[:3])
            rec["note"] = f"{NOTE_INVALID} ({shown})"
        elif contributing == 0:
            rec["note"] = NOTE_NO_SCRAPE
        elif count <= 0 and has_sum and total > 0:  # NaN counts dropped at scrape
            rec["note"] = f"{NOTE_UNUSABLE_BUCKETS} (_sum moved by {total:g}, no request counted)"
        elif count <= 0:
            rec["note"] = NOTE_NO_REQUESTS
        elif not pairs:
            rec["note"] = NOTE_NO_BUCKETS
        elif not readable:
            rec["note"] = (
                f"{NOTE_UNUSABLE_BUCKETS} ({count:g} counted; the buckets hold "
                + (f"{buckets[math.inf]:g} in +Inf" if math.inf in buckets else "no +Inf bucket")
                + ")"
            )
        else:
            rec["note"] = ""
        out.append(rec)
    return pd.DataFrame.from_records(out, columns=columns)


def bucket_increase(
    rows: pd.DataFrame, hist: str, *, start: float, end: float
) -> list[tuple[float, float]]:
    """The cumulative bucket counts of ``hist`` that grew over (start, end], summed over the
    targets in ``rows`` (columns target, ts, metric, value; resets handled per target, baseline
    as for a window): ``[(le, count ≤ le), …]`` sorted by ``le``, ``+Inf`` included; ``[]``
    when no target has two scrapes spanning the span or no buckets were exported.

    The whole span is one window, so a span's percentiles are
    ``histogram_quantile(q, bucket_increase(...))`` — not an average of its windows'.
    """
    if end <= start:
        raise ValueError(f"end ({end!r}) must be after start ({start!r})")
    mine = rows[rows["metric"].str.startswith(hist + "_")] if not rows.empty else rows
    if mine.empty:
        return []
    wides = [_target_wide(df, hist) for _t, df in mine.groupby("target", sort=True)]
    return sorted(_summed_increase(wides, hist, float(start), float(end)).buckets.items())


def histogram_windows_by_target(
    rows: pd.DataFrame,
    hist: str,
    *,
    window_s: float,
    quantiles: Sequence[float] = (0.5, 0.9, 0.99),
    start: float | None = None,
    end: float | None = None,
) -> pd.DataFrame:
    """``summed_histogram_windows`` of each target alone, on the same window grid (default:
    first to last scrape of any target), with a leading ``target`` column."""
    mine = rows[rows["metric"].str.startswith(hist + "_")] if not rows.empty else rows
    if not mine.empty:
        start = float(mine["ts"].min()) if start is None else start
        end = float(mine["ts"].max()) if end is None else end
    parts = []
    for target, df in mine.groupby("target", sort=True):
        w = summed_histogram_windows(
            df, hist, window_s=window_s, quantiles=quantiles, start=start, end=end
        )
        w.insert(0, "target", str(target))
        parts.append(w)
    if not parts:
        empty = summed_histogram_windows(mine, hist, window_s=window_s, quantiles=quantiles)
        empty.insert(0, "target", pd.Series(dtype="object"))
        return empty
    return pd.concat(parts, ignore_index=True)


# --- request and error rates -----------------------------------------------------------------


@dataclass(frozen=True)
class FinishedSeries:
    """An engine's raw counters of finished requests and which of them are failures.

    ``total``: names whose series, summed, count every finished request. ``failed``: ``(name,
    label, values)``: a series is a failure when ``labels[label]`` is in ``values`` (label None:
    every series of that name). ``reason_label``: the label naming the reason, if any.
    """

    total: tuple[str, ...]
    failed: tuple[tuple[str, str | None, frozenset[str]], ...]
    reason_label: str | None


#: Per engine: where finished and failed requests are counted (docs/oncall.md).
FAILURE_SERIES: dict[str, FinishedSeries] = {
    # vLLM: one counter by finished_reason; abort (client went away / cancelled) and error fail
    "vllm": FinishedSeries(
        total=("vllm:request_success_total",),
        failed=(("vllm:request_success_total", "finished_reason", frozenset({"abort", "error"})),),
        reason_label="finished_reason",
    ),
    # SGLang: num_requests_total counts every request; num_aborted_requests_total the aborted
    "sglang": FinishedSeries(
        total=("sglang:num_requests_total",),
        failed=(("sglang:num_aborted_requests_total", None, frozenset()),),
        reason_label=None,
    ),
    # TGI: success and failure are separate counters; failure carries err=<kind>
    "tgi": FinishedSeries(
        total=("tgi_request_success", "tgi_request_failure"),
        failed=(("tgi_request_failure", None, frozenset()),),
        reason_label="err",
    ),
}
FAILURE_SERIES["sim"] = FAILURE_SERIES["vllm"]


#: The columns of ``request_rate_windows``.
REQUEST_RATE_COLUMNS: tuple[str, ...] = (
    "window_start",
    "window_end",
    "finished",
    "failed",
    "request_rate",
    "failure_rate",
    "error_rate",
    "failed_by_reason",
    "note",
)


def finished_series_names(engines: Sequence[str] | None = None) -> list[str]:
    """Every raw series name ``request_rate_windows`` reads (for the store query)."""
    names: set[str] = set()
    for engine, spec in FAILURE_SERIES.items():
        if engines is None or engine in engines:
            names.update(spec.total)
            names.update(n for n, _, _ in spec.failed)
    return sorted(names)


def _is_failed(spec: FinishedSeries, name: str, labels: dict[str, str]) -> bool:
    for fname, label, values in spec.failed:
        if name == fname and (label is None or labels.get(label) in values):
            return True
    return False


def request_rate_windows(
    raw: pd.DataFrame,
    engine: str,
    *,
    window_s: float,
    start: float | None = None,
    end: float | None = None,
) -> pd.DataFrame:
    """Per-window finished requests, failures, their rates and the error rate, over targets.

    ``raw``: columns target, ts, name, labels (canonical JSON), value — the raw counter series
    of ``finished_series_names([engine])`` for the targets of one model. Each series' increase
    (resets handled) is taken per target and summed. Returns window_start, window_end,
    finished, failed, request_rate (finished/s), failure_rate (failed/s), error_rate
    (failed/finished; NaN when none finished), failed_by_reason (dict reason → count), note.
    Windows are laid out as in ``summed_histogram_windows``.
    """
    if engine not in FAILURE_SERIES:
        raise ValueError(
            f"no finished/failed request counters known for engine {engine!r}; "
            f"known: {', '.join(sorted(FAILURE_SERIES))}"
        )
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0 seconds, got {window_s!r}")
    spec = FAILURE_SERIES[engine]
    columns = list(REQUEST_RATE_COLUMNS)
    wanted = set(spec.total) | {n for n, _, _ in spec.failed}
    mine = raw[raw["name"].isin(wanted)] if not raw.empty else raw
    if mine.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    series: list[tuple[str, dict[str, str], np.ndarray, np.ndarray]] = []
    for (_target, series_name, key), df in mine.groupby(["target", "name", "labels"], sort=True):
        d = df.sort_values("ts")
        series.append(
            (
                str(series_name),
                dict(json.loads(str(key))),
                d["ts"].to_numpy(dtype="float64"),
                d["value"].to_numpy(dtype="float64"),
            )
        )
    all_ts = mine["ts"].to_numpy(dtype="float64")
    lo = float(all_ts.min()) if start is None else float(start)
    hi = float(all_ts.max()) if end is None else float(end)
    out: list[dict[str, object]] = []
    for w0 in np.arange(lo, hi, window_s):
        w1 = float(w0) + window_s
        finished = failed = 0.0
        by_reason: dict[str, float] = {}
        seen = False
        for name, labels, ts, values in series:
            span = _window_span(ts, float(w0), w1)
            if span is None:
                continue
            seen = True
            inc = counter_increase(values[span[0] : span[1] + 1])
            if name in spec.total:
                finished += inc
            if _is_failed(spec, name, labels):
                failed += inc
                reason = labels.get(spec.reason_label or "", name) if spec.reason_label else name
                if inc > 0:
                    by_reason[reason] = by_reason.get(reason, 0.0) + inc
        out.append(
            {
                "window_start": float(w0),
                "window_end": w1,
                "finished": finished,
                "failed": failed,
                "request_rate": finished / window_s if seen else math.nan,
                "failure_rate": failed / window_s if seen else math.nan,
                "error_rate": failed / finished if finished > 0 else math.nan,
                "failed_by_reason": by_reason,
                "note": "" if finished > 0 else (NOTE_NO_REQUESTS if seen else NOTE_NO_SCRAPE),
            }
        )
    return pd.DataFrame.from_records(out, columns=columns)
