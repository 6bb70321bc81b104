"""`servescope demo`: fill the store with real measurements of simulated engines, then open the UI.

Starts a few reference engines (``servescope sim``, each in its own process so that engine and
load generator do not share a core), drives each with the ``mixed`` workload at several load
levels through the real load generator, and stores one run per level. Run ids are fixed
(``demo-<engine>-c<N>``): a level already stored as completed is skipped, so running the demo
again adds no duplicate data and finishes an interrupted demo.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import httpx

from collectors import http_client
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from errors import EndpointError
from services.commands import PROJECT_ROOT
from services.commands.ui import run_ui
from store import ingest, tables
from store.db import Store
from store.lifecycle import open_store


@dataclass(frozen=True)
class DemoEngine:
    """One simulated engine of the demo: a name and its `servescope sim` flags."""

    key: str
    gpu: str
    model: str
    description: str
    params: dict[str, object] = field(default_factory=dict)

    def sim_args(self, port: int) -> list[str]:
        args = ["--port", str(port), "--gpu", self.gpu, "--model", self.model]
        for key, value in self.params.items():
            flag = "--" + key.replace("_", "-")
            args += [flag, ("on" if value else "off") if isinstance(value, bool) else str(value)]
        return args


ENGINES: tuple[DemoEngine, ...] = (
    DemoEngine(
        "h100-8b",
        "H100-SXM-80GB",
        "llama-3.1-8b",
        "Llama-3.1-8B on an H100, default batching (256 sequences), prefix caching on",
        {"max_batch_size": 256, "prefix_caching": True},
    ),
    DemoEngine(
        "h100-8b-batch8",
        "H100-SXM-80GB",
        "llama-3.1-8b",
        "the same engine capped at 8 running sequences: requests queue at higher load",
        {"max_batch_size": 8, "prefix_caching": True},
    ),
    DemoEngine(
        "a100-8b-smallkv",
        "A100-SXM-80GB",
        "llama-3.1-8b",
        "Llama-3.1-8B on an A100 with a small KV cache (2,048 blocks): KV pressure and preemption",
        {"max_batch_size": 64, "num_gpu_blocks": 2048},
    ),
)
LEVELS: tuple[int, ...] = (1, 8, 32)
REQUESTS_PER_STREAM = 6  # requests per level = max(12, 6 × concurrency)
MAX_TOKENS = 128  # caps the mixed workload's outputs so the whole demo takes ~2–3 minutes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_sim(engine: DemoEngine, *, startup_timeout_s: float = 60.0) -> Iterator[str]:
    """Run ``servescope sim`` for ``engine`` in a child process; yields its base URL. The child
    ends with the block, however it ends (an error, Ctrl-C, SIGTERM: see cli.py)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "cli", "sim", *engine.sim_args(port)]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + startup_timeout_s
        with http_client.sync_client(2.0) as client:
            while True:
                if proc.poll() is not None:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise EndpointError(f"the demo sim {engine.key} exited: {err.strip()[-500:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url + "/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise EndpointError(f"the demo sim {engine.key} did not answer on {url}")
                time.sleep(0.1)
        yield url
    finally:
        # a stop signal (SIGTERM/SIGHUP arrive as KeyboardInterrupt, see cli.py) may come while
        # this waits: the sim is killed then, never left running
        try:
            proc.terminate()
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr:
                proc.stderr.close()


def _completed_run_ids(store: Store) -> set[str]:
    df = store.read_df(
        "SELECT run_id FROM runs WHERE run_id LIKE 'demo-%' AND status = 'completed'"
    )
    return set(df["run_id"])


def plan(
    store: Store, engines: Sequence[DemoEngine], levels: Sequence[int]
) -> dict[str, list[int]]:
    """The levels still to measure per engine (completed demo runs are skipped)."""
    done = _completed_run_ids(store)
    todo: dict[str, list[int]] = {}
    for engine in engines:
        missing = [c for c in levels if f"demo-{engine.key}-c{c}" not in done]
        if missing:
            todo[engine.key] = missing
    return todo


def run_demo(
    store: Store,
    *,
    engines: Sequence[DemoEngine] = ENGINES,
    levels: Sequence[int] = LEVELS,
    requests_per_stream: int = REQUESTS_PER_STREAM,
    max_tokens: int = MAX_TOKENS,
    progress: bool = True,
) -> list[str]:
    """Measure every engine × level not yet stored; returns the run ids written now."""
    todo = plan(store, engines, levels)
    written: list[str] = []
    for engine in engines:
        if engine.key not in todo:
            continue
        # an interrupted level left a partial run under the same id: replace it
        for c in todo[engine.key]:
            ingest.delete_run(store, f"demo-{engine.key}-c{c}")
        with running_sim(engine) as url:
            for c in todo[engine.key]:
                config = BenchConfig(
                    endpoint=url,
                    api="chat",
                    workload="mixed",
                    concurrency=(c,),
                    requests=max(12, requests_per_stream * c),
                    warmup=min(c, 4),
                    max_tokens=max_tokens,
                    seed=7,
                    name=f"demo {engine.key}",
                    run_id=f"demo-{engine.key}",
                    engine_params=dict(engine.params),
                    gpu_name=engine.gpu,
                    gpu_count=1,
                    tags=("demo",),
                    notes=f"Demo: {engine.description}. Simulated engine (framework 'sim').",
                )
                written += run_benchmark(config, store, progress=progress)
    return written


def fill(db_url: str | None, *, progress: bool = True) -> Store:
    """What `servescope demo` does before opening the UI: measure what is missing, report."""
    store = open_store(db_url)
    todo = plan(store, ENGINES, LEVELS)
    if todo:
        levels = sum(len(v) for v in todo.values())
        print(
            f"demo: measuring {levels} load level(s) on {len(todo)} simulated engine(s) into "
            f"{store.url} (about {levels * 12} s)",
            file=sys.stderr,
        )
        run_demo(store, progress=progress)
    else:
        print(f"demo: already stored in {store.url}; nothing to add", file=sys.stderr)
    counts = tables.table_counts(store)
    print(
        f"demo: the store holds {counts['runs']} runs, {counts['requests']:,} requests",
        file=sys.stderr,
    )
    return store


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand to cli.py's parser."""
    p = sub.add_parser(
        "demo",
        help="measure simulated engines into the store, then open the dashboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--no-ui", action="store_true", help="fill the store, do not open the UI")
    p.add_argument("--port", type=int, default=8501, help="dashboard port (default 8501)")
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope demo``: fill the store, then (unless ``--no-ui``) run the
    dashboard in the foreground as ``servescope ui`` does."""
    fill(args.db, progress=not args.quiet)
    if args.no_ui:
        return 0
    return run_ui(argparse.Namespace(host="127.0.0.1", port=args.port, db=args.db))
