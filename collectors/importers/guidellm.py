"""GuideLLM ``benchmarks.json`` / ``.yaml``, all three schema generations (FORMATS §B5).

- 0.1–0.3: ``{"benchmarks": [...]}``, no ``metadata``; per-request ``start_time``,
  ``first_token_time``, ``end_time`` (epoch s).
- 0.4–0.6: ``metadata.version = 1`` and ``args``; per-request ``request_start_time`` /
  ``info.timings``.
- 0.7+: ``metadata.version = 2`` and ``config``; per-request ``info.timings``
  (``request_start``, ``first_token_iteration``, ``request_end``).

One run per benchmark. GuideLLM stores only a *sample* of requests by default
(``--sample-requests``): when fewer requests are listed than counted, the run says so and the
tool's own aggregates (``metrics``) stay the reference in ``tool_summary``. GuideLLM's TPOT
includes the first token (latency / output tokens) and its ITL is a per-request mean; ours are
recomputed from the timestamps. The file has no per-token timestamps, so no token gaps.
"""

from __future__ import annotations

import math
from typing import Any

from . import validate
from .base import Clock
from .model import Document, ImportOptions, ParsedFile, ParsedRun
from .parsing import Reader
from .records import base_run, requests_frame, summary_entry

NAME = "guidellm"
STATUSES = (("successful", "ok"), ("errored", "error"), ("incomplete", "cancelled"))
DEFINITIONS = {
    "tpot_ms": "GuideLLM's time_per_output_token_ms includes the first token "
    "(latency / output tokens)",
    "itl_ms": "GuideLLM's inter_token_latency_ms is a per-request mean of "
    "(last − first) / (n − 1), averaged over requests",
}
# (our name, GuideLLM metric, factor to our unit)
TOOL_METRICS = (
    ("ttft_ms", "time_to_first_token_ms", 1.0),
    ("tpot_ms", "time_per_output_token_ms", 1.0),
    ("itl_ms", "inter_token_latency_ms", 1.0),
    ("e2e_ms", "request_latency", 1000.0),
)


def detect(doc: Document) -> bool:
    obj = doc.first
    if doc.kind not in ("json", "yaml") or not isinstance(obj, dict):
        return False
    benchmarks = obj.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks or not isinstance(benchmarks[0], dict):
        return False
    b0 = benchmarks[0]
    return b0.get("type_") == "generative_benchmark" or ("metrics" in b0 and "requests" in b0)


def _generation(top: dict[str, Any]) -> str:
    meta = top.get("metadata")
    version = meta.get("version") if isinstance(meta, dict) else None
    if version == 1:
        return "0.4-0.6"
    if isinstance(version, int) and version >= 2:
        return "0.7+"
    return "0.1-0.3"


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _dist(r: Reader, d: Any, key: str, factor: float) -> dict[str, float]:
    if not isinstance(d, dict):
        return {}
    raw_pct = d.get("percentiles")
    pct: dict[str, Any] = raw_pct if isinstance(raw_pct, dict) else {}
    stats = {
        "mean": d.get("mean"),
        "p50": _first(d.get("median"), pct.get("p50")),
        "p90": pct.get("p90"),
        "p95": pct.get("p95"),
        "p99": pct.get("p99"),
        "min": d.get("min"),
        "max": d.get("max"),
        "std": d.get("std_dev"),
    }
    out: dict[str, float] = {}
    for stat, value in stats.items():
        num = validate.aggregate(r, value, f"{key}.{stat}", validate.LATENCY)
        if num is not None:
            out[stat] = num * factor
    count = validate.aggregate(r, d.get("count"), f"{key}.count", validate.COUNT)
    if count is not None:
        out["count"] = count
    return out


def _tool(r: Reader, b: dict[str, Any], where: str) -> dict[str, Any]:
    metrics = r.opt_obj(b, "metrics", where)
    out: dict[str, Any] = {}
    for ours, theirs, factor in TOOL_METRICS:
        entry = _dist(
            r, _dig(metrics, theirs, "successful"), f"{where}metrics.{theirs}.successful", factor
        )
        if entry:
            out[ours] = summary_entry(**entry)
    for ours, theirs in (
        ("request_throughput", "requests_per_second"),
        ("output_throughput", "output_tokens_per_second"),
        ("total_token_throughput", "tokens_per_second"),
        ("concurrency", "request_concurrency"),
    ):
        mean = validate.aggregate(
            r,
            _dig(metrics, theirs, "successful", "mean"),
            f"{where}metrics.{theirs}",
            validate.MEASURE,
        )
        if mean is not None:
            out[ours] = mean
    return out


def _strategy(r: Reader, b: dict[str, Any], where: str) -> dict[str, Any]:
    strat = _first(_dig(b, "config", "strategy"), _dig(b, "args", "strategy"), _dig(b, "strategy"))
    if not isinstance(strat, dict):
        return {}
    kind = strat.get("type_") or strat.get("kind")
    out: dict[str, Any] = {"label": str(kind) if kind else None}
    rate = strat.get("rate")
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        rate = validate.number(r, rate, where + "strategy.rate", validate.RATE)
    streams = _first(strat.get("streams"), strat.get("max_concurrency"))
    if isinstance(streams, int | float) and not isinstance(streams, bool):
        streams = validate.integer(r, streams, where + "strategy.streams", validate.COUNT)
    if kind == "synchronous":
        out.update(arrival="concurrency", concurrency=1)
    elif kind in ("concurrent", "throughput"):
        if isinstance(streams, int | float) and not isinstance(streams, bool):
            out.update(arrival="concurrency", concurrency=int(streams))
            out["label"] = f"{kind} {int(streams)}"
        else:
            out["arrival"] = "concurrency"
    elif kind in ("constant", "poisson") and isinstance(rate, int | float) and 0 < rate < math.inf:
        out.update(arrival=kind, target_rate=float(rate), label=f"{kind} {rate:g}/s")
    return out


def _stamp(r: Reader, value: Any, key: str) -> float | None:
    """An epoch-seconds timestamp of a request (finite; null = not given)."""
    return validate.number(r, value, key, validate.TIMESTAMP)


def _parse_requests(
    r: Reader, b: dict[str, Any], where: str, run_id: str
) -> tuple[Any, dict[str, int], dict[str, int]]:
    reqs = r.opt_obj(b, "requests", where)
    listed: dict[str, int] = {}
    rows: dict[str, list[Any]] = {
        k: [] for k in ("ttft", "e2e", "out", "inp", "status", "sent", "err", "conv", "turn")
    }
    for key, status in STATUSES:
        items = reqs.get(key) or []
        items = r.array(items, f"{where}requests.{key}")
        listed[key] = len(items)
        for i, item in enumerate(items):
            w = f"{where}requests.{key}[{i}]."
            it = r.obj(item, w.rstrip("."))
            timings = _dig(it, "info", "timings") or {}
            sent = _stamp(
                r,
                _first(
                    it.get("request_start_time"),
                    it.get("start_time"),
                    _dig(timings, "request_start"),
                ),
                w + "request_start_time",
            )
            first = _stamp(
                r,
                _first(
                    it.get("first_token_time"),
                    _dig(timings, "first_token_iteration"),
                    _dig(timings, "first_iteration"),
                ),
                w + "first_token_time",
            )
            end = _stamp(
                r,
                _first(
                    it.get("request_end_time"), it.get("end_time"), _dig(timings, "request_end")
                ),
                w + "request_end_time",
            )
            if sent is not None and first is not None:
                ttft: float | None = validate.check(
                    r.path,
                    w.rstrip("."),
                    (first - sent) * 1000.0,
                    validate.LATENCY,
                    how="TTFT (first_token_time − request_start_time, ms)",
                )
            else:
                ttft = validate.number(
                    r,
                    it.get("time_to_first_token_ms"),
                    w + "time_to_first_token_ms",
                    validate.LATENCY,
                )
                ttft = ttft if ttft else None
            e2e: float | None = None
            if status == "ok":
                if sent is not None and end is not None:
                    e2e = validate.check(
                        r.path,
                        w.rstrip("."),
                        (end - sent) * 1000.0,
                        validate.LATENCY,
                        how="E2E (request_end_time − request_start_time, ms)",
                    )
                else:
                    lat = validate.number(
                        r, it.get("request_latency"), w + "request_latency", validate.LATENCY
                    )
                    e2e = None if lat is None else lat * 1000.0
            out_tokens = validate.number(
                r, it.get("output_tokens"), w + "output_tokens", validate.TOKENS
            )
            rows["ttft"].append(ttft)
            rows["e2e"].append(e2e)
            rows["out"].append(out_tokens if status == "ok" else None)
            rows["inp"].append(
                validate.number(
                    r,
                    _first(it.get("prompt_tokens"), it.get("input_tokens")),
                    w + "prompt_tokens",
                    validate.TOKENS,
                )
            )
            rows["status"].append(status)
            rows["sent"].append(sent)
            error = _first(_dig(it, "info", "error"), it.get("error"))
            rows["err"].append(None if error is None else str(error)[:500])
            rows["conv"].append(
                r.text(_dig(it, "info", "conversation_id"), w + "info.conversation_id")
            )
            rows["turn"].append(
                validate.integer(
                    r, _dig(it, "info", "turn_index"), w + "info.turn_index", validate.INDEX
                )
            )
    n = len(rows["status"])
    counted: dict[str, int] = {}
    totals = _first(b.get("request_totals"), _dig(b, "metrics", "request_totals"))
    if isinstance(totals, dict):
        for key, _ in STATUSES:
            value = totals.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                count = validate.aggregate(r, value, f"{where}request_totals.{key}", validate.COUNT)
                if count is not None:
                    counted[key] = int(count)
    if n == 0:
        return None, listed, counted
    frame = requests_frame(
        run_id,
        n,
        ttft_ms=rows["ttft"],
        e2e_ms=rows["e2e"],
        output_tokens=rows["out"],
        input_tokens=rows["inp"],
        status=rows["status"],
        error=rows["err"],
        sent_at=rows["sent"] if any(s is not None for s in rows["sent"]) else None,
        conversation_id=rows["conv"],
        turn=rows["turn"],
    )
    return frame, listed, counted


def parse(docs: list[Document], options: ImportOptions, clock: Clock) -> ParsedFile:
    doc = docs[0]
    r = Reader(doc.source.path)
    top = r.obj(doc.first, "(document)")
    gen = _generation(top)
    benchmarks = r.array(r.require(top, "benchmarks"), "benchmarks")
    version = _first(_dig(top, "metadata", "guidellm_version"))
    model_top = _first(_dig(top, "args", "model"), _dig(top, "config", "spec", "backend", "model"))
    target_top = _first(
        _dig(top, "args", "target"), _dig(top, "config", "spec", "backend", "target")
    )
    runs: list[ParsedRun] = []
    for index, bench in enumerate(benchmarks):
        where = f"benchmarks[{index}]."
        b = r.obj(bench, f"benchmarks[{index}]")
        strat = _strategy(r, b, where)
        start = validate.number(
            r,
            _first(
                b.get("start_time"),
                _dig(b, "run_stats", "start_time"),
                _dig(b, "scheduler_metrics", "measure_start_time"),
            ),
            where + "start_time",
            validate.TIMESTAMP,
        )
        end = validate.number(
            r,
            _first(
                b.get("end_time"),
                _dig(b, "run_stats", "end_time"),
                _dig(b, "scheduler_metrics", "measure_end_time"),
            ),
            where + "end_time",
            validate.TIMESTAMP,
        )
        model = _first(
            _dig(b, "worker", "backend_model"), _dig(b, "config", "backend", "model"), model_top
        )
        target = _first(
            _dig(b, "worker", "backend_target"), _dig(b, "config", "backend", "target"), target_top
        )
        run = base_run(
            doc.source,
            NAME,
            index,
            options,
            label=strat.get("label") or f"benchmark {index}",
            run_count=len(benchmarks),
            clock=clock,
            model=None if model is None else str(model),
            endpoint=None if target is None else str(target),
            arrival=strat.get("arrival"),
            concurrency=strat.get("concurrency"),
            target_rate=strat.get("target_rate"),
            started_at=start,
            ended_at=end,
            duration_s=validate.number(r, b.get("duration"), where + "duration", validate.DURATION),
            client_params={
                "guidellm_schema": gen,
                "guidellm_version": version,
                "strategy": strat.get("label"),
            },
        )
        requests, listed, counted = _parse_requests(r, b, where, run["run_id"])
        raw_warnings = b.get("warnings")
        listed_warnings = raw_warnings if isinstance(raw_warnings, list) else []
        sampled = any(listed.get(k, 0) < counted.get(k, 0) for k in counted)
        tool = {
            "format": NAME,
            "schema": gen,
            "aggregates_only": requests is None,
            "per_request": "none" if requests is None else ("sampled" if sampled else "full"),
            "requests_listed": listed,
            "requests_counted": counted,
            "metrics": _tool(r, b, where),
            "definitions": DEFINITIONS,
            "warnings": [w.get("message") for w in listed_warnings if isinstance(w, dict)],
        }
        notes: list[str] = []
        warnings: list[str] = []
        if requests is None:
            notes.append(
                "aggregates only: no per-request entries in the file; "
                "the tool's own aggregates are in tool_summary"
            )
            warnings.append("aggregates only")
        elif sampled:
            listed_n, counted_n = sum(listed.values()), sum(counted.values())
            notes.append(
                f"sampled: GuideLLM stored {listed_n} of {counted_n} requests (--sample-requests); "
                "percentiles from these rows are not the run's — see tool_summary"
            )
            warnings.append(f"benchmark {index}: {listed_n} of {counted_n} requests (sampled)")
        notes.append("no per-token timestamps in GuideLLM files: no token gaps")
        run["tool_summary"] = tool
        run["notes"] = "; ".join(notes)
        runs.append(ParsedRun(run=run, requests=requests, warnings=warnings))
    return ParsedFile(format=NAME, sources=[doc.source], runs=runs)
