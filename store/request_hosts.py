"""Requests of one run grouped by the client host that sent them (``requests.host``): a run
made by several hosts (``bench --shard``) reads each host's share and figures here.

Percentiles are those of ``store.sql.dist_columns`` (linear interpolation, successful requests
only), so a host's P99 is computed exactly as the run's own.
"""

from __future__ import annotations

from typing import Final

import pandas as pd
import sqlalchemy as sa

from store.db import Store
from store.sql import DETAIL_QUANTILES, OK, coerce, dist_columns, filtered

#: The columns of :func:`host_figures`, in order.
HOST_COLUMNS: Final = (
    "host",
    "requests",
    "ok",
    "errors",
    "cancelled",
    "first_sent_at",
    "last_done_at",
    "output_tokens",
    "ttft_n",
    "ttft_mean_ms",
    *(f"ttft_p{round(q * 100)}_ms" for q in DETAIL_QUANTILES),
    "e2e_n",
    "e2e_mean_ms",
    *(f"e2e_p{round(q * 100)}_ms" for q in DETAIL_QUANTILES),
)


def host_figures(store: Store, run_id: str) -> pd.DataFrame:
    """One row per host of ``run_id``'s requests (``HOST_COLUMNS``), by host name; rows without
    a host (imported runs, runs stored before migration 8) are grouped under a NULL host."""
    d = store.dialect
    failed = filtered("COUNT(*)", "q.status IN ('error', 'timeout')")
    cancelled = filtered("COUNT(*)", "q.status = 'cancelled'")
    cols = [
        "q.host AS host",
        "COUNT(*) AS requests",
        f"{filtered('COUNT(*)', OK)} AS ok",
        f"{failed} AS errors",
        f"{cancelled} AS cancelled",
        "MIN(q.sent_at) AS first_sent_at",
        "MAX(q.done_at) AS last_done_at",
        f"{filtered('SUM(q.output_tokens)', OK)} AS output_tokens",
        *dist_columns(d, "q.ttft_ms", "ttft", OK),
        *dist_columns(d, "q.e2e_ms", "e2e", OK),
    ]
    sql = sa.text(
        f"SELECT {', '.join(cols)} FROM requests q WHERE q.run_id = :run_id "
        "GROUP BY q.host ORDER BY q.host"
    )
    df = store.read_df(sql, {"run_id": run_id})
    df = coerce(
        df, ints=("requests", "ok", "errors", "cancelled", "output_tokens", "ttft_n", "e2e_n")
    )
    return df.reindex(columns=list(HOST_COLUMNS))
