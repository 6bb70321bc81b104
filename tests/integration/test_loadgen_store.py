"""``servescope bench`` end to end: worker processes, a real DuckDB file, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from errors import ConfigError, EndpointError, InputError
from sim.mockserver import MockServer
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]


def test_sweep_into_duckdb_with_two_workers(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'b.duckdb'}")
    with MockServer(ttft_ms=5, itl_ms=2) as url:
        cfg = BenchConfig(
            endpoint=url + "/v1",
            workload="short-in-short-out",
            concurrency=(2, 4),
            requests=24,
            max_tokens=12,
            warmup=2,
            workers=2,
            engine_params={"max-num-seqs": "64"},
            api_key_env="MOCK_KEY",
            slo="interactive-chat",
            name="sweep test",
        )
        run_ids = run_benchmark(cfg, store, progress=False, env={"MOCK_KEY": "sk-secret-123"})
    assert len(run_ids) == 2
    # one invocation's levels share a random 8-character prefix, distinct from other
    # invocations' (DuckDB prunes by the first 8 bytes of a text column)
    assert run_ids[0][:9] == run_ids[1][:9] and run_ids[0][8] == "-"
    assert all(len(set(r[:8]) - set("0123456789abcdef")) == 0 for r in run_ids)
    runs = store.read_df("select * from runs order by concurrency")
    assert list(runs.concurrency) == [2, 4]
    assert set(runs.status) == {"completed"} and set(runs.framework) == {"mock"}
    assert set(runs.model) == {"mock-model"} and set(runs.source) == {"servescope"}
    assert list(runs.name) == ["sweep test c=2", "sweep test c=4"]
    assert all(runs.duration_s > 0) and all(runs.achieved_rate > 0)
    assert json.loads(runs.engine_params[0]) == {"max_batch_size": 64}
    params = json.loads(runs.client_params[0])
    assert params["auth"] is True and params["slo"] == "interactive-chat"
    assert params["calibration"]["source"] == "server-usage"
    for row in runs.astype(str).itertuples():
        assert "sk-secret-123" not in " ".join(map(str, row))
    reqs = store.read_df("select * from requests where run_id = :r", {"r": run_ids[0]})
    assert len(reqs) == 24 and set(reqs.status) == {"ok"}
    assert sorted(reqs.seq) == list(range(24))  # worker w sends requests w, w+2, …
    assert set(reqs.output_tokens) == {12} and not reqs.output_tokens_estimated.any()
    # a response whose chunks all land in one socket read has E2E == TTFT (TPOT 0): what the
    # client saw, and it happens on a loaded machine; the typical request streams
    assert (reqs.tpot_ms >= 0).all() and (reqs.e2e_ms >= reqs.ttft_ms).all()
    assert reqs.tpot_ms.median() > 0
    # prompts synthesised without a tokenizer land near the workload's lengths (~128 tokens)
    assert 70 < reqs.input_tokens.median() < 200
    gaps = store.read_df(
        "select count(*) as n from token_gaps where run_id = :r", {"r": run_ids[0]}
    )
    assert int(gaps.n[0]) == 24 * 11


def test_rate_run_and_dataset(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": f"question {i}", "max_tokens": 4}) for i in range(5))
    )
    store = open_store(f"duckdb:///{tmp_path / 'r.duckdb'}")
    with MockServer(ttft_ms=2, itl_ms=1) as url:
        cfg = BenchConfig(
            endpoint=url,
            api="completions",
            dataset=str(data),
            rate=(40.0,),
            arrival="constant",
            requests=12,
            run_id="fixed-id",
        )
        assert run_benchmark(cfg, store, progress=False) == ["fixed-id-r40"]
    run = store.read_df("select * from runs")
    assert run.arrival[0] == "constant" and run.target_rate[0] == 40.0
    assert run.workload[0] == "dataset:d.jsonl"
    assert run.achieved_rate[0] == pytest.approx(40.0, rel=0.2)
    reqs = store.read_df("select status, output_tokens from requests")
    assert len(reqs) == 12 and set(reqs.output_tokens) == {4}


def test_input_errors_before_any_request(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'e.duckdb'}")
    base = {"endpoint": "http://127.0.0.1:9", "concurrency": (1,), "requests": 1}
    with pytest.raises(ConfigError, match="short-in-short-out"):
        run_benchmark(BenchConfig(workload="nope", **base), store, progress=False)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="NOT_SET_VAR"):
        run_benchmark(
            BenchConfig(workload="mixed", api_key_env="NOT_SET_VAR", **base),  # type: ignore[arg-type]
            store,
            progress=False,
            env={},
        )
    with pytest.raises(EndpointError, match="cannot reach"):
        run_benchmark(BenchConfig(workload="mixed", **base), store, progress=False)  # type: ignore[arg-type]
    with MockServer() as url, pytest.raises(InputError, match="mock-model"):
        run_benchmark(
            BenchConfig(
                workload="mixed", endpoint=url, model="other", concurrency=(1,), requests=1
            ),
            store,
            progress=False,
        )


def test_ctrl_c_keeps_what_completed(tmp_path: Path) -> None:
    db = tmp_path / "i.duckdb"
    with MockServer(ttft_ms=5, itl_ms=20) as url:
        server = MockServer.__new__(MockServer)
        server.url = url
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli",
                "bench",
                "--endpoint",
                url,
                "--workload",
                "short-in-short-out",
                "--concurrency",
                "4",
                "--requests",
                "10000",
                "--max-tokens",
                "10",
                "--db",
                f"duckdb:///{db}",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while server.stats()["completed"] < 30:  # poll the server, not the clock
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "no progress"
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err.decode()
    store = open_store(f"duckdb:///{db}")
    run = store.read_df("select status, ended_at, duration_s from runs")
    assert list(run.status) == ["interrupted"] and run.duration_s[0] > 0
    reqs = store.read_df("select status, count(*) as n from requests group by 1")
    counts = dict(zip(reqs.status, reqs.n, strict=True))
    assert counts.get("ok", 0) >= 20
    assert set(counts) <= {"ok", "cancelled"}


def test_a_store_locked_at_the_end_spools_the_runs_and_says_so(
    tmp_path: Path,
    duckdb_lock: Callable[[Path], AbstractContextManager[None]],
    ingest_spool_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """Two levels; the store is locked from the middle of the first to the end. Bench exits 4,
    prints both run ids and the command that stores the spooled rows; after it, the store
    holds both runs, ended, with every request."""
    db = tmp_path / "l.duckdb"
    servescope = Path(sys.executable).parent / "servescope"
    with MockServer(ttft_ms=5, itl_ms=10) as url:
        server = MockServer.__new__(MockServer)
        server.url = url
        proc = subprocess.Popen(
            [
                str(servescope),
                "bench",
                "--endpoint",
                url,
                "--workload",
                "short-in-short-out",
                "--concurrency",
                "1,2",
                "--requests",
                "40",
                "--max-tokens",
                "10",
                "--metrics-url",
                "off",
                "--no-gpu",
                "--db",
                f"duckdb:///{db}",
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT), "SERVESCOPE_LOCK_TIMEOUT_S": "0.5"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 90
            while server.stats()["completed"] < 8:  # poll the server, not the clock
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "no progress"
            with duckdb_lock(db):
                out, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 4, err[-3000:]
    run_ids = out.split()
    assert len(run_ids) == 2
    assert f"ingest-spool --db duckdb:///{db}" in err, err[-3000:]
    assert f"{db}.spool" in err
    spooled = list(tmp_path.glob("l.duckdb.spool/*.json"))
    assert spooled
    done = ingest_spool_cli(f"duckdb:///{db}")
    assert done.returncode == 0, done.stderr
    assert f"({len(spooled)} batch(es))" in done.stdout
    store = open_store(f"duckdb:///{db}")
    runs = store.read_df("select run_id, status, duration_s from runs order by run_id")
    assert list(runs.run_id) == sorted(run_ids)
    assert set(runs.status) == {"completed"} and (runs.duration_s > 0).all()
    reqs = store.read_df(
        "select run_id, count(*) as n from requests where status = 'ok' group by 1"
    )
    assert dict(zip(reqs.run_id, reqs.n, strict=True)) == {r: 40 for r in run_ids}
    assert not list(tmp_path.glob("l.duckdb.spool/*.json"))
