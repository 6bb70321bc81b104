"""NVIDIA AIPerf artifacts (FORMATS §B4).

- ``profile_export_aiperf.json`` / ``.csv`` (CRLF, two tables): the tool's aggregates → a run
  flagged *aggregates only*, unless the folder's per-request records come with it.
- ``profile_export.jsonl`` / ``profile_export_records.csv``: one record per request (epoch ns
  timestamps) → requests; ``inter_chunk_latency`` → token gaps. Warm-up records are skipped.
- ``gpu_telemetry_export.jsonl`` (DCGM via AIPerf; memory in GB, utilisation in %) → gpu_samples.
- ``server_metrics_export.jsonl`` (scraped Prometheus) → engine_samples (normalised names) and
  engine_raw_samples (every gauge/counter series as it came).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from collectors import engine_metrics
from collectors.prometheus_text import Exposition, Sample

from . import validate
from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .nvidia_common import (
    config_fields,
    csv_summary,
    iso_epoch,
    looks_like_summary,
    metric_dicts,
    split_label,
    summary_only_file,
    summary_tool,
    to_ms,
)
from .parsing import Reader, scalars
from .records import base_run, gaps_frame, requests_frame

SOURCE = "aiperf"
SUMMARY_JSON = "aiperf"
SUMMARY_CSV = "aiperf-csv"
RECORDS_JSONL = "aiperf-records"
RECORDS_CSV = "aiperf-records-csv"
GPU = "aiperf-gpu-telemetry"
SERVER = "aiperf-server-metrics"


# --- detection ------------------------------------------------------------------------------


def detect_summary_json(doc: Document) -> bool:
    obj = doc.first
    return (
        doc.kind == "json"
        and looks_like_summary(obj)
        and ("aiperf_version" in obj or "schema_version" in obj)
    )


def detect_summary_csv(doc: Document) -> bool:
    if doc.kind != "csv":
        return False
    header = [h.strip() for h in doc.tables[0][0][1]]
    if header[:2] != ["Metric", "avg"]:
        return False
    # AIPerf: Metric,avg,min,max,p1,… or Metric,avg,sum,min,…, with std; GenAI-Perf: …,max,p99,…
    return "std" in header or "sum" in header or (len(header) > 4 and header[4] == "p1")


def detect_records_jsonl(doc: Document) -> bool:
    obj = doc.first
    return (
        doc.kind in ("json", "jsonl")
        and isinstance(obj, dict)
        and isinstance(obj.get("metadata"), dict)
        and "request_start_ns" in obj["metadata"]
        and "metrics" in obj
    )


def detect_records_csv(doc: Document) -> bool:
    if doc.kind != "csv":
        return False
    header = {h.strip() for h in doc.tables[0][0][1]}
    return {"request_start_ns", "request_end_ns"} <= header


def detect_gpu(doc: Document) -> bool:
    obj = doc.first
    return (
        doc.kind in ("json", "jsonl")
        and isinstance(obj, dict)
        and {"timestamp_ns", "gpu_index", "telemetry_data"} <= set(obj)
    )


def detect_server(doc: Document) -> bool:
    obj = doc.first
    return (
        doc.kind in ("json", "jsonl")
        and isinstance(obj, dict)
        and {"endpoint_url", "timestamp_ns", "metrics"} <= set(obj)
    )


# --- summaries -------------------------------------------------------------------------------


def _summary_tool(doc: Document) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tool_summary, run fields) of a summary JSON or CSV."""
    r = Reader(doc.source.path)
    if doc.kind == "csv":
        metrics = csv_summary(doc, r)
        raw: dict[str, Any] = {"metrics_csv": metrics}
        fields: dict[str, Any] = {}
    else:
        obj = r.obj(doc.first, "(document)")
        metrics = metric_dicts(obj)
        raw = scalars(obj)
        fields = config_fields(obj.get("input_config"))
        started, ended = iso_epoch(obj.get("start_time")), iso_epoch(obj.get("end_time"))
        if started is not None and ended is not None:
            fields.update(started_at=started, ended_at=ended)
        if isinstance(obj.get("aiperf_version"), str):
            raw["aiperf_version"] = obj["aiperf_version"]
    dur = metrics.get("benchmark_duration")
    if dur is not None and fields.get("started_at") is None:
        seconds = validate.aggregate(r, dur.get("avg"), "benchmark_duration.avg", validate.DURATION)
        if seconds is not None:
            fields["duration_s"] = seconds
    tool = summary_tool(r, doc, metrics, raw, source=SOURCE, tool_name="AIPerf")
    return tool, fields


def parse_summary(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    tool, fields = _summary_tool(doc)
    return summary_only_file(
        doc,
        tool,
        fields,
        source=SOURCE,
        tool_name="AIPerf",
        fmt=SUMMARY_CSV if doc.kind == "csv" else SUMMARY_JSON,
        missing="its per-request records (profile_export.jsonl)",
        options=options,
        clock=clock,
    )


# --- per-request records ----------------------------------------------------------------------


def _metric(
    r: Reader,
    metrics: dict[str, Any],
    name: str,
    where: str,
    bound: validate.Bound,
    *,
    time: bool,
    many: bool = False,
) -> Any:
    """One record metric's value within ``bound`` (in ms when ``time``); ``many``: a list (the
    chunk gaps), checked item by item."""
    m = metrics.get(name)
    if m is None:
        return None
    m = r.obj(m, where + name)
    value = m.get("value")
    key = where + name + ".value"
    factor = to_ms(r, m.get("unit", "ms"), where + name) if time else 1.0
    if many:
        values = validate.check_array(r.path, key, r.float_array(value, key), bound)
        return (values * factor).tolist()
    if isinstance(value, list | dict):
        raise r.fail(key, f"expected a number but found {type(value).__name__}")
    num = validate.number(r, value, key, bound)
    return None if num is None else num * factor


def _records_jsonl(doc: Document, run_id: str) -> tuple[pd.DataFrame | None, Any, int]:
    r = Reader(doc.source.path)
    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "sent",
            "ttft",
            "e2e",
            "out",
            "inp",
            "est",
            "status",
            "err",
            "http",
            "conv",
            "turn",
            "gaps",
        )
    }
    warmup = 0
    for line, obj in doc.objects:
        where = f"line {line}: "
        rec = r.obj(obj, where + "(record)")
        meta = r.get_obj(rec, "metadata", where)
        metrics = r.opt_obj(rec, "metrics", where)
        if meta.get("benchmark_phase") == "warmup":
            warmup += 1
            continue
        start = validate.ns_timestamp(
            r,
            r.require(meta, "request_start_ns", where + "metadata."),
            where + "metadata.request_start_ns",
        )
        end_raw = meta.get("request_end_ns")
        end_key = where + "metadata.request_end_ns"
        end = None if end_raw is None else validate.ns_timestamp(r, end_raw, end_key)
        error = rec.get("error")
        cancelled = bool(meta.get("was_cancelled"))
        status = "error" if error else ("cancelled" if cancelled else "ok")
        at = where + "metrics."
        ttft = _metric(r, metrics, "time_to_first_token", at, validate.LATENCY, time=True)
        gaps = (
            _metric(r, metrics, "inter_chunk_latency", at, validate.GAP, time=True, many=True) or []
        )
        usage_out = _metric(r, metrics, "usage_completion_tokens", at, validate.TOKENS, time=False)
        osl = _metric(r, metrics, "output_sequence_length", at, validate.TOKENS, time=False)
        usage_in = _metric(r, metrics, "usage_prompt_tokens", at, validate.TOKENS, time=False)
        isl = _metric(r, metrics, "input_sequence_length", at, validate.TOKENS, time=False)
        rows["sent"].append(start / 1e9)
        rows["ttft"].append(ttft)
        rows["e2e"].append(_e2e(r, start, end, end_key) if status == "ok" else None)
        rows["out"].append(
            (usage_out if usage_out is not None else osl) if status == "ok" else None
        )
        rows["est"].append(usage_out is None and status == "ok")
        rows["inp"].append(usage_in if usage_in is not None else isl)
        rows["status"].append(status)
        err_obj = error if isinstance(error, dict) else {}
        rows["err"].append(None if not error else str(err_obj.get("message") or error)[:500])
        code = err_obj.get("code")
        rows["http"].append(
            validate.integer(r, code, where + "error.code", validate.CODE)
            if isinstance(code, int)
            else None
        )
        rows["conv"].append(r.text(meta.get("conversation_id"), where + "metadata.conversation_id"))
        rows["turn"].append(
            validate.integer(
                r, meta.get("turn_index"), where + "metadata.turn_index", validate.INDEX
            )
        )
        rows["gaps"].append(gaps if status == "ok" else [])
    n = len(rows["status"])
    if n == 0:
        return None, None, warmup
    extra = {
        "http_status": rows["http"],
        "chunks": [len(g) + 1 if g else None for g in rows["gaps"]],
    }
    frame = _records_frame(run_id, n, rows, **extra)
    return frame, gaps_frame(run_id, rows["gaps"], scale_to_ms=1.0), warmup


def _e2e(r: Reader, start: int, end: int | None, key: str) -> float | None:
    """E2E in ms from epoch-ns start and end; an end before the start is a bad file."""
    if end is None:
        return None
    return validate.check(
        r.path,
        key,
        (end - start) / 1e6,
        validate.LATENCY,
        how="E2E (request_end_ns − request_start_ns, ms)",
    )


def _ns_cell(r: Reader, value: str | None, key: str) -> int | None:
    """An epoch-ns cell as an exact int when it is one (floats lose ~256 ns at 1e18)."""
    if value is None:
        return None
    if value.isascii() and value.isdigit():
        return validate.ns_timestamp(r, int(value), key)
    return validate.ns_timestamp(r, value, key)


def _records_csv(doc: Document, run_id: str) -> tuple[pd.DataFrame | None, Any, int]:
    r = Reader(doc.source.path)
    table = doc.tables[0]
    _header_line, header = table[0]
    cols: dict[str, tuple[int, str | None]] = {}
    for i, label in enumerate(header):
        name, unit = split_label(label)
        cols[name] = (i, unit)

    def cell(row: list[str], name: str) -> str | None:
        if name not in cols or cols[name][0] >= len(row):
            return None
        value = row[cols[name][0]].strip()
        return value or None

    def timed(row: list[str], name: str, line: int) -> float | None:
        value = validate.number(
            r, cell(row, name), f"line {line} column {name!r}", validate.LATENCY
        )
        if value is None:
            return None
        return value * to_ms(r, cols[name][1] or "ms", f"line {line} column {name!r}")

    rows: dict[str, list[Any]] = {
        k: [] for k in ("sent", "ttft", "e2e", "out", "inp", "est", "status", "err", "conv", "turn")
    }
    warmup = 0
    for line, row in table[1:]:
        if len(row) != len(header):
            raise r.fail(
                None, f"line {line}: found {len(row)} cells; expected {len(header)} like the header"
            )
        if cell(row, "benchmark_phase") == "warmup":
            warmup += 1
            continue
        start = _ns_cell(r, cell(row, "request_start_ns"), f"line {line} column 'request_start_ns'")
        if start is None:
            raise r.fail(None, f"line {line} column 'request_start_ns': required value is empty")
        end = _ns_cell(r, cell(row, "request_end_ns"), f"line {line} column 'request_end_ns'")
        error = cell(row, "error_code") or cell(row, "error_message")
        cancelled = (cell(row, "was_cancelled") or "").lower() == "true"
        status = "error" if error else ("cancelled" if cancelled else "ok")

        def tokens(name: str, row: list[str] = row, line: int = line) -> float | None:
            return validate.number(
                r, cell(row, name), f"line {line} column {name!r}", validate.TOKENS
            )

        usage_out = tokens("usage_completion_tokens")
        osl = tokens("output_sequence_length")
        usage_in = tokens("usage_prompt_tokens")
        isl = tokens("input_sequence_length")
        rows["sent"].append(start / 1e9)
        rows["ttft"].append(timed(row, "time_to_first_token", line))
        end_key = f"line {line} column 'request_end_ns'"
        rows["e2e"].append(_e2e(r, start, end, end_key) if status == "ok" else None)
        rows["out"].append(
            (usage_out if usage_out is not None else osl) if status == "ok" else None
        )
        rows["est"].append(usage_out is None and status == "ok")
        rows["inp"].append(usage_in if usage_in is not None else isl)
        rows["status"].append(status)
        rows["err"].append(None if not error else (cell(row, "error_message") or error)[:500])
        rows["conv"].append(cell(row, "conversation_id"))
        turn = cell(row, "turn_index")
        rows["turn"].append(
            validate.integer(r, turn, f"line {line} column 'turn_index'", validate.INDEX)
        )
    n = len(rows["status"])
    if n == 0:
        return None, None, warmup
    return _records_frame(run_id, n, rows), None, warmup


def _records_frame(run_id: str, n: int, rows: dict[str, list[Any]], **extra: Any) -> pd.DataFrame:
    """The requests of a records file (JSONL or CSV) from its parsed columns."""
    return requests_frame(
        run_id,
        n,
        ttft_ms=rows["ttft"],
        e2e_ms=rows["e2e"],
        output_tokens=rows["out"],
        input_tokens=rows["inp"],
        status=rows["status"],
        error=rows["err"],
        sent_at=rows["sent"],
        conversation_id=rows["conv"],
        turn=rows["turn"],
        output_tokens_estimated=rows["est"],
        **extra,
    )


def parse_records(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    records = docs[0]
    summary = docs[1] if len(docs) > 1 else None
    fmt = RECORDS_CSV if records.kind == "csv" else RECORDS_JSONL
    tool: dict[str, Any] = {"format": SOURCE, "aggregates_only": False, "per_request": "full"}
    fields: dict[str, Any] = {}
    if summary is not None:
        tool, fields = _summary_tool(summary)
        tool.update(aggregates_only=False, per_request="full")
    run = base_run(records.source, SOURCE, 0, options, clock=clock, **fields)
    run_id = run["run_id"]
    if records.kind == "csv":
        requests, gaps, warmup = _records_csv(records, run_id)
    else:
        requests, gaps, warmup = _records_jsonl(records, run_id)
    notes: list[str] = []
    if requests is None:
        raise Reader(records.source.path).fail(
            None, "no profiling records (only warm-up or none); expected per-request records"
        )
    sent = requests["sent_at"].to_numpy(dtype="float64")
    done = requests["done_at"].to_numpy(dtype="float64")
    if "started_at" not in run and np.isfinite(sent).any():
        run["started_at"] = float(np.nanmin(sent))
        run["ended_at"] = float(np.nanmax(done)) if np.isfinite(done).any() else None
        if run["ended_at"] is not None and run["ended_at"] > run["started_at"]:
            run["duration_s"] = run["ended_at"] - run["started_at"]
    if warmup:
        notes.append(f"{warmup} warm-up records skipped")
    if bool(requests["output_tokens_estimated"].any()):
        notes.append(
            "output tokens from AIPerf's tokenizer where the server's usage is missing "
            "(flagged estimated)"
        )
    if gaps is None and records.kind == "jsonl":
        notes.append("no inter_chunk_latency in the records (non-streaming run?): no token gaps")
    run["tool_summary"] = tool
    run["notes"] = "; ".join(notes) if notes else None
    sources = [records.source] + ([summary.source] if summary is not None else [])
    return ParsedFile(
        format=fmt, sources=sources, runs=[ParsedRun(run=run, requests=requests, token_gaps=gaps)]
    )


# --- telemetry -------------------------------------------------------------------------------

GB = 1e9
GPU_INDEX = validate.Bound("a GPU index", high=validate.INT32_MAX, integer=True, nan="bad")


def parse_gpu(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    r = Reader(doc.source.path)
    rows: list[dict[str, Any]] = []
    for line, obj in doc.objects:
        where = f"line {line}: "
        o = r.obj(obj, where + "(sample)")
        data = r.get_obj(o, "telemetry_data", where)
        ts = (
            validate.ns_timestamp(r, r.require(o, "timestamp_ns", where), where + "timestamp_ns")
            / 1e9
        )
        index = validate.integer(
            r, r.require(o, "gpu_index", where), where + "gpu_index", GPU_INDEX
        )

        def num(
            key: str,
            factor: float = 1.0,
            bound: validate.Bound = validate.MEASURE,
            data: dict[str, Any] = data,
            where: str = where,
        ) -> float | None:
            # DCGM's "blank" sentinels (~9.22e18) and NaN / inf: not measured
            value = data.get(key)
            if isinstance(value, int | float) and abs(value) >= 9.2e18:
                return None
            num = validate.aggregate(r, value, where + "telemetry_data." + key, bound)
            return None if num is None else num * factor

        rows.append(
            {
                "host": str(o.get("hostname") or o.get("telemetry_source_url") or "unknown"),
                "gpu_index": index,
                "ts": ts,
                "gpu_uuid": r.text(o.get("gpu_uuid"), where + "gpu_uuid"),
                "gpu_name": r.text(o.get("gpu_model_name"), where + "gpu_model_name"),
                "mem_used_bytes": num("gpu_memory_used", GB),
                "mem_total_bytes": num("gpu_memory_total", GB),
                "util_gpu": num("gpu_utilization", 0.01),
                "util_mem": num("memory_copy_utilization", 0.01),
                "power_w": num("gpu_power_usage"),
                "temp_c": num("gpu_temperature", bound=validate.FINITE),
                "sm_clock_mhz": num("sm_clock_frequency"),
                "source": "dcgm",
            }
        )
    frame = pd.DataFrame(rows).drop_duplicates(subset=["host", "gpu_index", "ts"])
    return ParsedFile(format=GPU, sources=[doc.source], samples={"gpu_samples": frame})


def parse_server(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    """AIPerf's server-metrics export: one /metrics snapshot per line. Each snapshot becomes a
    Prometheus exposition (gauges and counters as they were, histograms as ``_bucket`` /
    ``_sum`` / ``_count`` series) normalised by ``collectors.engine_metrics`` — the same mapping
    as a live scrape — and kept raw."""
    doc = docs[0]
    r = Reader(doc.source.path)
    raw: list[dict[str, Any]] = []
    engine_rows: list[dict[str, Any]] = []
    for line, obj in doc.objects:
        where = f"line {line}: "
        o = r.obj(obj, where + "(snapshot)")
        target = str(r.require(o, "endpoint_url", where))
        ts = (
            validate.ns_timestamp(r, r.require(o, "timestamp_ns", where), where + "timestamp_ns")
            / 1e9
        )
        metrics = r.get_obj(o, "metrics", where)
        expo = Exposition()
        for name, series in metrics.items():
            for i, s in enumerate(r.array(series, f"{where}metrics.{name}")):
                at = f"{where}metrics.{name}[{i}]"
                expo.samples.extend(_snapshot_samples(r, name, r.obj(s, at), at))
        for sample in expo.samples:
            raw.append(
                {
                    "target": target,
                    "ts": ts,
                    "name": sample.name,
                    "labels": json.dumps(sample.label_dict, sort_keys=True),
                    "value": sample.value,
                }
            )
        engine = engine_metrics.detect_engine(expo.names())
        for metric, value in engine_metrics.normalise(expo, engine).items():
            engine_rows.append(
                {"target": target, "ts": ts, "metric": metric, "engine": engine, "value": value}
            )
    samples: dict[str, pd.DataFrame] = {}
    if raw:
        samples["engine_raw_samples"] = pd.DataFrame(raw).drop_duplicates(
            subset=["target", "ts", "name", "labels"]
        )
    if engine_rows:
        samples["engine_samples"] = pd.DataFrame(engine_rows).drop_duplicates(
            subset=["target", "ts", "metric"]
        )
    return ParsedFile(format=SERVER, sources=[doc.source], samples=samples)


def _snapshot_samples(r: Reader, name: str, s: dict[str, Any], at: str) -> list[Sample]:
    """One series of a snapshot as exposition samples: ``{"labels", "value"}``, or a histogram
    ``{"labels", "histogram": {le: cumulative count}, "sum", "count"}``."""
    raw_labels = s.get("labels")
    labels_obj = {} if raw_labels is None else r.obj(raw_labels, f"{at}.labels")
    labels = tuple(sorted((str(k), str(v)) for k, v in labels_obj.items()))
    if "value" in s:
        value = r.number(s["value"], f"{at}.value")
        return [] if value is None else [Sample(name, labels, value)]
    hist = s.get("histogram")
    if not isinstance(hist, dict):
        return []  # a summary or a shape of a later AIPerf: kept out rather than guessed
    out = []
    for le, count in hist.items():
        c = r.number(count, f"{at}.histogram[{le!r}]")
        if c is not None:
            out.append(Sample(f"{name}_bucket", (*labels, ("le", str(le))), c))
    for part in ("sum", "count"):
        v = r.number(s.get(part), f"{at}.{part}") if part in s else None
        if v is not None:
            out.append(Sample(f"{name}_{part}", labels, v))
    return out
