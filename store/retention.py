"""Retention and downsampling of the bulk sample tables (``servescope db compact``, ``watch
--retain-raw``), so a watch of weeks stays bounded on one DuckDB file.

Samples older than ``now - raw_for_s`` are replaced by one row per series and bucket, at the
bucket's start (``floor(ts / bucket_s) * bucket_s``). A series is ``(target, metric)`` in
``engine_samples``, ``(target, name, labels)`` in ``engine_raw_samples`` and ``(host,
gpu_index)`` in ``gpu_samples``. The aggregate of a bucket is:

- **counters** (Prometheus names ending ``_total``, ``_count``, ``_sum``, ``_created``,
  ``_bucket`` and the stored histogram buckets ``<hist>_bucket:<le>``; every cumulative name of
  ``collectors.engine_metrics.COUNTERS`` ends ``_total``): the bucket's FIRST value, the one
  observed at (or just after) the bucket start where the aggregate is stored, so increases,
  rates and histogram counts between bucket-aligned instants stay those of the raw samples.
  (The bucket's last value stored at the bucket start would be up to a bucket late and shift
  every increase by one bucket; the last value of a bucket is the next bucket's first.)
- **gauges** (every other engine metric, and every numeric column of ``gpu_samples``): the
  bucket's MEAN. No max column exists, so a short peak inside an aggregated minute is averaged
  away; the raw window (24 h by default) keeps peaks for the recent past. Text columns
  (``engine``, ``gpu_uuid``, ``gpu_name``, ``source``) take the bucket's first row's.

Samples inside a stored run's window (``runs.started_at`` .. ``ended_at``, or now while the run has
not ended) stay raw: a bucket that overlaps any run's window is left alone, because the
Memory and Home pages read those samples per run. Only buckets that end at or before the cutoff
(the cutoff is rounded down to a bucket edge) are aggregated.

Each table is compacted in ONE transaction (read the aggregates, delete the bucket's rows, insert
the aggregates): a crash mid-way leaves the old rows. Re-running is idempotent: a bucket that
already holds exactly one row per series, at the bucket's start, is skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from errors import InputError
from store import schema
from store.db import Store
from store.ingest import _bulk_insert

#: The compacted tables, in the order compact() visits them.
TABLES = ("engine_samples", "engine_raw_samples", "gpu_samples")

#: Name endings of cumulative series (the aggregate keeps the bucket's first value).
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_created", "_bucket")


@dataclass(frozen=True)
class _Layout:
    keys: tuple[str, ...]  # a series
    mean: tuple[str, ...]  # numeric columns averaged (gauges)
    text: tuple[str, ...]  # columns taken from the bucket's first row
    name: str | None = None  # the column naming the series (counter or gauge), if any


_LAYOUTS: dict[str, _Layout] = {
    "engine_samples": _Layout(("target", "metric"), (), ("engine",), name="metric"),
    "engine_raw_samples": _Layout(("target", "name", "labels"), (), (), name="name"),
    "gpu_samples": _Layout(
        ("host", "gpu_index"),
        (
            "mem_used_bytes",
            "mem_total_bytes",
            "mem_reserved_bytes",
            "util_gpu",
            "util_mem",
            "power_w",
            "temp_c",
            "sm_clock_mhz",
        ),
        ("gpu_uuid", "gpu_name", "source"),
    ),
}


@dataclass
class TableCompaction:
    """One table's compaction: rows before and after, buckets aggregated."""

    table: str
    rows_before: int
    rows_after: int
    buckets: int  # series-buckets replaced by one aggregate row


@dataclass
class CompactReport:
    """What :func:`compact` did (or, with ``dry_run``, would do)."""

    cutoff: float  # samples before this instant (a bucket edge) were eligible
    bucket_s: float
    dry_run: bool
    tables: list[TableCompaction] = field(default_factory=list)

    @property
    def removed(self) -> int:
        return sum(t.rows_before - t.rows_after for t in self.tables)


def is_counter_sql(column: str) -> str:
    """A SQL predicate: the series named by ``column`` is cumulative (see the module doc)."""
    likes = [f"{column} LIKE '%\\{s}' ESCAPE '\\'" for s in COUNTER_SUFFIXES]
    likes.append(f"{column} LIKE '%\\_bucket:%' ESCAPE '\\'")
    return "(" + " OR ".join(likes) + ")"


def _select_sql(table: str, layout: _Layout) -> str:
    """Per series-bucket to compact: its keys, the bucket start as ``ts`` and the aggregates.

    A bucket qualifies when it ends by the cutoff, overlaps no run's window and is not already
    compact (one row, at the bucket's start)."""
    keys = ", ".join(layout.keys)
    part = f"PARTITION BY {keys}, bucket"
    if layout.name is not None:
        values = [
            f"CASE WHEN {is_counter_sql(layout.name)} THEN value "
            f"ELSE AVG(value) OVER ({part}) END AS value"
        ]
        out = ["value"]
    else:
        values = [f"AVG({c}) OVER ({part}) AS {c}" for c in layout.mean]
        out = list(layout.mean)
    values += list(layout.text)
    out += list(layout.text)
    return (
        f"SELECT {keys}, ts, {', '.join(out)} FROM ("
        f" SELECT {keys}, bucket AS ts, {', '.join(values)},"
        f"  ROW_NUMBER() OVER ({part} ORDER BY b0.ts) AS rn_,"
        f"  COUNT(*) OVER ({part}) AS n_, MIN(b0.ts) OVER ({part}) AS first_ts_"
        " FROM ("
        f"  SELECT s.*, FLOOR(s.ts / :bucket_s) * :bucket_s AS bucket FROM {table} s"
        "   WHERE s.ts < :cutoff"
        " ) b0"
        " WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.started_at IS NOT NULL"
        "  AND r.started_at < b0.bucket + :bucket_s"
        "  AND COALESCE(r.ended_at, :now) >= b0.bucket)"
        ") a WHERE a.rn_ = 1 AND (a.n_ > 1 OR a.first_ts_ <> a.ts)"
    )


def _count(conn: sa.Connection, table: str) -> int:
    return int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar() or 0)


def compact_table(
    store: Store,
    table: str,
    *,
    now: float,
    cutoff: float,
    bucket_s: float,
    dry_run: bool = False,
) -> TableCompaction:
    """Compact one table in one transaction (see the module doc)."""
    layout = _LAYOUTS[table]
    params: dict[str, Any] = {"bucket_s": float(bucket_s), "cutoff": cutoff, "now": now}
    keys = ", ".join(layout.keys)
    with store.connect() as conn:
        before = _count(conn, table)
        result = conn.execute(sa.text(_select_sql(table, layout)), params)
        columns = list(result.keys())
        rows = [dict(zip(columns, r, strict=True)) for r in result.fetchall()]
        if not rows:
            return TableCompaction(table, before, before, 0)
        if dry_run:
            # the rows the buckets hold now, replaced by one each
            held = conn.execute(
                sa.text(
                    f"SELECT COUNT(*) FROM {table} WHERE ts < :cutoff AND "
                    f"({keys}, FLOOR(ts / :bucket_s) * :bucket_s) IN "
                    f"(SELECT {keys}, ts FROM ({_select_sql(table, layout)}) q)"
                ),
                params,
            ).scalar()
            return TableCompaction(table, before, before - int(held or 0) + len(rows), len(rows))
        conn.execute(
            sa.text(
                f"DELETE FROM {table} WHERE ts < :cutoff AND "
                f"({keys}, FLOOR(ts / :bucket_s) * :bucket_s) IN "
                f"(SELECT {keys}, ts FROM ({_select_sql(table, layout)}) q)"
            ),
            params,
        )
        _bulk_insert(conn, schema.metadata.tables[table], rows, fresh=True)
        after = _count(conn, table)
    return TableCompaction(table, before, after, len(rows))


def compact(
    store: Store,
    *,
    now: float | None = None,
    raw_for_s: float = 24 * 3600,
    bucket_s: float = 60,
    tables: tuple[str, ...] = TABLES,
    dry_run: bool = False,
) -> CompactReport:
    """Replace samples older than ``now - raw_for_s`` by per-``bucket_s`` aggregates (module doc).

    InputError for a bucket under 1 s or not a whole number of seconds, a negative raw span, or
    an unknown table; nothing is written then.
    """
    if bucket_s < 1 or bucket_s != int(bucket_s):
        raise InputError(
            f"the downsampling bucket must be a whole number of seconds ≥ 1, got {bucket_s!r}",
            hint="e.g. 1m or 60s",
        )
    if raw_for_s < 0:
        raise InputError(f"the raw span must be ≥ 0, got {raw_for_s!r}", hint="e.g. 24h")
    unknown = [t for t in tables if t not in _LAYOUTS]
    if unknown:
        raise InputError(
            f"cannot compact {', '.join(unknown)}", hint=f"compactable: {', '.join(TABLES)}"
        )
    now = time.time() if now is None else float(now)
    cutoff = (now - raw_for_s) // bucket_s * bucket_s
    report = CompactReport(cutoff=cutoff, bucket_s=float(bucket_s), dry_run=dry_run)
    for table in tables:
        report.tables.append(
            compact_table(store, table, now=now, cutoff=cutoff, bucket_s=bucket_s, dry_run=dry_run)
        )
    return report
