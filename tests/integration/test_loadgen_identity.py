"""``servescope bench`` records what it measured against: the weight precision and KV-cache
dtype the user names (validated), and the framework and version the endpoint names itself
(``collectors.endpoint_identity``), with ``--framework`` winning."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import cli
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from errors import InputError
from sim.engine import EngineConfig
from sim.server import start_in_thread
from store import runs_table
from store.db import Store
from store.lifecycle import open_store

WORKLOAD = {"name": "tiny", "input_tokens": 16, "output_tokens": 2}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"duckdb:///{tmp_path / 'b.duckdb'}")


def test_a_sim_run_stores_precision_and_stays_labelled_sim(store: Store) -> None:
    handle = start_in_thread(EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"))
    try:
        cfg = BenchConfig(
            endpoint=handle.url + "/v1",
            workload_spec=WORKLOAD,
            concurrency=(2,),
            requests=4,
            precision="FP8",
            kv_cache_dtype="fp8",
            metrics_url="off",
            gpu=False,
            calibrate=False,
            in_process=True,
        )
        [run_id] = run_benchmark(cfg, store, progress=False)
    finally:
        handle.stop()
    run = runs_table.run_record(store, run_id)
    assert run is not None
    assert (run["precision"], run["kv_cache_dtype"]) == ("fp8", "fp8")
    assert run["framework"] == "sim" and run["framework_version"] is None
    assert run["client_params"]["identity_source"] == "GET /v1/models (owned_by)"
    listed = runs_table.list_runs(store).set_index("run_id")
    assert listed.loc[run_id, "precision"] == "fp8"


def test_bad_precision_exits_2_naming_the_accepted_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"duckdb:///{tmp_path / 'never.duckdb'}"
    common = ["bench", "--endpoint", "http://127.0.0.1:9", "--workload", "mixed"]
    common += ["--concurrency", "1", "--requests", "1", "--db", db]
    assert cli.main([*common, "--precision", "fp9"]) == 2
    err = capsys.readouterr().err
    assert "--precision 'fp9'" in err and "w4a16" in err and "gguf-<type>" in err
    assert cli.main([*common, "--kv-cache-dtype", "int4"]) == 2
    err = capsys.readouterr().err
    assert "--kv-cache-dtype 'int4'" in err and "fp8_e5m2" in err
    assert not (tmp_path / "never.duckdb").exists()  # nothing run, no store opened
    with pytest.raises(InputError, match="precision"):
        BenchConfig(
            endpoint="http://h:1", workload="mixed", concurrency=(1,), requests=1, precision="x"
        ).validated()


class _Stream(httpx.AsyncByteStream):
    """A streamed body (the load generator reads responses raw, as they arrive)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


def _vllm_like(version: str = "0.11.0") -> httpx.MockTransport:
    """An endpoint that names itself as vLLM does (``/version`` + ``owned_by: vllm``) and
    streams two tokens per chat completion."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": "a"}}]},
        {"choices": [{"index": 0, "delta": {"content": "b"}}]},
        {"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": 2}},
    ]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "owned_by": "vllm"}]})
        if request.method == "GET" and path == "/version":
            return httpx.Response(200, json={"version": version})
        if request.method == "POST" and path == "/v1/chat/completions":
            return httpx.Response(
                200, stream=_Stream(sse.encode()), headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(404, json={"error": "no route"})

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("given", "framework", "version"),
    [
        (None, "vllm", "0.11.0"),  # the endpoint says who it is
        ("vllm", "vllm", "0.11.0"),  # the user agrees: the endpoint's version is kept
        ("sglang", "sglang", None),  # the user wins; a version of another framework is not kept
    ],
)
def test_framework_and_version_from_the_endpoints_identity(
    store: Store, given: str | None, framework: str, version: str | None
) -> None:
    cfg = BenchConfig(
        endpoint="http://vllm.test:8000",
        workload_spec=WORKLOAD,
        concurrency=(1,),
        requests=2,
        framework=given,
        metrics_url="off",
        gpu=False,
        calibrate=False,
    )
    [run_id] = run_benchmark(cfg, store, progress=False, transport=_vllm_like())
    run = runs_table.run_record(store, run_id)
    assert run is not None and run["status"] == "completed"
    assert (run["framework"], run["framework_version"]) == (framework, version)
    assert run["client_params"]["identity_source"] == "GET /version"
    assert run["client_params"]["identity_framework"] == "vllm"
    assert run["precision"] is None and run["kv_cache_dtype"] is None
