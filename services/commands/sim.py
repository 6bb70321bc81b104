"""``servescope sim``: run the reference engine from the command line.

cli.py calls :func:`register` with its subparsers; ``python -m sim`` hands its flags to cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

import seeds
from analysis import capacity, perf_model, precision
from errors import InputError
from sim.engine import EngineConfig
from sim.server import serve


def _on_off(value: str) -> bool:
    v = value.strip().lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    gpus = ", ".join(e["name"] for e in seeds.entries("gpus"))
    models = ", ".join(e["name"] for e in seeds.entries("models"))
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    p.add_argument("--gpu", default="H100-SXM-80GB", help=f"GPU from the catalog: {gpus}")
    p.add_argument("--model", default="llama-3.1-8b", help=f"model from the catalog: {models}")
    p.add_argument(
        "--served-model-name", default=None, help="name in /v1/models (default: --model)"
    )
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--max-batch-size", type=int, default=256, help="max running sequences")
    p.add_argument(
        "--kv-memory-fraction",
        type=float,
        default=0.9,
        help="fraction of GPU memory for weights + activations + KV cache (default 0.9)",
    )
    p.add_argument(
        "--max-batched-tokens", type=int, default=8192, help="token budget per iteration"
    )
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    p.add_argument("--prefix-caching", type=_on_off, default=True, help="on|off (default on)")
    sized = ", ".join([*precision.PRECISION_BYTES, *precision.SIZED_ALIASES])
    p.add_argument(
        "--dtype",
        default="auto",
        help=f"weight precision: auto (the checkpoint's) or one of {sized} (fp8 / int8 also use "
        "the FP8 / INT8 tensor cores where the GPU has them; int4 counts its group scales)",
    )
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        help="KV-cache dtype: auto (an fp8/int8/bf16 --dtype, else the model's compute dtype) or "
        f"one of {', '.join(precision.KV_CACHE_BYTES)}",
    )
    p.add_argument(
        "--num-gpu-blocks", type=int, default=None, help="override the KV capacity in blocks"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="virtual seconds per wall second (10: ten times faster than real)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of output lengths and text")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The engine configuration the parsed flags describe (ConfigError for unknown names,
    InputError for a --dtype / --kv-cache-dtype outside ``analysis.precision``'s sized ones)."""
    weights = None if args.dtype == "auto" else precision.sized_precision(args.dtype, "--dtype")
    kv = args.kv_cache_dtype
    kv_bytes = None if kv == "auto" else precision.kv_cache_bytes(kv, "--kv-cache-dtype")
    return EngineConfig.from_names(
        args.gpu,
        args.model,
        tp=args.tp,
        max_batch_size=args.max_batch_size,
        kv_memory_fraction=args.kv_memory_fraction,
        max_batched_tokens=args.max_batched_tokens,
        block_size=args.block_size,
        prefix_caching=args.prefix_caching,
        weight_dtype_bytes=None if weights is None else capacity.bytes_per_param(weights),
        weight_precision=weights,
        kv_dtype_bytes=kv_bytes,
        num_gpu_blocks=args.num_gpu_blocks,
        seed=args.seed,
        served_model_name=args.served_model_name,
    )


def describe(config: EngineConfig) -> str:
    dep = config.deployment()
    blocks = config.total_blocks()
    return (
        f"ServeScope sim (a simulated engine, framework 'sim'): {config.model.name} on "
        f"{config.tp}× {config.gpu.name}; {blocks} KV blocks of {config.block_size} tokens "
        f"({blocks * config.block_size} tokens); decode step at batch 1 ≈ "
        f"{perf_model.decode_step_time(dep, 1, 512) * 1e3:.1f} ms"
    )


async def _serve_forever(config: EngineConfig, host: str, port: int, time_scale: float) -> None:
    async with serve(config, host=host, port=port, time_scale=time_scale) as server:
        print(f"{describe(config)}\nlistening on {server.url} (time scale {time_scale}×)")
        sys.stdout.flush()
        await asyncio.Event().wait()


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope sim``: serve until interrupted."""
    if args.time_scale <= 0:
        raise InputError(f"--time-scale must be > 0, got {args.time_scale}")
    config = config_from_args(args)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(config, args.host, args.port, args.time_scale))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sim`` subcommand to cli.py's parser."""
    p = subparsers.add_parser(
        "sim",
        help="run the reference engine (a simulated OpenAI-compatible server)",
        description="Simulate an LLM serving engine (continuous batching, paged KV, chunked "
        "prefill, preemption, prefix caching) on a GPU and model from the catalog.",
    )
    add_arguments(p)
    p.set_defaults(func=run)
