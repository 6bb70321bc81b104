"""Reads and writes of the Plan page's own data (migration 7): the user's GPU prices and saved
plans.

``gpu_prices``: one price per catalogue GPU in US dollars per GPU-hour, the user's (never
seeded). A price must be a finite number above 0 and name a GPU of the catalogue (``gpus``);
anything else is an InputError and nothing is written.

``plans``: a plan's *inputs* under a name, as JSON (``services.views.plan.PlanSpec.to_json``);
the result is recomputed from them on every read, so a saved plan follows new measurements.
Each write is one transaction.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any, Final

import pandas as pd
import sqlalchemy as sa

from errors import InputError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

PRICE_COLUMNS: Final = ("gpu", "usd_per_hour", "note", "updated_at", "updated_by")
PLAN_COLUMNS: Final = ("name", "created_at", "updated_at", "created_by")
#: Longest plan name accepted.
MAX_NAME: Final = 100


def _gpu_names(conn: sa.Connection) -> list[str]:
    g = schema.gpus
    return [str(r[0]) for r in conn.execute(sa.select(g.c.name).order_by(g.c.name))]


def check_price(usd_per_hour: Any) -> float:
    """``usd_per_hour`` as a float, or an InputError unless it is a finite number above 0."""
    try:
        value = float(usd_per_hour)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(usd_per_hour, bool) or not (math.isfinite(value) and value > 0):
        raise InputError(
            f"GPU price {usd_per_hour!r} is not a price; accepted: US dollars per GPU-hour, "
            "a finite number above 0 (e.g. 2.49)"
        )
    return value


def set_price(
    store: Store, gpu: str, usd_per_hour: Any, *, note: str | None = None, by: str | None = None
) -> float:
    """Store (or replace) the price of ``gpu`` per GPU-hour; returns it. An unknown GPU or a
    price that is not finite and above 0 is an InputError (nothing written)."""
    value = check_price(usd_per_hour)
    t = schema.gpu_prices
    with store.connect() as conn:
        names = _gpu_names(conn)
        if gpu not in names:
            raise InputError(
                f"unknown GPU {gpu!r}; the catalogue has: {', '.join(names) or 'none'}",
                hint="a GPU's price is kept under its catalogue name (seeds/gpus.toml)",
            )
        row = {"usd_per_hour": value, "note": note, "updated_at": time.time(), "updated_by": by}
        done = conn.execute(sa.update(t).where(t.c.gpu == gpu).values(**row)).rowcount
        if not done:
            conn.execute(sa.insert(t).values(gpu=gpu, **row))
    return value


def get_price(store: Store, gpu: str) -> float | None:
    """The stored price of ``gpu`` per GPU-hour (None: no price set)."""
    t = schema.gpu_prices
    with store.connect() as conn:
        value = conn.execute(sa.select(t.c.usd_per_hour).where(t.c.gpu == gpu)).scalar()
    return None if value is None else float(value)


def list_prices(store: Store) -> pd.DataFrame:
    """Every stored price, by GPU: :data:`PRICE_COLUMNS`."""
    t = schema.gpu_prices
    with store.connect() as conn:
        rows = conn.execute(sa.select(t).order_by(t.c.gpu)).mappings().all()
    return pd.DataFrame([dict(r) for r in rows], columns=list(PRICE_COLUMNS))


def prices(store: Store) -> dict[str, float]:
    """{GPU: US dollars per GPU-hour} of every stored price."""
    t = schema.gpu_prices
    with store.connect() as conn:
        rows = conn.execute(sa.select(t.c.gpu, t.c.usd_per_hour).order_by(t.c.gpu)).all()
    return {str(g): float(p) for g, p in rows}


def delete_price(store: Store, gpu: str) -> bool:
    """Forget the price of ``gpu``; whether there was one."""
    t = schema.gpu_prices
    with store.connect() as conn:
        return bool(conn.execute(sa.delete(t).where(t.c.gpu == gpu)).rowcount)


def plan_state(store: Store, model: str) -> dict[str, tuple[Any, ...]]:
    """What a plan of ``model`` reads, fingerprinted in ONE read: equal parts, equal data.

    ``catalogue``: per catalogue table the plan reads (models, gpus, slo_profiles) its row count
    and the newest and summed ``updated_at`` (every write sets it); ``prices`` and ``plans``: the
    same over ``gpu_prices`` and ``plans``; ``runs``: over ``model``'s runs, their count, the sum
    of their data versions (bumped by every write of their requests), the newest start and end,
    and the summed lengths of the fields a capacity reads (GPU, precision, engine parameters,
    status) plus their GPU counts."""
    f = sa.func

    def stamp(table: sa.Table) -> sa.Subquery:
        at = table.c.updated_at
        return sa.select(f.count(), f.max(at), f.sum(at)).select_from(table).subquery()

    r = schema.runs
    runs = (
        sa.select(
            f.count(),
            f.sum(f.coalesce(r.c.data_version, 0)),
            f.max(r.c.started_at),
            f.max(r.c.ended_at),
            f.sum(
                f.coalesce(f.length(r.c.gpu_name), 0)
                + f.coalesce(f.length(r.c.precision), 0)
                + f.coalesce(f.length(r.c.engine_params), 0)
                + f.coalesce(f.length(r.c.status), 0)
                + f.coalesce(r.c.gpu_count, 0)
            ),
        )
        .where(r.c.model == model)
        .subquery()
    )
    tables = [schema.CATALOG_TABLES[k] for k in ("models", "gpus", "slo_profiles")]
    parts = [stamp(t) for t in tables] + [stamp(schema.gpu_prices), stamp(schema.plans), runs]
    joined: sa.FromClause = parts[0]
    for part in parts[1:]:
        joined = joined.join(part, sa.true())  # one row each: a cross join of aggregates
    stmt = sa.select(*[c for part in parts for c in part.c]).select_from(joined)
    with store.connect() as conn:
        row = conn.execute(stmt).one()
    values = tuple(None if v is None else float(v) for v in row)
    return {
        "catalogue": values[:9],
        "prices": values[9:12],
        "plans": values[12:15],
        "runs": values[15:],
    }


# --- saved plans ----------------------------------------------------------------------------------


def check_name(name: Any) -> str:
    """A plan name: non-empty, at most :data:`MAX_NAME` characters, no control characters."""
    text = str(name or "").strip()
    if not text or len(text) > MAX_NAME or any(ord(c) < 32 for c in text):
        raise InputError(
            f"plan name {name!r} is not a name; accepted: 1 to {MAX_NAME} printable characters"
        )
    return text


def save_plan(store: Store, name: str, spec_json: str, *, by: str | None = None) -> str:
    """Store the plan's inputs (a JSON object) under ``name``, replacing one of that name."""
    name = check_name(name)
    try:
        decoded = json.loads(spec_json)
    except (TypeError, json.JSONDecodeError):
        decoded = None
    if not isinstance(decoded, dict):
        raise InputError(f"plan {name!r}: its spec is not a JSON object")
    t = schema.plans
    now = time.time()
    with store.connect() as conn:
        done = conn.execute(
            sa.update(t).where(t.c.name == name).values(spec=spec_json, updated_at=now)
        ).rowcount
        if not done:
            conn.execute(
                sa.insert(t).values(
                    name=name, spec=spec_json, created_at=now, updated_at=now, created_by=by
                )
            )
    return name


def load_plan(store: Store, name: str) -> dict[str, Any]:
    """The saved plan's inputs as a dict (``PlanSpec.from_json`` reads them); an InputError
    naming the saved plans when there is none of that name."""
    t = schema.plans
    with store.connect() as conn:
        spec = conn.execute(sa.select(t.c.spec).where(t.c.name == name)).scalar()
        if spec is None:
            names = [str(r[0]) for r in conn.execute(sa.select(t.c.name).order_by(t.c.name))]
    if spec is None:
        raise InputError(
            f"no saved plan {name!r}; saved: {', '.join(names) or 'none'}",
            hint="servescope plan … --save NAME stores one",
        )
    decoded = json.loads(str(spec))
    return dict(decoded) if isinstance(decoded, dict) else {}


def plan_names(store: Store) -> list[str]:
    """The saved plans' names, in name order."""
    t = schema.plans
    with store.connect() as conn:
        return [str(r[0]) for r in conn.execute(sa.select(t.c.name).order_by(t.c.name))]


def list_plans(store: Store) -> pd.DataFrame:
    """Every saved plan, newest change first: :data:`PLAN_COLUMNS` and ``spec`` (JSON text)."""
    t = schema.plans
    with store.connect() as conn:
        rows = conn.execute(sa.select(t).order_by(t.c.updated_at.desc(), t.c.name)).mappings().all()
    return pd.DataFrame([dict(r) for r in rows], columns=[*PLAN_COLUMNS, "spec"])


def delete_plan(store: Store, name: str) -> bool:
    """Delete the saved plan ``name``; whether there was one."""
    t = schema.plans
    with store.connect() as conn:
        return bool(conn.execute(sa.delete(t).where(t.c.name == name)).rowcount)
