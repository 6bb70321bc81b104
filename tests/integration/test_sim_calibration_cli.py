"""bench/sim_calibration.py --csv FILE --json OUT: any file with the calibration set's columns is
replayed row by row; a row it cannot simulate is reported as skipped with its reason, never a
crash; the JSON has exactly the contract's keys. Small caps keep the replays to seconds."""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "sim_calibration.py"
COLUMNS = (ROOT / "bench" / "calibration" / "measurements.csv").read_text().splitlines()[0]
METRIC_KEYS = {"output_tok_s", "ttft_ms", "tpot_ms", "e2e_ms"}

GOOD: dict[str, str] = {
    "gpu": "H100 SXM 80GB",
    "gpu_count": "1",
    "model": "Llama-3.1-8B",
    "precision": "bf16",
    "framework": "vLLM",
    "framework_version": "0.6.0",
    "tp": "1",
    "parallel_layout": "TP1 x 1 instance",
    "scenario": "online_poisson",
    "dataset": "random",
    "isl": "128",
    "osl": "64",
    "length_distribution": "fixed",
    "num_requests": "40",
    "load_type": "request_rate_qps",
    "load_value": "2",
    "output_tok_s_total": "120",
    "ttft_median_ms": "40",
    "tpot_mean_ms": "8",
    "e2e_mean_ms": "600",
}


def row(rid: str, **changes: str) -> dict[str, str]:
    return {"id": rid, **GOOD, **changes}


ROWS = [
    row("good"),
    # one instance of TP2 at 2 qps, and four of them sharing 8 qps (same per-instance load)
    row("dp1", gpu_count="2", tp="2", parallel_layout="TP2 x 1 instance", num_requests="40"),
    row(
        "dp4",
        gpu_count="8",
        tp="2",
        parallel_layout="TP2 x 4 instances",
        load_value="8",
        num_requests="160",
        output_tok_s_total="480",
    ),
    row("means", isl="", osl="", mean_input_tokens="200", mean_output_tokens="100"),
    row(
        "ratio",
        isl="256",
        osl="128",
        length_distribution="random_range_ratio=0.5: input ~U[128,256]",
        framework="SGLang",
        engine_params="prefix_caching=off (--disable-radix-cache); max_batch_size=64 "
        "(--max-running-requests)",
    ),
    row(
        "closed",
        scenario="online_closed_loop_concurrency",
        load_type="concurrency",
        load_value="4",
        num_requests="",
        framework="NVIDIA NIM",
        engine_params="kv_memory_fraction=0.95 (kv_cache_free_gpu_mem_fraction)",
    ),
    row(
        "moe",
        gpu="H200 SXM 141GB",
        gpu_count="8",
        tp="8",
        parallel_layout="TP8 x 1 instance",
        model="DeepSeek-R1-0528",
        precision="fp8",
        framework="SGLang",
    ),
    row("gpu?", gpu="TPU v5e 16GB"),
    row("model?", model="Foo-7B-Instruct"),
    row("scenario?", scenario="speculative_decoding_bench"),
    row("tp?", tp="four", parallel_layout=""),
    row("load?", load_value="fast"),
    row("ttft?", ttft_median_ms="12 ms"),
    row("ratio?", length_distribution="random_range_ratio=2"),
    row("layout?", parallel_layout="TP2 PP2"),
    row("count?", gpu_count="4", tp="2", parallel_layout="TP2 x 4 instances"),
    row("fit?", gpu="L4", model="Llama-3.1-70B"),
    row("lengths?", isl="", osl=""),
    row(
        "concurrency?",
        scenario="online_closed_loop_concurrency",
        load_type="concurrency",
        load_value="1e9",
    ),
    row("precision?", precision="gguf-q4_k_m"),
    row("good"),  # a repeated id
]
REASONS = {
    "gpu?": "unknown GPU",
    "model?": "unknown model",
    "scenario?": "scenario 'speculative_decoding_bench' is not replayed",
    "tp?": "tp 'four' is not a number",
    "load?": "load_value 'fast' is not a number",
    "ttft?": "ttft_median_ms '12 ms' is not a number",
    "ratio?": "random_range_ratio 2 is not in [0, 1]",
    "layout?": "parallel_layout 'TP2 PP2' is not replayed",
    "count?": "gpu_count 4 ≠ TP2 × 4 instances",
    "fit?": "does not fit",
    "lengths?": "no lengths stated",
    "concurrency?": "above the replay's limit",
    "precision?": "has no fixed size per weight",
    "good (row 21)": "duplicate id",
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("calib")
    path, out = d / "rows.csv", d / "out.json"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS.split(","))
        w.writeheader()
        w.writerows(ROWS)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--csv", str(path), "--json", str(out), "--cap", "40"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return doc


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in doc["rows"]}


def test_json_shape_is_the_contract(report: dict[str, Any]) -> None:
    assert set(report) == {"rows"}
    assert [r["id"] for r in report["rows"]][:3] == ["good", "dp1", "dp4"]
    assert len(report["rows"]) == len(ROWS)
    for r in report["rows"]:
        assert {"id", "skipped", "measured", "predicted"} <= set(r)
        assert set(r["measured"]) == METRIC_KEYS and set(r["predicted"]) == METRIC_KEYS
        assert set(r["stat"]) == METRIC_KEYS
    good = by_id(report)["good"]
    assert good["skipped"] is None
    assert good["measured"] == {
        "output_tok_s": 120.0,
        "ttft_ms": 40.0,
        "tpot_ms": 8.0,
        "e2e_ms": 600.0,
    }
    assert good["stat"]["ttft_ms"] == "median" and good["stat"]["e2e_ms"] == "mean"
    assert all(isinstance(v, float) and v > 0 for v in good["predicted"].values())
    # a row's unstated metric is null in "measured"
    assert by_id(report)["means"]["measured"]["output_tok_s"] == 120.0
    assert by_id(report)["gpu?"]["measured"]["ttft_ms"] == 40.0


def test_unreplayable_rows_are_skipped_with_their_reason(report: dict[str, Any]) -> None:
    rows = by_id(report)
    for rid, reason in REASONS.items():
        assert rows[rid]["skipped"] is not None, rid
        assert reason in rows[rid]["skipped"], (rid, rows[rid]["skipped"])
        assert set(rows[rid]["predicted"].values()) == {None}, rid
    replayed = {r["id"] for r in report["rows"] if r["skipped"] is None}
    assert replayed == {"good", "dp1", "dp4", "means", "ratio", "closed", "moe"}


def test_instances_split_the_load_and_sum_the_throughput(report: dict[str, Any]) -> None:
    one, four = by_id(report)["dp1"], by_id(report)["dp4"]
    assert four["settings"]["instances"] == 4 and four["settings"]["tp"] == 2
    assert four["settings"]["load_per_instance"] == [{"load": 2.0, "requests": 40, "instances": 4}]
    ratio = four["predicted"]["output_tok_s"] / one["predicted"]["output_tok_s"]
    assert ratio == pytest.approx(4.0, rel=0.02)
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):  # latency is one instance's
        assert four["predicted"][key] == pytest.approx(one["predicted"][key], rel=0.02)


def test_what_the_row_states_is_what_is_replayed(report: dict[str, Any]) -> None:
    rows = by_id(report)
    means = rows["means"]
    assert means["settings"]["lengths"] == {
        "kind": "fixed",
        "input": 200,
        "output": 100,
        "range_ratio": 0.0,
    }
    assert any("stated means" in a for a in means["assumed"])
    ratio = rows["ratio"]["settings"]
    assert ratio["lengths"]["kind"] == "uniform" and ratio["lengths"]["range_ratio"] == 0.5
    assert ratio["max_batch_size"] == 64 and ratio["prefix_caching"] is False
    assert not any(
        a.startswith(("max_batch_size", "prefix_caching")) for a in rows["ratio"]["assumed"]
    )
    # defaults come from the engine's row of the defaults table, marked as assumed
    good = rows["good"]
    assert good["settings"]["max_batch_size"] == 256 and good["settings"]["engine"].startswith(
        "vLLM"
    )
    assert any(a.startswith("max_batch_size = 256: vLLM") for a in good["assumed"])
    # TensorRT-LLM's (NIM's) KV fraction of the free memory becomes a larger fraction of the GPU
    closed = rows["closed"]["settings"]
    assert closed["kv_memory_fraction"] == 0.95 and closed["kv_memory_fraction_of"] == "free"
    assert 0.95 < closed["sim_kv_memory_fraction"] < 1.0
    assert closed["load_per_instance"][0]["requests"] == 40  # 10 × concurrency (assumed)
    moe = rows["moe"]["settings"]
    assert moe["model"] == "deepseek-r1" and moe["precision"] == "fp8"
    assert moe["kv_bytes_per_elem"] == 1.0


@functools.cache
def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_sim_calibration", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("H100 SXM 80GB", "H100-SXM-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("H100 80GB HBM3", "H100-SXM-80GB"),
        ("A100 SXM4 80GB", "A100-SXM-80GB"),
        ("H200 SXM 141GB", "H200-SXM-141GB"),
        ("4 x H200 141GB", "H200-SXM-141GB"),
        ("NVIDIA L40S", "L40S-48GB"),
        ("L4", "L4-24GB"),
        ("AMD Instinct MI300X", "MI300X-192GB"),
        ("GeForce RTX 4090", "RTX-4090-24GB"),
        ("H200 141 GB", "H200-SXM-141GB"),
    ],
)
def test_gpu_names_match_the_catalogue(text: str, name: str) -> None:
    assert load_script().match_gpu(text) == name


@pytest.mark.parametrize("text", ["H100 PCIe 80GB", "A100 40GB", "GB300", "TPU v5e", "H200 96 GB"])
def test_gpus_the_catalogue_lacks_are_not_guessed(text: str) -> None:
    mod = load_script()
    with pytest.raises(mod.RowError):
        mod.match_gpu(text)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Llama-3.1-70B", "llama-3.1-70b"),
        ("Llama-3.3-70B-Instruct", "llama-3.3-70b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        (
            "Llama-3-70B-Instruct (test definition: meta-llama/Meta-Llama-3-70B-Instruct)",
            "llama-3-70b",
        ),
        ("DeepSeek-R1-0528", "deepseek-r1"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("DeepSeek-V3-0324", "deepseek-v3"),
        ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b"),
        ("Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ],
)
def test_model_names_match_the_catalogue(text: str, name: str) -> None:
    assert load_script().match_model(text)[0] == name


@pytest.mark.parametrize("text", ["Foo-7B", "Llama-3.1-405B", "DeepSeek-R2"])
def test_models_the_catalogue_lacks_are_not_guessed(text: str) -> None:
    mod = load_script()
    with pytest.raises(mod.RowError, match="unknown model"):
        mod.match_model(text)


@pytest.mark.parametrize(
    ("ratio", "low_in", "low_out"), [(0.5, 128, 64), (0.0, 1, 1), (1.0, 256, 128)]
)
def test_range_ratio_draws_within_its_bounds(ratio: float, low_in: int, low_out: int) -> None:
    mod = load_script()
    dist = f"random_range_ratio={ratio}"
    sc = mod.build_scenario(
        row("r", isl="256", osl="128", length_distribution=dist),
        mod.perf_model.DEFAULT_CALIBRATION,
        None,
    )
    rng = mod.random.Random(1)
    draws = [mod.draw_lengths(sc, rng) for _ in range(2000)]
    ins, outs = [i for i, _o in draws], [o for _i, o in draws]
    assert min(ins) == low_in and max(ins) == 256
    assert min(outs) == low_out and max(outs) == 128
