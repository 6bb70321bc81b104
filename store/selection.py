"""A selection of requests — some runs, optionally a window on ``sent_at`` — as the request
reads (``store.request_rows``, ``store.request_stats``) filter it, the length-bucket expression they
group by, and the rule that keeps a read of one whole run as a rollup."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from errors import InputError
from store import rollups, run_figures
from store.db import Store
from store.sql import with_lists


def request_filter(
    run_ids: Sequence[str], since: float | None, until: float | None, alias: str = "q"
) -> tuple[list[str], dict[str, Any]]:
    """The WHERE terms and parameters of a selection: requests of ``run_ids`` sent within
    [``since``, ``until``) (None: unbounded). An InputError when no run is selected."""
    if not run_ids:
        raise InputError("no run selected", hint="pick a run (?run=<run_id>)")
    where = [f"{alias}.run_id IN :run_ids"]
    params: dict[str, Any] = {"run_ids": list(run_ids)}
    if since is not None:
        where.append(f"{alias}.sent_at >= :since")
        params["since"] = float(since)
    if until is not None:
        where.append(f"{alias}.sent_at < :until")
        params["until"] = float(until)
    return where, params


def cached_if_whole_run(
    store: Store,
    run_ids: Sequence[str],
    since: float | None,
    until: float | None,
    kind: str,
    params: dict[str, Any],
    compute: Callable[[], pd.DataFrame],
) -> pd.DataFrame:
    """``compute()``, kept as a rollup of the run when it covers one whole run (the page's
    default view, asked for again and again) — also when the window holds every request of the
    run (by its stored summary); narrower windows and several runs are computed each time."""
    if len(run_ids) != 1:
        return compute()
    if since is not None or until is not None:
        stats = run_figures.stored(store, run_ids)
        if stats is None or stats.empty:
            return compute()
        first, last = stats["first_sent"].iloc[0], stats["last_sent"].iloc[0]
        if stats["sent_n"].iloc[0] != stats["requests"].iloc[0] or pd.isna(first):
            return compute()  # requests without a send time are in no window
        if (since is not None and since > first) or (until is not None and until <= last):
            return compute()
    return rollups.cached_run(store, str(run_ids[0]), kind, params, compute)


def read_with_run_ids(store: Store, sql: str, params: dict[str, Any]) -> pd.DataFrame:
    """Run ``sql`` whose ``:run_ids`` is a list."""
    return store.read_df(with_lists(sql), params)


def bucket_case(column: str, edges: Sequence[int], params: dict[str, Any]) -> str:
    """THE length-bucket expression: ``CASE`` giving bucket ``i`` for ``edges[i-1] <= column <
    edges[i]`` (``analysis.buckets`` numbers them the same); binds the edges into ``params``."""
    bounds = [int(e) for e in edges]
    if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
        raise InputError(f"bucket edges {bounds} must be a non-empty increasing list")
    for i, e in enumerate(bounds):
        params[f"e{i}"] = e
    whens = " ".join(f"WHEN q.{column} < :e{i} THEN {i}" for i in range(len(bounds)))
    return f"CASE {whens} ELSE {len(bounds)} END"
