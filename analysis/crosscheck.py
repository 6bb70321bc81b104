"""Ours vs the tool's: our recomputed figures beside an imported tool's own aggregates.

Importers keep the tool's figures in ``runs.tool_summary`` under our names and units
(``metrics``: ``ttft_ms`` / ``tpot_ms`` / ``itl_ms`` / ``e2e_ms`` as ``{mean, p50, … p99}`` in
ms, plus scalars such as ``request_throughput``), and where the tool's definition differs from
ours a note per metric (``definitions``). This module lines them up with our figures (a
``run_detail`` row and the pooled ITL row), marks differences over 1 % and names the known
reason (docs/metrics.md, "How other tools differ"). Pure: dicts in, DataFrame out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import pandas as pd

from analysis.metrics import finite_number

#: A relative difference above this (1 %) is marked.
THRESHOLD: Final = 0.01

LATENCY_METRICS: Final = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
LATENCY_STATS: Final = ("mean", "p50", "p90", "p95", "p99")
#: Scalar figures: the tool's name → our run_detail column.
SCALAR_METRICS: Final[Mapping[str, str]] = {
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "completed": "ok",
    "failed": "errors",
    "total_input_tokens": "input_tokens",
    "total_output_tokens": "output_tokens",
    "duration_s": "duration_s",
}
COLUMNS: Final = (
    "metric",
    "stat",
    "ours_metric",
    "ours",
    "tool",
    "diff_pct",
    "differs",
    "reason",
)

_TPOT_LIKE_ITL = (
    "{tool}'s ITL is a per-request mean, (E2E − TTFT) / (output tokens − 1): our TPOT, not "
    "the pooled gap between chunks"
)
_RETOKENIZED = "{tool} counts output tokens by re-tokenizing the generated text"

#: Known definition differences per source and metric (docs/metrics.md); a note the importer
#: wrote in ``tool_summary.definitions`` takes precedence.
KNOWN_REASONS: Final[Mapping[str, Mapping[str, str]]] = {
    "vllm-bench": {
        "tpot_ms": "vLLM's TPOT is ours, but its output_lens may come from re-tokenizing the "
        "text rather than the server's usage",
        "itl_ms": "vLLM's ITL is ours (every gap between streamed chunks, pooled); its "
        "aggregates leave out failed requests and round gaps to the file's precision",
        "request_throughput": "vLLM divides by its own in-process duration",
        "output_throughput": "vLLM divides by its own in-process duration",
        "total_token_throughput": "vLLM divides by its own in-process duration",
    },
    "sglang-bench": {
        "e2e_ms": "SGLang's file has no per-request latency: our E2E is reconstructed as TTFT "
        "+ sum of inter-token gaps",
        "tpot_ms": _RETOKENIZED.format(tool="SGLang"),
        "total_output_tokens": _RETOKENIZED.format(tool="SGLang"),
    },
    "guidellm": {
        "tpot_ms": "GuideLLM's TPOT includes the first token (latency / output tokens)",
        "itl_ms": "GuideLLM's ITL is a per-request mean of the gaps after the first token, "
        "averaged over requests (our TPOT); ours pools every gap",
    },
    "aiperf": {
        "itl_ms": _TPOT_LIKE_ITL.format(tool="AIPerf"),
        "ttft_ms": "AIPerf's TTFT ends at the first response, which may carry no content; "
        "ours at the first chunk with content",
    },
    "genai-perf": {
        "itl_ms": _TPOT_LIKE_ITL.format(tool="GenAI-Perf"),
        "ttft_ms": "GenAI-Perf's TTFT ends at the first response, which may carry no content; "
        "ours at the first chunk with content",
    },
    "llmperf": {
        "itl_ms": "llmperf's ITL is total time / output tokens per request (it includes TTFT)",
        "total_output_tokens": "llmperf counts tokens with a fixed Llama tokenizer",
    },
}

#: Where a tool's metric is, by definition, one of ours under another name: also compared.
EQUIVALENTS: Final[Mapping[str, Mapping[str, str]]] = {
    "guidellm": {"itl_ms": "tpot_ms"},
    "aiperf": {"itl_ms": "tpot_ms"},
    "genai-perf": {"itl_ms": "tpot_ms"},
}
SAMPLED_REASON: Final = "ours come from the requests the file keeps, a sample of the run"
COUNT_REASON: Final = "ours cover {ours:.0f} successful requests, the tool's {tool:.0f}"
UNKNOWN_REASON: Final = "no known definition difference: check units and which requests count"


def is_aggregates_only(tool_summary: Mapping[str, Any] | None) -> bool:
    """True when the run holds only the tool's aggregates (no per-request rows)."""
    return bool(tool_summary and tool_summary.get("aggregates_only"))


def our_figures(
    detail: Mapping[str, Any], itl: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """Our figures keyed like the tool's: ``ttft_ms.p50`` … and scalar names.

    ``detail`` is a ``run_detail`` row (``ttft_mean_ms``, ``ttft_p50_ms`` …, ``ok``,
    ``request_throughput`` …), ``itl`` a ``run_itl_summary`` row (``itl_mean_ms`` …).
    Figures that are missing, or come from no samples, are left out.
    """
    out: dict[str, float] = {}
    for metric in LATENCY_METRICS:
        prefix = metric.removesuffix("_ms")
        row = itl if metric == "itl_ms" else detail
        if row is None or not finite_number(row.get(f"{prefix}_n")):
            continue
        for stat in LATENCY_STATS:
            num = finite_number(row.get(f"{prefix}_{stat}_ms"))
            if num is not None:
                out[f"{metric}.{stat}"] = num
    has_requests = bool(finite_number(detail.get("requests")))
    for theirs, ours in SCALAR_METRICS.items():
        num = finite_number(detail.get(ours))
        if num is not None and (has_requests or ours == "duration_s"):
            out[theirs] = num
    return out


def tool_figures(tool_summary: Mapping[str, Any] | None) -> dict[str, float]:
    """The tool's own figures from ``tool_summary.metrics``, flattened like ``our_figures``, in
    display order (see ``_order``); stats other than mean and P50…P99 are left out."""
    metrics = (tool_summary or {}).get("metrics")
    if not isinstance(metrics, Mapping):
        return {}
    out: dict[str, float] = {}
    for name, value in sorted(metrics.items(), key=lambda item: _order(str(item[0]))):
        if isinstance(value, Mapping):
            for stat in LATENCY_STATS:
                num = finite_number(value.get(stat))
                if num is not None:
                    out[f"{name}.{stat}"] = num
        else:
            num = finite_number(value)
            if num is not None:
                out[str(name)] = num
    return out


def _order(metric: str) -> tuple[int, int, str]:
    """Latencies first (TTFT, TPOT, ITL, E2E), then known scalars, then the rest by name
    (the store keeps JSON keys sorted, so the file's order is lost anyway)."""
    if metric in LATENCY_METRICS:
        return (0, LATENCY_METRICS.index(metric), metric)
    scalars = list(SCALAR_METRICS)
    if metric in scalars:
        return (1, scalars.index(metric), metric)
    return (2, 0, metric)


def relative_diff(ours: float, tool: float) -> float:
    """(ours − tool) / |tool|; 0 when both are 0, infinite when only the tool's is 0."""
    if tool == 0.0:
        return 0.0 if ours == 0.0 else math.inf
    return (ours - tool) / abs(tool)


def _reason(source: str, tool_summary: Mapping[str, Any], metric: str) -> str:
    definitions = tool_summary.get("definitions")
    if isinstance(definitions, Mapping) and definitions.get(metric):
        return str(definitions[metric])
    return KNOWN_REASONS.get(source, {}).get(metric, "")


def compare(
    tool_summary: Mapping[str, Any] | None,
    ours: Mapping[str, float],
    source: str | None = None,
    *,
    threshold: float = THRESHOLD,
) -> pd.DataFrame:
    """One row per figure the tool reports: ours beside it, the difference, the known reason.

    Columns: metric, stat ("" for scalars), ours_metric (ours compared against: the same
    metric, or its equivalent under our definitions, e.g. GuideLLM's ITL vs our TPOT), ours
    (NaN when we have none), tool, diff_pct ((ours − tool) / |tool| × 100), differs
    (|diff| > ``threshold``), reason (the known definition difference; for a marked row also
    why the requests differ: a sampled file, or fewer/more successful requests than the tool
    counted; else a hint). ``source`` defaults to ``tool_summary["format"]``.
    """
    summary: Mapping[str, Any] = tool_summary or {}
    src = source or str(summary.get("format") or "")
    tool_values = tool_figures(summary)
    extra = SAMPLED_REASON if summary.get("per_request") == "sampled" else ""
    ours_n, tool_n = ours.get("completed"), tool_values.get("completed")
    if (
        not extra
        and ours_n is not None
        and tool_n is not None
        and abs(relative_diff(ours_n, tool_n)) > threshold
    ):
        extra = COUNT_REASON.format(ours=ours_n, tool=tool_n)
    rows: list[dict[str, Any]] = []
    equivalents = EQUIVALENTS.get(src, {})
    for key, tool_value in tool_values.items():
        metric, _, stat = key.partition(".")
        targets = [metric]
        if metric in equivalents:
            targets.append(equivalents[metric])
        for target in targets:
            our_key = f"{target}.{stat}" if stat else target
            our_value = ours.get(our_key)
            if target != metric:
                if our_value is None:
                    continue
                reason = f"same definition as our {target.removesuffix('_ms').upper()}"
            else:
                reason = _reason(src, summary, metric)
            diff = None if our_value is None else relative_diff(our_value, tool_value)
            differs = diff is not None and abs(diff) > threshold
            if differs and extra:
                reason = f"{reason}; {extra}" if reason else extra
            if differs and not reason:
                reason = UNKNOWN_REASON
            rows.append(
                {
                    "metric": metric,
                    "stat": stat,
                    "ours_metric": target,
                    "ours": math.nan if our_value is None else our_value,
                    "tool": tool_value,
                    "diff_pct": math.nan if diff is None else diff * 100.0,
                    "differs": differs,
                    "reason": reason,
                }
            )
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in COLUMNS})
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.astype({"ours": "float64", "tool": "float64", "diff_pct": "float64"})


def _dtype(column: str) -> str:
    if column in ("ours", "tool", "diff_pct"):
        return "float64"
    return "bool" if column == "differs" else "object"


def tool_aggregates(tool_summary: Mapping[str, Any] | None) -> pd.DataFrame:
    """The tool's own aggregates as a table (metric, stat, value, definition), for runs that
    hold nothing else."""
    summary: Mapping[str, Any] = tool_summary or {}
    src = str(summary.get("format") or "")
    rows = [
        {
            "metric": key.partition(".")[0],
            "stat": key.partition(".")[2],
            "value": value,
            "definition": _reason(src, summary, key.partition(".")[0]),
        }
        for key, value in tool_figures(summary).items()
    ]
    return pd.DataFrame(rows, columns=["metric", "stat", "value", "definition"]).astype(
        {"value": "float64"}
    )
