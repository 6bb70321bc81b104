"""``servescope bench``: the command line of the load generator."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from analysis.precision import KV_CACHE_DTYPES, WEIGHT_PRECISIONS
from collectors.loadgen.arrivals import ARRIVALS
from collectors.loadgen.config import (
    APIS,
    LIST_FORMS,
    MAX_CONCURRENCY,
    TIMESTAMPS,
    BenchConfig,
    normalise_engine_params,
    parse_list,
    parse_shard,
)
from collectors.loadgen.workloads import load_workload_file
from errors import STOP_SIGNALS, ExitCode, InputError

EPILOG = """\
examples:
  servescope bench --endpoint http://127.0.0.1:8000 --workload mixed \\
      --concurrency 1,8,32 --requests 200
  servescope bench --endpoint http://127.0.0.1:8000/v1 --workload short-in-short-out \\
      --rate 2,4,8 --arrival gamma --burstiness 0.5 --duration 60 --warmup 20
  servescope bench --endpoint http://127.0.0.1:8000 --workload-file prod.toml \
      --concurrency 8 --requests 500      (prod.toml: `servescope workload from-metrics`)
  servescope bench --endpoint http://127.0.0.1:8000 --trace AzureLLMInferenceTrace_conv.csv \
      --trace-speed 2 --trace-window 10m:20m      (a production trace's arrivals and lengths)
  servescope bench --endpoint http://10.0.0.5:8000 --workload mixed --concurrency 3000 \
      --duration 300 --shard 1/3 --group peak-3k --db postgresql://...   (on each of 3 hosts)
One run is stored per load level. Ctrl-C, SIGTERM or SIGHUP stops cleanly, keeping what completed.
exit codes: 0 every run completed · 2 bad input, endpoint or store unusable (nothing measured)
  · 3 a run failed (no request succeeded, or more than --max-error-rate of them failed)
  · 4 the store stayed locked: rows spooled (the message says where; run
  `servescope db ingest-spool --db URL` once the store is free) · 130 Ctrl-C · 143 SIGTERM
  · 129 SIGHUP.
Run ids (saved or spooled) go to stdout, one per line, in every case.
List flags take values comma- or space-separated, or repeated: --concurrency 1,8 32 is
--concurrency 1 --concurrency 8 --concurrency 32.
"""


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number ≥ ``minimum``, with a message that says so."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            try:
                float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{text!r} is not a number: give a whole number ≥ {minimum}"
                ) from None
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number: give a whole number ≥ {minimum}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: give a whole number ≥ {minimum}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in some messages
    return parse


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``bench`` subcommand (``set_defaults(func=run)``)."""
    p = subparsers.add_parser(
        "bench",
        help="measure an OpenAI-compatible endpoint under load and store the runs",
        description="Measure an OpenAI-compatible endpoint (streaming) under load; one run "
        "is stored per load level.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--endpoint", required=True, metavar="URL", help="base URL, e.g. http://127.0.0.1:8000"
    )
    p.add_argument("--api", choices=APIS, default="chat", help="chat (default) or completions")
    p.add_argument("--model", metavar="M", help="model name (default: the first of /v1/models)")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--workload", metavar="NAME", help="a workload of the catalog (seeds/workloads.toml)"
    )
    src.add_argument(
        "--dataset", metavar="FILE", help="JSONL prompts/messages or a ShareGPT-style JSON file"
    )
    src.add_argument(
        "--workload-file",
        metavar="FILE.toml",
        help="a workload spec file: one [[workloads]] entry as in seeds/workloads.toml, e.g. "
        "written by `servescope workload from-metrics` (production's length mix)",
    )
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument(
        "--concurrency",
        action="extend",
        nargs="+",
        metavar="1,8,32",
        help="closed loop: streams in flight, one run per value (" + LIST_FORMS + "); at most "
        f"{MAX_CONCURRENCY:,}, and capped at --requests N (more streams would never send)",
    )
    load.add_argument(
        "--rate",
        action="extend",
        nargs="+",
        metavar="2,4,8",
        help="open loop: requests/s, one run per value (" + LIST_FORMS + ")",
    )
    load.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a production trace's arrival times and input/output lengths (one run): "
        "Azure LLM inference CSV, BurstGPT CSV or Mooncake JSONL; no --workload needed, and "
        "--requests/--duration only cut it",
    )
    p.add_argument(
        "--trace-format",
        metavar="F",
        help="the trace's format when its content does not say: azure, burstgpt or mooncake",
    )
    p.add_argument(
        "--trace-speed",
        type=float,
        default=1.0,
        metavar="X",
        help="time scale of --trace: 2 replays twice as fast (default 1)",
    )
    p.add_argument(
        "--trace-window",
        metavar="START:END",
        help="replay only this part of --trace, from its first arrival: e.g. 10m:20m or 0:90s",
    )
    p.add_argument(
        "--arrival",
        choices=ARRIVALS,
        default=None,
        help="arrival process of --rate runs (default poisson)",
    )
    p.add_argument(
        "--burstiness", type=float, metavar="B", help="gamma shape (vLLM semantics; 1 = Poisson)"
    )
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--requests", type=whole_number(1), metavar="N", help="requests per level")
    stop.add_argument("--duration", type=float, metavar="S", help="seconds per level")
    p.add_argument(
        "--warmup",
        type=whole_number(0),
        default=0,
        metavar="N",
        help="unrecorded requests before each level",
    )
    p.add_argument(
        "--max-tokens",
        type=whole_number(1),
        metavar="N",
        help="output length of every request (overrides the workload)",
    )
    p.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send ignore_eos: true (vLLM, SGLang, llama.cpp), so every request generates the "
        "tokens it asks for (default: on with --trace, whose output lengths are the point; "
        "off otherwise)",
    )
    p.add_argument(
        "--slo", metavar="PROFILE", help="SLO profile the runs are meant for (catalog name)"
    )
    p.add_argument(
        "--framework",
        metavar="NAME",
        help="framework label (default: what the endpoint says it is, else unknown)",
    )
    p.add_argument(
        "--precision",
        metavar="P",
        help="weight precision or quantisation the engine serves, recorded on every run: "
        f"{', '.join(WEIGHT_PRECISIONS)}, or any gguf-<type>",
    )
    p.add_argument(
        "--kv-cache-dtype",
        metavar="D",
        help=f"KV-cache dtype the engine uses, recorded on every run: {', '.join(KV_CACHE_DTYPES)}",
    )
    p.add_argument(
        "--engine-param",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="engine settings to record (space-separated or repeated); a value starting with "
        "'-' needs the = form: --engine-param=--max-num-seqs=64",
    )
    p.add_argument("--name", metavar="TEXT", help="run name (the level is appended)")
    p.add_argument(
        "--seed", type=whole_number(0), default=0, metavar="S", help="seed of prompts and arrivals"
    )
    p.add_argument(
        "--workers",
        type=workers_value,
        default=None,
        metavar="N|auto",
        help="measuring processes sharing the load (default auto: one per free core, at "
        "least one per 256 streams or requests/s, at least 64 each)",
    )
    p.add_argument(
        "--timestamps",
        choices=TIMESTAMPS,
        default="auto",
        help="read instants: the kernel's receive stamps where available (auto, default), "
        "kernel only (an error elsewhere), or the event loop's reads (loop)",
    )
    p.add_argument(
        "--shard",
        type=shard_value,
        metavar="I/N",
        help="this host's share of one run made by N hosts (with --group and a PostgreSQL "
        "--db all hosts reach): the hosts start together and each sends its share of one "
        "schedule (1/N of the streams or of the arrivals; docs/shards.md)",
    )
    p.add_argument(
        "--group",
        metavar="NAME",
        help="the name every host of a --shard run gives; it names the run ids",
    )
    p.add_argument(
        "--host-name",
        metavar="NAME",
        help="the host name recorded on this host's requests (default: the machine's)",
    )
    p.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="per-request timeout (default 600)",
    )
    p.add_argument(
        "--metrics-url",
        default="auto",
        metavar="URL|auto|off",
        help="engine /metrics scraped during each run (default auto: the endpoint's /metrics "
        "when it answers as a known engine)",
    )
    p.add_argument(
        "--dcgm",
        action="extend",
        nargs="+",
        default=[],
        metavar="URL",
        help="DCGM exporter /metrics scraped during each run (space-separated or repeated)",
    )
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument(
        "--gpu",
        dest="gpu",
        action="store_const",
        const=True,
        default=None,
        help="sample local GPUs through NVML (default: when a driver is present)",
    )
    gpu.add_argument("--no-gpu", dest="gpu", action="store_const", const=False)
    p.add_argument(
        "--collect-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between live samples (default 1, down to 0.25)",
    )
    p.add_argument("--db", metavar="URL", help="store URL (default: SERVESCOPE_DB)")
    p.add_argument(
        "--max-error-rate",
        type=error_rate,
        default=1.0,
        metavar="F",
        help="a run whose share of failed requests (error or timeout) is above F (0..1) is "
        "stored as failed and bench exits 3 (default 1: only a run where no request succeeded)",
    )
    p.set_defaults(func=run)


def workers_value(text: str) -> int | None:
    """An argparse ``type``: ``auto`` (None) or a whole number ≥ 1 (``--workers``)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return whole_number(1)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} or auto") from None


def shard_value(text: str) -> tuple[int, int]:
    """An argparse ``type``: ``I/N`` (``--shard``)."""
    try:
        return parse_shard(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None  # the message and its hint


def trace_window(text: str) -> tuple[float, float]:
    """``10m:20m`` / ``0:90s`` → seconds (``--trace-window``)."""
    from services.commands.watch import parse_duration

    start, sep, end = text.partition(":")
    if not sep:
        raise InputError(
            f"--trace-window {text!r} is not START:END",
            hint="e.g. --trace-window 10m:20m or 0:90s (from the trace's first arrival)",
        )
    try:
        return (
            parse_duration(start.strip()) if start.strip() else 0.0,
            parse_duration(end.strip()),
        )
    except argparse.ArgumentTypeError as exc:
        raise InputError(f"--trace-window {text!r}: {exc}") from None


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    if args.arrival is not None and args.concurrency:
        raise InputError("--arrival applies to --rate runs, not to --concurrency")
    if args.burstiness is not None and args.concurrency:
        raise InputError("--burstiness applies to --rate runs with --arrival gamma")
    config = BenchConfig(
        endpoint=args.endpoint,
        api=args.api,
        model=args.model,
        workload=args.workload,
        dataset=args.dataset,
        workload_spec=load_workload_file(args.workload_file)
        if getattr(args, "workload_file", None)
        else None,
        concurrency=parse_list(args.concurrency, flag="--concurrency", kind=int)
        if args.concurrency
        else (),
        rate=parse_list(args.rate, flag="--rate", kind=float) if args.rate else (),
        arrival=args.arrival or "poisson",
        burstiness=args.burstiness,
        requests=args.requests,
        duration_s=args.duration,
        warmup=args.warmup,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos
        if args.ignore_eos is not None
        else bool(getattr(args, "trace", None)),
        slo=args.slo,
        framework=args.framework,
        precision=getattr(args, "precision", None),
        kv_cache_dtype=getattr(args, "kv_cache_dtype", None),
        engine_params=normalise_engine_params(args.engine_param),
        name=args.name,
        seed=args.seed,
        workers=args.workers,
        trace=getattr(args, "trace", None),
        trace_format=getattr(args, "trace_format", None),
        trace_speed=getattr(args, "trace_speed", 1.0),
        trace_window=trace_window(args.trace_window)
        if getattr(args, "trace_window", None)
        else None,
        shard=getattr(args, "shard", None),
        group=getattr(args, "group", None),
        host_name=getattr(args, "host_name", None),
        timestamps=getattr(args, "timestamps", "auto"),
        api_key_env=args.api_key_env,
        timeout_s=args.timeout,
        metrics_url=args.metrics_url,
        dcgm_urls=tuple(args.dcgm),
        gpu=args.gpu,
        collect_interval_s=args.collect_interval,
    ).validated()
    capped = config.capped_lines()
    for line in capped:
        print(f"servescope bench: {line}", file=sys.stderr)
    # the command line has no --notes: the stored runs say it (client_params: capped_note)
    return replace(config, notes="; ".join(capped)) if capped else config


def error_rate(text: str) -> float:
    """An argparse ``type``: a fraction 0..1 (``--max-error-rate``)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction between 0 and 1")
    return value


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; the exit code says how it ended (see EPILOG): 0 completed,
    3 a run failed, 4 rows spooled (store locked), 128 + signal number after SIGINT/SIGTERM."""
    import signal

    from collectors.loadgen.runner import BenchInterrupted, config_trace, run_bench
    from services.commands import prepare
    from store.lifecycle import open_store

    config = config_from_args(args)
    max_error_rate = getattr(args, "max_error_rate", 1.0)
    if config.trace:
        config_trace(config)  # a bad trace file is bad input: said before the store is opened
    if config.shard is not None:  # refused before a DuckDB file would be created
        import settings
        from store.run_shards import require_postgres_url

        require_postgres_url(args.db or settings.db_url())
    store = open_store(args.db)
    code = 0
    interrupted: dict[int, Any] = {}
    try:
        outcome = run_bench(config, store, progress=True, max_error_rate=max_error_rate)
    except BenchInterrupted as exc:
        # what was saved, and where, is told whatever else the user presses meanwhile
        interrupted = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
        outcome = exc.outcome
        code = 128 + int(exc.signum)
        name = signal.Signals(exc.signum).name
        print(
            f"interrupted ({name}); {len(outcome.run_ids)} run(s) ended as "
            f"{'/'.join(sorted({lvl.status for lvl in outcome.levels})) or 'nothing'}: "
            f"{', '.join(outcome.run_ids) or 'none started'}",
            file=sys.stderr,
        )
    for run_id in outcome.run_ids:  # stdout, whatever happened: scripts read them here
        print(run_id, flush=True)
    for lvl in outcome.failed:
        print(
            f"servescope bench: run {lvl.run_id} failed: {lvl.failures} of {lvl.requests} "
            f"requests failed, {lvl.ok} succeeded (--max-error-rate {max_error_rate:g})",
            file=sys.stderr,
        )
    if outcome.failed and not code:
        code = ExitCode.FAILED
    if outcome.rows_spooled:
        where = ", ".join(str(d.resolve()) for d in outcome.spool_dirs)
        print(
            f"servescope bench: the store stayed locked: {outcome.rows_spooled} rows spooled at "
            f"{where}; they are not in the store yet. Run `servescope db ingest-spool --db "
            f"{outcome.store_url}` when the store is free.",
            file=sys.stderr,
        )
        if not code:
            code = ExitCode.SPOOLED
    for sig, previous in interrupted.items():
        signal.signal(sig, previous)
    if outcome.run_ids and not outcome.rows_spooled:
        prepare.prepare(store, outcome.run_ids)  # quick first views of what was saved
    return code
