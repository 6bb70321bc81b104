"""AppTest: the Tune page. An empty store names the command that stores a sweep; a stored sweep
(tests/tune_sweep.py) shows the recommendation's headline and its explanation in numbers, the
points table with the rejected and the failed point, the failed point's log tail in an expander
(as text, never Markdown), the three charts; the pickers follow and set the URL."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest
from tune_sweep import LOG_TAIL, OLD_SWEEP, SWEEP, store_sweep

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "tune.py")
TIMEOUT = 60
HEADLINE = (
    "Recommended: max_batch_size=128 max_batched_tokens=2048 — SLO capacity 14.2 req/s under "
    "interactive-chat (6 points, 1 rejected: memory, 1 failed)"
)


def _run(**query: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def _no_exception(at: AppTest) -> None:
    assert [e.value for e in at.exception] == []
    assert [e.value for e in at.error] == []


def _unescape(text: str) -> str:
    return text.replace("\\", "")


def _points(at: AppTest) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if "Verdict" in d.value.columns)


def test_an_empty_store_names_the_sweep_command(db_url: str) -> None:
    at = _run()
    _no_exception(at)
    assert "no parameter sweep yet" in at.info[0].value
    assert [c.value for c in at.code] == ["servescope sweep examples/sim-sweep.toml"]
    assert len(at.get("plotly_chart")) == 0


def test_a_stored_sweep_shows_the_recommendation_table_and_failed_point(db_url: str) -> None:
    store_sweep(db_url)
    at = _run()
    _no_exception(at)
    assert [_unescape(s.value) for s in at.success] == [f"**{HEADLINE}**"]
    bullets = _unescape(" ".join(m.value for m in at.markdown))
    assert (
        "max_batched_tokens 8192 → 2048 cut P99 TTFT in the 4k–16k bucket by 40 % (at 16 req/s) "
        "and SLO capacity rose from 11 to 14.2 req/s"
    ) in bullets
    table = _points(at)
    assert len(table) == 7
    verdicts = dict(
        zip(table["Point"] + "#" + table["Repeat"].astype(str), table["Verdict"], strict=True)
    )
    assert verdicts["max_batch_size=128 max_batched_tokens=2048#0"] == "recommended"
    assert verdicts["max_batch_size=256 max_batched_tokens=8192#0"].startswith(
        "rejected: peak memory 97 %"
    )
    assert verdicts["max_batch_size=256 max_batched_tokens=2048#0"] == "ran out of memory"
    failed = table[table["Status"] == "oom"].iloc[0]
    assert failed["Error"] == "engine exited: CUDA out of memory"
    # the failed point's expander: its log tail as code (Markdown and HTML left inert)
    labels = [_unescape(e.label) for e in at.expander]
    assert "max_batch_size=256 max_batched_tokens=2048 (repeat 0): ran out of memory" in labels
    assert LOG_TAIL in [c.value for c in at.code]
    assert len(at.get("plotly_chart")) == 3
    assert at.query_params["sweep"] == SWEEP
    assert at.selectbox(key="tune_x").value == "max_batch_size"


def test_the_pickers_follow_the_url_and_set_it(db_url: str) -> None:
    store_sweep(db_url)
    at = _run(sweep=OLD_SWEEP)
    _no_exception(at)
    assert at.selectbox(key="tune_sweep").value == OLD_SWEEP
    assert _unescape(at.warning[0].value) == (
        "No recommendation: no point completed (1 point, 1 failed)"
    )
    assert "bash: vllm: command not found" in [c.value for c in at.code]
    at.selectbox(key="tune_sweep").set_value(SWEEP).run()
    _no_exception(at)
    assert at.query_params["sweep"] == SWEEP
    assert [_unescape(s.value) for s in at.success] == [f"**{HEADLINE}**"]
    at.selectbox(key="tune_x").set_value("max_batched_tokens").run()
    _no_exception(at)
    assert at.query_params["x"] == "max_batched_tokens"
