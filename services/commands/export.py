"""``servescope export RUN_ID --format csv|parquet|vllm-json [--out PATH]``.

``vllm-json`` writes vLLM's ``--save-detailed`` layout (aggregates in ms, per-request arrays in
seconds) so that a ServeScope run can be diffed with vLLM's own tooling — and imported back.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from errors import InputError

if TYPE_CHECKING:
    from store.db import Store

EXPORT_FORMATS = ("csv", "parquet", "vllm-json")
PERCENTILES = (50, 90, 95, 99)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a run's requests as CSV, Parquet or vLLM's detailed result JSON",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--format", choices=EXPORT_FORMATS, default="csv")
    p.add_argument("--out", help="output file ('-' for stdout; default: RUN_ID.<ext>)")
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=run)


def _stats(values: np.ndarray, name: str) -> dict[str, float]:
    if values.size == 0:
        return {}
    out = {
        f"mean_{name}_ms": float(np.mean(values)),
        f"median_{name}_ms": float(np.median(values)),
        f"std_{name}_ms": float(np.std(values)),
    }
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(values, p))
    return out


def vllm_json(run: dict[str, Any], requests: pd.DataFrame, gaps: pd.DataFrame) -> dict[str, Any]:
    """A run as vLLM's ``--save-detailed`` result (failed requests: ttft 0, no gaps, an error)."""
    ok = (requests["status"] == "ok").to_numpy()
    n = len(requests)
    by_seq: dict[int, list[float]] = {}
    if len(gaps):
        g = gaps.sort_values(["seq", "idx"])
        for seq, group in g.groupby("seq", sort=True):
            by_seq[int(str(seq))] = (group["gap_ms"].to_numpy(dtype="float64") / 1000.0).tolist()
    seqs = requests["seq"].astype("int64").tolist()

    def col(name: str) -> np.ndarray:
        return pd.to_numeric(requests[name], errors="coerce").to_numpy(dtype="float64")

    ttft, e2e, out_tok, in_tok, sent = (
        col("ttft_ms"),
        col("e2e_ms"),
        col("output_tokens"),
        col("input_tokens"),
        col("sent_at"),
    )
    itls = [by_seq.get(s, []) if ok[i] else [] for i, s in enumerate(seqs)]
    started = run.get("started_at")
    if started is None and np.isfinite(sent).any():
        started = float(np.nanmin(sent))
    ended = run.get("ended_at")
    if ended is None and np.isfinite(sent + e2e / 1000.0).any():
        ended = float(np.nanmax(sent + e2e / 1000.0))
    duration = run.get("duration_s") or (
        (ended - started) if started is not None and ended is not None else None
    )
    completed = int(ok.sum())
    ok_ttft, ok_e2e = ttft[ok & np.isfinite(ttft)], e2e[ok & np.isfinite(e2e)]
    tpot_mask = ok & np.isfinite(out_tok) & (out_tok > 1) & np.isfinite(e2e) & np.isfinite(ttft)
    tpots = (e2e[tpot_mask] - ttft[tpot_mask]) / (out_tok[tpot_mask] - 1)
    all_gaps = np.asarray([x * 1000.0 for lst in itls for x in lst], dtype="float64")
    total_in = int(np.nansum(in_tok[ok])) if ok.any() else 0
    total_out = int(np.nansum(out_tok[ok])) if ok.any() else 0
    rate = run.get("target_rate")
    doc: dict[str, Any] = {
        "date": time.strftime(
            "%Y%m%d-%H%M%S", time.gmtime(ended if ended is not None else time.time())
        ),
        "backend": "servescope",
        "endpoint_type": "servescope",
        "label": run.get("name"),
        "model_id": run.get("model"),
        "tokenizer_id": run.get("model"),
        "num_prompts": n,
        "request_rate": "inf" if rate is None else rate,
        "burstiness": run.get("burstiness") if run.get("burstiness") is not None else 1.0,
        "max_concurrency": run.get("concurrency"),
        "duration": duration,
        "completed": completed,
        "failed": n - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration if duration else None,
        "output_throughput": total_out / duration if duration else None,
        "total_token_throughput": (total_in + total_out) / duration if duration else None,
        **_stats(ok_ttft, "ttft"),
        **_stats(tpots, "tpot"),
        **_stats(all_gaps, "itl"),
        **_stats(ok_e2e, "e2el"),
        "servescope_run_id": run.get("run_id"),
        "input_lens": [None if not math.isfinite(v) else int(v) for v in in_tok],
        "output_lens": [
            0 if not ok[i] or not math.isfinite(v) else int(v) for i, v in enumerate(out_tok)
        ],
        "ttfts": [
            float(t) / 1000.0 if ok[i] and math.isfinite(t) else 0.0 for i, t in enumerate(ttft)
        ],
        "itls": itls,
        "latencies": [
            float(e) / 1000.0 if ok[i] and math.isfinite(e) else 0.0 for i, e in enumerate(e2e)
        ],
        "start_times": [float(s) if math.isfinite(s) else None for s in sent],
        "generated_texts": [""] * n,
        "errors": [
            "" if ok[i] else str(requests["error"].iloc[i] or requests["status"].iloc[i])
            for i in range(n)
        ],
    }
    return doc


def table_bytes(rows: pd.DataFrame, fmt: str) -> bytes:
    """``rows`` as a CSV (UTF-8) or Parquet file's bytes: the one serialisation of a run's
    request rows, for ``servescope export`` and the Data page's download."""
    if fmt == "csv":
        return rows.to_csv(index=False).encode("utf-8")
    buffer = io.BytesIO()
    rows.to_parquet(buffer, index=False)
    return buffer.getvalue()


def export_run(store: Store, run_id: str, fmt: str, out: str | None) -> str:
    """Write the export; returns where it went."""
    from store import request_rows, runs_table

    if fmt not in EXPORT_FORMATS:
        raise InputError(
            f"export format {fmt!r} is unknown; choose one of: {', '.join(EXPORT_FORMATS)}"
        )
    run = runs_table.run_record(store, run_id)
    if run is None:
        raise InputError(
            f"run {run_id!r} is not in the store {store.url}",
            hint="`servescope db runs` lists the stored runs (so does the Data page)",
        )
    requests = request_rows.run_requests_all(store, run_id)
    ext = {"csv": "csv", "parquet": "parquet", "vllm-json": "json"}[fmt]
    target = out or f"{run_id}.{ext}"
    if fmt == "parquet" and target == "-":
        raise InputError("Parquet cannot go to stdout", hint="give --out FILE.parquet")
    if fmt == "csv":
        text = table_bytes(requests, "csv").decode("utf-8")
    elif fmt == "vllm-json":
        gaps = request_rows.run_token_gaps(store, run_id)
        text = json.dumps(vllm_json(run, requests, gaps), allow_nan=False, default=str)
    else:
        Path(target).write_bytes(table_bytes(requests, "parquet"))
        return target
    if target == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")
    return target


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope export``: write the run's export, say where it went."""
    from store.lifecycle import open_store

    store = open_store(args.db)
    where = export_run(store, args.run_id, args.format, args.out)
    if where != "-":
        print(f"exported run {args.run_id} ({args.format}) to {where}", file=sys.stderr)
    return 0
