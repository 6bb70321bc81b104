"""Physical bounds of imported values: defined once here, used by every importer.

A file value outside its bound rejects the whole file with an :class:`errors.ImportFormatError`
naming the file, the key (with its index) and what was found and expected; nothing of that
file is stored. What ``NaN`` (or ``null``) means is part of each bound:

- latencies (TTFT, E2E; ms or s): finite and ≥ 0; NaN / null = *not measured* (stored NULL).
- inter-token gaps: finite and ≥ 0; NaN / null inside a gap list is a bad file (a gap list
  has no "not measured" entry: it would shift every later gap).
- token counts and other counts: whole numbers, 0 ≤ n < 2³¹ (the INTEGER column's range);
  NaN / null = not given (NULL).
- durations: finite and > 0; NaN / null = not given.
- timestamps: finite; NaN / null = not given.
- request rates: ≥ 0, and ``inf`` means "all at once" (vLLM's ``"inf"``, SGLang's
  ``Infinity``); NaN / null = not given.
- a tool's own aggregates (``tool_summary``): NaN / ±inf = not given (SGLang writes ``NaN``
  for the std of one sample); a finite value is checked against its metric's bound.
- engine (Prometheus) sample values from AIPerf's server-metrics export are kept as the
  exposition gave them, as a live scrape keeps them (``NaN`` is a valid sample value there);
  their timestamps are checked.

:func:`check_parsed` is the net behind the importers: every column of every row an importer
produced — including values it derived, such as E2E from two timestamps — is checked against
the column's bound before anything is written, so the store never refuses an imported row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from errors import ImportFormatError

from .model import ParsedFile
from .parsing import Reader
from .records import flatten_gaps

INT32_MAX = 2**31 - 1
# "finite" with room for unit conversions and sums: 1e15 is 31 years in ms, 11 days in ns;
# no benchmark measures more, and no product or sum of such values overflows a float
HUGE = 1e15
# timestamps: epoch ns reach 1e19 in the year 2286; perf_counter() and epoch s stay far below
EPOCH_LIMIT = 1e19


@dataclass(frozen=True)
class Bound:
    """The values a field may take, and what NaN / null means for it."""

    what: str  # "a latency", used in messages
    low: float | None = 0.0  # None: no lower bound
    low_open: bool = False  # low itself excluded (durations > 0)
    high: float | None = None
    integer: bool = False
    nan: Literal["missing", "bad"] = "missing"  # NaN / null: not given, or a bad file
    pos_inf: bool = False  # +inf allowed (a request rate of inf = all at once)

    @property
    def expected(self) -> str:
        if self.pos_inf:
            base = "a number"
        else:
            base = "a whole number" if self.integer else "a finite number"
        conds = []
        if self.low is not None:
            low = "-2^31" if self.low == -(2**31) else f"{self.low:g}"
            conds.append(f"{'>' if self.low_open else '≥'} {low}")
        if self.high is not None:
            conds.append("< 2^31" if self.high == INT32_MAX else f"≤ {self.high:g}")
        text = f"{self.what}, {base}" + (" " + " and ".join(conds) if conds else "")
        if self.pos_inf:
            text += " (inf = all at once)"
        if self.nan == "missing":
            return text + "; NaN or null = not given"
        return text + "; NaN and null are not allowed"

    def bad_mask(self, values: np.ndarray) -> np.ndarray:
        """True where a float64 array breaks the bound (NaN counted only when ``nan='bad'``)."""
        with np.errstate(invalid="ignore"):
            nan = np.isnan(values)
            bad = nan.copy() if self.nan == "bad" else np.zeros(values.shape, dtype=bool)
            inf = np.isinf(values)
            bad |= inf & ~((values > 0) & self.pos_inf)
            if self.low is not None:
                bad |= (values <= self.low) if self.low_open else (values < self.low)
            if self.high is not None:
                bad |= values > self.high
            if self.integer:
                finite = ~nan & ~inf
                bad |= finite & (values != np.floor(np.where(finite, values, 0.0)))
        return bad

    def first_bad(self, values: np.ndarray) -> int | None:
        """The index of the first value breaking the bound, or None. Two reductions (no
        temporaries) decide the common all-good case of a bounded float column: a NaN, an
        infinity or any value out of range fails the comparisons and takes the full check."""
        if values.size == 0:
            return None
        if self.low is not None and self.high is not None and not self.integer:
            if self.nan == "bad":
                lo, hi = values.min(), values.max()  # NaN propagates: fails both tests
            else:
                lo, hi = np.fmin.reduce(values), np.fmax.reduce(values)  # NaN skipped
            if (lo > self.low if self.low_open else lo >= self.low) and hi <= self.high:
                return None
        bad = self.bad_mask(values)
        return int(np.argmax(bad)) if bad.any() else None

    def ok(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return self.nan == "missing"
        return not bool(self.bad_mask(np.array([value], dtype="float64"))[0])


LATENCY = Bound("a latency", high=HUGE)
GAP = Bound("an inter-token gap", high=HUGE, nan="bad")
TOKENS = Bound("a token count", high=INT32_MAX, integer=True)
COUNT = Bound("a count", high=INT32_MAX, integer=True)
INDEX = Bound("an index", high=INT32_MAX, integer=True)
# llmperf writes -1 for a request that failed before any HTTP status
CODE = Bound("a status code", low=-(2**31), high=INT32_MAX, integer=True)
DURATION = Bound("a duration", low_open=True, high=HUGE)
TIMESTAMP = Bound("a timestamp", low=-EPOCH_LIMIT, high=EPOCH_LIMIT)
STAMP = Bound("a timestamp", low=-EPOCH_LIMIT, high=EPOCH_LIMIT, nan="bad")  # a required one
RATE = Bound("a request rate", pos_inf=True)
POSITIVE = Bound("a positive number", low_open=True)  # burstiness, a positive rate
MEASURE = Bound("a measurement", high=HUGE)  # throughputs, memory, power, utilisation, clocks
FINITE = Bound("a finite number", low=-HUGE, high=HUGE)  # temperatures, client lag


def _found(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return repr(int(value))
    return repr(value)


def fail(
    path: str, key: str, value: Any, bound: Bound, how: str | None = None
) -> ImportFormatError:
    found = f"{how} = {_found(value)}" if how else _found(value)
    return ImportFormatError(path, f"found {found}; expected {bound.expected}", key=key)


def check(
    path: str, key: str, value: float | None, bound: Bound, *, how: str | None = None
) -> float | None:
    """A parsed number (None = null) within ``bound``; NaN → None where it means "not given".
    ``how`` says how a derived value was computed from the file's (named in the message)."""
    if value is None or value != value:
        if bound.nan == "bad":
            raise fail(path, key, value, bound, how)
        return None
    if not bound.ok(value):
        raise fail(path, key, value, bound, how)
    return value


def number(r: Reader, raw: Any, key: str, bound: Bound) -> float | None:
    """A file value read as a number (numeric strings too) and checked against ``bound``."""
    return check(r.path, key, r.number(raw, key), bound)


def integer(r: Reader, raw: Any, key: str, bound: Bound) -> int | None:
    """A whole number within ``bound`` (which should be an integer bound)."""
    num = number(r, raw, key, bound)
    return None if num is None else int(num)


def ns_timestamp(r: Reader, raw: Any, key: str) -> int:
    """A required epoch-nanosecond timestamp as an exact integer (floats lose ~256 ns at 1e18)."""
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) < 2**63:
        return raw
    num = check(r.path, key, r.number(raw, key, allow_none=False), STAMP)
    assert num is not None
    return int(num)


def aggregate(r: Reader, raw: Any, key: str, bound: Bound) -> float | None:
    """A tool's own aggregate: NaN / ±inf = not given; a finite value must meet ``bound``."""
    num = r.number(raw, key)
    if num is None or not math.isfinite(num):
        return None
    return check(r.path, key, num, bound)


def check_array(path: str, key: str, values: np.ndarray, bound: Bound) -> np.ndarray:
    """A float64 array within ``bound`` (vectorised); names the first bad index."""
    i = bound.first_bad(values)
    if i is not None:
        raise fail(path, f"{key}[{i}]", float(values[i]), bound)
    return values


def check_nested(
    path: str, key: str, values: np.ndarray, lengths: np.ndarray, bound: Bound
) -> np.ndarray:
    """Flattened per-request lists (``records.flatten_gaps``) within ``bound``; names
    ``key[request][position]`` of the first bad value."""
    flat = bound.first_bad(values)
    if flat is not None:
        ends = np.cumsum(lengths)
        i = int(np.searchsorted(ends, flat, side="right"))
        j = flat - (int(ends[i - 1]) if i else 0)
        raise fail(path, f"{key}[{i}][{j}]", float(values[flat]), bound)
    return values


def gap_lists(r: Reader, raw: Any, key: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-request gap lists (``itls``: one list per request) as every gap (file units) and
    each request's count, checked against :data:`GAP`; names ``key[i][j]`` of a bad one."""
    lists = r.array(raw, key, n)
    for i, gaps in enumerate(lists):
        if not isinstance(gaps, list):
            raise r.fail(f"{key}[{i}]", f"expected an array of numbers but found {_found(gaps)}")
    try:
        values, lengths = flatten_gaps(lists)
    except (TypeError, ValueError, OverflowError):
        # a null, a text or an integer beyond float range: read each one, naming a bad one
        numbers = [
            [r.number(g, f"{key}[{i}][{j}]") for j, g in enumerate(gaps)]
            for i, gaps in enumerate(lists)
        ]
        values, lengths = flatten_gaps(
            [[np.nan if g is None else g for g in gaps] for gaps in numbers]
        )
    return check_nested(r.path, key, values, lengths, GAP), lengths


# --- the net behind every importer -------------------------------------------------------------

# latencies in ms, converted from a file's seconds at most (the importers check file units)
LATENCY_MS = Bound("a latency (ms)", high=HUGE * 1e3)
REQUEST_COLUMNS: dict[str, Bound] = {
    "ttft_ms": LATENCY_MS,
    "tpot_ms": LATENCY_MS,
    "e2e_ms": LATENCY_MS,
    "input_tokens": TOKENS,
    "output_tokens": TOKENS,
    "cached_tokens": TOKENS,
    "chunks": COUNT,
    "http_status": CODE,
    "turn": INDEX,
    "scheduled_at": TIMESTAMP,
    "sent_at": TIMESTAMP,
    "first_token_at": TIMESTAMP,
    "done_at": TIMESTAMP,
    "lag_ms": FINITE,
}
GAP_MS = Bound("an inter-token gap (ms)", high=HUGE * 1e3, nan="bad")
RUN_FIELDS: dict[str, Bound] = {
    "started_at": TIMESTAMP,
    "ended_at": TIMESTAMP,
    "duration_s": DURATION,
    "target_rate": Bound("a request rate"),
    "burstiness": POSITIVE,
    "concurrency": COUNT,
    "gpu_count": COUNT,
}
SAMPLE_COLUMNS: dict[str, dict[str, Bound]] = {
    "gpu_samples": {
        "ts": STAMP,
        "gpu_index": Bound("a GPU index", high=INT32_MAX, integer=True, nan="bad"),
        "mem_used_bytes": MEASURE,
        "mem_total_bytes": MEASURE,
        "mem_reserved_bytes": MEASURE,
        "util_gpu": MEASURE,
        "util_mem": MEASURE,
        "power_w": MEASURE,
        "temp_c": FINITE,
        "sm_clock_mhz": MEASURE,
    },
    "engine_samples": {"ts": STAMP},
    "engine_raw_samples": {"ts": STAMP},
}
TEXT_COLUMNS = {
    "requests": ("status", "error", "finish_reason", "conversation_id"),
    "gpu_samples": ("host", "gpu_uuid", "gpu_name", "source"),
    "engine_samples": ("target", "metric", "engine"),
    "engine_raw_samples": ("target", "name", "labels"),
}


def _floats(series: pd.Series) -> np.ndarray:
    return series.to_numpy(dtype="float64", na_value=np.nan)


def _check_text(path: str, where: str, frame: pd.DataFrame, columns: tuple[str, ...]) -> None:
    for col in columns:
        if col not in frame.columns:
            continue
        series = frame[col]
        if isinstance(series.dtype, pd.CategoricalDtype) or series.dtype.kind == "b":
            continue
        kind = pd.api.types.infer_dtype(series, skipna=True)
        if kind not in ("string", "empty"):
            bad = next(i for i, v in enumerate(series) if v is not None and not isinstance(v, str))
            raise ImportFormatError(
                path,
                f"found {type(series.iloc[bad]).__name__} {series.iloc[bad]!r:.40}; expected text",
                key=f"{where}[{bad}].{col}",
            )


def _check_requests(path: str, where: str, frame: pd.DataFrame) -> None:
    ttft, e2e = _floats(frame["ttft_ms"]), _floats(frame["e2e_ms"])
    with np.errstate(invalid="ignore"):
        shorter = e2e < ttft  # False where either is NaN
    if shorter.any():
        i = int(np.argmax(shorter))
        raise ImportFormatError(
            path,
            f"E2E {e2e[i]:.6g} ms is shorter than TTFT {ttft[i]:.6g} ms; "
            "expected a request to end after its first token",
            key=f"{where}[{i}]",
        )
    for col, bound in REQUEST_COLUMNS.items():
        if col not in frame.columns:
            continue
        values = _floats(frame[col])
        row = bound.first_bad(values)
        if row is not None:
            raise ImportFormatError(
                path,
                f"computed {col} = {_found(float(values[row]))} from the file's values; "
                f"expected {bound.expected}",
                key=f"{where}[{row}]",
            )
    _check_text(path, where, frame, TEXT_COLUMNS["requests"])


def check_parsed(parsed: ParsedFile) -> None:
    """Every value ``parsed`` would write, against its column's bound (see the module doc)."""
    path = parsed.sources[0].path if parsed.sources else parsed.path
    multi = len(parsed.runs) > 1
    for k, run in enumerate(parsed.runs):
        prefix = f"run {k + 1}: " if multi else ""
        for field, bound in RUN_FIELDS.items():
            value = run.run.get(field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise fail(path, f"{prefix}(run).{field}", value, bound)
            if not bound.ok(float(value)):
                raise ImportFormatError(
                    path,
                    f"the run's {field} would be {_found(value)}; expected {bound.expected}",
                    key=f"{prefix}(run)",
                )
        started, ended = run.run.get("started_at"), run.run.get("ended_at")
        if started is not None and ended is not None and ended < started:
            raise ImportFormatError(
                path,
                f"the run ends ({ended!r}) before it starts ({started!r}); "
                "expected its end at or after its start",
                key=f"{prefix}(run)",
            )
        if run.requests is not None and len(run.requests):
            _check_requests(path, f"{prefix}requests", run.requests)
        gaps = run.token_gaps
        if gaps is not None and len(gaps):
            values = _floats(gaps["gap_ms"])
            i = GAP_MS.first_bad(values)
            if i is not None:
                raise ImportFormatError(
                    path,
                    f"computed gap {_found(float(values[i]))} ms from the file's values; "
                    f"expected {GAP_MS.expected}",
                    key=f"{prefix}token gap [{int(gaps['seq'].iloc[i])}]"
                    f"[{int(gaps['idx'].iloc[i])}]",
                )
    for table, frame in parsed.samples.items():
        for col, bound in SAMPLE_COLUMNS.get(table, {}).items():
            if col in frame.columns:
                values = _floats(frame[col])
                i = bound.first_bad(values)
                if i is not None:
                    raise ImportFormatError(
                        path,
                        f"{col} = {_found(float(values[i]))}; expected {bound.expected}",
                        key=f"{table}[{i}]",
                    )
        _check_text(path, table, frame, TEXT_COLUMNS.get(table, ()))
