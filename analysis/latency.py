"""Why latency is what it is: pure analysis over request samples and engine series.

- **In flight at arrival**: how many of the run's own requests were between ``sent_at`` and
  ``done_at`` when a request was sent (itself included). From a stride sample (1 in ``stride``
  requests) the count of sampled requests is scaled by ``stride`` (an estimate, said so).
- **Prefill fit**: TTFT = intercept + ms_per_token × input_tokens, least squares over the run's
  *lightly loaded* successful requests (in flight at arrival ≤ ``light_max``; by default the
  lowest in-flight level that gives enough points). Under light load there is no queue, so the
  line is the prefill cost of the model on that engine.
- **Queueing / prefill split**: prefill = the fitted line at the request's input length, clipped
  to [0, TTFT]; queueing = TTFT − prefill (time spent waiting for a slot, blocked behind others).
- **Trends**: ordinary least-squares slope of a value over time with a two-sided 95 % confidence
  interval (Student t); a trend is *significant* when the interval excludes zero.
- **Memory warnings**: GPU memory rising while KV usage is flat (a leak or fragmentation outside
  the KV pool); preemptions while KV usage is below full (fragmentation or a too-small batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.buckets import DEFAULT_EDGES, assign_buckets, bucket_labels

#: Fewest lightly loaded requests the prefill fit needs.
MIN_FIT_POINTS = 5
#: "Lightly loaded": at most this many of the run's requests in flight (itself included).
LIGHT_MAX_IN_FLIGHT = 2.0
#: KV usage at or above this is "full" (0..1).
KV_FULL = 0.9
#: The percentiles shown per length bucket: (column of ``bucket_latency``, name, percentile).
BUCKET_PERCENTILES: tuple[tuple[str, str, float], ...] = (
    ("p50_ms", "P50", 50.0),
    ("p90_ms", "P90", 90.0),
    ("p95_ms", "P95", 95.0),
    ("p99_ms", "P99", 99.0),
    ("p99_9_ms", "P99.9", 99.9),
)
#: Two-sided 95 % Student t quantiles for 1..30 degrees of freedom (beyond: interpolated to 1.96).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(dof: int) -> float:
    """Two-sided 95 % quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        return math.inf
    if dof <= len(_T95):
        return _T95[dof - 1]
    # 2.042 at 30 → 1.96 at ∞, close to exact (2.021 at 40, 2.000 at 60, 1.980 at 120)
    return 1.96 + (2.042 - 1.96) * 30.0 / dof


# --- in flight --------------------------------------------------------------------------------


def in_flight_at(
    sample: pd.DataFrame, times: Sequence[float] | np.ndarray, *, stride: int = 1
) -> np.ndarray:
    """Requests in flight (``sent_at <= t < done_at``) at each of ``times``, × ``stride``.

    ``sample``: columns sent_at, done_at (a request without done_at counts as still in flight).
    """
    t = np.asarray(times, dtype="float64")
    if sample.empty:
        return np.zeros(t.shape, dtype="float64")
    sent = np.sort(pd.to_numeric(sample["sent_at"]).astype("float64").dropna().to_numpy())
    done = pd.to_numeric(sample["done_at"]).astype("float64").fillna(np.inf)
    done_arr = np.sort(done[sample["sent_at"].notna()].to_numpy())
    started = np.searchsorted(sent, t, side="right")
    finished = np.searchsorted(done_arr, t, side="right")
    return (started - finished).astype("float64") * float(max(1, stride))


def with_in_flight(sample: pd.DataFrame, *, stride: int = 1) -> pd.DataFrame:
    """``sample`` plus ``in_flight``: the run's requests in flight when each was sent.

    With several runs in ``sample`` (column run_id) each counts only its own run's requests.
    """
    out = sample.copy()
    out["in_flight"] = np.nan
    if out.empty:
        return out
    groups = out.groupby("run_id", sort=False) if "run_id" in out else [(None, out)]
    for _, part in groups:
        ok = part["sent_at"].notna()
        out.loc[part.index[ok], "in_flight"] = in_flight_at(
            part, part.loc[ok, "sent_at"].to_numpy(), stride=stride
        )
    return out


# --- prefill fit and the TTFT split ------------------------------------------------------------


@dataclass(frozen=True)
class PrefillFit:
    """TTFT ≈ intercept_ms + ms_per_token × input_tokens under light load."""

    ms_per_token: float
    intercept_ms: float
    n: int
    r2: float | None
    light_max: float  # the in-flight level the fit used (requests ≤ this)

    def prefill_ms(self, input_tokens: np.ndarray | pd.Series) -> np.ndarray:
        x = np.asarray(input_tokens, dtype="float64")
        return np.maximum(self.intercept_ms + self.ms_per_token * x, 0.0)


def _ok_ttft(sample: pd.DataFrame) -> pd.DataFrame:
    need = {"ttft_ms", "input_tokens"}
    if sample.empty or not need <= set(sample.columns):
        return sample.iloc[0:0]
    mask = sample["ttft_ms"].notna() & sample["input_tokens"].notna()
    if "status" in sample:
        mask &= sample["status"] == "ok"
    return sample[mask]


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float | None]:
    """Least-squares slope, intercept and R² of y over x (slope 0 when x does not vary)."""
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    if x.size == 0:
        return 0.0, math.nan, None
    xm, ym = float(x.mean()), float(y.mean())
    sxx = float(((x - xm) ** 2).sum())
    if sxx == 0.0:
        return 0.0, ym, None
    slope = float(((x - xm) * (y - ym)).sum()) / sxx
    intercept = ym - slope * xm
    sst = float(((y - ym) ** 2).sum())
    sse = float(((y - (intercept + slope * x)) ** 2).sum())
    return slope, intercept, (1.0 - sse / sst) if sst > 0 else 1.0


def fit_prefill(sample: pd.DataFrame, *, light_max: float | None = None) -> PrefillFit | None:
    """Fit prefill per input token from the lightly loaded successful requests of ``sample``.

    ``sample`` needs input_tokens, ttft_ms, in_flight (see :func:`with_in_flight`) and status.
    ``light_max`` None: the smallest in-flight level from 1 to ``LIGHT_MAX_IN_FLIGHT`` under
    which at least ``MIN_FIT_POINTS`` requests with two distinct input lengths fall. None when
    there are too few such points (a run that was never lightly loaded: fit on a
    concurrency-1 run of the same series instead) or the slope comes out negative.
    """
    ok = _ok_ttft(sample)
    if "in_flight" not in ok or ok.empty:
        return None
    ok = ok[ok["in_flight"].notna()]
    levels = sorted({float(v) for v in ok["in_flight"].to_numpy()})
    candidates = (
        [light_max]
        if light_max is not None
        else [v for v in levels if 1.0 <= v <= LIGHT_MAX_IN_FLIGHT]
    )
    for level in candidates:
        light = ok[ok["in_flight"] <= level]
        x = light["input_tokens"].to_numpy(dtype="float64")
        if len(light) < MIN_FIT_POINTS or np.unique(x).size < 2:
            continue
        y = light["ttft_ms"].to_numpy(dtype="float64")
        slope, intercept, r2 = fit_line(x, y)
        if slope < 0:
            return None
        return PrefillFit(slope, intercept, len(light), r2, level)
    return None


def split_ttft(sample: pd.DataFrame, fit: PrefillFit) -> pd.DataFrame:
    """``sample`` (successful requests with TTFT) plus prefill_ms and queue_ms (sum = TTFT)."""
    ok = _ok_ttft(sample).copy()
    ttft = ok["ttft_ms"].to_numpy(dtype="float64")
    prefill = np.minimum(fit.prefill_ms(ok["input_tokens"]), ttft)
    ok["prefill_ms"] = prefill
    ok["queue_ms"] = ttft - prefill
    return ok


def ttft_split_by_bucket(
    sample: pd.DataFrame, fit: PrefillFit, edges: Sequence[int] = DEFAULT_EDGES
) -> pd.DataFrame:
    """Per input-length bucket: n, mean TTFT, mean prefill, mean queueing, queueing share.

    Columns: bucket (label), n, ttft_mean_ms, prefill_mean_ms, queue_mean_ms, queue_share;
    every bucket with requests, in bucket order.
    """
    cols = ["bucket", "n", "ttft_mean_ms", "prefill_mean_ms", "queue_mean_ms", "queue_share"]
    split = split_ttft(sample, fit)
    if split.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    split["bucket"] = assign_buckets(split["input_tokens"], edges)
    rows = []
    for label in bucket_labels(edges):
        part = split[split["bucket"] == label]
        if part.empty:
            continue
        ttft = float(part["ttft_ms"].mean())
        queue = float(part["queue_ms"].mean())
        rows.append(
            {
                "bucket": label,
                "n": len(part),
                "ttft_mean_ms": ttft,
                "prefill_mean_ms": float(part["prefill_ms"].mean()),
                "queue_mean_ms": queue,
                "queue_share": queue / ttft if ttft > 0 else math.nan,
            }
        )
    return pd.DataFrame.from_records(rows, columns=cols)


# --- engine state at arrival -------------------------------------------------------------------


def gauge_over_targets(series: pd.DataFrame, metric: str, how: str) -> pd.DataFrame:
    """One gauge summed (or maxed) over targets at each timestamp: columns ts, value."""
    part = series[series["metric"] == metric]
    if part.empty:
        return pd.DataFrame({"ts": pd.Series(dtype="float64"), "value": pd.Series(dtype="float64")})
    # carry each target's last value forward across the union of timestamps
    wide = part.pivot_table(index="ts", columns="target", values="value", aggfunc="last")
    wide = wide.sort_index().ffill()
    value = wide.max(axis=1) if how == "max" else wide.sum(axis=1, min_count=1)
    return pd.DataFrame({"ts": wide.index.to_numpy(dtype="float64"), "value": value.to_numpy()})


def counter_increase_between(series: pd.DataFrame, metric: str, lo: float, hi: float) -> float:
    """Increase of a cumulative counter (summed over targets) between ``lo`` and ``hi``.

    The last sample at or before ``lo`` is the baseline (else the first one inside); a drop is a
    restart, counted from zero. NaN when no target has samples around the window.
    """
    part = series[(series["metric"] == metric) & (series["ts"] <= hi)]
    total = math.nan
    for _, df in part.groupby("target", sort=False):
        df = df.sort_values("ts")
        before = df[df["ts"] <= lo]
        inside = df[df["ts"] > lo]
        seg = pd.concat([before.tail(1), inside]) if not before.empty else inside
        v = seg["value"].to_numpy(dtype="float64")
        if v.size < 1:
            continue
        d = np.diff(v) if v.size > 1 else np.zeros(0)
        inc = float(np.where(d < 0, v[1:], d).sum()) if d.size else 0.0
        total = inc if math.isnan(total) else total + inc
    return total


def engine_state_at(
    requests: pd.DataFrame, series: pd.DataFrame, *, window_s: float = 10.0
) -> pd.DataFrame:
    """``requests`` (column sent_at) plus the engine state when each was sent.

    ``series``: engine samples (target, ts, metric, value). Added columns: waiting and running
    (summed over the targets, last sample at or before arrival), kv_usage (the fullest target),
    preemptions (increase of preemptions_total within ±``window_s`` of arrival). NaN where the
    engine exposed nothing before the request arrived.
    """
    out = requests.copy()
    for col in ("waiting", "running", "kv_usage", "preemptions"):
        out[col] = np.nan
    if out.empty or series.empty:
        return out
    t = pd.to_numeric(out["sent_at"]).astype("float64")
    order = np.argsort(t.to_numpy())
    probe = pd.DataFrame({"ts": t.to_numpy()[order], "_i": out.index.to_numpy()[order]})
    probe = probe.dropna(subset=["ts"])
    for col, metric, how in (
        ("waiting", "requests_waiting", "sum"),
        ("running", "requests_running", "sum"),
        ("kv_usage", "kv_cache_usage", "max"),
    ):
        gauge = gauge_over_targets(series, metric, how)
        if gauge.empty:
            continue
        joined = pd.merge_asof(probe, gauge, on="ts", direction="backward")
        out.loc[joined["_i"].to_numpy(), col] = joined["value"].to_numpy()
    if (series["metric"] == "preemptions_total").any():
        out["preemptions"] = [
            counter_increase_between(
                series, "preemptions_total", float(x) - window_s, float(x) + window_s
            )
            if not math.isnan(x)
            else math.nan
            for x in t.to_numpy()
        ]
    return out


# --- trends ------------------------------------------------------------------------------------


#: Every slope judged or shown (diagnosis rule 4, Memory's leak warning and slopes, Latency's
#: trend chart): the least time a trend's points must span to be judged. Slopes are shown per
#: hour; over 10 minutes that extrapolates the data at most 6×, and the first
#: minute's warm-up (compilation, caches filling, the allocator growing) can no longer pass for
#: a trend. A 29 s run once showed "TTFT P50 slope −182,356 ms/h". See docs/metrics.md § Trends.
MIN_TREND_SPAN_S = 600.0
#: What a display shows instead of a slope over a shorter window.
TOO_SHORT = "too short to judge"


@dataclass(frozen=True)
class Trend:
    """OLS slope of a value over time (per second) with its 95 % confidence interval."""

    slope: float
    ci_low: float
    ci_high: float
    intercept: float
    n: int
    span_s: float
    start_value: float  # the fitted value at the first instant
    end_value: float  # the fitted value at the last instant

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def rising(self) -> bool:
        return self.ci_low > 0

    @property
    def change(self) -> float:
        """Fitted change over the span (end − start)."""
        return self.end_value - self.start_value

    def per_hour(self) -> tuple[float, float, float]:
        return self.slope * 3600.0, self.ci_low * 3600.0, self.ci_high * 3600.0


def trend_too_short(t: Trend) -> str | None:
    """None when ``t`` spans at least MIN_TREND_SPAN_S, else what to show instead of its slope:
    "too short to judge (needs ≥ 10 min of data, have 29 s)"."""
    if t.span_s >= MIN_TREND_SPAN_S:
        return None
    return f"{TOO_SHORT} ({trend_window_need(t.span_s)})"


def trend_window_need(span_s: float) -> str:
    """ "needs ≥ 10 min of data, have 29 s" (the part of :func:`trend_too_short` in brackets)."""
    return f"needs ≥ {duration_text(MIN_TREND_SPAN_S)} of data, have {duration_text(span_s)}"


def duration_text(seconds: float) -> str:
    """29 s, 9.5 min, 10 min, 1.5 h: a window's length as the trend rule's messages give it,
    rounded down (599 s is "9.9 min", never "10 min")."""
    if seconds < 90:
        return f"{math.floor(seconds):d} s"
    if seconds < 90 * 60:
        return f"{math.floor(seconds / 6) / 10:.1f}".removesuffix(".0") + " min"
    return f"{math.floor(seconds / 360) / 10:.1f}".removesuffix(".0") + " h"


def trend(ts: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> Trend | None:
    """Least-squares slope of ``values`` over ``ts`` (seconds) with a 95 % CI; None with < 3
    points or no time spread. NaN pairs are dropped."""
    x = np.asarray(ts, dtype="float64")
    y = np.asarray(values, dtype="float64")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n < 3:
        return None
    xm = float(x.mean())
    sxx = float(((x - xm) ** 2).sum())
    if sxx <= 0:
        return None
    slope, intercept, _ = fit_line(x, y)
    resid = y - (intercept + slope * x)
    s2 = float((resid**2).sum()) / (n - 2)
    se = math.sqrt(s2 / sxx)
    half = t95(n - 2) * se
    x0, x1 = float(x.min()), float(x.max())
    return Trend(
        slope=slope,
        ci_low=slope - half,
        ci_high=slope + half,
        intercept=intercept,
        n=n,
        span_s=x1 - x0,
        start_value=intercept + slope * x0,
        end_value=intercept + slope * x1,
    )


# --- memory warnings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryWarning:
    kind: str  # "leak" | "fragmentation"
    title: str
    evidence: dict[str, str] = field(default_factory=dict)


def memory_warnings(
    gpu_mem: pd.DataFrame, engine: pd.DataFrame, *, kv_full: float = KV_FULL
) -> list[MemoryWarning]:
    """Leak and fragmentation patterns.

    ``gpu_mem``: ts, mem_used_bytes, mem_total_bytes (one or several GPUs; summed per instant).
    ``engine``: target, ts, metric, value (kv_cache_usage, preemptions_total).

    - leak: GPU memory used rises significantly (CI > 0) by at least 1 % of total memory over
      a span of at least MIN_TREND_SPAN_S (a shorter one is warm-up, not a leak) while KV usage
      shows no significant rise;
    - fragmentation: preemptions happened while KV usage stayed below ``kv_full`` at both
      samples around them.
    """
    out: list[MemoryWarning] = []
    kv = gauge_over_targets(engine, "kv_cache_usage", "max") if not engine.empty else None
    kv_trend = (
        trend(kv["ts"].to_numpy(), kv["value"].to_numpy())
        if kv is not None and not kv.empty
        else None
    )
    if not gpu_mem.empty:
        per_ts = gpu_mem.groupby("ts", sort=True)[["mem_used_bytes", "mem_total_bytes"]].sum()
        mem_trend = trend(per_ts.index.to_numpy(), per_ts["mem_used_bytes"].to_numpy())
        total = float(per_ts["mem_total_bytes"].max())
        kv_flat = kv_trend is None or not kv_trend.rising
        if (
            mem_trend is not None
            and trend_too_short(mem_trend) is None
            and mem_trend.rising
            and total > 0
            and mem_trend.change >= 0.01 * total
            and kv_flat
        ):
            lo, hi = mem_trend.ci_low * 3600 / 2**20, mem_trend.ci_high * 3600 / 2**20
            out.append(
                MemoryWarning(
                    "leak",
                    "GPU memory rises while KV-cache usage is flat: a leak or fragmentation "
                    "outside the KV pool",
                    {
                        "GPU memory slope": f"{mem_trend.slope * 3600 / 2**20:,.1f} MiB/h "
                        f"(95 % CI {lo:,.1f} … {hi:,.1f})",
                        "rise over the span": f"{mem_trend.change / 2**20:,.1f} MiB "
                        f"({mem_trend.change / total:.1%} of total)",
                        "KV usage slope": "no data"
                        if kv_trend is None
                        else f"{kv_trend.slope * 3600:+.3f} /h "
                        f"(95 % CI {kv_trend.ci_low * 3600:+.3f} … {kv_trend.ci_high * 3600:+.3f})",
                    },
                )
            )
    if kv is not None and not kv.empty and (engine["metric"] == "preemptions_total").any():
        pre = gauge_over_targets(engine, "preemptions_total", "sum")
        v = pre["value"].to_numpy(dtype="float64")
        d = np.diff(v)
        inc = np.where(d < 0, v[1:], d)
        ts = pre["ts"].to_numpy()
        moved, before = ts[1:][inc > 0], ts[:-1][inc > 0]
        if moved.size:
            # the preemptions happened between the previous sample and this one: KV usage at
            # either end (a preemption frees blocks, so the later sample can read lower)
            at_end = pd.merge_asof(pd.DataFrame({"ts": moved}), kv, on="ts")["value"]
            at_start = pd.merge_asof(pd.DataFrame({"ts": before}), kv, on="ts")["value"]
            at = pd.concat([at_start, at_end], axis=1).max(axis=1)
            below = at < kv_full
            n_below = float(inc[inc > 0][below.to_numpy()].sum())
            if n_below > 0:
                out.append(
                    MemoryWarning(
                        "fragmentation",
                        "Preemptions while KV-cache usage is below full: fragmentation, or "
                        "blocks reserved for requests that have not grown into them",
                        {
                            "preemptions with KV below "
                            f"{kv_full:.0%}": f"{n_below:,.0f} of {float(inc.sum()):,.0f}",
                            "KV usage at those preemptions": f"{float(at[below].min()):.0%} … "
                            f"{float(at[below].max()):.0%}",
                        },
                    )
                )
    return out


def heatmap_window_s(duration_s: float) -> float:
    """The time window of the pages' views over time (``duration_s`` long): about 24 windows,
    rounded to 1/2/5 × 10^k seconds (at least 1 s)."""
    raw = max(duration_s / 24.0, 1.0)
    exp = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * exp >= raw:
            return float(m * exp)
    return float(10 * exp)
