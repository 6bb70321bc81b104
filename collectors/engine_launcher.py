"""Start an engine with one parameter set, wait until it serves, stop it, keep its log tail.

The sweep (``services/commands/sweep.py``) calls, per point: :func:`render` (the launch command
of a template or a custom command, from the normalised parameters), :func:`launch` (a child in
its own process group, stdout and stderr to a log file), :func:`wait_healthy` (GET ``/health``,
else ``/v1/models``, until 200 or the deadline), and :func:`stop` (SIGTERM to the group, SIGKILL
after the timeout). Each failure is a :class:`LaunchFailure` carrying the point's status
(``failed_to_start``, ``health_timeout``, ``oom``, ``crashed``), a one-line reason and the log's
tail (credentials redacted): the sweep records it and goes on.

Templates map the normalised vocabulary (DESIGN §6) to each engine's flags. Where the flag names
were checked: TGI in launcher/src/main.rs (commit db931fc), trtllm-serve in
tensorrt_llm/commands/serve.py, llama.cpp in common/arg.cpp, SGLang from launch commands in its
repository's tests and benchmarks; vLLM's (flags derived from EngineArgs' field names in
vllm/engine/arg_utils.py) were not re-read here, the snapshot being too large to fetch:

- vLLM ``vllm serve`` (vllm/engine/arg_utils.py):
  --max-num-seqs, --gpu-memory-utilization, --max-num-batched-tokens, --block-size,
  --enable-prefix-caching / --no-enable-prefix-caching, --max-model-len, --tensor-parallel-size.
- SGLang ``python -m sglang.launch_server`` (python/sglang/srt/server_args.py): --model-path,
  --max-running-requests, --mem-fraction-static, --chunked-prefill-size, --page-size,
  --disable-radix-cache (prefix caching is on unless it is given), --context-length, --tp-size.
- TGI ``text-generation-launcher`` (launcher/src/main.rs, clap ``long`` args): --model-id,
  --max-batch-size, --cuda-memory-fraction, --max-batch-prefill-tokens, --max-total-tokens,
  --num-shard; prefix caching is the PREFIX_CACHING environment variable (main.rs reads it).
  ``max_batch_size`` maps to --max-batch-size (the running batch), not
  --max-concurrent-requests, which refuses requests beyond it instead of queueing them.
- TensorRT-LLM ``trtllm-serve`` (tensorrt_llm/commands/serve.py, click options): --max_batch_size,
  --kv_cache_free_gpu_memory_fraction, --max_num_tokens, --max_seq_len, --tp_size.
  Block size and KV-block reuse are LLM-API options (an --extra_llm_api_options YAML): not here.
- llama.cpp ``llama-server`` (common/arg.cpp): -np/--parallel, -c/--ctx-size (the TOTAL context,
  shared by the -np slots: each slot gets ctx_size / np), -b/--batch-size, --metrics.
- the sim (``servescope sim``, services/commands/sim.py), run as ``<python> -m cli sim``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import string
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import httpx

from collectors import http_client
from collectors.redact import MASK, argv_secrets, redact, redact_argv
from errors import InputError

#: Where ``python -m cli`` runs (the repository root).
PROJECT_ROOT: Final = Path(__file__).resolve().parents[1]
#: Lines of the engine's log kept with a point.
LOG_TAIL_LINES: Final = 40
HEALTH_PATHS: Final = ("/health", "/v1/models")

# How one parameter becomes flags: ("value", "--flag") → --flag VALUE; ("bool", on, off) →
# the on flags when true, the off flags when false (either may be empty); ("env", NAME, on, off)
# → an environment variable.
Rule = tuple[Any, ...]


@dataclass(frozen=True)
class Template:
    """A ready launch template: the program and fixed arguments (``{model}``, ``{port}``,
    ``{host}`` placeholders) and one rule per parameter it can express."""

    name: str
    framework: str
    base: tuple[str, ...]
    rules: Mapping[str, Rule]
    #: flags whose value is a secret, beyond ``collectors.redact.SECRET_FLAGS``
    secret_flags: tuple[str, ...] = ()

    @property
    def accepts(self) -> tuple[str, ...]:
        return tuple(self.rules)


TEMPLATES: Final[dict[str, Template]] = {
    "vllm": Template(
        "vllm",
        "vllm",
        ("vllm", "serve", "{model}", "--host", "{host}", "--port", "{port}"),
        {
            "max_batch_size": ("value", "--max-num-seqs"),
            "kv_memory_fraction": ("value", "--gpu-memory-utilization"),
            "max_batched_tokens": ("value", "--max-num-batched-tokens"),
            "block_size": ("value", "--block-size"),
            "prefix_caching": ("bool", ("--enable-prefix-caching",), ("--no-enable-prefix-caching",)),  # noqa: E501
            "max_model_len": ("value", "--max-model-len"),
            "tensor_parallel": ("value", "--tensor-parallel-size"),
        },
        ("--api-key",),
    ),
    "sglang": Template(
        "sglang",
        "sglang",
        (
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "{model}",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--enable-metrics",
        ),
        {
            "max_batch_size": ("value", "--max-running-requests"),
            "kv_memory_fraction": ("value", "--mem-fraction-static"),
            "max_batched_tokens": ("value", "--chunked-prefill-size"),
            "block_size": ("value", "--page-size"),
            "prefix_caching": ("bool", (), ("--disable-radix-cache",)),
            "max_model_len": ("value", "--context-length"),
            "tensor_parallel": ("value", "--tp-size"),
        },
        ("--api-key", "--admin-api-key"),
    ),
    "tgi": Template(
        "tgi",
        "tgi",
        ("text-generation-launcher", "--model-id", "{model}", "--hostname", "{host}", "--port", "{port}"),  # noqa: E501
        {
            "max_batch_size": ("value", "--max-batch-size"),
            "kv_memory_fraction": ("value", "--cuda-memory-fraction"),
            "max_batched_tokens": ("value", "--max-batch-prefill-tokens"),
            "prefix_caching": ("env", "PREFIX_CACHING", "1", "0"),
            "max_model_len": ("value", "--max-total-tokens"),
            "tensor_parallel": ("value", "--num-shard"),
        },
        ("--api-key",),
    ),
    "trtllm": Template(
        "trtllm",
        "tensorrt-llm",
        ("trtllm-serve", "{model}", "--host", "{host}", "--port", "{port}"),
        {
            "max_batch_size": ("value", "--max_batch_size"),
            "kv_memory_fraction": ("value", "--kv_cache_free_gpu_memory_fraction"),
            "max_batched_tokens": ("value", "--max_num_tokens"),
            "max_model_len": ("value", "--max_seq_len"),
            "tensor_parallel": ("value", "--tp_size"),
        },
    ),
    "llamacpp": Template(
        "llamacpp",
        "llama.cpp",
        ("llama-server", "-m", "{model}", "--host", "{host}", "--port", "{port}", "--metrics"),
        {
            "max_batch_size": ("value", "-np"),
            "ctx_size": ("value", "-c"),
            "max_batched_tokens": ("value", "-b"),
        },
        ("--api-key", "-hft", "--hf-token"),
    ),
    "sim": Template(
        "sim",
        "sim",
        (sys.executable, "-m", "cli", "sim", "--host", "{host}", "--port", "{port}", "--model", "{model}"),  # noqa: E501
        {
            "max_batch_size": ("value", "--max-batch-size"),
            "kv_memory_fraction": ("value", "--kv-memory-fraction"),
            "max_batched_tokens": ("value", "--max-batched-tokens"),
            "block_size": ("value", "--block-size"),
            "prefix_caching": ("bool", ("--prefix-caching", "on"), ("--prefix-caching", "off")),
            "tensor_parallel": ("value", "--tp"),
        },
    ),
}  # fmt: skip


@dataclass(frozen=True)
class LaunchPlan:
    """One engine launch: argv, extra environment, the command as shown and stored.

    Secrets never leave the plan: the spec's environment values are shown as ``NAME=***``
    (only the values a template's parameter rule sets, ``public_env``, are shown), and the
    values after secret-bearing flags and in ``NAME_KEY=``/``NAME_TOKEN=`` arguments are masked
    (``collectors.redact``); :attr:`secrets` are the values to mask in the engine's log tail."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    framework: str | None = None
    cwd: str | None = None
    public_env: frozenset[str] = frozenset()  # env names set by a template's parameter rule
    secret_flags: tuple[str, ...] = ()

    @property
    def display(self) -> str:
        """The full command, shell-quoted, env assignments first (no credentials)."""
        envs = [
            f"{k}={shlex.quote(v) if k in self.public_env else MASK}" for k, v in self.env.items()
        ]
        argv = redact_argv(self.argv, self.secret_flags)
        return redact(" ".join([*envs, *(_shown(a) for a in argv)]), self.secrets)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values never shown or stored: the spec's environment values and the command
        line's secret arguments."""
        hidden = [v for k, v in self.env.items() if k not in self.public_env]
        return tuple(dict.fromkeys([*hidden, *argv_secrets(self.argv, self.secret_flags)]))


def _shown(arg: str) -> str:
    """``arg`` shell-quoted, a masked value (``***``, ``--flag=***``) left readable."""
    if arg.endswith(MASK):
        return shlex.quote(arg.removesuffix(MASK)) + MASK if arg != MASK else MASK
    return shlex.quote(arg)


def _flag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render(
    *,
    template: str | None,
    command: str | None,
    params: Mapping[str, Any],
    model: str | None,
    port: int | str,
    host: str = "127.0.0.1",
    binary: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """The launch of one point. ``template`` names a ready template (``TEMPLATES``);
    ``command`` is a custom command line with ``{param}`` placeholders (plus ``{port}``,
    ``{model}``, ``{host}``). A parameter the template or command cannot express → InputError
    naming what it accepts."""
    extra_env = dict(env or {})
    public: set[str] = set()
    fill = {"port": str(port), "model": model or "", "host": host}
    if template is not None:
        tpl = TEMPLATES.get(template)
        if tpl is None:
            raise InputError(
                f"engine template {template!r} unknown; accepted: {', '.join(TEMPLATES)}"
            )
        cannot = [p for p in params if p not in tpl.rules]
        if cannot:
            raise InputError(
                f"the {template} template cannot express {', '.join(cannot)}; "
                f"it accepts: {', '.join(tpl.accepts)}",
                hint="remove them from [grid] / [engine].params, or use a custom command "
                "with {param} placeholders",
            )
        argv = [a.format(**fill) for a in tpl.base]
        if binary:
            argv[0] = binary
        for name, value in params.items():
            rule = tpl.rules[name]
            if rule[0] == "value":
                argv += [rule[1], _flag_value(value)]
            elif rule[0] == "bool":
                argv += list(rule[1] if value else rule[2])
            elif rule[0] == "env":
                extra_env[rule[1]] = rule[2] if value else rule[3]
                public.add(rule[1])
        argv += list(args)
        cwd = str(PROJECT_ROOT) if template == "sim" else None
        return LaunchPlan(
            tuple(argv), extra_env, tpl.framework, cwd, frozenset(public), tpl.secret_flags
        )
    if command is None:
        raise InputError("an engine needs a template or a command")
    fields = {f for _, f, _, _ in string.Formatter().parse(command) if f}
    values = {k: _flag_value(v) for k, v in params.items()}
    known = {*values, *fill}
    missing = sorted(fields - known)
    if missing:
        raise InputError(
            f"the engine command uses {{{missing[0]}}}, which no parameter gives; available: "
            + ", ".join(sorted(known)),
        )
    unused = [p for p in params if p not in fields]
    if unused:
        raise InputError(
            f"the engine command cannot express {', '.join(unused)} (no {{{unused[0]}}} "
            "placeholder); it accepts: " + ", ".join(sorted(fields - set(fill)) or ["nothing"]),
        )
    try:
        argv = [part.format(**fill, **values) for part in shlex.split(command)]
    except ValueError as exc:
        raise InputError(f"the engine command cannot be split into arguments: {exc}") from None
    if binary:
        argv[0] = binary
    return LaunchPlan(tuple([*argv, *args]), extra_env, None, None)


# --- ports -----------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``port`` (a previous engine's connections left in
    TIME_WAIT do not count: servers bind with SO_REUSEADDR, and so does this check)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


# --- failures --------------------------------------------------------------------------------

_OOM_RE = re.compile(
    r"out of memory|CUDA out of memory|OutOfMemoryError|OOM[- ]kill|Killed process|"
    r"cudaErrorMemoryAllocation|failed to allocate",
    re.IGNORECASE,
)
_PORT_RE = re.compile(r"address already in use|EADDRINUSE|couldn't bind|bind failed", re.IGNORECASE)


class LaunchFailure(Exception):
    """A point's engine could not serve: ``status`` is the sweep_points status."""

    def __init__(self, status: str, reason: str, log_tail: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.log_tail = log_tail


def classify_exit(log_text: str, returncode: int | None) -> str:
    """The status of an engine that ended on its own: ``oom`` (an out-of-memory message in
    the log, or killed by SIGKILL / exit 137, as the kernel's OOM killer does) or ``crashed``."""
    if _OOM_RE.search(log_text) or returncode in (137, -signal.SIGKILL):
        return "oom"
    return "crashed"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, secrets: Sequence[str] = ()) -> str:
    """The last ``lines`` lines of the log at ``path``, credentials redacted ('' if none)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return redact("\n".join(text.splitlines()[-lines:]), secrets)


def _last_line(tail: str) -> str:
    for line in reversed(tail.splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""


# --- the engine process ----------------------------------------------------------------------


@dataclass
class Engine:
    """A launched engine: its process (own process group), URL and log."""

    plan: LaunchPlan
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    log: IO[bytes]
    stopped_by_us: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.log.flush()
        return log_tail(self.log_path, lines, self.plan.secrets)

    def failure(self) -> LaunchFailure | None:
        """Why the engine is gone, when it ended on its own; None while it runs."""
        if self.alive() or self.stopped_by_us:
            return None
        tail = self.tail()
        status = classify_exit(tail, self.proc.returncode)
        last = _last_line(tail)
        reason = f"the engine exited with code {self.proc.returncode}"
        if status == "oom":
            reason = f"out of memory: the engine exited with code {self.proc.returncode}"
        return LaunchFailure(status, f"{reason}: {last}" if last else reason, tail)


def launch(
    plan: LaunchPlan,
    *,
    log_path: Path,
    port: int,
    host: str = "127.0.0.1",
    environ: Mapping[str, str] | None = None,
) -> Engine:
    """Start ``plan`` in its own process group, stdout and stderr to ``log_path``.

    Raises :class:`LaunchFailure` (``failed_to_start``) when the program does not exist or
    cannot be run, or when ``port`` is already taken."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if port_in_use(port, host):
        log_path.write_text(f"servescope sweep: port {port} on {host} is already in use\n")
        raise LaunchFailure(
            "failed_to_start",
            f"port in use: {host}:{port} is taken",
            log_tail(log_path, secrets=plan.secrets),
        )
    log = log_path.open("ab")
    log.write(f"$ {plan.display}\n".encode())
    log.flush()
    env = {**(os.environ if environ is None else environ), **plan.env}
    try:
        proc = subprocess.Popen(
            list(plan.argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=plan.cwd,
            env=env,
            start_new_session=True,  # its own process group: stop() signals every child
        )
    except OSError as exc:  # FileNotFoundError, PermissionError, …
        why = (
            f"command not found: {plan.argv[0]}"
            if isinstance(exc, FileNotFoundError)
            else f"cannot run {plan.argv[0]}: {exc.strerror or exc}"
        )
        log.write(f"servescope sweep: {why}\n".encode())
        log.close()
        raise LaunchFailure(
            "failed_to_start", why, log_tail(log_path, secrets=plan.secrets)
        ) from None
    return Engine(plan, proc, f"http://{host}:{port}", log_path, log)


def wait_healthy(
    engine: Engine,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    transport: httpx.BaseTransport | None = None,
    poll_s: float = 0.25,
) -> str:
    """Poll the engine until ``/health`` (or ``/v1/models``) answers 200; returns the path that
    answered. Raises :class:`LaunchFailure`: the engine exited (``failed_to_start``, or
    ``oom`` when its log says so; ``port in use`` when it could not bind), or
    ``health_timeout`` past ``timeout_s``."""
    deadline = clock() + timeout_s
    last = "no answer"
    with http_client.sync_client(2.0, transport=transport) as client:
        while True:
            if not engine.alive():
                tail = engine.tail()
                status = classify_exit(tail, engine.proc.returncode)
                last_line = _last_line(tail)
                if status == "oom":
                    reason = f"out of memory at start (exit {engine.proc.returncode})"
                elif _PORT_RE.search(tail):
                    reason = f"port in use: the engine could not bind {engine.url}"
                else:
                    reason = f"exited at once with code {engine.proc.returncode}"
                    status = "failed_to_start"
                if last_line:
                    reason += f": {last_line}"
                raise LaunchFailure(status, reason, tail)
            for path in HEALTH_PATHS:
                try:
                    resp = client.get(engine.url + path)
                except httpx.HTTPError as exc:
                    last = f"{path}: {exc.__class__.__name__}"
                    break  # not listening yet: no use asking the other path
                if resp.status_code == 200:
                    return path
                last = f"{path}: HTTP {resp.status_code}"
            if clock() >= deadline:
                raise LaunchFailure(
                    "health_timeout",
                    f"not healthy within {timeout_s:g} s (last: {last})",
                    engine.tail(),
                )
            sleep(poll_s)


def stop(engine: Engine, timeout_s: float) -> int | None:
    """SIGTERM to the engine's process group, SIGKILL after ``timeout_s``; returns its exit
    code. Safe to call twice, and on an engine that already ended."""
    engine.stopped_by_us = engine.stopped_by_us or engine.alive()
    try:
        pgid = os.getpgid(engine.proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    try:
        engine.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        engine.proc.wait(timeout=30)
    # children that outlived the leader (an engine's workers) go with the group
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        engine.log.close()
    return engine.proc.returncode


# --- an engine left behind -------------------------------------------------------------------


def process_start(pid: int) -> float | None:
    """When process ``pid`` started, in clock ticks since boot as ``/proc/PID/stat`` reports it
    (a pid reused by another process has another start); None when there is no such process or
    no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # the command name (field 2) may hold spaces and parentheses: fields follow the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return float(fields[19])  # field 22, starttime
    except (IndexError, ValueError):
        return None


def is_running(pid: int | None, start: float | None) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (``process_start``)."""
    if not pid or start is None:
        return False
    now = process_start(int(pid))
    return now is not None and now == start


def stop_group(pgid: int, start: float | None, timeout_s: float = 10.0) -> bool:
    """Stop the process group ``pgid`` an earlier sweep launched (its leader started at
    ``start``): SIGTERM, SIGKILL after ``timeout_s``. Only when it is still that engine: a
    leader with another start (the pid was reused) is left alone. True when a group was
    signalled."""
    leader = process_start(pgid)
    if leader is not None and leader != start:
        return False  # another process has the pid now
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        if process_start(pgid) is None and not _group_alive(pgid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in group ``pgid`` (``/proc``; True without it)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
