"""``servescope db``: store maintenance — info, runs, migrate, ingest-spool, prepare, compact;
and the pinned baselines of ``servescope compare --baseline pinned`` (pin, unpin, pinned).

Exit codes: 0 done; ``errors.ExitCode.PARTIAL`` (1) when the store refused some writes
(``ingest-spool``: batches kept as ``*.rejected``; ``prepare``: the store stayed locked);
``ERROR`` (2) for an unknown run id, a bad ``--limit`` or a bad ``compact`` duration (nothing
done).

A pinned baseline is a run tagged ``baseline`` (:data:`PIN_TAG`, visible and editable on the
Data page); ``db pin`` keeps at most one per (model, gpu_name, workload).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from errors import ExitCode, InputError
from services.commands.watch import parse_duration
from store import ingest, migrations, retention, runs_table, tables
from store.db import Store, location_spool_dir
from store.lifecycle import open_store

#: where spool files went before they recorded their store (relative to the working directory)
_OLD_SPOOL_DIR = Path("data/spool")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``db`` subcommand and its actions to cli.py's parser."""
    db = sub.add_parser(
        "db", help="store maintenance: info, runs, migrate, ingest-spool, prepare, pin"
    )
    db.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    actions = db.add_subparsers(dest="db_action", required=True)
    actions.add_parser("info", help="print the store URL and row counts per table")
    listing = actions.add_parser("runs", help="list the stored runs, newest first (id, name, …)")
    listing.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most N runs (default 50)"
    )
    actions.add_parser("migrate", help="bring the schema up to date and seed the catalog")
    spool = actions.add_parser(
        "ingest-spool", help="store the batches spooled while the store was locked"
    )
    spool.add_argument(
        "--legacy",
        action="store_true",
        help="also store old-format batches (they do not record their store) into this store",
    )
    prepare_action = actions.add_parser(
        "prepare",
        help="compute run summaries (and large runs' page views) now, so first views are quick",
        description="Compute and keep each run's summary, and the Latency/Memory page views of "
        "runs of 500k+ requests (import and bench do this for their own runs; use this for "
        "runs written another way, or after an upgrade). Cheap for runs already prepared.",
    )
    prepare_action.add_argument(
        "run_ids",
        nargs="*",
        metavar="RUN_ID",
        help="space-separated run ids (default: every run); an unknown id is an error and "
        "nothing is prepared",
    )
    compact = actions.add_parser(
        "compact",
        help="downsample old engine and GPU samples to per-bucket aggregates (bounded store)",
        description="Replace engine_samples, engine_raw_samples and gpu_samples rows older than "
        "--raw-for by one row per series and --bucket: the first value for counters (names "
        "ending _total/_count/_sum/_bucket), the mean for gauges. Samples inside a stored run's "
        "window stay raw. One transaction per table; re-running is a no-op. See docs/retention.md.",
    )
    compact.add_argument(
        "--raw-for",
        type=parse_duration,
        default=24 * 3600.0,
        metavar="DURATION",
        help="keep samples raw this long (default 24h; e.g. 30m, 6h)",
    )
    compact.add_argument(
        "--bucket",
        type=parse_duration,
        default=60.0,
        metavar="DURATION",
        help="aggregate older samples per this bucket (default 1m; whole seconds)",
    )
    compact.add_argument(
        "--dry-run", action="store_true", help="print what would change, write nothing"
    )
    pin = actions.add_parser(
        "pin",
        help="pin a run as the baseline of its model, GPU and workload (compare --baseline pinned)",
        description="Mark RUN_ID as the baseline `servescope compare --baseline pinned` uses for "
        "runs of the same model, GPU and workload (the run's tag `baseline`). One run is pinned "
        "per combination: pinning another unpins the old one, and says so.",
    )
    pin.add_argument("run_id", metavar="RUN_ID")
    unpin = actions.add_parser("unpin", help="unpin a run pinned as a baseline (db pin)")
    unpin.add_argument("run_id", metavar="RUN_ID")
    actions.add_parser(
        "pinned", help="list the pinned baselines, one per model, GPU and workload (db pin)"
    )
    db.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope db``: run the chosen action on the store ``--db`` names."""
    store = open_store(args.db)
    if args.db_action == "migrate":
        print(f"{store.url}: schema version {migrations.migrate(store)}")
    elif args.db_action == "ingest-spool":
        return ingest_spool(store, legacy=args.legacy)
    elif args.db_action == "runs":
        print_runs(store, args.limit)
    elif args.db_action == "prepare":
        return prepare_runs(store, args.run_ids)
    elif args.db_action == "compact":
        print_compact(store, raw_for_s=args.raw_for, bucket_s=args.bucket, dry_run=args.dry_run)
    elif args.db_action == "pin":
        for line in pin_run(store, args.run_id):
            print(line)
    elif args.db_action == "unpin":
        print(unpin_run(store, args.run_id))
    elif args.db_action == "pinned":
        print_pinned(store)
    else:
        print_info(store)
    return ExitCode.OK


def print_info(store: Store) -> None:
    """``servescope db info``: the store URL and the row count of each table."""
    print(f"store: {store.url}")
    for table, count in tables.table_counts(store).items():
        print(f"  {table:<22} {count:>12,}")


def print_compact(store: Store, *, raw_for_s: float, bucket_s: float, dry_run: bool) -> None:
    """``servescope db compact``: downsample old samples (``store.retention``), printing the rows
    before and after per table."""
    report = retention.compact(store, raw_for_s=raw_for_s, bucket_s=bucket_s, dry_run=dry_run)
    cutoff = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(report.cutoff))
    verb = "would compact" if dry_run else "compacted"
    print(f"{verb} samples before {cutoff} UTC into {report.bucket_s:g} s buckets in {store.url}")
    print(f"  {'table':<20} {'rows before':>12} {'rows after':>12} {'buckets':>9}")
    for t in report.tables:
        print(f"  {t.table:<20} {t.rows_before:>12,} {t.rows_after:>12,} {t.buckets:>9,}")
    if dry_run:
        print("dry run: nothing was written")


def prepare_runs(store: Store, run_ids: Sequence[str]) -> int:
    """``servescope db prepare``: what the pages show first of ``run_ids`` (default: every run),
    computed now. An unknown id is an InputError and nothing is prepared; PARTIAL when the store
    refused the writes."""
    from services.commands import prepare

    wanted = list(dict.fromkeys(run_ids))
    if wanted:
        known = runs_table.existing_run_ids(store, wanted)
        unknown = [r for r in wanted if r not in known]
        if unknown:
            raise InputError(
                f"{len(unknown)} run id(s) not in {store.url}: {', '.join(unknown)}; "
                "nothing was prepared",
                hint="`servescope db runs` lists the stored runs",
            )
    ids = wanted or runs_table.run_ids(store)
    if not prepare.prepare(store, ids):
        print(f"servescope db prepare: {store.url} refused the writes (locked?)", file=sys.stderr)
        return ExitCode.PARTIAL
    print(f"prepared {len(ids)} run(s) in {store.url}")
    return ExitCode.OK


def ingest_spool(store: Store, *, legacy: bool) -> int:
    """``servescope db ingest-spool``: this store's batches from its spool folder (and the old
    shared ``data/spool``); says what it left for other stores, and where."""
    own = store.identity().spool_dir
    extra = [_OLD_SPOOL_DIR]
    if store.dialect not in ("duckdb", "sqlite"):
        # a server store's batches spooled while its id was unknown: its location's folder
        extra.insert(0, location_spool_dir(store.location))
    folders = [own] + [f for f in extra if f.is_dir() and f.resolve() != own.resolve()]
    total = ingest.SpoolReport(own)
    lines: list[str] = []
    for folder in folders:
        report = ingest.ingest_spool(store, folder, legacy=legacy)
        total.add(report)
        for other, n in sorted(report.others.items()):
            lines.append(f"  left {n} batch(es) of {other} in {folder.resolve()}")
        if report.legacy:
            lines.append(
                f"  left {report.legacy} old-format batch(es) in {folder.resolve()}: they do not "
                "record their store; add --legacy to store them into this one"
            )
    print(
        f"ingested {total.rows} spooled rows ({total.batches} batch(es)) into {store.url} "
        f"from {own.resolve()}"
    )
    for line in lines:
        print(line)
    if total.rejected:
        print(
            f"servescope db ingest-spool: {total.rejected} batch(es) refused by the store, "
            "kept as *.rejected (see the log)",
            file=sys.stderr,
        )
        return ExitCode.PARTIAL
    return ExitCode.OK


def print_runs(store: Store, limit: int) -> None:
    """``servescope db runs``: one line per run, newest first (InputError for ``limit`` < 1)."""
    if limit < 1:
        raise InputError(f"--limit must be ≥ 1, got {limit}")
    df = runs_table.list_runs(store, limit=limit, request_counts=True)
    if df.empty:
        print(f"no runs in {store.url} (servescope bench, import or demo add some)")
        return
    print(f"{'run_id':<36} {'started (UTC)':<16} {'source':<12} {'requests':>9}  name")
    for row in df.to_dict("records"):
        when = "-"
        for key in ("started_at", "created_at"):
            value = row.get(key)
            if isinstance(value, int | float) and value == value:  # not NaN
                when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(value)))
                break
        print(
            f"{row['run_id']!s:<36} {when:<16} {row.get('source') or '-'!s:<12} "
            f"{int(row.get('requests') or 0):>9,}  {row.get('name') or ''!s}"
        )
    print(f"{len(df)} run(s) shown" + (f" (--limit {limit})" if len(df) == limit else ""))


# --- pinned baselines (servescope compare --baseline pinned) -----------------------------------

#: The tag (in ``runs.tags``) that marks a run as the pinned baseline of its combination.
PIN_TAG = "baseline"
#: What a pinned baseline stands for: at most one pinned run per these columns' values.
PIN_KEY = ("model", "gpu_name", "workload")


def _value(value: object) -> str | None:
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return None
    return str(value)


def pin_key(run: Mapping[str, Any]) -> tuple[str | None, ...]:
    """A run's (model, gpu_name, workload); None where the run does not say."""
    return tuple(_value(run.get(c)) for c in PIN_KEY)


def describe_key(key: Sequence[str | None]) -> str:
    """``model=…, gpu=…, workload=…`` ("?" where unknown)."""
    names = ("model", "gpu", "workload")
    return ", ".join(f"{n}={v if v is not None else '?'}" for n, v in zip(names, key, strict=True))


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in df.to_dict("records")]


def pinned_runs(store: Store) -> pd.DataFrame:
    """The runs tagged :data:`PIN_TAG`, newest first (``runs_table.list_runs`` columns)."""
    df = runs_table.list_runs(store, limit=None, tag=PIN_TAG)
    keep = [PIN_TAG in tags for tags in df["tags"]]
    return df[keep].reset_index(drop=True)


def pinned_for(store: Store, run: Mapping[str, Any]) -> str:
    """The run id pinned for ``run``'s model, GPU and workload. InputError when none is (saying
    how to pin one) or when several are (their tags were edited by hand)."""
    key = pin_key(run)
    df = pinned_runs(store)
    ids = [str(r["run_id"]) for r in _records(df) if pin_key(r) == key]
    if ids == [str(run.get("run_id"))]:
        raise InputError(
            f"the candidate {ids[0]} is itself the baseline pinned for {describe_key(key)}",
            hint="compare another run against it, or pin another baseline (`servescope db pin`)",
        )
    if not ids:
        raise InputError(
            f"no baseline is pinned for {describe_key(key)} (the candidate's)",
            hint="pin one with `servescope db pin RUN_ID` (a run of that model, GPU and "
            "workload; `servescope db runs` lists them), or name the baseline run",
        )
    if len(ids) > 1:
        raise InputError(
            f"{len(ids)} runs are pinned for {describe_key(key)}: {', '.join(ids)}",
            hint="`servescope db pin RUN_ID` keeps that one pinned and unpins the others",
        )
    return ids[0]


def _record(store: Store, run_id: str) -> dict[str, Any]:
    run = runs_table.run_record(store, run_id)
    if run is None:
        raise InputError(
            f"run {run_id!r} is not in {store.url}",
            hint="`servescope db runs` lists the stored runs",
        )
    return run


def _tag_list(run: Mapping[str, Any]) -> list[str]:
    tags = run.get("tags")
    if isinstance(tags, list):
        return [str(t) for t in tags]
    return [str(tags)] if tags else []


def pin_run(store: Store, run_id: str) -> list[str]:
    """``servescope db pin``: tag ``run_id`` :data:`PIN_TAG` after untagging the run(s) pinned
    for the same model, GPU and workload (first, so that an interruption leaves none pinned
    rather than two). Returns the lines to print."""
    run = _record(store, run_id)
    key = pin_key(run)
    lines = []
    for other in _records(pinned_runs(store)):
        if str(other["run_id"]) == run_id or pin_key(other) != key:
            continue
        tags = [t for t in _tag_list(other) if t != PIN_TAG]
        ingest.update_run(store, str(other["run_id"]), tags=tags)
        lines.append(f"unpinned {other['run_id']} (the previous baseline for {describe_key(key)})")
    tags = _tag_list(run)
    if PIN_TAG in tags:
        lines.append(f"{run_id} was already pinned as the baseline for {describe_key(key)}")
        return lines
    ingest.update_run(store, run_id, tags=[*tags, PIN_TAG])
    lines.append(f"pinned {run_id} as the baseline for {describe_key(key)}")
    return lines


def unpin_run(store: Store, run_id: str) -> str:
    """``servescope db unpin``: drop the :data:`PIN_TAG` tag of ``run_id`` (saying so when it
    was not pinned). Returns the line to print."""
    run = _record(store, run_id)
    tags = _tag_list(run)
    if PIN_TAG not in tags:
        return f"{run_id} was not pinned (nothing changed)"
    ingest.update_run(store, run_id, tags=[t for t in tags if t != PIN_TAG])
    return f"unpinned {run_id} (no baseline is pinned for {describe_key(pin_key(run))} now)"


def print_pinned(store: Store) -> None:
    """``servescope db pinned``: one line per pinned baseline."""
    df = pinned_runs(store)
    if df.empty:
        print(f"no pinned baselines in {store.url} (servescope db pin RUN_ID pins one)")
        return
    print(f"{'run_id':<36} {'model':<28} {'gpu':<14} {'workload':<14} name")
    for row in _records(df):
        model, gpu, workload = (v if v is not None else "?" for v in pin_key(row))
        print(
            f"{row['run_id']!s:<36} {model:<28} {gpu:<14} {workload:<14} {row.get('name') or ''!s}"
        )
    print(f"{len(df)} pinned baseline(s)")
