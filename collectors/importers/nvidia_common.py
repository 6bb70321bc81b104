"""What AIPerf and GenAI-Perf share: the ``{"<metric>": {"unit", "avg", "p50", …}}`` summary
shape, their two-table CSV, unit conversion and run metadata from ``input_config``."""

from __future__ import annotations

import calendar
import math
import re
import time
from typing import Any, TypeGuard

from . import validate
from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .parsing import Reader
from .records import base_run, summary_entry

TIME_UNITS_TO_MS = {
    "ms": 1.0,
    "sec": 1000.0,
    "s": 1000.0,
    "seconds": 1000.0,
    "us": 1e-3,
    "µs": 1e-3,
    "ns": 1e-6,
}
# our normalised name → (tool metric, kind)
LATENCY_METRICS = {
    "ttft_ms": "time_to_first_token",
    "itl_ms": "inter_token_latency",
    "e2e_ms": "request_latency",
}
RATE_METRICS = {
    "request_throughput": "request_throughput",
    "output_throughput": "output_token_throughput",
    "total_token_throughput": "total_token_throughput",
    "request_goodput": "request_goodput",
    "completed": "request_count",
}
ITL_DEFINITION = (
    "{tool}'s inter_token_latency is per request (request_latency − TTFT) / (output tokens − 1): "
    "our TPOT, not the pooled gap between chunks"
)
_LABEL = re.compile(r"^(?P<name>.+?)\s*\((?P<unit>[^()]*)\)\s*$")


def metric_dicts(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in obj.items() if isinstance(v, dict) and "unit" in v and "avg" in v}


def looks_like_summary(obj: Any) -> bool:
    return isinstance(obj, dict) and len(metric_dicts(obj)) >= 2


def to_ms(r: Reader, unit: Any, key: str) -> float:
    factor = TIME_UNITS_TO_MS.get(str(unit).strip().lower())
    if factor is None:
        raise r.fail(key + ".unit", f"expected a time unit (ms, sec, us, ns) but found {unit!r}")
    return factor


def normalise_metrics(r: Reader, metrics: dict[str, dict[str, Any]], tool: str) -> dict[str, Any]:
    """The tool's aggregates under our names and units (latencies in ms)."""
    out: dict[str, Any] = {}
    for ours, theirs in LATENCY_METRICS.items():
        m = metrics.get(theirs)
        if m is None:
            continue
        factor = to_ms(r, m.get("unit"), theirs)
        stats = {}
        for stat in ("avg", "p50", "p90", "p95", "p99", "min", "max", "std"):
            num = validate.aggregate(r, m.get(stat), f"{theirs}.{stat}", validate.LATENCY)
            if num is not None:
                stats["mean" if stat == "avg" else stat] = num * factor
        out[ours] = summary_entry(**stats)
    for ours, theirs in RATE_METRICS.items():
        m = metrics.get(theirs)
        if m is not None:
            bound = validate.COUNT if ours == "completed" else validate.MEASURE
            num = validate.aggregate(r, m.get("avg"), f"{theirs}.avg", bound)
            if num is not None:
                out[ours] = num
    return out


def summary_tool(
    r: Reader,
    doc: Document,
    metrics: dict[str, dict[str, Any]],
    raw: dict[str, Any],
    *,
    source: str,
    tool_name: str,
) -> dict[str, Any]:
    """The ``tool_summary`` of an AIPerf / GenAI-Perf summary file: its metrics in our units,
    the tool's ITL definition, the raw values and the file it came from."""
    return {
        "format": source,
        "metrics": normalise_metrics(r, metrics, tool_name),
        "definitions": {"itl_ms": ITL_DEFINITION.format(tool=tool_name)},
        "raw": raw,
        "summary_file": doc.source.path,
    }


def split_label(label: str) -> tuple[str, str | None]:
    """``"Time To First Token (ms)"`` → (``time_to_first_token``, ``ms``)."""
    m = _LABEL.match(label.strip())
    name, unit = (m.group("name"), m.group("unit")) if m else (label.strip(), None)
    return re.sub(r"\s+", "_", name.strip().lower()), unit


def csv_summary(doc: Document, r: Reader) -> dict[str, dict[str, Any]]:
    """The metrics of a two-table summary CSV (``Metric,avg,…`` then ``Metric,Value``)."""
    metrics: dict[str, dict[str, Any]] = {}
    first_line, header = doc.tables[0][0]
    if not header or header[0].strip() != "Metric" or "avg" not in [h.strip() for h in header]:
        raise r.fail(
            None,
            f"line {first_line}: found table header {','.join(header)[:60]!r}; "
            "expected the summary table 'Metric,avg,min,max,…'",
        )
    for table in doc.tables:
        _line0, head = table[0]
        cols = [h.strip() for h in head]
        if not cols or cols[0] != "Metric":
            continue  # e.g. GPU telemetry tables
        for line, row in table[1:]:
            if not row or not row[0].strip():
                continue
            name, unit = split_label(row[0])
            entry: dict[str, Any] = {"unit": unit or ""}
            for col, cell in zip(cols[1:], row[1:], strict=False):
                key = "avg" if col.lower() in ("avg", "value") else col.lower()
                entry[key] = r.number(cell, f"line {line} column {col!r}")
            metrics[name] = entry
    return metrics


def iso_epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    text = value.strip().rstrip("Z")
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S"):
        try:
            parsed = time.strptime(text[:26], fmt)
        except ValueError:
            continue
        frac = float("0." + text.split(".")[1][:6]) if "." in text else 0.0
        return calendar.timegm(parsed) + frac
    return None


def dig(obj: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, list) or len(obj) <= key:
                return None
            obj = obj[key]
        else:
            if not isinstance(obj, dict):
                return None
            obj = obj.get(key)
    return obj


def config_fields(cfg: Any) -> dict[str, Any]:
    """Model, endpoint and load from an AIPerf/GenAI-Perf ``input_config`` (several layouts)."""
    if not isinstance(cfg, dict):
        return {}
    model = (
        dig(cfg, "models", "items", 0, "name")
        or dig(cfg, "model_names", 0)
        or dig(cfg, "model", 0)
        or (cfg.get("model") if isinstance(cfg.get("model"), str) else None)
    )
    endpoint = (
        dig(cfg, "endpoint", "urls", 0)
        or dig(cfg, "endpoint", "url")
        or cfg.get("url")
        or (cfg.get("endpoint") if isinstance(cfg.get("endpoint"), str) else None)
    )
    conc = (
        dig(cfg, "phases", 0, "concurrency")
        or dig(cfg, "loadgen", "concurrency")
        or dig(cfg, "perf_analyzer", "stimulus", "concurrency")
        or cfg.get("concurrency")
    )
    rate = (
        dig(cfg, "phases", 0, "request_rate")
        or dig(cfg, "loadgen", "request_rate")
        or dig(cfg, "perf_analyzer", "stimulus", "request_rate")
        or cfg.get("request_rate")
    )
    out: dict[str, Any] = {}
    if isinstance(model, str):
        out["model"] = model
    if isinstance(endpoint, str) and "@" not in endpoint:
        out["endpoint"] = endpoint
    # a configuration, not a measurement: a value out of range is left out (never stored)
    if _positive(conc) and conc <= validate.INT32_MAX:
        out.update(concurrency=int(conc), arrival="concurrency")
    elif _positive(rate):
        out.update(target_rate=float(rate), arrival="poisson")
    return out


def _positive(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def summary_only_file(
    doc: Document,
    tool: dict[str, Any],
    fields: dict[str, Any],
    *,
    source: str,
    tool_name: str,
    fmt: str,
    missing: str,
    options: ImportOptions,
    clock: Clock,
) -> ParsedFile:
    """A run from a summary file alone: the tool's aggregates, flagged aggregates-only.

    ``missing`` names the per-request file that would have allowed recomputing them.
    """
    tool.update(aggregates_only=True, per_request="none")
    run = base_run(doc.source, source, 0, options, clock=clock, **fields)
    run["tool_summary"] = tool
    run["notes"] = (
        f"aggregates only: {tool_name}'s summary without {missing}; "
        "the tool's own aggregates are kept in tool_summary"
    )
    return ParsedFile(
        format=fmt, sources=[doc.source], runs=[ParsedRun(run=run, warnings=["aggregates only"])]
    )
