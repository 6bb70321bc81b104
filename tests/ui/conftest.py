"""AppTest fixtures: a temporary DuckDB store per test, seeded or empty, and clean caches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st

from store import ingest
from store.lifecycle import open_store


@pytest.fixture(autouse=True, scope="session")
def _scan_component_manifests_once() -> Iterator[None]:
    """Every new ``AppTest`` scans the metadata of every installed distribution for Streamlit
    components (~0.3–0.7 s of CPU each, 150+ AppTests); a server does it once at start. The
    installed packages do not change during a session: scan once, hand each AppTest the result."""
    from streamlit.components.v2 import manifest_scanner

    real = manifest_scanner.scan_component_manifests
    found = real()
    manifest_scanner.scan_component_manifests = lambda max_workers=None: list(found)
    yield
    manifest_scanner.scan_component_manifests = real


@pytest.fixture(autouse=True)
def _clear_streamlit_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty DuckDB store in a temp dir, set as SERVESCOPE_DB for the app under test."""
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    monkeypatch.setenv("SERVESCOPE_DB", url)
    return url


def seed_runs(url: str) -> None:
    """Three runs: a healthy sim run (150 ok + 2 failed), a small client-bound import with
    Markdown in its name, and an empty run."""
    store = open_store(url)
    try:
        ingest.add_run(
            store,
            {
                "run_id": "run-sim",
                "name": "sim c=8",
                "source": "servescope",
                "framework": "sim",
                "model": "llama-3.1-8b",
                "gpu_name": "H100-SXM-80GB",
                "gpu_count": 2,
                "workload": "mixed",
                "arrival": "concurrency",
                "concurrency": 8,
                "started_at": 1_700_000_000.0,
                "ended_at": 1_700_000_060.0,
                "duration_s": 60.0,
                "status": "completed",
                "client_bound": False,
            },
        )
        ingest.add_run(
            store,
            {
                "run_id": "run-import",
                "name": "**bold** <b>x</b> [link](http://evil)",
                "source": "vllm-bench",
                "framework": "vllm",
                "model": "llama-3.1-8b",
                "arrival": "poisson",
                "target_rate": 4.0,
                "started_at": 1_600_000_000.0,
                "duration_s": 10.0,
                "client_bound": True,
                "client_bound_reason": "P99 lag 42 ms > 10 ms [see](http://evil) <i>",
            },
        )
        ingest.add_run(  # a run that recorded nothing (e.g. interrupted at once)
            store, {"run_id": "run-empty", "source": "servescope", "started_at": 1_500_000_000.0}
        )
        sim = pd.DataFrame(
            {
                "run_id": "run-sim",
                "seq": range(152),
                "status": ["ok"] * 150 + ["error", "timeout"],
                "sent_at": [1_700_000_000.0 + i * 0.3 for i in range(152)],
                "done_at": [1_700_000_001.0 + i * 0.3 for i in range(152)],
                "input_tokens": [100 + i for i in range(152)],
                "output_tokens": [50] * 152,
                "ttft_ms": [20.0 + i for i in range(152)],
                "tpot_ms": [5.0 + i / 100 for i in range(152)],
                "e2e_ms": [300.0 + i for i in range(152)],
                "lag_ms": [0.5] * 152,
                "http_status": pd.array([200] * 150 + [500, None], dtype="Int64"),
                "error": [None] * 150 + ["upstream <b>boom</b>", "timed out"],
            }
        )
        ingest.add_requests(store, sim)
        ingest.add_token_gaps(
            store,
            pd.DataFrame(
                {
                    "run_id": "run-sim",
                    "seq": [s for s in range(150) for _ in range(3)],
                    "idx": [i for _ in range(150) for i in range(3)],
                    "gap_ms": [4.0, 5.0, 6.0] * 150,
                }
            ),
        )
        ingest.add_requests(
            store,
            pd.DataFrame(
                {
                    "run_id": "run-import",
                    "seq": range(20),
                    "status": "ok",
                    "input_tokens": 1000,
                    "output_tokens": 10,
                    "ttft_ms": [100.0 + i for i in range(20)],
                    "tpot_ms": 8.0,
                    "e2e_ms": 200.0,
                }
            ),
        )
    finally:
        store.dispose()


@pytest.fixture
def seed(db_url: str) -> Callable[[], None]:
    """Call to seed the test's store (see ``seed_runs``)."""
    return lambda: seed_runs(db_url)


@pytest.fixture
def seeded_url(db_url: str) -> str:
    seed_runs(db_url)
    return db_url
