"""The store against real databases: DuckDB files and (with `store_url`) PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from errors import ConfigError, InputError, StoreError, StoreLockedError
from store import catalog, ingest, migrations, run_figures, schema, tables
from store.db import Store
from store.lifecycle import memory_store, open_store


def _requests(run_id: str, n: int, start: int = 0) -> pd.DataFrame:
    seq = np.arange(start, start + n)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": seq,
            "sent_at": 1_700_000_000.0 + seq * 0.5,
            "ttft_ms": 10.0 + seq,
            "e2e_ms": 100.0 + seq,
            "output_tokens": 10,
            "status": "ok",
        }
    )


def test_migrations_recorded_and_idempotent(store_url: str) -> None:
    store = open_store(store_url)
    assert migrations.migrate(store) == migrations.MIGRATIONS[-1][0]
    versions = store.read_df("SELECT version FROM schema_version ORDER BY version")
    assert versions["version"].tolist() == [m[0] for m in migrations.MIGRATIONS]
    # a second process-level open neither fails nor re-applies anything
    assert migrations.migrate(open_store(store_url)) == migrations.MIGRATIONS[-1][0]
    assert len(store.read_df("SELECT * FROM schema_version")) == len(migrations.MIGRATIONS)


def test_run_upsert_and_json_fields(store_url: str) -> None:
    store = open_store(store_url)
    ingest.add_run(store, {"run_id": "r1", "name": "first", "engine_params": {"max_batch_size": 8}})
    ingest.add_run(store, {"run_id": "r1", "status": "completed"})
    df = store.read_df("SELECT name, status, engine_params, source FROM runs")
    assert df.to_dict("records") == [
        {
            "name": "first",
            "status": "completed",
            "engine_params": '{"max_batch_size": 8}',
            "source": "servescope",
        }
    ]
    with pytest.raises(InputError, match="unknown run field"):
        ingest.add_run(store, {"run_id": "r2", "api_key": "secret"})


def test_bulk_requests_skip_rows_already_stored(store_url: str) -> None:
    store = open_store(store_url)
    ingest.add_run(store, {"run_id": "r1"})
    assert ingest.add_requests(store, _requests("r1", 1000)) == 1000
    # an overlapping batch (a replayed spool file, say) only adds the new keys
    assert ingest.add_requests(store, _requests("r1", 500, start=900)) == 400
    df = store.read_df(
        "SELECT count(*) AS n, min(seq) AS lo, max(seq) AS hi, sum(ttft_ms) AS s FROM requests"
    )
    assert df.iloc[0].to_dict() == {
        "n": 1400,
        "lo": 0,
        "hi": 1399,
        "s": 1400 * 10 + 1399 * 1400 / 2,
    }
    nulls = store.read_df("SELECT count(*) AS n FROM requests WHERE input_tokens IS NULL")
    assert nulls["n"].iloc[0] == 1400


def test_bulk_rejects_unknown_columns_and_writes_nothing(store_url: str) -> None:
    store = open_store(store_url)
    bad = _requests("r1", 3).assign(api_key="x")
    with pytest.raises(InputError, match="api_key"):
        ingest.add_requests(store, bad)
    assert tables.table_counts(store)["requests"] == 0


@pytest.mark.parametrize(
    ("table", "rows", "reason"),
    [
        ("token_gaps", [{"run_id": "r", "seq": 0, "idx": 0, "gap_ms": None}], "gap_ms"),
        ("requests", [{"run_id": "r", "seq": 0, "input_tokens": 3_000_000_000}], "3000000000"),
    ],
)
def test_a_bulk_write_the_database_refuses_is_a_store_error_naming_why(
    store_url: str, table: str, rows: list[dict[str, object]], reason: str
) -> None:
    """The driver's own error (DuckDB's Arrow insert and PostgreSQL's COPY bypass SQLAlchemy)
    leaves as a StoreError that says what the database refused, and nothing is written."""
    store = open_store(store_url)
    ingest.add_requests(store, _requests("kept", 2))
    with pytest.raises(StoreError, match=reason):
        ingest.add_rows(store, table, rows)
    counts = tables.table_counts(store)
    assert counts["requests"] == 2 and counts["token_gaps"] == 0


def test_replace_run_is_all_or_nothing(store_url: str) -> None:
    store = open_store(store_url)
    ingest.replace_run(store, {"run_id": "imp", "name": "v1"}, _requests("imp", 10))
    gaps = pd.DataFrame({"run_id": "imp", "seq": [0, 0], "idx": [0, 1], "gap_ms": [1.0, 2.0]})
    # a failing replacement leaves the earlier copy whole
    with pytest.raises(InputError):
        ingest.replace_run(
            store, {"run_id": "imp", "name": "v2"}, _requests("imp", 20).assign(bogus=1), gaps
        )
    assert store.read_df("SELECT name FROM runs")["name"].tolist() == ["v1"]
    assert tables.table_counts(store)["requests"] == 10
    ingest.replace_run(store, {"run_id": "imp", "name": "v2"}, _requests("imp", 20), gaps)
    counts = tables.table_counts(store)
    assert (counts["runs"], counts["requests"], counts["token_gaps"]) == (1, 20, 2)
    ingest.delete_run(store, "imp")
    counts = tables.table_counts(store)
    assert (counts["runs"], counts["requests"], counts["token_gaps"]) == (0, 0, 0)


def test_catalog_seeded_and_user_edits_survive_reseeding(store_url: str) -> None:
    store = open_store(store_url)
    seeded = catalog.names(store, "slo_profiles")
    assert "interactive-chat" in seeded
    assert catalog.get(store, "slo_profiles", "interactive-chat")["ttft_ms"] == 500.0
    edited = catalog.get(store, "slo_profiles", "interactive-chat") | {"ttft_ms": 321.0}
    catalog.save_user_entry(store, "slo_profiles", edited)
    # make the seed look changed, then reseed: the user's entry stays, others are refreshed
    with store.connect() as conn:
        conn.execute(sa.update(schema.slo_profiles).values(seed_hash="stale"))
    catalog.seed(store)
    assert catalog.get(store, "slo_profiles", "interactive-chat")["ttft_ms"] == 321.0
    hashes = store.read_df("SELECT name, seed_hash, origin FROM slo_profiles")
    refreshed = hashes[hashes["origin"] == "seed"]["seed_hash"]
    assert len(refreshed) and (refreshed != "stale").all()
    assert catalog.seed(store) == 0  # nothing left to do
    with pytest.raises(ConfigError, match=r"available: .*interactive-chat"):
        catalog.get(store, "slo_profiles", "no-such-profile")


def test_duckdb_lock_spools_then_ingests(
    tmp_path: Path, duckdb_lock: Callable[[Path], AbstractContextManager[None]]
) -> None:
    path = tmp_path / "locked.duckdb"
    store = open_store(f"duckdb:///{path}", lock_timeout_s=0.3)
    ingest.add_run(store, {"run_id": "r1"})
    with duckdb_lock(path):
        with pytest.raises(StoreLockedError, match="locked"):
            ingest.add_requests(store, _requests("r1", 5))
        writer = ingest.BufferedWriter(store, spool_dir=tmp_path / "spool")
        writer.add("requests", _requests("r1", 50).to_dict("records"))
        assert writer.flush() == 50
        assert writer.batches_spooled == 1
        assert len(list((tmp_path / "spool").glob("*.json"))) == 1
    # the next successful flush stores the new rows and the spooled batch
    writer.add("requests", _requests("r1", 10, start=50).to_dict("records"))
    writer.close()
    assert tables.table_counts(store)["requests"] == 60
    assert not list((tmp_path / "spool").glob("*.json"))


def test_buffered_writer_background_flushes(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'w.duckdb'}")
    writer = ingest.BufferedWriter(
        store, flush_interval_s=0.05, background=True, spool_dir=tmp_path / "spool"
    )
    writer.add_run({"run_id": "w1", "status": "running"})
    writer.add("requests", _requests("w1", 100).to_dict("records"))
    deadline = time.monotonic() + 10
    while tables.table_counts(store)["requests"] < 100 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tables.table_counts(store)["requests"] == 100
    writer.close()
    assert writer.rows_written == 101


def test_memory_store_and_bad_url() -> None:
    store = memory_store()
    ingest.add_run(store, {"run_id": "m"})
    assert tables.table_counts(store)["runs"] == 1
    from errors import StoreError

    with pytest.raises(StoreError, match="duckdb:///"):
        open_store("nosuchdialect://x")


def test_writer_takes_frames_and_dicts_in_one_flush(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    writer = ingest.BufferedWriter(store, flush_interval_s=3600, spool_dir=tmp_path / "spool")
    writer.add_run({"run_id": "f1", "status": "running"})
    writer.add("requests", _requests("f1", 30))
    writer.add("requests", _requests("f1", 5, start=30).to_dict("records"))
    writer.add(
        "token_gaps", pd.DataFrame({"run_id": "f1", "seq": 0, "idx": range(4), "gap_ms": 1.5})
    )
    assert tables.table_counts(store)["requests"] == 0  # buffered, not yet written
    assert writer.flush() == 1 + 35 + 4
    counts = tables.table_counts(store)
    assert (counts["runs"], counts["requests"], counts["token_gaps"]) == (1, 35, 4)
    with pytest.raises(InputError, match="add_run"):
        writer.add("runs", pd.DataFrame({"run_id": ["x"]}))


def test_replace_runs_is_one_transaction(store_url: str) -> None:
    store = open_store(store_url)
    good = ingest.RunRows({"run_id": "a", "name": "a"}, _requests("a", 5))
    bad = ingest.RunRows({"run_id": "b", "name": "b"}, _requests("b", 5).assign(nope=1))
    with pytest.raises(InputError, match="nope"):
        ingest.replace_runs(store, [good, bad])
    assert tables.table_counts(store)["runs"] == 0  # the good run was rolled back too
    ingest.replace_runs(store, [good, ingest.RunRows({"run_id": "b"}, _requests("b", 7))])
    assert tables.table_counts(store)["requests"] == 12


def test_migrations_upgrade_a_version_1_store_keeping_its_runs(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'old.duckdb'}"
    old = Store(sa.create_engine(url, poolclass=sa.pool.NullPool))
    with old.connect() as conn:  # a store as migration 1 left it (before migrations 2 to 5)
        migrations.MIGRATIONS[0][2](conn)
        conn.execute(sa.text("ALTER TABLE gpu_samples DROP COLUMN mem_reserved_bytes"))
        conn.execute(sa.text("ALTER TABLE runs DROP COLUMN precision"))
        conn.execute(sa.text("ALTER TABLE runs DROP COLUMN kv_cache_dtype"))
        for table in (*migrations._CHECKLIST_TABLES, "sweep_points", "gpu_prices", "plans"):
            conn.execute(sa.text(f"DROP TABLE {table}"))
        for table, columns in migrations._CAPACITY_COLUMNS.items():
            for column, _ in columns:
                conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        for column in (
            "spec",
            "mode",
            "started_at",
            "ended_at",
            "host",
            "runner_pid",
            "runner_start",
        ):
            conn.execute(sa.text(f"ALTER TABLE sweeps DROP COLUMN {column}"))
        conn.execute(sa.text("ALTER TABLE runs DROP COLUMN data_version"))
        conn.execute(sa.text("ALTER TABLE requests DROP COLUMN host"))
        conn.execute(sa.text("DROP TABLE run_rollups"))
        conn.execute(sa.text("DROP TABLE store_meta"))
        conn.execute(
            sa.insert(schema.schema_version).values(version=1, name="initial", applied_at=0.0)
        )
        conn.execute(sa.text("INSERT INTO runs (run_id, source) VALUES ('old', 'servescope')"))
        conn.execute(
            sa.text(
                "INSERT INTO requests (run_id, seq, status, ttft_ms) VALUES ('old', 0, 'ok', 7)"
            )
        )
    assert migrations.migrate(old) == len(migrations.MIGRATIONS) == 9
    assert {"runner_pid", "runner_start"} <= set(
        old.read_df("SELECT * FROM sweeps LIMIT 0").columns
    )
    assert sa.inspect(old.engine).has_table("framework_scores")
    assert sa.inspect(old.engine).has_table("sweep_points")
    assert sa.inspect(old.engine).has_table("plans")
    assert list(old.read_df("SELECT expert_params_b, kind FROM models, gpus LIMIT 0").columns) == [
        "expert_params_b",
        "kind",
    ]
    with old.connect() as conn:
        conn.execute(sa.text("UPDATE runs SET precision = 'fp8', kv_cache_dtype = 'fp8'"))
    ingest.add_rows(
        old, "gpu_samples", [{"host": "h", "gpu_index": 0, "ts": 1.0, "mem_reserved_bytes": 5.0}]
    )
    assert old.read_df("SELECT mem_reserved_bytes FROM gpu_samples")["mem_reserved_bytes"][0] == 5
    # the old run reads (data_version NULL/0 on old rows), and a new write invalidates it
    assert run_figures.get(old, ["old"])["ttft_p50_ms"].tolist() == [7.0]
    ingest.add_requests(old, [{"run_id": "old", "seq": 1, "status": "ok", "ttft_ms": 9.0}])
    assert run_figures.get(old, ["old"])["ttft_p50_ms"].tolist() == [8.0]
    old.dispose()
