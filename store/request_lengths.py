"""The prompt and output lengths of runs' requests, counted per distinct length: what a
benchmark's workload sent and got back, compared with production's length mix
(``services.views.production_mix``).

Counted, not listed: a run of millions of requests has at most a few thousand distinct lengths,
so the read stays small and exact. Only successful requests count (a production histogram
observes finished requests; a failed benchmark request may have no output length). A whole
run's counts are kept as a rollup (``store.rollups``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pandas as pd

from store import rollups
from store.db import Store
from store.sql import MAX_RUNS, OK, distinct_ids, with_lists

__all__ = ["MAX_RUNS", "SIDES", "length_counts"]

#: side → the requests column it counts.
SIDES: Final[dict[str, str]] = {"prompt": "input_tokens", "output": "output_tokens"}

_COLUMNS: Final = ("run_id", "side", "tokens", "n")


def _empty() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": pd.Series([], dtype=object),
            "side": pd.Series([], dtype=object),
            "tokens": pd.Series([], dtype="int64"),
            "n": pd.Series([], dtype="int64"),
        }
    )


def length_counts(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """Per run, side (``prompt``: input tokens, ``output``: generated tokens) and distinct
    length: how many successful requests had it. Columns run_id, side, tokens, n; requests with
    no recorded length are left out; runs without such requests have no rows. Ordered by run
    (in ``run_ids`` order), side, tokens. At most ``MAX_RUNS`` runs per read (an InputError
    past it)."""
    ids = distinct_ids(run_ids)
    if not ids:
        return _empty()
    parts = " UNION ALL ".join(
        f"SELECT q.run_id, '{side}' AS side, q.{column} AS tokens, COUNT(*) AS n "
        f"FROM requests q WHERE q.run_id IN :run_ids AND {OK} AND q.{column} IS NOT NULL "
        f"GROUP BY q.run_id, q.{column}"
        for side, column in SIDES.items()
    )
    sql = f"SELECT run_id, side, tokens, n FROM ({parts}) t ORDER BY run_id, side, tokens"

    def compute(stale: list[str]) -> pd.DataFrame:
        df = store.read_df(with_lists(sql), {"run_ids": stale})
        if df.empty:
            return _empty()
        return pd.DataFrame(
            {
                "run_id": df["run_id"].astype(str).astype(object),
                "side": df["side"].astype(str).astype(object),
                "tokens": pd.to_numeric(df["tokens"]).astype("int64"),
                "n": pd.to_numeric(df["n"]).astype("int64"),
            }
        )

    df = rollups.cached_runs(store, ids, "length_counts", {}, compute)
    return df[list(_COLUMNS)].reset_index(drop=True)
