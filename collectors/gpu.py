"""GPU samples: NVML through ``nvidia-ml-py`` (module ``pynvml``), and DCGM exporter pages.

Both produce rows for ``gpu_samples`` (and NVML also ``gpu_process_samples``) in the store's
units: bytes, ratios 0..1 for utilisation, W, °C, MHz (DESIGN §4, FORMATS.md §A6–§A7).

Without a GPU or driver, :meth:`NvmlSampler.open` raises ``CollectorError`` with the one line
``no NVIDIA driver found: GPU samples off``; the watcher prints it and goes on with the other
collectors. Every NVML call is guarded on its own: a field a GPU does not support is NULL.
The ``pynvml`` module is injectable (tests pass a fake; no GPU is needed to test this file).
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from collectors.prometheus_text import Exposition
from errors import CollectorError
from store import schema

MIB = 1024 * 1024
NO_DRIVER = "no NVIDIA driver found: GPU samples off"
#: DCGM writes blank/unsupported fields as sentinels near 2^63 (FORMATS.md §A6).
DCGM_SENTINEL = 9.2e18

#: Optional gpu_samples columns written only once a migration adds them.
_GPU_COLUMNS = frozenset(c.name for c in schema.gpu_samples.columns)


def _gpu_row(row: dict[str, Any]) -> dict[str, Any]:
    """Drop the fields the store's gpu_samples table does not have (yet)."""
    return {k: v for k, v in row.items() if k in _GPU_COLUMNS}


@dataclass
class GpuSample:
    """One sampling pass over the GPUs of a host."""

    gpus: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {"gpu_samples": [_gpu_row(r) for r in self.gpus]}
        if self.processes:
            out["gpu_process_samples"] = list(self.processes)
        return out


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _process_name(nvml: Any, pid: int) -> str | None:
    with contextlib.suppress(Exception):
        return _text(nvml.nvmlSystemGetProcessName(pid))
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return None


class NvmlSampler:
    """Samples every GPU of this host through NVML.

    >>> sampler = NvmlSampler().open()   # CollectorError(NO_DRIVER) without a driver
    >>> rows = sampler.sample().rows()   # {"gpu_samples": [...], "gpu_process_samples": [...]}
    >>> sampler.close()
    """

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        *,
        host: str | None = None,
        clock: Callable[[], float] = time.time,
        processes: bool = True,
    ) -> None:
        self._nvml = nvml
        self.host = host or socket.gethostname()
        self._clock = clock
        self._processes = processes
        self._handles: list[Any] = []
        self._static: list[tuple[str | None, str | None]] = []
        self._open = False

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    def open(self) -> NvmlSampler:
        """Initialise NVML and find the GPUs; ``CollectorError(NO_DRIVER)`` when impossible."""
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise CollectorError(NO_DRIVER, hint="install nvidia-ml-py") from exc
            self._nvml = pynvml
        nvml: Any = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # pynvml.NVMLError_LibraryNotFound / DriverNotLoaded / …
            raise CollectorError(
                NO_DRIVER, hint=f"NVML could not start: {_text(exc) or type(exc).__name__}"
            ) from exc
        self._open = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.close()
            raise CollectorError(f"NVML found no usable GPU: {exc}") from exc
        self._static = [
            (self._call(nvml.nvmlDeviceGetName, h), self._call(nvml.nvmlDeviceGetUUID, h))
            for h in self._handles
        ]
        self._static = [
            (_text(n) if n is not None else None, _text(u) if u is not None else None)
            for n, u in self._static
        ]
        return self

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:  # NVMLError_NotSupported, NoPermission, …: that field is NULL
            return None

    def _memory(self, handle: Any) -> tuple[float | None, float | None, float | None]:
        nvml = self._nvml
        assert nvml is not None
        info = None
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        if v2 is not None:
            info = self._call(nvml.nvmlDeviceGetMemoryInfo, handle, version=v2)
        if info is None:
            info = self._call(nvml.nvmlDeviceGetMemoryInfo, handle)
        if info is None:
            return None, None, None
        reserved = getattr(info, "reserved", None)
        return (
            float(info.used),
            float(info.total),
            float(reserved) if reserved is not None else None,
        )

    def sample(self) -> GpuSample:
        """One pass over every GPU: memory, utilisation, power, temperature, SM clock, processes."""
        if not self._open:
            raise CollectorError("the NVML sampler is not open")
        nvml = self._nvml
        assert nvml is not None
        ts = self._clock()
        out = GpuSample()
        call = self._call
        temp_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        sm_clock = getattr(nvml, "NVML_CLOCK_SM", 1)
        for index, handle in enumerate(self._handles):
            name, uuid = self._static[index]
            used, total, reserved = self._memory(handle)
            util = call(nvml.nvmlDeviceGetUtilizationRates, handle)
            power_mw = call(nvml.nvmlDeviceGetPowerUsage, handle)
            temp = call(nvml.nvmlDeviceGetTemperature, handle, temp_sensor)
            clock = call(nvml.nvmlDeviceGetClockInfo, handle, sm_clock)
            out.gpus.append(
                {
                    "host": self.host,
                    "gpu_index": index,
                    "ts": ts,
                    "gpu_uuid": uuid,
                    "gpu_name": name,
                    "mem_used_bytes": used,
                    "mem_total_bytes": total,
                    "mem_reserved_bytes": reserved,
                    "util_gpu": util.gpu / 100.0 if util is not None else None,
                    "util_mem": util.memory / 100.0 if util is not None else None,
                    "power_w": power_mw / 1000.0 if power_mw is not None else None,
                    "temp_c": float(temp) if temp is not None else None,
                    "sm_clock_mhz": float(clock) if clock is not None else None,
                    "source": "nvml",
                }
            )
            if self._processes:
                procs = call(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
                seen: set[int] = set()
                for p in procs:
                    pid = int(p.pid)
                    if pid in seen:  # MIG lists a process once per instance
                        continue
                    seen.add(pid)
                    mem = getattr(p, "usedGpuMemory", None)
                    out.processes.append(
                        {
                            "host": self.host,
                            "gpu_index": index,
                            "ts": ts,
                            "pid": pid,
                            "process_name": _process_name(nvml, pid),
                            "used_bytes": float(mem) if mem is not None else None,
                        }
                    )
        return out

    def close(self) -> None:
        if self._open and self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        self._open = False

    def __enter__(self) -> NvmlSampler:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def nvml_available(nvml: ModuleType | Any | None = None) -> tuple[bool, str]:
    """Whether NVML can sample here, and the line to print when it cannot."""
    sampler = NvmlSampler(nvml)
    try:
        sampler.open()
    except CollectorError as exc:
        return False, exc.message
    try:
        return sampler.gpu_count > 0, f"NVML: {sampler.gpu_count} GPU(s)"
    finally:
        sampler.close()


# --- DCGM exporter ----------------------------------------------------------------------------


def _dcgm_value(value: float) -> float | None:
    if math.isnan(value) or abs(value) >= DCGM_SENTINEL:
        return None
    return value


_DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("mem_reserved_bytes", MIB),
    "DCGM_FI_DEV_FB_FREE": ("_free", MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("_total", MIB),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 0.01),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem", 0.01),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
}


def dcgm_rows(
    expo: Exposition,
    *,
    ts: float,
    default_host: str,
    source: str = "dcgm",
    host_override: str | None = None,
) -> list[dict[str, Any]]:
    """``gpu_samples`` rows from a DCGM exporter page (FB values are MiB: stored as bytes).

    The host is the ``Hostname``/``hostname`` label, else ``default_host`` (the scraped
    address); ``host_override`` forces it (the sim's pages all say ``servescope-sim``).
    Total memory is used + free + reserved (DCGM's FB_USED excludes the reserved part).
    MIG instances (``GPU_I_ID``) are folded into their GPU (first instance wins).
    """
    gpus: dict[int, dict[str, Any]] = {}
    for s in expo.samples:
        target = _DCGM_FIELDS.get(s.name)
        if target is None:
            continue
        labels = s.label_dict
        try:
            index = int(labels.get("gpu", "0"))
        except ValueError:
            continue
        row = gpus.get(index)
        if row is None:
            host = (
                host_override
                or labels.get("Hostname")
                or labels.get("hostname")
                or labels.get("instance")
                or default_host
            )
            row = gpus[index] = {
                "host": host,
                "gpu_index": index,
                "ts": ts,
                "gpu_uuid": labels.get("UUID") or labels.get("uuid"),
                "gpu_name": labels.get("modelName"),
                "source": source,
            }
        column, scale = target
        value = _dcgm_value(s.value)
        if column not in row:  # first series wins (MIG instances repeat the GPU's fields)
            row[column] = value * scale if value is not None else None
    out = []
    for row in gpus.values():
        free = row.pop("_free", None)
        total = row.pop("_total", None)
        if total is None and free is not None and row.get("mem_used_bytes") is not None:
            total = row["mem_used_bytes"] + free + (row.get("mem_reserved_bytes") or 0.0)
        row["mem_total_bytes"] = total
        out.append(_gpu_row(row))
    return sorted(out, key=lambda r: r["gpu_index"])
