"""Building the rows an importer writes: run ids, the ``runs`` row, requests and token gaps.

Per-request metrics are recomputed here with ServeScope's definitions (DESIGN §5,
``analysis.metrics``): TTFT and E2E from the file's raw per-request figures, TPOT as
(E2E − TTFT) / (output_tokens − 1), token gaps in milliseconds.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any, Final

import numpy as np
import pandas as pd

from analysis.metrics import requests_tpot_ms
from analysis.precision import normalise_kv_cache_dtype, normalise_precision

from .model import ImportOptions, Source

Clock = Callable[[], float]


def run_id_for(sha256: str, index: int) -> str:
    """Content-hash run id: the same file (and position in it) always gives the same id."""
    return hashlib.sha256(f"{sha256}:{index}".encode()).hexdigest()[:20]


def base_run(
    src: Source,
    source: str,
    index: int,
    options: ImportOptions,
    *,
    label: str | None = None,
    run_count: int = 1,
    clock: Clock = time.time,
    **fields: Any,
) -> dict[str, Any]:
    """The ``runs`` row common to every importer, with the command line's metadata applied."""
    default_name = src.name if not label else f"{src.name} · {label}"
    if options.name:
        name = options.name if run_count == 1 else f"{options.name} · {label or index + 1}"
    else:
        name = default_name
    run: dict[str, Any] = {
        "run_id": run_id_for(src.sha256, index),
        "name": name,
        "source": source,
        "source_file": src.path,
        "source_sha256": src.sha256,
        "status": "completed",
        "created_at": clock(),
        "tags": list(options.tags),
    }
    run.update({k: v for k, v in fields.items() if v is not None})
    if options.framework:
        run["framework"] = options.framework
    if options.model:
        run["model"] = options.model
    if options.gpu_name:
        run["gpu_name"] = options.gpu_name
    if options.gpu_count is not None:
        run["gpu_count"] = options.gpu_count
    if options.precision:
        run["precision"] = options.precision
    if options.kv_cache_dtype:
        run["kv_cache_dtype"] = options.kv_cache_dtype
    started, ended = run.get("started_at"), run.get("ended_at")
    if started is not None and ended is not None and ended > started:
        # an end before the start is refused by validate.check_parsed, naming the run
        run.setdefault("duration_s", ended - started)
    return run


#: Keys naming the weight precision, in the order they are believed: the quantisation method
#: (vLLM and SGLang ``--quantization``), a ``precision`` the user wrote, then the weights'
#: ``dtype`` (``auto`` says nothing and is skipped).
PRECISION_KEYS: Final = ("quantization", "precision", "dtype")
KV_CACHE_KEYS: Final = ("kv_cache_dtype",)


def _flat_keys(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).strip().lstrip("-").replace("-", "_").lower(): v for k, v in obj.items()}


def precision_fields(*objects: Any) -> dict[str, str]:
    """``precision`` and ``kv_cache_dtype`` where a file names them, in the vocabulary of
    ``analysis.precision``: the first of ``objects`` (mappings: a run's top level, where
    ``vllm bench serve --metadata`` and llmperf's metadata keys land, then e.g. SGLang's
    ``server_info`` server arguments) with a recognised value. A value outside the vocabulary
    (or ``auto`` weights) is not guessed at: the field stays unset (NULL)."""
    out: dict[str, str] = {}
    for obj in objects:
        if not isinstance(obj, Mapping):
            continue
        flat = _flat_keys(obj)
        if "precision" not in out:
            for key in PRECISION_KEYS:
                found = normalise_precision(flat.get(key))
                if found is not None:
                    out["precision"] = found
                    break
        if "kv_cache_dtype" not in out:
            for key in KV_CACHE_KEYS:
                found = normalise_kv_cache_dtype(flat.get(key))
                if found is not None:
                    out["kv_cache_dtype"] = found
                    break
    return out


def _column(values: Sequence[Any] | np.ndarray | None, n: int, dtype: str) -> Any:
    if values is None:
        return pd.Series([None] * n, dtype=dtype).array
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        # already numeric (NaN = not given): no Python loop per value
        if dtype == "float64":
            return values.astype("float64", copy=False)
        if dtype == "Int64":
            as_float = values.astype("float64", copy=False)
            missing = np.isnan(as_float)
            return pd.arrays.IntegerArray(
                np.round(np.where(missing, 0.0, as_float)).astype("int64"), missing
            )
    if dtype == "Int64":
        arr = pd.array(
            [None if v is None or (isinstance(v, float) and v != v) else round(v) for v in values],
            dtype="Int64",
        )
        return arr
    if dtype == "float64":
        return np.asarray([np.nan if v is None else v for v in values], dtype="float64")
    return pd.Series(list(values), dtype=dtype).array


def requests_frame(
    run_id: str,
    n: int,
    *,
    ttft_ms: Sequence[float | None] | np.ndarray,
    e2e_ms: Sequence[float | None] | np.ndarray,
    output_tokens: Sequence[int | float | None] | np.ndarray | None,
    input_tokens: Sequence[int | float | None] | np.ndarray | None = None,
    status: Sequence[str] | np.ndarray | None = None,
    error: Sequence[str | None] | None = None,
    sent_at: Sequence[float | None] | np.ndarray | None = None,
    scheduled_at: Sequence[float | None] | None = None,
    cached_tokens: Sequence[int | float | None] | None = None,
    http_status: Sequence[int | float | None] | None = None,
    finish_reason: Sequence[str | None] | None = None,
    conversation_id: Sequence[str | None] | None = None,
    turn: Sequence[int | float | None] | None = None,
    chunks: Sequence[int | float | None] | np.ndarray | None = None,
    output_tokens_estimated: bool | Sequence[bool] = False,
) -> pd.DataFrame:
    """The ``requests`` rows of one run, with TPOT recomputed by ``analysis.metrics``.

    ``sent_at`` (epoch seconds) gives ``first_token_at = sent_at + TTFT`` and
    ``done_at = sent_at + E2E``. Metrics of failed requests are kept only where measured.
    """
    ttft = np.asarray(_column(ttft_ms, n, "float64"), dtype="float64")
    e2e = np.asarray(_column(e2e_ms, n, "float64"), dtype="float64")
    out_tok = _column(output_tokens, n, "Int64")
    tpot = requests_tpot_ms(e2e, ttft, out_tok.to_numpy(dtype="float64", na_value=np.nan))
    frame: dict[str, Any] = {
        "run_id": pd.Categorical.from_codes(
            np.zeros(n, dtype="int8"), categories=pd.Index([run_id])
        ),
        "seq": np.arange(n, dtype="int64"),
        "input_tokens": _column(input_tokens, n, "Int64"),
        "output_tokens": out_tok,
        "cached_tokens": _column(cached_tokens, n, "Int64"),
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2e_ms": e2e,
        "status": np.asarray(status if status is not None else ["ok"] * n, dtype=object),
        "error": _column(error, n, "object"),
        "http_status": _column(http_status, n, "Int64"),
        "finish_reason": _column(finish_reason, n, "object"),
        "conversation_id": _column(conversation_id, n, "object"),
        "turn": _column(turn, n, "Int64"),
        "chunks": _column(chunks, n, "Int64"),
    }
    if isinstance(output_tokens_estimated, bool):
        frame["output_tokens_estimated"] = np.full(n, output_tokens_estimated, dtype=bool)
    else:
        frame["output_tokens_estimated"] = np.asarray(output_tokens_estimated, dtype=bool)
    if sent_at is not None:
        sent = np.asarray(_column(sent_at, n, "float64"), dtype="float64")
        frame["sent_at"] = sent
        frame["first_token_at"] = sent + ttft / 1000.0
        frame["done_at"] = sent + e2e / 1000.0
    if scheduled_at is not None:
        sched = np.asarray(_column(scheduled_at, n, "float64"), dtype="float64")
        frame["scheduled_at"] = sched
        if sent_at is not None:
            frame["lag_ms"] = (frame["sent_at"] - sched) * 1000.0
    return pd.DataFrame(frame, copy=False)


def flatten_gaps(gaps: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-request gap lists as one float64 array of every gap plus each request's count.

    Raises ``TypeError`` / ``ValueError`` when a gap is not a number.
    """
    lengths = np.fromiter(map(len, gaps), dtype="int64", count=len(gaps))
    total = int(lengths.sum())
    values = np.fromiter(chain.from_iterable(gaps), dtype="float64", count=total)
    return values, lengths


def gap_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The sum of each request's gaps (0 for none), from ``flatten_gaps``'s arrays."""
    ends = np.cumsum(lengths)
    cumulative = np.concatenate(([0.0], np.cumsum(values)))
    return np.diff(np.concatenate(([0.0], cumulative[ends])))


def gaps_frame(
    run_id: str, gaps: Sequence[Sequence[float]], *, scale_to_ms: float
) -> pd.DataFrame | None:
    """``token_gaps`` rows from per-request gap lists (``scale_to_ms`` converts their unit)."""
    return gaps_frame_from_arrays(run_id, *flatten_gaps(gaps), scale_to_ms=scale_to_ms)


def gaps_frame_from_arrays(
    run_id: str, values: np.ndarray, lengths: np.ndarray, *, scale_to_ms: float
) -> pd.DataFrame | None:
    """``token_gaps`` rows from every gap (request order) and each request's gap count.

    Vectorised (no Python loop per gap) with compact dtypes: ``seq``/``idx`` int32 (the
    columns' SQL type), ``run_id`` one category; the frame is not consolidated (no copy).
    """
    total = int(values.size)
    if total == 0:
        return None
    n = int(lengths.size)
    seq = np.repeat(np.arange(n, dtype="int32"), lengths)
    # idx restarts at 0 for each request: a running count of ones, with each request's first
    # gap stepping back by the length of the request before it (a cumsum, not a repeat)
    nonempty = lengths[lengths > 0]
    starts = np.cumsum(nonempty)[:-1]
    step = np.ones(total, dtype="int32")
    step[0] = 0
    step[starts] = 1 - nonempty[:-1]
    idx = np.cumsum(step, dtype="int32")
    return pd.DataFrame(
        {
            # one category, not millions of string objects: much faster to build and to scan
            "run_id": pd.Categorical.from_codes(
                np.zeros(total, dtype="int8"), categories=pd.Index([run_id])
            ),
            "seq": seq,
            "idx": idx,
            "gap_ms": values * scale_to_ms if scale_to_ms != 1.0 else values,
        },
        copy=False,
    )


def summary_entry(
    mean: float | None = None,
    p50: float | None = None,
    p90: float | None = None,
    p95: float | None = None,
    p99: float | None = None,
    **extra: float | None,
) -> dict[str, float]:
    """One normalised metric of a tool's own aggregates (unit fixed by the metric's name)."""
    entry = {"mean": mean, "p50": p50, "p90": p90, "p95": p95, "p99": p99, **extra}
    return {k: v for k, v in entry.items() if v is not None}
