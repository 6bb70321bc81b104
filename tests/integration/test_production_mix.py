"""services.views.production_mix on a real store (DuckDB, and PostgreSQL where one runs):
production's length mix from the watched engines' length histograms (``engine_samples``, summed
over targets, the window's baseline subtracted, a restart handled), the runs' lengths from their
request rows binned on production's edges, the KS distances and flags checked against
hand-computed values, and the thinned span read held equal to the read of every row."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.histogram_windows import bucket_increase
from analysis.length_mix import MATERIAL_DISTANCE, LengthDist
from collectors.engine_metrics import bucket_metric
from errors import InputError
from services.views import production_mix as pm
from services.views.select import EvidenceSelection, select_basis
from store import histogram_spans, ingest, request_lengths, sample_series
from store.db import Store
from store.lifecycle import open_store

T = 1_700_100_000.0  # the last engine sample
PROMPT_EDGES = (128.0, 512.0, 1024.0, 4096.0, math.inf)
OUTPUT_EDGES = (64.0, 256.0, 1024.0, math.inf)
#: Production over the window: 100 prompts 10 / 60 / 20 / 10 / 0 and 100 outputs 20 / 70 / 10 / 0
#: per bucket, split over two targets (A: 60 + 60, B: 40 + 40).
A_PROMPT = (6, 36, 12, 6, 0)
B_PROMPT = (4, 24, 8, 4, 0)
A_OUTPUT = (12, 42, 6, 0)
B_OUTPUT = (8, 28, 4, 0)


def _scrape(
    target: str, ts: float, hist: str, edges: Sequence[float], counts: Sequence[float]
) -> list[dict[str, object]]:
    """One scrape of a cumulative histogram: bucket rows, _count and _sum."""
    rows: list[dict[str, object]] = []
    cum = 0.0
    for le, c in zip(edges, counts, strict=True):
        cum += c
        rows.append({"metric": bucket_metric(hist, le), "value": cum})
    rows.append({"metric": f"{hist}_count", "value": cum})
    rows.append({"metric": f"{hist}_sum", "value": cum * 100.0})
    return [{"target": target, "ts": ts, "engine": "vllm", **r} for r in rows]


def _plus(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x + y for x, y in zip(a, b, strict=True)]


def _engine_rows() -> pd.DataFrame:
    """Target A: 500 of each bucket's counts already there two days before T (outside the
    window: subtracted), then A_* more by T. Target B: its own counts by T − 1 h, then it
    restarts (counters back to a small value) and serves the rest of B_* by T."""
    rows: list[dict[str, object]] = []
    old_p, old_o = [500.0] * 5, [500.0] * 4
    rows += _scrape("http://a/metrics", T - 2 * 86400, "prompt_length_tokens", PROMPT_EDGES, old_p)
    rows += _scrape("http://a/metrics", T - 2 * 86400, "output_length_tokens", OUTPUT_EDGES, old_o)
    rows += _scrape(
        "http://a/metrics", T, "prompt_length_tokens", PROMPT_EDGES, _plus(old_p, A_PROMPT)
    )
    rows += _scrape(
        "http://a/metrics", T, "output_length_tokens", OUTPUT_EDGES, _plus(old_o, A_OUTPUT)
    )
    # B: first seen 20 h before T with nothing served, half its traffic by T − 1 h, a restart,
    # the other half after it
    half_p, half_o = [c / 2 for c in B_PROMPT], [c / 2 for c in B_OUTPUT]
    for ts, p, o in (
        (T - 20 * 3600, [0.0] * 5, [0.0] * 4),
        (T - 3600, half_p, half_o),
        (T - 1800, [0.0] * 5, [0.0] * 4),  # restarted
        (T, half_p, half_o),
    ):
        rows += _scrape("http://b/metrics", ts, "prompt_length_tokens", PROMPT_EDGES, p)
        rows += _scrape("http://b/metrics", ts, "output_length_tokens", OUTPUT_EDGES, o)
    return pd.DataFrame(rows)


def _run(
    store: Store,
    run_id: str,
    prompts: Sequence[tuple[int, int]],
    outputs: Sequence[tuple[int, int]],
    *,
    failed: int = 0,
    framework: str = "sim",
    concurrency: int = 8,
) -> None:
    """A run whose successful requests have ``prompts`` / ``outputs`` ((length, how many)
    pairs, expanded in order; both the same total) and ``failed`` failed requests of 9 000
    prompt tokens (which must not count)."""
    p = [t for t, n in prompts for _ in range(n)]
    o = [t for t, n in outputs for _ in range(n)]
    assert len(p) == len(o)
    ok = len(p)
    started = 1_700_000_000.0 + len(run_id)
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
            "duration_s": 60.0,
        },
    )
    n = ok + failed
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": run_id,
                "seq": range(n),
                "status": ["ok"] * ok + ["error"] * failed,
                "sent_at": [started + i * 0.1 for i in range(n)],
                "done_at": [started + i * 0.1 + 0.5 for i in range(n)],
                "input_tokens": p + [9000] * failed,
                "output_tokens": o + [None] * failed,
                "ttft_ms": 50.0,
                "tpot_ms": 5.0,
                "e2e_ms": 500.0,
            }
        ),
    )


#: Inside-bucket lengths with production's shares exactly (KS 0).
SAME_PROMPTS = [(100, 10), (300, 60), (800, 20), (2000, 10)]
SAME_OUTPUTS = [(50, 20), (200, 70), (500, 10)]


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """Production over two targets and four runs, on DuckDB and on PostgreSQL."""
    s = open_store(store_url)
    ingest.add_rows(s, "engine_samples", _engine_rows())
    # the same shares as production, and failed requests of 9 000 tokens that must not count
    _run(s, "same", SAME_PROMPTS, SAME_OUTPUTS, failed=30)
    # 15 of production's 60 % in (128, 512] moved to (512, 1024]: CDF at 512 is 0.55 vs 0.70
    _run(s, "near", [(100, 10), (300, 45), (800, 35), (2000, 10)], SAME_OUTPUTS)
    # every prompt in (1024, 4096]: CDF at 1024 is 0 vs 0.90; outputs as production's
    _run(s, "long", [(2000, 100)], SAME_OUTPUTS)
    # outputs all in (256, 1024]: CDF at 256 is 0 vs 0.90
    _run(s, "long-out", SAME_PROMPTS, [(500, 100)])
    yield s
    s.dispose()


def test_production_is_summed_over_targets_within_the_window(store: Store) -> None:
    mix = pm.production_mix(store)
    assert mix is not None
    assert mix.targets == ("http://a/metrics", "http://b/metrics")
    assert (mix.start, mix.end) == (T - pm.DEFAULT_WINDOW_S, T)
    assert mix.prompt is not None and mix.output is not None
    assert mix.prompt.edges == PROMPT_EDGES
    # A's 500 per bucket from before the window are its baseline; B's restart loses nothing
    assert mix.prompt.counts == tuple(float(a + b) for a, b in zip(A_PROMPT, B_PROMPT, strict=True))
    assert mix.output.counts == tuple(float(a + b) for a, b in zip(A_OUTPUT, B_OUTPUT, strict=True))
    # P50 of the prompts: rank 50 in (128, 512] after 10 → 128 + 40/60 × 384 = 384
    assert mix.prompt.quantile(0.5) == pytest.approx(384.0)


def test_one_target_and_a_shorter_window(store: Store) -> None:
    a = pm.production_mix(store, target="http://a/metrics")
    assert a is not None and a.targets == ("http://a/metrics",)
    assert a.prompt is not None and a.prompt.counts == tuple(float(c) for c in A_PROMPT)
    # the last 2 h: A's scrape two days back is still its baseline (nothing in between), and
    # B served all its traffic in them: every request is in
    recent = pm.production_mix(store, window_s=2 * 3600)
    assert recent is not None and recent.prompt is not None
    assert recent.prompt.total == 100.0
    # the 30 min after B's restart, up to T: only B's second half (A has no scrape inside)
    late = pm.production_mix(store, window_s=1800, end=T)
    assert late is not None and late.prompt is not None
    assert late.prompt.counts == tuple(
        float(a + b / 2) for a, b in zip(A_PROMPT, B_PROMPT, strict=True)
    )


def test_no_histograms_no_mix_and_bad_input_named(store: Store, tmp_path: Path) -> None:
    empty = open_store(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    try:
        assert pm.production_mix(empty) is None
        # engine samples without length histograms: still none
        ingest.add_rows(
            empty,
            "engine_samples",
            pd.DataFrame(
                [
                    {
                        "target": "t",
                        "ts": T,
                        "metric": "requests_running",
                        "engine": "vllm",
                        "value": 1,
                    }
                ]
            ),
        )
        assert pm.production_mix(empty) is None
    finally:
        empty.dispose()
    with pytest.raises(InputError, match="http://nope") as exc:
        pm.production_mix(store, target="http://nope")
    assert "http://a/metrics" in (exc.value.hint or "")
    with pytest.raises(InputError, match="positive"):
        pm.production_mix(store, window_s=0)


def test_runs_are_flagged_by_their_distance(store: Store) -> None:
    mix = pm.production_mix(store)
    assert mix is not None
    flags = {f.label: f for f in pm.mix_flags(store, mix, ["same", "near", "long", "long-out"])}
    by_side = {run: {c.side: c.distance for c in flag.checks} for run, flag in flags.items()}
    assert by_side["same"] == {"prompt": pytest.approx(0.0), "output": pytest.approx(0.0)}
    assert by_side["near"]["prompt"] == pytest.approx(0.15)
    assert by_side["long"] == {"prompt": pytest.approx(0.9), "output": pytest.approx(0.0)}
    assert by_side["long-out"]["output"] == pytest.approx(0.9)
    assert [r for r, f in flags.items() if f.flagged] == ["long", "long-out"]
    assert flags["same"].requests == 100  # the 30 failed requests are left out
    long = flags["long"]
    assert long.distance is not None and long.distance >= MATERIAL_DISTANCE
    assert long.distance == pytest.approx(0.9)
    # run P50: every prompt in (1024, 4096] → 1024 + 0.5 × 3072 = 2 560
    assert long.reason == (
        "prompt lengths differ from production: KS distance 0.90 ≥ 0.2; "
        "production P50 ≈ 384 tokens, run P50 ≈ 2 560"
    )
    assert flags["near"].reason.startswith(
        "prompt lengths match production: KS distance 0.15 < 0.2"
    )
    # the run's lengths are binned on production's edges
    check = next(c for c in long.checks if c.side == "prompt")
    assert check.run.edges == PROMPT_EDGES and check.run.counts == (0, 0, 0, 100, 0)


def test_groups_pool_their_runs_and_runs_without_lengths_say_so(store: Store) -> None:
    mix = pm.production_mix(store)
    assert mix is not None
    ingest.add_run(store, {"run_id": "agg", "source": "guidellm", "started_at": 1.0})
    pooled, none = pm.group_flags(store, mix, [("both", ("same", "long")), ("agg", ("agg",))])
    # 200 prompts: 10/60/20/10 + 100 in (1024, 4096] → CDF at 1024: 90/200 vs 0.90 → 0.45
    prompt = next(c for c in pooled.checks if c.side == "prompt")
    assert prompt.run.total == 200
    assert prompt.distance == pytest.approx(0.45)
    assert pooled.flagged
    assert none.checks == () and not none.flagged and none.distance is None
    assert "no per-request lengths" in none.reason


def test_length_counts_read(store: Store) -> None:
    df = request_lengths.length_counts(store, ["long", "same"])
    assert list(df.columns) == ["run_id", "side", "tokens", "n"]
    long = df[(df["run_id"] == "long") & (df["side"] == "prompt")]
    assert long[["tokens", "n"]].values.tolist() == [[2000, 100]]
    same = df[(df["run_id"] == "same") & (df["side"] == "prompt")]
    assert dict(zip(same["tokens"], same["n"], strict=True)) == dict(SAME_PROMPTS)
    assert request_lengths.length_counts(store, []).empty


def test_select_evidence_names_the_runs_behind_the_score(store: Store) -> None:
    _run(store, "v1", SAME_PROMPTS, SAME_OUTPUTS, framework="vllm", concurrency=1)
    _run(store, "v8", [(2000, 100)], SAME_OUTPUTS, framework="vllm", concurrency=8)
    basis = select_basis(store, EvidenceSelection())
    ev = basis.evidence["vllm"]
    assert set(ev.run_ids) == {"v1", "v8"}
    assert ev.capacity is not None
    assert set(ev.capacity_runs) <= {"v1", "v8"} and ev.capacity_runs
    mix = pm.production_mix(store)
    assert mix is not None
    (flag,) = pm.group_flags(store, mix, [("vllm", ev.capacity_runs)])
    assert flag.run_ids == ev.capacity_runs


def _random_watch(seed: int) -> pd.DataFrame:
    """Two targets at 1 Hz for 20 min: counts that move on some scrapes only (bucket rows
    written only then, ``_count`` every scrape), and restarts (counts back near 0)."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    hist = "prompt_length_tokens"
    for target in ("http://a/metrics", "http://b/metrics"):
        cum = np.zeros(len(PROMPT_EDGES))
        for k in range(1200):
            ts = T - 1200 + k
            if rng.random() < 0.01:  # a restart
                cum = np.zeros(len(PROMPT_EDGES))
                moved = True
            else:
                new = rng.poisson(0.7, size=len(PROMPT_EDGES)) * (rng.random() < 0.6)
                moved = bool(new.sum())
                cum = cum + np.cumsum(new)
            if moved or k == 0:
                rows += [
                    {"target": target, "ts": ts, "metric": bucket_metric(hist, le), "value": c}
                    for le, c in zip(PROMPT_EDGES, cum, strict=True)
                ]
            rows.append(
                {"target": target, "ts": ts, "metric": f"{hist}_count", "value": float(cum[-1])}
            )
    return pd.DataFrame(rows).assign(engine="vllm")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_thinned_rows_give_the_increase_of_every_row(store_url: str, seed: int) -> None:
    s = open_store(store_url)
    try:
        ingest.add_rows(s, "engine_samples", _random_watch(seed))
        hist = "prompt_length_tokens"
        targets = ["http://a/metrics", "http://b/metrics"]
        for since, until in ((T - 1300, T), (T - 900, T - 300), (T - 601.5, T - 1), (T - 50, T)):
            every = pd.concat(
                [
                    sample_series.engine_histogram_series(
                        s, t, hist, since=since, until=until
                    ).assign(target=t)
                    for t in targets
                ],
                ignore_index=True,
            )
            thin = histogram_spans.histogram_span_rows(s, targets, hist, since=since, until=until)
            assert len(thin) < len(every) / 5
            expected = bucket_increase(every, hist, start=since, end=until)
            assert expected and expected[-1][1] > 0
            assert bucket_increase(thin, hist, start=since, end=until) == expected
    finally:
        s.dispose()


def test_production_without_an_inf_bucket_is_closed_empty() -> None:
    mix = pm.ProductionMix(
        targets=("t",),
        start=0.0,
        end=1.0,
        window_s=1.0,
        prompt=LengthDist((128.0, 512.0), (50.0, 50.0)),
        output=None,
    )
    check = pm.side_check(mix, "prompt", np.array([100.0, 1000.0]), np.array([50, 50]))
    assert check is not None
    assert check.production.edges == check.run.edges == (128.0, 512.0, math.inf)
    assert check.run.counts == (50.0, 0.0, 50.0)
    # CDF at 128: 0.5 vs 0.5; at 512: 1.0 vs 0.5
    assert check.distance == pytest.approx(0.5) and check.flagged
    assert pm.side_check(mix, "output", np.array([1.0]), np.array([1])) is None
