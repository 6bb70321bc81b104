"""services.views.compare on a real DuckDB store: the selection resolved against the store, the
per-run figures as the store defines them, what is skipped when the sampled views are off,
aggregate-only imports, and the profile editor's save (services.commands.slo_profiles)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from analysis import slo
from errors import ConfigError
from services.commands import prepare, slo_profiles
from services.views import compare as compare_views
from services.views.compare import CompareSelection, compare_view
from store import catalog, ingest, request_rows, runs_table
from store.db import Store
from store.lifecycle import open_store


def _add(store: Store, run_id: str, started_at: float, n: int, failed: int, **run: object) -> None:
    ingest.add_run(
        store,
        {
            "run_id": run_id,
            "source": "servescope",
            "framework": "sim",
            "model": "m",
            "gpu_count": 2,
            "arrival": "concurrency",
            "started_at": started_at,
            "duration_s": 10.0,
            **run,
        },
    )
    ok = n - failed
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": run_id,
                "seq": range(n),
                "status": ["ok"] * ok + ["error"] * failed,
                "sent_at": [started_at + i * 0.1 for i in range(n)],
                "done_at": [started_at + i * 0.1 + 0.5 for i in range(n)],
                "input_tokens": 100,
                "output_tokens": 20,
                "ttft_ms": [10.0 + i for i in range(n)],
                "tpot_ms": 5.0,
                "e2e_ms": [200.0 + i for i in range(n)],
            }
        ),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """Three per-request runs (c=1, 8, 32, newest last) and an empty one."""
    s = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    _add(s, "c1", 1_700_000_000.0, 40, 0, concurrency=1)
    _add(s, "c8", 1_700_000_100.0, 50, 1, concurrency=8)
    _add(s, "c32", 1_700_000_200.0, 60, 6, concurrency=32)
    ingest.add_run(s, {"run_id": "empty", "source": "servescope", "started_at": 1_600_000_000.0})
    yield s
    s.dispose()


def _add_aggregates_only(store: Store) -> None:
    ingest.add_run(
        store,
        {
            "run_id": "agg",
            "source": "guidellm",
            "framework": "vllm",
            "gpu_count": 4,
            "started_at": 1_500_000_000.0,
            "tool_summary": {
                "aggregates_only": True,
                "metrics": {
                    "ttft_ms": {"p50": 40.0, "p99": 90.0},
                    "output_throughput": 300.0,
                    "completed": 95,
                    "failed": 5,
                },
            },
        },
    )


def test_the_default_selection_is_resolved_against_the_store(store: Store) -> None:
    view = compare_view(store, CompareSelection())
    newest_first = runs_table.list_runs(store, limit=None)["run_id"].tolist()
    assert view.candidates["run_id"].tolist() == newest_first
    chosen = view.selection
    assert chosen.runs == tuple(newest_first[: compare_views.DEFAULT_RUNS])
    assert chosen.slo == compare_views.DEFAULT_PROFILE
    assert view.profile is not None and view.profile.name == chosen.slo
    assert chosen.by == compare_views.DEFAULT_GROUPING
    assert chosen.distributions is True  # a small selection
    assert view.rows is not None
    assert set(view.rows["run_id"]) == set(chosen.runs)
    # only runs with request rows are sampled and can be baseline or candidate
    assert set(view.per_request) == {"c1", "c8", "c32"}
    assert (chosen.baseline, chosen.candidate) == view.per_request[:2]
    assert view.diffs is not None and not view.diffs.empty
    assert view.samples is not None
    assert set(view.samples["metric"]) == {"ttft_ms", "tpot_ms", "e2e_ms"}  # no token gaps
    assert view.requests_total == 150


def test_per_run_figures_are_the_stores(store: Store) -> None:
    ids = ("c1", "c8", "c32")
    view = compare_view(store, CompareSelection(runs=ids))
    assert view.rows is not None
    ours = view.rows.set_index("run_id")
    stored = runs_table.run_aggregates(store, ids).set_index("run_id")
    for column in ("requests", "error_rate", "duration_s", "request_throughput"):
        pd.testing.assert_series_equal(
            ours.loc[list(ids), column], stored.loc[list(ids), column], check_names=False
        )
    # c32: 54 of 60 succeeded over its 10 s
    assert ours.loc["c32", "request_throughput"] == pytest.approx(54 / 10.0)
    assert ours.loc["c32", "error_rate"] == pytest.approx(6 / 60)


def test_verdicts_attainment_and_capacity(store: Store) -> None:
    profiles = slo_profiles.slo_profiles(store)
    view = compare_view(store, CompareSelection(runs=("c1", "c8", "c32"), slo="interactive-chat"))
    profile = slo.SloProfile.from_entry(profiles["interactive-chat"])
    assert view.slo_limits == compare_views.slo_limits(profile)
    assert view.rows is not None
    rows = view.rows.set_index("run_id")
    # the error-rate target (1 %) fails c8 (2 %) and c32 (10 %); every latency passes
    assert rows["passed"].to_dict() == {"c1": True, "c8": False, "c32": False}
    assert rows.loc["c32", "attainment"] == pytest.approx(54 / 60)
    (series,) = view.capacity
    assert series.load_kind == "concurrency"
    assert series.capacity.measured == 1.0 and series.capacity.first_failing == 8.0


def test_sampled_views_are_read_only_when_wanted(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = compare_view(store, CompareSelection(runs=("c1", "c8"), distributions=False))
    assert off.samples is None and off.diffs is None
    assert off.selection.baseline is None and off.selection.candidate is None
    monkeypatch.setattr(compare_views, "BIG_SELECTION", 10)  # these hold 90 requests
    big = compare_view(store, CompareSelection(runs=("c1", "c8")))
    assert big.selection.distributions is False and big.samples is None
    assert prepare.prepare(store, ["c1", "c8"], large_run=1)  # their samples now stored
    ready = compare_view(store, CompareSelection(runs=("c1", "c8")))
    assert ready.selection.distributions is True and ready.diffs is not None


def test_baseline_and_candidate(store: Store) -> None:
    view = compare_view(store, CompareSelection(runs=("c1", "c32"), baseline="c32", candidate="c1"))
    assert (view.selection.baseline, view.selection.candidate) == ("c32", "c1")
    assert view.diffs is not None
    diffs = view.diffs
    ttft = diffs[(diffs["metric"] == "ttft_ms") & (diffs["percentile"] == 50.0)].iloc[0]
    # P50 of TTFT: c1 has 10..49 ms (29.5), c32's 54 successful ones 10..63 ms (36.5)
    assert ttft["diff"] == pytest.approx(29.5 - 36.5)
    same = compare_view(store, CompareSelection(runs=("c1", "c32"), baseline="c1", candidate="c1"))
    assert same.diffs is None  # two different runs are needed
    unknown = compare_view(store, CompareSelection(runs=("c1", "c32"), baseline="nope"))
    assert unknown.selection.baseline == unknown.per_request[0]


def test_unknown_and_empty_choices(store: Store) -> None:
    view = compare_view(store, CompareSelection(runs=("nope", "c8"), slo="nope", by="colour"))
    assert view.selection.runs == ("c8",)
    assert view.selection.slo == compare_views.DEFAULT_PROFILE
    assert view.selection.by == compare_views.DEFAULT_GROUPING
    none = compare_view(store, CompareSelection(runs=()))
    assert none.selection.runs == () and none.rows is None and none.profile is not None


def test_an_invalid_profile_is_named_not_raised(store: Store) -> None:
    # the catalog keeps what it is given (e.g. an entry written by hand or an older version)
    catalog.save_user_entry(store, "slo_profiles", {"name": "interactive-chat", "percentile": 42})
    view = compare_view(store, CompareSelection(runs=("c1",)))
    assert view.profile is None and view.rows is None
    assert view.profile_error is not None and "percentile" in view.profile_error


def test_aggregate_only_runs_carry_the_tools_figures(store: Store) -> None:
    _add_aggregates_only(store)
    view = compare_view(store, CompareSelection(runs=("agg", "c1")))
    assert view.rows is not None
    agg = view.rows.set_index("run_id").loc["agg"]
    assert agg["ttft_p99_ms"] == 90.0 and agg["output_throughput"] == 300.0
    assert agg["requests"] == 100 and agg["error_rate"] == pytest.approx(0.05)
    assert agg["output_throughput_per_gpu"] == pytest.approx(300.0 / 4)
    assert view.aggregates_only["run_id"].tolist() == ["agg"]
    assert view.per_request == ("c1",)  # no samples, no bootstrap for it
    assert view.diffs is None


def test_the_default_of_one_run_keeps_what_the_page_reads_first(store: Store) -> None:
    view = compare_view(store, CompareSelection.default("c32"))
    assert view.selection.runs == ("c32",) and view.samples is not None
    assert request_rows.samples_ready(store, ["c32"], compare_views.SAMPLE_LIMIT)


def test_saving_a_profile(store: Store) -> None:
    name = slo_profiles.save_slo_profile(
        store, {"name": "tight", "ttft_ms": 20.0, "max_error_rate": 0.5, "description": ""}
    )
    assert name == "tight"
    assert catalog.get(store, "slo_profiles", "tight")["ttft_ms"] == 20.0
    assert "tight" in slo_profiles.slo_profiles(store)
    assert len(slo_profiles.threshold_sets(store)) == len(slo_profiles.slo_profiles(store))
    with pytest.raises(ConfigError, match="max_error_rate"):
        slo_profiles.save_slo_profile(store, {"name": "bad", "max_error_rate": 2.0})
    view = compare_view(store, CompareSelection(runs=("c1", "c8"), slo="tight"))
    assert view.rows is not None
    # TTFT P99 of c1 is 48.6 ms > 20 ms
    assert not view.rows.set_index("run_id").loc["c1", "passed"]


def test_selection_from_url_parameters() -> None:
    picked = CompareSelection.from_params(
        {"runs": "a,,b", "slo": "code-completion", "by": "model", "base": "b", "cand": None}
    )
    assert picked == CompareSelection(
        runs=("a", "b"), slo="code-completion", by="model", baseline="b"
    )
    assert CompareSelection.from_params({"by": "colour"}) == CompareSelection()


def test_fair_comparison_warnings_for_differing_runs_only(store: Store) -> None:
    # c1, c8 and c32 share model, workload (none recorded), GPU count and precision (none)
    view = compare_view(store, CompareSelection(runs=("c1", "c8", "c32"), distributions=False))
    assert view.warnings == ()
    _add(
        store,
        "fp8",
        1_700_000_300.0,
        10,
        0,
        concurrency=8,
        model="other",
        precision="fp8",
        kv_cache_dtype="fp8",
        client_params={"max_tokens": 64},
    )
    ingest.update_run(store, "c1", client_params={"max_tokens": 128})
    view = compare_view(
        store, CompareSelection(runs=("c1", "c8", "fp8"), by="precision", distributions=False)
    )
    assert [w.dimension for w in view.warnings] == ["model", "precision", "max output tokens"]
    model, precision, tokens = view.warnings
    assert [(v.value, v.runs) for v in model.values] == [("m", ("c1", "c8")), ("other", ("fp8",))]
    assert precision.message == "Precision unknown for 2 of 3 runs (the others: fp8 · fp8-kv)"
    assert [(v.value, v.runs) for v in tokens.values] == [
        ("128", ("c1",)),
        ("64", ("fp8",)),
        ("unknown", ("c8",)),
    ]
    assert view.rows is not None
    assert view.rows.set_index("run_id").loc["fp8", "series"] == "fp8 · fp8-kv"
    assert view.rows.set_index("run_id").loc["c1", "series"] == "?"


def test_run_aggregates_carry_precision_and_the_output_cap(store: Store) -> None:
    ingest.update_run(store, "c8", precision="w4a16", kv_cache_dtype="auto")
    ingest.update_run(
        store, "c32", client_params={"dataset_name": "random", "random_output_len": 512}
    )
    agg = runs_table.run_aggregates(store, ["c1", "c8", "c32"]).set_index("run_id")
    assert agg.loc["c8", "precision"] == "w4a16" and agg.loc["c8", "kv_cache_dtype"] == "auto"
    assert agg["precision"].isna().tolist() == [True, False, True]
    assert agg.loc["c32", "max_output_tokens"] == 512
    assert agg["max_output_tokens"].isna().tolist() == [True, True, False]
    listed = runs_table.list_runs(store, limit=None)
    assert {"precision", "kv_cache_dtype"} <= set(listed.columns)
