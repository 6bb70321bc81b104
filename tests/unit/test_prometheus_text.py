"""The Prometheus text parser: the format's corners, and every fixture capture."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from collectors import prometheus_text as pt

VLLM = "vllm/metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"  # under tests/fixtures


def test_plain_samples_with_colons_timestamps_and_no_type_lines() -> None:
    expo = pt.parse("vllm:num_requests_running 3\nfoo_total 1.5e3 1700000000123\n")
    assert expo.samples == [
        pt.Sample("vllm:num_requests_running", (), 3.0, None),
        pt.Sample("foo_total", (), 1500.0, 1700000000123),
    ]
    assert expo.types == {}


def test_label_escapes_trailing_comma_and_spacing() -> None:
    text = (
        'a{path="C:\\\\dir",quote="say \\"hi\\"",nl="x\\ny",} 1\nb { k = "v" , j="}{" } 2\nc{} 3\n'
    )
    a, b, c = pt.parse(text).samples
    assert a.label_dict == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "x\ny"}
    assert b.labels == (("k", "v"), ("j", "}{"))
    assert b.value == 2.0
    assert c.labels == ()


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("NaN", math.isnan),
        ("+Inf", lambda v: v == math.inf),
        ("-Inf", lambda v: v == -math.inf),
        ("Inf", lambda v: v == math.inf),
        ("-nan(ind)", math.isnan),  # llama.cpp on Windows
        ("2.37151", lambda v: v == 2.37151),
        ("-0.5e-3", lambda v: v == -0.0005),
    ],
)
def test_special_values(text: str, check: object) -> None:
    (s,) = pt.parse(f"x {text}\n").samples
    assert callable(check) and check(s.value)


def test_help_type_comments_blank_lines_and_eof() -> None:
    text = (
        "# a free comment\n"
        "# HELP h_seconds Latency with a \\\\ backslash\\nand a newline.\n"
        "# TYPE h_seconds histogram\n"
        "\n"
        'h_seconds_bucket{le="0.1"} 1\n'
        'h_seconds_bucket{le="+Inf"} 3\n'
        "h_seconds_sum 0.9\n"
        "h_seconds_count 3\n"
        "# TYPE s summary\n"
        's{quantile="0.5"} 0.2\n'
        "s_sum 1\n"
        "s_count 4\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        "vllm:prompt_tokens_total 7\n"
        "# EOF\n"
    )
    expo = pt.parse(text)
    assert expo.helps["h_seconds"] == "Latency with a \\ backslash\nand a newline."
    assert expo.type_of("h_seconds_bucket") == "histogram"
    assert expo.type_of("h_seconds_count") == "histogram"
    assert expo.type_of("s") == "summary"
    assert expo.type_of("s_sum") == "summary"
    assert expo.type_of("vllm:prompt_tokens_total") == "counter"
    assert expo.value("h_seconds_bucket", le="+Inf") == 3.0
    assert expo.value("s", quantile="0.5") == 0.2
    assert len(expo) == 8


def test_exemplars_are_ignored() -> None:
    (s,) = pt.parse('a_bucket{le="1"} 5 # {trace_id="abc"} 0.7 1700000000\n').samples
    assert (s.name, s.value, s.timestamp_ms) == ("a_bucket", 5.0, None)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('a{b="c"', "label set"),
        ("a{b=c} 1", "malformed label set"),
        ('a{b="c" d="e"} 1', "expected ',' or '}'"),
        ("a", "expected a value"),
        ("a 1 2 3", "expected a value"),
        ("a one", "invalid value"),
        ("a 1 soon", "invalid timestamp"),
        ("9a 1", "expected a metric name"),
        ("# TYPE a banana", "unknown metric type"),
    ],
)
def test_malformed_lines_name_the_line_and_reason(line: str, reason: str) -> None:
    with pytest.raises(pt.PrometheusTextError) as err:
        pt.parse("ok 1\n" + line + "\n")
    assert err.value.line_no == 2
    assert reason in err.value.message


def test_labels_key_is_canonical_json() -> None:
    assert pt.labels_key({"b": 'x"y', "a": "1"}) == '{"a":"1","b":"x\\"y"}'
    assert pt.labels_key((("z", "1"), ("a", "2"))) == '{"a":"2","z":"1"}'
    assert pt.labels_key(()) == "{}"


def test_vllm_capture_parses_completely(fixtures_dir: Path) -> None:
    """The 52 KB vLLM v1 page: 561 lines, of which 395 samples and 83 TYPE lines."""
    expo = pt.parse((fixtures_dir / VLLM).read_text())
    assert len(expo) == 395
    assert len(expo.types) == 83
    assert expo.value("python_gc_objects_collected_total", generation="0") == 14250.0
    assert expo.value("process_resident_memory_bytes") == 1.126473728e09
    assert expo.value("process_cpu_seconds_total") == 16.22
    assert expo.value("python_info") == 1.0
    (info,) = expo.get("python_info")
    assert info.label("version") == "3.12.13"
    (cfg,) = expo.get("vllm:cache_config_info")
    assert cfg.label("num_gpu_blocks") == "101625"
    assert cfg.label("cpu_offload_params") == "set()"
    assert (
        expo.value(
            "vllm:prefix_cache_queries_created",
            engine="0",
            model_name="Qwen/Qwen2.5-0.5B-Instruct",
        )
        == 1.7740114612874854e09
    )
    assert expo.type_of("vllm:iteration_tokens_total_bucket") == "histogram"
    assert expo.type_of("http_request_size_bytes_sum") == "summary"


@pytest.mark.parametrize(
    ("path", "samples"),
    [
        ("dcgm/dcgm_exporter_nvidia_l4_k8s-ai-conformance_kops.prom", 23),
        ("trtllm/triton_tensorrtllm_backend_readme_ifb_metrics.prom", 20),
        ("llamacpp/metrics_llama-server_cuda_lfm2.5-8b.prom", 11),
        ("sglang/production_metrics_doc_llama-3.1-8b.prom", 91),
    ],
)
def test_every_other_capture_parses(path: str, samples: int, fixtures_dir: Path) -> None:
    assert len(pt.parse((fixtures_dir / path).read_text())) == samples


def test_label_cache_gives_the_same_answer_twice(fixtures_dir: Path) -> None:
    text = (fixtures_dir / VLLM).read_text()
    pt._LABEL_CACHE.clear()
    first = pt.parse(text).samples
    second = pt.parse(text).samples
    assert first == second
