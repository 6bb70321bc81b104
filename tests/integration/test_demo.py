"""`servescope demo` end to end on a small plan: real sim process, real load generator, DuckDB."""

from __future__ import annotations

from pathlib import Path

from collectors import demo
from store import queries_admin
from store.db import Store

ENGINE = demo.DemoEngine(
    "tiny", "H100-SXM-80GB", "llama-3.1-8b", "test engine", {"max_batch_size": 4}
)


def test_demo_stores_each_level_once_and_is_idempotent(tmp_path: Path) -> None:
    store = Store.open(f"duckdb:///{tmp_path / 'demo.duckdb'}")
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

    before = queries_admin.table_counts(store)
    assert demo.plan(store, [ENGINE], [1, 2]) == {}
    assert demo.run_demo(store, engines=[ENGINE], levels=[1, 2], progress=False) == []
    assert queries_admin.table_counts(store) == before
