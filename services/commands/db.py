"""``servescope db``: store maintenance — info, runs, migrate, ingest-spool, prepare.

Exit codes: 0 done; ``errors.ExitCode.PARTIAL`` (1) when the store refused some writes
(``ingest-spool``: batches kept as ``*.rejected``; ``prepare``: the store stayed locked);
``ERROR`` (2) for an unknown run id or a bad ``--limit`` (nothing done).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from errors import ExitCode, InputError
from store import ingest, migrations, runs_table, tables
from store.db import Store, location_spool_dir
from store.lifecycle import open_store

#: where spool files went before they recorded their store (relative to the working directory)
_OLD_SPOOL_DIR = Path("data/spool")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``db`` subcommand and its actions to cli.py's parser."""
    db = sub.add_parser("db", help="store maintenance: info, runs, migrate, ingest-spool, prepare")
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
    else:
        print_info(store)
    return ExitCode.OK


def print_info(store: Store) -> None:
    """``servescope db info``: the store URL and the row count of each table."""
    print(f"store: {store.url}")
    for table, count in tables.table_counts(store).items():
        print(f"  {table:<22} {count:>12,}")


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
