"""Every importable format, registered in one dict (detection order = dict order)."""

from __future__ import annotations

from errors import ImportFormatError

from . import aiperf, genai_perf, guidellm, llmperf, sglang, vllm
from .base import Format, same_folder
from .model import Document

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            vllm.NAME,
            "vllm-bench",
            "vLLM bench serve / benchmark_serving.py result JSON",
            vllm.detect,
            vllm.parse,
        ),
        Format(
            sglang.NAME,
            "sglang-bench",
            "SGLang bench_serving JSONL (one run per line)",
            sglang.detect,
            sglang.parse,
        ),
        Format(
            guidellm.NAME,
            "guidellm",
            "GuideLLM benchmarks.json / .yaml (0.1–0.3, 0.4–0.6, 0.7+)",
            guidellm.detect,
            guidellm.parse,
        ),
        Format(
            aiperf.SUMMARY_JSON,
            "aiperf",
            "AIPerf profile_export_aiperf.json",
            aiperf.detect_summary_json,
            aiperf.parse_summary,
            "summary",
            "aiperf",
            same_folder,
        ),
        Format(
            aiperf.SUMMARY_CSV,
            "aiperf",
            "AIPerf profile_export_aiperf.csv",
            aiperf.detect_summary_csv,
            aiperf.parse_summary,
            "summary",
            "aiperf",
            same_folder,
        ),
        Format(
            aiperf.RECORDS_JSONL,
            "aiperf",
            "AIPerf profile_export.jsonl (per request)",
            aiperf.detect_records_jsonl,
            aiperf.parse_records,
            "records",
            "aiperf",
            same_folder,
        ),
        Format(
            aiperf.RECORDS_CSV,
            "aiperf",
            "AIPerf profile_export_records.csv (per request)",
            aiperf.detect_records_csv,
            aiperf.parse_records,
            "records",
            "aiperf",
            same_folder,
        ),
        Format(
            aiperf.GPU,
            "aiperf",
            "AIPerf gpu_telemetry_export.jsonl → GPU samples",
            aiperf.detect_gpu,
            aiperf.parse_gpu,
            "samples",
        ),
        Format(
            aiperf.SERVER,
            "aiperf",
            "AIPerf server_metrics_export.jsonl → engine samples",
            aiperf.detect_server,
            aiperf.parse_server,
            "samples",
        ),
        Format(
            genai_perf.SUMMARY_JSON,
            "genai-perf",
            "GenAI-Perf profile_export_genai_perf.json",
            genai_perf.detect_summary_json,
            genai_perf.parse_summary,
            "summary",
            "genai-perf",
            same_folder,
        ),
        Format(
            genai_perf.SUMMARY_CSV,
            "genai-perf",
            "GenAI-Perf profile_export_genai_perf.csv",
            genai_perf.detect_summary_csv,
            genai_perf.parse_summary,
            "summary",
            "genai-perf",
            same_folder,
        ),
        Format(
            genai_perf.RAW,
            "genai-perf",
            "GenAI-Perf / perf_analyzer profile_export.json",
            genai_perf.detect_raw,
            genai_perf.parse_raw,
            "records",
            "genai-perf",
            same_folder,
        ),
        Format(
            llmperf.SUMMARY,
            "llmperf",
            "llmperf *_summary.json",
            llmperf.detect_summary,
            llmperf.parse,
            "summary",
            "llmperf",
            llmperf.pair_key,
        ),
        Format(
            llmperf.RESPONSES,
            "llmperf",
            "llmperf *_individual_responses.json",
            llmperf.detect_responses,
            llmperf.parse,
            "records",
            "llmperf",
            llmperf.pair_key,
        ),
    )
}


def format_names() -> list[str]:
    return list(FORMATS)


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise ImportFormatError(
            "--format", f"format {name!r} is not registered; available: {', '.join(FORMATS)}"
        ) from None


def _what(doc: Document) -> str:
    if doc.kind == "csv":
        header = ",".join(doc.tables[0][0][1])
        return f"a CSV table with header {header[:70]!r}"
    obj = doc.first
    if isinstance(obj, dict):
        keys = ", ".join(str(k).encode("unicode_escape").decode()[:30] for k in list(obj)[:6])
        kind = "JSON lines of objects" if doc.kind == "jsonl" else f"a {doc.kind.upper()} object"
        return f"{kind} with keys [{keys}{', …' if len(obj) > 6 else ''}]"
    if isinstance(obj, list):
        return f"a {doc.kind.upper()} array of {len(obj)} item(s)"
    return f"a {doc.kind.upper()} {type(obj).__name__}"


def detect(doc: Document) -> Format:
    """The format of ``doc`` by its content; an error names what was found and the choices."""
    for fmt in FORMATS.values():
        if fmt.detect(doc):
            return fmt
    raise ImportFormatError(
        doc.source.path,
        f"not a recognised result file: found {_what(doc)}; expected one of: "
        + ", ".join(FORMATS)
        + " (see `servescope import --help`)",
    )
