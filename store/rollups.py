"""Stored per-run results ("rollups"), valid until the run's rows change.

Aggregating a run of millions of requests (exact percentiles sort every value) takes seconds;
the dashboard asks for the same aggregates of the same runs again and again, from every
browser and after every restart. A read wrapped in :func:`cached_runs` or :func:`cached_run`
stores its result per run in ``run_rollups`` and answers later calls from there.

Validity: every write of a run's requests or token gaps bumps ``runs.data_version`` in the same
transaction (``store.ingest``). A rollup records the version it was computed at, read *before*
the rows it aggregates, so a result that raced with a write is tagged with the older version
and never served: the newer version no longer matches it. Rollups of older versions are
removed when a newer one is kept, and with their run.

Only what is worth it is kept: a result that took less than ``min_compute_s`` (default
``SERVESCOPE_ROLLUP_MIN_MS``) is recomputed next time instead, so small runs cost no writes.
Storing is best effort: when the store is locked or read-only the computed result is returned
all the same. Payloads are Arrow IPC streams, so dtypes survive exactly.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa

import settings
from errors import StoreError
from store import schema
from store.sql import with_lists

if TYPE_CHECKING:
    from store.db import Store

log = logging.getLogger("servescope.rollups")

#: Computes the result for some runs: a frame with a ``run_id`` column (rows of other runs,
#: or none, for runs without data).
ComputeRuns = Callable[[list[str]], pd.DataFrame]


#: Part of every rollup's key: bump it when the shape of any stored result changes, so that
#: results stored by an older ServeScope are recomputed instead of served.
FORMAT: Final = 2  # 2: run summaries carry their figures (run_figures.FIGURES)


def params_key(params: Mapping[str, Any]) -> str:
    """The canonical text of a read's arguments (sorted keys, tuples as lists) and FORMAT."""
    keyed = {**params, "_format": FORMAT}
    return json.dumps(keyed, sort_keys=True, separators=(",", ":"), default=str)


def encode(frame: pd.DataFrame) -> bytes:
    """A DataFrame as an Arrow IPC stream (dtypes kept through pandas metadata)."""
    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def decode(payload: bytes) -> pd.DataFrame:
    """The DataFrame :func:`encode` wrote, with the same dtypes (text columns that were
    ``object`` stay ``object`` rather than becoming pandas' string dtype)."""
    with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
        table = reader.read_all()
    frame = table.to_pandas()
    meta = table.schema.pandas_metadata or {}
    for column in meta.get("columns", []):
        name = column.get("name")
        if column.get("numpy_type") == "object" and name in frame and frame[name].dtype != object:
            frame[name] = frame[name].astype(object)
    return frame


def versions(store: Store, run_ids: Sequence[str]) -> dict[str, int]:
    """The current data_version of each existing run of ``run_ids`` — read it BEFORE the rows a
    result is computed from, and :func:`keep` the result with it."""
    with store.connect() as conn:
        return _versions(conn, list(run_ids))


def _versions(conn: sa.Connection, run_ids: list[str]) -> dict[str, int]:
    return {
        str(r): int(v or 0)
        for r, v in conn.execute(
            with_lists("SELECT run_id, data_version FROM runs WHERE run_id IN :run_ids"),
            {"run_ids": run_ids},
        )
    }


def _lookup(
    store: Store, run_ids: list[str], kind: str, key: str
) -> tuple[dict[str, int], dict[str, pd.DataFrame]]:
    """(current data_version of each existing run, the fresh stored results by run)."""
    with store.connect() as conn:
        versions = _versions(conn, run_ids)
        stored = conn.execute(
            with_lists(
                "SELECT run_id, data_version, payload FROM run_rollups "
                "WHERE kind = :kind AND params = :params AND run_id IN :run_ids"
            ),
            {"run_ids": run_ids, "kind": kind, "params": key},
        ).fetchall()
    fresh = {str(r): decode(bytes(p)) for r, v, p in stored if versions.get(str(r)) == int(v or 0)}
    return versions, fresh


def fresh_runs(
    store: Store, run_ids: Sequence[str], kind: str, params: Mapping[str, Any]
) -> pd.DataFrame | None:
    """The stored results of ``run_ids`` when every one of them is fresh, else None (nothing
    is computed: for reads that have a cheaper way than the full aggregate)."""
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if not ids:
        return None
    _, fresh = _lookup(store, ids, kind, params_key(params))
    if any(r not in fresh for r in ids):
        return None
    return pd.concat([fresh[r] for r in ids], ignore_index=True)


def keep(
    store: Store,
    kind: str,
    params: Mapping[str, Any],
    results: Mapping[str, tuple[int, pd.DataFrame]],
    compute_ms: float,
) -> None:
    """Store results computed outside :func:`cached_runs` (several at once): ``results`` maps
    run_id → (the data_version read before computing, the run's frame). Best effort."""
    _save(store, kind, params_key(params), results, compute_ms)


def _save(
    store: Store,
    kind: str,
    key: str,
    results: Mapping[str, tuple[int, pd.DataFrame]],
    compute_ms: float,
) -> None:
    if not results:
        return
    rows = [
        {
            "run_id": run_id,
            "kind": kind,
            "params": key,
            "data_version": version,
            "payload": encode(frame),
            "computed_at": time.time(),
            "compute_ms": compute_ms,
        }
        for run_id, (version, frame) in results.items()
    ]
    table = schema.run_rollups
    try:
        with store.connect() as conn:
            conn.execute(
                sa.delete(table).where(
                    table.c.kind == kind,
                    table.c.params == key,
                    table.c.run_id.in_(list(results)),
                )
            )
            # rollups of these runs' older data (any kind) are dead weight: drop them here,
            # on the reader's side (ingest only bumps the version, see touch)
            for run_id, (version, _) in results.items():
                conn.execute(
                    sa.delete(table).where(table.c.run_id == run_id, table.c.data_version < version)
                )
            conn.execute(sa.insert(table), rows)
    except StoreError as exc:  # locked, read-only …: the result is still good to return
        log.info("rollup %s not stored (%s); it will be recomputed next time", kind, exc)


def cached_runs(
    store: Store,
    run_ids: Sequence[str],
    kind: str,
    params: Mapping[str, Any],
    compute: ComputeRuns,
    *,
    min_compute_s: float | None = None,
) -> pd.DataFrame:
    """The rows ``compute`` gives for ``run_ids`` (one result per run, a ``run_id`` column),
    served from stored rollups where they are fresh and computed for the others in one call.

    Rows come grouped by run in ``run_ids`` order. Runs that are not in ``runs`` are passed to
    ``compute`` but never stored (there is no version to tie them to).
    """
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if not ids:
        return compute([])
    key = params_key(params)
    versions, fresh = _lookup(store, ids, kind, key)
    stale = [r for r in ids if r not in fresh]
    parts: dict[str, pd.DataFrame] = dict(fresh)
    if stale:
        started = time.perf_counter()
        computed = compute(stale)
        elapsed = time.perf_counter() - started
        by_run = {str(r): g for r, g in computed.groupby("run_id", sort=False)}
        empty = computed.iloc[0:0]
        for run_id in stale:
            parts[run_id] = by_run.get(run_id, empty)
        threshold = settings.rollup_min_s() if min_compute_s is None else min_compute_s
        keep = {r: (versions[r], parts[r]) for r in stale if r in versions}
        if keep and elapsed >= threshold:
            _save(store, kind, key, keep, elapsed * 1000)
        template = computed
    else:
        template = next(iter(fresh.values()))
    frames = [parts[r] for r in ids if len(parts[r])]
    if not frames:
        return template.iloc[0:0].reset_index(drop=True)
    return (
        pd.concat(frames, ignore_index=True)
        if len(frames) > 1
        else frames[0].reset_index(drop=True)
    )


def cached_run(
    store: Store,
    run_id: str,
    kind: str,
    params: Mapping[str, Any],
    compute: Callable[[], pd.DataFrame],
    *,
    min_compute_s: float | None = None,
) -> pd.DataFrame:
    """``compute()`` — a result about the one run ``run_id`` — served from its stored rollup
    when that is fresh, else computed (and stored when it took at least ``min_compute_s``)."""
    versions, fresh = _lookup(store, [run_id], kind, params_key(params))
    if run_id in fresh:
        return fresh[run_id]
    started = time.perf_counter()
    result = compute()
    elapsed = time.perf_counter() - started
    threshold = settings.rollup_min_s() if min_compute_s is None else min_compute_s
    if run_id in versions and elapsed >= threshold:
        _save(store, kind, params_key(params), {run_id: (versions[run_id], result)}, elapsed * 1000)
    return result


def touch(conn: sa.Connection, run_ids: Sequence[str]) -> None:
    """Inside a writing transaction: the runs' rows change, so bump their data_version (ingest
    calls this with every write of requests or token gaps). That alone retires their rollups.
    The writer deliberately leaves run_rollups alone: on DuckDB a delete there would conflict
    with a reader keeping a rollup at the same moment ("Conflict on tuple deletion") and fail
    the collector's flush; the next rollup kept for the run removes the stale ones instead."""
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if not ids:
        return
    conn.execute(
        with_lists(
            "UPDATE runs SET data_version = COALESCE(data_version, 0) + 1 WHERE run_id IN :run_ids"
        ),
        {"run_ids": ids},
    )


def forget(conn: sa.Connection, run_id: str) -> None:
    """Inside a transaction that deletes a run: drop its rollups."""
    conn.execute(sa.delete(schema.run_rollups).where(schema.run_rollups.c.run_id == run_id))


def stored(store: Store) -> pd.DataFrame:
    """What is kept (for tests and for looking into a store): run_id, kind, params,
    data_version, bytes, computed_at, compute_ms."""
    return store.read_df(
        "SELECT run_id, kind, params, data_version, OCTET_LENGTH(payload) AS bytes, computed_at, "
        "compute_ms FROM run_rollups ORDER BY run_id, kind, params"
    )
