"""A real sweep: ``servescope sweep examples/llamacpp-sweep.toml`` — llama.cpp's llama-server
serving SmolLM2-135M over --parallel × --ctx-size (2 × 2), each point launched, measured at
small fixed load levels, stopped, and a recommendation printed.

Needs the binary and the GGUF test_llamacpp.py finds (skipped without them; failed under
SERVESCOPE_TEST_STRICT=1, as ``make test-all`` runs it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from test_llamacpp import _unavailable, find_model, find_server

from store.lifecycle import open_store
from store.sweeps import sweep_points

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_llamacpp_sweep_launches_measures_and_stops_each_point(
    tmp_path: Path, load_tool: Callable[[str], ModuleType]
) -> None:
    binary = find_server()
    if binary is None:
        _unavailable("llama-server not found: run tools/build_llama_server.sh")
    model = find_model(load_tool)
    if model is None:
        _unavailable("SmolLM2 GGUF not found: run tools/llama_model.py")
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    env = dict(
        os.environ,
        SERVESCOPE_LLAMA_SERVER=str(binary),
        SERVESCOPE_LLAMA_MODEL=str(model),
        NO_COLOR="1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "cli", "sweep", str(REPO / "examples" / "llamacpp-sweep.toml"),
         "--db", db, "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert "Recommended: " in done.stdout, done.stdout

    store = open_store(db)
    try:
        [sweep_id] = store.read_df("SELECT sweep_id FROM sweeps")["sweep_id"]
        points = sweep_points(store, sweep_id)
        runs = store.read_df(
            "SELECT run_id, status, framework, engine_params, client_params, sweep_id FROM runs"
        )
    finally:
        store.dispose()
    assert len(points) == 4
    assert set(points["status"]) == {"completed"}, points[["params", "status", "error"]]
    grid = {(p["max_batch_size"], p["ctx_size"]) for p in points["params"]}
    assert grid == {(1, 2048), (1, 4096), (2, 2048), (2, 4096)}
    for rec in points.to_dict("records"):
        cmd = rec["launch_command"]
        assert cmd.startswith(str(binary))
        assert f"-np {rec['params']['max_batch_size']}" in cmd
        assert f"-c {rec['params']['ctx_size']}" in cmd
        assert rec["framework"] == "llama.cpp"
        assert rec["runs_used"] == 2
        assert "slot" in rec["log_tail"]  # the server's own log, kept
        # stopped: the port it served on is free again
        port = int(cmd.split("--port ")[1].split()[0])
        with socket.socket() as s:  # nothing listens (TIME_WAIT connections aside)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    assert len(runs) == 8  # 4 points × 2 load levels
    assert set(runs["sweep_id"]) == {sweep_id}
    assert set(runs["status"]) == {"completed"}
    assert set(runs["framework"]) == {"llama.cpp"}
    assert runs["client_params"].str.contains('"launch_command"').all()
    # llama.cpp's ctx_size is the slots' total: stored beside the per-request limit
    assert runs["engine_params"].str.contains('"ctx_size"').all()
