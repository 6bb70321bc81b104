"""What a benchmark is asked to do: ``BenchConfig``, validated, with specific error messages."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from analysis.precision import check_kv_cache_dtype, check_precision
from collectors.loadgen.arrivals import ARRIVALS
from collectors.redact import redact
from errors import InputError

APIS = ("chat", "completions")
TRANSPORTS = ("lean", "httpx")
#: where read instants come from: the kernel's receive stamp when the platform gives one, else
#: the event loop's read (auto); kernel (an error where unavailable); loop (always the loop's)
TIMESTAMPS = ("auto", "kernel", "loop")
#: a --group name: it names the shared run ids, so the characters of a run id
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

#: Engine flags of each framework → the normalised vocabulary (DESIGN §6).
ENGINE_PARAM_ALIASES: dict[str, str] = {
    "max_batch_size": "max_batch_size",
    "max_num_seqs": "max_batch_size",
    "max_running_requests": "max_batch_size",
    "np": "max_batch_size",
    "parallel": "max_batch_size",
    "kv_memory_fraction": "kv_memory_fraction",
    "gpu_memory_utilization": "kv_memory_fraction",
    "mem_fraction_static": "kv_memory_fraction",
    "kv_cache_free_gpu_memory_fraction": "kv_memory_fraction",
    "max_batched_tokens": "max_batched_tokens",
    "max_num_batched_tokens": "max_batched_tokens",
    "chunked_prefill_size": "max_batched_tokens",
    "max_num_tokens": "max_batched_tokens",
    "b": "max_batched_tokens",
    "batch_size": "max_batched_tokens",
    "block_size": "block_size",
    "page_size": "block_size",
    "tokens_per_block": "block_size",
    "prefix_caching": "prefix_caching",
    "enable_prefix_caching": "prefix_caching",
    "max_model_len": "max_model_len",
    "context_length": "max_model_len",
    "max_seq_len": "max_model_len",
    # llama.cpp's -c/--ctx-size is the TOTAL context its -np slots share (each gets ctx_size /
    # np), not a request's limit: its own key, never max_model_len
    "ctx_size": "ctx_size",
    "c": "ctx_size",
    "tensor_parallel": "tensor_parallel",
    "tensor_parallel_size": "tensor_parallel",
    "tp": "tensor_parallel",
    "tp_size": "tensor_parallel",
}


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    try:
        return int(low)
    except ValueError:
        pass
    try:
        v = float(low)
        return v if math.isfinite(v) else text
    except ValueError:
        return text.strip()


def normalise_engine_params(items: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    """``["--max-num-seqs=64", "gpu_memory_utilization=0.9"]`` → normalised keys and typed values.

    Known engine flags map onto the shared vocabulary (``max_batch_size``,
    ``kv_memory_fraction``, ``max_batched_tokens``, ``block_size``, ``prefix_caching``,
    ``max_model_len``, ``tensor_parallel``); other keys are kept, in snake_case.
    """
    pairs: list[tuple[str, Any]] = []
    if isinstance(items, Mapping):
        pairs = [(k, _value(v) if isinstance(v, str) else v) for k, v in items.items()]
    else:
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key.strip().strip("-"):
                raise InputError(
                    f"--engine-param {item!r} is not KEY=VALUE",
                    hint="e.g. --engine-param max_batch_size=64 --engine-param prefix_caching=on",
                )
            pairs.append((key, _value(value)))
    out: dict[str, Any] = {}
    for key, value in pairs:
        k = re.sub(r"[^a-z0-9]+", "_", str(key).strip().lstrip("-").lower()).strip("_")
        out[ENGINE_PARAM_ALIASES.get(k, k)] = value
    return out


#: The most streams (requests in flight) one ``servescope bench`` level may hold. Each stream
#: costs the measuring process a socket and a task; far beyond this one process cannot keep
#: its timestamps honest anyway. For more load, run several bench processes (DESIGN §10).
MAX_CONCURRENCY = 10_000

#: What --concurrency / --rate accept (the help and the error messages say the same).
LIST_FORMS = "comma- or space-separated, or the flag repeated"


def parse_list(
    text: str | Sequence[str], *, flag: str, kind: type[int] | type[float]
) -> tuple[Any, ...]:
    """``"1,8,32"``, ``["1", "8,32"]`` (space-separated or repeated flags) → (1, 8, 32).

    Every item must be a value: an empty one (``1,,2``, a trailing comma) is an error, as is a
    value given twice (each value is one level, one stored run). Errors name the flag, the item
    and what is accepted.
    """
    texts = [text] if isinstance(text, str) else list(text)
    whole = kind is int
    example = "1,8,32" if whole else "2,4,8"
    what = "whole numbers ≥ 1" if whole else "numbers > 0"
    hint = f"give {what}, {LIST_FORMS}: e.g. {flag} {example}"
    given = " ".join(texts)
    values: list[Any] = []
    for chunk in texts:
        parts = chunk.split(",")
        for i, raw in enumerate(parts, 1):
            part = raw.strip()
            if not part:
                where = f"item {i} of {chunk!r}" if len(parts) > 1 else "a value"
                raise InputError(f"{flag} {given!r}: {where} is empty", hint=hint)
            try:
                v = kind(part)
            except ValueError:
                if whole:
                    try:
                        float(part)
                        reason = "is not a whole number"
                    except ValueError:
                        reason = "is not a number"
                else:
                    reason = "is not a number"
                raise InputError(f"{flag} {given!r}: {part!r} {reason}", hint=hint) from None
            if not v > 0 or (isinstance(v, float) and not math.isfinite(v)):
                raise InputError(f"{flag} {given!r}: every value must be > 0, got {part!r}")
            if v in values:
                raise InputError(
                    f"{flag} {given!r}: {part} is given twice (each value is one run)", hint=hint
                )
            values.append(v)
    if not values:
        raise InputError(f"{flag} needs at least one value", hint=hint)
    return tuple(values)


@dataclass(frozen=True)
class LoadLevel:
    kind: str  # "concurrency" | "rate" | "trace"
    value: float  # streams, requests/s, or the trace's time scale (--trace-speed)

    @property
    def label(self) -> str:
        if self.kind == "concurrency":
            return f"c={int(self.value)}"
        if self.kind == "trace":
            return f"trace ×{self.value:g}"
        return f"rate={self.value:g}/s"

    @property
    def slug(self) -> str:
        if self.kind == "concurrency":
            return f"c{int(self.value)}"
        if self.kind == "trace":
            return f"trace{self.value:g}"
        return f"r{self.value:g}"


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard 2/3`` → (1, 3): this host's share (numbered from 1 on the command line, from 0
    inside) of a run that N hosts make together."""
    index, sep, count = text.strip().partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not sep or n < 1 or not 1 <= i <= n:
        raise InputError(
            f"--shard {text!r} is not I/N with 1 ≤ I ≤ N",
            hint="e.g. --shard 1/3 on the first of three hosts, 2/3 and 3/3 on the others",
        )
    return i - 1, n


@dataclass(frozen=True)
class BenchConfig:
    """One ``servescope bench`` invocation: a sweep of load levels, one stored run each.

    Exactly one of ``concurrency`` / ``rate`` / ``trace``. Without a trace, exactly one of
    ``workload`` / ``dataset`` (or a ready ``workload_spec`` entry) and one of ``requests`` /
    ``duration_s``; a trace brings its own lengths, and ``requests`` / ``duration_s`` only cut it.
    """

    endpoint: str
    api: str = "chat"
    model: str | None = None
    workload: str | None = None
    dataset: str | None = None
    workload_spec: Mapping[str, Any] | None = None  # a workload entry given directly
    concurrency: tuple[int, ...] = ()
    rate: tuple[float, ...] = ()
    arrival: str = "poisson"
    burstiness: float | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    max_tokens: int | None = None
    ignore_eos: bool = False
    slo: str | None = None
    framework: str | None = None
    #: weight precision / quantisation and KV-cache dtype (``analysis.precision`` vocabulary)
    precision: str | None = None
    kv_cache_dtype: str | None = None
    engine_params: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None
    seed: int = 0
    #: measuring processes; None = as many as the load needs and free cores allow (cores.py)
    workers: int | None = None
    #: a production trace to replay (``--trace``): its arrivals and lengths (traces.py)
    trace: str | None = None
    trace_format: str | None = None  # None: recognised from the file
    trace_speed: float = 1.0  # 2 = twice as fast (arrival gaps halved)
    trace_window: tuple[float, float] | None = None  # seconds of the trace, [start, end)
    #: one run from many hosts: this host's (index from 0, count) and the group naming the run
    shard: tuple[int, int] | None = None
    group: str | None = None
    host_name: str | None = None  # default: socket.gethostname()
    timestamps: str = "auto"  # TIMESTAMPS
    api_key_env: str | None = None
    timeout_s: float = 600.0
    # live collection during each run (collectors/watch.py): "auto" = the endpoint's /metrics
    # when it answers as an engine; None or "off" = none; else a URL
    metrics_url: str | None = "auto"
    dcgm_urls: tuple[str, ...] = ()
    gpu: bool | None = None  # NVML: None = when present, True = required (noted when absent)
    collect_interval_s: float = 1.0
    # Python-API extras (not command-line flags)
    run_id: str | None = None  # base of the run ids (one per level: f"{run_id}-{slug}")
    sweep_id: str | None = None
    tags: tuple[str, ...] = ()
    notes: str | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None
    calibrate: bool = True
    in_process: bool = False  # measure in this process (tests, injected transports)
    transport: str = "lean"
    flush_interval_s: float = 2.0
    # set by validated(): a level whose streams were capped at --requests → the values asked
    concurrency_requested: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def validated(self) -> BenchConfig:
        if not self.endpoint or not re.match(r"^https?://[^/]+", self.endpoint.strip()):
            raise InputError(
                f"--endpoint {redact(self.endpoint)!r} is not an http(s) URL",
                hint="e.g. --endpoint http://127.0.0.1:8000 (with or without /v1)",
            )
        if self.api not in APIS:
            raise InputError(f"--api {self.api!r} unknown; choose one of: {', '.join(APIS)}")
        sources = [x for x in (self.workload, self.dataset, self.workload_spec) if x]
        loads = sum(bool(x) for x in (self.concurrency, self.rate, self.trace))
        if loads != 1:
            raise InputError(
                "give exactly one of --concurrency 1,8,32 (closed loop), --rate 2,4,8 "
                "(requests/s, open loop) or --trace FILE (a production trace's arrivals)"
            )
        if self.trace:
            self._check_trace(sources)
        elif self.trace_format or self.trace_window is not None or self.trace_speed != 1.0:
            raise InputError("--trace-format/--trace-speed/--trace-window apply to --trace FILE")
        elif len(sources) != 1:
            raise InputError(
                "give exactly one of --workload NAME or --dataset FILE",
                hint="workloads: short-in-short-out, long-in-short-out, long-in-long-out, "
                "mixed, shared-prefix, multi-turn",
            )
        if self.rate and any(not (r > 0 and math.isfinite(r)) for r in self.rate):
            raise InputError(f"--rate values must be > 0 requests/s, got {self.rate}")
        if self.arrival not in ARRIVALS:
            raise InputError(
                f"--arrival {self.arrival!r} unknown; choose one of: {', '.join(ARRIVALS)}"
            )
        if self.burstiness is not None:
            if self.arrival != "gamma":
                raise InputError(
                    "--burstiness applies to --arrival gamma only "
                    f"(got --arrival {self.arrival}); poisson is gamma with burstiness 1"
                )
            if not self.burstiness > 0:
                raise InputError(f"--burstiness must be > 0, got {self.burstiness}")
        if self.concurrency and self.arrival != "poisson":
            raise InputError("--arrival applies to --rate runs, not to --concurrency")
        if self.requests is not None and self.duration_s is not None:
            raise InputError("give at most one of --requests N or --duration S")
        if not self.trace and self.requests is None and self.duration_s is None:
            raise InputError("give exactly one of --requests N or --duration S")
        if self.requests is not None and self.requests < 1:
            raise InputError(f"--requests must be ≥ 1, got {self.requests}")
        concurrency, requested = self._capped_concurrency()
        if self.duration_s is not None and not self.duration_s > 0:
            raise InputError(f"--duration must be > 0 seconds, got {self.duration_s}")
        if self.warmup < 0:
            raise InputError(f"--warmup must be ≥ 0, got {self.warmup}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InputError(f"--max-tokens must be ≥ 1, got {self.max_tokens}")
        if self.workers is not None and self.workers < 1:
            raise InputError(f"--workers must be ≥ 1 (or auto), got {self.workers}")
        if self.timestamps not in TIMESTAMPS:
            raise InputError(
                f"--timestamps {self.timestamps!r} unknown; choose one of: {', '.join(TIMESTAMPS)}"
            )
        if self.timestamps == "kernel":
            self._check_kernel_stamps()
        self._check_shard()
        if not self.timeout_s > 0:
            raise InputError(f"--timeout must be > 0 seconds, got {self.timeout_s}")
        if not self.collect_interval_s >= 0.25:
            raise InputError(f"--collect-interval must be ≥ 0.25 s, got {self.collect_interval_s}")
        for url in [*self.dcgm_urls, *([self.metrics_url] if self.metrics_url else [])]:
            if url not in ("auto", "off") and not re.match(r"^https?://[^/]+", url):
                raise InputError(
                    f"metrics URL {redact(url)!r} is not an http(s) URL",
                    hint="e.g. --metrics-url http://127.0.0.1:8000/metrics, or auto / off",
                )
        if self.transport not in TRANSPORTS:
            raise InputError(f"transport {self.transport!r} unknown; choose one of: {TRANSPORTS}")
        return replace(
            self,
            precision=check_precision(self.precision),
            kv_cache_dtype=check_kv_cache_dtype(self.kv_cache_dtype),
            concurrency=concurrency,
            concurrency_requested=requested,
            engine_params=normalise_engine_params(dict(self.engine_params)),
        )

    def _check_trace(self, sources: list[Any]) -> None:
        if sources:
            raise InputError(
                "--trace gives every request's lengths: drop --workload/--dataset/--workload-file"
            )
        if self.arrival != "poisson" or self.burstiness is not None:
            raise InputError("--arrival/--burstiness apply to --rate runs; a trace has its own")
        if not (self.trace_speed > 0 and math.isfinite(self.trace_speed)):
            raise InputError(
                f"--trace-speed must be a number > 0 (2 = twice as fast), got {self.trace_speed}"
            )
        if self.trace_window is not None:
            start, end = self.trace_window
            if not (0 <= start < end and math.isfinite(end)):
                raise InputError(
                    f"--trace-window {start:g}s:{end:g}s is not START:END with 0 ≤ START < END",
                    hint="e.g. --trace-window 10m:20m (from the trace's first arrival)",
                )

    def _check_kernel_stamps(self) -> None:
        """``--timestamps kernel`` where reads cannot carry kernel stamps: said before measuring."""
        from urllib.parse import urlsplit

        from collectors.loadgen.rx_stamps import kernel_unavailable_reason

        why = kernel_unavailable_reason(urlsplit(self.endpoint.strip()).scheme)
        if why is None and self.transport == "httpx":
            why = "the httpx transport reads through httpcore, which keeps no receive stamps"
        if why is not None:
            raise InputError(
                f"--timestamps kernel is not available here: {why}",
                hint="use --timestamps auto (kernel stamps where available, else the loop's, "
                "recorded on the run) or --timestamps loop",
            )

    def _check_shard(self) -> None:
        if self.shard is None:
            if self.group is not None:
                raise InputError("--group names a run made by several hosts: give --shard I/N too")
            return
        index, count = self.shard
        if not 0 <= index < count:
            raise InputError(f"shard {index} of {count}: the index must be 0 ≤ I < N")
        if not self.group:
            raise InputError(
                "--shard needs --group NAME: the name every host of the run gives",
                hint="e.g. --shard 1/3 --group llama-8b-peak on each of the three hosts",
            )
        if not _GROUP_RE.match(self.group):
            raise InputError(
                f"--group {self.group!r}: use 1–64 letters, digits, '.', '_' or '-' (it names "
                "the run ids), starting with a letter or digit"
            )
        if self.run_id is not None:
            raise InputError("a sharded run's id comes from --group; do not set run_id too")

    def _capped_concurrency(self) -> tuple[tuple[int, ...], dict[int, tuple[int, ...]]]:
        """The levels' stream counts, each at most ``requests`` (streams beyond the number of
        requests would never send one) and then at most :data:`MAX_CONCURRENCY` (an error).

        Levels that become equal merge into one; the second value maps a capped level to the
        values asked for it (kept through repeated validation), for the run's client_params.
        """
        if any(isinstance(c, bool) or int(c) != c or c < 1 for c in self.concurrency):
            raise InputError(
                f"--concurrency values must be whole numbers ≥ 1, got {self.concurrency}"
            )
        asked_by_level: dict[int, set[int]] = {}
        for c in (int(c) for c in self.concurrency):
            level = min(c, self.requests) if self.requests is not None else c
            if level > MAX_CONCURRENCY:
                raise InputError(
                    f"--concurrency {c:,} is above the maximum of {MAX_CONCURRENCY:,} streams "
                    "per servescope bench",
                    hint="for more load run several bench processes against the endpoint; "
                    "with --requests N, streams beyond N are never used (capped at N)",
                )
            asked_by_level.setdefault(level, set()).update(self.concurrency_requested.get(c, (c,)))
        return tuple(asked_by_level), {
            level: tuple(sorted(asked))
            for level, asked in asked_by_level.items()
            if asked != {level}
        }

    def capped_note(self, level: LoadLevel) -> dict[str, Any] | None:
        """For the run's client_params: how a level's streams were capped, or None."""
        if level.kind != "concurrency":
            return None
        asked = self.concurrency_requested.get(int(level.value))
        if not asked:
            return None
        return {
            "requested": list(asked),
            "streams": int(level.value),
            "reason": f"--requests {self.requests}: streams beyond the number of requests "
            "are never used",
        }

    def capped_lines(self) -> list[str]:
        """One line per capped level, for the command line."""
        return [
            f"--concurrency {', '.join(f'{a:,}' for a in asked)} capped at {level} streams "
            f"(--requests {self.requests}: more streams would never send a request)"
            for level, asked in self.concurrency_requested.items()
        ]

    def levels(self) -> list[LoadLevel]:
        if self.trace:
            return [LoadLevel("trace", float(self.trace_speed))]
        if self.concurrency:
            return [LoadLevel("concurrency", float(c)) for c in self.concurrency]
        return [LoadLevel("rate", float(r)) for r in self.rate]

    @property
    def workload_label(self) -> str:
        if self.trace:
            return "trace:" + self.trace.replace("\\", "/").rsplit("/", 1)[-1]
        if self.workload:
            return self.workload
        if self.dataset:
            return "dataset:" + self.dataset.replace("\\", "/").rsplit("/", 1)[-1]
        return str((self.workload_spec or {}).get("name", "custom"))
