"""Production traces to replay: arrival times and input/output lengths (``bench --trace``).

``Trace`` is what a load level of kind ``"trace"`` replays (``WorkerPlan.trace``): request i is
sent ``offsets[i]`` seconds after the level's start, with a prompt of ``input_tokens[i]`` tokens
and ``output_tokens[i]`` tokens asked for.

``load_trace`` reads the public formats (docs/traces.md gives their sources), recognised from
the content (the CSV header or the first JSON line):

- ``azure``: Azure LLM inference trace 2023/2024, CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``;
  ``TIMESTAMP`` a date-time (``2023-11-16 18:15:46.6805900``, 2024:
  ``2024-05-12 00:00:00.001163+00:00``, the fraction sometimes absent).
- ``burstgpt``: BurstGPT CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log
  Type`` (newer releases add ``Session ID``, ``Elapsed time``); ``Timestamp`` in seconds from
  the start of the collection; failed requests have ``Response tokens`` 0.
- ``mooncake``: Mooncake FAST'25 JSONL, one ``{"timestamp": ms, "input_length": n,
  "output_length": n, "hash_ids": [...]}`` per line.

The file is read once, in blocks (its SHA-256 over exactly the bytes parsed); rows without a
usable time or lengths ≥ 1 (a failed BurstGPT request's 0 response tokens included) are skipped
and counted, unless most rows are so (then the file is refused, naming its first bad line).

Bounds (docs/traces.md, *Bounds*), each refusing the file before anything is sent, naming the
line: a length above :data:`MAX_REQUEST_TOKENS`, a time beyond ±:data:`MAX_TRACE_TIME_S`, and a
replay (after the window, the speed and the cut) longer than :data:`MAX_REPLAY_S`. Where the
endpoint names its model's context, ``bench`` also refuses a trace with a request whose input and
output do not fit it (:func:`check_context`).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from errors import InputError

FORMATS: tuple[str, ...] = ("azure", "burstgpt", "mooncake")

#: what each format looks like, for error messages (exact column names / keys and units)
FORMAT_FORMS: dict[str, str] = {
    "azure": "Azure LLM inference trace CSV with header TIMESTAMP,ContextTokens,GeneratedTokens "
    "(TIMESTAMP a date-time)",
    "burstgpt": "BurstGPT CSV with header Timestamp,Model,Request tokens,Response tokens,Total "
    "tokens,Log Type (Timestamp in seconds)",
    "mooncake": 'Mooncake JSONL, one {"timestamp": <ms>, "input_length": N, "output_length": N} '
    "per line",
}
ACCEPTED = "accepted: " + "; ".join(FORMAT_FORMS[f] for f in FORMATS)

#: a file whose share of unusable rows is above this is refused (not a trace of this format)
MAX_UNUSABLE_SHARE = 0.5
#: the most tokens one request may ask for as input or as output, in a trace or a workload
#: (``workloads.parse_length``): 2²¹, the longest context a served model documents (a trace row
#: of 10¹² tokens grew bench past 3.4 GB synthesising its prompt)
MAX_REQUEST_TOKENS = 2_097_152
#: the furthest a row's time may be from 0, in seconds (Unix time in seconds until 2286; a
#: timestamp of 1e308 s or a Mooncake one of ±1e18 ms made a replay that never ends)
MAX_TRACE_TIME_S = 1e10
#: the longest replay, in seconds after --trace-window, --trace-speed and --duration/--requests
#: (31 days: the public traces span a day to a few months; cut or speed up a longer one)
MAX_REPLAY_S = 31 * 86400.0

_BLOCK = 1 << 20
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


@dataclass(frozen=True)
class Trace:
    """A trace ready to replay: scaled by ``speed``, cut to its window, offsets from 0."""

    format: str  # azure | burstgpt | mooncake
    name: str  # the file's name (never its folder)
    sha256: str  # of the whole file, as read
    offsets: tuple[float, ...]  # seconds from the level's start, non-decreasing, first 0
    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    speed: float = 1.0
    window: tuple[float, float] | None = None  # seconds of the original trace, [start, end)
    rows_read: int = 0
    rows_skipped: int = 0  # rows not replayed: outside the window or the cut, or unusable
    rows_unusable: int = 0  # of those, rows without a usable time or lengths ≥ 1
    reordered: bool = False  # the file's rows were not in time order (sorted here)

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def span_s(self) -> float:
        return self.offsets[-1] if self.offsets else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second over the replay (what a rate level's value would be)."""
        n = len(self.offsets)
        return (n - 1) / self.span_s if n > 1 and self.span_s > 0 else float(n)


class _Unusable(ValueError):
    """A row without a usable time or lengths (skipped and counted)."""


def _length(text: str, column: str) -> int:
    """A token count ≥ 1 (``12`` or ``12.0``)."""
    text = text.strip()
    try:
        n = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise _Unusable(f"{column} {text!r} is not a number") from None
        if not f.is_integer():
            raise _Unusable(f"{column} {text!r} is not a whole number of tokens") from None
        n = int(f)
    if n < 1:
        raise _Unusable(f"{column} is {n} (a length must be ≥ 1 token)")
    return n


def _seconds(text: str, column: str) -> float:
    try:
        t = float(text)
    except ValueError:
        raise _Unusable(f"{column} {text.strip()!r} is not a number of seconds") from None
    if not math.isfinite(t):
        raise _Unusable(f"{column} {text.strip()!r} is not a finite time")
    return t


class _AzureClock:
    """``YYYY-MM-DD HH:MM:SS[.fraction][Z|±HH:MM]`` → seconds from the first row's midnight
    (UTC when an offset is given), small numbers that keep the fraction's precision."""

    def __init__(self) -> None:
        self.base: int | None = None
        self.days: dict[str, int] = {}
        self.minutes: dict[str, float] = {}  # "YYYY-MM-DD HH:MM:" → its seconds

    def __call__(self, s: str) -> float:
        """The public files' forms (no offset, or +00:00) from the minute's cached seconds;
        anything else through ``parse``."""
        base = self.minutes.get(s[:17])
        if base is not None:
            rest = s[17:-6] if s.endswith("+00:00") else s[17:]
            try:
                sec = float(rest)
            except ValueError:
                return self.parse(s)
            if 0.0 <= sec < 60.0:
                return base + sec
        return self.parse(s)

    def parse(self, text: str) -> float:
        s = text.strip()
        if len(s) < 19 or s[10] not in " T":
            raise _Unusable(f"TIMESTAMP {s!r} is not a date-time (YYYY-MM-DD HH:MM:SS[.f])")
        day_text, clock = s[:10], s[11:]
        day = self.days.get(day_text)
        if day is None:
            try:
                ordinal = date.fromisoformat(day_text).toordinal()
            except ValueError:
                raise _Unusable(f"TIMESTAMP {s!r} is not a date-time") from None
            if self.base is None:
                self.base = ordinal
            day = self.days[day_text] = (ordinal - self.base) * 86400
        shift = 0
        if clock.endswith("Z"):
            clock = clock[:-1]
        elif len(clock) >= 14 and clock[-6] in "+-" and clock[-3] == ":":
            try:
                hh, mm = int(clock[-5:-3]), int(clock[-2:])
            except ValueError:
                raise _Unusable(f"TIMESTAMP {s!r} has an invalid UTC offset") from None
            shift = (hh * 3600 + mm * 60) * (1 if clock[-6] == "+" else -1)
            clock = clock[:-6]
        try:
            h, m, sec = clock.split(":")
            value = int(h) * 3600 + int(m) * 60 + float(sec)
        except ValueError:
            raise _Unusable(
                f"TIMESTAMP {s!r} is not a date-time (YYYY-MM-DD HH:MM:SS[.f])"
            ) from None
        if not (len(h) == 2 and len(m) == 2 and 0 <= value < 86401 and math.isfinite(value)):
            raise _Unusable(f"TIMESTAMP {s!r} is not a time of day")
        if shift == 0 and s == text and s[16] == ":":
            self.minutes[s[:17]] = day + int(h) * 3600 + int(m) * 60
        return day + value - shift


_RowParser = Callable[[str], tuple[float, int, int]]


@dataclass(frozen=True)
class _CsvColumns:
    """Where a CSV trace's time and lengths are, for the fast path of ``_read``."""

    time: int
    input: int
    output: int
    time_of: Callable[[str], float]


def _csv_parser(fmt: str, header: list[str], path: Path) -> tuple[_RowParser, _CsvColumns]:
    """The row parser of a CSV trace, from its header (columns found by name): a careful one
    that says why a row is unusable, and the columns for the fast path."""
    names = [h.strip().lstrip("\ufeff").strip() for h in header]
    wanted = _AZURE_COLUMNS if fmt == "azure" else _BURSTGPT_COLUMNS
    missing = [c for c in wanted if c not in names]
    if missing:
        # the public files spell them so; accept another case too
        folded = {n.casefold(): i for i, n in enumerate(names)}
        if all(c.casefold() in folded for c in wanted):
            index = [folded[c.casefold()] for c in wanted]
        else:
            raise InputError(
                f"trace {path}: line 1: the header {','.join(names)!r} lacks column(s) "
                f"{', '.join(missing)} of the {fmt} format",
                hint=f"{fmt}: {FORMAT_FORMS[fmt]}; {ACCEPTED}",
            )
    else:
        index = [names.index(c) for c in wanted]
    it, ii, io = index
    width = max(index) + 1
    t_col, i_col, o_col = wanted
    time_of: Callable[[str, str], float]
    fast_time: Callable[[str], float]
    if fmt == "azure":
        clock = _AzureClock()
        fast_time = clock

        def time_of(text: str, column: str) -> float:
            return clock(text)
    else:
        time_of = _seconds
        fast_time = float
    reader_dialect = csv.excel

    def parse(line: str) -> tuple[float, int, int]:
        # csv only for quoted fields: split is several times faster on the public files
        fields = next(csv.reader([line], reader_dialect)) if '"' in line else line.split(",")
        if len(fields) < width:
            raise _Unusable(f"{len(fields)} field(s), the header has {len(names)}")
        return (
            time_of(fields[it], t_col),
            _length(fields[ii], i_col),
            _length(fields[io], o_col),
        )

    return parse, _CsvColumns(it, ii, io, fast_time)


def _mooncake_row(line: str) -> tuple[float, int, int]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _Unusable(f"not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise _Unusable("not valid JSON (nested too deep to decode)") from None
    if not isinstance(obj, dict):
        raise _Unusable("not a JSON object")
    missing = [k for k in _MOONCAKE_KEYS if k not in obj]
    if missing:
        raise _Unusable(f"no {', '.join(missing)} key")
    ts, n_in, n_out = obj["timestamp"], obj["input_length"], obj["output_length"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise _Unusable(f"timestamp {ts!r} is not a number of milliseconds")
    for key, value in (("input_length", n_in), ("output_length", n_out)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _Unusable(f"{key} {value!r} is not a whole number of tokens ≥ 1")
    return ts / 1000.0, n_in, n_out


def _out_of_bounds(
    path: Path, number: int, fmt: str, t: float, n_in: int, n_out: int
) -> InputError:
    if n_in > MAX_REQUEST_TOKENS or n_out > MAX_REQUEST_TOKENS:
        what = f"{max(n_in, n_out):,} {'input' if n_in >= n_out else 'output'} tokens"
        limit = f"the {MAX_REQUEST_TOKENS:,} tokens a request may have"
    else:
        shown = f"{t * 1000:g} ms" if fmt == "mooncake" else f"{t:g} s"
        what = f"the time {shown}"
        limit = f"±{MAX_TRACE_TIME_S:g} s, the furthest a row's time may be"
    return InputError(
        f"trace {path}: line {number} asks for {what}, beyond {limit}",
        hint="docs/traces.md, Bounds: lengths and times are bounded before anything is sent",
    )


def check_context(trace: Trace, max_model_len: int, where: str) -> None:
    """``InputError`` when a request of ``trace`` asks for more tokens (input + output) than
    ``max_model_len``, the context the endpoint ``where`` names for its model — refused before
    anything is sent, rather than replayed as errors."""
    if not trace.offsets or max_model_len < 1:
        return
    import numpy as np

    total = np.asarray(trace.input_tokens, dtype=np.int64) + np.asarray(
        trace.output_tokens, dtype=np.int64
    )
    over = total > max_model_len
    if not over.any():
        return
    i = int(np.argmax(total))
    raise InputError(
        f"trace {trace.name}: {int(over.sum()):,} of {len(total):,} requests do not fit the "
        f"{max_model_len:,}-token context {where} names (the largest: request {i + 1}, "
        f"{trace.input_tokens[i]:,} input + {trace.output_tokens[i]:,} output tokens)",
        hint="cut the trace with --trace-window, or replay it on a model with a longer context",
    )


def _blocks(path: Path, digest: Callable[[bytes], None]) -> Iterator[tuple[int, list[str]]]:
    """(number of the line before the first, lines) of each block of the file, decoded;
    ``digest`` sees every byte."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        raise InputError(f"trace file {path} does not exist", hint=ACCEPTED) from None
    except IsADirectoryError:
        raise InputError(f"trace file {path} is a folder, not a file", hint=ACCEPTED) from None
    except OSError as exc:
        raise InputError(f"trace file {path} cannot be read: {exc.strerror or exc}") from None
    number = 0
    first = True
    with f:
        rest = b""
        while True:
            try:
                block = f.read(_BLOCK)
            except OSError as exc:
                raise InputError(
                    f"trace file {path} cannot be read: {exc.strerror or exc}"
                ) from None
            if first and block[:2] == b"\x1f\x8b":
                raise InputError(
                    f"trace {path} is gzip-compressed", hint="decompress it first; " + ACCEPTED
                )
            first = False
            if not block:
                break
            digest(block)
            data = rest + block
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                lines = _decode(data[:cut], path, number).split("\n")
                lines.pop()  # after the last newline: nothing
                yield number, lines
                number += len(lines)
        if rest:
            yield number, [_decode(rest, path, number)]


def _decode(raw: bytes, path: Path, before: int) -> str:
    """``raw`` (whole lines, after line ``before``) as text; names the first line that is not
    UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        number = before + raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"trace {path}: line {number} is not UTF-8 text", hint=ACCEPTED) from None


def _detect(first: str, path: Path, number: int, fmt: str | None) -> str:
    """The format of a file whose first non-empty line is ``first``; ``fmt`` must agree."""
    text = first.strip().lstrip("\ufeff")
    if text.startswith("{"):
        found = "mooncake"
    else:
        names = {h.strip().casefold() for h in text.split(",")}
        if {c.casefold() for c in _AZURE_COLUMNS} <= names:
            found = "azure"
        elif {c.casefold() for c in _BURSTGPT_COLUMNS} <= names:
            found = "burstgpt"
        elif fmt in ("azure", "burstgpt"):
            found = fmt  # its parser names the missing columns
        else:
            raise InputError(
                f"trace {path}: line {number} ({_clip(text)}) is not the header of a known "
                "trace format",
                hint=ACCEPTED,
            )
    if fmt is not None and fmt != found:
        kind = "a JSON line" if found == "mooncake" else "a CSV header"
        raise InputError(
            f"trace {path} is given as --trace-format {fmt} but line {number} ({_clip(text)}) "
            f"is {kind} of the {found} format",
            hint=f"{fmt}: {FORMAT_FORMS[fmt]}; or drop --trace-format (it is recognised)",
        )
    return found


def _clip(text: str, n: int = 80) -> str:
    return repr(text if len(text) <= n else text[: n - 1] + "…")


def _normal_format(fmt: str | None) -> str | None:
    if fmt is None:
        return None
    key = fmt.strip().casefold()
    if key not in FORMATS:
        raise InputError(
            f"--trace-format {fmt!r} unknown; choose one of: {', '.join(FORMATS)}", hint=ACCEPTED
        )
    return key


def load_trace(
    path: str | Path,
    *,
    fmt: str | None = None,
    speed: float = 1.0,
    window: tuple[float, float] | None = None,
    requests: int | None = None,
    duration_s: float | None = None,
) -> Trace:
    """Read a trace file into a ``Trace`` ready to replay (see :func:`_read_trace`).

    The last few traces read are kept, keyed by the file's identity (path, size, modification
    time) and the arguments: ``bench`` checks the file before it opens the store, then replays
    it, and a 1M-row trace takes seconds to read.
    """
    try:
        st = Path(path).resolve().stat()
    except OSError:  # not there: read it uncached, to say what is wrong
        return _read_trace.__wrapped__(None, path, fmt, speed, window, requests, duration_s)
    key = (str(Path(path).resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return _read_trace(key, str(path), fmt, speed, window, requests, duration_s)


def clear_cache() -> None:
    """Forget the traces kept by :func:`load_trace` (a benchmark of reading, a test)."""
    _read_trace.cache_clear()


@functools.lru_cache(maxsize=4)
def _read_trace(
    key: tuple[str, int, int, int, int] | None,
    path: str | Path,
    fmt: str | None,
    speed: float,
    window: tuple[float, float] | None,
    requests: int | None,
    duration_s: float | None,
) -> Trace:
    """Read a trace file into a ``Trace`` ready to replay (``key``: the file's identity, for
    the cache only).

    ``window`` (seconds of the original trace from its first arrival, [start, end)) is taken
    first; then the offsets start at the window's first arrival and are divided by ``speed``;
    then ``duration_s`` keeps offsets < it and ``requests`` the first N. Rows out of time order
    are sorted (``reordered``). Raises ``InputError`` naming the file, the line and the accepted
    formats for anything unreadable, and the trace's span when the window holds no request.
    """
    p = Path(path)
    chosen = _normal_format(fmt)
    if not (speed > 0 and math.isfinite(speed)):
        raise InputError(f"--trace-speed must be a number > 0 (2 = twice as fast), got {speed}")
    if requests is not None and requests < 1:
        raise InputError(f"--requests must be ≥ 1 to cut a trace, got {requests}")
    if duration_s is not None and not duration_s > 0:
        raise InputError(f"--duration must be > 0 to cut a trace, got {duration_s}")
    if window is not None and not (0 <= window[0] < window[1]):
        raise InputError(
            f"--trace-window {window[0]:g}s:{window[1]:g}s is not START:END with 0 ≤ START < END"
        )
    digest = hashlib.sha256()
    times = array("d")
    inputs = array("q")
    outputs = array("q")
    rows = unusable = 0
    first_bad: tuple[int, str] | None = None
    found: str | None = None
    parse: _RowParser | None = None
    fast = False
    c_t = c_in = c_out = 0
    time_of: Callable[[str], float] = float
    add_t, add_in, add_out = times.append, inputs.append, outputs.append
    max_n, max_t = MAX_REQUEST_TOKENS, MAX_TRACE_TIME_S
    for before, lines in _blocks(p, digest.update):
        for offset, line in enumerate(lines, 1):
            if fast:
                # the fast path: a plain CSV row with a usable time and lengths
                fields = line.split(",")
                try:
                    t = time_of(fields[c_t])
                    n_in = int(fields[c_in])
                    n_out = int(fields[c_out])
                except (ValueError, IndexError):
                    pass
                else:
                    if 0 < n_in <= max_n and 0 < n_out <= max_n and -max_t <= t <= max_t:
                        rows += 1
                        add_t(t)
                        add_in(n_in)
                        add_out(n_out)
                        continue
            if not line.strip():
                continue
            number = before + offset
            if parse is None:
                found = _detect(line, p, number, chosen)
                if found == "mooncake":
                    parse = _mooncake_row
                else:
                    header = next(csv.reader([line.lstrip("\ufeff")]))
                    parse, cols = _csv_parser(found, header, p)
                    fast, c_t, c_in, c_out = True, cols.time, cols.input, cols.output
                    time_of = cols.time_of
                    continue  # the header is not a row
            rows += 1
            try:
                t, n_in, n_out = parse(line)
            except _Unusable as exc:
                unusable += 1
                if first_bad is None:
                    first_bad = (number, str(exc))
                continue
            if not (n_in <= max_n and n_out <= max_n and -max_t <= t <= max_t):
                raise _out_of_bounds(p, number, found or "", t, n_in, n_out)
            add_t(t)
            add_in(n_in)
            add_out(n_out)
    if found is None:
        raise InputError(f"trace {p} is empty", hint=ACCEPTED)
    if rows == 0:
        raise InputError(f"trace {p} ({found}) has a header but no rows", hint=ACCEPTED)
    if first_bad is not None and (not times or unusable > MAX_UNUSABLE_SHARE * rows):
        line_no, reason = first_bad
        raise InputError(
            f"trace {p}: {unusable:,} of {rows:,} rows are unusable as {found}; the first is "
            f"line {line_no}: {reason}",
            hint=f"read as {found} (--trace-format names another); {ACCEPTED}",
        )
    import numpy as np  # here: worker processes import Trace, never load_trace

    stamps = np.frombuffer(times, dtype=np.float64)
    reordered = bool(len(stamps) > 1 and (np.diff(stamps) < 0).any())
    order = np.argsort(stamps, kind="stable") if reordered else None  # ties: file order
    rel = (stamps[order] if order is not None else stamps) - stamps.min()
    lo, hi = 0, len(rel)
    if window is not None:
        lo, hi = (int(i) for i in np.searchsorted(rel, window, side="left"))
        if lo >= hi:
            span = float(rel[-1])
            raise InputError(
                f"--trace-window {window[0]:g}s:{window[1]:g}s holds no request of trace {p}: "
                f"it spans {span:.3f} s from its first arrival ({len(rel):,} requests)",
                hint=f"give a window inside 0:{span:g}s",
            )
    replay = (rel[lo:hi] - rel[lo]) / speed
    keep = len(replay)
    if duration_s is not None:
        keep = int(np.searchsorted(replay, duration_s, side="left"))
    if requests is not None:
        keep = min(keep, requests)
    end = lo + keep
    picked = order[lo:end] if order is not None else slice(lo, end)
    n_inputs = tuple(np.frombuffer(inputs, dtype=np.int64)[picked].tolist())
    n_outputs = tuple(np.frombuffer(outputs, dtype=np.int64)[picked].tolist())
    offsets = tuple(replay[:keep].tolist())
    if offsets and offsets[-1] > MAX_REPLAY_S:
        raise InputError(
            f"trace {p}: the replay would last {offsets[-1] / 86400:,.1f} days "
            f"({len(offsets):,} requests), more than the {MAX_REPLAY_S / 86400:g} days a replay "
            "may last",
            hint="cut it with --trace-window START:END, --duration or --requests, or speed it "
            "up with --trace-speed",
        )
    return Trace(
        format=found,
        name=p.name,
        sha256=digest.hexdigest(),
        offsets=offsets,
        input_tokens=n_inputs,
        output_tokens=n_outputs,
        speed=float(speed),
        window=(float(window[0]), float(window[1])) if window is not None else None,
        rows_read=rows,
        rows_skipped=rows - keep,
        rows_unusable=unusable,
        reordered=reordered,
    )
