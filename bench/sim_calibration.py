"""Replay LLM-serving measurements on the reference engine and print the error.

    .venv/bin/python bench/sim_calibration.py              # shipped constants, then 5-fold CV
    .venv/bin/python bench/sim_calibration.py --kfold 0    # only the in-sample table (~1 min)
    .venv/bin/python bench/sim_calibration.py --kfold 5,23 --jobs 2  # + leave-one-out, 2 processes
    .venv/bin/python bench/sim_calibration.py --fit        # refit on every row, then the table
    .venv/bin/python bench/sim_calibration.py --csv FILE --json OUT  # any file with these columns

Each row of a measurements file (by default bench/calibration/measurements.csv, the published
points with their sources, see bench/calibration/README.md; ``--csv`` takes any file with the
same columns) becomes a scenario for the *same* scheduler the server runs (``sim.engine.simulate``,
in virtual time, no HTTP). The replay reads everything the row states:

* **GPU** and **model** through the catalogue (``seeds/gpus.toml``, ``seeds/models.toml``):
  ``match_gpu`` matches names such as "H100 SXM 80GB" or a display name by chip, memory size and
  form factor; ``match_model`` matches a catalogue name or Hugging Face repo, ignoring the
  Instruct/Chat/HF suffixes and, last, trailing revision or quantisation tags.
* **Parallelism**: ``tp`` and ``parallel_layout`` (``TPn x k instances``, else k = gpu_count / tp):
  each of the k data-parallel instances gets 1/k of the load (request rate, concurrency, batch or
  requests); throughput is summed over the instances, latencies pooled over them.
* **Precision** through the project's vocabulary (``analysis.precision.sized_precision``, bytes
  per parameter from ``analysis.capacity.bytes_per_param``): FP8 puts weights and KV cache in FP8
  (TensorRT-LLM's rule); for other precisions the KV dtype is ``perf_model.Deployment``'s rule;
  an unstated precision is the checkpoint's.
* **Engine settings** from ``engine_params`` (``name=value (engine flag)``, ``;``-separated, names
  ``max_batch_size``, ``kv_memory_fraction``, ``max_batched_tokens``, ``prefix_caching``,
  ``max_model_len``, and ``kv_cache_dtype``; other parts are listed as not simulated); a setting
  the row does not state comes from ``ENGINE_DEFAULTS`` (one table: the engine's documented
  default for the version it names, with its source) and is reported as assumed. A
  ``kv_memory_fraction`` whose flag is TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` is a
  fraction of the memory left after weights, converted to the sim's fraction of the GPU.
* **Lengths**: ``random_range_ratio=R`` draws uniformly in [max(1, R×N), N] (SGLang's
  bench_serving; DataCrunch's R = 0 draws [1, N]); fixed lengths; a distribution the row does not
  state replays the nominal lengths fixed (assumed); ShareGPT log-normal lengths at the row's
  lengths or means, else ``DATASETS``'; fixed at the mean input/output tokens where only those
  are given. Requests a row does not count: ``NUM_REQUESTS_DEFAULT`` (assumed).
* **Scenario** (``SCENARIOS``): Poisson arrivals at the stated rate, all at once, closed-loop
  concurrency, a fixed batch; MLPerf server/offline replay as Poisson/all-at-once at the stated
  load (the MLPerf latency constraints themselves are not checked).

A row that cannot be replayed (unknown GPU or model, a layout other than TP × instances, a
scenario or load the table does not know, a number that is not one, a model that does not fit) is
reported as skipped with the reason; the others are replayed. The sim's throughput, TTFT, TPOT/ITL
and E2E are compared with whatever statistic the row states (mean, else median); error = sim /
measured − 1. ``--json OUT`` writes, per row, ``{"id", "skipped", "measured", "predicted"}`` with
the keys ``output_tok_s``, ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` (measured: null where the row
states no value; predicted: every metric of a replayed row, in the row's statistic, else the
mean), plus ``stat`` (the statistic of each key), ``settings`` (the engine settings replayed),
``assumed`` (what the row did not state and the replay assumed) and ``not_simulated`` (parts of
``engine_params`` the sim does not model).

**In-sample vs out-of-sample.** The shipped constants (analysis/perf_model.DEFAULT_CALIBRATION)
were fitted on *all* the published rows, so the per-row table and its summary are **in-sample**
errors: they say how well the model can be made to fit these points, not how well it predicts a
new one. The **out-of-sample** figure is k-fold cross-validation (``--kfold``, default 5 without
``--json``, fixed seeded fold assignment ``--seed``): for each fold the constants are refitted
from the prior on the other folds' rows only, and the fold's rows are replayed with them. The
refit on all rows (same procedure, same prior) is printed beside it, so in-sample and
out-of-sample come from one procedure. Skipped rows take part in neither.

Fitting (``analysis.calibration_fit.fit``), kept deliberately simple: one set of constants for
every GPU, model and framework; the objective is the mean |log(sim / measured)| over every metric
of every point, except TTFT and E2E of points past the knee (M04, M05, M10, M11, M14), whose
values grow with the run's length and queue rather than with the engine's speed; coordinate descent
over a fixed grid per constant (``GRID``) from ``calibration_fit.PRIOR`` (the model's constants
before any fit), one pass over all six constants (``--passes``; each pass scores 25 candidate sets
on every row), on shortened runs (``--fit-cap``, default 300 requests per online point, 900 per
offline point); predictions and tables use the full runs. Replays are memoised per (row, constants,
cap), so folds whose descent visits the same constants share the work.
The shipped constants were not produced by exactly this procedure: one pass over η_bw (grid
0.60–0.85, start 0.70: 0.60 won, the grid's edge), then one pass over η_fl, overhead_s and
request_overhead_s; overhead_per_seq_s (10 µs) and allreduce_s (20 µs) kept their priors. A
refit is copied by hand into analysis/perf_model.py (DEFAULT_CALIBRATION).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import seeds  # noqa: E402
from analysis import calibration_fit, capacity, perf_model, precision  # noqa: E402
from analysis.perf_model import Calibration  # noqa: E402
from errors import ConfigError, InputError  # noqa: E402
from sim.engine import Arrival, EngineConfig, SimulationResult, simulate  # noqa: E402

DEFAULT_CSV = Path(__file__).resolve().parent / "calibration" / "measurements.csv"
OVERLOADED = {"M04", "M05", "M10", "M11", "M14"}
#: Columns a measurements file must have (the header of bench/calibration/measurements.csv).
COLUMNS = [
    "id",
    "source_type",
    "source",
    "source_locator",
    "date",
    "gpu",
    "gpu_as_stated",
    "gpu_count",
    "model",
    "precision",
    "framework",
    "framework_version",
    "tp",
    "parallel_layout",
    "scenario",
    "dataset",
    "isl",
    "osl",
    "length_distribution",
    "num_requests",
    "load_type",
    "load_value",
    "output_tok_s_total",
    "output_tok_s_per_gpu",
    "total_tok_s_total",
    "requests_per_s",
    "ttft_mean_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "tpot_median_ms",
    "tpot_p99_ms",
    "itl_mean_ms",
    "itl_median_ms",
    "itl_p99_ms",
    "e2e_mean_ms",
    "e2e_median_ms",
    "e2e_p99_ms",
    "mean_input_tokens",
    "mean_output_tokens",
    "engine_params",
    "derived_fields",
    "notes",
]
#: Most requests one simulated instance replays (a hostile num_requests or concurrency is
#: skipped, not run for hours); --cap lowers it.
MAX_REQUESTS = 20_000


class RowError(Exception):
    """A row the replay cannot simulate; the message is the reason reported as ``skipped``."""


# ---------------------------------------------------------------------------------------------
# Engine defaults: ONE table, each value the engine's documented default for the named version
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleContext:
    """What a default that depends on the deployment is computed from."""

    tp: int
    gpu_memory_bytes: float
    context: int  # the model's context, or the row's max_model_len
    kv_tokens: int  # KV capacity of one instance (tokens) under the resolved kv fraction


@dataclass(frozen=True)
class Rule:
    """A default that is a rule of the engine, not a constant."""

    text: str
    fn: Callable[[RuleContext], float]


def _sglang_mem_fraction(c: RuleContext) -> float:
    for tp, frac in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if c.tp >= tp:
            return frac
    return 0.88


def _sglang_max_running(c: RuleContext) -> float:
    pool = min(max(int(c.kv_tokens / max(c.context, 1) * 512), 2048), 4096)
    return max(1, min(c.kv_tokens // 2, pool))


def _sglang_chunked_prefill(c: RuleContext) -> float:
    return 2048 if c.gpu_memory_bytes < 25_000 * 2**20 else 8192


def _vllm_v0_batched_tokens(c: RuleContext) -> float:
    return 512 if c.context > 32 * 1024 else max(c.context, 2048)


SGLANG_MEM_FRACTION = Rule(
    "mem_fraction_static by TP: ≥16 0.79, ≥8 0.81, ≥4 0.85, ≥2 0.87, else 0.88",
    _sglang_mem_fraction,
)
SGLANG_MAX_RUNNING = Rule(
    "max_running_requests = min(KV tokens // 2, min(max(KV tokens / context × 512, 2048), 4096))",
    _sglang_max_running,
)
SGLANG_CHUNKED = Rule(
    "chunked_prefill_size 8192 (2048 on GPUs under 25,000 MiB)", _sglang_chunked_prefill
)
VLLM_V0_BATCHED = Rule(
    "max_num_batched_tokens = max(max_model_len, 2048); 512 when max_model_len > 32K "
    "(chunked prefill on by default there)",
    _vllm_v0_batched_tokens,
)


@dataclass(frozen=True)
class EngineDefaults:
    """An engine's defaults for the settings the sim models, at one documented version.

    ``kv_fraction_of``: "gpu" = the fraction of GPU memory for weights + KV (vLLM's
    gpu_memory_utilization, SGLang's mem_fraction_static, the sim's kv_memory_fraction); "free" =
    the fraction of the memory left after weights and activations (TensorRT-LLM's
    kv_cache_free_gpu_mem_fraction). ``reserve_full_output``: admission reserves prompt + max
    output (TensorRT-LLM's GUARANTEED_NO_EVICT) instead of allocating as tokens arrive.
    """

    engine: str
    version: str
    framework_prefixes: tuple[str, ...]  # lower-case prefixes of the CSV's `framework` column
    max_batch_size: float | Rule
    max_batched_tokens: float | Rule
    kv_memory_fraction: float | Rule
    kv_fraction_of: str
    prefix_caching: bool
    reserve_full_output: bool
    sources: Mapping[str, str]


_TRTLLM_SOURCES = {
    "max_batch_size": "TensorRT-LLM command reference, trtllm-build: --max_batch_size "
    "default 2048 (docs/source/commands/trtllm-build)",
    "max_batched_tokens": "trtllm-build: --max_num_tokens default 8192 (same page)",
    "kv_memory_fraction": "TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction "
    "(kv_cache_free_gpu_mem_fraction) default 0.9, of the memory free after the engine loads",
    "prefix_caching": "KvCacheConfig.enable_block_reuse (enable_kv_cache_reuse) off by default "
    "before 0.18",
    "reserve_full_output": "SchedulerConfig capacity_scheduler_policy default GUARANTEED_NO_EVICT",
}

ENGINE_DEFAULTS: tuple[EngineDefaults, ...] = (
    EngineDefaults(
        engine="TensorRT-LLM",
        version="0.14-0.17",
        framework_prefixes=("tensorrt-llm", "trt-llm", "trtllm"),
        max_batch_size=2048,
        max_batched_tokens=8192,
        kv_memory_fraction=0.9,
        kv_fraction_of="free",
        prefix_caching=False,
        reserve_full_output=True,
        sources=_TRTLLM_SOURCES,
    ),
    EngineDefaults(
        engine="NVIDIA NIM",
        version="1.x (TensorRT-LLM backend)",
        framework_prefixes=("nvidia nim", "nim"),
        max_batch_size=2048,
        max_batched_tokens=8192,
        kv_memory_fraction=0.9,
        kv_fraction_of="free",
        prefix_caching=False,
        reserve_full_output=True,
        sources={
            k: "NIM for LLMs runs TensorRT-LLM engines for its optimised profiles; "
            f"TensorRT-LLM's default: {v}"
            for k, v in _TRTLLM_SOURCES.items()
        },
    ),
    EngineDefaults(
        engine="SGLang",
        version="0.3-0.4",
        framework_prefixes=("sglang",),
        max_batch_size=SGLANG_MAX_RUNNING,
        max_batched_tokens=SGLANG_CHUNKED,
        kv_memory_fraction=SGLANG_MEM_FRACTION,
        kv_fraction_of="gpu",
        prefix_caching=True,
        reserve_full_output=False,
        sources={
            "max_batch_size": "sglang python/sglang/srt/managers/tp_worker.py "
            "(max_running_requests None → max_total_num_tokens // 2, capped by "
            "req_to_token_pool) and "
            "model_executor/model_runner.py init_memory_pool (max_num_reqs)",
            "max_batched_tokens": "sglang python/sglang/srt/server_args.py __post_init__ "
            "(chunked_prefill_size)",
            "kv_memory_fraction": "sglang python/sglang/srt/server_args.py __post_init__ "
            "(mem_fraction_static)",
            "prefix_caching": "sglang server_args.disable_radix_cache default False "
            "(RadixAttention on)",
            "reserve_full_output": "sglang schedule_policy admits on current tokens "
            "(no full-output reservation)",
        },
    ),
    EngineDefaults(
        engine="vLLM",
        version="0.6 (V0 engine)",
        framework_prefixes=("vllm",),
        max_batch_size=256,
        max_batched_tokens=VLLM_V0_BATCHED,
        kv_memory_fraction=0.9,
        kv_fraction_of="gpu",
        prefix_caching=False,
        reserve_full_output=False,
        sources={
            "max_batch_size": "vllm/engine/arg_utils.py EngineArgs.max_num_seqs = 256",
            "max_batched_tokens": "vllm/config.py SchedulerConfig (max_num_batched_tokens None) "
            "and arg_utils.py (chunked prefill by default for max_model_len > 32K)",
            "kv_memory_fraction": "vllm/engine/arg_utils.py EngineArgs.gpu_memory_utilization "
            "= 0.9",
            "prefix_caching": "vllm/engine/arg_utils.py enable_prefix_caching = False (V0)",
            "reserve_full_output": "vLLM allocates KV blocks as tokens arrive and preempts "
            "(recompute) when they run out",
        },
    ),
)

#: Length distributions of datasets, for rows that name the dataset but give no lengths.
DATASETS: Mapping[str, tuple[int, int, str]] = {
    "sharegpt": (
        215,
        194,
        "log-normal (σ = 1) inputs and outputs clipped to 3000/2000 tokens; mean output 194 = "
        "SGLang benchmark_vllm_060's own offline ShareGPT run (3856 output tok/s ÷ 19.84 req/s), "
        "mean input 215 an assumption",
    ),
}

#: Longest input and output a log-normal (ShareGPT-like) draw gives.
LOGNORMAL_CLIP = (3000, 2000)

#: Requests replayed where a row states none.
NUM_REQUESTS_DEFAULT = {
    "closed": "10 × concurrency, at least 16 (SemiAnalysis InferenceX's harness)",
    "poisson": "500 (TensorRT-LLM's online-serving table)",
    "all_at_once": "1000",
    "batch": "the batch",
}

#: scenario → {load_type: the arrival process it replays as}
SCENARIOS: Mapping[str, Mapping[str, str]] = {
    "online_poisson": {"request_rate_qps": "poisson", "all_at_once": "all_at_once"},
    "online_all_at_once": {"all_at_once": "all_at_once", "request_rate_qps": "all_at_once"},
    "online_closed_loop_concurrency": {"concurrency": "closed"},
    "offline_max_throughput": {"all_at_once": "all_at_once", "": "all_at_once"},
    "fixed_batch_latency": {"batch_size": "batch"},
    "mlperf_server": {"request_rate_qps": "poisson"},
    "mlperf_offline": {"all_at_once": "all_at_once", "": "all_at_once"},
}

ENGINE_PARAM_NAMES = (
    "max_batch_size",
    "kv_memory_fraction",
    "max_batched_tokens",
    "prefix_caching",
    "max_model_len",
)


# ---------------------------------------------------------------------------------------------
# Reading a row
# ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf)\b", re.IGNORECASE)


def cell(row: Mapping[str, str | None], key: str) -> str:
    v = row.get(key)
    return v.strip() if isinstance(v, str) else ""


def number(row: Mapping[str, str | None], key: str, *, leading: bool = False) -> float | None:
    """The row's number in ``key``; None when empty. ``leading``: a number followed by a remark
    ("inf (3000 prompts, …)"). RowError when the cell holds something else."""
    text = cell(row, key)
    if not text:
        return None
    m = _NUMBER.match(text)
    if m and (leading or m.end() == len(text)):
        return float(m.group(1))
    raise RowError(f"{key} {text[:40]!r} is not a number")


def positive(row: Mapping[str, str | None], key: str, *, integer: bool = False) -> float | None:
    v = number(row, key)
    if v is None:
        return None
    if not math.isfinite(v) or v <= 0 or (integer and v != int(v)):
        kind = "a positive integer" if integer else "a positive finite number"
        raise RowError(f"{key} {cell(row, key)!r} is not {kind}")
    return v


def _words(text: str) -> list[str]:
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", text.lower())  # "141 GB" → "141gb"
    return [w for w in re.split(r"[^a-z0-9]+", text) if w and w != "nvidia"]


_FORMS = {"sxm": "sxm", "sxm4": "sxm", "sxm5": "sxm", "pcie": "pcie", "nvl": "nvl"}
_MEM = re.compile(r"^(\d+)gb$")
_CHIP = re.compile(r"^(?:[a-z]{1,3}\d{1,4}|\d{3,4})[a-z]?$")  # h100, l40s, mi300x, 4090


def _gpu_traits(text: str) -> tuple[set[str], set[int], set[str]]:
    words = _words(text)
    chips = {
        w
        for w in words
        if _CHIP.match(w) and w not in _FORMS and not w.startswith(("hbm", "gddr", "lpddr"))
    }
    mems = {int(m.group(1)) for w in words if (m := _MEM.match(w))}
    forms = {_FORMS[w] for w in words if w in _FORMS}
    return chips, mems, forms


def match_gpu(text: str) -> str:
    """The catalogue GPU a row's wording names: its entry name or display name verbatim, else
    the one entry with the same chip (H100, A100, L40S …) whose memory size and form factor do
    not contradict the text's. RowError when none or several match."""
    entries = seeds.entries("gpus")
    key = text.strip().lower()
    for e in entries:
        if key in (str(e["name"]).lower(), str(e.get("display_name") or "").lower()):
            return str(e["name"])
    chips, mems, forms = _gpu_traits(text)
    if not chips:
        raise RowError(f"GPU {text!r} names no chip; catalogue: {_names(entries)}")
    found = []
    for e in entries:
        e_chips, e_mems, e_forms = _gpu_traits(f"{e['name']} {e.get('display_name') or ''}")
        gib = float(e["memory_bytes"]) / 2**30
        if not chips <= e_chips:
            continue
        if mems and not any(m in e_mems or abs(gib - m) <= 0.06 * m for m in mems):
            continue
        if forms and e_forms and not forms & e_forms:
            continue
        found.append(str(e["name"]))
    if len(found) == 1:
        return found[0]
    if found:
        raise RowError(f"GPU {text!r} is ambiguous: {', '.join(found)}")
    raise RowError(f"unknown GPU {text!r}; catalogue: {_names(entries)}")


def _names(entries: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(str(e["name"]) for e in entries)


_MODEL_SUFFIXES = ("-instruct", "-chat", "-hf", "-base", "-it")
#: A trailing revision tag (-0528, -v0.1) or quantisation tag (-FP8, -AWQ, -W4A16 …) of a repo name.
_TAG = re.compile(
    r"-(?:\d{4}|v\d+(?:\.\d+)?|fp8(?:-dynamic)?|int[48]|awq|gptq|w\d+a\d+|bnb-4bit|nvfp4|mxfp4)$"
)


def _model_key(text: str) -> str:
    t = text.strip().lower().split("/")[-1].replace("_", "-").replace(" ", "-")
    t = t.removeprefix("meta-")
    changed = True
    while changed:
        changed = False
        for s in _MODEL_SUFFIXES:
            if t.endswith(s):
                t, changed = t[: -len(s)], True
    return t


def match_model(text: str) -> tuple[str, str]:
    """The catalogue model a row names and how: by entry name or Hugging Face repo (also one
    named in the cell's remark, e.g. "(test definition: meta-llama/…)"), ignoring case and the
    Instruct/Chat/HF/Base suffixes; failing that, without trailing revision or quantisation tags
    ("DeepSeek-V3-0324" → deepseek-v3, "Llama-3.1-8B-Instruct-FP8" → llama-3.1-8b). RowError
    when none or several match."""
    entries = seeds.entries("models")
    head = text.split("(")[0].strip()
    candidates = [head, *re.findall(r"[\w.-]+/[\w.-]+", text)]
    keyed: dict[str, set[str]] = {}
    for e in entries:
        for k in (str(e["name"]), str(e.get("hf_repo") or "")):
            if k:
                keyed.setdefault(_model_key(k), set()).add(str(e["name"]))
    for cand in candidates:
        hit = keyed.get(_model_key(cand))
        if hit and len(hit) == 1:
            return next(iter(hit)), ""
        if hit:
            raise RowError(f"model {text!r} is ambiguous: {', '.join(sorted(hit))}")
    key = _model_key(head)
    while (shorter := _model_key(_TAG.sub("", key))) != key:
        key = shorter
        hit = keyed.get(key)
        if hit and len(hit) == 1:
            name = next(iter(hit))
            note = (
                "same architecture; revision or quantisation tag dropped, precision column applies"
            )
            return name, f"model {head!r} replayed as {name} ({note})"
    raise RowError(f"unknown model {head!r}; catalogue: {_names(entries)}")


def engine_defaults(framework: str) -> EngineDefaults:
    key = framework.strip().lower()
    for d in ENGINE_DEFAULTS:
        if key.startswith(d.framework_prefixes):
            return d
    known = ", ".join(d.engine for d in ENGINE_DEFAULTS)
    raise RowError(f"unknown framework {framework!r}; the defaults table knows {known}")


_PARAM = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*([^\s;,()']+)\s*(.*)$", re.DOTALL)
_FLAG = re.compile(r"\(([^)]*)\)")
_TRUE = {"on", "true", "1", "yes", "enabled"}
_FALSE = {"off", "false", "0", "no", "disabled"}


@dataclass(frozen=True)
class EngineParams:
    values: Mapping[str, float | bool]
    flags: Mapping[str, str]  # setting → the engine flag named in brackets
    ignored: tuple[str, ...]  # parts the sim does not model
    kv_cache_dtype: float | None = None  # bytes per KV element, where the row states the dtype


def parse_engine_params(text: str) -> EngineParams:
    """``name=value (flag) remark; …`` → the normalised settings, their flags and the parts the
    sim does not model. RowError for a known setting whose value is not one."""
    values: dict[str, float | bool] = {}
    flags: dict[str, str] = {}
    ignored: list[str] = []
    kv_bytes: float | None = None
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        m = _PARAM.match(part)
        if not m or m.group(1).lower() not in (*ENGINE_PARAM_NAMES, "kv_cache_dtype"):
            ignored.append(part)
            continue
        name, raw, rest = m.group(1).lower(), m.group(2), m.group(3)
        if name == "kv_cache_dtype":
            if raw.lower() != "auto":
                try:
                    kv_bytes = precision.kv_cache_bytes(raw, "engine_params: kv_cache_dtype")
                except InputError as exc:  # its message names the accepted values
                    raise RowError(str(exc)) from None
            continue
        flag = _FLAG.search(rest)
        if flag:
            flags[name] = flag.group(1).strip()
        if name == "prefix_caching":
            if raw.lower() not in _TRUE | _FALSE:
                raise RowError(f"engine_params: prefix_caching={raw!r} is not on/off")
            values[name] = raw.lower() in _TRUE
            continue
        try:
            v = float(raw)
        except ValueError:
            raise RowError(f"engine_params: {name}={raw!r} is not a number") from None
        if name == "kv_memory_fraction":
            if not 0.0 < v <= 1.0:
                raise RowError(f"engine_params: kv_memory_fraction={raw} is not in (0, 1]")
        elif not (math.isfinite(v) and v >= 1 and v == int(v)):
            raise RowError(f"engine_params: {name}={raw} is not a positive integer")
        values[name] = v
    return EngineParams(values, flags, tuple(ignored), kv_bytes)


def parse_layout(row: Mapping[str, str | None]) -> tuple[int, int, str]:
    """(tp, data-parallel instances, note) from ``tp``, ``parallel_layout`` and ``gpu_count``."""
    tp_col = positive(row, "tp", integer=True)
    gpus = positive(row, "gpu_count", integer=True)
    layout = cell(row, "parallel_layout")
    note = ""
    if layout:
        m = re.match(r"^TP\s*(\d+)(?:\s*[x×]\s*(\d+)\s*instances?)?$", layout, re.IGNORECASE)
        if not m:
            raise RowError(
                f"parallel_layout {layout!r} is not replayed (only 'TPn' or 'TPn x k instances')"
            )
        tp, k = int(m.group(1)), int(m.group(2) or 1)
        if tp_col is not None and int(tp_col) != tp:
            raise RowError(f"tp {int(tp_col)} contradicts parallel_layout {layout!r}")
    elif tp_col is not None:
        tp, k = int(tp_col), 1
        if gpus is not None and int(gpus) > tp:
            if int(gpus) % tp:
                raise RowError(f"gpu_count {int(gpus)} is not a multiple of tp {tp}")
            k = int(gpus) // tp
            note = f"{k} data-parallel instances inferred from gpu_count / tp"
    else:
        raise RowError("neither tp nor parallel_layout is stated")
    if tp < 1 or k < 1:
        raise RowError(f"parallel layout TP{tp} x {k} is not a deployment")
    if gpus is not None and int(gpus) != tp * k:
        raise RowError(f"gpu_count {int(gpus)} ≠ TP{tp} × {k} instances")
    return tp, k, note


def parse_precision(text: str) -> tuple[float | None, float | None, str | None, str]:
    """(weight bytes/param, KV bytes/elem, sized precision, assumption) for the row's precision,
    through the project's vocabulary (``analysis.precision.sized_precision``, bytes from
    ``analysis.capacity.bytes_per_param``). None: the checkpoint's (an unstated precision: "not
    stated …", "auto"). FP8 puts the KV cache in FP8 too (TensorRT-LLM's rule); other precisions
    leave it to ``perf_model.Deployment.kv_bytes_per_elem``."""
    t = text.strip().lower()
    first = re.split(r"[\s(;,]+", t)[0] if t else ""
    if not first or t.startswith(("not stated", "auto", "default", "unknown")):
        return None, None, None, "precision: the checkpoint's dtype"
    try:
        sized = precision.sized_precision(first, "precision")
        wb = capacity.bytes_per_param(sized)
    except (InputError, ConfigError) as exc:  # its message names the accepted values
        raise RowError(str(exc)) from None
    return wb, (1.0 if sized == "fp8" else None), sized, ""


# ---------------------------------------------------------------------------------------------
# A row as a scenario
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """Identical data-parallel instances: each gets ``load`` (its request rate, concurrency or
    batch; inf = all at once) and replays ``num_requests`` requests."""

    load: float
    num_requests: int
    count: int


@dataclass(frozen=True)
class Scenario:
    row: dict[str, str]
    config: EngineConfig  # one instance
    engine: str
    kind: str  # poisson | all_at_once | closed | batch
    load: float  # the whole system's
    instances: int
    groups: tuple[Group, ...]
    lengths: str  # fixed | uniform | lognormal
    isl: int
    osl: int
    ratio: float
    settings: Mapping[str, Any] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.row["id"]

    @property
    def num_requests(self) -> int:
        return sum(g.num_requests * g.count for g in self.groups)


def _split(total: int, k: int) -> list[tuple[int, int]]:
    """``total`` split over ``k`` instances as evenly as integers allow: (share, instances)."""
    q, r = divmod(total, k)
    return [(s, c) for s, c in ((q + 1, r), (q, k - r)) if s >= 1 and c >= 1]


def _lengths(
    row: Mapping[str, str | None],
) -> tuple[str, int, int, float, str]:
    """(kind, input N, output N, range ratio, assumption) from the row's length columns."""
    isl = positive(row, "isl", integer=True)
    osl = positive(row, "osl", integer=True)
    mean_in = positive(row, "mean_input_tokens")
    mean_out = positive(row, "mean_output_tokens")
    dist = cell(row, "length_distribution").lower()
    sharegpt = "sharegpt" in dist or "sharegpt" in cell(row, "dataset").lower()
    ratio = re.search(r"random_range_ratio\s*=\s*([^\s:;,]+)", dist)
    if isl and osl:
        if ratio:
            try:
                r = float(ratio.group(1))
            except ValueError:
                raise RowError(f"random_range_ratio {ratio.group(1)!r} is not a number") from None
            if not 0.0 <= r <= 1.0:
                raise RowError(f"random_range_ratio {r:g} is not in [0, 1]")
            return "uniform", int(isl), int(osl), r, ""
        if sharegpt:
            return "lognormal", int(isl), int(osl), 0.0, "lengths: ShareGPT-like log-normal"
        if dist.startswith("fixed") or "stdev = 0" in dist or "stdev 0" in dist:
            return "fixed", int(isl), int(osl), 0.0, ""
        said = "not stated" if not dist or dist.startswith("not stated") else repr(dist[:40])
        return "fixed", int(isl), int(osl), 0.0, f"fixed lengths (distribution {said})"
    if mean_in and mean_out:
        i, o = max(1, round(mean_in)), max(1, round(mean_out))
        if sharegpt:
            return "lognormal", i, o, 0.0, "lengths: log-normal at the stated means"
        return "fixed", i, o, 0.0, "lengths: fixed at the stated means"
    if sharegpt:
        i, o, src = DATASETS["sharegpt"]
        return "lognormal", i, o, 0.0, f"lengths: ShareGPT {i}/{o} ({src})"
    raise RowError("no lengths stated (isl/osl or mean_input_tokens/mean_output_tokens)")


def _resolve(
    name: str, stated: EngineParams, d: EngineDefaults, ctx: RuleContext, assumed: list[str]
) -> float | bool:
    if name in stated.values:
        return stated.values[name]
    v = getattr(d, name)
    if isinstance(v, Rule):
        value = v.fn(ctx)
        assumed.append(
            f"{name} = {value:g}: {d.engine} {d.version} default, {v.text} ({d.sources[name]})"
        )
        return value
    assumed.append(f"{name} = {v}: {d.engine} {d.version} default ({d.sources[name]})")
    return v


def _num_requests(row: Mapping[str, str | None], kind: str, load: float, assumed: list[str]) -> int:
    n = positive(row, "num_requests", integer=True)
    if n is not None:
        return int(n)
    if kind == "batch":
        return int(load)
    value = {"closed": max(16, 10 * int(load)), "poisson": 500, "all_at_once": 1000}[kind]
    assumed.append(f"num_requests = {value}: {NUM_REQUESTS_DEFAULT[kind]}")
    return value


def build_scenario(row: dict[str, str], calibration: Calibration, cap: int | None) -> Scenario:
    """The row as a scenario for the reference engine; RowError says why it cannot be one."""
    assumed: list[str] = []
    gpu_text = cell(row, "gpu") or cell(row, "gpu_as_stated")
    if not gpu_text:
        raise RowError("GPU not stated")
    gpu = match_gpu(gpu_text)
    if not cell(row, "model"):
        raise RowError("model not stated")
    model, model_note = match_model(cell(row, "model"))
    if model_note:
        assumed.append(model_note)
    if not cell(row, "framework"):
        raise RowError("framework not stated (its engine defaults are unknown)")
    d = engine_defaults(cell(row, "framework"))
    tp, k, layout_note = parse_layout(row)
    if layout_note:
        assumed.append(layout_note)
    entry = seeds.entry("models", model)
    wb, kvb, word, prec_note = parse_precision(cell(row, "precision"))
    if prec_note:
        assumed.append(prec_note)
    params = parse_engine_params(cell(row, "engine_params"))
    if params.kv_cache_dtype is not None:
        kvb = params.kv_cache_dtype

    scenario = cell(row, "scenario")
    if scenario not in SCENARIOS:
        raise RowError(f"scenario {scenario!r} is not replayed; known: {', '.join(SCENARIOS)}")
    load_type = cell(row, "load_type")
    kind = SCENARIOS[scenario].get(load_type)
    if kind is None:
        raise RowError(f"load_type {load_type!r} does not fit scenario {scenario}")
    load = number(row, "load_value", leading=True)
    if kind == "poisson" and load is not None and math.isinf(load) and load > 0:
        kind = "all_at_once"
    if kind == "all_at_once":
        load = math.inf
    elif load is None:
        raise RowError(f"load_value not stated for load_type {load_type}")
    elif not (math.isfinite(load) and load > 0):
        raise RowError(f"load_value {cell(row, 'load_value')!r} is not a positive finite load")
    elif kind in ("closed", "batch") and load != int(load):
        raise RowError(f"{load_type} {load:g} is not an integer")
    lengths, isl, osl, ratio, length_note = _lengths(row)
    if length_note:
        assumed.append(length_note)

    # engine settings: the row's, else the engine's documented defaults (ONE table)
    max_model_len = params.values.get("max_model_len")
    context = int(max_model_len or entry.get("context") or 0)
    pre = RuleContext(tp, 0.0, context, 0)
    try:
        probe = EngineConfig.from_names(
            gpu,
            model,
            tp=tp,
            kv_memory_fraction=1.0,
            weight_dtype_bytes=wb,
            kv_dtype_bytes=kvb,
            weight_precision=word,
        )
    except Exception as exc:  # ConfigError from the catalogue or "does not fit"
        raise RowError(f"{model} on TP{tp} × {gpu}: {exc}") from None
    pre = replace(pre, gpu_memory_bytes=probe.gpu.memory_bytes)
    mbt = int(_resolve("max_batched_tokens", params, d, pre, assumed))
    prefix = bool(_resolve("prefix_caching", params, d, pre, assumed))
    frac = float(_resolve("kv_memory_fraction", params, d, pre, assumed))
    flag = params.flags.get("kv_memory_fraction", "").lower()
    if "kv_memory_fraction" not in params.values or not flag:
        of = d.kv_fraction_of
    elif "free" in flag:
        of = "free"
    elif any(s in flag.replace("-", "_") for s in ("gpu_memory_utilization", "mem_fraction")):
        of = "gpu"
    else:
        of = d.kv_fraction_of
    try:
        cfg = replace(probe, max_batched_tokens=mbt, prefix_caching=prefix)
        cfg = replace(cfg, reserve_full_output=d.reserve_full_output, calibration=calibration)
        sim_frac = frac
        if of == "free":  # of the memory left after weights and activations
            mem = cfg.gpu.memory_bytes
            free = perf_model.kv_budget_bytes(replace(cfg, kv_memory_fraction=1.0).deployment())
            sim_frac = ((mem - free) + frac * free) / mem
        cfg = replace(cfg, kv_memory_fraction=min(1.0, sim_frac))
        cfg.validate()
        kv_tokens = cfg.total_blocks() * cfg.block_size
    except Exception as exc:
        raise RowError(f"{model} on TP{tp} × {gpu} at {word}: {exc}") from None
    ctx = replace(pre, kv_tokens=kv_tokens)
    if kind != "batch":  # a fixed-batch run's batch is its harness's, set per instance
        mbs = int(_resolve("max_batch_size", params, d, ctx, assumed))
        cfg = replace(cfg, max_batch_size=max(1, mbs))
    longest = sum(LOGNORMAL_CLIP) if lengths == "lognormal" else isl + osl
    if longest > kv_tokens:
        raise RowError(
            f"a request of up to {longest} tokens does not fit in one instance's KV cache "
            f"({kv_tokens} tokens)"
        )

    # load, split over the data-parallel instances
    n = _num_requests(row, kind, load, assumed)
    if kind == "poisson":
        per = math.ceil(n / k)
        groups = [Group(load / k, per, k)]
    elif kind == "all_at_once":
        groups = [Group(math.inf, share, c) for share, c in _split(n, k)]
    else:
        groups = []
        for share, c in _split(int(load), k):
            per = share if kind == "batch" else max(share, round(n * share / load))
            groups.append(Group(float(share), per, c))
    if not groups:
        raise RowError(f"load {load:g} over {k} instances leaves every instance idle")
    capped = []
    for g in groups:
        m = g.num_requests
        if cap is not None and kind in ("poisson", "closed"):
            m = min(m, cap)
        elif cap is not None and kind == "all_at_once":
            m = min(m, 3 * cap)  # offline runs need enough requests to reach steady batching
        if math.isfinite(g.load) and kind != "poisson" and g.load > MAX_REQUESTS:
            raise RowError(
                f"{load_type} {g.load:g} per instance is above the replay's limit ({MAX_REQUESTS})"
            )
        if m > MAX_REQUESTS:
            raise RowError(
                f"{m} requests per instance is above the replay's limit ({MAX_REQUESTS}; use --cap)"
            )
        capped.append(replace(g, num_requests=m))
    settings: dict[str, Any] = {
        "engine": f"{d.engine} {d.version}",
        "gpu": gpu,
        "model": model,
        "tp": tp,
        "instances": k,
        "precision": word or "checkpoint",
        "weight_bytes_per_param": cfg.deployment().weight_bytes_per_param,
        "kv_bytes_per_elem": cfg.deployment().kv_bytes_per_elem,
        "max_batch_size": int(load) // k if kind == "batch" else cfg.max_batch_size,
        "max_batched_tokens": mbt,
        "kv_memory_fraction": frac,
        "kv_memory_fraction_of": of,
        "sim_kv_memory_fraction": round(cfg.kv_memory_fraction, 4),
        "kv_capacity_tokens": kv_tokens,
        "prefix_caching": prefix,
        "reserve_full_output": d.reserve_full_output,
        "lengths": {"kind": lengths, "input": isl, "output": osl, "range_ratio": ratio},
        "load_per_instance": [
            {
                "load": g.load if math.isfinite(g.load) else "inf",
                "requests": g.num_requests,
                "instances": g.count,
            }
            for g in capped
        ],
    }
    if max_model_len:
        settings["max_model_len"] = int(max_model_len)
    return Scenario(
        row=row,
        config=cfg,
        engine=d.engine,
        kind=kind,
        load=load,
        instances=k,
        groups=tuple(capped),
        lengths=lengths,
        isl=isl,
        osl=osl,
        ratio=ratio,
        settings=settings,
        assumed=tuple(assumed),
        ignored=params.ignored,
    )


def draw_lengths(sc: Scenario, rng: random.Random) -> tuple[int, int]:
    if sc.lengths == "fixed":
        return sc.isl, sc.osl
    if sc.lengths == "uniform":  # SGLang bench_serving: U[max(1, R·N), N] (R = 0: [1, N])
        i = rng.randint(max(1, int(sc.isl * sc.ratio)), sc.isl)
        return i, max(1, rng.randint(int(sc.osl * sc.ratio), sc.osl))
    # ShareGPT-like: log-normal with σ = 1 and the given means, clipped like vLLM's sampler
    sigma = 1.0
    li = rng.lognormvariate(math.log(sc.isl) - sigma**2 / 2, sigma)
    lo = rng.lognormvariate(math.log(sc.osl) - sigma**2 / 2, sigma)
    return max(4, min(int(li), LOGNORMAL_CLIP[0])), max(4, min(int(lo), LOGNORMAL_CLIP[1]))


def run_group(sc: Scenario, g: Group, seed: int = 0, itl: bool = True) -> SimulationResult:
    """One instance of the group, in virtual time."""
    rng = random.Random(seed)
    config = sc.config
    if sc.kind == "batch":
        config = replace(config, max_batch_size=int(g.load))
    if sc.kind == "closed":

        def make(_i: int) -> Arrival:
            p, o = draw_lengths(sc, rng)
            return Arrival(0.0, p, o)

        return simulate(
            config,
            closed_loop=(int(g.load), make),
            num_requests=g.num_requests,
            record_token_times=itl,
        )
    arrivals = []
    t = 0.0
    for _ in range(g.num_requests):
        p, o = draw_lengths(sc, rng)
        arrivals.append(Arrival(t, p, o))
        if sc.kind == "poisson":
            t += rng.expovariate(g.load)
    return simulate(config, arrivals, record_token_times=itl)


# ---------------------------------------------------------------------------------------------
# Comparing the replay with the row
# ---------------------------------------------------------------------------------------------

#: JSON key of each metric, and the CSV columns a row states it in
JSON_KEYS = {"thr": "output_tok_s", "ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}


@dataclass
class Metric:
    name: str  # thr | ttft | tpot | itl | e2e
    stat: str  # mean | median | total
    measured: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.measured - 1.0


def _stat(values: Sequence[float], stat: str) -> float:
    if not values:
        return math.nan
    return statistics.fmean(values) if stat == "mean" else statistics.median(values)


def measured_values(row: Mapping[str, str | None]) -> dict[str, tuple[str, str, float]]:
    """metric → (name, statistic, value) for every metric the row states: throughput (total, or
    per GPU × gpu_count), TTFT, TPOT (else ITL) and E2E, each the mean where stated, else the
    median. RowError for a value that is not a positive number."""
    out: dict[str, tuple[str, str, float]] = {}
    thr = positive(row, "output_tok_s_total")
    if thr is None:
        per_gpu = positive(row, "output_tok_s_per_gpu")
        gpus = positive(row, "gpu_count", integer=True)
        if per_gpu is not None and gpus is not None:
            thr = per_gpu * gpus
    if thr is not None:
        out["thr"] = ("thr", "total", thr)
    for name, alt in (("ttft", None), ("tpot", "itl"), ("e2e", None)):
        for col in (name, alt):
            if col is None:
                continue
            for stat in ("mean", "median"):
                v = positive(row, f"{col}_{stat}_ms")
                if v is not None and name not in out:
                    out[name] = (col, stat, v)
            if name in out:
                break
    return out


def _pooled(
    sc: Scenario, results: Sequence[tuple[Group, SimulationResult]]
) -> tuple[float, list[Any]]:
    """(whole-system output tokens/s, the requests every instance counts, each instance's)."""
    thr = 0.0
    reqs: list[Any] = []
    for g, res in results:
        rs = sorted(res.requests, key=lambda r: r.arrival)
        duration = res.duration
        if sc.kind == "closed":
            # Warm-up: the first wave of a closed loop arrives all at once; like genai-perf's
            # measurement window, count only the requests sent after it.
            rs = rs[int(g.load) :] or rs
            duration = max(r.finish for r in rs) - min(r.arrival for r in rs)
        thr += g.count * (sum(r.output_len for r in rs) / duration if duration > 0 else math.nan)
        reqs += rs * g.count
    return thr, reqs


def compare(
    sc: Scenario, results: Sequence[tuple[Group, SimulationResult]]
) -> tuple[list[Metric], dict[str, tuple[str, float]]]:
    """The metrics the row states, compared; and every metric predicted (key → (statistic,
    value)), in the row's statistic where it states one, else the mean."""
    stated = measured_values(sc.row)
    thr, reqs = _pooled(sc, results)

    def value(name: str, stat: str) -> float:
        if name == "thr":
            return thr
        if name == "ttft":
            return 1e3 * _stat([r.ttft for r in reqs], stat)
        if name == "tpot":
            return 1e3 * _stat([t for r in reqs if (t := r.tpot) is not None], stat)
        if name == "itl":
            gaps = [
                b - a for r in reqs for a, b in zip(r.token_times, r.token_times[1:], strict=False)
            ]
            return 1e3 * _stat(gaps, stat)
        return 1e3 * _stat([r.e2e for r in reqs], stat)

    metrics = [Metric(col, stat, v, value(col, stat)) for col, stat, v in stated.values()]
    predicted: dict[str, tuple[str, float]] = {}
    for key in JSON_KEYS:
        col, stat, _v = stated.get(key, (key, "total" if key == "thr" else "mean", 0.0))
        predicted[key] = (stat if col == key else f"{col} {stat}", value(col, stat))
    return metrics, predicted


def load_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return [{k: v for k, v in r.items() if isinstance(k, str)} for r in csv.DictReader(f)]


Result = tuple[Scenario, list[Metric], list[tuple[Group, SimulationResult]]]


def replay(row: dict[str, str], calibration: Calibration, cap: int | None) -> Result:
    sc = build_scenario(row, calibration, cap)
    needs_itl = measured_values(row).get("tpot", ("",))[0] == "itl"
    results = [(g, run_group(sc, g, itl=needs_itl)) for g in sc.groups]
    return sc, compare(sc, results)[0], results


def evaluate(
    rows: Sequence[dict[str, str]], calibration: Calibration, cap: int | None
) -> list[Result]:
    return [replay(row, calibration, cap) for row in rows]


def screen(
    rows: Sequence[dict[str, str]], cap: int | None
) -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, str]]:
    """(every row with a unique id, the rows that can be replayed, id → reason for the others).

    A row without an id is "row N"; a repeated id becomes "ID (row N)" and is skipped."""
    every: list[dict[str, str]] = []
    ok: list[dict[str, str]] = []
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for i, raw in enumerate(rows, start=1):
        row = dict(raw)
        row["id"] = cell(row, "id") or f"row {i}"
        every.append(row)
        if row["id"] in seen:
            row["id"] = f"{row['id']} (row {i})"
            skipped[row["id"]] = "duplicate id"
            continue
        seen.add(row["id"])
        try:
            build_scenario(row, perf_model.DEFAULT_CALIBRATION, cap)
            measured_values(row)
        except RowError as exc:
            skipped[row["id"]] = str(exc)
            continue
        except Exception as exc:  # never a crash on a row: report it instead
            skipped[row["id"]] = f"cannot be replayed: {type(exc).__name__}: {exc}"
            continue
        ok.append(row)
    return every, ok, skipped


def _lenient_measured(row: Mapping[str, str | None]) -> dict[str, tuple[str, float] | None]:
    out: dict[str, tuple[str, float] | None] = {}
    for key in JSON_KEYS:
        try:
            got = measured_values({**row, **_only_metric(row, key)}).get(key)
        except RowError:
            got = None
        out[key] = (
            None if got is None else (got[1] if got[0] == key else f"{got[0]} {got[1]}", got[2])
        )
    return out


def _only_metric(row: Mapping[str, str | None], key: str) -> dict[str, str]:
    """The row with the other metrics' cells emptied (so one garbage cell spoils only its own)."""
    cols = {
        "thr": ("output_tok_s_total", "output_tok_s_per_gpu", "gpu_count"),
        "ttft": ("ttft_mean_ms", "ttft_median_ms"),
        "tpot": ("tpot_mean_ms", "tpot_median_ms", "itl_mean_ms", "itl_median_ms"),
        "e2e": ("e2e_mean_ms", "e2e_median_ms"),
    }
    keep = set(cols[key])
    return {c: "" for cs in cols.values() for c in cs if c not in keep}


def json_report(
    rows: Sequence[dict[str, str]],
    skipped: Mapping[str, str],
    results: Mapping[str, Result],
) -> dict[str, Any]:
    """The ``--json`` document: one entry per row of the file, in its order (``rows`` as
    :func:`screen` returned them, ids unique)."""
    out = []
    for raw in rows:
        rid = raw["id"]
        measured = _lenient_measured(raw)
        entry: dict[str, Any] = {"id": rid, "skipped": skipped.get(rid)}
        entry["measured"] = {
            JSON_KEYS[k]: (None if v is None else v[1]) for k, v in measured.items()
        }
        stat = {JSON_KEYS[k]: (None if v is None else v[0]) for k, v in measured.items()}
        predicted: dict[str, float | None] = {v: None for v in JSON_KEYS.values()}
        if rid in results:
            sc, _metrics, res = results[rid]
            for k, (s, v) in compare(sc, res)[1].items():
                predicted[JSON_KEYS[k]] = round(v, 3) if math.isfinite(v) else None
                stat[JSON_KEYS[k]] = stat[JSON_KEYS[k]] or f"{s} (row states none)"
            entry["settings"] = dict(sc.settings)
            entry["assumed"] = list(sc.assumed)
            if sc.ignored:
                entry["not_simulated"] = list(sc.ignored)
        entry["predicted"] = predicted
        entry["stat"] = stat
        out.append(entry)
    return {"rows": out}


def fitted_metrics(row_id: str, metrics: Sequence[Metric]) -> list[Metric]:
    """The metrics the fit and the summaries count: all but TTFT/E2E of overloaded points."""
    return [m for m in metrics if not (row_id in OVERLOADED and m.name in ("ttft", "e2e"))]


def log_errors(row_id: str, metrics: Sequence[Metric]) -> list[float]:
    out = []
    for m in fitted_metrics(row_id, metrics):
        if m.simulated > 0 and math.isfinite(m.simulated):
            out.append(abs(math.log(m.simulated / m.measured)))
        else:
            out.append(5.0)
    return out


def _replay_metrics(
    job: tuple[dict[str, str], Calibration, int | None],
) -> tuple[list[Metric], float]:
    """A row's metrics and the CPU seconds its replay took (in whichever process ran it)."""
    c0 = time.process_time()
    metrics = replay(*job)[1]
    return metrics, time.process_time() - c0


class Replays:
    """Memoised replays: (row id, constants, cap) → the row's metrics, and a counter of misses.

    With a process pool, a miss replays every row not yet replayed under those constants at
    once (a fit scores every training row of a candidate, so they are all about to be asked for).
    """

    def __init__(self, rows: Sequence[dict[str, str]], pool: Executor | None = None) -> None:
        self.rows = {r["id"]: r for r in rows}
        self.cache: dict[tuple[str, Calibration, int | None], list[Metric]] = {}
        self.runs = 0
        self.cpu_s = 0.0  # CPU seconds of every replay so far, summed over processes
        self.pool = pool

    def metrics(self, row_id: str, calibration: Calibration, cap: int | None) -> list[Metric]:
        key = (row_id, calibration, cap)
        if key not in self.cache:
            todo = [row_id]
            if self.pool is not None:
                todo += [
                    r for r in self.rows if r != row_id and (r, calibration, cap) not in self.cache
                ]
            jobs = [(self.rows[r], calibration, cap) for r in todo]
            done = self.pool.map(_replay_metrics, jobs) if self.pool else map(_replay_metrics, jobs)
            for r, (metrics, cpu_s) in zip(todo, done, strict=True):
                self.cache[(r, calibration, cap)] = metrics
                self.runs += 1
                self.cpu_s += cpu_s
        return self.cache[key]

    def loss(self, cap: int | None) -> Callable[[Calibration, str], list[float]]:
        def row_loss(calibration: Calibration, row_id: str) -> list[float]:
            return log_errors(row_id, self.metrics(row_id, calibration, cap))

        return row_loss


GRID: dict[str, list[float]] = {
    "eta_bw": [0.6, 0.65, 0.7, 0.75, 0.8, 0.85],
    "eta_fl": [0.4, 0.45, 0.5, 0.55, 0.6],
    "overhead_s": [1e-3, 1.5e-3, 2e-3, 3e-3],
    "overhead_per_seq_s": [0.0, 10e-6, 20e-6, 40e-6],
    "allreduce_s": [10e-6, 20e-6, 30e-6],
    "request_overhead_s": [0.0, 10e-3, 20e-3],
}
COLS = ("thr", "ttft", "tpot", "e2e")
TARGETS = {"thr": 0.25, "ttft": 0.35, "tpot": 0.35, "e2e": 0.35}


def show(c: Calibration) -> str:
    return (
        f"η_bw {c.eta_bw:g}, η_fl {c.eta_fl:g}, overhead {1e3 * c.overhead_s:g} ms, "
        f"per seq {1e6 * c.overhead_per_seq_s:g} µs, all-reduce {1e6 * c.allreduce_s:g} µs, "
        f"request overhead {1e3 * c.request_overhead_s:g} ms"
    )


def _progress(p: int, name: str, best: Calibration, obj: float) -> None:
    print(f"  pass {p} {name}: {getattr(best, name):g} objective {obj:.4f}", flush=True)


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _key(m: Metric) -> str:
    return "tpot" if m.name == "itl" else m.name


def print_table(results: Sequence[Result], label: str, skipped: Mapping[str, str]) -> None:
    print(f"Per row, {label}:")
    head = (
        f"{'id':4} {'setup':34} {'load':>9} | "
        + " | ".join(f"{c + ' meas':>10} {'sim':>9} {'err':>6}" for c in COLS)
        + " | notes"
    )
    print(head)
    print("-" * len(head))
    for sc, metrics, res in results:
        dp = f"{sc.instances}×" if sc.instances > 1 else ""
        gpu = sc.config.gpu.name.split("-")[0]
        setup = (
            f"{sc.engine.split()[-1].lower()} {dp}{sc.config.tp}x{gpu} "
            f"{sc.config.model.name.replace('llama-', 'L')} {sc.settings['precision']}"
        )
        load = {
            "poisson": f"{sc.load:g} qps",
            "all_at_once": "all@0",
            "closed": f"c={sc.load:g}",
            "batch": f"b={sc.load:g}",
        }[sc.kind]
        cells = []
        by = {_key(m): m for m in metrics}
        for c in COLS:
            m = by.get(c)
            if m is None:
                cells.append(f"{'':>10} {'':>9} {'':>6}")
                continue
            tag = "" if m.name != "itl" else "i"
            tag += {"mean": "", "median": "~", "total": ""}[m.stat]
            cells.append(
                f"{_fmt(m.measured) + tag:>10} {_fmt(m.simulated):>9} {100 * m.error:>+5.0f}%"
            )
        notes = []
        if sc.id in OVERLOADED:
            notes.append("overloaded")
        if sc.assumed:
            notes.append(f"{len(sc.assumed)} assumed")
        preemptions = sum(r.stats.preemptions for _g, r in res)
        if preemptions:
            notes.append(f"{preemptions} preemptions")
        notes.append(f"peak batch {max(r.peak_running for _g, r in res)}")
        print(f"{sc.id:4} {setup:34} {load:>9} | " + " | ".join(cells) + " | " + ", ".join(notes))
    for rid, reason in skipped.items():
        print(f"{rid:4} skipped: {reason}")
    print()
    print("units: thr = output tokens/s (whole system); ttft, tpot, e2e in ms; '~' = median,")
    print("otherwise mean; 'i' = the source reports ITL (compared with the sim's pooled ITL).")
    print("'N assumed': settings or lengths the row does not state (--json lists them).")
    print()


def print_summary(per_row: Sequence[tuple[str, Sequence[Metric]]], label: str) -> None:
    """Median |error| per metric, all points and without overloaded latency, and the fit's
    objective (mean |log error| over the metrics the fit counts)."""
    per_metric: dict[str, list[float]] = {c: [] for c in COLS}
    per_metric_fit: dict[str, list[float]] = {c: [] for c in COLS}
    logs: list[float] = []
    for row_id, metrics in per_row:
        for m in metrics:
            per_metric[_key(m)].append(abs(m.error))
        for m in fitted_metrics(row_id, metrics):
            per_metric_fit[_key(m)].append(abs(m.error))
        logs += log_errors(row_id, metrics)
    print(f"{label}:")
    for c in COLS:
        errs, errs_fit = per_metric[c], per_metric_fit[c]
        if not errs:
            continue
        within = sum(1 for e in errs_fit if e <= TARGETS[c])
        print(
            f"  median |error| {c:5}: {100 * statistics.median(errs):5.1f}% "
            f"over {len(errs)} points;"
            f" excluding overloaded latency: {100 * statistics.median(errs_fit):5.1f}% "
            f"({within}/{len(errs_fit)} within ±{100 * TARGETS[c]:.0f}%)"
        )
    print(f"  mean |log(sim/measured)| (the fit's objective): {statistics.fmean(logs):.3f}")
    print()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="measurements file (CSV)")
    ap.add_argument("--json", type=Path, default=None, help="write every row's replay here")
    ap.add_argument("--fit", action="store_true", help="refit on every row first, then the table")
    ap.add_argument("--fit-only", default="", help="comma-separated constants to fit (default all)")
    ap.add_argument("--passes", type=int, default=1, help="coordinate-descent passes")
    ap.add_argument("--fit-cap", type=int, default=300, help="requests per point while fitting")
    ap.add_argument("--cap", type=int, default=None, help="at most this many requests per point")
    ap.add_argument("--only", default="", help="comma-separated ids (e.g. M01,M27)")
    ap.add_argument(
        "--kfold",
        default=None,
        help="folds for the out-of-sample figure, comma-separated for several (0: skip; "
        "default 5, or 0 with --json)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the fold assignment")
    ap.add_argument("--jobs", type=int, default=1, help="processes replaying rows while fitting")
    args = ap.parse_args(argv)
    if args.cap is not None and args.cap < 1:
        ap.error("--cap must be ≥ 1")
    try:
        ks = [int(k) for k in (args.kfold or ("0" if args.json else "5")).split(",") if int(k)]
    except ValueError:
        ap.error(f"--kfold {args.kfold!r}: comma-separated integers")
    try:
        all_rows = load_rows(args.csv)
    except FileNotFoundError:
        print(f"measurements file not found: {args.csv} (use --csv)", file=sys.stderr)
        return 2
    except (UnicodeDecodeError, csv.Error, OSError) as exc:
        print(f"cannot read {args.csv} as CSV: {exc}", file=sys.stderr)
        return 2
    header = set(all_rows[0]) if all_rows else set(COLUMNS)
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        print(f"{args.csv}: columns missing, read as empty: {', '.join(missing)}", file=sys.stderr)
    if args.only:
        keep = set(args.only.split(","))
        all_rows = [r for r in all_rows if cell(r, "id") in keep]
    every, rows, skipped = screen(all_rows, args.cap)
    ids = [r["id"] for r in rows]
    grid = GRID
    if args.fit_only:
        grid = {k: v for k, v in GRID.items() if k in args.fit_only.split(",")}
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 and (ks or args.fit) else None
    replays = Replays(rows, pool)
    calib = perf_model.DEFAULT_CALIBRATION
    label = "in-sample (shipped constants, fitted on all the published rows)"
    if args.fit and ids:
        print(
            f"refit on all {len(ids)} rows from the prior ({show(calibration_fit.PRIOR)}):",
            flush=True,
        )
        t0 = time.perf_counter()
        f = calibration_fit.fit(
            replays.loss(args.fit_cap), ids, calibration_fit.PRIOR, grid, args.passes, _progress
        )
        print(f"fitted in {time.perf_counter() - t0:.0f} s: {show(f.calibration)}\n")
        calib = f.calibration
        label = "in-sample (refit on all these rows)"
    t0, c0 = time.perf_counter(), time.process_time()
    results: list[Result] = []
    for row in rows:
        try:
            results.append(replay(row, calib, args.cap))
        except Exception as exc:  # never a crash on a row: report it instead
            skipped[row["id"]] = f"replay failed: {type(exc).__name__}: {exc}"
    rows = [r for r in rows if r["id"] not in skipped]
    ids = [r["id"] for r in rows]
    print(f"calibration: {show(calib)}")
    print(
        f"{len(results)} points replayed, {len(skipped)} skipped, in "
        f"{time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU "
        "(virtual time)\n"
    )
    print_table(results, f"{label} error", skipped)
    shipped = [(sc.id, metrics) for sc, metrics, _res in results]
    if any(metrics for _i, metrics in shipped):
        print_summary(shipped, f"Summary, {label}")
    if args.json is not None:
        doc = json_report(every, skipped, {sc.id: r for r in results for sc in (r[0],)})
        args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", "utf-8")
        print(f"wrote {args.json} ({len(every)} rows, {len(skipped)} skipped)")
    fit_ids = [sc.id for sc, metrics, _res in results if metrics]
    if ks and len(fit_ids) >= 2:
        cross_validation(fit_ids, grid, replays, args, ks, shipped, label)
    elif ks:
        print("cross-validation needs at least 2 rows with measured values; skipped")
    if pool is not None:
        pool.shutdown()
    return 0


def cross_validation(
    ids: Sequence[str],
    grid: dict[str, list[float]],
    replays: Replays,
    args: argparse.Namespace,
    ks: Sequence[int],
    in_sample: Sequence[tuple[str, Sequence[Metric]]],
    in_label: str,
) -> None:
    """The refit on all rows and the k-fold refits (same procedure, same prior), then each
    row replayed in full with the constants fitted without it."""
    loss = replays.loss(args.fit_cap)
    print(
        f"Refit on all {len(ids)} rows from the prior ({show(calibration_fit.PRIOR)}), "
        f"cap {args.fit_cap}:"
    )
    t0, c0, runs0 = time.perf_counter(), replays.cpu_s, replays.runs
    full = calibration_fit.fit(loss, ids, calibration_fit.PRIOR, grid, args.passes, _progress)
    t_full, runs_full = time.perf_counter() - t0, replays.runs - runs0
    c_full = replays.cpu_s - c0
    print(
        f"  took {t_full:.0f} s wall, {c_full:.0f} s CPU ({full.evaluations} candidate sets "
        "of constants, "
        f"{runs_full} replays): {show(full.calibration)}\n",
        flush=True,
    )
    refit = [(r, replays.metrics(r, full.calibration, args.cap)) for r in ids]
    print_summary(refit, f"Summary, in-sample (refit on all {len(ids)} rows, same procedure)")
    times = [f"{t_full:.0f} s wall / {c_full:.0f} s CPU on all rows"]
    for k in ks:
        times.append(k_fold(ids, grid, replays, args, min(k, len(ids)), in_sample, in_label))
    print(f"refit time (cap {args.fit_cap}, {args.passes} passes): " + "; ".join(times))


def k_fold(
    ids: Sequence[str],
    grid: dict[str, list[float]],
    replays: Replays,
    args: argparse.Namespace,
    k: int,
    in_sample: Sequence[tuple[str, Sequence[Metric]]],
    in_label: str,
) -> str:
    loss = replays.loss(args.fit_cap)
    runs0 = replays.runs
    print(f"{k}-fold refits (seed {args.seed}), each from the prior on the other folds' rows:")
    t0, c0 = time.perf_counter(), replays.cpu_s

    def on_fold(i: int, held: tuple[str, ...]) -> None:
        print(f" fold {i}/{k}: holds out {', '.join(held)}", flush=True)

    cv = calibration_fit.cross_validate(
        loss, ids, calibration_fit.PRIOR, grid, k, args.seed, args.passes, on_fold, _progress
    )
    t_cv, runs_cv = time.perf_counter() - t0, replays.runs - runs0
    c_cv = replays.cpu_s - c0
    for i, fold in enumerate(cv.folds, start=1):
        print(f"  fold {i}: {show(fold.fit.calibration)}")
    print(
        f"  {k} refits took {t_cv:.0f} s wall, {c_cv:.0f} s CPU in all ({runs_cv} new replays; "
        "replays of the same row under the same constants are shared with the refit on all "
        "rows and between folds)\n",
        flush=True,
    )
    held = {r: replays.metrics(r, cv.calibration_for(r), args.cap) for r in ids}
    print(f"Per row, out-of-sample ({k}-fold, seed {args.seed}): sim / measured − 1 replayed with")
    print(f"the constants fitted on the other folds [{in_label} error]:")
    print(f"{'id':4} {'fold':>4} | " + " | ".join(f"{c:>13}" for c in COLS))
    ins = {r: {_key(m): m for m in ms} for r, ms in in_sample}
    for r in ids:
        by = {_key(m): m for m in held[r]}
        cells = []
        for c in COLS:
            m, m0 = by.get(c), ins.get(r, {}).get(c)
            cells.append(
                f"{100 * m.error:>+5.0f}% [{100 * m0.error:+4.0f}%]" if m and m0 else f"{'':>13}"
            )
        note = " overloaded" if r in OVERLOADED else ""
        print(f"{r:4} {cv.fold_of(r):>4} | " + " | ".join(cells) + note)
    print()
    print_summary(
        [(r, held[r]) for r in ids],
        f"Summary, out-of-sample ({k}-fold, seed {args.seed}: each row predicted by constants "
        "fitted without it)",
    )
    return f"{t_cv:.0f} s wall / {c_cv:.0f} s CPU for the {k} fold refits ({runs_cv} new replays)"


if __name__ == "__main__":
    sys.exit(main())
