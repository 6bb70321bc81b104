"""The catalog: GPUs, models, SLO profiles, workloads and the framework evaluation checklist
(frameworks, criteria, scores with evidence, weight presets), seeded from ``seeds/*.toml``.

Seeding is idempotent and runs when a store is first opened: a missing seed entry is inserted,
a seed entry whose TOML changed is updated, and an entry a user edited (``origin = 'user'``) is
never touched again by reseeding.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

import seeds
from analysis import checklist
from errors import ConfigError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

KINDS = tuple(schema.CATALOG_TABLES)
_META = ("origin", "seed_hash", "updated_at")
# catalog tables whose full entry is kept as JSON in `spec` (the other tables are all columns)
_SPEC_KINDS = {"slo_profiles", "workloads", "frameworks", "criteria", "weight_presets"}


def _table(kind: str) -> sa.Table:
    if kind not in schema.CATALOG_TABLES:
        raise ConfigError(f"unknown catalog {kind!r}; catalogs: {', '.join(KINDS)}")
    return schema.CATALOG_TABLES[kind]


def _row(kind: str, entry: dict[str, Any], origin: str) -> dict[str, Any]:
    table = _table(kind)
    columns = {c.name for c in table.columns}
    row = {
        k: json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v
        for k, v in entry.items()
        if k in columns and k not in _META
    }
    if kind in _SPEC_KINDS:
        row["spec"] = json.dumps(entry, sort_keys=True)
    row["origin"] = origin
    row["updated_at"] = time.time()
    return row


def _hash(entry: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()[:16]


#: The checklist's seed files are validated together before any is written.
CHECKLIST_KINDS = ("frameworks", "criteria", "framework_scores", "weight_presets")


def validate_seeds() -> None:
    """Validate the checklist seeds as one catalogue (scores name known frameworks and
    criteria, scores 0–5 with evidence, source and date, presets name known criteria): a
    malformed seed edit is one ConfigError naming the file, the entry and the key."""
    checklist.Catalog.from_entries(*(seeds.entries(kind) for kind in CHECKLIST_KINDS))


def seed(store: Store) -> int:
    """Insert or refresh seed entries; user-edited entries are kept. Returns entries written.
    The seeds are validated first: a malformed seed file writes nothing."""
    validate_seeds()
    written = 0
    with store.connect() as conn:
        for kind in KINDS:
            table = _table(kind)
            existing = {
                r.name: (r.origin, r.seed_hash)
                for r in conn.execute(sa.select(table.c.name, table.c.origin, table.c.seed_hash))
            }
            new_rows: list[dict[str, Any]] = []
            for entry in seeds.entries(kind):
                digest = _hash(entry)
                row = _row(kind, entry, "seed") | {"seed_hash": digest}
                state = existing.get(entry["name"])
                if state is None:
                    new_rows.append(row)
                elif state[0] == "seed" and state[1] != digest:
                    conn.execute(
                        sa.update(table).where(table.c.name == entry["name"]).values(**row)
                    )
                    written += 1
            # one executemany per table and set of fields (entries may leave optional fields
            # out): a new store's ~200 seed rows in a few statements, not one each (~0.6 s)
            by_fields: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for row in new_rows:
                by_fields.setdefault(tuple(sorted(row)), []).append(row)
            for group in by_fields.values():
                conn.execute(sa.insert(table), group)
            written += len(new_rows)
    return written


def names(store: Store, kind: str) -> list[str]:
    table = _table(kind)
    with store.connect() as conn:
        return [r[0] for r in conn.execute(sa.select(table.c.name).order_by(table.c.name))]


def _entry(kind: str, row: Mapping[Any, Any]) -> dict[str, Any]:
    if kind in _SPEC_KINDS and row["spec"]:
        entry: dict[str, Any] = json.loads(row["spec"])
        entry["name"] = row["name"]
        return entry
    return {str(k): v for k, v in row.items() if k not in _META}


def entries(store: Store, kind: str) -> list[dict[str, Any]]:
    """Every entry of one catalog table as dicts (their TOML fields), by name, in one read;
    ``origin`` (``seed`` / ``user``) added."""
    table = _table(kind)
    with store.connect() as conn:
        rows = conn.execute(sa.select(table).order_by(table.c.name)).mappings().all()
    return [_entry(kind, row) | {"origin": row["origin"]} for row in rows]


def get(store: Store, kind: str, name: str) -> dict[str, Any]:
    """One catalog entry as a dict (its TOML fields); the error lists the valid names."""
    table = _table(kind)
    with store.connect() as conn:
        row = conn.execute(sa.select(table).where(table.c.name == name)).mappings().first()
        if row is None:
            valid = [r[0] for r in conn.execute(sa.select(table.c.name).order_by(table.c.name))]
            label = kind[:-1].replace("_", " ")
            raise ConfigError(f"unknown {label} {name!r}; available: {', '.join(valid) or 'none'}")
    return _entry(kind, row)


def save_user_entry(store: Store, kind: str, entry: dict[str, Any]) -> None:
    """Create or overwrite an entry as the user's own; reseeding will not change it."""
    if not entry.get("name"):
        raise ConfigError(f"a {kind[:-1].replace('_', ' ')} needs a name")
    table = _table(kind)
    row = _row(kind, entry, "user") | {"seed_hash": None}
    with store.connect() as conn:
        done = conn.execute(
            sa.update(table).where(table.c.name == entry["name"]).values(**row)
        ).rowcount
        if not done:
            conn.execute(sa.insert(table).values(**row))


def delete_user_entry(store: Store, kind: str, name: str) -> None:
    """Delete a user entry; a seed entry of that name comes back on the next seeding."""
    table = _table(kind)
    with store.connect() as conn:
        conn.execute(sa.delete(table).where(table.c.name == name, table.c.origin == "user"))
