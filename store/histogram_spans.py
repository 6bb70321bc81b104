"""A histogram's stored rows over a long span, thinned in SQL to the rows that decide each
bucket's increase: what the production length mix reads over a day of 1 Hz scrapes.

``store.sample_series.engine_histogram_series`` returns every scrape: a day of one target at
1 Hz is about 1.4 million bucket rows per histogram, tens of seconds to fetch into Python. The
increase of a cumulative counter over a span (``analysis.histogram_windows.bucket_increase``:
per consecutive pair, vᵢ − vᵢ₋₁, or vᵢ when it dropped — a restart) only depends on:

- the scrape the span starts from (the last at or before ``since``, else the first) and the
  first one after ``since``;
- the last scrape (at or before ``until``);
- the two scrapes around every restart (the one before and the one at it).

Between two kept scrapes the skipped ones neither drop nor precede a drop, so every bucket climbs
monotonically and its deltas telescope to the difference of the kept values: the increase from
the kept scrapes equals the increase from all of them. The scrapes are chosen on the histogram's
total (the ``+Inf`` bucket, one row per full scrape: a sixteenth of the rows, so the ordered scan
stays cheap: bench/production_mix.py) and every bucket row of those
scrapes is returned (the watcher writes a histogram's buckets together, when its count moved).
This rests on a restart resetting the total along with the buckets: a bucket that drops at a
scrape where the total does not (a process restarted and, within one scrape interval, served
more requests than its predecessor did in its whole life) is not seen as a restart, and its
increase is off by at most that one scrape's requests. ``tests`` hold the two reads equal on
series with restarts and with bucket rows missing where the count did not move. Only the rows
of ``<hist>_bucket:*`` are read (``_sum``/``_count`` do not enter a bucket's increase).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from store.db import Store
from store.sql import with_lists

_SQL = """
WITH base AS (
    SELECT target, MAX(ts) AS b FROM engine_samples
    WHERE target IN :targets AND metric = :inf AND ts < :since
    GROUP BY target
),
total AS (
    SELECT e.target, e.ts, e.value,
           LAG(e.value) OVER w AS prev_value,
           LEAD(e.value) OVER w AS next_value,
           LAG(e.ts) OVER w AS prev_ts,
           LEAD(e.ts) OVER w AS next_ts
    FROM engine_samples e LEFT JOIN base ON base.target = e.target
    WHERE e.target IN :targets AND e.metric = :inf
      AND e.ts <= :until AND e.ts >= COALESCE(base.b, :since)
    WINDOW w AS (PARTITION BY e.target ORDER BY e.ts)
),
kept AS (
    SELECT target, ts FROM total
    WHERE prev_ts IS NULL OR next_ts IS NULL
       OR value < prev_value OR next_value < value
       OR (ts <= :since AND next_ts > :since)
       OR (ts > :since AND prev_ts <= :since)
)
SELECT e.target, e.ts, e.metric, e.value
FROM engine_samples e JOIN kept k ON k.target = e.target AND k.ts = e.ts
WHERE e.target IN :targets AND starts_with(e.metric, :prefix)
ORDER BY e.target, e.ts, e.metric
"""


def histogram_span_rows(
    store: Store, targets: Sequence[str], hist: str, *, since: float, until: float
) -> pd.DataFrame:
    """The bucket rows of ``hist`` of ``targets`` that decide each bucket's increase over
    (since, until], from each target's last full scrape before ``since`` (its baseline, as
    ``engine_histogram_series`` starts): columns target, ts, metric, value — what
    ``bucket_increase`` takes, with the same result as on every row."""
    if not targets:
        return pd.DataFrame(columns=["target", "ts", "metric", "value"])
    params: dict[str, object] = {
        "targets": list(dict.fromkeys(str(t) for t in targets)),
        "prefix": hist + "_bucket:",
        "inf": f"{hist}_bucket:+Inf",
        "since": float(since),
        "until": float(until),
    }
    df = store.read_df(with_lists(_SQL, "targets"), params)
    if df.empty:
        return pd.DataFrame(columns=["target", "ts", "metric", "value"])
    df["ts"] = pd.to_numeric(df["ts"]).astype("float64")
    df["value"] = pd.to_numeric(df["value"]).astype("float64")
    return df
