"""``servescope compare`` and ``db pin|unpin|pinned`` in process (``cli.main``) on a real DuckDB
file holding runs with known request distributions: exit 3 on a significant regression, 0
within the thresholds, 2 on bad input (unknown run, malformed --fail-on, aggregate-only run,
no pinned baseline); the table printed; pinning one baseline per model, GPU and workload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import cli
from analysis import regression
from errors import ExitCode
from services.views import compare as compare_view
from store import ingest, runs_table
from store.lifecycle import open_store

N = 600
DURATION_S = 60.0


def _requests(run_id: str, ttft_scale: float, seed: int, errors: int = 0) -> pd.DataFrame:
    """``N`` requests: TTFT ~ 100 ms + exponential(ttft_scale × 100 ms) (so a scale of 1.3
    moves every percentile's excess by 30 %), TPOT 20 ms, 100 output tokens."""
    rng = np.random.default_rng(seed)
    ttft = 100.0 + rng.exponential(100.0, N) * ttft_scale
    e2e = ttft + 99 * 20.0
    status = ["ok"] * (N - errors) + ["error"] * errors
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": np.arange(N),
            "sent_at": 1_700_000_000.0 + np.arange(N) * 0.1,
            "status": status,
            "input_tokens": 200,
            "output_tokens": 100,
            "ttft_ms": ttft,
            "tpot_ms": 20.0,
            "e2e_ms": e2e,
        }
    )


def _add(store: Any, run_id: str, *, model: str = "m-8b", **fields: Any) -> None:
    ingest.add_run(
        store,
        {
            "run_id": run_id,
            "name": f"name-{run_id}",
            "source": "servescope",
            "model": model,
            "gpu_name": "H100",
            "gpu_count": 1,
            "workload": "chat",
            "duration_s": DURATION_S,
            "started_at": 1_700_000_000.0,
            "status": "completed",
            **fields,
        },
    )


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    monkeypatch.setenv("SERVESCOPE_DB", url)
    store = open_store(url)
    for run_id, scale, seed, errors in (
        ("base", 1.0, 1, 0),
        ("slower", 1.6, 2, 0),  # P99 TTFT ≈ +50 %
        ("same", 1.0, 3, 0),  # another draw of the baseline's distribution
        ("failing", 1.0, 4, 120),  # 20 % errors: goodput and throughput fall
    ):
        _add(store, run_id)
        ingest.add_requests(store, _requests(run_id, scale, seed, errors))
    _add(store, "other-model", model="m-70b")
    ingest.add_requests(store, _requests("other-model", 1.0, 5))
    _add(store, "agg", tool_summary=json.dumps({"aggregates_only": True}))
    store.dispose()
    return url


def _table(out: str) -> dict[str, list[str]]:
    """The table's rows by metric (whitespace-split cells)."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0].rstrip("*") in regression.METRICS:
            rows[cells[0].rstrip("*")] = cells
    return rows


def test_a_significant_regression_fails_with_3_and_prints_the_table(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["compare", "base", "slower", "--fail-on", "p99_ttft_ms:+10%,goodput:-15%"])
    out = capsys.readouterr().out
    assert code == ExitCode.FAILED == 3
    assert "baseline:  base (name-base)" in out
    assert "candidate: slower (name-slower)" in out
    assert "goodput against SLO profile interactive-chat" in out
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert header.split() == [
        "metric",
        "baseline",
        "candidate",
        "change",
        "95%",
        "interval",
        "threshold",
        "verdict",
        "n",
        "(base/cand)",
    ]
    rows = _table(out)
    assert rows["p99_ttft_ms"][-2:] == ["regression", "600/600"]
    assert rows["p99_ttft_ms"][8] == "+10%"
    # TTFT > 500 ms misses interactive-chat: 11 of base's, 41 of slower's requests:
    # 589 / 60 s → 559 / 60 s, −5.1 %
    assert rows["goodput"][1:6] == ["9.817", "req/s", "9.317", "req/s", "-5.1%"]
    assert rows["goodput"][-3:] == ["within", "threshold", "600/600"]
    assert "FAILED: 1 significant regression(s): p99_ttft_ms +" in out
    assert "beyond +10%" in out


def test_the_table_agrees_with_the_compare_page(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compare", "base", "slower", "--fail-on", "p99_ttft_ms:+10%"]) == 3
    out = capsys.readouterr().out
    store = open_store(db)
    samples = compare_view.read_samples(store, ["base", "slower"])
    diffs = compare_view.baseline_vs_candidate(samples, "base", "slower")
    row = diffs[(diffs["metric"] == "ttft_ms") & (diffs["percentile"] == 99.0)].iloc[0]
    profile = compare_view.slo.SloProfile.from_entry(
        compare_view.slo_profiles.slo_profiles(store)["interactive-chat"]
    )
    profile_rows = compare_view.read_rows(store, ["base", "failing"], profile, "model")
    store.dispose()
    cells = _table(out)["p99_ttft_ms"]
    assert cells[1] == f"{row['baseline']:,.1f}" and cells[3] == f"{row['candidate']:,.1f}"
    assert cells[5] == f"{row['diff_pct']:+.1f}%"
    lo, hi = 100 * row["low"] / row["baseline"], 100 * row["high"] / row["baseline"]
    assert cells[6:8] != [] and f"[{lo:+.1f}%," in out and f"{hi:+.1f}%]" in out

    # goodput: the same figure as Compare's (SQL) goodput under the same profile
    assert cli.main(["compare", "base", "failing", "--fail-on", "goodput:-50%"]) == 0
    cells = _table(capsys.readouterr().out)["goodput"]
    goodput = dict(zip(profile_rows["run_id"], profile_rows["goodput"], strict=True))
    assert cells[1] == f"{goodput['base']:,.3f}" and cells[3] == f"{goodput['failing']:,.3f}"
    assert (
        cli.main(["compare", "base", "failing", "--fail-on", "goodput:-50%", "--slo", "lenient"])
        == 2
    )
    assert "unknown SLO profile 'lenient'" in capsys.readouterr().err


def test_within_thresholds_exits_0(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "compare",
            "base",
            "same",
            "--fail-on",
            "p99_ttft_ms:+25%,p50_e2e_ms:+10%,goodput:-5%,output_throughput:-5%,error_rate:+0.01",
        ]
    )
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    rows = _table(out)
    assert set(rows) == {"p99_ttft_ms", "p50_e2e_ms", "goodput", "output_throughput", "error_rate"}
    assert "regression" not in {r[-2] for r in rows.values()}
    assert rows["output_throughput"][1:3] == ["1,000.0", "tok/s"]  # 600 × 100 tok / 60 s
    assert rows["error_rate"][1:3] == ["0.0000", "0.0000"]
    assert "passed: no significant regression beyond the thresholds (5 metric(s))" in out


def test_goodput_and_errors_regress(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["compare", "base", "failing", "--fail-on", "goodput:-5%,error_rate:+0.01,p99_ttft_ms:+0%"]
    )
    out = capsys.readouterr().out
    assert code == 3
    rows = _table(out)
    # 589 of 600 met → 467 of the 480 that succeeded (over 60 s): −20.7 %
    assert rows["goodput"][1:5] == ["9.817", "req/s", "7.783", "req/s"]
    assert rows["goodput"][5] == "-20.7%"
    assert rows["goodput"][-2] == "regression"
    assert rows["error_rate"][1:4] == ["0.0000", "0.2000", "+0.2000"]
    assert rows["error_rate"][-2] == "regression"
    assert "FAILED: 2 significant regression(s): goodput -20.7% beyond -5%, error_rate" in out


def test_fair_comparison_warnings_are_printed(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", "base", "other-model", "--fail-on", "p50_ttft_ms:+50%"]) == 0
    assert "warning: Model differs: m-8b (1 run), m-70b (1 run)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message", "hint"),
    [
        (["nope", "base"], "baseline run 'nope' is not in", "`servescope db runs`"),
        (["base", "nope"], "candidate run 'nope' is not in", "`servescope db runs`"),
        (["pinned", "base"], "baseline run 'pinned'", "give --baseline pinned CANDIDATE"),
        (["base", "base"], "the same run (base)", "two different runs"),
        (["base"], "no baseline: give BASELINE CANDIDATE", "db pin RUN_ID"),
        (["base", "slower", "--baseline", "same"], "the baseline is given twice", "--baseline"),
        (["base", "agg"], "run agg has no per-request rows", "--save-detailed"),
        (
            ["base", "slower", "--fail-on", "p99_ttft_ms:-10%"],
            "takes '+', not '-'",
            "e.g. p99_ttft_ms:+10%",
        ),
        (
            ["base", "slower", "--fail-on", "p99_latency:+10%"],
            "unknown metric 'p99_latency'",
            "p50|p90|p95|p99 of ttft_ms, tpot_ms, itl_ms, e2e_ms",
        ),
        (["base", "slower", "--fail-on", "p99_itl_ms:+10%"], "not enough data", "token gaps"),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(
    db: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str, hint: str
) -> None:
    if "--fail-on" not in argv:
        argv = [*argv, "--fail-on", "p99_ttft_ms:+10%"]
    assert cli.main(["compare", *argv]) == ExitCode.ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("servescope: error: ") and message in lines[0]
    assert lines[1].startswith("  hint: ") and hint in lines[1]


def test_fail_on_is_required_and_given_once(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["compare", "base", "slower"])
    assert info.value.code == 2
    assert "--fail-on" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["compare", "base", "slower", "--fail-on", "goodput:-1%", "--fail-on", "x"])
    assert "--fail-on given twice" in capsys.readouterr().err


def test_pin_unpin_and_the_pinned_baseline(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    gate = ["compare", "--baseline", "pinned", "slower", "--fail-on", "p99_ttft_ms:+10%"]
    assert cli.main(gate) == 2
    err = capsys.readouterr().err
    assert "no baseline is pinned for model=m-8b, gpu=H100, workload=chat" in err
    assert "servescope db pin RUN_ID" in err

    assert cli.main(["db", "pin", "same"]) == 0
    assert capsys.readouterr().out == (
        "pinned same as the baseline for model=m-8b, gpu=H100, workload=chat\n"
    )
    assert cli.main(["db", "pin", "base"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "unpinned same (the previous baseline for model=m-8b, gpu=H100, workload=chat)",
        "pinned base as the baseline for model=m-8b, gpu=H100, workload=chat",
    ]
    assert cli.main(["db", "pin", "other-model"]) == 0  # another combination: base stays
    capsys.readouterr()
    assert cli.main(["db", "pinned"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["base", "other-model"]
    assert out.splitlines()[-1] == "2 pinned baseline(s)"

    assert cli.main(gate) == 3
    out = capsys.readouterr().out
    assert "baseline:  base (name-base)  [pinned for model=m-8b, gpu=H100, workload=chat]" in out
    assert cli.main(["compare", "--baseline", "pinned", "base", "--fail-on", "goodput:-5%"]) == 2
    assert "the candidate base is itself the baseline pinned" in capsys.readouterr().err

    store = open_store(db)
    record = runs_table.run_record(store, "base")
    store.dispose()
    assert record is not None and record["tags"] == ["baseline"]

    assert cli.main(["db", "unpin", "base"]) == 0
    assert "unpinned base (no baseline is pinned for model=m-8b" in capsys.readouterr().out
    assert cli.main(["db", "unpin", "base"]) == 0
    assert capsys.readouterr().out == "base was not pinned (nothing changed)\n"
    assert cli.main(gate) == 2
    capsys.readouterr()
    assert cli.main(["db", "pin", "nope"]) == 2
    assert "run 'nope' is not in" in capsys.readouterr().err


def test_two_runs_tagged_by_hand_are_refused_until_one_is_pinned(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(db)
    ingest.update_run(store, "base", tags=["baseline"])
    ingest.update_run(store, "same", tags=["nightly", "baseline"])
    store.dispose()
    gate = ["compare", "--baseline", "pinned", "slower", "--fail-on", "p99_ttft_ms:+10%"]
    assert cli.main(gate) == 2
    assert "2 runs are pinned for model=m-8b" in capsys.readouterr().err
    assert cli.main(["db", "pin", "base"]) == 0
    assert "unpinned same" in capsys.readouterr().out
    store = open_store(db)
    assert runs_table.run_record(store, "same")["tags"] == ["nightly"]  # type: ignore[index]
    store.dispose()
    assert cli.main(gate) == 3
