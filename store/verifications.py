"""The ``verifications`` and ``verification_checks`` tables (migration 5): what ``servescope
verify`` found, one header per verification and one row per check and API.

``verification_checks``' key is (verify_id, check_name), without ``api``; a check runs once per
API, so ``check_name`` is stored as ``<check>/<api>`` (``stop_sequences/chat``) and
``verification_checks`` reads it back as the plain name beside ``api``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from errors import StoreError
from store import schema

if TYPE_CHECKING:
    from store.db import Store

LATEST_COLUMNS: tuple[str, ...] = (
    "verify_id",
    "endpoint",
    "model",
    "framework",
    "framework_version",
    "started_at",
    "passed",
    "failed",
    "failed_checks",
)
CHECK_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in schema.verification_checks.columns if c.name != "verify_id"
)


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def stored_name(name: str, api: str | None) -> str:
    """The ``check_name`` a check of ``api`` is stored under (``stop_sequences/chat``)."""
    return f"{name}/{api}" if api else name


def add_verification(store: Store, header: Mapping[str, Any], checks: Sequence[Mapping]) -> None:
    """Store one verification (``header``: the ``verifications`` columns; ``checks``: each
    with name, api, passed, sent, received, message, why_it_matters, duration_ms) in one
    transaction: nothing is half-written. ``passed``/``failed`` default to the checks' counts."""
    table, rows_table = schema.verifications, schema.verification_checks
    verify_id = header.get("verify_id")
    missing = [k for k in ("verify_id", "endpoint") if not header.get(k)]
    if missing:
        raise StoreError(f"a verification needs {', '.join(missing)}: {dict(header)!r}")
    record = {c.name: _clean(header.get(c.name)) for c in table.columns}
    if record["passed"] is None:
        record["passed"] = sum(1 for c in checks if c.get("passed"))
    if record["failed"] is None:
        record["failed"] = sum(1 for c in checks if not c.get("passed"))
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for check in checks:
        name = check.get("name") or check.get("check_name")
        if not name:
            raise StoreError(f"a verification check needs a name: {dict(check)!r}")
        key = stored_name(str(name), check.get("api"))
        if key in seen:
            raise StoreError(f"verification {verify_id}: check {key!r} given twice")
        seen.add(key)
        row = {c: _clean(check.get(c)) for c in CHECK_COLUMNS}
        row.update(verify_id=verify_id, check_name=key, passed=bool(check.get("passed")))
        rows.append(row)
    with store.connect() as conn:
        conn.execute(sa.insert(table), [record])
        if rows:
            conn.execute(sa.insert(rows_table), rows)


def latest_verifications(store: Store) -> pd.DataFrame:
    """The latest verification of each endpoint and model (one row each, newest first):
    ``LATEST_COLUMNS``, ``failed_checks`` the failed checks' stored names comma-joined
    (``stop_sequences/chat, streaming/completions``; "" when all passed)."""
    v, c = schema.verifications, schema.verification_checks
    ranked = sa.select(
        v.c.verify_id,
        sa.func.row_number()
        .over(
            partition_by=(v.c.endpoint, v.c.model),
            order_by=(v.c.started_at.desc(), v.c.verify_id.desc()),
        )
        .label("rank"),
    ).subquery("ranked")
    query = (
        sa.select(*(v.c[name] for name in LATEST_COLUMNS[:-1]))
        .join(ranked, ranked.c.verify_id == v.c.verify_id)
        .where(ranked.c.rank == 1)
        .order_by(v.c.started_at.desc(), v.c.verify_id)
    )
    df = store.read_df(query)
    if df.empty:
        return pd.DataFrame(columns=list(LATEST_COLUMNS))
    failed = store.read_df(
        sa.select(c.c.verify_id, c.c.check_name)
        .where(c.c.verify_id.in_(list(df["verify_id"])), sa.not_(c.c.passed))
        .order_by(c.c.verify_id, c.c.check_name)
    )
    names = failed.groupby("verify_id")["check_name"].agg(", ".join).to_dict()
    df["failed_checks"] = [names.get(i, "") for i in df["verify_id"]]
    return df.reset_index(drop=True)[list(LATEST_COLUMNS)]


def verification_checks(store: Store, verify_id: str) -> pd.DataFrame:
    """One verification's checks, ordered by check and API (the table keeps no run order):
    ``CHECK_COLUMNS``, with
    ``check_name`` the plain check name (its API in ``api``). Empty when there is none."""
    c = schema.verification_checks
    df = store.read_df(
        sa.select(*(c.c[name] for name in CHECK_COLUMNS))
        .where(c.c.verify_id == verify_id)
        .order_by(c.c.check_name)
    )
    if df.empty:
        return pd.DataFrame(columns=list(CHECK_COLUMNS))
    suffix = "/" + df["api"].fillna("")
    df["check_name"] = [
        n[: -len(s)] if api and n.endswith(s) else n
        for n, s, api in zip(df["check_name"], suffix, df["api"], strict=True)
    ]
    return df.reset_index(drop=True)
