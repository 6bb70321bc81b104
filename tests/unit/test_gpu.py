"""The NVML sampler against a fake ``pynvml`` module (no GPU needed)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collectors import gpu
from collectors.watch import SourceSpec, build_sources
from errors import CollectorError

NO_PROC_PID = 4_194_399  # above Linux's pid_max: never in /proc


class NVMLError(Exception):
    pass


class NotSupported(NVMLError):
    pass


@dataclass
class FakeGpu:
    name: Any
    uuid: Any
    used: int
    total: int
    reserved: int | None
    util: tuple[int, int] | None
    power_mw: int | None
    temp: int
    sm_mhz: int
    procs: list[Any]


class FakeNvml:
    """Enough of pynvml's surface, with the quirks: bytes names, NotSupported, None memory."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    nvmlMemory_v2 = 0x02000028
    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu], *, init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: FakeGpu) -> Any:
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> Any:
        return h.uuid

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: int | None = None) -> Any:
        if version is not None and h.reserved is None:
            raise NotSupported("v2 not supported")  # old driver: v1 only
        info = SimpleNamespace(used=h.used, total=h.total, free=h.total - h.used)
        if version is not None:
            info.reserved = h.reserved
        return info

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        if h.util is None:
            raise NotSupported("util")
        return SimpleNamespace(gpu=h.util[0], memory=h.util[1])

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        if h.power_mw is None:
            raise NotSupported("power")
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return h.temp

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return h.sm_mhz

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        return h.procs

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        if pid == NO_PROC_PID:
            raise NVMLError("no permission")
        return b"python3"


GIB = 1024**3


def _fake() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(
                name=b"NVIDIA H100 80GB HBM3",
                uuid=b"GPU-aaaa",
                used=70 * GIB,
                total=80 * GIB,
                reserved=GIB // 2,
                util=(97, 40),
                power_mw=650_500,
                temp=71,
                sm_mhz=1980,
                procs=[
                    SimpleNamespace(pid=1234, usedGpuMemory=69 * GIB),
                    SimpleNamespace(pid=NO_PROC_PID, usedGpuMemory=None),  # container: no figure
                ],
            ),
            FakeGpu(
                name="NVIDIA L4",
                uuid="GPU-bbbb",
                used=GIB,
                total=24 * GIB,
                reserved=None,  # old driver: memory v1 only
                util=None,  # NotSupported
                power_mw=None,
                temp=40,
                sm_mhz=210,
                procs=[],
            ),
        ]
    )


def test_sample_converts_units_and_tolerates_unsupported_fields() -> None:
    nvml = _fake()
    with gpu.NvmlSampler(nvml, host="node-1", clock=lambda: 1000.0) as sampler:
        assert sampler.gpu_count == 2
        sample = sampler.sample()
    assert nvml.inits == 1 and nvml.shutdowns == 1
    h100, l4 = sample.gpus
    assert h100 == {
        "host": "node-1",
        "gpu_index": 0,
        "ts": 1000.0,
        "gpu_uuid": "GPU-aaaa",
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "mem_used_bytes": 70.0 * GIB,
        "mem_total_bytes": 80.0 * GIB,
        "mem_reserved_bytes": GIB / 2,
        "util_gpu": 0.97,
        "util_mem": 0.40,
        "power_w": 650.5,
        "temp_c": 71.0,
        "sm_clock_mhz": 1980.0,
        "source": "nvml",
    }
    assert l4["gpu_name"] == "NVIDIA L4" and l4["gpu_uuid"] == "GPU-bbbb"
    assert l4["mem_used_bytes"] == float(GIB) and l4["mem_reserved_bytes"] is None
    assert l4["util_gpu"] is None and l4["power_w"] is None
    assert sample.processes == [
        {
            "host": "node-1",
            "gpu_index": 0,
            "ts": 1000.0,
            "pid": 1234,
            "process_name": "python3",
            "used_bytes": 69.0 * GIB,
        },
        {
            "host": "node-1",
            "gpu_index": 0,
            "ts": 1000.0,
            "pid": NO_PROC_PID,
            "process_name": None,  # NVML refused and /proc has no such pid
            "used_bytes": None,
        },
    ]


def test_rows_fit_the_store_schema() -> None:
    with gpu.NvmlSampler(_fake(), host="h", clock=lambda: 1.0) as sampler:
        rows = sampler.sample().rows()
    from store import schema

    allowed = {c.name for c in schema.gpu_samples.columns}
    assert all(set(r) <= allowed for r in rows["gpu_samples"])
    assert len(rows["gpu_process_samples"]) == 2


def test_no_driver_is_one_clear_line() -> None:
    nvml = FakeNvml([], init_error=NVMLError("NVML Shared Library Not Found"))
    with pytest.raises(CollectorError) as err:
        gpu.NvmlSampler(nvml).open()
    assert err.value.message == "no NVIDIA driver found: GPU samples off"
    assert gpu.nvml_available(nvml) == (False, "no NVIDIA driver found: GPU samples off")


def test_watch_goes_on_without_a_driver() -> None:
    nvml = FakeNvml([], init_error=NVMLError("Driver Not Loaded"))
    sources, notes = build_sources(
        SourceSpec(metrics_urls=["127.0.0.1:9"], gpu=True, nvml=nvml), interval_s=1.0
    )
    assert notes == ["no NVIDIA driver found: GPU samples off"]
    assert [s.state.kind for s in sources] == ["metrics"]


def test_watch_uses_nvml_when_present() -> None:
    sources, notes = build_sources(SourceSpec(gpu=None, nvml=_fake()), interval_s=1.0)
    assert [s.state.kind for s in sources] == ["nvml"]
    assert notes[0].startswith("NVML: 2 GPU(s)")
    for s in sources:
        if hasattr(s, "sampler"):
            s.sampler.close()


def test_the_real_module_without_a_driver_says_so() -> None:
    """On this machine (no GPU) the real pynvml fails to start; the message is the same."""
    ok, line = gpu.nvml_available()
    if ok:
        pytest.skip("this machine has an NVIDIA driver")
    assert line == "no NVIDIA driver found: GPU samples off"


def test_dcgm_source_through_the_watcher_with_a_mock_transport(fixtures_dir: Path) -> None:
    """A DCGM exporter page served by httpx.MockTransport: GPU rows in bytes, no engine rows."""
    import httpx

    from collectors.watch import LiveCollection

    page = (
        fixtures_dir / "dcgm" / "dcgm_exporter_nvidia_l4_k8s-ai-conformance_kops.prom"
    ).read_text()
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(200, text=page)

    class Rows:
        rows_written = 0
        batches_spooled = 0

        def __init__(self) -> None:
            self.tables: dict[str, list[Any]] = {}

        def add(self, table: str, rows: Any) -> None:
            self.tables.setdefault(table, []).extend(rows)

        def close(self) -> None:
            return None

    sink = Rows()
    live = LiveCollection.start(
        dcgm_urls=["gpu-node:9400"],
        gpu=False,
        interval_s=0.25,
        writer=sink,
        transport=httpx.MockTransport(handler),
    )
    deadline = time.monotonic() + 10
    while live.watcher.states[0].scrapes < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    summary = live.stop()
    assert calls[0] == "http://gpu-node:9400/metrics"
    assert summary.targets == [] and summary.hosts == ["i-030791dc5a37cd257"]
    assert "engine_samples" not in sink.tables
    row = sink.tables["gpu_samples"][0]
    assert row["mem_total_bytes"] == (22563 + 470) * 1024 * 1024
    assert row["source"] == "dcgm"
    raw_names = {r["name"] for r in sink.tables["engine_raw_samples"]}
    assert "DCGM_FI_DEV_FB_FREE" in raw_names
