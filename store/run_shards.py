"""Reads and writes of ``run_shards``: the hosts of one run (``bench --shard I/N``) join,
agree on a common start, heartbeat and finish through the store (PostgreSQL only).

Every step is one transaction. Those that decide something for the whole run — joining, fixing
the start, finishing and merging — first lock the run's row (``SELECT … FOR UPDATE``), so two
hosts can never both decide: the last host to become ready fixes the start once, and of hosts
finishing together exactly one sees that it is the last and merges (``analysis.shards``). A
heartbeat touches only its own shard row and never the run's, so no lock order can cycle.
Instants decided here are the database's (``clock_timestamp()``), never a host's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from analysis.shards import (
    SHARD_FINAL,
    ClockSample,
    ShardShare,
    iso,
    load_mismatches,
    merge_shares,
)
from errors import CollectorError, InputError
from store import rollups, schema
from store.db import Store, mask_url
from store.ingest import FINAL_STATUSES, JSON_RUN_FIELDS

T: Final = schema.run_shards
R: Final = schema.runs

_NOW: Final = sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), schema.DOUBLE)
_DB_NOW: Final = sa.select(_NOW)


def require_postgres(store: Store) -> None:
    """``bench --shard`` needs a store several hosts can write at once: PostgreSQL."""
    _require(store.dialect, store.url)


def require_postgres_url(url: str) -> None:
    """``require_postgres`` for a store URL not opened yet (nothing is created when refused)."""
    try:
        dialect = sa.engine.make_url(url).get_backend_name()
    except sa.exc.ArgumentError:
        dialect = url.split(":", 1)[0] or "not a database URL"
    _require(dialect, mask_url(url))


def _require(dialect: str, shown: str) -> None:
    if dialect != "postgresql":
        raise InputError(
            f"--shard needs a PostgreSQL store; {shown} is {dialect}",
            hint="DuckDB takes one writing process at a time and cannot be shared by hosts: give "
            "every host the same --db postgresql+psycopg://user@host/db",
        )


def db_now(conn: sa.Connection) -> float:
    """The database's clock now (epoch seconds), not the transaction's start."""
    return float(conn.execute(_DB_NOW).scalar_one())


def clock_samples(store: Store, count: int = 7) -> list[ClockSample]:
    """``count`` readings of the database's clock, each between two of this host's
    (``analysis.shards.clock_offset`` keeps the tightest). One connection, warmed first."""
    out: list[ClockSample] = []
    with store.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
        for _ in range(count):
            before = time.time()
            db = float(conn.execute(_DB_NOW).scalar_one())
            after = time.time()
            out.append(ClockSample(before, db, after))
    return out


@dataclass(frozen=True)
class Joined:
    joined_at: float  # database clock
    created_run: bool  # this host inserted the run row


def _lock_run(conn: sa.Connection, run_id: str) -> str | None:
    """Lock the run's row for this transaction; its status (None: no such run)."""
    return conn.execute(
        sa.select(R.c.status).where(R.c.run_id == run_id).with_for_update()
    ).scalar()


def _json_run(run: Mapping[str, Any]) -> dict[str, Any]:
    values = dict(run)
    for key in JSON_RUN_FIELDS:
        if values.get(key) is not None and not isinstance(values[key], str):
            values[key] = json.dumps(values[key], sort_keys=True, default=str)
    values.setdefault("created_at", time.time())
    values.setdefault("source", "servescope")
    return values


def join(
    store: Store,
    run: Mapping[str, Any],
    *,
    shard: int,
    shards: int,
    host: str,
    clock_offset_ms: float,
    clock_rtt_ms: float,
    stale_s: float,
) -> Joined:
    """Register ``host`` as shard ``shard`` (0-based) of ``shards`` for ``run`` (the run row
    every host would write; the first to join inserts it). Refused, with nothing written: a run
    that already ended, a count that differs from the other hosts', a start already fixed (too
    late to join), a shard index another live host holds. A row of the same index whose
    heartbeat is older than ``stale_s`` (a host that died before the start) is taken over."""
    run_id = str(run["run_id"])
    with store.connect() as conn:
        inserted = (
            conn.execute(
                postgresql.insert(R)
                .values(**_json_run(run))
                .on_conflict_do_nothing(index_elements=[R.c.run_id])
                .returning(R.c.run_id)
            ).first()
            is not None
        )
        status = _lock_run(conn, run_id)
        if status in FINAL_STATUSES:
            raise InputError(
                f"--group: run {run_id} already ended ({status}); a finished group is not joined "
                "again",
                hint="give a new --group name for a new run",
            )
        rows = conn.execute(sa.select(T).where(T.c.run_id == run_id)).mappings().all()
        if not rows and not inserted:
            raise InputError(
                f"run {run_id} is already in the store and was not made by --shard hosts",
                hint="give a --group name no stored run starts with",
            )
        if not inserted:
            found = conn.execute(sa.select(R).where(R.c.run_id == run_id)).mappings().first()
            first: dict[str, Any] = dict(found) if found is not None else {}
            differs = load_mismatches(first, run)
            if differs:
                raise InputError(
                    f"--shard {shard + 1}/{shards} ({host}): run {run_id} has another load on "
                    f"the group's first host ({first.get('host') or '?'}): " + "; ".join(differs),
                    hint="every host of one --group gives the same workload, load, --requests/"
                    "--duration, --max-tokens, arrival, --seed, --api and model; or give a new "
                    "--group name",
                )
        now = db_now(conn)
        counts = sorted({int(r["shards"]) for r in rows})
        if counts and counts != [shards]:
            raise InputError(
                f"--shard {shard + 1}/{shards}: the other hosts of run {run_id} gave /{counts[0]}",
                hint="every host of one --group gives the same N in --shard I/N",
            )
        started = [r for r in rows if r["start_at"] is not None]
        if started:
            raise CollectorError(
                f"run {run_id} already started at {iso(started[0]['start_at'])}: shard "
                f"{shard + 1}/{shards} ({host}) joins too late",
                hint="start every host's bench before the run starts (they wait for each other),"
                " or give a new --group name",
            )
        same = next((r for r in rows if int(r["shard"]) == shard), None)
        if same is not None:
            beat = same["heartbeat_at"]
            if beat is not None and now - float(beat) <= stale_s:
                raise InputError(
                    f"--shard {shard + 1}/{shards}: host {same['host']} already holds that share "
                    f"of run {run_id}",
                    hint="give each host its own index I of --shard I/N",
                )
            conn.execute(sa.delete(T).where(T.c.run_id == run_id, T.c.shard == shard))
        conn.execute(
            sa.insert(T).values(
                run_id=run_id,
                shard=shard,
                shards=shards,
                host=host,
                status="joined",
                joined_at=now,
                heartbeat_at=now,
                requests=0,
                ok=0,
                errors=0,
                clock_offset_ms=clock_offset_ms,
                clock_rtt_ms=clock_rtt_ms,
            )
        )
    return Joined(joined_at=now, created_run=bool(inserted))


def leave(store: Store, run_id: str, shard: int) -> None:
    """Undo a ``join`` when the run never started (no host reached the start): this shard's row
    goes, and the run row too once no shard is left and it has no requests."""
    with store.connect() as conn:
        _lock_run(conn, run_id)
        conn.execute(
            sa.delete(T).where(T.c.run_id == run_id, T.c.shard == shard, T.c.start_at.is_(None))
        )
        left = conn.execute(
            sa.select(sa.func.count()).select_from(T).where(T.c.run_id == run_id)
        ).scalar_one()
        rows = conn.execute(
            sa.select(sa.func.count())
            .select_from(schema.requests)
            .where(schema.requests.c.run_id == run_id)
        ).scalar_one()
        if not left and not rows:
            conn.execute(sa.delete(R).where(R.c.run_id == run_id, R.c.status == "running"))


def ready(store: Store, run_id: str, shard: int, *, lead_s: float) -> float | None:
    """This shard is warmed up and waits for the start. The host that makes every shard ready
    fixes the start, ``lead_s`` ahead on the database's clock, on every row; the start (database
    clock) when fixed, else None."""
    with store.connect() as conn:
        _lock_run(conn, run_id)
        conn.execute(
            sa.update(T)
            .where(T.c.run_id == run_id, T.c.shard == shard, T.c.status == "joined")
            .values(status="ready", heartbeat_at=db_now(conn))
        )
        return _fix_start(conn, run_id, lead_s)


def _fix_start(conn: sa.Connection, run_id: str, lead_s: float) -> float | None:
    rows = conn.execute(
        sa.select(T.c.status, T.c.start_at, T.c.shards).where(T.c.run_id == run_id)
    ).all()
    fixed = next((float(r.start_at) for r in rows if r.start_at is not None), None)
    if fixed is not None:
        return fixed
    if not rows or len(rows) < int(rows[0].shards) or any(r.status != "ready" for r in rows):
        return None
    start = db_now(conn) + lead_s
    conn.execute(sa.update(T).where(T.c.run_id == run_id).values(start_at=start))
    return start


@dataclass(frozen=True)
class StartState:
    start_at: float | None  # database clock, once fixed
    now: float  # database clock
    waiting_for: tuple[str, ...]  # shards not yet ready ("2/3 host-b: joined"; "3/3: not joined")


def start_state(store: Store, run_id: str, shard: int) -> StartState:
    """Whether the start is fixed, and (while not) which shards the hosts still wait for.
    Also this shard's heartbeat."""
    with store.connect() as conn:
        now = db_now(conn)
        conn.execute(
            sa.update(T).where(T.c.run_id == run_id, T.c.shard == shard).values(heartbeat_at=now)
        )
        rows = conn.execute(
            sa.select(T.c.shard, T.c.shards, T.c.host, T.c.status, T.c.start_at).where(
                T.c.run_id == run_id
            )
        ).all()
    fixed = next((float(r.start_at) for r in rows if r.start_at is not None), None)
    shards = int(rows[0].shards) if rows else 0
    seen = {int(r.shard): r for r in rows}
    waiting = tuple(
        f"{i + 1}/{shards} {seen[i].host}: {seen[i].status}"
        if i in seen
        else f"{i + 1}/{shards}: not joined"
        for i in range(shards)
        if i not in seen or seen[i].status != "ready"
    )
    return StartState(fixed, now, waiting)


def heartbeat(
    store: Store,
    run_id: str,
    shard: int,
    *,
    requests: int,
    ok: int,
    errors: int,
    status: str | None = None,
) -> bool:
    """This host is alive (database clock), with its progress; False when the shard was already
    ended (another host found it silent and marked it failed)."""
    values: dict[str, Any] = {
        "heartbeat_at": _NOW,
        "requests": requests,
        "ok": ok,
        "errors": errors,
    }
    if status is not None:
        values["status"] = status
    with store.connect() as conn:
        done = conn.execute(
            sa.update(T)
            .where(T.c.run_id == run_id, T.c.shard == shard, T.c.status.notin_(SHARD_FINAL))
            .values(**values)
        ).rowcount
    return bool(done)


def finish(
    store: Store,
    run_id: str,
    shard: int,
    *,
    status: str,
    started_at: float | None,
    ended_at: float | None,
    requests: int,
    ok: int,
    errors: int,
    client_bound: bool | None,
    reason: str | None,
    summary: Mapping[str, Any],
    error: str | None = None,
) -> str:
    """Record how this host's share ended; the status the shard row has after (``failed``
    when another host had already found this one silent: that verdict stands)."""
    with store.connect() as conn:
        _lock_run(conn, run_id)
        current = conn.execute(
            sa.select(T.c.status).where(T.c.run_id == run_id, T.c.shard == shard)
        ).scalar()
        keep = current == "failed" and status != "failed"
        conn.execute(
            sa.update(T)
            .where(T.c.run_id == run_id, T.c.shard == shard)
            .values(
                status="failed" if keep else status,
                started_at=started_at,
                ended_at=ended_at,
                heartbeat_at=db_now(conn),
                requests=requests,
                ok=ok,
                errors=errors,
                client_bound=client_bound,
                reason=reason,
                summary=json.dumps(dict(summary), sort_keys=True, default=str),
                **({} if keep else {"error": error}),
            )
        )
    return "failed" if keep else status


@dataclass(frozen=True)
class Settled:
    """What ``settle`` found: ``merged`` (this call wrote the run row), ``done`` (another host
    had), or ``waiting`` (hosts still running and heartbeating: ``waiting_for``); ``left``: this
    host left before the start, so it had nothing to settle."""

    state: str
    run_status: str | None = None
    waiting_for: tuple[str, ...] = ()
    marked_failed: tuple[str, ...] = ()


def shares(conn: sa.Connection, run_id: str) -> list[ShardShare]:
    rows = conn.execute(sa.select(T).where(T.c.run_id == run_id).order_by(T.c.shard)).mappings()
    return [
        ShardShare(
            shard=int(r["shard"]),
            shards=int(r["shards"]),
            host=str(r["host"]),
            status=str(r["status"]),
            started_at=r["started_at"],
            ended_at=r["ended_at"],
            requests=int(r["requests"] or 0),
            ok=int(r["ok"] or 0),
            errors=int(r["errors"] or 0),
            client_bound=r["client_bound"],
            reason=r["reason"],
            clock_offset_ms=r["clock_offset_ms"],
            clock_rtt_ms=r["clock_rtt_ms"],
            heartbeat_at=r["heartbeat_at"],
            error=r["error"],
            summary=json.loads(r["summary"]) if r["summary"] else {},
        )
        for r in rows
    ]


def settle(
    store: Store,
    run_id: str,
    *,
    stale_s: float,
    max_error_rate: float = 1.0,
    give_up: bool = False,
) -> Settled:
    """Under the run's lock: mark failed every unfinished shard whose heartbeat is older than
    ``stale_s`` ("no heartbeat since …"); when every shard has then ended, merge them into the
    run row (``analysis.shards.merge_shares``) and end the run. ``give_up``: merge even while
    some are still heartbeating (their share is then missing: the run ends interrupted)."""
    with store.connect() as conn:
        status = _lock_run(conn, run_id)
        if status in FINAL_STATUSES:
            return Settled("done", status)
        now = db_now(conn)
        marked: list[str] = []
        for s in shares(conn, run_id):
            if s.status in SHARD_FINAL or s.heartbeat_at is None:
                continue
            if now - float(s.heartbeat_at) > stale_s:
                conn.execute(
                    sa.update(T)
                    .where(T.c.run_id == run_id, T.c.shard == s.shard)
                    .values(
                        status="failed",
                        error=f"no heartbeat since {iso(s.heartbeat_at)} "
                        f"({now - float(s.heartbeat_at):.1f} s before {iso(now)})",
                    )
                )
                marked.append(s.label)
        found = shares(conn, run_id)
        running = tuple(f"{s.label}: {s.status}" for s in found if s.status not in SHARD_FINAL)
        if running and not give_up:
            return Settled("waiting", None, running, tuple(marked))
        shards = found[0].shards if found else 0
        merged = merge_shares(found, shards=shards, max_error_rate=max_error_rate)
        _write_merged(conn, run_id, merged)
        return Settled("merged", str(merged["status"]), running, tuple(marked))


def _write_merged(conn: sa.Connection, run_id: str, merged: Mapping[str, Any]) -> None:
    row = conn.execute(sa.select(R.c.notes, R.c.client_params).where(R.c.run_id == run_id)).one()
    notes = "; ".join([*([row.notes] if row.notes else []), *merged["notes_lines"]]) or None
    params = json.loads(row.client_params) if row.client_params else {}
    shard = dict(params.get("shard") or {})
    shard.pop("index", None)
    params["shard"] = shard
    values = {k: v for k, v in merged.items() if k != "notes_lines"}
    values["tool_summary"] = json.dumps(values["tool_summary"], sort_keys=True, default=str)
    values["client_params"] = json.dumps(params, sort_keys=True, default=str)
    values["notes"] = notes
    conn.execute(sa.update(R).where(R.c.run_id == run_id).values(**values))
    rollups.touch(conn, [run_id])  # its figures use the run's own columns


def read(store: Store, run_id: str) -> list[ShardShare]:
    """Every shard of ``run_id`` as stored."""
    with store.connect() as conn:
        return shares(conn, run_id)
