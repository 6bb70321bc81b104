"""Load-generator capacity: ``servescope bench`` against a minimal raw-asyncio client, same run.

Both clients stream from the same mock server (``sim/mockserver.py``, streaming as fast as it
can: no TTFT or ITL, its default ``burst`` unless ``--burst`` is given), 256 output tokens per
request, closed loop at 64, 256 and 1,024 streams for ``--duration`` seconds. The server runs
in its own process pinned to the last CPU; each client is pinned to CPU 0, so it uses at most
one core:

- ServeScope: ``run_benchmark`` — the measuring worker process plus this coordinating process,
  which writes every request and token-gap row into a temporary DuckDB file. Tokens counted
  from the stored rows (``chunks``: the content events it parsed; ``output_tokens``: usage).
- raw: ``raw_client`` below, in a subprocess of this one (same core): one event loop,
  ``asyncio.open_connection`` keep-alive connections opened before the clock starts, the same
  request body, content events counted by a byte search, only the usage chunk decoded.

Each repeat runs ServeScope then raw, back to back; medians over repeats. Both windows run
from the start until the last response issued before the deadline has finished. Every figure
is also counted at the server (``/mock/stats``: content chunks written and responses
completed, reset before each client) and from ``usage``. The ratio row is the median of the
per-repeat ratios ServeScope / raw. The last line is the server's own tokens per CPU-second:
a client that gets near it measures the server, not itself (``--burst 16`` makes it cheaper).

History: issue #2 quoted GuideLLM 0.8.1 ≈ 13k tokens/s, vLLM's benchmark client ≈ 46k and a
raw-asyncio client ≈ 150k on this machine; they are not re-measured or divided by here.

    .venv/bin/python bench/loadgen_capacity.py [--streams 64,256,1024] [--duration 5]
        [--repeats 3] [--burst N] [--no-pin]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from store.db import Store

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 256
INPUT_TOKENS = 32
API_PATH = "/v1/chat/completions"

# --- the raw client (stdlib only: its subprocess imports nothing else) -----------------------

CONTENT = b'"delta":{"content":"'  # a content event (the role chunk's delta starts with "role")
END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body
USAGE = b'"usage":'
_TAIL = len(CONTENT) - 1  # a marker can straddle two reads: keep this many bytes


class Tally:
    __slots__ = (
        "errors",
        "itl_ms",
        "missing_usage",
        "requests",
        "tokens",
        "ttft_ms",
        "usage_tokens",
    )

    def __init__(self) -> None:
        self.requests = self.tokens = self.usage_tokens = self.missing_usage = self.errors = 0
        # timed mode (bench/measurement_error.py): each read stamped when the coroutine gets it
        self.ttft_ms: list[float] = []
        self.itl_ms: list[float] = []


async def _raw_loop(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: bytes,
    deadline: float,
    t: Tally,
    count: int | None = None,
    timed: bool = False,
) -> None:
    """Closed loop on one connection until ``deadline`` (or ``count`` requests); ``timed``:
    also the TTFT (send → the read holding the first content event) and the gaps between
    content events (0 for events after the first in one read), by ``perf_counter``."""
    perf = time.perf_counter
    done = 0
    try:
        while perf() < deadline and (count is None or done < count):
            sent = perf()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if head[9:12] != b"200":
                t.errors += 1
                return
            tokens = 0
            tail = last = b""
            last_t: float | None = None
            while True:
                data = await reader.read(262_144)
                if not data:
                    raise ConnectionError("closed mid-response")
                seg = tail + data
                n = seg.count(CONTENT)
                tokens += n
                if timed and n:
                    now = perf()
                    if last_t is None:
                        t.ttft_ms.append((now - sent) * 1000.0)
                    else:
                        t.itl_ms.append((now - last_t) * 1000.0)
                    t.itl_ms.extend([0.0] * (n - 1))
                    last_t = now
                if seg.endswith(END):
                    break
                tail, last = seg[-_TAIL:], data
            window = last + data
            i = window.rfind(USAGE)
            if i < 0:
                t.missing_usage += 1
            else:
                usage, _ = json.JSONDecoder().raw_decode(window[i + len(USAGE) :].decode())
                t.usage_tokens += int(usage.get("completion_tokens") or 0)
            t.tokens += tokens
            t.requests += 1
            done += 1
    except (OSError, asyncio.IncompleteReadError, ValueError):
        t.errors += 1
    finally:
        writer.close()


async def raw_client(
    url: str, body: bytes, streams: int, duration: float, count: int | None = None
) -> dict[str, Any]:
    """``streams`` closed-loop streams POSTing ``body`` for ``duration`` seconds; with
    ``count``: ``count`` requests per stream, timed (``ttft_ms`` and ``itl_ms`` lists)."""
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    request = (
        f"POST {API_PATH} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"accept: text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body
    conns = await asyncio.gather(
        *(asyncio.open_connection(host, port, limit=1 << 20) for _ in range(streams))
    )
    t = Tally()
    start = time.perf_counter()
    cpu0 = time.process_time()
    timed = count is not None
    await asyncio.gather(
        *(_raw_loop(r, w, request, start + duration, t, count, timed) for r, w in conns)
    )
    wall = time.perf_counter() - start
    return {
        "ttft_ms": t.ttft_ms,
        "itl_ms": t.itl_ms,
        "duration_s": wall,
        "requests": t.requests,
        "tokens": t.tokens,
        "usage_tokens": t.usage_tokens,
        "missing_usage": t.missing_usage,
        "errors": t.errors,
        "cpu_s": time.process_time() - cpu0,
    }


def _raw_main() -> int:
    """``--raw-client``: parameters as JSON on stdin, the result as JSON on stdout."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    p = json.loads(sys.stdin.read())
    res = asyncio.run(
        raw_client(p["url"], p["body"].encode(), p["streams"], p["duration"], p.get("count"))
    )
    print(json.dumps(res))
    return 0


# --- the comparison -------------------------------------------------------------------------


def server_stats(url: str, *, reset: bool) -> dict[str, Any]:
    with urllib.request.urlopen(
        url + "/mock/stats" + ("?reset=1" if reset else ""), timeout=30
    ) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


def figures(
    tokens: float,
    usage: float,
    requests: float,
    duration: float,
    before: dict[str, Any],
    after: dict[str, Any],
) -> dict[str, float]:
    """Rates over one client's window; ``before``/``after``: the server's stats around it."""
    return {
        "tokens_s": tokens / duration,
        "usage_s": usage / duration,
        "requests_s": requests / duration,
        "server_tokens_s": after["tokens"] / duration,
        "server_cpu": (after["cpu_s"] - before["cpu_s"]) / duration,
        "server_tokens_per_cpu_s": after["tokens"] / max(1e-9, after["cpu_s"] - before["cpu_s"]),
        "unmatched": abs(after["completed"] - requests),  # server-completed vs client-counted
    }


class CpuSampler:
    """This process's CPU seconds (every thread) sampled every 50 ms, read back at an epoch."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), time.process_time()))
            if self._stop.wait(0.05):
                return

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, epoch: float) -> float:
        s = self.samples
        i = min(max(bisect.bisect_left(s, (epoch, -1.0)), 1), len(s) - 1)
        (t0, c0), (t1, c1) = s[i - 1], s[i]
        return c0 + (c1 - c0) * min(1.0, max(0.0, (epoch - t0) / (t1 - t0 or 1.0)))


def run_servescope(
    store: Store, url: str, streams: int, duration: float, workers: int
) -> dict[str, float]:
    from collectors.loadgen.config import BenchConfig
    from collectors.loadgen.runner import run_benchmark

    cfg = BenchConfig(
        endpoint=url,
        workload_spec={"name": "capacity", "input_tokens": INPUT_TOKENS, "output_tokens": TOKENS},
        concurrency=(streams,),
        duration_s=duration,
        warmup=0,  # connections are still opened before the clock starts (prewarm)
        calibrate=False,
        max_tokens=TOKENS,
        workers=workers,
    )
    before = server_stats(url, reset=True)
    with CpuSampler() as coordinator:
        [run_id] = run_benchmark(cfg, store, progress=False)
    run = store.read_df(
        "select started_at, ended_at, duration_s, tool_summary from runs where run_id = :r",
        {"r": run_id},
    )
    ok = store.read_df(
        "select count(*) as n, sum(chunks) as chunks, sum(output_tokens) as tokens "
        "from requests where run_id = :r and status = 'ok'",
        {"r": run_id},
    )
    summary = json.loads(run.tool_summary[0])
    d = float(run.duration_s[0])
    tokens = float(ok.chunks[0])
    out = figures(
        tokens, float(ok.tokens[0]), float(ok.n[0]), d, before, server_stats(url, reset=False)
    )
    worker = float(summary["client_cpu_s"])
    coord = coordinator.at(float(run.ended_at[0])) - coordinator.at(float(run.started_at[0]))
    out["worker_cpu"] = worker / d
    out["client_cpu"] = (worker + coord) / d
    out["tokens_per_cpu_s"] = tokens / max(1e-9, worker + coord)
    out["errors"] = float(summary["errors"])
    return out


def raw_subprocess(
    url: str, body: bytes, streams: int, duration: float, count: int | None = None
) -> dict[str, Any]:
    """``raw_client`` in a subprocess of this one (same CPU affinity), its result."""
    params = {
        "url": url,
        "body": body.decode(),
        "streams": streams,
        "duration": duration,
        "count": count,
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--raw-client"],
        input=json.dumps(params).encode(),
        capture_output=True,
        timeout=duration + 300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"raw client failed: {proc.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def run_raw(url: str, body: bytes, streams: int, duration: float) -> dict[str, float]:
    before = server_stats(url, reset=True)
    r = raw_subprocess(url, body, streams, duration)
    d = r["duration_s"]
    after = server_stats(url, reset=False)
    out = figures(r["tokens"], r["usage_tokens"], r["requests"], d, before, after)
    out["client_cpu"] = out["worker_cpu"] = r["cpu_s"] / d
    out["tokens_per_cpu_s"] = r["tokens"] / max(1e-9, r["cpu_s"])
    out["errors"] = float(r["errors"] + r["missing_usage"])
    return out


def request_body(model: str, input_tokens: int = INPUT_TOKENS, tokens: int = TOKENS) -> bytes:
    """The first request ``servescope bench`` sends for this workload (same shape and size)."""
    from collectors.loadgen.client import build_body
    from collectors.loadgen.prompts import DEFAULT_CALIBRATION
    from collectors.loadgen.workloads import RequestFactory, parse_workload

    spec = {"name": "capacity", "input_tokens": input_tokens, "output_tokens": tokens}
    factory = RequestFactory(
        workload=parse_workload(spec),
        dataset=None,
        calibration=DEFAULT_CALIBRATION,
        seed=0,
        max_tokens=tokens,
    )
    conv = factory.conversation(0)
    body, _ = build_body("chat", model, conv.turns[0], prefix=conv.prefix)
    return body


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--streams", default="64,256,1024")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="ServeScope worker processes")
    ap.add_argument(
        "--burst", type=int, default=None, help="server: chunks per loop turn (mock's default)"
    )
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--raw-client", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.raw_client:
        return _raw_main()
    sys.path.insert(0, str(ROOT))
    from sim.mockserver import MockConfig, MockServer
    from store.lifecycle import open_store

    ncpu = os.cpu_count() or 1
    pin = not a.no_pin and ncpu >= 2
    if pin:
        os.sched_setaffinity(0, {0})  # ServeScope's worker and the raw client inherit it
    server_cpu = ncpu - 1 if pin else None
    burst = a.burst if a.burst is not None else MockConfig().burst
    cfg_model = MockConfig().model
    body = request_body(cfg_model)
    print(
        f"{TOKENS} output tokens per request, {len(body)}-byte chat request body; "
        f"{a.duration:g} s per run, ServeScope then raw in each of {a.repeats} repeats, medians; "
        f"clients on CPU {'0' if pin else 'any'}, server on CPU "
        f"{server_cpu if pin else 'any'}, server burst {burst}"
        f"{'' if a.burst is not None else ' (the mock default)'}"
    )
    head = (
        f"{'streams':>7} {'client':<10} {'tokens/s':>10} {'req/s':>7} {'server tok/s':>12} "
        f"{'usage tok/s':>11} {'client CPU':>10} {'tok/CPU-s':>9} {'server CPU':>10}"
    )
    print(head)
    print("-" * len(head))
    keys = ("tokens_s", "requests_s", "server_tokens_s", "usage_s", "tokens_per_cpu_s")

    server_rates: list[float] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        MockServer(output_tokens=TOKENS, burst=burst, cpu=server_cpu) as url,
    ):
        store = open_store(f"duckdb:///{tmp}/capacity.duckdb")  # one store, one run per call
        for streams in (int(s) for s in a.streams.split(",")):
            runs: dict[str, list[dict[str, float]]] = {"servescope": [], "raw": []}
            for _ in range(a.repeats):
                runs["servescope"].append(
                    run_servescope(store, url, streams, a.duration, a.workers)
                )
                runs["raw"].append(run_raw(url, body, streams, a.duration))
            server_rates += [r["server_tokens_per_cpu_s"] for rs in runs.values() for r in rs]
            for name, res in runs.items():

                def med(key: str, res: list[dict[str, float]] = res) -> float:
                    return statistics.median(r[key] for r in res)

                cpu = f"{med('client_cpu'):.0%}"
                if name == "servescope":
                    cpu = f"{med('worker_cpu'):.0%}+{med('client_cpu') - med('worker_cpu'):.0%}"
                errors, unmatched = max(r["errors"] for r in res), max(r["unmatched"] for r in res)
                print(
                    f"{streams:>7} {name:<10} {med('tokens_s'):>10,.0f} {med('requests_s'):>7,.0f} "
                    f"{med('server_tokens_s'):>12,.0f} {med('usage_s'):>11,.0f} {cpu:>10} "
                    f"{med('tokens_per_cpu_s'):>9,.0f} {med('server_cpu'):>10.0%}"
                    + (f"  errors {errors:.0f}" if errors else "")
                    + (
                        f"  server-completed ≠ client requests by {unmatched:.0f}"
                        if unmatched
                        else ""
                    )
                )
            ratios = {
                k: statistics.median(
                    s[k] / r[k] for s, r in zip(runs["servescope"], runs["raw"], strict=True)
                )
                for k in keys
            }
            print(
                f"{streams:>7} {'SS / raw':<10} {ratios['tokens_s']:>10.2f} "
                f"{ratios['requests_s']:>7.2f} {ratios['server_tokens_s']:>12.2f} "
                f"{ratios['usage_s']:>11.2f} {'':>10} {ratios['tokens_per_cpu_s']:>9.2f}",
                flush=True,
            )
    print(
        "client CPU: share of one core over the window (ServeScope: worker + coordinator, whose "
        "DuckDB writes are in it); tok/CPU-s: tokens per second of that client CPU, i.e. "
        "tokens/s with a core to itself; ratios: medians of the per-repeat ratios"
    )
    print(
        f"server (burst {burst}): {statistics.median(server_rates):,.0f} tokens per CPU-second "
        "(median of all runs): a client that reaches this is server-bound"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
