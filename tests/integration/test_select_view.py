"""services.views.select on a real DuckDB store: the seeded checklist ranked under a preset,
weights and must-haves that change the ranking (checked against totals computed here from the
seed files), SLO capacity measured from the store's runs (hand-computed), verification and
quality evidence, and the validated writes (a score edit with its history, a preset)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

import seeds
from errors import ConfigError
from services.commands import checklist as checklist_command
from services.views.select import SelectSelection, parse_weights, select_view
from store import checklist as checklist_store
from store import ingest, schema
from store.db import Store
from store.lifecycle import open_store


def _seed_scores() -> dict[tuple[str, str], float]:
    return {
        (e["framework"], e["criterion"]): float(e["score"])
        for e in seeds.entries("framework_scores")
    }


def _seed_tags() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for e in seeds.entries("framework_scores"):
        out.setdefault(e["framework"], set()).update(e.get("tags", []))
    return out


def _expected_order(weights: dict[str, float], frameworks: list[str]) -> list[str]:
    """Weighted totals computed here, directly from the seed files (missing scores count 0)."""
    scores = _seed_scores()
    total_w = sum(weights.values())

    def total(f: str) -> float:
        return sum(w * scores.get((f, c), 0.0) for c, w in weights.items()) / total_w

    return sorted(frameworks, key=lambda f: (-round(total(f), 9), f))


def _run(store: Store, run_id: str, framework: str, concurrency: int, ttft_ms: float) -> None:
    started = 1_700_000_000.0 + concurrency
    ingest.add_run(
        store,
        {
            "run_id": run_id,
            "source": "servescope",
            "framework": framework,
            "model": "llama-3.1-8b",
            "gpu_name": "H100-SXM-80GB",
            "gpu_count": 1,
            "arrival": "concurrency",
            "concurrency": concurrency,
            "started_at": started,
            "duration_s": 10.0,
        },
    )
    n = 120
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": run_id,
                "seq": range(n),
                "status": "ok",
                "sent_at": [started + i * 0.05 for i in range(n)],
                "done_at": [started + i * 0.05 + 1.0 for i in range(n)],
                "input_tokens": 200,
                "output_tokens": 50,
                "ttft_ms": ttft_ms,
                "tpot_ms": 5.0,
                "e2e_ms": 1000.0,
            }
        ),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"duckdb:///{tmp_path / 'select.duckdb'}")
    yield s
    s.dispose()


def test_an_empty_store_ranks_the_seeded_checklist_under_the_default_preset(store: Store) -> None:
    view = select_view(store, SelectSelection())
    preset = next(p for p in seeds.entries("weight_presets") if p["name"] == "online-chat")
    frameworks = [f["name"] for f in seeds.entries("frameworks")]
    weights = {
        c["name"]: float(preset["weights"].get(c["name"], 0.0)) for c in seeds.entries("criteria")
    }
    assert view.selection.preset == "online-chat"
    assert dict(view.selection.weights or ()) == weights
    assert [r.framework for r in view.ranking.rows] == _expected_order(weights, frameworks)
    assert view.models == () and view.selection.model is None
    assert all(not ev.measured for ev in view.evidence.values())
    # the measured criteria have no measurement: missing for everyone
    measured = [c["name"] for c in seeds.entries("criteria") if c["kind"] == "measured"]
    weighted_measured = [c for c in measured if weights[c] > 0]
    assert weighted_measured, "the online-chat preset weighs measured evidence"
    for row in view.ranking.rows:
        assert set(weighted_measured) <= set(row.missing)
    assert abs(sum(view.shares.values()) - 1.0) < 1e-9
    assert view.history.empty


def test_weights_and_must_haves_change_the_ranking(store: Store) -> None:
    frameworks = [f["name"] for f in seeds.entries("frameworks")]
    only_hw = {c["name"]: 0.0 for c in seeds.entries("criteria")} | {"hardware_breadth": 1.0}
    view = select_view(store, SelectSelection(weights=tuple(sorted(only_hw.items()))))
    assert [r.framework for r in view.ranking.rows] == _expected_order(only_hw, frameworks)
    only_api = {c: 0.0 for c in only_hw} | {"api_compatibility": 1.0}
    other = select_view(store, SelectSelection(weights=tuple(sorted(only_api.items()))))
    assert [r.framework for r in other.ranking.rows] == _expected_order(only_api, frameworks)

    tags = _seed_tags()
    lacking_amd = sorted(f for f in frameworks if "amd" not in tags.get(f, set()))
    assert lacking_amd and len(lacking_amd) < len(frameworks), "the seeds split on AMD"
    filtered = select_view(store, SelectSelection(must_have=("amd",)))
    assert sorted(e.framework for e in filtered.ranking.excluded) == lacking_amd
    assert {r.framework for r in filtered.ranking.rows} == set(frameworks) - set(lacking_amd)
    # an unknown tag in the URL is dropped, not an error on the page
    assert select_view(store, SelectSelection(must_have=("nope",))).must_have == ()


def test_slo_capacity_from_the_store_runs_feeds_the_measured_criterion(store: Store) -> None:
    # interactive-chat: P99 TTFT ≤ 500 ms. vLLM passes at c=8 (300 ms, ratio 0.6) and fails at
    # c=32 (900 ms, ratio 1.8): capacity 8 + (1 − 0.6) / (1.8 − 0.6) × 24 = 16 (interpolated).
    # SGLang passes at every load: capacity 32 (measured, no failing load).
    for c, ttft in ((1, 100.0), (8, 300.0), (32, 900.0)):
        _run(store, f"v{c}", "vllm", c, ttft)
    for c, ttft in ((1, 50.0), (8, 100.0), (32, 200.0)):
        _run(store, f"s{c}", "SGLang", c, ttft)  # labels match case-insensitively
    _run(store, "sim1", "sim", 1, 10.0)
    view = select_view(store, SelectSelection(slo="interactive-chat"))
    assert view.selection.model == "llama-3.1-8b" and view.selection.gpu == "H100-SXM-80GB"
    vllm, sglang = view.evidence["vllm"], view.evidence["sglang"]
    assert vllm.runs == 3 and sglang.runs == 3
    assert vllm.capacity == pytest.approx(16.0) and vllm.capacity_kind == "concurrency"
    assert sglang.capacity == pytest.approx(32.0)
    assert view.scores_used[("vllm", "slo_capacity")] == pytest.approx(2.5)
    assert view.scores_used[("sglang", "slo_capacity")] == pytest.approx(5.0)
    assert view.scores_used[("tgi", "slo_capacity")] is None
    assert view.other_frameworks == {"sim": 1}
    # goodput: all 120 requests meet the SLO in 10 s at every passing load
    assert sglang.goodput == pytest.approx(12.0)
    # weighing only SLO capacity puts SGLang first
    weights = {c["name"]: 0.0 for c in seeds.entries("criteria")} | {"slo_capacity": 1.0}
    only = select_view(store, SelectSelection(weights=tuple(sorted(weights.items()))))
    assert [r.framework for r in only.ranking.rows][:2] == ["sglang", "vllm"]


def test_verification_and_quality_evidence(store: Store) -> None:
    now = time.time()
    with store.connect() as conn:
        conn.execute(
            sa.insert(schema.verifications).values(
                verify_id="v1",
                endpoint="http://h:8000",
                model="m",
                framework="vllm",
                framework_version="0.11.0",
                started_at=now,
                passed=6,
                failed=2,
            )
        )
        conn.execute(
            sa.insert(schema.verification_checks),
            [
                {"verify_id": "v1", "check_name": f"c{i}", "passed": i < 6, "message": "x"}
                for i in range(8)
            ],
        )
    view = select_view(store, SelectSelection())
    v = view.evidence["vllm"].verification
    assert v is not None and v["passed"] == 6 and v["failed"] == 2
    assert view.scores_used[("vllm", "api_conformance")] == pytest.approx(5 * 6 / 8)
    assert view.scores_used[("sglang", "api_conformance")] is None


def test_a_score_edit_is_validated_kept_with_its_history_and_ranked(store: Store) -> None:
    before = checklist_store.scores(store)
    row = before[(before["framework"] == "ollama") & (before["criterion"] == "hardware_breadth")]
    old = float(row["score"].iloc[0])
    entry = {
        "framework": "ollama",
        "criterion": "hardware_breadth",
        "score": 0,
        "evidence": "Edited for the test.",
        "source_url": "https://github.com/ollama/ollama",
        "checked_on": "2026-11-30",
        "tags": ["cpu"],
    }
    assert checklist_command.save_scores(store, [entry], edited_by="tester") == 1
    after = checklist_store.scores(store)
    edited = after[(after["framework"] == "ollama") & (after["criterion"] == "hardware_breadth")]
    assert edited["score"].iloc[0] == 0 and edited["origin"].iloc[0] == "user"
    history = checklist_store.score_history(store)
    assert history[["framework", "criterion", "edited_by"]].iloc[0].tolist() == [
        "ollama",
        "hardware_breadth",
        "tester",
    ]
    assert history["previous_score"].iloc[0] == old
    view = select_view(store, SelectSelection())
    assert view.scores_used[("ollama", "hardware_breadth")] == 0
    assert len(view.history) == 1

    # bad edits: one clear error each, and nothing written
    for bad, message in (
        ({**entry, "score": 7}, "outside 0"),
        ({**entry, "criterion": "speed"}, "unknown criterion 'speed'"),
        ({**entry, "tags": ["amd", "wings"]}, "'wings' is not in hardware_breadth"),
        ({**entry, "source_url": "ftp://x"}, "source_url"),
    ):
        with pytest.raises(ConfigError, match=message):
            checklist_command.save_scores(store, [{**entry, "score": 3}, bad])
    assert len(checklist_store.score_history(store)) == 1
    assert checklist_store.scores(store).equals(after)


def test_a_user_preset_is_validated_and_then_offered(store: Store) -> None:
    with pytest.raises(ConfigError, match=r"unknown criterion 'latency'; criteria: "):
        checklist_command.save_preset(store, {"name": "mine", "weights": {"latency": 3}})
    with pytest.raises(ConfigError, match="unknown must-have tag 'wings'"):
        checklist_command.save_preset(
            store, {"name": "mine", "weights": {"licence": 1}, "must_have": ["wings"]}
        )
    assert "mine" not in [p["name"] for p in checklist_store.presets(store)]
    checklist_command.save_preset(
        store, {"name": "mine", "weights": {"licence": 2, "observability": 1}, "must_have": ["cpu"]}
    )
    view = select_view(store, SelectSelection(preset="mine"))
    assert view.selection.preset == "mine" and view.must_have == ("cpu",)
    assert view.weights["licence"] == 2 and view.weights["scheduling"] == 0
    assert {p["name"]: p["origin"] for p in view.presets}["mine"] == "user"


def test_weights_in_the_url() -> None:
    assert parse_weights("b:2,a:0.5,bad,c:-1,d:x") == (("a", 0.5), ("b", 2.0))
    assert parse_weights("") is None and parse_weights("nonsense") is None
    # issue 24: 1e308 overflowed the weighted sums (a traceback on /select); beyond the bound
    # a weight is skipped like any other unusable part
    assert parse_weights("scheduling:1e308,memory_management:1e308,licence:2") == (
        ("licence", 2.0),
    )
    assert parse_weights("a:1000,b:1000.5,c:nan,d:inf") == (("a", 1000.0),)


def test_absurd_url_weights_rank_without_a_traceback(store: Store) -> None:
    weights = parse_weights("scheduling:1e308,memory_management:1e308")
    view = select_view(store, SelectSelection(weights=weights))
    assert view.ranking.rows  # the preset's weights, not a crash
    assert all(math.isfinite(r.total) for r in view.ranking.rows)


def test_every_weight_at_zero_is_a_message_not_an_error(store: Store) -> None:
    view = select_view(store, SelectSelection(weights=(("licence", 0.0),)))
    assert view.problem is not None and "Every weight is 0" in view.problem
    assert view.ranking.rows == () and view.shares == {} and view.sensitivity == ()


def test_ranking_again_reads_nothing(store: Store) -> None:
    """Moving a weight ranks the same basis again (the page caches the basis only)."""
    from services.views.select import EvidenceSelection, rank_view, select_basis

    basis = select_basis(store, EvidenceSelection())
    store.dispose()  # nothing below may touch the store
    a = rank_view(basis, SelectSelection())
    b = rank_view(basis, SelectSelection(weights=(("hardware_breadth", 1.0),)))
    assert a.selection.preset == b.selection.preset == "online-chat"
    assert [r.framework for r in b.ranking.rows] == _expected_order(
        {c["name"]: 0.0 for c in seeds.entries("criteria")} | {"hardware_breadth": 1.0},
        [f["name"] for f in seeds.entries("frameworks")],
    )
