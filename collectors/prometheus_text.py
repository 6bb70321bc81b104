"""A fast, faithful parser of the Prometheus text exposition format (version 0.0.4).

Handles what real engines emit (FORMATS.md §A0): metric names with colons, label values with
escapes (``\\\\``, ``\\"``, ``\\n``), a trailing comma in a label set, ``NaN``, ``+Inf``,
``-Inf`` (and llama.cpp's Windows ``-nan(ind)``), optional timestamps, ``# HELP`` / ``# TYPE``
lines (or none at all), other comments, blank lines, histograms and summaries, OpenMetrics
``# EOF`` and exemplars (ignored).

Why not ``prometheus_client.parser``: it is faithful, but it rebuilds metric *families*
(renaming ``foo_total`` samples to a family ``foo``) and is ~5× slower on the 52 KB vLLM page
(bench/metrics_parse.py prints both). ServeScope keeps samples as exposed, which is what both
the normalisation maps and the raw-series store want, and needs no extra dependency.

A malformed line raises :class:`PrometheusTextError` naming the line number and the reason.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from errors import CollectorError

Labels = tuple[tuple[str, str], ...]

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,?)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE_RE = re.compile(r"\\[\\\"n]")
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")

#: Suffixes a histogram's or summary's samples carry after the family name.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
SUMMARY_SUFFIXES = ("_sum", "_count", "_created")


class PrometheusTextError(CollectorError):
    """A /metrics page that is not valid Prometheus text; names the line and the reason."""

    def __init__(self, line_no: int, reason: str, line: str) -> None:
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"line {line_no}: {reason}: {shown!r}")
        self.line_no = line_no
        self.reason = reason


class Sample(NamedTuple):
    """One sample as exposed: the sample name (``foo_bucket``, ``foo_total``), labels, value.

    A NamedTuple: built several hundred times per scrape, it must be cheap to construct.
    """

    name: str
    labels: Labels
    value: float
    timestamp_ms: int | None = None

    def label(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return default

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass
class Exposition:
    """A parsed /metrics page: samples in page order, plus the TYPE and HELP declared."""

    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def by_name(self) -> dict[str, list[Sample]]:
        """Samples grouped by sample name, page order kept within each group."""
        out: dict[str, list[Sample]] = {}
        for s in self.samples:
            out.setdefault(s.name, []).append(s)
        return out

    def get(self, name: str, **labels: str) -> list[Sample]:
        """Samples named ``name`` whose labels include all of ``labels``."""
        want = labels.items()
        return [s for s in self.samples if s.name == name and all(p in s.labels for p in want)]

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the single sample matching, None when none does (error if several)."""
        found = self.get(name, **labels)
        if not found:
            return None
        if len(found) > 1:
            raise ValueError(f"{len(found)} samples match {name} {labels}")
        return found[0].value

    def type_of(self, sample_name: str) -> str | None:
        """The declared type of the family a sample belongs to (``counter``, ``histogram`` …).

        Counters are declared either as ``foo`` or ``foo_total`` (prometheus_client declares the
        latter); histogram and summary samples carry a suffix after the family name.
        """
        declared = self.types.get(sample_name)
        if declared is not None:
            return declared
        for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
            if sample_name.endswith(suffix):
                family = sample_name[: -len(suffix)]
                kind = self.types.get(family)
                if kind is not None:
                    return kind
        return None


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], value) if "\\" in value else value


def parse_value(text: str) -> float:
    """A sample value: Go's ParseFloat spellings plus ``-nan(ind)``-style NaNs."""
    try:
        return float(text)
    except ValueError:
        low = text.lower()
        if low.lstrip("+-").startswith("nan"):
            return math.nan
        raise


def _parse_labels(line: str, start: int, line_no: int) -> tuple[Labels, int]:
    """Parse ``{k="v",...}`` beginning at ``start`` (the ``{``); returns labels and the index
    after ``}``."""
    pos = start + 1
    labels: list[tuple[str, str]] = []
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return tuple(labels), pos + 1
        m = _LABEL_RE.match(line, pos)
        if m is None:
            raise PrometheusTextError(line_no, "malformed label set", line)
        labels.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
        if not m.group(3):  # no comma: the set must end here
            while pos < n and line[pos] in " \t":
                pos += 1
            if pos < n and line[pos] == "}":
                return tuple(labels), pos + 1
            raise PrometheusTextError(line_no, "expected ',' or '}' in label set", line)


def _comment(line: str, out: Exposition, line_no: int) -> None:
    parts = line[1:].lstrip().split(None, 2)
    if len(parts) < 2 or parts[0] not in ("HELP", "TYPE"):
        return  # a plain comment, or OpenMetrics' "# EOF"
    name = parts[1]
    if _NAME_RE.fullmatch(name) is None:
        raise PrometheusTextError(line_no, f"invalid metric name in # {parts[0]}", line)
    rest = parts[2] if len(parts) > 2 else ""
    if parts[0] == "TYPE":
        kind = rest.strip().lower()
        if kind not in (
            "counter",
            "gauge",
            "histogram",
            "summary",
            "untyped",
            "unknown",
            "info",
            "stateset",
            "gaugehistogram",
        ):
            raise PrometheusTextError(line_no, f"unknown metric type {rest.strip()!r}", line)
        out.types[name] = kind
    else:
        out.helps[name] = _HELP_ESCAPE_RE.sub(
            lambda m: "\\" if m.group(0) == "\\\\" else "\n", rest
        )


def _parse_line_slow(raw: str, line_no: int) -> Sample:
    """The careful, character-level parse of one sample line (unusual spacing, exemplars,
    ``}`` inside label values, errors with a reason)."""
    line = raw.strip()
    m = _NAME_RE.match(line)
    if m is None:
        raise PrometheusTextError(line_no, "expected a metric name", raw)
    name = m.group(0)
    pos = m.end()
    labels: Labels = ()
    brace = pos
    while brace < len(line) and line[brace] in " \t":
        brace += 1
    if brace < len(line) and line[brace] == "{":
        labels, pos = _parse_labels(line, brace, line_no)
    rest = line[pos:]
    if rest and rest[0] not in " \t":
        raise PrometheusTextError(line_no, "expected a space before the value", raw)
    fields = rest.split()
    if "#" in fields:  # OpenMetrics exemplar: "value [ts] # {labels} value"
        fields = fields[: fields.index("#")]
    if not fields or len(fields) > 2:
        raise PrometheusTextError(line_no, "expected a value and an optional timestamp", raw)
    return Sample(name, labels, _value(fields[0], line_no, raw), _timestamp(fields, line_no, raw))


def _value(text: str, line_no: int, raw: str) -> float:
    try:
        return parse_value(text)
    except ValueError:
        raise PrometheusTextError(line_no, f"invalid value {text!r}", raw) from None


def _timestamp(fields: list[str], line_no: int, raw: str) -> int | None:
    if len(fields) < 2:
        return None
    try:
        return int(fields[1])
    except ValueError:
        try:
            return int(float(fields[1]) * 1000)  # OpenMetrics: seconds, maybe fractional
        except ValueError:
            raise PrometheusTextError(line_no, f"invalid timestamp {fields[1]!r}", raw) from None


# Fast path: one regex per line, and label sets parsed once per distinct text (a page's label
# sets repeat across histograms and, above all, across scrapes of the same target).
_LINE_RE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?")
_PAIR = r'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*'
_BODY_RE = re.compile(rf"(?:{_PAIR}(?:,{_PAIR})*,?)?[ \t]*")
_PAIRS_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"')
_LABEL_CACHE: dict[str, Labels] = {}
_LABEL_CACHE_MAX = 200_000


def _labels_fast(body: str) -> Labels | None:
    labels = _LABEL_CACHE.get(body)
    if labels is not None:
        return labels
    if _BODY_RE.fullmatch(body) is None:
        return None
    labels = tuple((k, _unescape(v)) for k, v in _PAIRS_RE.findall(body))
    if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
        _LABEL_CACHE.clear()
    _LABEL_CACHE[body] = labels
    return labels


def parse(text: str) -> Exposition:
    """Parse a whole /metrics page. Raises :class:`PrometheusTextError` on a malformed line."""
    out = Exposition()
    append = out.samples.append
    line_match = _LINE_RE.fullmatch
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        first = line[0]
        if first == "#":
            _comment(line, out, line_no)
            continue
        m = line_match(line)
        if m is not None:
            name, body, value_text, ts_text = m.groups()
            labels = _labels_fast(body) if body else ()
            if labels is not None:
                try:
                    value = float(value_text)
                except ValueError:
                    value = _value(value_text, line_no, line)
                append(Sample(name, labels, value, int(ts_text) if ts_text else None))
                continue
        if line.isspace():
            continue
        append(_parse_line_slow(line, line_no))
    return out


_KEY_CACHE: dict[Labels, str] = {}


def labels_key(labels: Labels | Mapping[str, str]) -> str:
    """Canonical JSON text of a label set (keys sorted), as the raw-series store keeps it."""
    if isinstance(labels, Mapping):
        labels = tuple(labels.items())
    key = _KEY_CACHE.get(labels)
    if key is None:
        items = sorted(labels)
        key = "{" + ",".join(f"{_json_str(k)}:{_json_str(v)}" for k, v in items) + "}"
        if len(_KEY_CACHE) >= _LABEL_CACHE_MAX:
            _KEY_CACHE.clear()
        _KEY_CACHE[labels] = key
    return key


def _json_str(text: str) -> str:
    if '"' in text or "\\" in text or any(ord(c) < 0x20 for c in text):
        return json.dumps(text)
    return f'"{text}"'
