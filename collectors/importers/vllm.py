"""vLLM ``vllm bench serve`` / ``benchmark_serving.py`` result JSON (FORMATS §B1).

Per-request arrays are in seconds, aggregates in milliseconds; ``request_rate`` may be the
string ``"inf"``; ``start_times`` are ``time.perf_counter()`` values (process-relative), so the
run is anchored at the file's ``date`` (local time of the run's end, read as UTC) minus its
``duration``; the legacy key ``request_goodput:`` (trailing colon) is accepted. ``--append-result``
files (one JSON object per line) give one run each.
"""

from __future__ import annotations

import calendar
import math
import time
from typing import Any

import numpy as np

from . import validate
from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .parsing import Reader, scalars
from .records import (
    base_run,
    gap_sums,
    gaps_frame_from_arrays,
    precision_fields,
    requests_frame,
    summary_entry,
)

NAME = "vllm-bench"
PER_REQUEST_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
    "latencies",
    "start_times",
    "queue_times",
)
# client backends that name the serving framework itself (others, e.g. openai, do not)
FRAMEWORK_BACKENDS = {
    "vllm",
    "tgi",
    "lmdeploy",
    "deepspeed-mii",
    "tensorrt-llm",
    "scalellm",
    "sglang",
}
METRICS = ("ttft", "tpot", "itl", "e2el")
# start_times within this distance of the file's date are epoch seconds, not perf_counter()
EPOCH_WINDOW_S = 2 * 86400.0


def _is_vllm(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    has_stats = any(k.endswith("_ttft_ms") for k in obj) or "ttfts" in obj
    return (
        "num_prompts" in obj
        and ("model_id" in obj or "date" in obj)
        and ("request_throughput" in obj or has_stats)
        and "total_output_tokens_retokenized" not in obj
    )


def detect(doc: Document) -> bool:
    return doc.kind in ("json", "jsonl") and bool(doc.objects) and _is_vllm(doc.first)


def _date_epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y%m%d-%H%M%S")))
    except ValueError:
        return None


def _tool_metrics(r: Reader, obj: dict[str, Any], where: str) -> dict[str, Any]:
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
    out: dict[str, Any] = {}
    for m, ours in names.items():
        entry: dict[str, float] = {}
        for key, value in obj.items():
            if not (key.endswith(f"_{m}_ms") and isinstance(value, int | float | str)):
                continue
            stat = key[: -len(f"_{m}_ms")]
            num = validate.aggregate(r, value, where + key, validate.LATENCY)
            if num is None:
                continue
            entry["p50" if stat == "median" else stat] = num
        if entry:
            out[ours] = summary_entry(**entry)
    goodput = obj.get("request_goodput", obj.get("request_goodput:"))
    for ours, key, val, bound in (
        (
            "request_throughput",
            "request_throughput",
            obj.get("request_throughput"),
            validate.MEASURE,
        ),
        ("output_throughput", "output_throughput", obj.get("output_throughput"), validate.MEASURE),
        (
            "total_token_throughput",
            "total_token_throughput",
            obj.get("total_token_throughput"),
            validate.MEASURE,
        ),
        ("request_goodput", "request_goodput", goodput, validate.MEASURE),
        ("duration_s", "duration", obj.get("duration"), validate.DURATION),
        ("completed", "completed", obj.get("completed"), validate.COUNT),
        ("failed", "failed", obj.get("failed"), validate.COUNT),
        ("total_input_tokens", "total_input_tokens", obj.get("total_input_tokens"), validate.COUNT),
        (
            "total_output_tokens",
            "total_output_tokens",
            obj.get("total_output_tokens"),
            validate.COUNT,
        ),
    ):
        num = validate.aggregate(r, val, where + key, bound)
        if num is not None:
            out[ours] = num
    return out


def _parse_run(
    doc: Document, index: int, line: int, obj: Any, count: int, options: ImportOptions, clock: Clock
) -> ParsedRun:
    src = doc.source
    r = Reader(src.path)
    where = f"line {line}: " if doc.kind == "jsonl" else ""
    o = r.obj(obj, f"{where}(run)")
    num_prompts = validate.integer(
        r, r.require(o, "num_prompts", where), where + "num_prompts", validate.COUNT
    )
    rate = validate.number(r, o.get("request_rate"), where + "request_rate", validate.RATE)
    finite_rate = rate if rate is not None and math.isfinite(rate) else None
    burstiness = validate.number(r, o.get("burstiness"), where + "burstiness", validate.POSITIVE)
    max_conc = validate.integer(
        r, o.get("max_concurrency"), where + "max_concurrency", validate.COUNT
    )
    duration = validate.number(r, o.get("duration"), where + "duration", validate.DURATION)
    backend = r.text(o.get("backend", o.get("endpoint_type")), where + "backend")
    ended = _date_epoch(o.get("date"))
    started = ended - duration if ended is not None and duration is not None else None
    if finite_rate is None:
        arrival = "concurrency" if max_conc else None
    else:
        arrival = "poisson" if burstiness in (None, 1.0) else "gamma"
    label_parts = [f"rate={'inf' if finite_rate is None else f'{finite_rate:g}'}"]
    if max_conc:
        label_parts.append(f"concurrency={max_conc}")
    detailed = "ttfts" in o
    notes: list[str] = []
    tool = {
        "format": NAME,
        "aggregates_only": not detailed,
        "per_request": "full" if detailed else "none",
        "metrics": _tool_metrics(r, o, where),
        "raw": scalars(o, skip=PER_REQUEST_KEYS),
    }
    run = base_run(
        src,
        NAME,
        index,
        options,
        label=" ".join(label_parts),
        run_count=count,
        clock=clock,
        framework=backend if backend in FRAMEWORK_BACKENDS else None,
        model=r.text(o.get("model_id"), where + "model_id"),
        **precision_fields(o),
        arrival=arrival,
        target_rate=finite_rate,
        burstiness=burstiness,
        concurrency=max_conc,
        started_at=started,
        ended_at=ended,
        duration_s=duration,
        client_params={
            k: o.get(k)
            for k in (
                "backend",
                "endpoint_type",
                "label",
                "tokenizer_id",
                "num_prompts",
                "request_rate",
                "burstiness",
                "max_concurrency",
            )
            if o.get(k) is not None
        },
    )
    run["client_params"] = {
        k: (str(v) if isinstance(v, float) and not np.isfinite(v) else v)
        for k, v in run["client_params"].items()
    }
    if not detailed:
        notes.append(
            "aggregates only: saved without --save-detailed, so there are no per-request "
            "figures; the tool's own aggregates are kept in tool_summary"
        )
        run["tool_summary"] = tool
        run["notes"] = "; ".join(notes)
        return ParsedRun(run=run, warnings=["aggregates only (no per-request data)"])

    path = src.path
    ttfts = validate.check_array(
        path, where + "ttfts", r.float_array(o["ttfts"], where + "ttfts"), validate.LATENCY
    )
    n = len(ttfts)
    if num_prompts is not None and n != num_prompts:
        notes.append(f"{n} per-request entries for num_prompts={num_prompts}")
    gap_values, gap_counts = validate.gap_lists(r, r.require(o, "itls", where), where + "itls", n)

    def column(key: str, bound: validate.Bound) -> np.ndarray | None:
        if key not in o:
            return None
        return validate.check_array(path, where + key, r.float_array(o[key], where + key, n), bound)

    r.require(o, "output_lens", where)
    out_lens = column("output_lens", validate.TOKENS)
    assert out_lens is not None
    in_lens = column("input_lens", validate.TOKENS)
    errors_raw = r.array(o["errors"], where + "errors", n) if "errors" in o else None
    latencies = column("latencies", validate.LATENCY)
    starts = column("start_times", validate.TIMESTAMP)

    # one pass per column, no Python loop per request beyond reading the error texts
    if errors_raw is not None:
        errors = [None if e in (None, "") else str(e) for e in errors_raw]
        failed = np.fromiter((e is not None for e in errors), dtype=bool, count=n)
    else:
        errors = [None] * n
        no_ttft = np.isnan(ttfts) | (ttfts == 0)
        failed = no_ttft & (gap_counts == 0)
    if latencies is not None:
        # a failed request may have its first token and no latency (vLLM leaves it 0)
        with np.errstate(invalid="ignore"):
            shorter = (latencies < ttfts) & ~failed  # False where either is NaN
        if shorter.any():
            i = int(np.argmax(shorter))
            raise r.fail(
                f"{where}latencies[{i}]",
                f"found {latencies[i]:.6g}, shorter than ttfts[{i}] = {ttfts[i]:.6g}; "
                "expected a request to end after its first token",
            )
    status = np.where(failed, "error", "ok").astype(object)
    ttft_ms = np.where(failed, np.nan, ttfts * 1000.0)
    if latencies is None:
        lat = ttfts + gap_sums(gap_values, gap_counts)
        notes.append("E2E reconstructed as TTFT + sum of inter-token gaps (no 'latencies' array)")
    elif np.isnan(latencies).any():
        lat = np.where(np.isnan(latencies), ttfts + gap_sums(gap_values, gap_counts), latencies)
    else:
        lat = latencies
    e2e_ms = np.where(failed, np.nan, lat * 1000.0)
    sent_at = None
    valid = starts[~np.isnan(starts)] if starts is not None else np.empty(0)
    if starts is not None and valid.size and started is not None:
        if abs(float(valid.min()) - started) < EPOCH_WINDOW_S:
            sent_at = starts  # already epoch seconds (e.g. a ServeScope export)
        else:
            sent_at = started + (starts - float(valid.min()))
            notes.append(
                "start_times are perf_counter() values: anchored at date − duration "
                "(date read as UTC; the file does not say its time zone)"
            )
    run_id = run["run_id"]
    requests = requests_frame(
        run_id,
        n,
        ttft_ms=ttft_ms,
        e2e_ms=e2e_ms,
        output_tokens=np.where(failed, np.nan, out_lens),
        input_tokens=in_lens,
        status=status,
        error=errors,
        sent_at=sent_at,
        chunks=np.where(failed, np.nan, gap_counts + 1.0),
    )
    gaps = gaps_frame_from_arrays(run_id, gap_values, gap_counts, scale_to_ms=1000.0)
    run["tool_summary"] = tool
    run["notes"] = "; ".join(notes) if notes else None
    return ParsedRun(run=run, requests=requests, token_gaps=gaps)


def parse(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    objs = doc.objects
    runs = [
        _parse_run(doc, i, line, obj, len(objs), options, clock)
        for i, (line, obj) in enumerate(objs)
    ]
    return ParsedFile(format=NAME, sources=[doc.source], runs=runs)
