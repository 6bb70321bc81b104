"""``servescope checklist rank|load`` in process (``cli.main``) on a real DuckDB file: the ranking
printed for a preset, weights and must-haves; a user's scores file stored with its history;
bad input — a malformed scores.toml edit, an unknown criterion in a preset or a weight, an
unknown tag — one clear line and exit 2, with nothing stored. Also: a malformed seed file stops
seeding before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import cli
import seeds
from errors import ConfigError, ExitCode
from store import catalog, schema
from store import checklist as checklist_store
from store.db import Store
from store.lifecycle import open_store

GOOD = """
[[scores]]
framework = "ollama"
criterion = "parallelism"
score = 2
evidence = "Splits a model over several GPUs of one host (our test)."
source_url = "https://github.com/ollama/ollama/blob/main/docs/faq.md"
checked_on = "2026-11-29"
tags = ["tensor_parallel"]

[[weight_presets]]
name = "our-chat"
description = "Ours."
weights = { scheduling = 3, slo_capacity = 5 }
must_have = ["prometheus_metrics"]
"""


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    monkeypatch.setenv("SERVESCOPE_DB", url)
    open_store(url).dispose()
    return url


def _state(url: str) -> tuple[Any, ...]:
    store = open_store(url)
    try:
        return (
            checklist_store.scores(store).to_dict("records"),
            len(checklist_store.score_history(store)),
            [p["name"] for p in checklist_store.presets(store)],
        )
    finally:
        store.dispose()


def test_rank_prints_the_ranking_for_a_preset_and_must_haves(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["checklist", "rank", "--preset", "edge-cpu"]) == 0
    out = capsys.readouterr().out
    assert "preset: edge-cpu   must-have: cpu, native_binary" in out
    ranked = [line.split()[1] for line in out.splitlines() if line[:2].strip().isdigit()]
    assert ranked == ["llama.cpp", "Ollama"]
    assert "out: vLLM lacks native_binary" in out
    assert "measured evidence: none" in out

    assert cli.main(["checklist", "rank", "--weight", "hardware_breadth=5", "licence=0"]) == 0
    out = capsys.readouterr().out
    assert "preset: online-chat" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "nope"], "unknown weight preset 'nope'; presets: edge-cpu, "),
        (["--weight", "latency=3"], "unknown criterion 'latency' in --weight; criteria: "),
        (["--weight", "scheduling"], "is not CRITERION=WEIGHT"),
        (["--weight", "scheduling=-1"], "is not CRITERION=WEIGHT"),
        (["--weight", "scheduling=1e308"], "with a weight from 0 to 1000"),
        (["--must-have", "wings"], "unknown capability 'wings' in --must-have; tags: "),
        (["--model", "gpt-9"], "no model 'gpt-9' among the measured ones"),
    ],
)
def test_rank_bad_input_is_one_line(
    db: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main(["checklist", "rank", *argv]) == ExitCode.ERROR
    err = capsys.readouterr().err
    assert message in err and err.startswith("servescope: error: ")


def test_load_stores_scores_with_history_and_presets(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ours.toml"
    path.write_text(GOOD)
    assert cli.main(["checklist", "load", str(path), "--by", "alice"]) == 0
    assert "stored 1 score(s) and 1 weight preset(s)" in capsys.readouterr().out
    scores, history, presets = _state(db)
    row = next(s for s in scores if (s["framework"], s["criterion"]) == ("ollama", "parallelism"))
    assert (row["score"], row["origin"], row["updated_by"]) == (2.0, "user", "alice")
    assert history == 1 and "our-chat" in presets
    # the new preset ranks, and reseeding (a new process's first open) keeps the edit
    assert cli.main(["checklist", "rank", "--preset", "our-chat"]) == 0
    store = open_store(db)
    try:
        catalog.seed(store)
        assert catalog.get(store, "framework_scores", "ollama/parallelism")["score"] == 2.0
    finally:
        store.dispose()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("score = 2", "score = 9"), "ollama/parallelism: score 9 is outside 0–5"),
        (("score = 2", 'score = "high"'), "ollama/parallelism: score"),
        (('criterion = "parallelism"', 'criterion = "speed"'), "unknown criterion 'speed'"),
        (('tags = ["tensor_parallel"]', 'tags = ["warp_drive"]'), "'warp_drive'"),
        (('checked_on = "2026-11-29"', 'checked_on = "yesterday"'), "checked_on"),
        (("slo_capacity = 5", "latency = 5"), "unknown criterion 'latency'; criteria: "),
        (('must_have = ["prometheus_metrics"]', 'must_have = ["wings"]'), "'wings'"),
        (("[[scores]]", "[[scores]"), "not valid TOML"),
        (("[[weight_presets]]", "[[presets]]"), "unknown table(s) presets"),
        # issue 24: absurd weights are refused where they enter, not crash the ranking later
        (("scheduling = 3", "scheduling = 1e308"), "expected a number from 0 to 1000"),
        (("scheduling = 3", "scheduling = nan"), "expected a number from 0 to 1000"),
        (('tags = ["tensor_parallel"]', "tags = " + "[" * 1200 + "]" * 1200), "nested"),
        (('tags = ["tensor_parallel"]', "tags = " + "[" * 40 + "]" * 40), "nested more than 32"),
    ],
)
def test_a_malformed_file_is_one_line_and_stores_nothing(
    db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: tuple[str, str],
    message: str,
) -> None:
    before = _state(db)
    path = tmp_path / "bad.toml"
    assert edit[0] in GOOD
    path.write_text(GOOD.replace(edit[0], edit[1], 1))
    assert cli.main(["checklist", "load", str(path)]) == ExitCode.ERROR
    err = capsys.readouterr().err
    assert message in err and str(path) in err
    assert len(err.strip().splitlines()) <= 2  # the error, and a hint at most
    assert _state(db) == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scores = [1, 2]", "scores entry 1 is 1; expected a table ([[scores]])"),
        ('weight_presets = [{ name = "x", weights = { licence = 1 } }, "y"]', "entry 2 is 'y'"),
        ("scores = [" + "[" * 1500 + "]" * 1500 + "]", "nested too deep"),
    ],
)
def test_entries_that_are_not_tables_or_nest_too_deep_are_one_line(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    """Issue 24: these raised AttributeError / RecursionError tracebacks."""
    before = _state(db)
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    assert cli.main(["checklist", "load", str(path)]) == ExitCode.ERROR
    err = capsys.readouterr().err
    assert message in err and err.startswith("servescope: error: ")
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert _state(db) == before


def test_a_weight_of_1e308_stored_before_the_bound_cannot_crash_the_ranking(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bound holds where stored presets are read too: the old row is refused by name."""
    store = open_store(db)
    try:
        huge = {"scheduling": 1e308, "memory_management": 1e308}
        checklist_store.save_preset(store, {"name": "huge", "weights": huge, "must_have": []})
    finally:
        store.dispose()
    code = cli.main(["checklist", "rank", "--preset", "huge"])
    err = capsys.readouterr().err
    assert code == ExitCode.ERROR and "Traceback" not in err
    assert "expected a number from 0 to 1000" in err


def test_a_missing_file_is_one_line(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["checklist", "load", "/nonexistent/ours.toml"]) == ExitCode.ERROR
    assert "/nonexistent/ours.toml: no such file" in capsys.readouterr().err


def test_a_malformed_seed_file_stops_seeding_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = seeds.entries

    def broken(kind: str) -> list[dict[str, Any]]:
        out = real(kind)
        if kind == "framework_scores":
            out[3] = out[3] | {"score": 12}
        return out

    store = Store.in_memory()
    from store import migrations

    migrations.migrate(store)
    monkeypatch.setattr(seeds, "entries", broken)
    with pytest.raises(ConfigError, match=r"scores\.toml: .*score 12 is outside 0–5"):
        catalog.seed(store)
    with store.connect() as conn:
        for table in ("gpus", "frameworks", "framework_scores", "weight_presets"):
            count = conn.execute(
                sa.select(sa.func.count()).select_from(schema.CATALOG_TABLES[table])
            )
            assert count.scalar() == 0, table
