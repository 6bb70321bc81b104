"""Engine and GPU time series, derived at query time (pure: DataFrames in, DataFrames out).

The collectors store what engines expose: gauges, *cumulative* counters and cumulative
histogram buckets (``<hist>_bucket:<le>``, ``<hist>_sum``, ``<hist>_count``, see
``collectors.engine_metrics``). Here those become:

- **rates** of counters, with resets handled as Prometheus does: when a counter goes down the
  engine restarted, and the new value is the increase since the restart;
- **per-window percentiles** of histograms: bucket increases over the window (last scrape in the
  window minus the last scrape before it), then Prometheus' ``histogram_quantile`` (linear
  interpolation inside the bucket, the lower bound of the first bucket taken as 0);
- **staleness**: a source with no sample for ``STALE_INTERVALS`` scrape intervals is stale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

#: A source whose last sample is older than this many intervals is marked stale.
STALE_INTERVALS = 3


# --- counters -----------------------------------------------------------------------------


def counter_increase(values: Sequence[float] | np.ndarray) -> float:
    """Total increase of a cumulative counter over consecutive samples, across resets."""
    arr = np.asarray(values, dtype="float64")
    arr = arr[~np.isnan(arr)]
    if arr.size < 2:
        return 0.0
    diff = np.diff(arr)
    # a drop means the counter restarted from 0: the increase is the new value itself
    diff = np.where(diff < 0, arr[1:], diff)
    return float(diff.sum())


def counter_rate(df: pd.DataFrame, *, ts: str = "ts", value: str = "value") -> pd.DataFrame:
    """Per-second rate between consecutive samples (resets handled): columns ts, rate.

    ``df`` holds one counter of one source; the first sample has no rate and is dropped.
    """
    if df.empty:
        return pd.DataFrame({"ts": pd.Series(dtype="float64"), "rate": pd.Series(dtype="float64")})
    d = df[[ts, value]].dropna().sort_values(ts)
    t = d[ts].to_numpy(dtype="float64")
    v = d[value].to_numpy(dtype="float64")
    if t.size < 2:
        return pd.DataFrame({"ts": pd.Series(dtype="float64"), "rate": pd.Series(dtype="float64")})
    dv = np.diff(v)
    dv = np.where(dv < 0, v[1:], dv)
    dt = np.diff(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(dt > 0, dv / dt, np.nan)
    return pd.DataFrame({"ts": t[1:], "rate": rate}).dropna().reset_index(drop=True)


def rate_over(
    df: pd.DataFrame, *, since: float, ts: str = "ts", value: str = "value"
) -> float | None:
    """Average per-second rate of one counter from ``since`` to its last sample (resets handled).

    The sample just before ``since`` is the baseline when there is one. None with < 2 samples.
    """
    if df.empty:
        return None
    d = df[[ts, value]].dropna().sort_values(ts)
    before = d[d[ts] < since]
    inside = d[d[ts] >= since]
    if not before.empty:
        inside = pd.concat([before.tail(1), inside])
    if len(inside) < 2:
        return None
    span = float(inside[ts].iloc[-1] - inside[ts].iloc[0])
    if span <= 0:
        return None
    return counter_increase(inside[value].to_numpy()) / span


# --- histograms ---------------------------------------------------------------------------


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile``: ``buckets`` = (upper bound, cumulative count).

    Linear interpolation within the bucket holding the rank; the first bucket's lower bound is
    0 (or its bound when negative); a rank in the ``+Inf`` bucket answers the largest finite
    bound. None when the histogram is empty.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within 0..1, got {q!r}")
    pts = sorted((float(le), float(c)) for le, c in buckets)
    if not pts or not math.isinf(pts[-1][0]):
        return None
    # cumulative counts must not decrease (rounding in exporters): make them monotone
    bounds = [le for le, _ in pts]
    counts = list(np.maximum.accumulate([c for _, c in pts]))
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    i = next(k for k, c in enumerate(counts) if c >= rank)
    if math.isinf(bounds[i]):
        return bounds[-2] if len(bounds) > 1 else None
    lower = 0.0 if i == 0 else bounds[i - 1]
    if i == 0 and bounds[0] <= 0:
        return bounds[0]
    prev = 0.0 if i == 0 else counts[i - 1]
    in_bucket = counts[i] - prev
    if in_bucket <= 0:
        return bounds[i]
    return lower + (bounds[i] - lower) * (rank - prev) / in_bucket


def parse_bucket(metric: str, hist: str) -> float | None:
    """The upper bound of a stored bucket row of ``hist`` (``ttft_seconds_bucket:0.5`` → 0.5,
    ``…:+Inf`` → inf); None for any other row."""
    prefix = f"{hist}_bucket:"
    if not metric.startswith(prefix):
        return None
    text = metric[len(prefix) :]
    return math.inf if text == "+Inf" else float(text)


def quantile_name(q: float) -> str:
    """A quantile's column suffix: 0.99 → ``99``, 0.999 → ``99_9`` (``p99``, ``p99_9``)."""
    text = f"{q * 100:g}"
    return text.replace(".", "_")


# --- staleness and the live summary -----------------------------------------------------------


def is_stale(last_ts: float | None, now: float, interval_s: float) -> bool:
    """True when a source has no sample within ``STALE_INTERVALS`` × its interval."""
    if last_ts is None or (isinstance(last_ts, float) and math.isnan(last_ts)):
        return True
    return now - last_ts > STALE_INTERVALS * interval_s


def estimate_interval(ts: Sequence[float] | np.ndarray, default: float = 1.0) -> float:
    """The scrape interval of a source: the median gap between its last samples."""
    arr = np.unique(np.asarray(ts, dtype="float64"))
    if arr.size < 2:
        return default
    gaps = np.diff(arr[-50:])
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if gaps.size else default


#: Counters turned into per-second rates on the live panels.
RATE_METRICS: dict[str, str] = {
    "generation_tokens_total": "generation_tps",
    "prompt_tokens_total": "prompt_tps",
    "preemptions_total": "preemptions_per_s",
    "requests_finished_total": "requests_per_s",
}
GAUGE_METRICS = ("requests_running", "requests_waiting", "kv_cache_usage")


def target_summary(
    series: pd.DataFrame, *, now: float, rate_window_s: float = 60.0
) -> pd.DataFrame:
    """One row per target: latest gauges, counter rates over the last ``rate_window_s``,
    last sample time, interval and staleness.

    ``series``: columns target, engine, ts, metric, value (normalised metrics of the targets).
    """
    columns = [
        "target",
        "engine",
        "last_ts",
        "interval_s",
        "stale",
        *GAUGE_METRICS,
        *RATE_METRICS.values(),
    ]
    if series.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    out = []
    for target, df in series.groupby("target", sort=True):
        ts = df["ts"].to_numpy(dtype="float64")
        last_ts = float(ts.max())
        interval = estimate_interval(ts)
        rec: dict[str, object] = {
            "target": target,
            "engine": df["engine"].dropna().iloc[-1] if df["engine"].notna().any() else None,
            "last_ts": last_ts,
            "interval_s": interval,
            "stale": is_stale(last_ts, now, interval),
        }
        for metric in GAUGE_METRICS:
            m = df[df["metric"] == metric].sort_values("ts")
            rec[metric] = float(m["value"].iloc[-1]) if not m.empty else math.nan
        for metric, name in RATE_METRICS.items():
            m = df[df["metric"] == metric]
            r = rate_over(m, since=last_ts - rate_window_s) if not m.empty else None
            rec[name] = math.nan if r is None else r
        out.append(rec)
    return pd.DataFrame.from_records(out, columns=columns)


def rate_series(series: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per-target rate series of one counter: columns target, ts, rate."""
    parts = []
    for target, df in series[series["metric"] == metric].groupby("target", sort=True):
        r = counter_rate(df)
        r.insert(0, "target", target)
        parts.append(r)
    if not parts:
        return pd.DataFrame(
            {
                "target": pd.Series(dtype="object"),
                "ts": pd.Series(dtype="float64"),
                "rate": pd.Series(dtype="float64"),
            }
        )
    return pd.concat(parts, ignore_index=True)
