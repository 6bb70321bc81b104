"""Memory against load across a run series (pure: numbers and DataFrames in and out).

A *series* is a set of runs that differ only in load — closed-loop concurrency or open-loop
request rate — and share model, GPU, engine configuration and workload (the levels of one
``servescope bench --concurrency 1,8,32``, the capacity search of one sweep point). Per run the
store gives peak GPU memory, KV-cache usage (peak and P95), preemptions and the token moments of
its requests; here they become one row per run ordered by load, the performance model's
predicted KV usage, and the two knees where preemption starts (docs/memory.md):

- **Tokens a running sequence holds** (time-weighted over the batch): in continuous batching
  every running sequence gains one token per iteration, so request *i* holds a batch slot for
  its O_i decode iterations, during which its KV grows from I_i to I_i + O_i tokens
  (I_i + O_i / 2 on average); paged blocks add half a block on average:
  ``held = Σ O_i (I_i + O_i / 2) / Σ O_i + block_size / 2``.
- **Sequences in flight**: the concurrency (at most the engine's max batch size); for a rate,
  Little's law on the measured latency, ``rate × mean E2E``, capped the same way.
- **Predicted KV usage** = in flight × held ÷ KV capacity tokens (``perf_model.
  kv_capacity_tokens`` of the run's deployment, or ``num_gpu_blocks × block_size`` when the
  engine was told its block count). It reaches 100 % at the **predicted knee**: for a
  concurrency series ``capacity ÷ held`` (none when the batch cap comes first), for a rate
  series the load where the predicted line crosses 100 %, interpolated between levels.
- **Measured knee**: the first load level with preemptions, L1; the load where preemption
  started is placed between the last clean level L0 and L1 where the peak KV usage measured at
  the clean levels, extrapolated linearly, reaches 100 % (preemption starts when the pool is
  full; the reading at L1 is pinned at 100 % and says nothing): through the last two clean
  levels ``L0 + (1 − kv0) × (L0 − L₋₁) / (kv0 − kv₋₁)`` when KV rose between them, else
  through zero load ``L0 / kv0``; clipped to [L0, L1]; the midpoint without a KV reading.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd

#: The two kinds of load a series varies (runs.arrival = concurrency, or a target rate).
LOAD_KINDS: Final[tuple[str, ...]] = ("concurrency", "rate")
#: What a run must share with the others of its series (besides the load kind).
SERIES_KEYS: Final[tuple[str, ...]] = (
    "model",
    "gpu_name",
    "gpu_count",
    "framework",
    "precision",
    "kv_cache_dtype",
    "workload",
    "engine_params",
)
#: The columns of :func:`assemble`'s table, one row per run, ordered by load.
POINT_COLUMNS: Final[tuple[str, ...]] = (
    "run_id",
    "name",
    "load",
    "requests",
    "gpu_peak_bytes",
    "gpu_total_bytes",
    "kv_peak",
    "kv_p95",
    "preemptions",
    "preemptions_per_1k",
    "held_tokens",
    "in_flight",
    "predicted_kv",
)


def load_of(arrival: Any, concurrency: Any, target_rate: Any) -> tuple[str, float] | None:
    """(kind, level) of a run: ``concurrency`` for closed loop, ``rate`` (req/s) for open loop;
    None when the run names neither (an import without its load, an infinite rate)."""
    if _finite(concurrency) and (arrival in (None, "concurrency") or not _finite(target_rate)):
        return "concurrency", float(concurrency)
    if _finite(target_rate) and float(target_rate) > 0:
        return "rate", float(target_rate)
    return None


def _finite(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def series_key(run: Mapping[Any, Any]) -> tuple[str, ...]:
    """What runs of one series share: :data:`SERIES_KEYS` (engine parameters as canonical JSON)
    and the load kind. Runs with equal keys differ only in load."""
    load = load_of(run.get("arrival"), run.get("concurrency"), run.get("target_rate"))
    parts = [_canonical(run.get(k)) for k in SERIES_KEYS]
    return (*parts, load[0] if load else "")


def _canonical(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value[:1] in "{[" else value
        except json.JSONDecodeError:
            return value
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def differing_keys(runs: Sequence[Mapping[Any, Any]]) -> tuple[str, ...]:
    """Which of :data:`SERIES_KEYS` differ between ``runs`` (a series should have none)."""
    return tuple(k for k in SERIES_KEYS if len({_canonical(r.get(k)) for r in runs}) > 1)


def held_tokens(
    sum_out_in: float, sum_out_sq: float, sum_out: float, block_size: float
) -> float | None:
    """Tokens a running sequence holds on average, from the requests' moments Σ O·I, Σ O² and
    Σ O (O output, I input tokens): ``(Σ O·I + Σ O² / 2) / Σ O + block_size / 2``; None
    without output tokens."""
    if not _finite(sum_out) or sum_out <= 0:
        return None
    return (float(sum_out_in) + float(sum_out_sq) / 2.0) / float(sum_out) + float(block_size) / 2.0


def in_flight(
    kind: str, load: float, mean_e2e_s: float | None, max_batch_size: float | None
) -> float | None:
    """Sequences the engine holds at once: the concurrency, or rate × mean E2E (Little's law)
    for a rate; at most ``max_batch_size`` (None: no cap known). None without a latency."""
    if kind == "concurrency":
        seqs: float | None = float(load)
    else:
        seqs = float(load) * mean_e2e_s if mean_e2e_s is not None and _finite(mean_e2e_s) else None
    if seqs is not None and max_batch_size is not None and _finite(max_batch_size):
        seqs = min(seqs, float(max_batch_size))
    return seqs


def predicted_kv(seqs: float | None, held: float | None, capacity_tokens: float) -> float | None:
    """Predicted KV usage (0..1, above 1: over capacity) = seqs × held ÷ capacity tokens."""
    if seqs is None or held is None or capacity_tokens <= 0:
        return None
    return seqs * held / capacity_tokens


def assemble(
    runs: pd.DataFrame,
    *,
    kind: str,
    block_size: float,
    max_batch_size: float | None,
    capacity_tokens: float | None,
) -> pd.DataFrame:
    """One row per run, ordered by load (then run id): :data:`POINT_COLUMNS`.

    ``runs`` (``store.run_series.run_figures`` joined with each run's load): run_id, name,
    load, requests, gpu_peak_bytes, gpu_total_bytes, kv_peak, kv_p95, preemptions (NaN: no
    counter), sum_out_in, sum_out_sq, sum_out, mean_e2e_s. ``capacity_tokens`` None: no
    prediction (the column is NaN).
    """
    rows = []
    for r in runs.sort_values(["load", "run_id"]).to_dict("records"):
        held = held_tokens(r["sum_out_in"], r["sum_out_sq"], r["sum_out"], block_size)
        seqs = in_flight(kind, float(r["load"]), _number(r["mean_e2e_s"]), max_batch_size)
        pre = _number(r["preemptions"])
        requests = int(r["requests"] or 0)
        predicted = (
            predicted_kv(seqs, held, float(capacity_tokens))
            if capacity_tokens is not None
            else None
        )
        rows.append(
            {
                "run_id": str(r["run_id"]),
                "name": str(r.get("name") or r["run_id"]),
                "load": float(r["load"]),
                "requests": requests,
                "gpu_peak_bytes": _nan(r["gpu_peak_bytes"]),
                "gpu_total_bytes": _nan(r["gpu_total_bytes"]),
                "kv_peak": _nan(r["kv_peak"]),
                "kv_p95": _nan(r["kv_p95"]),
                "preemptions": _nan(pre),
                "preemptions_per_1k": _nan(
                    1000.0 * pre / requests if pre is not None and requests else None
                ),
                "held_tokens": _nan(held),
                "in_flight": _nan(seqs),
                "predicted_kv": _nan(predicted),
            }
        )
    out = pd.DataFrame.from_records(rows, columns=list(POINT_COLUMNS))
    return out.astype({c: "float64" for c in POINT_COLUMNS[2:]} | {"requests": "int64"})


def _number(value: Any) -> float | None:
    return float(value) if _finite(value) else None


def _nan(value: Any) -> float:
    return float(value) if _finite(value) else float("nan")


@dataclass(frozen=True)
class Knee:
    """Where preemption starts. ``load`` None: not within the measured levels —
    ``below`` True: the lowest level already preempts; False: no level preempts."""

    load: float | None
    last_clean: float | None = None  # the highest level below the first preempting one
    first_preempting: float | None = None
    below: bool = False


def measured_knee(points: pd.DataFrame) -> Knee | None:
    """The measured knee of :func:`assemble`'s rows (see the module docstring); None when no
    run of the series reports a preemption counter. A level preempts when any of its runs
    did; its peak KV usage is the highest of its runs'."""
    known = points[points["preemptions"].notna()]
    if known.empty:
        return None
    levels = known.groupby("load").agg(
        preemptions=("preemptions", "max"), kv_peak=("kv_peak", "max")
    )
    hot = levels[levels["preemptions"] > 0]
    if hot.empty:
        return Knee(load=None)
    first = float(hot.index[0])
    clean = levels[(levels.index < first) & (levels["preemptions"] <= 0)]
    if clean.empty:
        return Knee(load=None, first_preempting=first, below=True)
    last = float(clean.index[-1])
    full = _full_at(clean)
    load = last + 0.5 * (first - last) if full is None else min(max(full, last), first)
    return Knee(load=load, last_clean=last, first_preempting=first)


def _full_at(clean: pd.DataFrame) -> float | None:
    """Where the clean levels' peak KV usage (index: load), extrapolated linearly, reaches
    100 %: through the last two levels when it rose between them, else through zero load;
    None without a positive reading at the last level."""
    kv = clean["kv_peak"].dropna()
    if kv.empty or float(kv.iloc[-1]) <= 0 or float(kv.index[-1]) != float(clean.index[-1]):
        return None
    l0, kv0 = float(kv.index[-1]), float(kv.iloc[-1])
    if kv.size >= 2 and kv0 > float(kv.iloc[-2]):
        lm, kvm = float(kv.index[-2]), float(kv.iloc[-2])
        return l0 + (1.0 - kv0) * (l0 - lm) / (kv0 - kvm)
    return l0 / kv0


def predicted_knee(
    points: pd.DataFrame,
    *,
    kind: str,
    capacity_tokens: float | None,
    max_batch_size: float | None,
) -> float | None:
    """The load where predicted KV usage reaches 100 %: for concurrency ``capacity ÷ held``
    (held: the mean over the series' runs, weighted by requests), None when it lies above the
    batch cap (the engine never holds that many sequences); for a rate the crossing of the
    predicted line, interpolated between the levels around it (None: it does not cross)."""
    if capacity_tokens is None or capacity_tokens <= 0:
        return None
    if kind == "concurrency":
        have = points[points["held_tokens"].notna()]
        if have.empty:
            return None
        weights = have["requests"].clip(lower=1).to_numpy(dtype="float64")
        held = float(np.average(have["held_tokens"].to_numpy(dtype="float64"), weights=weights))
        knee = capacity_tokens / held
        if max_batch_size is not None and knee > float(max_batch_size):
            return None
        return knee
    line = points[points["predicted_kv"].notna()].groupby("load")["predicted_kv"].mean()
    loads, usage = line.index.to_numpy(dtype="float64"), line.to_numpy(dtype="float64")
    for i in range(1, loads.size):
        if usage[i - 1] < 1.0 <= usage[i]:
            share = (1.0 - usage[i - 1]) / (usage[i] - usage[i - 1])
            return float(loads[i - 1] + share * (loads[i] - loads[i - 1]))
    return None
