"""Bulk writes, idempotent upserts and the spool (ARCHITECTURE §4).

Fast paths: DuckDB inserts from a registered DataFrame (Arrow-backed scan, one statement);
PostgreSQL COPYs into a temporary table and inserts from it. Rows already stored (same key)
are skipped, so replaying a spooled batch or re-importing a file changes nothing.

Collectors write through ``BufferedWriter``: rows are buffered and flushed in one transaction
every ~2 s; when the store stays locked past the deadline the batch goes to the spool folder
(one append-only JSON file per batch) and is ingested on the next successful flush, or by
``servescope db ingest-spool``. Nothing is dropped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa

import settings
from errors import InputError, StoreError, StoreLockedError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

log = logging.getLogger("servescope.ingest")

Rows = pd.DataFrame | Sequence[Mapping[str, Any]]

BULK_TABLES: dict[str, sa.Table] = {
    t.name: t
    for t in (
        schema.requests,
        schema.token_gaps,
        schema.gpu_samples,
        schema.gpu_process_samples,
        schema.engine_samples,
        schema.engine_raw_samples,
    )
}
JSON_RUN_FIELDS = ("engine_params", "client_params", "tool_summary", "tags")


# --- runs ---------------------------------------------------------------------------------


def _run_values(run: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(run) - set(schema.RUN_COLUMNS)
    if unknown:
        raise InputError(
            f"unknown run field(s) {sorted(unknown)}; runs have: {', '.join(schema.RUN_COLUMNS)}"
        )
    values = dict(run)
    for key in JSON_RUN_FIELDS:
        if key in values and values[key] is not None and not isinstance(values[key], str):
            values[key] = json.dumps(values[key], sort_keys=True, default=str)
    return values


def _upsert_run(conn: sa.Connection, run: Mapping[str, Any]) -> None:
    values = _run_values(run)
    if "run_id" not in values or not values["run_id"]:
        raise InputError("a run needs a run_id")
    values.setdefault("created_at", time.time())
    update = {k: v for k, v in values.items() if k not in ("run_id", "created_at")}
    table = schema.runs
    if update:
        done = conn.execute(
            sa.update(table).where(table.c.run_id == values["run_id"]).values(**update)
        ).rowcount
        if done:
            return
    values.setdefault("source", "servescope")
    conn.execute(sa.insert(table).values(**values))


def add_run(store: Store, run: Mapping[str, Any]) -> None:
    """Insert the run, or update the fields given when ``run_id`` is already stored."""
    with store.connect() as conn:
        _upsert_run(conn, run)


def update_run(store: Store, run_id: str, **fields: Any) -> None:
    """Update some fields of a stored run (rename, tag, status …)."""
    values = _run_values(fields)
    with store.connect() as conn:
        conn.execute(sa.update(schema.runs).where(schema.runs.c.run_id == run_id).values(**values))


def delete_run(store: Store, run_id: str) -> None:
    """Delete a run with its requests and token gaps, in one transaction."""
    with store.connect() as conn:
        _delete_run(conn, run_id)


def _delete_run(conn: sa.Connection, run_id: str) -> None:
    for table in (schema.token_gaps, schema.requests, schema.runs):
        conn.execute(sa.delete(table).where(table.c.run_id == run_id))


def replace_run(
    store: Store,
    run: Mapping[str, Any],
    requests_df: pd.DataFrame | None,
    token_gaps_df: pd.DataFrame | None = None,
) -> None:
    """Write a run and all its rows in one transaction, replacing any earlier copy (importers)."""
    values = _run_values({"source": "servescope", **run})
    with store.connect() as conn:
        _delete_run(conn, values["run_id"])
        conn.execute(sa.insert(schema.runs).values(**{"created_at": time.time(), **values}))
        if requests_df is not None and len(requests_df):
            _bulk_insert(conn, schema.requests, requests_df)
        if token_gaps_df is not None and len(token_gaps_df):
            _bulk_insert(conn, schema.token_gaps, token_gaps_df)


# --- bulk rows ----------------------------------------------------------------------------


def _frame(table: sa.Table, rows: Rows) -> pd.DataFrame:
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame.from_records(list(rows))
    known = [c.name for c in table.columns]
    unknown = [c for c in df.columns if c not in known]
    if unknown:
        raise InputError(f"unknown column(s) {unknown} for table {table.name}; it has: {known}")
    missing_keys = [c.name for c in table.primary_key.columns if c.name not in df.columns]
    if missing_keys and len(df):
        raise InputError(f"rows for {table.name} lack key column(s) {missing_keys}")
    return df


def _bulk_insert(conn: sa.Connection, table: sa.Table, rows: Rows) -> int:
    df = _frame(table, rows)
    if not len(df):
        return 0
    if conn.dialect.name == "duckdb":
        return _duckdb_insert(conn, table, df)
    if conn.dialect.name == "postgresql":
        return _postgres_insert(conn, table, df)
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    conn.execute(sa.insert(table).prefix_with("OR IGNORE"), records)
    return len(records)


def _duckdb_insert(conn: sa.Connection, table: sa.Table, df: pd.DataFrame) -> int:
    # DuckDB's bulk tables carry no PRIMARY KEY (its index made ingest ~3x slower, see
    # store.migrations). Rows whose key is already stored are skipped by an anti-join, which
    # only runs when the batch's key range overlaps stored rows (replays, re-imports).
    raw = conn.connection.dbapi_connection
    assert raw is not None
    name = f"_ingest_{uuid.uuid4().hex}"
    cols = ", ".join(f'"{c}"' for c in df.columns)
    keys = [c.name for c in table.primary_key.columns]
    first, last = keys[0], keys[-1]
    raw.register(name, pa.Table.from_pandas(df, preserve_index=False))
    try:
        overlap = raw.execute(
            f'SELECT count(*) FROM (SELECT 1 FROM "{table.name}" '
            f'WHERE "{first}" IN (SELECT DISTINCT "{first}" FROM {name}) '
            f'AND "{last}" BETWEEN (SELECT min("{last}") FROM {name}) '
            f'AND (SELECT max("{last}") FROM {name}) LIMIT 1) AS o'
        ).fetchall()[0][0]
        insert = f'INSERT INTO "{table.name}" ({cols}) SELECT {cols} FROM {name} AS d'
        if overlap:
            match = " AND ".join(f'"{table.name}"."{k}" = d."{k}"' for k in keys)
            insert += f' WHERE NOT EXISTS (SELECT 1 FROM "{table.name}" WHERE {match})'
        result = raw.execute(insert).fetchall()
        return int(result[0][0]) if result else len(df)
    finally:
        raw.unregister(name)


def _postgres_insert(conn: sa.Connection, table: sa.Table, df: pd.DataFrame) -> int:
    raw = conn.connection.dbapi_connection
    assert raw is not None
    tmp = f"_ingest_{uuid.uuid4().hex[:12]}"
    cols = ", ".join(f'"{c}"' for c in df.columns)
    df = df.copy()
    for name in df.columns:  # COPY rejects "200.0" for an integer column: give ints as ints
        if isinstance(table.c[name].type, sa.Integer) and df[name].dtype.kind == "f":
            df[name] = df[name].round().astype("Int64")
    clean = df.astype(object).where(df.notna(), None)
    with raw.cursor() as cur:
        cur.execute(
            f'CREATE TEMP TABLE {tmp} ON COMMIT DROP AS SELECT {cols} FROM "{table.name}" LIMIT 0'
        )
        with cur.copy(f"COPY {tmp} ({cols}) FROM STDIN") as copy:
            for row in clean.itertuples(index=False, name=None):
                copy.write_row(row)
        cur.execute(
            f'INSERT INTO "{table.name}" ({cols}) SELECT {cols} FROM {tmp} ON CONFLICT DO NOTHING'
        )
        return int(cur.rowcount)


def add_rows(store: Store, table: str, rows: Rows) -> int:
    """Bulk-insert rows into one of the bulk tables; returns how many were new."""
    if table not in BULK_TABLES:
        raise InputError(f"unknown bulk table {table!r}; bulk tables: {sorted(BULK_TABLES)}")
    with store.connect() as conn:
        return _bulk_insert(conn, BULK_TABLES[table], rows)


def add_requests(store: Store, rows: Rows) -> int:
    return add_rows(store, "requests", rows)


def add_token_gaps(store: Store, rows: Rows) -> int:
    return add_rows(store, "token_gaps", rows)


# --- buffered writes and the spool ----------------------------------------------------------


def _write_batch(store: Store, batch: Mapping[str, list[dict[str, Any]]]) -> None:
    with store.connect() as conn:
        for run in batch.get("runs", []):
            _upsert_run(conn, run)
        for table, rows in batch.items():
            if table != "runs" and rows:
                _bulk_insert(conn, BULK_TABLES[table], rows)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def spool_batch(batch: Mapping[str, list[dict[str, Any]]], spool_dir: Path) -> Path:
    """Write a batch to its own spool file (written to a temp name, then renamed)."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    name = f"{time.time():.6f}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    tmp = spool_dir / (name + ".part")
    payload = {
        t: [{k: _jsonable(v) for k, v in r.items()} for r in rows] for t, rows in batch.items()
    }
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    final = spool_dir / name
    tmp.rename(final)
    return final


def ingest_spool(store: Store, spool_dir: Path | None = None) -> int:
    """Ingest every spooled batch (oldest first), deleting each once stored; returns rows stored.

    A batch the store refuses for a reason other than a lock (bad data) is renamed
    ``*.rejected`` and kept for inspection, so it cannot block the batches after it.
    """
    folder = spool_dir or settings.spool_dir()
    if not folder.is_dir():
        return 0
    total = 0
    for path in sorted(folder.glob("*.json")):
        batch = json.loads(path.read_text(encoding="utf-8"))
        try:
            _write_batch(store, batch)
        except StoreLockedError:
            raise
        except (StoreError, InputError) as exc:
            path.rename(path.with_suffix(".rejected"))
            log.error("spooled batch %s rejected by the store: %s", path.name, exc)
            continue
        total += sum(len(rows) for rows in batch.values())
        path.unlink()
    return total


class BufferedWriter:
    """Buffers rows per table and flushes them in one transaction every ``flush_interval_s``.

    Thread-safe. With ``background=True`` a daemon thread flushes on the interval; otherwise
    ``add`` flushes when the interval has passed. ``close()`` flushes what is left.
    """

    def __init__(
        self,
        store: Store,
        *,
        flush_interval_s: float = 2.0,
        spool_dir: Path | None = None,
        background: bool = False,
    ) -> None:
        self.store = store
        self.flush_interval_s = flush_interval_s
        self.spool_dir = spool_dir or settings.spool_dir()
        self._buffer: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self.rows_written = 0
        self.batches_spooled = 0
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._loop, name="servescope-writer", daemon=True
            )
            self._thread.start()

    def add(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if table != "runs" and table not in BULK_TABLES:
            raise InputError(f"unknown table {table!r}; writable: runs, {sorted(BULK_TABLES)}")
        with self._lock:
            self._buffer.setdefault(table, []).extend(dict(r) for r in rows)
        if self._thread is None and time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def add_run(self, run: Mapping[str, Any]) -> None:
        self.add("runs", [run])

    def flush(self) -> int:
        """Write what is buffered; on a prolonged lock spool it instead. Returns rows handled."""
        with self._flush_lock:
            with self._lock:
                batch, self._buffer = self._buffer, {}
            self._last_flush = time.monotonic()
            count = sum(len(r) for r in batch.values())
            if not count:
                return 0
            try:
                _write_batch(self.store, batch)
            except StoreLockedError:
                path = spool_batch(batch, self.spool_dir)
                self.batches_spooled += 1
                log.warning("store locked: %d rows spooled to %s", count, path)
                return count
            except Exception:
                # not a lock: keep the rows (spooled) and let the caller see the error
                spool_batch(batch, self.spool_dir)
                self.batches_spooled += 1
                raise
            self.rows_written += count
            with contextlib.suppress(StoreLockedError):
                self.rows_written += ingest_spool(self.store, self.spool_dir)
            return count

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception:  # keep the collector alive; the next flush retries
                log.exception("flush failed; will retry")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()

    def __enter__(self) -> BufferedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
