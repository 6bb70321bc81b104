"""SGLang ``python -m sglang.bench_serving`` JSONL (FORMATS §B2): one run per line.

``request_rate`` may be ``Infinity`` and stats ``NaN`` (non-standard JSON tokens that Python's
``json`` reads). With ``--output-details`` the line carries per-request arrays (``ttfts`` and
``itls`` in seconds) but no per-request E2E: it is reconstructed as TTFT + the sum of the
inter-token gaps, and the run's notes say so. Every stat is optional (old files have 18 keys).
"""

from __future__ import annotations

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

NAME = "sglang-bench"
PER_REQUEST_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
E2E_NOTE = (
    "E2E reconstructed as TTFT + sum of inter-token gaps "
    "(SGLang's --output-details has no per-request latency)"
)


def _is_sglang(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and "backend" in obj
        and "total_output_tokens_retokenized" in obj
        and any(k.endswith("_e2e_latency_ms") for k in obj)
    )


def detect(doc: Document) -> bool:
    return doc.kind in ("json", "jsonl") and bool(doc.objects) and _is_sglang(doc.first)


def _tool_metrics(r: Reader, o: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m, ours in (
        ("ttft", "ttft_ms"),
        ("tpot", "tpot_ms"),
        ("itl", "itl_ms"),
        ("e2e_latency", "e2e_ms"),
    ):
        entry: dict[str, float] = {}
        for key, value in o.items():
            suffix = f"_{m}_ms"
            if key.endswith(suffix) and not isinstance(value, dict | list):
                num = validate.aggregate(r, value, where + key, validate.LATENCY)
                stat = key[: -len(suffix)]
                if num is not None:
                    entry["p50" if stat == "median" else stat] = num
        if entry:
            out[ours] = summary_entry(**entry)
    for ours, key, bound in (
        ("request_throughput", "request_throughput", validate.MEASURE),
        ("output_throughput", "output_throughput", validate.MEASURE),
        ("input_throughput", "input_throughput", validate.MEASURE),
        ("duration_s", "duration", validate.DURATION),
        ("completed", "completed", validate.COUNT),
        ("total_input_tokens", "total_input_tokens", validate.COUNT),
        ("total_output_tokens", "total_output_tokens", validate.COUNT),
        ("concurrency", "concurrency", validate.MEASURE),
    ):
        num = validate.aggregate(r, o.get(key), where + key, bound)
        if num is not None:
            out[ours] = num
    return out


def _parse_run(
    doc: Document, index: int, line: int, obj: Any, count: int, options: ImportOptions, clock: Clock
) -> ParsedRun:
    src = doc.source
    r = Reader(src.path)
    where = f"line {line}: "
    o = r.obj(obj, f"{where}(run)")
    for key in ("backend", "completed"):
        r.require(o, key, where)
    completed = validate.integer(r, o["completed"], where + "completed", validate.COUNT)
    rate = validate.number(r, o.get("request_rate"), where + "request_rate", validate.RATE)
    finite_rate = rate if rate is not None and rate != float("inf") else None
    max_conc = validate.integer(
        r, o.get("max_concurrency"), where + "max_concurrency", validate.COUNT
    )
    duration = validate.number(r, o.get("duration"), where + "duration", validate.DURATION)
    backend = r.text(o.get("backend"), where + "backend")
    detailed = "ttfts" in o
    if finite_rate is not None:
        label = f"rate={finite_rate:g}"
    else:
        label = "rate=inf" if rate is not None else "rate=?"
    if max_conc:
        label += f" concurrency={max_conc}"
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
        label=label,
        run_count=count,
        clock=clock,
        framework="sglang" if backend in ("sglang", "sglang-native", "sglang-oai") else None,
        **precision_fields(o, o.get("server_info")),
        arrival=("poisson" if finite_rate is not None else ("concurrency" if max_conc else None)),
        target_rate=finite_rate,
        concurrency=max_conc,
        duration_s=duration,
        workload=r.text(o.get("dataset_name"), where + "dataset_name"),
        client_params=scalars(
            {
                k: o.get(k)
                for k in (
                    "backend",
                    "dataset_name",
                    "request_rate",
                    "max_concurrency",
                    "random_input_len",
                    "random_output_len",
                    "random_range_ratio",
                    "sharegpt_output_len",
                )
                if k in o
            }
        ),
    )
    if not detailed:
        run["tool_summary"] = tool
        run["notes"] = (
            "aggregates only: saved without --output-details, so there are no per-request "
            "figures; the tool's own aggregates are kept in tool_summary"
        )
        return ParsedRun(run=run, warnings=["aggregates only"])

    path = src.path

    def column(key: str, bound: validate.Bound, length: int | None) -> np.ndarray:
        values = r.float_array(r.require(o, key, where), where + key, length)
        return validate.check_array(path, where + key, values, bound)

    ttfts = column("ttfts", validate.LATENCY, None)
    n = len(ttfts)
    gap_values, gap_counts = validate.gap_lists(r, r.require(o, "itls", where), where + "itls", n)
    out_lens = column("output_lens", validate.TOKENS, n)
    in_lens = column("input_lens", validate.TOKENS, n) if "input_lens" in o else None
    errors_raw = r.array(o["errors"], where + "errors", n) if "errors" in o else None
    if errors_raw is not None:
        errors = [None if e in (None, "") else str(e) for e in errors_raw]
        failed = np.fromiter((e is not None for e in errors), dtype=bool, count=n)
    else:
        errors = [None] * n
        failed = (np.isnan(ttfts) | (ttfts == 0)) & (gap_counts == 0)
    # a NaN TTFT (not measured) leaves the request's TTFT and E2E NULL
    ttft_ms = np.where(failed, np.nan, ttfts * 1000.0)
    e2e_ms = np.where(failed, np.nan, (ttfts + gap_sums(gap_values, gap_counts)) * 1000.0)
    ok_count = int((~failed).sum())
    notes = [E2E_NOTE]
    if completed is not None and ok_count != completed:
        notes.append(f"{ok_count} ok requests in the arrays; the file says completed={completed}")
    run_id = run["run_id"]
    requests = requests_frame(
        run_id,
        n,
        ttft_ms=ttft_ms,
        e2e_ms=e2e_ms,
        output_tokens=np.where(failed, np.nan, out_lens),
        input_tokens=in_lens,
        status=np.where(failed, "error", "ok").astype(object),
        error=errors,
        chunks=np.where(failed, np.nan, gap_counts + 1.0),
    )
    gaps = gaps_frame_from_arrays(run_id, gap_values, gap_counts, scale_to_ms=1000.0)
    run["tool_summary"] = tool
    run["notes"] = "; ".join(notes)
    return ParsedRun(run=run, requests=requests, token_gaps=gaps)


def parse(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    runs = [
        _parse_run(doc, i, line, obj, len(doc.objects), options, clock)
        for i, (line, obj) in enumerate(doc.objects)
    ]
    return ParsedFile(format=NAME, sources=[doc.source], runs=runs)
