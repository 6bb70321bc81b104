"""NVIDIA GenAI-Perf artifacts (FORMATS §B3). No real sample exists; built from the documented keys.

- ``profile_export_genai_perf.json``: ``{"<metric>": {"unit", "avg", "p50", …}, "input_config"}``
  → a run flagged *aggregates only* (unless paired with the folder's raw export).
- ``profile_export_genai_perf.csv``: CRLF, values like ``1,234.56`` and ``N/A``, two tables.
- ``profile_export.json`` (perf_analyzer's raw export): per request ``timestamp`` and
  ``response_timestamps`` in epoch **nanoseconds** and the SSE chunks sent → requests and token
  gaps, recomputed: TTFT to the first chunk with content, E2E to the last response, gaps
  between content chunks; output tokens from ``usage`` when the stream carries it, else the
  content-chunk count (flagged estimated). One run per experiment.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from . import validate
from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .nvidia_common import (
    config_fields,
    csv_summary,
    looks_like_summary,
    metric_dicts,
    summary_only_file,
    summary_tool,
)
from .parsing import Reader, scalars
from .records import base_run, gaps_frame, requests_frame

SOURCE = "genai-perf"
SUMMARY_JSON = "genai-perf"
SUMMARY_CSV = "genai-perf-csv"
RAW = "genai-perf-raw"


def detect_summary_json(doc: Document) -> bool:
    obj = doc.first
    return (
        doc.kind == "json"
        and looks_like_summary(obj)
        and "aiperf_version" not in obj
        and "schema_version" not in obj
    )


def detect_summary_csv(doc: Document) -> bool:
    if doc.kind != "csv":
        return False
    header = [h.strip() for h in doc.tables[0][0][1]]
    return (
        header[:4] == ["Metric", "avg", "min", "max"]
        and "std" not in header
        and "sum" not in header
    )


def detect_raw(doc: Document) -> bool:
    obj = doc.first
    if doc.kind != "json" or not isinstance(obj, dict):
        return False
    exps = obj.get("experiments")
    if not isinstance(exps, list) or not exps or not isinstance(exps[0], dict):
        return False
    reqs = exps[0].get("requests")
    return isinstance(reqs, list) and (
        not reqs or (isinstance(reqs[0], dict) and "response_timestamps" in reqs[0])
    )


def _summary(doc: Document) -> tuple[dict[str, Any], dict[str, Any]]:
    r = Reader(doc.source.path)
    if doc.kind == "csv":
        metrics = csv_summary(doc, r)
        raw: dict[str, Any] = {"metrics_csv": metrics}
        fields: dict[str, Any] = {}
    else:
        obj = r.obj(doc.first, "(document)")
        metrics = metric_dicts(obj)
        raw = {k: v for k, v in metrics.items()} | scalars(obj)
        fields = config_fields(obj.get("input_config"))
    tool = summary_tool(r, doc, metrics, raw, source=SOURCE, tool_name="GenAI-Perf")
    return tool, fields


def parse_summary(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    tool, fields = _summary(doc)
    return summary_only_file(
        doc,
        tool,
        fields,
        source=SOURCE,
        tool_name="GenAI-Perf",
        fmt=SUMMARY_CSV if doc.kind == "csv" else SUMMARY_JSON,
        missing="its raw profile_export.json",
        options=options,
        clock=clock,
    )


def _chunk(text: str) -> tuple[bool, dict[str, Any] | None, str | None]:
    """(has content, usage, error) of one response: SSE ``data:`` lines or a whole JSON body."""
    payloads: list[str] = []
    stripped = text.strip()
    if stripped.startswith("data:") or "\ndata:" in text:
        payloads = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
    elif stripped:
        payloads = [stripped]
    content, usage, error = False, None, None
    for payload in payloads:
        if not payload or payload == "[DONE]":
            continue
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            content = content or bool(payload)
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("error"):
            error = str(obj["error"])[:500]
        if isinstance(obj.get("usage"), dict):
            usage = obj["usage"]
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            piece = choice.get("text") or (
                delta.get("content") if isinstance(delta, dict) else None
            )
            if piece:
                content = True
        if obj.get("text_output"):  # Triton generate endpoint
            content = True
    return content, usage, error


def _experiment(r: Reader, exp: dict[str, Any], where: str, run_id: str) -> tuple[Any, Any, bool]:
    reqs = r.array(r.require(exp, "requests", where), where + "requests")
    rows: dict[str, list[Any]] = {
        k: []
        for k in ("sent", "ttft", "e2e", "out", "inp", "est", "status", "err", "chunks", "gaps")
    }
    any_estimated = False
    for i, item in enumerate(reqs):
        w = f"{where}requests[{i}]."
        it = r.obj(item, w.rstrip("."))
        ts = validate.ns_timestamp(r, r.require(it, "timestamp", w), w + "timestamp")
        stamp_list = r.array(r.require(it, "response_timestamps", w), w + "response_timestamps")
        stamps = [
            validate.ns_timestamp(r, x, f"{w}response_timestamps[{k}]")
            for k, x in enumerate(stamp_list)
        ]
        for k in range(len(stamps)):
            # each response after the request and after the one before it
            before = stamps[k - 1] if k else ts
            if stamps[k] < before:
                what = f"response_timestamps[{k - 1}]" if k else "timestamp"
                raise r.fail(
                    f"{w}response_timestamps[{k}]",
                    f"found {stamps[k]}, earlier than {what} {before}; expected the responses "
                    "in time order, after the request",
                )
        outputs = r.array(it.get("response_outputs") or [], w + "response_outputs")
        content_ts: list[int] = []
        usage: dict[str, Any] | None = None
        error: str | None = None
        for j, stamp in enumerate(stamps):
            out = outputs[j] if j < len(outputs) else None
            text = out.get("response") if isinstance(out, dict) else out
            if text is None:
                content_ts.append(stamp)  # no payload recorded: count the response as content
                continue
            has, u, err = _chunk(str(text))
            usage = u or usage
            error = err or error
            if has:
                content_ts.append(stamp)
        ok = bool(content_ts) and error is None
        rows["sent"].append(ts / 1e9)
        rows["status"].append("ok" if ok else "error")
        rows["err"].append(None if ok else (error or "no content in the response"))
        rows["ttft"].append((content_ts[0] - ts) / 1e6 if ok else None)
        rows["e2e"].append((stamps[-1] - ts) / 1e6 if ok else None)
        gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(content_ts)] if ok else []
        rows["gaps"].append(gaps)
        rows["chunks"].append(len(content_ts) if ok else None)
        completion = usage.get("completion_tokens") if usage else None
        if isinstance(completion, int):
            validate.check(
                r.path,
                f"{w}response_outputs (usage.completion_tokens)",
                completion,
                validate.TOKENS,
            )
        estimated = ok and not isinstance(completion, int)
        any_estimated = any_estimated or estimated
        rows["out"].append(
            (completion if isinstance(completion, int) else len(content_ts)) if ok else None
        )
        rows["est"].append(estimated)
        prompt = usage.get("prompt_tokens") if usage else None
        if isinstance(prompt, int):
            validate.check(
                r.path, f"{w}response_outputs (usage.prompt_tokens)", prompt, validate.TOKENS
            )
        rows["inp"].append(prompt if isinstance(prompt, int) else None)
    n = len(rows["status"])
    if n == 0:
        return None, None, False
    frame = requests_frame(
        run_id,
        n,
        ttft_ms=rows["ttft"],
        e2e_ms=rows["e2e"],
        output_tokens=rows["out"],
        input_tokens=rows["inp"],
        status=rows["status"],
        error=rows["err"],
        sent_at=rows["sent"],
        chunks=rows["chunks"],
        output_tokens_estimated=rows["est"],
    )
    return frame, gaps_frame(run_id, rows["gaps"], scale_to_ms=1.0), any_estimated


def parse_raw(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    summary = docs[1] if len(docs) > 1 else None
    r = Reader(doc.source.path)
    top = r.obj(doc.first, "(document)")
    exps = r.array(r.require(top, "experiments"), "experiments")
    tool_base: dict[str, Any] = {"format": SOURCE}
    fields: dict[str, Any] = {}
    if summary is not None and len(exps) == 1:
        tool_base, fields = _summary(summary)
    runs: list[ParsedRun] = []
    for index, e in enumerate(exps):
        where = f"experiments[{index}]."
        exp = r.obj(e, f"experiments[{index}]")
        mode = r.opt_obj(exp, "experiment", where)
        kind = mode.get("mode")
        value = validate.number(r, mode.get("value"), where + "experiment.value", validate.MEASURE)
        load: dict[str, Any] = {}
        if kind == "concurrency" and value:
            load = {"arrival": "concurrency", "concurrency": int(value)}
        elif kind == "request_rate" and value:
            load = {"arrival": "poisson", "target_rate": value}
        label = f"{kind} {value:g}" if kind and value is not None else f"experiment {index}"
        run = base_run(
            doc.source,
            SOURCE,
            index,
            options,
            label=label,
            run_count=len(exps),
            clock=clock,
            **{
                "endpoint": top.get("endpoint") if isinstance(top.get("endpoint"), str) else None,
                **fields,
                **load,
            },
        )
        requests, gaps, estimated = _experiment(r, exp, where, run["run_id"])
        if requests is None:
            raise r.fail(
                where + "requests", "no requests in the experiment; expected per-request records"
            )
        sent, done = requests["sent_at"], requests["done_at"]
        run.update(
            started_at=float(sent.min()), ended_at=float(done.max()) if done.notna().any() else None
        )
        if run["ended_at"] is not None and run["ended_at"] > run["started_at"]:
            run["duration_s"] = run["ended_at"] - run["started_at"]
        notes = ["recomputed from perf_analyzer's raw timestamps (ns)"]
        if estimated:
            notes.append(
                "output tokens counted as content chunks where the stream had no usage "
                "(flagged estimated)"
            )
            run["output_tokens_estimated"] = True
        tool = dict(tool_base, aggregates_only=False, per_request="full")
        run["tool_summary"] = tool
        run["notes"] = "; ".join(notes)
        runs.append(ParsedRun(run=run, requests=requests, token_gaps=gaps))
    sources = [doc.source] + ([summary.source] if summary is not None and len(exps) == 1 else [])
    return ParsedFile(format=RAW, sources=sources, runs=runs)
