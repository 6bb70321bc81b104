"""Every result file in tests/fixtures (real captures and hand-built files, see SOURCES.md there)
imports, with figures checked against values worked out from the file itself — never from the
importer.

How each expected value is obtained is said next to it: either arithmetic on numbers copied
from the file (e.g. TTFT = first_token_time − start_time), or numpy on the raw JSON read here
independently of the importer (np.percentile with linear interpolation, our definition).
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.importers import ImportOptions, import_paths
from store import request_rows, run_figures, runs_table, tables
from store.db import Store
from store.lifecycle import open_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"duckdb:///{tmp_path / 'imp.duckdb'}")


def _requests(store: Store, run_id: str) -> pd.DataFrame:
    return request_rows.run_requests_all(store, run_id)


def test_every_fixture_result_file_imports_and_reimport_changes_nothing(
    store: Store, fixtures_dir: Path
) -> None:
    reports = import_paths(store, [fixtures_dir])
    failed = [r.error for r in reports if r.error]
    assert failed == []
    imported = {Path(part).name for r in reports if not r.ignored for part in r.path.split(" + ")}
    # every result file, real and hand-built, summaries paired with their records (the .prom,
    # .txt and .md files are engine metrics, name lists or notes, not results)
    assert imported == {
        # real (SOURCES.md)
        "groq_70b_individual_responses.json",
        "groq_70b_summary.json",
        "v0.3_benchmarks_stripped.json",
        "v0.8.1_mock_concurrent16_ttft50_itl10_benchmarks.json",
        "bench_serving_llama_3_3_70b_online_output.jsonl",
        "bench_serving_llama_3_3_70b_rate_inf_output.jsonl",
        "gpu_telemetry_export.head4.jsonl",
        "v0.8.0_mock_chat_profile_export_records.head4.csv",
        "v0.8.0_mock_chat_profile_export_aiperf.json",
        # hand-built
        "detailed_small.json",
        "legacy_aggregates.json",
        "append_two_runs.jsonl",
        "output_details.jsonl",
        "profile_export.json",
        "profile_export_genai_perf.json",
        "profile_export_genai_perf.csv",
        "profile_export.jsonl",
        "server_metrics_export.jsonl",
        "v0.5_benchmarks.yaml",
    }
    before = tables.table_counts(store)
    again = import_paths(store, [fixtures_dir])
    assert all(r.error is None and r.runs == 0 and r.requests == 0 for r in again)
    assert tables.table_counts(store) == before


def test_llmperf_pair_recomputed_matches_the_tools_own_quantiles(
    store: Store, fixtures_dir: Path
) -> None:
    d = fixtures_dir / "llmperf"
    [report] = import_paths(
        store,
        [d / "groq_70b_summary.json", d / "groq_70b_individual_responses.json"],
        ImportOptions(gpu_name="LPU", tags=("groq",)),
    )
    assert report.error is None and report.runs == 1 and report.requests == 150
    run = runs_table.run_record(store, report.run_ids[0])
    assert run is not None
    assert run["model"] == "llama2-70b-4096" and run["concurrency"] == 5
    assert run["gpu_name"] == "LPU" and run["tags"] == ["groq"]
    raw = json.loads((d / "groq_70b_individual_responses.json").read_text())
    summary = json.loads((d / "groq_70b_summary.json").read_text())
    req = _requests(store, report.run_ids[0])
    # numpy on the raw file: TTFT ms = ttft_s × 1000
    expected_ttft = np.array([r["ttft_s"] for r in raw]) * 1000
    assert np.allclose(np.sort(req["ttft_ms"].to_numpy(float)), np.sort(expected_ttft))
    # llmperf's own P50/P90 (linear interpolation) equal our recomputed ones
    for q in (50, 90):
        ours = np.percentile(req["ttft_ms"].to_numpy(float), q)
        assert ours == pytest.approx(summary[f"results_ttft_s_quantiles_p{q}"] * 1000, rel=1e-9)
    # first record by hand: TPOT = (E2E − TTFT) / (150 − 1) = (0.89000904 − 0.29797780) s / 149
    assert req["tpot_ms"].iloc[0] == pytest.approx(
        (0.8900090400129557 - 0.297977801412344) * 1000 / 149
    )
    tool = run["tool_summary"]
    assert tool["aggregates_only"] is False and tool["error_codes"] == {}
    assert tool["metrics"]["ttft_ms"]["mean"] == pytest.approx(0.22786034579078357 * 1000)


def test_guidellm_v081_full_requests_and_our_tpot(store: Store, fixtures_dir: Path) -> None:
    path = fixtures_dir / "guidellm" / "v0.8.1_mock_concurrent16_ttft50_itl10_benchmarks.json"
    [report] = import_paths(store, [path])
    assert report.requests == 160  # 144 successful + 16 incomplete, as listed in the file
    run_id = report.run_ids[0]
    req = _requests(store, run_id)
    assert (req["status"] == "ok").sum() == 144 and (req["status"] == "cancelled").sum() == 16
    first = req[req["seq"] == 0].iloc[0]
    # from the file's first request: info.timings first_token_iteration − request_start
    assert first["ttft_ms"] == pytest.approx((1795997058.2476697 - 1795997058.1904495) * 1000)
    # E2E = request_end − request_start; our TPOT excludes the first token: (E2E − TTFT) / 255
    e2e = (1795997060.7976947 - 1795997058.1904495) * 1000
    assert first["e2e_ms"] == pytest.approx(e2e)
    assert first["tpot_ms"] == pytest.approx((e2e - first["ttft_ms"]) / 255)
    # GuideLLM's own mean TTFT over successful requests comes from the same timestamps
    doc = json.loads(path.read_text())
    tool_mean = doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"]
    ok = req[req["status"] == "ok"]
    assert ok["ttft_ms"].mean() == pytest.approx(tool_mean, rel=1e-6)
    run = runs_table.run_record(store, run_id)
    assert run is not None and run["concurrency"] == 16 and run["arrival"] == "concurrency"
    assert run["tool_summary"]["per_request"] == "full"
    # GuideLLM's TPOT includes the first token (≈ 10.18 ms) — ours is ≈ 10.0 ms
    assert run["tool_summary"]["metrics"]["tpot_ms"]["mean"] > ok["tpot_ms"].mean() * 1.01


def test_guidellm_v03_is_flagged_sampled(store: Store, fixtures_dir: Path) -> None:
    [report] = import_paths(store, [fixtures_dir / "guidellm" / "v0.3_benchmarks_stripped.json"])
    assert report.requests == 1 and any("sampled" in w for w in report.warnings)
    run = runs_table.run_record(store, report.run_ids[0])
    assert run is not None and "sampled" in run["notes"]
    assert run["tool_summary"]["per_request"] == "sampled"
    assert run["model"] == "example_model" and run["concurrency"] == 1
    req = _requests(store, report.run_ids[0])
    # first_token_time − start_time from the file
    assert req["ttft_ms"].iloc[0] == pytest.approx((1749157168.2039824 - 1749157168.1827004) * 1000)


def test_sglang_aggregate_lines_become_flagged_runs(store: Store, fixtures_dir: Path) -> None:
    online = fixtures_dir / "sglang" / "bench_serving_llama_3_3_70b_online_output.jsonl"
    offline = fixtures_dir / "sglang" / "bench_serving_llama_3_3_70b_rate_inf_output.jsonl"
    reports = import_paths(store, [online, offline])
    assert [r.runs for r in reports] == [7, 7] and all(r.requests == 0 for r in reports)
    runs = runs_table.list_runs(store)
    assert len(runs) == 14 and runs["aggregates_only"].all()
    first = runs_table.run_record(store, reports[0].run_ids[0])
    assert first is not None
    assert first["target_rate"] == 1.0 and "aggregates only" in first["notes"]
    assert first["tool_summary"]["metrics"]["ttft_ms"]["p50"] == pytest.approx(85.74514742940664)
    inf = runs_table.run_record(store, reports[1].run_ids[0])
    assert inf is not None and inf["target_rate"] is None
    assert inf["tool_summary"]["raw"]["request_rate"] == "inf"


def test_aiperf_records_csv_with_summary_and_gpu_telemetry(
    store: Store, fixtures_dir: Path
) -> None:
    d = fixtures_dir / "aiperf" / "upstream"
    reports = import_paths(store, [d])
    by_format = {r.format: r for r in reports}
    rec = by_format["aiperf-records-csv"]
    assert rec.requests == 3 and "profile_export_aiperf.json" in rec.path
    req = _requests(store, rec.run_ids[0])
    # first row: (request_end_ns − request_start_ns) / 1e6; output tokens = usage_completion_tokens
    assert req["e2e_ms"].iloc[0] == pytest.approx((1777540598974359027 - 1777540598961850641) / 1e6)
    assert req["output_tokens"].tolist() == [483, 379, 541]
    assert req["ttft_ms"].isna().all()  # a non-streaming run: no TTFT in the file
    run = runs_table.run_record(store, rec.run_ids[0])
    assert run is not None and run["model"] == "mock-model" and run["concurrency"] == 4
    assert run["tool_summary"]["metrics"]["request_throughput"] == pytest.approx(1854.929714829192)
    gpu = store.read_df("SELECT * FROM gpu_samples ORDER BY ts")
    assert len(gpu) == 4
    # telemetry_data.gpu_memory_total is in GB (1e9 bytes); utilisation in % → 0..1
    assert gpu["mem_total_bytes"].iloc[0] == pytest.approx(51.52702464e9)
    assert gpu["util_gpu"].iloc[0] == pytest.approx(0.02)


def test_aiperf_summary_alone_is_aggregates_only(store: Store, fixtures_dir: Path) -> None:
    [r] = import_paths(
        store,
        [fixtures_dir / "aiperf" / "upstream" / "v0.8.0_mock_chat_profile_export_aiperf.json"],
    )
    run = runs_table.run_record(store, r.run_ids[0])
    assert run is not None and run["tool_summary"]["aggregates_only"] is True
    assert "aggregates only" in run["notes"] and r.requests == 0


def test_vllm_detailed_hand_computed(store: Store, fixtures_dir: Path) -> None:
    [r] = import_paths(
        store, [fixtures_dir / "vllm" / "detailed_small.json"], ImportOptions(gpu_count=2)
    )
    req = _requests(store, r.run_ids[0])
    # ttfts × 1000; latencies × 1000; TPOT = (E2E − TTFT)/(out − 1): 60/3, 40/2, 40/1
    assert req["ttft_ms"].tolist()[:3] == pytest.approx([100, 200, 50])
    assert req["e2e_ms"].tolist()[:3] == pytest.approx([160, 240, 90])
    assert req["tpot_ms"].tolist()[:3] == pytest.approx([20, 20, 40])
    assert req["status"].tolist() == ["ok", "ok", "ok", "error"]
    assert "connection reset" in req["error"].iloc[3]
    gaps = request_rows.run_token_gaps(store, r.run_ids[0])
    assert sorted(gaps["gap_ms"].round(6).tolist()) == [10, 20, 20, 20, 30, 40]
    run = runs_table.run_record(store, r.run_ids[0])
    assert run is not None
    # start_times (perf_counter) anchored at date − duration: 2025-01-02 03:04:05 UTC − 2 s
    anchor = calendar.timegm(time.strptime("20250102-030405", "%Y%m%d-%H%M%S")) - 2.0
    assert run["started_at"] == anchor and req["sent_at"].iloc[1] == pytest.approx(anchor + 0.5)
    assert run["target_rate"] is None and run["concurrency"] == 2 and run["gpu_count"] == 2
    assert run["tool_summary"]["raw"]["site"] == "lab-a"  # unknown keys kept, not rejected


def test_vllm_legacy_and_append_result(store: Store, fixtures_dir: Path) -> None:
    [legacy] = import_paths(store, [fixtures_dir / "vllm" / "legacy_aggregates.json"])
    run = runs_table.run_record(store, legacy.run_ids[0])
    assert run is not None and run["tool_summary"]["aggregates_only"] is True
    assert run["tool_summary"]["metrics"]["request_goodput"] == 8.5  # the "request_goodput:" key
    [two] = import_paths(store, [fixtures_dir / "vllm" / "append_two_runs.jsonl"])
    assert two.runs == 2
    second = runs_table.run_record(store, two.run_ids[1])
    assert second is not None and second["target_rate"] == 4.0 and second["arrival"] == "poisson"


def test_sglang_output_details_reconstructs_e2e(store: Store, fixtures_dir: Path) -> None:
    [r] = import_paths(store, [fixtures_dir / "sglang" / "output_details.jsonl"])
    req = _requests(store, r.run_ids[0])
    # E2E = TTFT + Σ gaps: 100 + 10 + 20 = 130, 200 + 30 = 230; TPOT = 30/2, 30/1
    assert req["e2e_ms"].tolist() == pytest.approx([130, 230])
    assert req["tpot_ms"].tolist() == pytest.approx([15, 30])
    run = runs_table.run_record(store, r.run_ids[0])
    assert run is not None and "reconstructed" in run["notes"] and run["framework"] == "sglang"


def test_genai_perf_raw_paired_with_summary_and_csv(store: Store, fixtures_dir: Path) -> None:
    reports = {r.format: r for r in import_paths(store, [fixtures_dir / "genai_perf"])}
    raw = reports["genai-perf-raw"]
    req = _requests(store, raw.run_ids[0])
    # TTFT to the first chunk with content (+100 ms, not the role-only chunk at +50 ms);
    # E2E to the last response (+131 ms); usage says 3 tokens → TPOT (131 − 100)/2
    assert req["ttft_ms"].tolist() == pytest.approx([100, 80])
    assert req["e2e_ms"].tolist() == pytest.approx([131, 101])
    assert req["tpot_ms"].tolist() == pytest.approx([15.5, 21])
    assert req["output_tokens_estimated"].tolist() == [False, True]  # 2nd stream had no usage
    gaps = request_rows.run_token_gaps(store, raw.run_ids[0])
    assert gaps["gap_ms"].tolist() == pytest.approx([10, 15, 20])
    run = runs_table.run_record(store, raw.run_ids[0])
    assert run is not None and run["model"] == "llama" and run["concurrency"] == 2
    csv = runs_table.run_record(store, reports["genai-perf-csv"].run_ids[0])
    assert csv is not None
    metrics = csv["tool_summary"]["metrics"]
    # "1,090.50" with a thousands separator; "N/A" rows dropped
    assert metrics["ttft_ms"]["mean"] == 1090.5 and metrics["output_throughput"] == 1234.56


def test_aiperf_streaming_records_and_server_metrics(store: Store, fixtures_dir: Path) -> None:
    reports = {
        r.format: r
        for r in import_paths(
            store,
            [
                fixtures_dir / "aiperf" / "profile_export.jsonl",
                fixtures_dir / "aiperf" / "server_metrics_export.jsonl",
            ],
        )
    }
    rec = reports["aiperf-records"]
    assert rec.requests == 2  # the warm-up record is skipped
    req = _requests(store, rec.run_ids[0])
    # TTFT 0.12 sec → 120 ms; E2E = 180 ms from the ns stamps; TPOT (180 − 120)/3
    assert req["ttft_ms"].iloc[0] == pytest.approx(120) and req["tpot_ms"].iloc[0] == pytest.approx(
        20
    )
    assert req["status"].tolist() == ["ok", "error"] and req["error"].iloc[1] == "boom"
    eng = store.read_df("SELECT metric, value FROM engine_samples ORDER BY ts, metric")
    # normalised as a live scrape is (collectors.engine_metrics): running summed over the two
    # engine series (3 + 2), KV usage averaged ((0.5 + 0.3)/2), the TTFT histogram kept as
    # cumulative buckets with its sum and count (seconds)
    assert dict(zip(eng["metric"], eng["value"], strict=True)) == pytest.approx(
        {
            "kv_cache_usage": 0.4,
            "requests_running": 5.0,
            "requests_waiting": 7.0,
            "ttft_seconds_bucket:0.1": 3.0,
            "ttft_seconds_bucket:+Inf": 5.0,
            "ttft_seconds_sum": 0.9,
            "ttft_seconds_count": 5.0,
        }
    )
    raw = store.read_df("SELECT name, labels FROM engine_raw_samples")
    assert ("vllm:time_to_first_token_seconds_bucket", '{"le": "0.1"}') in set(
        zip(raw["name"], raw["labels"], strict=True)
    )


def test_guidellm_yaml_v05(store: Store, fixtures_dir: Path) -> None:
    [r] = import_paths(store, [fixtures_dir / "guidellm" / "v0.5_benchmarks.yaml"])
    assert r.error is None and r.requests == 3
    run = runs_table.run_record(store, r.run_ids[0])
    assert run is not None and run["model"] == "Qwen/Qwen2.5-0.5B"
    assert run["arrival"] == "constant" and run["target_rate"] == 2.0
    assert (
        run["tool_summary"]["schema"] == "0.4-0.6"
        and run["tool_summary"]["per_request"] == "sampled"
    )
    req = _requests(store, r.run_ids[0])
    # timings.first_iteration − request_start = 0.1 s; (300 − 100) / (11 − 1) = 20 ms
    assert req["ttft_ms"].iloc[0] == pytest.approx(100, abs=1e-3)
    assert req["tpot_ms"].iloc[0] == pytest.approx(20, abs=1e-3)


def test_guidellm_v081_crosscheck_ours_vs_the_tools(store: Store, fixtures_dir: Path) -> None:
    """The run detail's cross-check on a real file, through the store's reads.

    GuideLLM's TPOT is latency / output tokens (first token included), so over 256-token
    requests with TTFT ≈ 50 ms and 10 ms gaps it is ≈ (50 + 255 × 10) / 256 ≈ 10.16 ms against
    our ≈ 10.0 ms: over 1 %, with that reason. Its ITL is (E2E − TTFT) / (n − 1) per request,
    our TPOT by definition: within 1 % of it. Its mean TTFT uses the same timestamps as ours.
    """
    from analysis import crosscheck
    from store import runs_table

    path = fixtures_dir / "guidellm" / "v0.8.1_mock_concurrent16_ttft50_itl10_benchmarks.json"
    [report] = import_paths(store, [path])
    run_id = report.run_ids[0]
    meta = runs_table.run_tool_summary(store, run_id).iloc[0]
    assert meta["source"] == "guidellm" and isinstance(meta["tool_summary"], dict)
    detail = {str(k): v for k, v in run_figures.run_detail(store, run_id).iloc[0].items()}
    itl = {str(k): v for k, v in run_figures.run_itl_summary(store, run_id).iloc[0].items()}
    df = crosscheck.compare(meta["tool_summary"], crosscheck.our_figures(detail, itl), "guidellm")

    def pick(metric: str, stat: str, ours: str) -> pd.Series:
        hit = df[(df["metric"] == metric) & (df["stat"] == stat) & (df["ours_metric"] == ours)]
        assert len(hit) == 1
        return hit.iloc[0]

    tpot = pick("tpot_ms", "mean", "tpot_ms")
    assert bool(tpot["differs"]) and "includes the first token" in tpot["reason"]
    assert -3.0 < tpot["diff_pct"] < -1.0
    itl_vs_tpot = pick("itl_ms", "mean", "tpot_ms")
    assert not bool(itl_vs_tpot["differs"])
    assert itl_vs_tpot["reason"] == "same definition as our TPOT"
    assert not bool(pick("ttft_ms", "mean", "ttft_ms")["differs"])


def test_no_fixture_names_a_precision_so_none_is_guessed(store: Store, fixtures_dir: Path) -> None:
    # none of the fixtures carries a quantization, precision, dtype or kv_cache_dtype key (the
    # .prom files' vllm:cache_config_info is engine metrics, not an imported run)
    import_paths(store, [fixtures_dir])
    runs = runs_table.list_runs(store, limit=None)
    assert len(runs) > 10
    assert runs["precision"].isna().all() and runs["kv_cache_dtype"].isna().all()


def test_precision_where_the_file_says_so(store: Store, fixtures_dir: Path, tmp_path: Path) -> None:
    # vllm bench serve --metadata quantization=fp8 kv_cache_dtype=fp8_e4m3: merged at top level
    vllm = json.loads((fixtures_dir / "vllm" / "legacy_aggregates.json").read_text())
    (tmp_path / "vllm.json").write_text(
        json.dumps({**vllm, "quantization": "fp8", "kv_cache_dtype": "fp8_e4m3"})
    )
    # SGLang bench_serving's server_info (the server's arguments): awq weights, auto KV cache
    line = (fixtures_dir / "sglang" / "output_details.jsonl").read_text().splitlines()[0]
    obj = json.loads(line)
    obj["server_info"] = {"quantization": "awq_marlin", "kv_cache_dtype": "auto", "dtype": "auto"}
    (tmp_path / "sglang.jsonl").write_text(json.dumps(obj) + "\n")
    # llmperf --metadata: a dtype only; an unknown quantisation is not guessed at
    summary = json.loads((fixtures_dir / "llmperf" / "groq_70b_summary.json").read_text())
    (tmp_path / "a_summary.json").write_text(json.dumps({**summary, "dtype": "bfloat16"}))
    (tmp_path / "b_summary.json").write_text(
        json.dumps({**summary, "timestamp": summary["timestamp"] + 1, "quantization": "q9"})
    )
    reports = import_paths(store, [tmp_path])
    assert [r.error for r in reports if r.error] == []
    got = {
        Path(str(r["source_file"])).name: tuple(
            None if pd.isna(r[c]) else r[c] for c in ("precision", "kv_cache_dtype")
        )
        for r in runs_table.list_runs(store, limit=None).to_dict("records")
    }
    assert got["vllm.json"] == ("fp8", "fp8_e4m3")
    assert got["sglang.jsonl"] == ("awq", "auto")
    assert got["a_summary.json"] == ("bf16", None)
    assert got["b_summary.json"] == (None, None)


def test_import_precision_flags_win_and_bad_ones_are_refused(
    tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import cli

    url = f"duckdb:///{tmp_path / 'flags.duckdb'}"
    path = str(fixtures_dir / "vllm" / "legacy_aggregates.json")
    argv = ["import", path, "--db", url]
    assert cli.main([*argv, "--precision", "GPTQ", "--kv-cache-dtype", "fp9"]) == 2
    assert "--kv-cache-dtype 'fp9' is not a known KV-cache dtype" in capsys.readouterr().err
    assert cli.main([*argv, "--precision", "AWQ", "--kv-cache-dtype", "fp8"]) == 0
    store = open_store(url)
    try:
        runs = runs_table.list_runs(store, limit=None)
    finally:
        store.dispose()
    assert runs[["precision", "kv_cache_dtype"]].drop_duplicates().values.tolist() == [
        ["awq", "fp8"]
    ]
