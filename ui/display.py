"""Pure formatting helpers for the dashboard: escaping, labels and display tables. No Streamlit.

Everything that turns a view model's data (``services.views``) into the text and tables a page
shows lives here, so that pages stay thin and the shaping is unit-testable. Data (run names,
errors) is user input: anything that ends up in Markdown goes through ``md_escape``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

import pandas as pd

from analysis.metrics import low_confidence
from analysis.precision import precision_label

_MD_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")

#: How the dashboard names a metric (latencies by their short name, figures in words).
METRIC_LABELS: Final[Mapping[str, str]] = {
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
    "itl_ms": "ITL",
    "e2e_ms": "E2E",
    "request_throughput": "Request throughput (req/s)",
    "output_throughput": "Output throughput (tok/s)",
    "total_token_throughput": "Total token throughput (tok/s)",
    "request_goodput": "Request goodput (req/s)",
    "input_throughput": "Input throughput (tok/s)",
    "completed": "Completed requests",
    "failed": "Failed requests",
    "error_rate": "Error rate",
    "total_input_tokens": "Input tokens",
    "total_output_tokens": "Output tokens",
    "duration_s": "Duration (s)",
    "concurrency": "Concurrency",
}

EMPTY_STORE_COMMANDS = (
    "servescope demo",
    "servescope bench --endpoint http://127.0.0.1:8000 --workload mixed --concurrency 1,8,32",
    "servescope sim --port 8000 --gpu H100-SXM-80GB --model llama-3.1-8b",
)


def md_escape(text: object) -> str:
    """``text`` made inert for Streamlit Markdown: every ASCII punctuation backslash-escaped,
    line breaks flattened (no headings, links, HTML, emoji shortcodes, colours or LaTeX)."""
    flat = " ".join(str(text).split())
    return _MD_SPECIAL.sub(r"\\\1", flat)


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def fmt_number(value: Any, digits: int = 1, unit: str = "") -> str:
    """``12.345 → "12.3"``; ``None``/NaN → ``"—"``; thousands separated; unit appended."""
    if is_missing(value):
        return "—"
    text = f"{float(value):,.{digits}f}"
    return f"{text} {unit}" if unit else text


def fmt_count(value: Any) -> str:
    return "—" if is_missing(value) else f"{int(value):,}"


def load_label(arrival: Any, concurrency: Any, target_rate: Any) -> str:
    """How a run loaded the server: ``"c=8"``, ``"4 req/s poisson"``, ``"∞ req/s"``."""
    if not is_missing(concurrency) and (is_missing(arrival) or arrival == "concurrency"):
        return f"c={int(concurrency)}"
    if not is_missing(target_rate):
        rate = f"{float(target_rate):g} req/s"
        return f"{rate} {arrival}" if not is_missing(arrival) and arrival != "constant" else rate
    if not is_missing(concurrency):
        return f"c={int(concurrency)}"
    if not is_missing(arrival) and arrival in ("poisson", "gamma", "constant"):
        return "∞ req/s"
    return "—"


def client_bound_label(flag: Any, reason: Any) -> str:
    """The client-bound flag as shown in tables: ``"⚠ client-bound: <reason>"`` or ``""``."""
    if is_missing(flag) or not bool(flag):
        return ""
    return "⚠ client-bound" + ("" if is_missing(reason) or not reason else f": {reason}")


def run_label(row: Mapping[str, Any]) -> str:
    """One line naming a run in a picker: name · framework · model · load (plain text)."""

    def text(*keys: str) -> str:
        for key in keys:
            value = row.get(key)
            if not is_missing(value) and value != "":
                return str(value)
        return "?"

    parts = [
        text("name", "run_id"),
        text("framework"),
        text("model"),
        load_label(row.get("arrival"), row.get("concurrency"), row.get("target_rate")),
    ]
    if client_bound_label(row.get("client_bound"), None):
        parts.append("⚠ client-bound")
    return " · ".join(parts)


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``df`` as dicts keyed by column name."""
    return [{str(k): v for k, v in rec.items()} for rec in df.to_dict("records")]


def first_row(df: pd.DataFrame) -> dict[str, Any]:
    """The first row of ``df`` as a dict ({} when empty)."""
    rows = records(df.head(1))
    return rows[0] if rows else {}


def run_choices(latest: pd.DataFrame, first: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Run id → picker label for every row of ``latest_runs``, in order; ``first``: a run's row
    (with its ``run_id``) offered before them, e.g. an older run a link asked for."""
    choices = {str(row["run_id"]): run_label(row) for row in records(latest)}
    if first is not None:
        choices = {str(first["run_id"]): run_label(first), **choices}
    return choices


def _text(value: Any) -> str:
    return "—" if is_missing(value) or value == "" else str(value)


def overview_table(overview: pd.DataFrame) -> pd.DataFrame:
    """``store_overview`` as displayed: source, framework, model, runs, requests, last run."""
    out = pd.DataFrame(
        {
            "source": overview["source"].map(_text),
            "framework": overview["framework"].map(_text),
            "model": overview["model"].map(_text),
            "runs": overview["runs"].astype("int64"),
            "requests": overview["requests"].astype("int64"),
            "last run (UTC)": pd.to_datetime(overview["last_started_at"], unit="s", utc=True)
            .dt.tz_localize(None)
            .dt.floor("s"),
        }
    )
    return out.reset_index(drop=True)


def _rounded(series: pd.Series, digits: int = 1) -> pd.Series:
    return pd.to_numeric(series).astype("float64").round(digits)


def runs_table(latest: pd.DataFrame) -> pd.DataFrame:
    """``latest_runs`` as displayed, one row per run in the same order (row i ↔ run i).

    The client-bound flag comes right after the name so it cannot be missed.
    """
    gpu = [
        _text(name) if is_missing(count) or int(count) <= 1 else f"{int(count)}× {_text(name)}"
        for name, count in zip(latest["gpu_name"], latest["gpu_count"], strict=True)
    ]
    return pd.DataFrame(
        {
            "name": latest["name"].where(latest["name"].notna(), latest["run_id"]).map(_text),
            "client-bound": [
                client_bound_label(f, r)
                for f, r in zip(latest["client_bound"], latest["client_bound_reason"], strict=True)
            ],
            "source": latest["source"].map(_text),
            "framework": [
                _text(f) if is_missing(v) or v == "" else f"{_text(f)} {v}"
                for f, v in zip(latest["framework"], latest["framework_version"], strict=True)
            ],
            "model": latest["model"].map(_text),
            "precision": [
                precision_label(w, kv) or ""
                for w, kv in zip(latest["precision"], latest["kv_cache_dtype"], strict=True)
            ],
            "gpu": gpu,
            "workload": latest["workload"].map(_text),
            "load": [
                load_label(a, c, t)
                for a, c, t in zip(
                    latest["arrival"], latest["concurrency"], latest["target_rate"], strict=True
                )
            ],
            "requests": latest["requests"].astype("int64"),
            "per-request data": [
                "aggregates only" if flag else ""
                for flag in (
                    latest["aggregates_only"]
                    if "aggregates_only" in latest
                    else [False] * len(latest)
                )
            ],
            "errors": latest["errors"].astype("int64"),
            "output tok/s": _rounded(latest["output_throughput"]),
            "req/s": _rounded(latest["request_throughput"], 2),
            "TTFT P50 ms": _rounded(latest["ttft_p50_ms"]),
            "TTFT P99 ms": _rounded(latest["ttft_p99_ms"]),
            "TPOT P50 ms": _rounded(latest["tpot_p50_ms"], 2),
            "TPOT P99 ms": _rounded(latest["tpot_p99_ms"], 2),
        }
    ).reset_index(drop=True)


LATENCY_ROWS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft"),
    ("TPOT", "tpot"),
    ("ITL (pooled)", "itl"),
    ("E2E", "e2e"),
    ("client lag", "lag"),
)


def latency_table(detail: Mapping[str, Any], itl: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Percentile table of one run (ms), each row with its sample count and the P99 confidence.

    ``detail`` is a ``run_detail`` row, ``itl`` a ``run_itl_summary`` row.
    """
    merged: dict[str, Any] = dict(detail)
    if itl is not None:
        merged.update(itl)
    rows = []
    for label, prefix in LATENCY_ROWS:
        raw_n = merged.get(f"{prefix}_n")
        n = 0 if raw_n is None or is_missing(raw_n) else int(raw_n)
        row: dict[str, Any] = {"metric": label, "samples": n}
        for stat in ("mean", "p50", "p90", "p95", "p99"):
            value = merged.get(f"{prefix}_{stat}_ms")
            row[stat.upper() if stat != "mean" else "mean"] = (
                None if value is None or is_missing(value) else round(float(value), 2)
            )
        row["P99 confidence"] = "—" if n == 0 else ("low (<100)" if low_confidence(99, n) else "ok")
        rows.append(row)
    return pd.DataFrame(rows)


def summary_figures(detail: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, help) for the headline metrics of one run (labels are constants)."""

    def get(key: str) -> Any:
        return detail.get(key)

    requests, ok, errors = get("requests"), get("ok"), get("errors")
    error_pct = (
        None
        if is_missing(requests) or not requests or is_missing(errors)
        else 100.0 * float(errors) / float(requests)
    )
    interactivity = get("tpot_p50_ms")
    interactivity = (
        None if is_missing(interactivity) or not interactivity else 1000.0 / float(interactivity)
    )
    return [
        ("Requests", f"{fmt_count(ok)} ok / {fmt_count(requests)}", "successful / all requests"),
        (
            "Errors",
            f"{fmt_count(errors)} ({fmt_number(error_pct)}%)",
            "error, timeout and cancelled requests",
        ),
        ("Duration", fmt_number(get("duration_s"), 1, "s"), "run wall-clock duration"),
        (
            "Output throughput",
            fmt_number(get("output_throughput"), 1, "tok/s"),
            "output tokens of successful requests / duration",
        ),
        (
            "Per GPU",
            fmt_number(get("output_throughput_per_gpu"), 1, "tok/s"),
            "output throughput / gpu_count",
        ),
        (
            "Request throughput",
            fmt_number(get("request_throughput"), 2, "req/s"),
            "successful requests / duration",
        ),
        (
            "Interactivity per user",
            fmt_number(interactivity, 1, "tok/s"),
            "1000 / median TPOT: the streaming speed one user sees",
        ),
    ]


def percentile_marks(summary: Mapping[str, Any], metric: str) -> dict[str, float | None]:
    """P50/P99 of ``metric`` (e.g. ``ttft_ms``) from a ``run_detail``/``run_itl_summary`` row."""
    prefix = metric.removesuffix("_ms")
    marks: dict[str, float | None] = {}
    for name in ("P50", "P99"):
        value = summary.get(f"{prefix}_{name.lower()}_ms")
        marks[name] = None if value is None or is_missing(value) else float(value)
    return marks
