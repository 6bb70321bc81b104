"""What the dashboard shows first of a run, computed right after the run is stored (by `servescope
import`, `servescope bench`, `servescope db prepare` and the Data page's upload), so that the
first view of a run of millions of requests does not wait for their aggregation.

Every run gets its summary and figures (``store.run_figures``: Home, Compare, the pickers). Runs
of at least :data:`LARGE_RUN` requests also get each page's first view of them, built by the
pages' own view-model builders with their default selections (``services.views``: Latency,
Memory, Compare, and Home's run detail: the rest of Home is page-wide and cheap). Nothing here
copies a page's defaults, so the reads land in the same rollups (``store.rollups``) the pages
will ask for — and Compare's SLO attainment under every stored profile (any of which the page
may be switched to). Smaller runs need none of it: each view of them takes well under 0.1 s.

Best effort: a store that stays locked only leaves this to the first view.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from errors import StoreError
from services.commands import slo_profiles
from services.views import home
from services.views.compare import CompareSelection, compare_view
from services.views.latency import LatencySelection, latency_view
from services.views.memory import MemorySelection, memory_view
from store import request_stats, run_figures
from store.db import Store

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
        for run_id in stats.loc[stats["requests"] >= large_run, "run_id"]:
            run = str(run_id)
            with store.held_open():  # one run's many reads; other processes get the file between
                home.run_detail(store, run)  # Home's view of it (the page-wide part is cheap)
                latency_view(store, LatencySelection.default(run))
                memory_view(store, MemorySelection.default(run))
                # every profile's attainment from one scan, before Compare's default asks
                request_stats.prepare_attainment(store, [run], slo_profiles.threshold_sets(store))
                compare_view(store, CompareSelection.default(run))
    except StoreError as exc:
        log.info("page views left to the first view: %s", exc)
        return False
    return True
