"""services.views.home on a real DuckDB store: the overview, the latest runs, the selected run
(default, asked for, older than the listing, unknown), its figures as the store defines them,
distributions, failures and the tool's figures beside ours; the selection parsed from URL
parameters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from services.views import home
from services.views.home import HomeSelection, home_view
from store import ingest, run_figures
from store.db import Store
from store.lifecycle import open_store

#: Run "sim": 150 ok requests of 50 output tokens + 2 failed, over 60 s, on 2 GPUs; each ok
#: request has 3 token gaps.
OK, FAILED, OUTPUT_TOKENS, DURATION_S, GPUS, GAPS = 150, 2, 50, 60.0, 2, 3


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    yield s
    s.dispose()


def _seed(store: Store) -> None:
    ingest.add_run(
        store,
        {
            "run_id": "sim",
            "name": "sim c=8",
            "source": "servescope",
            "framework": "sim",
            "gpu_count": GPUS,
            "started_at": 1_700_000_000.0,
            "duration_s": DURATION_S,
            "client_bound": False,
        },
    )
    n = OK + FAILED
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "sim",
                "seq": range(n),
                "status": ["ok"] * OK + ["error", "timeout"],
                "sent_at": [1_700_000_000.0 + i * 0.3 for i in range(n)],
                "done_at": [1_700_000_001.0 + i * 0.3 for i in range(n)],
                "input_tokens": 100,
                "output_tokens": OUTPUT_TOKENS,
                "ttft_ms": [20.0 + i for i in range(n)],
                "tpot_ms": 5.0,
                "e2e_ms": 300.0,
                "http_status": pd.array([200] * OK + [500, None], dtype="Int64"),
                "error": [None] * OK + ["boom", "timed out"],
            }
        ),
    )
    ingest.add_token_gaps(
        store,
        pd.DataFrame(
            {
                "run_id": "sim",
                "seq": [s for s in range(OK) for _ in range(GAPS)],
                "idx": [i for _ in range(OK) for i in range(GAPS)],
                "gap_ms": [4.0, 5.0, 6.0] * OK,
            }
        ),
    )
    requests = pd.DataFrame(
        {
            "run_id": "guidellm",
            "seq": range(4),
            "status": "ok",
            "output_tokens": 11,
            "ttft_ms": [10.0, 20.0, 30.0, 40.0],
            "tpot_ms": [4.0, 5.0, 6.0, 7.0],
            "e2e_ms": [50.0, 70.0, 90.0, 110.0],
        }
    )
    ingest.replace_runs(
        store,
        [
            ingest.RunRows(
                {
                    "run_id": "guidellm",
                    "source": "guidellm",
                    "started_at": 1_600_000_000.0,
                    "duration_s": 2.0,
                    "client_bound": True,
                    "tool_summary": {
                        "format": "guidellm",
                        "aggregates_only": False,
                        "metrics": {"tpot_ms": {"p50": 5.0}},
                    },
                },
                requests,
            ),
            ingest.RunRows(
                {
                    "run_id": "aggregates",
                    "source": "genai-perf",
                    "started_at": 1_500_000_000.0,
                    "tool_summary": {"aggregates_only": True, "metrics": {"ttft_ms": {"p99": 8}}},
                }
            ),
        ],
    )


def test_an_empty_store_has_nothing_to_show(store: Store) -> None:
    view = home_view(store, HomeSelection.default())
    assert view.overview.empty and view.latest_runs.empty
    assert view.run is None and view.run_ids == []


def test_the_newest_run_is_shown_by_default_with_the_stores_figures(store: Store) -> None:
    _seed(store)
    view = home_view(store, HomeSelection.default())
    assert view.run_ids == ["sim", "guidellm", "aggregates"]
    assert view.overview["runs"].sum() == 3
    assert view.client_bound_runs == 1
    assert view.extra_run is None
    run = view.run
    assert run is not None and run.run_id == "sim"
    # the figures are the store's one definition, not recomputed
    stored = run_figures.run_detail(store, "sim").iloc[0]
    for column in ("requests", "ok", "errors", "duration_s", "output_throughput"):
        assert run.figures[column] == stored[column]
    assert run.figures["output_throughput"] == OK * OUTPUT_TOKENS / DURATION_S
    assert run.figures["output_throughput_per_gpu"] == OK * OUTPUT_TOKENS / DURATION_S / GPUS
    assert run.itl["itl_n"] == OK * GAPS
    assert not run.client_bound and not run.aggregates_only
    assert run.tool.source == "servescope" and run.tool.summary is None
    assert run.crosscheck.empty  # no tool figures to compare with
    assert set(run.samples) == set(home.DISTRIBUTION_METRICS)
    assert len(run.samples["ttft_ms"]) == OK  # successful requests only
    assert len(run.samples["itl_ms"]) == OK * GAPS
    assert run.failures.set_index("status")["count"].to_dict() == {"error": 1, "timeout": 1}


def test_an_imported_run_shows_ours_beside_the_tools(store: Store) -> None:
    _seed(store)
    run = home_view(store, HomeSelection(run_id="guidellm")).run
    assert run is not None and run.run_id == "guidellm" and run.client_bound
    assert run.tool.source == "guidellm"
    compared = run.crosscheck.set_index(["metric", "stat"])
    # ours: P50 of 4, 5, 6, 7 ms = 5.5 (linear interpolation); the tool's 5.0 → +10 %
    assert compared.loc[("tpot_ms", "p50"), "ours"] == 5.5
    assert compared.loc[("tpot_ms", "p50"), "diff_pct"] == pytest.approx(10.0)
    assert bool(compared.loc[("tpot_ms", "p50"), "differs"])


def test_an_aggregates_only_run_reads_nothing_per_request(store: Store) -> None:
    _seed(store)
    run = home_view(store, HomeSelection(run_id="aggregates")).run
    assert run is not None and run.aggregates_only
    assert run.tool.summary is not None and run.tool.source == "genai-perf"
    assert dict(run.itl) == {} and dict(run.samples) == {}
    assert run.failures.empty and run.crosscheck.empty


def test_an_unknown_run_falls_back_to_the_newest(store: Store) -> None:
    _seed(store)
    view = home_view(store, HomeSelection(run_id="no-such-run"))
    assert view.extra_run is None
    assert view.run is not None and view.run.run_id == "sim"


def test_a_run_older_than_the_listing_is_offered_and_shown(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(store)
    monkeypatch.setattr(home, "LATEST_RUNS_LIMIT", 1)
    view = home_view(store, HomeSelection(run_id="guidellm"))
    assert view.run_ids == ["sim"]
    assert view.extra_run is not None and view.extra_run["run_id"] == "guidellm"
    assert view.run is not None and view.run.run_id == "guidellm"


@pytest.mark.parametrize(
    ("params", "run_id"),
    [({}, None), ({"run": ""}, None), ({"run": "r1"}, "r1"), ({"run": ["r0", "r1"]}, "r1")],
)
def test_the_selection_from_url_parameters(params: dict[str, object], run_id: str | None) -> None:
    selection = HomeSelection.from_params(params)
    assert selection == HomeSelection(run_id=run_id)
    assert hash(selection) == hash(HomeSelection(run_id=run_id))  # a cache key
