"""Bulk writes, idempotent upserts and the spool (DESIGN §4).

Fast paths: DuckDB inserts from a registered DataFrame (Arrow-backed scan, one statement);
PostgreSQL COPYs into a temporary table and inserts from it. Rows already stored (same key)
are skipped, so replaying a spooled batch or re-importing a file changes nothing.

Collectors write through ``BufferedWriter``: rows are buffered and flushed in one transaction
every ~2 s; when the store stays locked past the deadline the batch goes to the store's spool
folder (one JSON file per batch, recording which store it belongs to; beside the store by
default, see ``store.db.StoreIdentity``) and is ingested by that store only: on its next
successful flush, or by ``servescope db ingest-spool``. Nothing is dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa

from errors import InputError, StoreError, StoreLockedError
from store import rollups, schema

if TYPE_CHECKING:
    from store.db import Store, StoreIdentity

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
_SAMPLE_TABLES = sorted(set(BULK_TABLES) - {"requests", "token_gaps"})
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
            rollups.touch(conn, [values["run_id"]])  # its figures use the run's own columns
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
        rollups.touch(conn, [run_id])  # its figures (duration, throughput) use these columns


def delete_run(store: Store, run_id: str) -> None:
    """Delete a run with its requests and token gaps, in one transaction."""
    with store.connect() as conn:
        _delete_run(conn, run_id)
        rollups.forget(conn, run_id)


def _delete_run(conn: sa.Connection, run_id: str) -> int:
    """Delete the run and its rows; return the data_version it had (0 when it was not stored)."""
    version = conn.execute(
        sa.select(schema.runs.c.data_version).where(schema.runs.c.run_id == run_id)
    ).scalar()
    for table in (schema.token_gaps, schema.requests, schema.run_shards, schema.runs):
        conn.execute(sa.delete(table).where(table.c.run_id == run_id))
    return int(version or 0)


@dataclass(frozen=True)
class RunRows:
    """One run with all its rows, for ``replace_runs``."""

    run: Mapping[str, Any]
    requests: pd.DataFrame | None = None
    token_gaps: pd.DataFrame | None = None


def replace_runs(
    store: Store,
    runs: Sequence[RunRows],
    samples: Mapping[str, pd.DataFrame] | None = None,
) -> int:
    """Write runs with all their rows (and sample tables) in ONE transaction (importers).

    Any earlier copy of each run is replaced; if anything fails, nothing of the batch stays.
    Returns how many sample rows were new (sample keys already stored are skipped).
    """
    new_samples = 0
    with store.connect() as conn:
        for item in runs:
            values = _run_values({"source": "servescope", **item.run})
            # the new copy continues the old one's data_version, so that a rollup computed
            # from the old rows can never pass for the new ones (and is pruned by the next
            # one kept: deleting it here could conflict with a reader keeping one, see
            # rollups.touch)
            version = _delete_run(conn, values["run_id"]) + 1
            conn.execute(
                sa.insert(schema.runs).values(
                    **{"created_at": time.time(), **values, "data_version": version}
                )
            )
            # the run's rows were just deleted: no need to look for duplicates
            if item.requests is not None and len(item.requests):
                _bulk_insert(conn, schema.requests, item.requests, fresh=True)
            if item.token_gaps is not None and len(item.token_gaps):
                _bulk_insert(conn, schema.token_gaps, item.token_gaps, fresh=True)
        for table, frame in (samples or {}).items():
            if table not in BULK_TABLES or table in ("requests", "token_gaps"):
                raise InputError(f"{table!r} is not a sample table; use one of {_SAMPLE_TABLES}")
            new_samples += _bulk_insert(conn, BULK_TABLES[table], frame)
    return new_samples


def replace_run(
    store: Store,
    run: Mapping[str, Any],
    requests_df: pd.DataFrame | None,
    token_gaps_df: pd.DataFrame | None = None,
) -> None:
    """Write a run and all its rows in one transaction, replacing any earlier copy (importers)."""
    replace_runs(store, [RunRows(run, requests_df, token_gaps_df)])


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


def _bulk_insert(conn: sa.Connection, table: sa.Table, rows: Rows, *, fresh: bool = False) -> int:
    """Insert rows, skipping keys already stored (``fresh``: the caller knows there are none)."""
    df = _frame(table, rows)
    if not len(df):
        return 0
    if table.name in ("requests", "token_gaps"):  # their runs' stored rollups go stale
        rollups.touch(conn, [str(r) for r in pd.unique(df["run_id"])])
    if conn.dialect.name == "duckdb":
        return _duckdb_insert(conn, table, df, fresh=fresh)
    if conn.dialect.name == "postgresql":
        return _postgres_insert(conn, table, df)
    records = _records(df)  # other dialects (SQLite for quick local use): executemany
    conn.execute(sa.insert(table).prefix_with("OR IGNORE"), records)
    return len(records)


def _duckdb_insert(
    conn: sa.Connection, table: sa.Table, df: pd.DataFrame, *, fresh: bool = False
) -> int:
    # DuckDB's bulk tables carry no PRIMARY KEY (its index made ingest ~3x slower, see
    # store.migrations). Rows whose key is already stored are skipped by an anti-join, which
    # only runs when the batch's key range overlaps stored rows (replays, re-imports).
    raw = conn.connection.dbapi_connection
    assert raw is not None
    name = f"_ingest_{uuid.uuid4().hex}"
    cols = ", ".join(f'"{c}"' for c in df.columns)
    keys = [c.name for c in table.primary_key.columns]
    first, last = keys[0], keys[-1]
    raw.register(name, _arrow(df))
    try:
        overlap = (
            0
            if fresh
            else raw.execute(
                f'SELECT count(*) FROM (SELECT 1 FROM "{table.name}" '
                f'WHERE "{first}" IN (SELECT DISTINCT "{first}" FROM {name}) '
                f'AND "{last}" BETWEEN (SELECT min("{last}") FROM {name}) '
                f'AND (SELECT max("{last}") FROM {name}) LIMIT 1) AS o'
            ).fetchall()[0][0]
        )
        insert = f'INSERT INTO "{table.name}" ({cols}) SELECT {cols} FROM {name} AS d'
        if overlap:
            match = " AND ".join(f'"{table.name}"."{k}" = d."{k}"' for k in keys)
            insert += f' WHERE NOT EXISTS (SELECT 1 FROM "{table.name}" WHERE {match})'
        result = raw.execute(insert).fetchall()
        return int(result[0][0]) if result else len(df)
    finally:
        # After a failed statement DuckDB refuses even this ("transaction is aborted"); the
        # view dies with the connection anyway, and the statement's own error must propagate.
        with contextlib.suppress(Exception):
            raw.unregister(name)


def _arrow(df: pd.DataFrame) -> pa.Table:
    """The frame as Arrow, with repetitive text columns (run_id, status …) dictionary-encoded."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    for i, field in enumerate(table.schema):
        if (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)) and len(
            table
        ) > 1000:
            table = table.set_column(i, field.name, table.column(i).dictionary_encode())
    return table


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
    with cast(Any, raw).cursor() as cur:  # psycopg's cursor (a context manager)
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


Batch = Mapping[str, list[dict[str, Any]] | pd.DataFrame]

#: Run statuses a run ends with; a replayed spooled copy saying "running" never replaces one.
FINAL_STATUSES = frozenset({"completed", "interrupted", "failed"})


def _write_batch(store: Store, batch: Batch, *, replay: bool = False) -> None:
    """Write one batch in one transaction. ``replay``: the batch comes from the spool, so it may
    be older than what is stored: its "running" run rows do not replace an ended run's."""
    with store.connect() as conn:
        runs = batch.get("runs", [])
        for run in _records(runs):
            if replay and run.get("status") == "running" and _ended(conn, str(run["run_id"])):
                continue
            _upsert_run(conn, run)
        for table, rows in batch.items():
            if table != "runs" and len(rows):
                _bulk_insert(conn, BULK_TABLES[table], rows)


def _ended(conn: sa.Connection, run_id: str) -> bool:
    status = conn.execute(
        sa.select(schema.runs.c.status).where(schema.runs.c.run_id == run_id)
    ).scalar()
    return status in FINAL_STATUSES


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(rows: list[dict[str, Any]] | pd.DataFrame) -> list[dict[str, Any]]:
    if isinstance(rows, pd.DataFrame):
        records = rows.astype(object).where(rows.notna(), None).to_dict("records")
        return [{str(k): v for k, v in r.items()} for r in records]
    return rows


# A spool file (format 2) is one JSON object:
#   {"format": 2, "store": {"id": …, "location": …, "url": …}, "written_at": …, "host": …,
#    "pid": …, "tables": {"runs": [...], "requests": [...], …}}
# "store" says which store the batch belongs to (``StoreIdentity.owns``); only that store
# ingests it. Format 1 (before): the tables at the top level, no store recorded.
SPOOL_FORMAT = 2


def spool_batch(batch: Batch, spool_dir: Path, identity: StoreIdentity | None = None) -> Path:
    """Write a batch to its own spool file (written to a temp name, fsynced, then renamed).

    ``identity`` (``Store.identity()``) is recorded so that only that store ingests it.
    """
    spool_dir.mkdir(parents=True, exist_ok=True)
    name = f"{time.time():.6f}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    tmp = spool_dir / (name + ".part")
    tables = {
        t: [{k: _jsonable(v) for k, v in r.items()} for r in _records(rows)]
        for t, rows in batch.items()
    }
    payload: dict[str, Any] = {
        "format": SPOOL_FORMAT,
        "store": None
        if identity is None
        else {"id": identity.store_id, "location": identity.location, "url": identity.url},
        "written_at": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "tables": tables,
    }
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    final = spool_dir / name
    tmp.rename(final)
    return final


@dataclass(frozen=True)
class SpoolFile:
    """A spooled batch read back: its store (None: an old-format file) and its tables."""

    path: Path
    store_id: str | None
    location: str | None
    url: str | None
    tables: dict[str, list[dict[str, Any]]]
    legacy: bool

    @property
    def rows(self) -> int:
        return sum(len(rows) for rows in self.tables.values())


def read_spool_file(path: Path) -> SpoolFile:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and data.get("format") == SPOOL_FORMAT:
        store = data.get("store") or {}
        return SpoolFile(
            path, store.get("id"), store.get("location"), store.get("url"), data["tables"], False
        )
    return SpoolFile(path, None, None, None, data, True)  # format 1: tables only


@dataclass
class SpoolReport:
    """What ``ingest_spool`` did in one folder, and what it left there for others."""

    folder: Path
    rows: int = 0
    batches: int = 0
    rejected: int = 0
    #: batches of other stores left untouched: store (its URL, without password) → count
    others: dict[str, int] = dataclasses.field(default_factory=dict)
    #: old-format batches (no store recorded) left untouched (see ``legacy=True``)
    legacy: int = 0

    def add(self, other: SpoolReport) -> None:
        self.rows += other.rows
        self.batches += other.batches
        self.rejected += other.rejected
        self.legacy += other.legacy
        for key, n in other.others.items():
            self.others[key] = self.others.get(key, 0) + n


#: (store, spool file) → the other store the file belongs to (files never change once in place)
_foreign: dict[tuple[str, str], str] = {}
_foreign_lock = threading.Lock()


def ingest_spool(
    store: Store, spool_dir: Path | None = None, *, legacy: bool = False
) -> SpoolReport:
    """Ingest this store's spooled batches (oldest first), deleting each once stored.

    Batches recorded for another store are left untouched and counted in ``others``;
    old-format batches (which do not say their store) are left and counted in ``legacy``
    unless ``legacy=True`` (the user named the store they belong to). A batch the store refuses
    for a reason other than a lock (bad data) is renamed ``*.rejected`` and kept for inspection,
    so it cannot block the batches after it. ``StoreLockedError`` propagates (nothing lost).
    """
    identity = store.identity()
    folder = spool_dir or identity.spool_dir
    report = SpoolReport(folder)
    if not folder.is_dir():
        return report
    me = identity.store_id or identity.location
    for path in sorted(folder.glob("*.json")):
        key = (me, str(path))
        with _foreign_lock:
            owner = _foreign.get(key)
        if owner is not None:
            if path.exists():
                report.others[owner] = report.others.get(owner, 0) + 1
            continue
        try:
            spooled = read_spool_file(path)
        except FileNotFoundError:  # another process ingested it meanwhile
            continue
        except (ValueError, KeyError, TypeError) as exc:
            _reject(path, f"unreadable: {exc}")
            report.rejected += 1
            continue
        if spooled.legacy and not legacy:
            report.legacy += 1
            continue
        if not spooled.legacy and not identity.owns(spooled.store_id, spooled.location):
            owner = spooled.url or spooled.location or "an unknown store"
            with _foreign_lock:
                _foreign[key] = owner
            report.others[owner] = report.others.get(owner, 0) + 1
            continue
        try:
            _write_batch(store, spooled.tables, replay=True)
        except StoreLockedError:
            raise
        except (StoreError, InputError) as exc:
            _reject(path, str(exc))
            report.rejected += 1
            continue
        report.rows += spooled.rows
        report.batches += 1
        with contextlib.suppress(FileNotFoundError):  # another process took it too (idempotent)
            path.unlink()
    return report


def _reject(path: Path, why: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.rename(path.with_suffix(".rejected"))
    log.error("spooled batch %s rejected by the store: %s", path.name, why)


def _merge(parts: list[dict[str, Any] | pd.DataFrame]) -> list[dict[str, Any]] | pd.DataFrame:
    """One table's buffered parts as one list of dicts, or one DataFrame when any part is one."""
    frames = [p for p in parts if isinstance(p, pd.DataFrame)]
    dicts = [p for p in parts if not isinstance(p, pd.DataFrame)]
    if not frames:
        return dicts
    if dicts:
        frames.append(pd.DataFrame.from_records(dicts))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


class BufferedWriter:
    """Buffers rows per table and flushes them in one transaction every ``flush_interval_s``.

    Thread-safe. With ``background=True`` a daemon thread flushes on the interval; otherwise
    ``add`` flushes when the interval has passed. ``close()`` flushes what is left.

    A flush first ingests this store's spooled batches (older than the buffer), then writes the
    buffer; when the store stays locked the buffer is spooled instead — into the store's own
    spool folder (``Store.identity``), recording the store. A flush interrupted by anything
    (an error, KeyboardInterrupt) spools its batch before the exception goes on: rows are
    stored or spooled, never dropped. ``spooled()`` says what this writer left in the spool.
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
        self.identity = store.identity()
        self.spool_dir = spool_dir or self.identity.spool_dir
        self._buffer: dict[str, list[dict[str, Any] | pd.DataFrame]] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self.rows_written = 0
        self.batches_spooled = 0
        self.rows_spooled = 0
        self._spooled: dict[Path, int] = {}
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._loop, name="servescope-writer", daemon=True
            )
            self._thread.start()

    def add(self, table: str, rows: Rows) -> None:
        """Buffer rows (dicts, or a DataFrame: cheaper for many rows) for ``table``."""
        if table != "runs" and table not in BULK_TABLES:
            raise InputError(f"unknown table {table!r}; writable: runs, {sorted(BULK_TABLES)}")
        with self._lock:
            target = self._buffer.setdefault(table, [])
            if isinstance(rows, pd.DataFrame):
                if table == "runs":
                    raise InputError("add runs as dicts (add_run), not as a DataFrame")
                target.append(rows)
            else:
                target.extend(dict(r) for r in rows)
        if self._thread is None and time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def add_run(self, run: Mapping[str, Any]) -> None:
        self.add("runs", [run])

    def _spool(self, batch: Batch, count: int) -> Path:
        path = spool_batch(batch, self.spool_dir, self.identity)
        self.batches_spooled += 1
        self.rows_spooled += count
        self._spooled[path] = count
        return path

    def flush(self) -> int:
        """Write what is buffered; on a prolonged lock spool it instead. Returns rows handled."""
        with self._flush_lock:
            with self._lock:
                pending, self._buffer = self._buffer, {}
            batch = {t: _merge(parts) for t, parts in pending.items()}
            self._last_flush = time.monotonic()
            count = sum(len(r) for r in batch.values())
            if not count:
                return 0
            try:
                # the spool first: its batches are older (a spooled "running" run row must
                # not land after the buffer's final one)
                self.rows_written += ingest_spool(self.store, self.spool_dir).rows
                _write_batch(self.store, batch)
            except StoreLockedError:
                path = self._spool(batch, count)
                log.warning("store locked: %d rows spooled to %s", count, path)
                return count
            except BaseException:
                # not a lock (or interrupted): keep the rows (spooled), let the caller see it
                self._spool(batch, count)
                raise
            self.rows_written += count
            return count

    def spooled(self) -> tuple[int, int]:
        """(batches, rows) this writer spooled that are still in the spool (not yet ingested)."""
        left = {p: n for p, n in self._spooled.items() if p.exists()}
        return len(left), sum(left.values())

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
