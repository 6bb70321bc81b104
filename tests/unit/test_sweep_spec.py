"""The sweep spec: parsing, validation messages, grid expansion, ranges, point ids, and the
launch templates of every engine (collectors.engine_launcher.render)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from analysis.sweep_spec import expand, parse_spec, point_id
from collectors.engine_launcher import TEMPLATES, classify_exit, render
from errors import InputError

REPO = Path(__file__).resolve().parents[2]

BASE = """
name = "t"
[engine]
template = "sim"
model = "llama-3.1-8b"
[grid]
max_batch_size = [8, 64]
max_batched_tokens = [2048, 8192]
[load]
workload = "mixed"
kind = "rate"
levels = [2, 4]
requests = 20
[slo]
profile = "interactive-chat"
"""


def spec_text(**replace: str) -> str:
    text = BASE
    for old, new in replace.items():
        text = text.replace(old.replace("__", " "), new)
    return text


def error_of(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(InputError) as exc:
        parse_spec(textwrap.dedent(text), env=env)
    return str(exc.value)


def test_parses_the_shipped_examples() -> None:
    env = {"SERVESCOPE_LLAMA_SERVER": "/x/llama-server", "SERVESCOPE_LLAMA_MODEL": "/m.gguf"}
    for name in ("sim", "llamacpp", "vllm", "sglang"):
        spec = parse_spec((REPO / "examples" / f"{name}-sweep.toml").read_text(), env=env)
        points = expand(spec)
        assert len(points) >= 4, name
        for p in points:  # every point renders with its template
            render(
                template=spec.engine.template,
                command=spec.engine.command,
                params=p.params,
                model=spec.engine.model,
                port=8000,
                binary=spec.engine.binary,
                args=spec.engine.args,
            )


def test_grid_expansion_is_the_cartesian_product_with_fixed_params() -> None:
    spec = parse_spec(
        BASE.replace('model = "llama-3.1-8b"', 'model = "m"\nparams = { block_size = 32 }')
    )
    points = expand(spec)
    assert [dict(p.grid_params) for p in points] == [
        {"max_batch_size": 8, "max_batched_tokens": 2048},
        {"max_batch_size": 8, "max_batched_tokens": 8192},
        {"max_batch_size": 64, "max_batched_tokens": 2048},
        {"max_batch_size": 64, "max_batched_tokens": 8192},
    ]
    assert all(p.params["block_size"] == 32 for p in points)
    assert points[0].label == "max_batch_size=8 max_batched_tokens=2048"
    assert len({p.point_id for p in points}) == 4


def test_point_ids_are_stable_and_order_free() -> None:
    a = point_id({"max_batch_size": 8, "prefix_caching": True})
    assert a == point_id({"prefix_caching": True, "max_batch_size": 8})
    assert a != point_id({"max_batch_size": 8, "prefix_caching": False})
    assert a == "p" + a[1:] and len(a) == 11
    # the same spec expands to the same ids every time (resume relies on it)
    assert [p.point_id for p in expand(parse_spec(BASE))] == [
        p.point_id for p in expand(parse_spec(BASE))
    ]


def test_ranges_linear_log_and_whole_numbers() -> None:
    spec = parse_spec(
        BASE.replace(
            "max_batch_size = [8, 64]",
            'max_batch_size = { from = 8, to = 64, steps = 4, scale = "log" }',
        ).replace(
            "max_batched_tokens = [2048, 8192]",
            "kv_memory_fraction = { from = 0.8, to = 0.95, steps = 4 }",
        )
    )
    assert spec.grid["max_batch_size"] == (8, 16, 32, 64)
    assert spec.grid["kv_memory_fraction"] == (0.8, 0.85, 0.9, 0.95)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'template = "sim"',
            'template = "nope"',
            "[engine].template: 'nope' unknown; accepted: sim, vllm, sglang, tgi, trtllm, llamacpp",
        ),
        (
            "max_batch_size = [8, 64]",
            "max_batch_size = [0, 8]",
            "[grid].max_batch_size: 0 is not one of: whole numbers ≥ 1",
        ),
        (
            "max_batch_size = [8, 64]",
            "max_batch_size = [8, 8]",
            "[grid].max_batch_size: a value is given twice",
        ),
        (
            "max_batch_size = [8, 64]",
            "batch = [1]",
            "[grid].batch: unknown parameter; accepted: max_batch_size",
        ),
        (
            "max_batch_size = [8, 64]",
            "kv_memory_fraction = [0.9, 1.5]",
            "kv_memory_fraction: 1.5 is not one of: numbers above 0 up to 1",
        ),
        (
            "max_batch_size = [8, 64]",
            "max_batch_size = { from = 8, steps = 3 }",
            "a range needs from, to and steps; 'to' is missing",
        ),
        (
            'kind = "rate"',
            'kind = "qps"',
            "[load].kind: 'qps' unknown; accepted: rate, concurrency",
        ),
        ("levels = [2, 4]", "", "[load]: give exactly one of levels"),
        (
            "levels = [2, 4]",
            "levels = [2]\nsearch = { low = 1, high = 8 }",
            "[load]: give exactly one of levels",
        ),
        ("levels = [2, 4]", "search = { low = 8, high = 2 }", "high (2) must be above low (8)"),
        ("requests = 20", "", "[load]: give exactly one of requests = N or duration_s = S"),
        ('profile = "interactive-chat"', "", "[slo].profile: must be a non-empty string"),
        ('name = "t"', 'name = "a b"', "name: 'a b': letters, digits"),
        ('model = "llama-3.1-8b"', "", "[engine].model: missing"),
        (
            "[load]",
            '[sweep]\nmode = "fast"\n[load]',
            "[sweep].mode: 'fast' unknown; accepted: grid, efficient",
        ),
        ('template = "sim"', 'template = "sim"\ncommand = "x"', "give exactly one of template"),
        ('template = "sim"', 'template = "sim"\ncolour = 1', "[engine].colour: unknown key"),
    ],
)
def test_validation_errors_name_the_key_and_what_is_accepted(
    old: str, new: str, message: str
) -> None:
    assert old in BASE
    assert message in error_of(BASE.replace(old, new, 1))


def test_not_toml_is_an_input_error() -> None:
    assert "not valid TOML" in error_of("name = ")


def test_endpoint_sweeps_only_client_params() -> None:
    text = BASE.replace('template = "sim"\nmodel = "llama-3.1-8b"', 'endpoint = "http://h:8000"')
    message = error_of(text)
    assert (
        "[grid].max_batch_size: an engine parameter cannot be swept against an already-running"
        in message
    )
    assert "accepted: concurrency, rate, max_tokens" in message
    ok = parse_spec(
        text.replace(
            "max_batch_size = [8, 64]\nmax_batched_tokens = [2048, 8192]", "max_tokens = [64, 256]"
        )
    )
    assert [p.params for p in expand(ok)] == [{"max_tokens": 64}, {"max_tokens": 256}]
    # the load itself swept in the grid: one level per point
    conc = parse_spec(
        text.replace(
            "max_batch_size = [8, 64]\nmax_batched_tokens = [2048, 8192]", "rate = [1, 2]"
        ).replace("levels = [2, 4]\n", "")
    )
    assert [p.params for p in expand(conc)] == [{"rate": 1.0}, {"rate": 2.0}]


def test_env_placeholders_are_expanded_or_named() -> None:
    text = BASE.replace('model = "llama-3.1-8b"', 'model = "${MODEL_PATH}"')
    assert "${MODEL_PATH} is not set" in error_of(text, env={})
    assert parse_spec(text, env={"MODEL_PATH": "/m.gguf"}).engine.model == "/m.gguf"


def test_search_and_guard_rails_are_kept() -> None:
    spec = parse_spec(
        BASE.replace(
            "levels = [2, 4]", "search = { low = 1, high = 32, precision = 0.1, max_runs = 6 }"
        ).replace(
            'profile = "interactive-chat"',
            'profile = "interactive-chat"\nmax_memory_fraction = 0.9\nmax_preemptions_per_1k = 5',
        )
    )
    assert spec.load.search is not None and spec.load.search.max_runs == 6
    as_json = spec.to_json()
    assert as_json["guard_rails"] == {"max_memory_fraction": 0.9, "max_preemptions_per_1k": 5.0}


# --- templates -------------------------------------------------------------------------------

ALL = {
    "max_batch_size": 64,
    "kv_memory_fraction": 0.9,
    "max_batched_tokens": 4096,
    "block_size": 16,
    "prefix_caching": False,
    "max_model_len": 8192,
    "tensor_parallel": 2,
}


def argv(template: str, params: Mapping[str, object], **kw: object) -> list[str]:
    plan = render(template=template, command=None, params=params, model="M", port=9000, **kw)  # type: ignore[arg-type]
    return list(plan.argv)


def test_vllm_template() -> None:
    assert argv("vllm", ALL) == [
        "vllm", "serve", "M", "--host", "127.0.0.1", "--port", "9000",
        "--max-num-seqs", "64", "--gpu-memory-utilization", "0.9",
        "--max-num-batched-tokens", "4096", "--block-size", "16",
        "--no-enable-prefix-caching", "--max-model-len", "8192", "--tensor-parallel-size", "2",
    ]  # fmt: skip
    assert "--enable-prefix-caching" in argv("vllm", {"prefix_caching": True})


def test_sglang_template() -> None:
    a = argv("sglang", ALL)
    assert a[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "M"]
    for flag, value in [
        ("--max-running-requests", "64"),
        ("--mem-fraction-static", "0.9"),
        ("--chunked-prefill-size", "4096"),
        ("--page-size", "16"),
        ("--context-length", "8192"),
        ("--tp-size", "2"),
    ]:
        assert a[a.index(flag) + 1] == value
    assert "--disable-radix-cache" in a
    assert "--disable-radix-cache" not in argv("sglang", {"prefix_caching": True})


def test_tgi_template_and_its_env() -> None:
    params = {k: v for k, v in ALL.items() if k != "block_size"}
    plan = render(template="tgi", command=None, params=params, model="M", port=9000)
    a = list(plan.argv)
    assert a[:3] == ["text-generation-launcher", "--model-id", "M"]
    for flag, value in [
        ("--max-batch-size", "64"),
        ("--cuda-memory-fraction", "0.9"),
        ("--max-batch-prefill-tokens", "4096"),
        ("--max-total-tokens", "8192"),
        ("--num-shard", "2"),
    ]:
        assert a[a.index(flag) + 1] == value
    assert plan.env == {"PREFIX_CACHING": "0"}
    assert plan.display.startswith("PREFIX_CACHING=0 text-generation-launcher")


def test_trtllm_template() -> None:
    params = {k: v for k, v in ALL.items() if k not in ("block_size", "prefix_caching")}
    assert argv("trtllm", params) == [
        "trtllm-serve", "M", "--host", "127.0.0.1", "--port", "9000",
        "--max_batch_size", "64", "--kv_cache_free_gpu_memory_fraction", "0.9",
        "--max_num_tokens", "4096", "--max_seq_len", "8192", "--tp_size", "2",
    ]  # fmt: skip


def test_llamacpp_template_with_binary_and_ctx_size() -> None:
    a = argv(
        "llamacpp",
        {"max_batch_size": 4, "ctx_size": 4096, "max_batched_tokens": 512},
        binary="/opt/llama-server",
        args=("--alias", "x"),
    )
    assert a == [
        "/opt/llama-server", "-m", "M", "--host", "127.0.0.1", "--port", "9000", "--metrics",
        "-np", "4", "-c", "4096", "-b", "512", "--alias", "x",
    ]  # fmt: skip


def test_sim_template_runs_this_python() -> None:
    a = argv("sim", {"max_batch_size": 8, "prefix_caching": True}, args=("--time-scale", "5"))
    assert a[:4] == [sys.executable, "-m", "cli", "sim"]
    assert a[a.index("--max-batch-size") + 1] == "8"
    assert a[a.index("--prefix-caching") + 1] == "on"
    assert a[-2:] == ["--time-scale", "5"]


@pytest.mark.parametrize(
    ("template", "param", "accepts"),
    [
        (
            "llamacpp",
            "kv_memory_fraction",
            "it accepts: max_batch_size, ctx_size, max_batched_tokens",
        ),
        ("trtllm", "block_size", "it accepts: max_batch_size, kv_memory_fraction"),
        ("tgi", "block_size", "it accepts: max_batch_size"),
        ("sim", "ctx_size", "it accepts: max_batch_size"),
    ],
)
def test_a_param_a_template_lacks_is_an_input_error(
    template: str, param: str, accepts: str
) -> None:
    with pytest.raises(InputError) as exc:
        render(template=template, command=None, params={param: 1}, model="M", port=1)
    assert f"the {template} template cannot express {param}" in str(exc.value)
    assert accepts in str(exc.value)


def test_every_template_expresses_the_core_parameter() -> None:
    for name, tpl in TEMPLATES.items():
        assert "max_batch_size" in tpl.accepts, name


def test_custom_command_placeholders() -> None:
    plan = render(
        template=None,
        command="my-server --port {port} --model {model} --batch {max_batch_size}",
        params={"max_batch_size": 8},
        model="M",
        port=7,
    )
    assert list(plan.argv) == ["my-server", "--port", "7", "--model", "M", "--batch", "8"]
    with pytest.raises(InputError, match=r"cannot express block_size \(no \{block_size\}"):
        render(
            template=None, command="s --port {port}", params={"block_size": 8}, model=None, port=1
        )
    with pytest.raises(InputError, match=r"uses \{nope\}, which no parameter gives"):
        render(template=None, command="s {nope}", params={}, model=None, port=1)


def test_oom_is_told_apart_from_a_crash() -> None:
    assert classify_exit("torch.OutOfMemoryError: CUDA out of memory. Tried", 1) == "oom"
    assert classify_exit("", 137) == "oom"
    assert classify_exit("", -9) == "oom"
    assert classify_exit("Segmentation fault", 139) == "crashed"


def test_the_prior_reads_a_mixture_as_its_weighted_expected_lengths() -> None:
    from services.commands.sweep import prior_lengths

    mixed = {
        "name": "m",
        "mix": [
            {"weight": 3, "input_tokens": 100, "output_tokens": 10},
            {
                "weight": 1,
                "input_tokens": {"dist": "uniform", "min": 200, "max": 600},
                "output_tokens": 50,
            },
        ],
    }
    # (3 × 100 + 1 × 400) / 4 = 175 input; (3 × 10 + 1 × 50) / 4 = 20 output
    assert prior_lengths(mixed) == {"input_tokens": 175.0, "output_tokens": 20.0}


def test_secrets_are_masked_in_the_launch_command_and_the_stored_spec() -> None:
    """Issue 24 case 3: env values never shown (names only, a template rule's own value kept);
    values after --api-key / --hf-token / --token / a template-marked flag and NAME_KEY= forms
    masked, in the display, the secrets the log tail masks and the spec stored."""
    from services.commands.sweep import stored_spec

    args = ("--api-key", "sk-1", "--token=tk-2", "HF_TOKEN=hf-3")
    env = {"VLLM_API_KEY": "vk-5", "HF_HOME": "/data/hf-6"}
    plan = render(
        template="tgi",
        command=None,
        params={"prefix_caching": True},
        model="M",
        port=1,
        args=args,
        env=env,
    )
    secrets = ("sk-1", "tk-2", "hf-3", "vk-5", "/data/hf-6")
    assert plan.display.startswith("VLLM_API_KEY=*** HF_HOME=*** PREFIX_CACHING=1 ")
    assert plan.display.endswith("--api-key *** --token=*** HF_TOKEN=***")
    assert set(plan.secrets) == set(secrets)
    assert plan.argv[-4:] == args  # the engine still gets them
    # a flag the template marks: llama-server's -hft
    llama = render(
        template="llamacpp", command=None, params={}, model="m.gguf", port=1, args=["-hft", "h-1"]
    )
    assert llama.display.endswith("-hft ***") and llama.secrets == ("h-1",)
    spec = parse_spec(
        textwrap.dedent(
            """
            name = "s"
            [engine]
            command = "serve --port {port} --api-key sk-7 OTHER_KEY=ok-8"
            args = ["--hf-token", "hf-9"]
            env = { TOKEN = "env-10" }
            [grid]
            [load]
            workload = "short-in-short-out"
            kind = "rate"
            levels = [1]
            requests = 5
            [slo]
            profile = "interactive-chat"
            """
        )
    )
    stored = str(stored_spec(spec))
    for secret in ("sk-7", "ok-8", "hf-9", "env-10"):
        assert secret not in stored
    assert "--api-key ***" in stored and "'--hf-token', '***'" in stored


def test_the_log_tail_masks_the_plans_secrets_and_token_forms(tmp_path: Path) -> None:
    from collectors.engine_launcher import log_tail

    log = tmp_path / "e.log"
    log.write_text(
        "args: --api-key sk-SECRET1\nloaded token=abc123 HF_TOKEN=hf_x\nvalue vk-SECRET2\n"
    )
    tail = log_tail(log, secrets=("vk-SECRET2",))
    assert "sk-SECRET1" not in tail and "abc123" not in tail and "hf_x" not in tail
    assert "vk-SECRET2" not in tail and tail.count("***") == 4


def test_a_sweeps_timed_rate_level_is_extended_to_its_percentiles_minimum_sample() -> None:
    from services.commands.sweep import _bench_config, sample_note

    spec = parse_spec((REPO / "examples" / "sim-sweep.toml").read_text())  # 8 s levels, P99
    [point, *_] = expand(spec)
    low = _bench_config(spec, "s", point, 0, "http://h:1", [2.0], "r", need=100)
    assert (low.requests, low.duration_s) == (100, None)
    high = _bench_config(spec, "s", point, 0, "http://h:1", [20.0], "r", need=100)
    assert (high.requests, high.duration_s) == (None, 8.0)
    note = sample_note(spec, 99)
    assert note is not None and "runs 100 requests instead (P99 needs 100)" in note
