"""Run the real NVML sampler for a while and print what it saw (for a machine with a GPU).

    .venv/bin/python bench/gpu_sampler.py [--seconds 30] [--interval 0.25]

Prints, per GPU: name, UUID, memory used/total/reserved, utilisation, power, temperature, SM
clock (first and last sample, min/max over the run), the processes seen with their memory, and
the sampler's own cost per pass. Without a driver it prints the one line the watcher prints
("no NVIDIA driver found: GPU samples off") and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors import gpu
from errors import CollectorError

GIB = 1024**3


def _fmt(value: Any, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value * scale:.{digits}f}{unit}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=0.25)
    args = ap.parse_args()
    sampler = gpu.NvmlSampler()
    try:
        sampler.open()
    except CollectorError as exc:
        print(exc.message)
        return 0
    passes: list[gpu.GpuSample] = []
    costs: list[float] = []
    try:
        print(
            f"NVML: {sampler.gpu_count} GPU(s) on {sampler.host}; sampling for {args.seconds:g} s"
        )
        deadline = time.monotonic() + args.seconds
        next_tick = time.monotonic()
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            passes.append(sampler.sample())
            costs.append((time.perf_counter() - t0) * 1000)
            next_tick += args.interval
            time.sleep(max(0.0, next_tick - time.monotonic()))  # the sampling cadence
    finally:
        sampler.close()
    print(
        f"{len(passes)} passes; cost per pass: median {statistics.median(costs):.2f} ms, "
        f"max {max(costs):.2f} ms"
    )
    for index in range(len(passes[0].gpus)):
        rows = [p.gpus[index] for p in passes]
        first, last = rows[0], rows[-1]
        print(f"GPU {index}: {first['gpu_name']} {first['gpu_uuid']}")
        print(
            f"  memory used {_fmt(last['mem_used_bytes'], 1 / GIB, 2, ' GiB')} of "
            f"{_fmt(last['mem_total_bytes'], 1 / GIB, 2, ' GiB')} "
            f"(reserved {_fmt(last.get('mem_reserved_bytes'), 1 / GIB, 2, ' GiB')})"
        )
        for key, scale, unit in (
            ("util_gpu", 100, " %"),
            ("util_mem", 100, " %"),
            ("power_w", 1, " W"),
            ("temp_c", 1, " °C"),
            ("sm_clock_mhz", 1, " MHz"),
            ("mem_used_bytes", 1 / GIB, " GiB"),
        ):
            values = [r[key] for r in rows if r[key] is not None]
            span = (
                f"min {_fmt(min(values), scale)} max {_fmt(max(values), scale)}" if values else ""
            )
            print(
                f"  {key:<15} first {_fmt(first[key], scale, unit=unit):>12}  "
                f"last {_fmt(last[key], scale, unit=unit):>12}  {span}"
            )
        procs = {p["pid"]: p for s in passes for p in s.processes if p["gpu_index"] == index}
        for pid, p in sorted(procs.items()):
            print(
                f"  process {pid} {p['process_name']}: {_fmt(p['used_bytes'], 1 / GIB, 2, ' GiB')}"
            )
        if not procs:
            print("  no compute processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
