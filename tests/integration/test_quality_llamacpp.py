"""``servescope quality`` on a real engine: llama.cpp's llama-server serving SmolLM2-135M as the
reference, the sim as the candidate (the pairing the issue asks for).

Reuses the ``llama_server`` fixture of test_llamacpp.py (skipped without the binary and the
GGUF, failed under SERVESCOPE_TEST_STRICT=1). SmolLM2-135M is tiny: its own accuracy is modest,
so nothing here asserts a high value — only that every figure is computed from real answers,
that the sim (whose text ignores the question) is reported as far below it, and that the run
is stored once. The figures are printed (``pytest -s``) for the record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_llamacpp import MODEL_ALIAS, LlamaServer, llama_server  # noqa: F401  (the fixture)

import cli
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread
from store.lifecycle import open_store
from store.quality_results import quality_answers, quality_runs

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    handle = start_in_thread(
        EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"), time_scale=20.0
    )
    try:
        yield handle
    finally:
        handle.stop()


def test_smollm2_reference_vs_sim_candidate(
    llama_server: LlamaServer,  # noqa: F811
    sim: SimHandle,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = f"duckdb:///{tmp_path / 'q.duckdb'}"
    code = cli.main(
        [
            "quality",
            "--reference", llama_server.url,
            "--reference-precision", "q8_0",
            "--candidate", sim.url,
            "--candidate-precision", "int4",
            "--timeout", "120",
            "--db", db,
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, f"{out}\n--- llama-server\n{llama_server.log_tail()}"

    store = open_store(db)
    try:
        runs = quality_runs(store)
        assert len(runs) == 1  # stored once
        run = runs.iloc[0]
        answers = quality_answers(store, run["quality_id"])
    finally:
        store.dispose()

    assert run["reference_framework"] == "llama.cpp" and run["reference_model"] == MODEL_ALIAS
    assert str(run["reference_version"]).startswith("b")
    assert run["candidate_framework"] == "sim"
    assert run["prompts"] == 80 and len(answers) == 80
    # every llama.cpp request answered (greedy, max_tokens 32): the figures are of real answers
    assert answers["reference_error"].isna().all(), answers["reference_error"].dropna().head()
    assert answers["reference_answer"].notna().all()
    for name in ("reference_accuracy", "candidate_accuracy", "agreement", "similarity"):
        value, lo, hi = run[name], run[f"{name}_lo"], run[f"{name}_hi"]
        assert 0.0 <= lo <= value <= hi <= 1.0, (name, lo, value, hi)
    # the sim's answers ignore the question: low accuracy and agreement, reported as such
    assert run["candidate_accuracy"] <= 0.05
    assert run["agreement"] <= 0.05
    summary = json.loads(run["summary"])
    if run["reference_accuracy"] > 0:
        assert run["retention"] <= run["reference_accuracy"] and run["retention_hi"] < 1.0
        assert run["verdict"].endswith("NOT equivalent"), run["verdict"]
    else:
        assert "retention is undefined" in run["verdict"]
    assert f"verdict    {run['verdict']}" in out

    # for the record (pytest -s): the measured figures
    print("\n" + out)
    print(
        "per category (reference, candidate accuracy):",
        {
            c: (f["reference_accuracy"], f["candidate_accuracy"])
            for c, f in summary["categories"].items()
        },
        f"duration {run['duration_s']:.1f} s",
    )
    right = answers[answers["reference_correct"]]
    print("llama.cpp correct on:", ", ".join(right["prompt_id"]))
