"""export --format vllm-json → import gives the same counts and percentiles; CSV and Parquet
exports hold every request row. The run is built through store.ingest directly (as
`servescope bench` stores it), with errors and token gaps."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.importers import import_paths
from services.commands import export
from store import ingest, request_rows, runs_table
from store.db import Store
from store.lifecycle import open_store

N = 300


def _seed(store: Store) -> None:
    rng = np.random.default_rng(7)
    out = rng.integers(1, 40, N)
    ttft = rng.gamma(2.0, 40.0, N)
    status = np.where(rng.random(N) < 0.05, "error", "ok")
    gaps_rows, e2e = [], []
    for i in range(N):
        g = rng.gamma(3.0, 3.0, int(out[i]) - 1) if status[i] == "ok" else np.array([])
        e2e.append(ttft[i] + g.sum())
        gaps_rows += [
            {"run_id": "bench-1", "seq": i, "idx": j, "gap_ms": float(x)} for j, x in enumerate(g)
        ]
    sent = 1_750_000_000.0 + np.cumsum(rng.exponential(0.05, N))
    ok = status == "ok"
    req = pd.DataFrame(
        {
            "run_id": "bench-1",
            "seq": np.arange(N),
            "sent_at": sent,
            "input_tokens": rng.integers(10, 500, N),
            "output_tokens": np.where(ok, out, 0),
            "ttft_ms": np.where(ok, ttft, np.nan),
            "e2e_ms": np.where(ok, e2e, np.nan),
            "tpot_ms": np.where(
                ok & (out > 1), (np.array(e2e) - ttft) / np.maximum(out - 1, 1), np.nan
            ),
            "status": status,
            "error": np.where(ok, None, "HTTP 500"),
        }
    )
    ingest.replace_run(
        store,
        {
            "run_id": "bench-1",
            "name": "sim c=8",
            "source": "servescope",
            "framework": "sim",
            "model": "llama-3.1-8b",
            "concurrency": 8,
            "arrival": "concurrency",
            "started_at": float(sent[0]),
            "ended_at": float(sent[-1] + 5),
            "status": "completed",
        },
        req,
        pd.DataFrame(gaps_rows),
    )


def _summary(store: Store, run_id: str) -> dict[str, float]:
    req = request_rows.run_requests_all(store, run_id)
    ok = req[req["status"] == "ok"]
    gaps = request_rows.run_token_gaps(store, run_id)["gap_ms"].to_numpy(float)
    out: dict[str, float] = {"n": len(req), "ok": len(ok), "gaps": len(gaps)}
    for col in ("ttft_ms", "e2e_ms", "tpot_ms"):
        vals = ok[col].dropna().to_numpy(float)
        out[f"{col}_count"] = len(vals)
        for q in (50, 90, 99):
            out[f"{col}_p{q}"] = float(np.percentile(vals, q))
    for q in (50, 99):
        out[f"itl_p{q}"] = float(np.percentile(gaps, q))
    return out


def test_vllm_json_round_trip(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'a.duckdb'}")
    _seed(store)
    path = tmp_path / "bench-1.json"
    export.export_run(store, "bench-1", "vllm-json", str(path))
    doc = json.loads(path.read_text())
    assert doc["num_prompts"] == N and len(doc["itls"]) == N
    other = open_store(f"duckdb:///{tmp_path / 'b.duckdb'}")
    [report] = import_paths(other, [path])
    assert report.error is None and report.format == "vllm-bench"
    ours, back = _summary(store, "bench-1"), _summary(other, report.run_ids[0])
    assert back == pytest.approx(ours, rel=1e-9)
    # the aggregates written into the file agree with the imported rows too
    assert doc["p99_ttft_ms"] == pytest.approx(ours["ttft_ms_p99"])
    run = runs_table.run_record(other, report.run_ids[0])
    assert run is not None and run["model"] == "llama-3.1-8b" and run["concurrency"] == 8
    sent_a = request_rows.run_requests_all(store, "bench-1")["sent_at"].to_numpy(float)
    sent_b = request_rows.run_requests_all(other, report.run_ids[0])["sent_at"].to_numpy(float)
    assert np.allclose(sent_a, sent_b)  # epoch start_times are kept as they are


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_tabular_exports_hold_every_row(tmp_path: Path, fmt: str) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'a.duckdb'}")
    _seed(store)
    out = tmp_path / f"r.{fmt}"
    parser = argparse.ArgumentParser()
    export.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "export",
            "bench-1",
            "--format",
            fmt,
            "--out",
            str(out),
            "--db",
            f"duckdb:///{tmp_path / 'a.duckdb'}",
        ]
    )
    assert export.run(args) == 0
    df = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
    assert len(df) == N and set(df["status"]) == {"ok", "error"}


def test_export_unknown_run_names_it(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'a.duckdb'}")
    with pytest.raises(Exception, match="run 'nope' is not in the store"):
        export.export_run(store, "nope", "csv", str(tmp_path / "x.csv"))
