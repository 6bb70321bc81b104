"""The measuring process: one event loop that only sends, reads and times.

Started by ``runner`` (multiprocessing, spawn) once per worker and load level. It ignores
SIGINT (the coordinator decides when to stop); SIGTERM, which reaches it only when sent to it
directly (a container or service manager stopping every process), stops it as the
coordinator's "stop" does: what completed is sent, the rest is cancelled. It opens its
connections and sends its warm-up requests, reports ``ready``, starts at the coordinator's
common start instant, and streams result batches back through its pipe from a sender thread, so
a slow reader never blocks the event loop.

Messages to the coordinator: ("ready", warmup_done) · ("batch", ResultBatch) ·
("done", DriverSummary) · ("error", text). From it: ("go", start_epoch) · ("stop",).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import queue
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

import httpx

from collectors.loadgen.client import HttpxEndpoint
from collectors.loadgen.engine import Clock, Driver, WorkerPlan


def raise_nofile_limit() -> None:
    """Many streams need many sockets: lift the soft open-files limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def make_endpoint(plan: WorkerPlan) -> HttpxEndpoint:
    transport = (
        httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=None))
        if (plan.transport == "httpx")
        else None
    )
    return HttpxEndpoint(
        plan.endpoint,
        api=plan.api,
        api_key=plan.api_key,
        timeout_s=plan.timeout_s,
        transport=transport,
        timestamps=plan.timestamps,
    )


def worker_main(plan: WorkerPlan, conn: Connection) -> None:
    """Body of a worker process: measure ``plan``, talking to the coordinator over ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise_nofile_limit()
    out: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def sender() -> None:
        while True:
            msg = out.get()
            if msg is None:
                return
            try:
                conn.send(msg)
            except (OSError, EOFError):
                return

    thread = threading.Thread(target=sender, name="servescope-sender", daemon=True)
    thread.start()
    # Timestamps are taken on this process's event loop: keep the cyclic GC from pausing it
    # for milliseconds mid-stream. Long-lived objects are frozen out of collections, and the
    # young generation is collected rarely (request records are freed by reference counting).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)
    try:
        asyncio.run(_run(plan, conn, out))
    except BaseException:
        out.put(("error", traceback.format_exc(limit=8)))
    finally:
        out.put(None)
        thread.join(timeout=30)
        conn.close()


async def _run(plan: WorkerPlan, conn: Connection, out: queue.SimpleQueue[Any]) -> None:
    loop = asyncio.get_running_loop()
    clock = Clock()
    endpoint = make_endpoint(plan)
    driver = Driver(plan, endpoint, lambda batch: out.put(("batch", batch)), clock=clock)
    go: asyncio.Future[float | None] = loop.create_future()

    def settle(value: float | None) -> None:
        if not go.done():
            go.set_result(value)

    def receiver() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = ("stop",)
            try:
                if msg[0] == "go":
                    loop.call_soon_threadsafe(settle, float(msg[1]))
                elif msg[0] == "stop":
                    loop.call_soon_threadsafe(settle, None)
                    loop.call_soon_threadsafe(driver.stop)
                    return
            except RuntimeError:  # the loop has already finished
                return

    threading.Thread(target=receiver, name="servescope-receiver", daemon=True).start()

    def terminate() -> None:
        settle(None)
        driver.stop()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        done = await driver.warmup()
        out.put(("ready", done))
        start_epoch = await go
        if start_epoch is None:
            driver.summary.interrupted = True
            out.put(("done", driver.summary))
            return
        summary = await driver.run(start_perf=start_epoch - clock.offset)
        out.put(("done", summary))
    finally:
        await endpoint.aclose()


def main(argv: list[str]) -> int:
    """``python -m collectors.loadgen.worker FD``: FD is a socket to the coordinator, which
    first sends the ``WorkerPlan``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[1]))
    try:
        plan = conn.recv()
    except (EOFError, OSError):
        return 1
    if not isinstance(plan, WorkerPlan):
        return 2
    worker_main(plan, conn)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
