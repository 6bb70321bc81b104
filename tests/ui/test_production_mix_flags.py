"""AppTest: Compare and Select flag the runs whose prompt/output lengths differ from
production's (the watched engines' length histograms in the store), show the representative
ones as such, and say only one caption when the store holds no production lengths."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from collectors.engine_metrics import bucket_metric
from store import ingest
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
COMPARE = str(ROOT / "pages" / "compare.py")
SELECT = str(ROOT / "pages" / "select.py")
TIMEOUT = 60
T = 1_700_100_000.0

PROMPT_EDGES = (128.0, 512.0, 1024.0, 4096.0, math.inf)
OUTPUT_EDGES = (64.0, 256.0, 1024.0, math.inf)
#: Production: prompts 10 / 60 / 20 / 10 / 0 and outputs 20 / 70 / 10 / 0 per bucket.
PROMPT_COUNTS = (10, 60, 20, 10, 0)
OUTPUT_COUNTS = (20, 70, 10, 0)
SAME_PROMPTS = [(100, 10), (300, 60), (800, 20), (2000, 10)]
SAME_OUTPUTS = [(50, 20), (200, 70), (500, 10)]
LONG_PROMPTS = [(2000, 100)]  # every prompt in (1024, 4096]: KS 0.90 at 1024


def _hist_rows(hist: str, edges: Sequence[float], counts: Sequence[int]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for ts, scale in ((T - 3600, 0), (T, 1)):
        cum = 0.0
        for le, c in zip(edges, counts, strict=True):
            cum += c * scale
            rows.append({"ts": ts, "metric": bucket_metric(hist, le), "value": cum})
        rows.append({"ts": ts, "metric": f"{hist}_count", "value": cum})
    return [{"target": "http://prod/metrics", "engine": "vllm", **r} for r in rows]


def _seed(url: str, *, production: bool, framework: str = "vllm") -> None:
    store = open_store(url)
    try:
        if production:
            rows = _hist_rows("prompt_length_tokens", PROMPT_EDGES, PROMPT_COUNTS)
            rows += _hist_rows("output_length_tokens", OUTPUT_EDGES, OUTPUT_COUNTS)
            ingest.add_rows(store, "engine_samples", pd.DataFrame(rows))
        for run_id, name, prompts, concurrency in (
            ("run-same", "like prod", SAME_PROMPTS, 1),
            ("run-long", "**long** <b>prompts</b>", LONG_PROMPTS, 8),
        ):
            started = 1_700_000_000.0 + concurrency
            ingest.add_run(
                store,
                {
                    "run_id": run_id,
                    "name": name,
                    "source": "servescope",
                    "framework": framework,
                    "model": "llama-3.1-8b",
                    "gpu_name": "H100-SXM-80GB",
                    "gpu_count": 1,
                    "arrival": "concurrency",
                    "concurrency": concurrency,
                    "started_at": started,
                    "duration_s": 60.0,
                },
            )
            p = [t for t, n in prompts for _ in range(n)]
            o = [t for t, n in SAME_OUTPUTS for _ in range(n)]
            ingest.add_requests(
                store,
                pd.DataFrame(
                    {
                        "run_id": run_id,
                        "seq": range(len(p)),
                        "status": "ok",
                        "sent_at": [started + i * 0.1 for i in range(len(p))],
                        "done_at": [started + i * 0.1 + 0.5 for i in range(len(p))],
                        "input_tokens": p,
                        "output_tokens": o,
                        "ttft_ms": 50.0,
                        "tpot_ms": 5.0,
                        "e2e_ms": 500.0,
                    }
                ),
            )
    finally:
        store.dispose()


def _run(page: str, **query: str) -> AppTest:
    at = AppTest.from_file(page, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert [e.value for e in at.exception] == []
    return at


def _badges(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if "-badge[" in m.value]


def _subheaders(at: AppTest) -> list[str]:
    return [s.value for s in at.subheader]


def test_compare_flags_the_run_whose_prompts_differ(db_url: str) -> None:
    _seed(db_url, production=True)
    at = _run(COMPARE, runs="run-same,run-long")
    assert "Lengths vs production" in _subheaders(at)
    badges = _badges(at)
    flagged = [b for b in badges if "orange-badge" in b]
    matched = [b for b in badges if "green-badge" in b]
    assert len(flagged) == 1 and "differs from production (KS 0.90)" in flagged[0]
    assert len(matched) == 1 and "representative of production (KS 0.00)" in matched[0]
    labels = [e.label for e in at.expander if e.label.startswith("Lengths of")]
    assert len(labels) == 2
    # the run's Markdown-laden name is shown inert
    assert not any("<b>" in label for label in labels)
    text = " ".join(m.value for m in at.markdown)
    assert "KS distance 0.90 ≥ 0.2" in text.replace("\\", "")
    assert any("KS distance of 0.2 or more" in c.value for c in at.caption)
    # both distributions drawn for each run (two overlay charts beside the page's own)
    charts = [c for c in at.get("plotly_chart")]
    assert len(charts) >= 2


def test_compare_without_production_says_one_caption(db_url: str) -> None:
    _seed(db_url, production=False)
    at = _run(COMPARE, runs="run-same,run-long")
    assert "Lengths vs production" not in _subheaders(at)
    assert _badges(at) == []
    notes = [c.value for c in at.caption if "No production length mix" in c.value]
    assert len(notes) == 1 and "servescope watch" in notes[0]


def test_select_flags_the_framework_behind_its_score(db_url: str) -> None:
    _seed(db_url, production=True)
    at = _run(SELECT)
    assert [e.value for e in at.error] == []
    assert "Lengths vs production" in _subheaders(at)
    badges = _badges(at)
    # vLLM's evidence pools both runs: 200 prompts, 110 above 1 024 → CDF 0.45 vs 0.90
    assert len(badges) == 1 and "differs from production (KS 0.45)" in badges[0]
    assert any(e.label == "Lengths of vLLM vs production" for e in at.expander)


def test_select_without_measured_runs_says_nothing(db_url: str) -> None:
    _seed(db_url, production=True, framework="sim")  # not a catalogue framework
    at = _run(SELECT)
    assert "Lengths vs production" not in _subheaders(at)
    assert not any("No production length mix" in c.value for c in at.caption)
