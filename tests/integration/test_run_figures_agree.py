"""One definition of a run's figures: the store's SQL (``store.run_figures``) and the pure twin
(``analysis.metrics.run_summary``) agree on the edge cases — failed requests of every kind, a
run without ``ended_at``, a zero or negative own duration, no send or completion times, no GPU
count — on DuckDB and PostgreSQL (``store_url``)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from analysis import metrics
from store import ingest, run_figures, runs_table
from store.db import Store
from store.lifecycle import open_store

T0 = 1_700_000_000.0


def _requests(run_id: str, statuses: list[str], *, timed: bool = True) -> pd.DataFrame:
    n = len(statuses)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": range(n),
            "status": statuses,
            "sent_at": [T0 + i for i in range(n)] if timed else [None] * n,
            "done_at": [T0 + i + 2.5 for i in range(n)] if timed else [None] * n,
            "input_tokens": [100 + 10 * i for i in range(n)],
            "output_tokens": [20 + i for i in range(n)],
            "ttft_ms": [10.0 * (i + 1) for i in range(n)],
        }
    )


#: run → (the run's own columns, its requests' statuses, whether requests carry instants)
CASES: dict[str, tuple[dict[str, Any], list[str], bool]] = {
    "failures": (
        {"duration_s": 40.0, "started_at": T0, "ended_at": T0 + 99, "gpu_count": 2},
        ["ok", "error", "ok", "timeout", "cancelled", "ok"],
        True,
    ),
    "no_ended_at": ({"started_at": T0, "gpu_count": 4}, ["ok", "ok", "error"], True),
    "own_span": ({"started_at": T0, "ended_at": T0 + 30.0}, ["ok", "ok"], True),
    "zero_duration": (
        {"duration_s": 0.0, "started_at": T0 + 5, "ended_at": T0},
        ["ok", "ok", "ok"],
        True,
    ),
    "no_instants": ({"gpu_count": 0}, ["ok", "error"], False),
    "all_failed": ({"duration_s": 12.0, "gpu_count": 1}, ["error", "timeout"], True),
}

FIGURES = (
    "requests",
    "ok",
    "errors",
    "error_rate",
    "duration_s",
    "input_tokens",
    "output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "output_throughput_per_gpu",
)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    for run_id, (own, statuses, timed) in CASES.items():
        ingest.add_run(s, {"run_id": run_id, **own})
        ingest.add_requests(s, _requests(run_id, statuses, timed=timed))
    yield s
    s.dispose()


def _same(stored: Any, pure: Any) -> bool:
    missing = stored is None or (isinstance(stored, float) and math.isnan(stored))
    if pure is None or missing:
        return pure is None and missing
    return bool(stored == pytest.approx(pure, rel=1e-12))


@pytest.mark.parametrize("run_id", list(CASES))
def test_store_and_pure_figures_agree(store: Store, run_id: str) -> None:
    own, statuses, timed = CASES[run_id]
    listed = runs_table.list_runs(store, run_ids=[run_id], limit=None)
    for light in (False, True):  # the full summary and the cheap scan define them the same way
        row = run_figures.attach(store, listed, light=light).iloc[0]
        pure = metrics.run_summary(
            _requests(run_id, statuses, timed=timed),
            duration_s=own.get("duration_s"),
            started_at=own.get("started_at"),
            ended_at=own.get("ended_at"),
            gpu_count=own.get("gpu_count"),
        )
        for figure in FIGURES:
            assert _same(row[figure], getattr(pure, figure)), (
                run_id,
                figure,
                row[figure],
                getattr(pure, figure),
            )


def test_the_edge_cases_mean_what_they_say(store: Store) -> None:
    rows = run_figures.attach(store, runs_table.list_runs(store, limit=None)).set_index("run_id")
    assert rows.loc["failures", "errors"] == 3  # error, timeout and cancelled all count
    assert rows.loc["failures", "duration_s"] == 40.0  # the run's own duration wins
    assert rows.loc["no_ended_at", "duration_s"] == pytest.approx(4.5)  # first send → last done
    assert rows.loc["own_span", "duration_s"] == 30.0  # ended − started
    assert rows.loc["zero_duration", "duration_s"] == pytest.approx(4.5)  # 0 and −5 are none
    assert math.isnan(rows.loc["no_instants", "request_throughput"])  # no duration at all
    assert math.isnan(rows.loc["no_instants", "output_throughput_per_gpu"])  # gpu_count 0
    assert rows.loc["all_failed", "output_throughput"] == 0.0
