"""`servescope demo` end to end on a small plan: real sim process, real load generator, DuckDB."""

from __future__ import annotations

import json
from pathlib import Path

from services.commands import demo
from store import tables
from store.lifecycle import open_store

ENGINE = demo.DemoEngine(
    "tiny", "H100-SXM-80GB", "llama-3.1-8b", "test engine", {"max_batch_size": 4}
)


def test_demo_stores_each_level_once_and_is_idempotent(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'demo.duckdb'}")
    assert demo.plan(store, [ENGINE], [1, 2]) == {"tiny": [1, 2]}
    written = demo.run_demo(
        store, engines=[ENGINE], levels=[1, 2], requests_per_stream=2, max_tokens=8, progress=False
    )
    assert written == ["demo-tiny-c1", "demo-tiny-c2"]
    runs = store.read_df(
        "SELECT run_id, status, framework, concurrency, gpu_name, engine_params FROM runs "
        "ORDER BY run_id"
    )
    assert runs["status"].tolist() == ["completed", "completed"]
    assert runs["framework"].tolist() == ["sim", "sim"]  # never poses as a real engine
    assert runs["concurrency"].tolist() == [1, 2]
    assert all('"max_batch_size": 4' in p for p in runs["engine_params"])
    reqs = store.read_df(
        "SELECT run_id, count(*) AS n, sum(CASE WHEN status = 'ok' THEN 1 ELSE 0 END) AS ok, "
        "max(output_tokens) AS max_out FROM requests GROUP BY run_id ORDER BY run_id"
    )
    assert reqs["n"].tolist() == [12, 12]  # max(12, 2 × concurrency) each
    assert reqs["ok"].tolist() == [12, 12]
    assert (reqs["max_out"] <= 8).all()

    # the sim's /metrics was scraped during each run, and each run names what it collected
    sources = [
        json.loads(p)["collectors"]
        for p in store.read_df("SELECT client_params FROM runs ORDER BY run_id")["client_params"]
    ]
    assert all(len(s["targets"]) == 1 and s["targets"][0].endswith("/metrics") for s in sources)
    samples = store.read_df(
        "SELECT metric, count(*) AS n, max(value) AS hi FROM engine_samples GROUP BY metric"
    ).set_index("metric")
    assert samples.loc["requests_running", "n"] >= 2
    assert samples.loc["generation_tokens_total", "hi"] > 0

    before = tables.table_counts(store)
    assert demo.plan(store, [ENGINE], [1, 2]) == {}
    assert demo.run_demo(store, engines=[ENGINE], levels=[1, 2], progress=False) == []
    assert tables.table_counts(store) == before
