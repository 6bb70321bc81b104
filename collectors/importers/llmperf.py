"""ray-project llmperf: ``*_summary.json`` and ``*_individual_responses.json`` (FORMATS §B6).

Given together (same stem, or the leaderboard's ``summary/X.json`` + ``individual/X.json``)
they become one run: requests from the responses, the summary in ``tool_summary``. All values
are in seconds. ``results_error_code_frequency`` is a Python-dict string and some numbers are
strings. llmperf's ``inter_token_latency_s`` is per request (E2E − … ) / tokens, i.e. total
time over tokens including TTFT — not our pooled ITL; the run has no token gaps.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import PurePath
from typing import Any

from . import validate
from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .parsing import Reader, scalars
from .records import base_run, precision_fields, requests_frame, summary_entry

SUMMARY = "llmperf-summary"
RESPONSES = "llmperf-responses"
SOURCE = "llmperf"
RESPONSE_KEYS = {"ttft_s", "end_to_end_latency_s", "error_code"}
ITL_NOTE = (
    "llmperf's inter_token_latency_s is total time / output tokens per request (includes TTFT)"
)


def detect_summary(doc: Document) -> bool:
    obj = doc.first
    return (
        doc.kind == "json"
        and isinstance(obj, dict)
        and any(k.startswith("results_ttft_s") for k in obj)
        and ("version" in obj or "num_concurrent_requests" in obj)
    )


def detect_responses(doc: Document) -> bool:
    obj = doc.first
    if doc.kind != "json" or not isinstance(obj, list) or not obj:
        return False
    head = obj[0]
    return isinstance(head, dict) and set(head) >= RESPONSE_KEYS


def pair_key(path: str) -> str:
    stem = PurePath(path).stem
    return re.sub(r"_(summary|individual_responses)$", "", stem)


def _summary_metrics(r: Reader, s: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m, ours in (
        ("ttft_s", "ttft_ms"),
        ("end_to_end_latency_s", "e2e_ms"),
        ("inter_token_latency_s", "itl_ms"),
    ):
        stats: dict[str, float] = {}
        for stat, key in (
            ("mean", "mean"),
            ("p50", "quantiles_p50"),
            ("p90", "quantiles_p90"),
            ("p95", "quantiles_p95"),
            ("p99", "quantiles_p99"),
            ("min", "min"),
            ("max", "max"),
            ("std", "stddev"),
        ):
            num = validate.aggregate(
                r, s.get(f"results_{m}_{key}"), f"results_{m}_{key}", validate.LATENCY
            )
            if num is not None:
                stats[stat] = num * 1000.0
        if stats:
            out[ours] = summary_entry(**stats)
    for ours, key, bound in (
        ("output_throughput", "results_mean_output_throughput_token_per_s", validate.MEASURE),
        ("completed", "results_num_completed_requests", validate.COUNT),
        ("failed", "results_number_errors", validate.COUNT),
        ("error_rate", "results_error_rate", validate.MEASURE),
    ):
        num = validate.aggregate(r, s.get(key), key, bound)
        if num is not None:
            out[ours] = num
    per_min = validate.aggregate(
        r,
        s.get("results_num_completed_requests_per_min"),
        "results_num_completed_requests_per_min",
        validate.MEASURE,
    )
    if per_min is not None:
        out["request_throughput"] = per_min / 60.0
    return out


def _error_codes(r: Reader, value: Any) -> dict[str, int]:
    if value in (None, ""):
        return {}
    if isinstance(value, dict):
        parsed: Any = value
    else:
        try:
            parsed = ast.literal_eval(str(value))
        except (ValueError, SyntaxError):
            raise r.fail(
                "results_error_code_frequency",
                f'expected a Python dict string like "{{429: 2}}" but found {str(value)[:40]!r}',
            ) from None
    if not isinstance(parsed, dict):
        raise r.fail("results_error_code_frequency", f"expected a dict but found {parsed!r:.40}")
    out: dict[str, int] = {}
    for code, count in parsed.items():
        n = validate.integer(r, count, f"results_error_code_frequency[{code!r}]", validate.COUNT)
        if n is None:
            continue
        whole = isinstance(code, float) and math.isfinite(code) and code.is_integer()
        out[str(int(code)) if whole else str(code)] = n
    return out


def _run_fields(r: Reader, s: dict[str, Any]) -> dict[str, Any]:
    ended = validate.number(r, s.get("timestamp"), "timestamp", validate.TIMESTAMP)
    completed = validate.aggregate(
        r, s.get("results_num_completed_requests"), "results_num_completed_requests", validate.COUNT
    )
    per_min = validate.aggregate(
        r,
        s.get("results_num_completed_requests_per_min"),
        "results_num_completed_requests_per_min",
        validate.MEASURE,
    )
    duration = completed / (per_min / 60.0) if completed and per_min else None
    if duration is not None and not math.isfinite(duration):
        duration = None  # a rate so small that the quotient overflows: not a duration
    conc = validate.integer(
        r, s.get("num_concurrent_requests"), "num_concurrent_requests", validate.COUNT
    )
    return {
        "model": r.text(s.get("model"), "model"),
        "framework": r.text(s.get("framework"), "framework"),
        **precision_fields(s),
        "concurrency": conc,
        "arrival": "concurrency" if conc else None,
        "ended_at": ended,
        "started_at": ended - duration if ended is not None and duration is not None else None,
        "duration_s": duration,
    }


def parse(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    responses = next((d for d in docs if detect_responses(d)), None)
    summary = next((d for d in docs if d is not responses and detect_summary(d)), None)
    primary = responses or summary
    assert primary is not None
    fields: dict[str, Any] = {}
    tool: dict[str, Any] = {"format": SOURCE, "aggregates_only": responses is None}
    notes: list[str] = []
    if summary is not None:
        rs = Reader(summary.source.path)
        s = rs.obj(summary.first, "(summary)")
        fields = _run_fields(rs, s)
        tool["metrics"] = _summary_metrics(rs, s)
        tool["error_codes"] = _error_codes(rs, s.get("results_error_code_frequency"))
        tool["raw"] = scalars(s)
        tool["summary_file"] = summary.source.path
    else:
        notes.append("no *_summary.json given: the tool's own aggregates are missing")
    tool["per_request"] = "full" if responses is not None else "none"
    tool["definitions"] = {"itl_ms": ITL_NOTE}
    label = pair_key(primary.source.path)
    run = base_run(primary.source, SOURCE, 0, options, label=None, clock=clock, **fields)
    if options.name is None:
        run["name"] = label
    if responses is None:
        notes.insert(0, "aggregates only: only the summary was given (no individual responses)")
        run["tool_summary"] = tool
        run["notes"] = "; ".join(notes)
        return ParsedFile(
            format=SUMMARY,
            sources=[primary.source],
            runs=[ParsedRun(run=run, warnings=["aggregates only"])],
        )
    r = Reader(responses.source.path)
    items = responses.first
    n = len(items)
    ttft: list[float | None] = []
    e2e: list[float | None] = []
    out_tok: list[float | None] = []
    in_tok: list[float | None] = []
    status: list[str] = []
    errors: list[str | None] = []
    http: list[float | None] = []
    for i, item in enumerate(items):
        where = f"[{i}]."
        it = r.obj(item, f"[{i}]")
        code = validate.number(r, it.get("error_code"), where + "error_code", validate.CODE)
        msg = r.text(it.get("error_msg"), where + "error_msg")
        failed = code is not None or bool(msg)
        status.append("error" if failed else "ok")
        errors.append((msg or f"error code {code:g}") if failed else None)
        http.append(code)
        t = validate.number(r, r.require(it, "ttft_s", where), where + "ttft_s", validate.LATENCY)
        e = validate.number(
            r,
            r.require(it, "end_to_end_latency_s", where),
            where + "end_to_end_latency_s",
            validate.LATENCY,
        )
        ttft.append(None if failed or t is None else t * 1000.0)
        e2e.append(None if failed or e is None else e * 1000.0)
        out_tok.append(
            None
            if failed
            else validate.number(
                r, it.get("number_output_tokens"), where + "number_output_tokens", validate.TOKENS
            )
        )
        in_tok.append(
            validate.number(
                r, it.get("number_input_tokens"), where + "number_input_tokens", validate.TOKENS
            )
        )
    notes.insert(
        0, "token counts use llmperf's llama tokenizer, not the model's; no token gaps in the file"
    )
    requests = requests_frame(
        run["run_id"],
        n,
        ttft_ms=ttft,
        e2e_ms=e2e,
        output_tokens=out_tok,
        input_tokens=in_tok,
        status=status,
        error=errors,
        http_status=http,
    )
    run["tool_summary"] = tool
    run["notes"] = "; ".join(notes)
    sources = [responses.source] + ([summary.source] if summary is not None else [])
    return ParsedFile(
        format=RESPONSES, sources=sources, runs=[ParsedRun(run=run, requests=requests)]
    )
