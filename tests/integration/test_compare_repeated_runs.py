"""``servescope compare`` against run-to-run noise: ten repeated runs of one configuration
against a real loopback mock server (``sim.mockserver``, its own process), each compared with
the next in both directions on goodput and output throughput. Before, the interval of a
whole-run rate held the run's duration fixed and collapsed to a point (two runs of one mock:
−7.3 % in [−7.3 %, −7.3 %], "regression", exit 3); the gate documents at most 2.5 % of
same-configuration comparisons called a regression when the runs vary by at most
``--run-noise`` (docs/reliability.md)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import cli
from analysis import regression
from errors import ExitCode
from sim.mockserver import MockServer
from store.lifecycle import open_store

RUNS = 10
FAIL_ON = "goodput:-5%,output_throughput:-5%"
ROW = re.compile(
    r"^(goodput|output_throughput)\s.*\[([+-][\d.]+)%, ([+-][\d.]+)%\]\s+-5%\s+(.+?)\s{2}"
)


pytestmark = pytest.mark.slow  # ten benches and 18 comparisons: about 20 s


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with MockServer(ttft_ms=20, itl_ms=5) as url:
        yield url


def test_repeated_runs_of_one_configuration_are_not_called_a_regression(
    mock: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"duckdb:///{tmp_path / 'repeat.duckdb'}"
    monkeypatch.setenv("SERVESCOPE_SPOOL_DIR", str(tmp_path / "spool"))
    bench = ["bench", "--endpoint", mock, "--no-gpu", "--metrics-url", "off", "--db", db]
    bench += ["--workload", "short-in-short-out", "--max-tokens", "4"]
    bench += ["--concurrency", "4", "--requests", "24"]
    ids = []
    for _ in range(RUNS):
        assert cli.main(bench) == 0
        ids.append(capsys.readouterr().out.strip().splitlines()[-1])
    store = open_store(db)
    rates = store.read_df("SELECT duration_s FROM runs")["duration_s"].to_numpy(dtype=float)
    store.dispose()
    cv = float(np.std(24 / rates, ddof=1) / np.mean(24 / rates))
    with capsys.disabled():
        print(f"\n{RUNS} runs: request rate CV {cv:.1%} (--run-noise {regression.RUN_NOISE:.0%})")
    regressions = []
    for a, b in itertools.pairwise(ids):
        for base, cand in ((a, b), (b, a)):
            rc = cli.main(["compare", base, cand, "--db", db, "--fail-on", FAIL_ON])
            out = capsys.readouterr().out
            rows = [m for m in map(ROW.match, out.splitlines()) if m]
            assert len(rows) == 2, out
            for m in rows:
                low, high = float(m.group(2)), float(m.group(3))
                assert high - low > 5.0, out  # the interval holds the runs' pace, not a point
                if m.group(4) == "regression":
                    regressions.append(out)
            assert rc in (ExitCode.OK, ExitCode.FAILED)
            assert "vary its pace by 5%" in out
    # 18 comparisons of one configuration with itself: at 2.5 % each, none is expected
    assert not regressions, "\n".join(regressions)
