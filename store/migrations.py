"""Numbered schema migrations, recorded in ``schema_version``.

Each migration is (version, name, function). A migration must be safe to run on a store that a
newer create_all already shaped (use IF NOT EXISTS forms), because migration 1 creates the
tables of ``store.schema`` as they were when it was written.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from errors import MigrationError, StoreLockedError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

Migration = tuple[int, str, Callable[[sa.Connection], None]]

# created by migration 5 (the framework evaluation checklist and the evidence measured for it)
_CHECKLIST_TABLES = (
    "frameworks",
    "criteria",
    "framework_scores",
    "framework_score_edits",
    "weight_presets",
    "verifications",
    "verification_checks",
    "quality_runs",
    "quality_answers",
    "project_health",
)


# Tables written in bulk (millions of rows). On DuckDB they are created without their PRIMARY
# KEY: DuckDB's ART index made 1M-row inserts ~3x slower (0.87 s vs 0.32 s measured here);
# ingest keeps them unique with an anti-join instead. PostgreSQL keeps the constraint.
UNINDEXED_ON_DUCKDB = (
    "requests",
    "token_gaps",
    "gpu_samples",
    "gpu_process_samples",
    "engine_samples",
    "engine_raw_samples",
)


def _dialect_metadata(dialect: str) -> sa.MetaData:
    if dialect != "duckdb":
        return schema.metadata
    md = sa.MetaData()
    for table in schema.metadata.sorted_tables:
        if table.name in UNINDEXED_ON_DUCKDB:
            columns = [
                sa.Column(c.name, c.type, nullable=c.nullable or c.primary_key)
                for c in table.columns
            ]
            sa.Table(table.name, md, *columns)
        else:
            table.to_metadata(md)
    return md


def _initial(conn: sa.Connection) -> None:
    _dialect_metadata(conn.dialect.name).create_all(conn, checkfirst=True)


def _gpu_reserved_memory(conn: sa.Connection) -> None:
    conn.execute(
        sa.text(
            "ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS mem_reserved_bytes DOUBLE PRECISION"
        )
    )


def _run_rollups(conn: sa.Connection) -> None:
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN IF NOT EXISTS data_version BIGINT DEFAULT 0"))
    schema.run_rollups.create(conn, checkfirst=True)


def _store_id(conn: sa.Connection) -> None:
    schema.store_meta.create(conn, checkfirst=True)
    stored = conn.execute(
        sa.select(schema.store_meta.c.value).where(schema.store_meta.c.key == "store_id")
    ).scalar()
    if stored is None:
        conn.execute(sa.insert(schema.store_meta).values(key="store_id", value=uuid.uuid4().hex))


def _checklist(conn: sa.Connection) -> None:
    for column in ("precision", "kv_cache_dtype"):
        conn.execute(sa.text(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {column} TEXT"))
    for name in _CHECKLIST_TABLES:
        schema.metadata.tables[name].create(conn, checkfirst=True)


def _sweep_points(conn: sa.Connection) -> None:
    columns = (
        ("spec", "TEXT"),
        ("mode", "TEXT"),
        ("started_at", "DOUBLE PRECISION"),
        ("ended_at", "DOUBLE PRECISION"),
        ("host", "TEXT"),
    )
    for column, kind in columns:
        conn.execute(sa.text(f"ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS {column} {kind}"))
    schema.sweep_points.create(conn, checkfirst=True)


_CAPACITY_COLUMNS = {
    "models": (
        ("attention", "TEXT"),
        ("kv_lora_rank", "INTEGER"),
        ("qk_rope_head_dim", "INTEGER"),
        ("experts", "INTEGER"),
        ("experts_per_token", "INTEGER"),
        ("shared_experts", "INTEGER"),
        ("expert_params_b", "DOUBLE PRECISION"),
        ("expert_dtype_bytes", "DOUBLE PRECISION"),
        ("checked_on", "TEXT"),
    ),
    "gpus": (
        ("kind", "TEXT"),
        ("vendor", "TEXT"),
        ("int8_tops", "DOUBLE PRECISION"),
        ("link_bytes_s", "DOUBLE PRECISION"),
        ("checked_on", "TEXT"),
    ),
}


def _capacity_catalogue(conn: sa.Connection) -> None:
    for table, columns in _CAPACITY_COLUMNS.items():
        for column, kind in columns:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}"))
    schema.gpu_prices.create(conn, checkfirst=True)
    schema.plans.create(conn, checkfirst=True)


def _shards(conn: sa.Connection) -> None:
    conn.execute(sa.text("ALTER TABLE requests ADD COLUMN IF NOT EXISTS host TEXT"))
    schema.run_shards.create(conn, checkfirst=True)


_SWEEP_LIFECYCLE_COLUMNS = {
    "sweeps": (("runner_pid", "BIGINT"), ("runner_start", "DOUBLE PRECISION")),
    "sweep_points": (
        ("attempt", "INTEGER"),
        ("attempts", "TEXT"),
        ("engine_pgid", "BIGINT"),
        ("engine_start", "DOUBLE PRECISION"),
    ),
}


def _sweep_lifecycle(conn: sa.Connection) -> None:
    for table, columns in _SWEEP_LIFECYCLE_COLUMNS.items():
        for column, kind in columns:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}"))


MIGRATIONS: tuple[Migration, ...] = (
    (1, "initial schema", _initial),
    (2, "gpu_samples.mem_reserved_bytes (NVML / DCGM reserved memory)", _gpu_reserved_memory),
    (3, "runs.data_version and run_rollups (stored per-run summaries)", _run_rollups),
    (4, "store_meta.store_id (the store's identity, recorded in spooled batches)", _store_id),
    (
        5,
        "runs.precision, runs.kv_cache_dtype; framework checklist catalog; verifications, "
        "quality and project health",
        _checklist,
    ),
    (6, "sweeps.spec/mode/started_at/ended_at/host and sweep_points (Tune)", _sweep_points),
    (
        7,
        "models: attention, MLA and MoE fields; gpus: kind, vendor, int8_tops, link_bytes_s; "
        "gpu_prices and plans (Plan)",
        _capacity_catalogue,
    ),
    (8, "requests.host and run_shards (one run from many hosts: bench --shard)", _shards),
    (
        9,
        "sweeps.runner_pid/runner_start, sweep_points.attempt/attempts/engine_pgid/engine_start "
        "(a resumed point is a new attempt; a killed sweep's engine is found and stopped)",
        _sweep_lifecycle,
    ),
)


def current_version(conn: sa.Connection) -> int:
    if not sa.inspect(conn).has_table("schema_version"):
        return 0
    value = conn.execute(sa.select(sa.func.max(schema.schema_version.c.version))).scalar()
    return int(value or 0)


def migrate(store: Store) -> int:
    """Apply every pending migration, each in its own transaction; return the version reached."""
    with store.connect() as conn:
        version = current_version(conn)
    for number, name, apply in MIGRATIONS:
        if number <= version:
            continue
        try:
            with store.connect() as conn:
                if current_version(conn) >= number:  # another process got there first
                    continue
                apply(conn)
                conn.execute(
                    sa.insert(schema.schema_version).values(
                        version=number, name=name, applied_at=time.time()
                    )
                )
        except StoreLockedError:
            raise
        except Exception as exc:
            raise MigrationError(f"migration {number} ({name}) failed: {exc}") from exc
        version = number
    return version
