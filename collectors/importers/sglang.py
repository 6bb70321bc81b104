"""SGLang ``python -m sglang.bench_serving`` JSONL (FORMATS §B2): one run per line.

``request_rate`` may be ``Infinity`` and stats ``NaN`` (non-standard JSON tokens that Python's
``json`` reads). With ``--output-details`` the line carries per-request arrays (``ttfts`` and
``itls`` in seconds) but no per-request E2E: it is reconstructed as TTFT + the sum of the
inter-token gaps, and the run's notes say so. Every stat is optional (old files have 18 keys).
"""

from __future__ import annotations

from typing import Any

from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .parsing import Reader, scalars
from .records import base_run, gaps_frame, requests_frame, summary_entry

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
                num = r.finite(value, where + key)
                stat = key[: -len(suffix)]
                if num is not None:
                    entry["p50" if stat == "median" else stat] = num
        if entry:
            out[ours] = summary_entry(**entry)
    for ours, key in (
        ("request_throughput", "request_throughput"),
        ("output_throughput", "output_throughput"),
        ("input_throughput", "input_throughput"),
        ("duration_s", "duration"),
        ("completed", "completed"),
        ("total_input_tokens", "total_input_tokens"),
        ("total_output_tokens", "total_output_tokens"),
        ("concurrency", "concurrency"),
    ):
        num = r.finite(o.get(key), where + key)
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
    completed = r.integer(o["completed"], where + "completed")
    rate = r.number(o.get("request_rate"), where + "request_rate")
    finite_rate = r.finite(o.get("request_rate"), where + "request_rate")
    max_conc = r.integer(o.get("max_concurrency"), where + "max_concurrency")
    duration = r.finite(o.get("duration"), where + "duration")
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

    ttfts = r.numbers(o["ttfts"], where + "ttfts")
    n = len(ttfts)
    itls_raw = r.array(r.require(o, "itls", where), where + "itls", n)
    itls: list[list[float]] = []
    for i, gaps in enumerate(itls_raw):
        nums = r.numbers(gaps, f"{where}itls[{i}]")
        itls.append([g for g in nums if g is not None])
    out_lens = r.numbers(r.require(o, "output_lens", where), where + "output_lens", n)
    in_lens = r.numbers(o["input_lens"], where + "input_lens", n) if "input_lens" in o else None
    errors_raw = r.array(o["errors"], where + "errors", n) if "errors" in o else None
    status: list[str] = []
    errors: list[str | None] = []
    ttft_ms: list[float | None] = []
    e2e_ms: list[float | None] = []
    for i in range(n):
        err = errors_raw[i] if errors_raw is not None else None
        err_text = str(err) if err not in (None, "") else None
        t = ttfts[i]
        failed = err_text is not None or (errors_raw is None and not t and not itls[i])
        status.append("error" if failed else "ok")
        errors.append(err_text if failed else None)
        if failed or t is None:
            ttft_ms.append(None)
            e2e_ms.append(None)
        else:
            ttft_ms.append(t * 1000.0)
            e2e_ms.append((t + sum(itls[i])) * 1000.0)
    notes = [E2E_NOTE]
    if completed is not None and status.count("ok") != completed:
        notes.append(
            f"{status.count('ok')} ok requests in the arrays; the file says completed={completed}"
        )
    run_id = run["run_id"]
    requests = requests_frame(
        run_id,
        n,
        ttft_ms=ttft_ms,
        e2e_ms=e2e_ms,
        output_tokens=[None if s == "error" else v for s, v in zip(status, out_lens, strict=True)],
        input_tokens=in_lens,
        status=status,
        error=errors,
        chunks=[len(g) + 1 if s == "ok" else None for s, g in zip(status, itls, strict=True)],
    )
    run["tool_summary"] = tool
    run["notes"] = "; ".join(notes)
    return ParsedRun(
        run=run, requests=requests, token_gaps=gaps_frame(run_id, itls, scale_to_ms=1000.0)
    )


def parse(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    runs = [
        _parse_run(doc, i, line, obj, len(doc.objects), options, clock)
        for i, (line, obj) in enumerate(doc.objects)
    ]
    return ParsedFile(format=NAME, sources=[doc.source], runs=runs)
