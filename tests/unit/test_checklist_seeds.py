"""The framework evaluation checklist's seed data (seeds/frameworks.toml, criteria.toml,
scores.toml, weight_presets.toml) is complete and self-consistent, and the store seeds it."""

from __future__ import annotations

import datetime as dt

import pytest

import seeds
from store import catalog
from store.lifecycle import memory_store

FRAMEWORKS = {
    "vllm",
    "sglang",
    "tensorrt-llm",
    "tgi",
    "llama.cpp",
    "lmdeploy",
    "deepspeed-mii",
    "ollama",
}
CHECKLIST = {
    "memory_management",
    "scheduling",
    "model_breadth",
    "hardware_breadth",
    "quantisation",
    "parallelism",
    "api_compatibility",
    "prefix_caching",
    "observability",
    "operations",
    "project_health",
    "licence",
}
# measured criterion -> its metric
MEASURED = {
    "slo_capacity": "slo_capacity",
    "quality_retention": "quality_retention",
    "api_conformance": "verification",
}
PRESETS = {"online-chat", "offline-batch", "long-context-rag", "edge-cpu", "multi-tenant-platform"}

# the project's own documentation sites that scores cite besides its homepage and GitHub repo
EXTRA_DOC_PREFIXES: dict[str, tuple[str, ...]] = {
    "ollama": ("https://docs.ollama.com/",),
}


def _by_name(kind: str) -> dict[str, dict]:
    return {e["name"]: e for e in seeds.entries(kind)}


def _allowed_prefixes(framework: dict) -> tuple[str, ...]:
    """The repo on GitHub, the homepage (with its path: huggingface.co/docs/<project>, not all of
    huggingface.co) and the docs sites listed above."""
    own = (
        f"https://github.com/{framework['repo']}/",
        framework["homepage"].rstrip("/") + "/",
    )
    return own + EXTRA_DOC_PREFIXES.get(framework["name"], ())


def test_the_allow_list_is_narrow() -> None:
    frameworks = _by_name("frameworks")
    assert not "https://github.com/vllm-project/vllm-ascend/".startswith(
        _allowed_prefixes(frameworks["vllm"])
    )
    assert not "https://github.com/some/fork/blob/main/README.md".startswith(
        _allowed_prefixes(frameworks["llama.cpp"])
    )
    assert not "https://huggingface.co/blog/tgi".startswith(_allowed_prefixes(frameworks["tgi"]))


def test_the_eight_frameworks_and_their_fields() -> None:
    frameworks = _by_name("frameworks")
    assert set(frameworks) == FRAMEWORKS
    for name, fw in frameworks.items():
        for key in ("display_name", "repo", "homepage", "licence", "serve", "source"):
            assert isinstance(fw.get(key), str) and fw[key], (name, key)
        assert fw["homepage"].startswith("https://"), name
        assert fw["repo"].count("/") == 1, name
        assert isinstance(fw["aliases"], list), name
    assert {"trtllm", "trtllm-serve", "tensorrt_llm", "triton-trtllm"} <= set(
        frameworks["tensorrt-llm"]["aliases"]
    )
    assert {"llamacpp", "llama-cpp"} <= set(frameworks["llama.cpp"]["aliases"])
    assert "text-generation-inference" in frameworks["tgi"]["aliases"]
    assert "mii" in frameworks["deepspeed-mii"]["aliases"]
    aliases = [a for fw in frameworks.values() for a in fw["aliases"]]
    assert len(aliases) == len(set(aliases)), "an alias names two frameworks"
    assert not set(aliases) & FRAMEWORKS


def test_criteria_kinds_and_vocabularies() -> None:
    criteria = _by_name("criteria")
    assert set(criteria) == CHECKLIST | set(MEASURED)
    for name, c in criteria.items():
        assert c["kind"] == ("measured" if name in MEASURED else "checklist"), name
        for key in ("display_name", "category", "description", "source"):
            assert isinstance(c.get(key), str) and c[key], (name, key)
        assert isinstance(c["items"], list) and c["items"], name
        assert all(isinstance(i, str) and i for i in c["items"]), name
        assert isinstance(c["tags"], dict), name
        assert all(isinstance(v, str) and v for v in c["tags"].values()), name
        if name in MEASURED:
            assert c["metric"] == MEASURED[name]
            assert c["tags"] == {}
        else:
            assert "metric" not in c, name
    assert criteria["project_health"]["tags"] == {}
    every_tag = [t for c in criteria.values() for t in c["tags"]]
    assert len(every_tag) == len(set(every_tag)), "a tag belongs to two criteria"


def test_one_score_per_framework_and_checklist_criterion() -> None:
    pairs = [(s["framework"], s["criterion"]) for s in seeds.entries("framework_scores")]
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {(f, c) for f in FRAMEWORKS for c in CHECKLIST}
    assert not any(c in MEASURED for _, c in pairs)


def test_scores_are_integers_from_0_to_5_and_differentiated() -> None:
    scores = seeds.entries("framework_scores")
    for s in scores:
        assert type(s["score"]) is int and 0 <= s["score"] <= 5, s["name"]
    by = {(s["framework"], s["criterion"]): s["score"] for s in scores}
    # the few judgements the checklist is expected to make
    assert by[("deepspeed-mii", "hardware_breadth")] <= 2
    assert by[("llama.cpp", "hardware_breadth")] == 5
    assert by[("ollama", "parallelism")] <= 2
    assert by[("tgi", "project_health")] <= 2
    for criterion in CHECKLIST - {"licence"}:
        assert len({by[(f, criterion)] for f in FRAMEWORKS}) > 1, criterion


def test_score_tags_come_from_their_criterion() -> None:
    criteria = _by_name("criteria")
    for s in seeds.entries("framework_scores"):
        assert isinstance(s["tags"], list), s["name"]
        assert len(s["tags"]) == len(set(s["tags"])), s["name"]
        unknown = set(s["tags"]) - set(criteria[s["criterion"]]["tags"])
        assert not unknown, (s["name"], unknown)


def test_sources_are_the_frameworks_own_pages() -> None:
    frameworks = _by_name("frameworks")
    for s in seeds.entries("framework_scores"):
        url = s["source_url"]
        assert url.startswith("https://"), s["name"]
        assert " " not in url, s["name"]
        allowed = _allowed_prefixes(frameworks[s["framework"]])
        assert url.startswith(allowed), (s["name"], url)


def test_checked_on_is_a_past_iso_date() -> None:
    today = dt.date.today()
    for s in seeds.entries("framework_scores"):
        assert isinstance(s["checked_on"], str), s["name"]
        assert dt.date.fromisoformat(s["checked_on"]) <= today, s["name"]


def test_evidence_is_one_short_line() -> None:
    for s in seeds.entries("framework_scores"):
        ev = s["evidence"]
        assert isinstance(ev, str) and ev.strip() == ev and ev, s["name"]
        assert "\n" not in ev and "\r" not in ev, s["name"]
        assert len(ev) < 200, (s["name"], len(ev))


def test_weight_presets() -> None:
    presets = _by_name("weight_presets")
    assert set(presets) == PRESETS
    criteria = _by_name("criteria")
    vocabulary = {t for c in criteria.values() for t in c["tags"]}
    for name, p in presets.items():
        assert isinstance(p.get("description"), str) and p["description"], name
        assert isinstance(p.get("source"), str) and p["source"], name
        weights = p["weights"]
        assert set(weights) <= set(criteria), (name, set(weights) - set(criteria))
        assert all(isinstance(w, int | float) and not isinstance(w, bool) for w in weights.values())
        assert all(w >= 0 for w in weights.values()), name
        assert any(w > 0 for w in weights.values()), name
        assert isinstance(p["must_have"], list), name
        assert set(p["must_have"]) <= vocabulary, (name, set(p["must_have"]) - vocabulary)
    # edge and CPU hosts: a CPU backend, and no Python/CUDA stack to carry
    assert set(presets["edge-cpu"]["must_have"]) == {"cpu", "native_binary"}


@pytest.mark.parametrize(
    ("preset", "heaviest"),
    [
        ("online-chat", {"scheduling", "slo_capacity"}),
        ("offline-batch", {"slo_capacity"}),
        ("long-context-rag", {"prefix_caching"}),
        ("edge-cpu", {"hardware_breadth"}),
        ("multi-tenant-platform", {"operations"}),
    ],
)
def test_each_preset_weighs_what_it_is_for(preset: str, heaviest: set[str]) -> None:
    weights = seeds.entry("weight_presets", preset)["weights"]
    top = max(weights.values())
    assert {c for c, w in weights.items() if w == top} == heaviest


def test_a_memory_store_seeds_all_96_scores() -> None:
    store = memory_store()
    names = catalog.names(store, "framework_scores")
    assert len(names) == len(FRAMEWORKS) * len(CHECKLIST) == 96
    assert set(names) == {seeds.score_name(f, c) for f in FRAMEWORKS for c in CHECKLIST}
    assert set(catalog.names(store, "frameworks")) == FRAMEWORKS
    assert set(catalog.names(store, "weight_presets")) == PRESETS
    row = catalog.get(store, "framework_scores", seeds.score_name("vllm", "memory_management"))
    assert row["score"] == 5 and row["checked_on"] == "2026-12-01"
