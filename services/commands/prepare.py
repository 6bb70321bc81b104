"""What the dashboard shows first of a run, computed right after the run is stored (by
`servescope import`, `servescope bench` and the Data page's upload), so that the first view of
a run of millions of requests does not wait for their aggregation.

Every run gets its summary (``store.run_stats``: Home, Compare, the pickers). Runs of at least
:data:`LARGE_RUN` requests also get Home's distribution samples, the default views of the
Latency and Memory pages — the
per-bucket TTFT percentiles with the default buckets, the heatmap and the timeline over the
whole run, the request sample, the slowest requests and their in-flight counts — and Compare's
SLO attainment under every stored profile and the samples behind its CDFs, all read with the
same arguments the pages use, so they land in the same rollups (``store.rollups``). Smaller
runs need none of it: each view of them takes well under 0.1 s.

Best effort: a store that stays locked only leaves this to the first view.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from analysis import slo
from analysis.buckets import DEFAULT_EDGES
from analysis.latency import heatmap_window_s
from errors import ConfigError, StoreError
from store import catalog, request_rows, request_stats, run_figures, sample_timelines
from store.db import Store
from store.sql import SAMPLE_METRICS

log = logging.getLogger("servescope.prepare")

#: Requests from which a run's Latency and Memory views are computed ahead (below it each
#: view costs < 0.1 s on the 2-core development machine; at 10M requests, seconds).
LARGE_RUN: Final = 500_000


def prepare(store: Store, run_ids: Sequence[str], *, large_run: int = LARGE_RUN) -> bool:
    """Compute and keep the runs' summaries, and the page views of the large ones; False
    (nothing raised) when the store refused, e.g. stayed locked."""
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    if not ids:
        return True
    if not run_figures.refresh(store, ids):
        return False
    try:
        stats = run_figures.get(store, ids)
        large = stats[stats["requests"] >= large_run]
        for run_id, first, last in zip(
            large["run_id"], large["first_sent"], large["last_done"], strict=True
        ):
            _home_views(store, str(run_id))
            _latency_views(store, str(run_id), float(first), float(last))
            _memory_views(store, str(run_id))
            _compare_views(store, str(run_id))
    except StoreError as exc:
        log.info("page views left to the first view: %s", exc)
        return False
    return True


def _home_views(store: Store, run_id: str) -> None:
    """The samples Home draws the run's histograms and ECDFs from (ui.cache)."""
    for metric in SAMPLE_METRICS:
        request_rows.run_metric_sample(store, run_id, metric, request_rows.SAMPLE_LIMIT)


def _latency_views(store: Store, run_id: str, first_sent: float, last_done: float) -> None:
    """As pages/latency.py reads a whole run with its defaults (ui.latency_view)."""
    run = (run_id,)
    request_stats.bucket_latency(store, run, DEFAULT_EDGES, "input", metrics=("ttft_ms",))
    if first_sent != first_sent:  # NaN: no send times, so no views over time
        return
    end = last_done if last_done == last_done else first_sent
    window = heatmap_window_s(max(end - first_sent, 1.0))
    request_stats.ttft_heatmap(store, run, DEFAULT_EDGES, t0=first_sent, window_s=window)
    request_rows.request_sample(store, run, request_rows.SAMPLE_LIMIT)
    slow = request_rows.slowest_requests(store, run, request_rows.DEFAULT_TOP, "ttft_ms")
    request_rows.in_flight_at(store, run_id, slow["sent_at"].dropna().tolist())


def _compare_views(store: Store, run_id: str) -> None:
    """The run's SLO attainment under every stored SLO profile, and the samples the Compare
    page draws its CDFs and bootstrap from (ui.cache.compare)."""
    thresholds = []
    for name in catalog.names(store, "slo_profiles"):
        try:
            profile = slo.SloProfile.from_entry(catalog.get(store, "slo_profiles", name))
        except ConfigError:
            continue  # an invalid profile: the page says so when it is picked
        thresholds.append(profile.sql_thresholds())
    request_stats.prepare_attainment(store, [run_id], thresholds)
    limit = request_rows.DISTRIBUTION_SAMPLE_LIMIT
    request_rows.request_samples(store, [run_id], limit)
    request_rows.metric_samples(store, [run_id], "itl_ms", limit)


def _memory_views(store: Store, run_id: str) -> None:
    """As pages/memory.py reads a run's whole window (ui.memory_view)."""
    src = sample_timelines.run_sources(store, run_id)
    since, until = src.get("since"), src.get("until")
    if since is None or until is None:
        return
    since, until = float(since), max(float(until), float(since) + 1.0)
    request_stats.latency_timeline(
        store,
        (run_id,),
        t0=since,
        window_s=heatmap_window_s(until - since),
        since=since,
        until=until,
    )
