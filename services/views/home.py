"""The Home page's view model: what is in the store, the latest runs with their headline
figures, and one run in detail — its figures, ours beside the tool's own, its distributions and
its failures.

Every per-run figure (counts, throughput, duration, percentiles) comes from the store's one
definition (``store.run_figures``); nothing here recomputes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pandas as pd

from analysis import crosscheck
from services.views import imported_runs
from store import request_rows, run_figures, runs_table
from store.db import Store

#: Runs Home lists (and offers in its picker).
LATEST_RUNS_LIMIT: Final = 200
#: Metrics whose distribution Home draws, in the order of its tabs.
DISTRIBUTION_METRICS: Final = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
#: Most values a distribution is drawn from.
SAMPLE_LIMIT: Final = request_rows.SAMPLE_LIMIT
#: URL parameter of the selected run (``?run=``).
RUN_PARAM: Final = "run"


@dataclass(frozen=True)
class HomeSelection:
    """What Home is asked to show: the run in detail (None: the newest run)."""

    run_id: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> HomeSelection:
        """The selection a URL's query parameters ask for (``?run=``); an empty value is none."""
        value = params.get(RUN_PARAM)
        if isinstance(value, (list, tuple)):
            value = value[-1] if value else None
        return cls(run_id=str(value) if value else None)

    @classmethod
    def default(cls, run_id: str | None = None) -> HomeSelection:
        """Home as it first opens on ``run_id`` (None: the newest run)."""
        return cls(run_id=run_id)


@dataclass(frozen=True)
class RunDetail:
    """One run as Home shows it.

    ``figures`` is the run's row (its columns and summary, ``store.run_figures.run_detail``); for a
    run that holds only the tool's aggregates (``aggregates_only``) nothing per-request is read:
    ``itl`` is empty, and so are ``crosscheck``, ``samples`` and ``failures``.
    """

    run_id: str
    figures: Mapping[str, Any]
    tool: imported_runs.ToolSummary
    aggregates_only: bool
    #: Pooled inter-token latency (``store.run_figures.run_itl_summary``'s row).
    itl: Mapping[str, Any] = field(default_factory=dict)
    #: Ours beside the tool's own figures (``analysis.crosscheck.compare``); empty for runs
    #: without a tool summary.
    crosscheck: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Metric → a sample of its values (one ``value`` column, ms) for the distribution charts.
    samples: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    #: The most frequent failures (status, http_status, error, count).
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def client_bound(self) -> bool:
        """The load generator fell behind during this run."""
        flag = self.figures.get("client_bound")
        return flag is not None and not bool(pd.isna(flag)) and bool(flag)


@dataclass(frozen=True)
class HomeView:
    """Everything Home shows.

    ``latest_runs`` is empty when the store holds no runs. ``extra_run`` is the selected run's
    row when it is not among the latest runs (a deep link to an older run): the picker offers it
    first. ``run`` is the selected run (the newest one unless another was asked for and exists),
    None when there is none.
    """

    overview: pd.DataFrame
    latest_runs: pd.DataFrame
    client_bound_runs: int = 0
    extra_run: Mapping[str, Any] | None = None
    run: RunDetail | None = None

    @property
    def selection(self) -> HomeSelection:
        """The selection as resolved: the run shown in detail."""
        return HomeSelection(run_id=self.run.run_id if self.run is not None else None)

    @property
    def run_ids(self) -> list[str]:
        """The latest runs' ids, in the table's order (row i ↔ run i)."""
        if self.latest_runs.empty:
            return []
        return [str(r) for r in self.latest_runs["run_id"]]


def _first_row(df: pd.DataFrame) -> dict[str, Any]:
    rows = df.head(1).to_dict("records")
    return {str(k): v for k, v in rows[0].items()} if rows else {}


def run_detail(
    store: Store, run_id: str, figures: Mapping[str, Any] | None = None
) -> RunDetail | None:
    """``run_id`` as Home shows it, None when the run does not exist; ``figures``: its
    ``run_detail`` row when already read."""
    row = dict(figures) if figures else _first_row(run_figures.run_detail(store, run_id))
    if not row:
        return None
    tool = imported_runs.tool_summary(store, run_id)
    if imported_runs.is_aggregates_only(row, tool.summary):
        return RunDetail(run_id=run_id, figures=row, tool=tool, aggregates_only=True)
    itl = _first_row(run_figures.run_itl_summary(store, run_id))
    compared = (
        crosscheck.compare(tool.summary, crosscheck.our_figures(row, itl), tool.source or None)
        if tool.summary
        else pd.DataFrame()
    )
    samples = {
        metric: request_rows.run_metric_sample(store, run_id, metric, SAMPLE_LIMIT)
        for metric in DISTRIBUTION_METRICS
    }
    return RunDetail(
        run_id=run_id,
        figures=row,
        tool=tool,
        aggregates_only=False,
        itl=itl,
        crosscheck=compared,
        samples=samples,
        failures=request_rows.run_errors(store, run_id),
    )


def home_view(store: Store, selection: HomeSelection) -> HomeView:
    """Home for ``selection``: the store's overview, the latest runs and the selected run in
    detail. A run asked for that does not exist falls back to the newest run."""
    overview = runs_table.store_overview(store)
    if overview.empty:
        return HomeView(overview=overview, latest_runs=pd.DataFrame())
    latest = runs_table.latest_runs(store, LATEST_RUNS_LIMIT)
    view = HomeView(
        overview=overview,
        latest_runs=latest,
        client_bound_runs=int(latest["client_bound"].fillna(False).astype(bool).sum()),
    )
    wanted = selection.run_id
    if wanted and wanted not in view.run_ids:
        extra = _first_row(run_figures.run_detail(store, wanted))
        if extra:
            return replace(view, extra_run=extra, run=run_detail(store, wanted, extra))
    if wanted not in view.run_ids:
        wanted = view.run_ids[0] if view.run_ids else None
    return replace(view, run=run_detail(store, wanted)) if wanted else view
