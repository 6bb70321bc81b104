"""A sweep spec (TOML): parsed, validated, and expanded into points. Pure (no I/O).

``parse_spec(text, env=...)`` turns the text of a spec file into a :class:`SweepSpec`, or raises
``InputError`` naming the key and what it accepts; ``expand(spec)`` gives the grid's points, each
with a stable id (a hash of its parameters, so a resumed sweep finds the same ids). The format
is documented in docs/tune.md::

    name = "sim-h100-8b"
    [engine]                 # template = sim | vllm | sglang | tgi | trtllm | llamacpp, or
    template = "sim"         # command = "my-server --port {port} --batch {max_batch_size}",
    model = "llama-3.1-8b"   # or endpoint = "http://host:8000" alone (client params only)
    args = ["--time-scale", "20"]
    params = { prefix_caching = true }        # fixed engine params, every point
    startup_timeout_s = 120
    stop_timeout_s = 15
    [grid]                   # normalised parameter → values, or { from, to, steps[, scale] }
    max_batch_size = [8, 64]
    max_batched_tokens = { from = 2048, to = 8192, steps = 3, scale = "log" }
    [load]
    workload = "mixed"
    kind = "rate"            # rate | concurrency
    search = { low = 1, high = 32, precision = 0.1, max_runs = 6 }   # or levels = [2, 4, 8]
    requests = 120           # or duration_s = 30
    warmup = 4
    [slo]
    profile = "interactive-chat"
    max_memory_fraction = 0.95          # guard-rails (optional)
    max_preemptions_per_1k = 5
    [sweep]
    repeats = 1
    mode = "grid"            # grid | efficient
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import string
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from analysis import toml_input
from errors import InputError

#: The normalised engine-parameter vocabulary (DESIGN §6), plus llama.cpp's total context.
ENGINE_PARAMS: Final[tuple[str, ...]] = (
    "max_batch_size",
    "kv_memory_fraction",
    "max_batched_tokens",
    "block_size",
    "prefix_caching",
    "max_model_len",
    "tensor_parallel",
    "ctx_size",
)
#: What the load generator varies: the only parameters of an already-running endpoint.
CLIENT_PARAMS: Final[tuple[str, ...]] = ("concurrency", "rate", "max_tokens")
TEMPLATE_NAMES: Final[tuple[str, ...]] = ("sim", "vllm", "sglang", "tgi", "trtllm", "llamacpp")
LOAD_KINDS: Final[tuple[str, ...]] = ("rate", "concurrency")
MODES: Final[tuple[str, ...]] = ("grid", "efficient")
APIS: Final[tuple[str, ...]] = ("chat", "completions")
#: Placeholders every custom command may use besides the parameters.
BUILTIN_PLACEHOLDERS: Final[tuple[str, ...]] = ("port", "model", "host")
#: The most runs one sweep may measure (grid points × repeats): at a minute or more a point,
#: 1,000 is already most of a day. A range's ``steps`` is bounded by it too.
MAX_SWEEP_RUNS: Final = 1000
_PLACEHOLDER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_PARAM_KIND: Final[Mapping[str, str]] = {
    "max_batch_size": "int",
    "kv_memory_fraction": "fraction",
    "max_batched_tokens": "int",
    "block_size": "int",
    "prefix_caching": "bool",
    "max_model_len": "int",
    "tensor_parallel": "int",
    "ctx_size": "int",
    "concurrency": "int",
    "rate": "number",
    "max_tokens": "int",
}
_ACCEPTS: Final[Mapping[str, str]] = {
    "int": "whole numbers ≥ 1",
    "fraction": "numbers above 0 up to 1",
    "bool": "true / false (or on / off)",
    "number": "numbers above 0",
}
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


@dataclass(frozen=True)
class EngineSpec:
    """How each point's engine is started (or the endpoint already running)."""

    template: str | None = None
    command: str | None = None
    endpoint: str | None = None
    model: str | None = None
    binary: str | None = None  # replaces a template's program (e.g. a llama-server path)
    args: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)  # fixed engine params
    env: Mapping[str, str] = field(default_factory=dict)
    port: int = 0  # 0: a free port per launch
    startup_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0

    @property
    def label(self) -> str:
        if self.endpoint:
            return "endpoint"
        return self.template or "custom"


@dataclass(frozen=True)
class SearchSpec:
    """The SLO-capacity search of each point (analysis.capacity_search.SearchPlan's fields)."""

    low: float
    high: float
    precision: float = 0.1
    max_runs: int = 6
    start: float | None = None


@dataclass(frozen=True)
class LoadSpec:
    workload: str
    kind: str  # rate | concurrency
    levels: tuple[float, ...] = ()
    search: SearchSpec | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    max_tokens: int | None = None
    api: str = "chat"
    arrival: str = "poisson"
    seed: int = 0
    timeout_s: float = 120.0

    def describe(self) -> str:
        size = f"{self.requests} requests" if self.requests else f"{self.duration_s:g} s"
        unit = "req/s" if self.kind == "rate" else "streams"
        if self.search is not None:
            s = self.search
            how = (
                f"capacity search over {self.kind} {s.low:g}–{s.high:g} {unit}, precision "
                f"{s.precision:g}, at most {s.max_runs} runs"
            )
        else:
            how = f"{self.kind} levels {', '.join(f'{v:g}' for v in self.levels)} {unit}"
        return f"{self.workload}: {how}; {size} per level, warm-up {self.warmup}"


@dataclass(frozen=True)
class SloSpec:
    profile: str
    max_memory_fraction: float | None = None
    max_preemptions_per_1k: float | None = None


@dataclass(frozen=True)
class SweepSpec:
    name: str
    engine: EngineSpec
    grid: Mapping[str, tuple[Any, ...]]
    load: LoadSpec
    slo: SloSpec
    repeats: int = 1
    mode: str = "grid"
    #: catalog names of the GPU and model the efficient mode's prior assumes ([sweep] gpu,
    #: model; for the sim template its --gpu and model by default)
    prior_gpu: str | None = None
    prior_model: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The spec as run (stored in sweeps.spec): JSON-able, env values left out."""
        out = asdict(self)
        out["grid"] = {k: list(v) for k, v in self.grid.items()}
        out["engine"]["env"] = sorted(self.engine.env)  # names only: values may be secrets
        out["engine"]["args"] = list(self.engine.args)
        out["load"]["levels"] = list(self.load.levels)
        # where services.views.tune.guard_rails reads them
        out["guard_rails"] = {
            "max_memory_fraction": self.slo.max_memory_fraction,
            "max_preemptions_per_1k": self.slo.max_preemptions_per_1k,
        }
        return out


@dataclass(frozen=True)
class Point:
    """One configuration of the grid: its stable id and its parameters (fixed ∪ grid)."""

    point_id: str
    params: Mapping[str, Any]
    grid_params: Mapping[str, Any]  # the swept ones only (labels, tables)

    @property
    def label(self) -> str:
        if not self.grid_params:
            return "(fixed)"
        return " ".join(f"{k}={format_value(v)}" for k, v in self.grid_params.items())


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def point_id(params: Mapping[str, Any]) -> str:
    """A stable id of a parameter set: the same params (any key order) → the same id."""
    canonical = json.dumps(
        {k: params[k] for k in sorted(params)}, sort_keys=True, separators=(",", ":")
    )
    return "p" + hashlib.sha256(canonical.encode()).hexdigest()[:10]


# --- parsing ---------------------------------------------------------------------------------


def _err(key: str, reason: str, *, hint: str | None = None) -> InputError:
    return InputError(f"sweep spec: {key}: {reason}", hint=hint)


def _table(doc: Mapping[str, Any], key: str, *, required: bool = True) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        if required:
            raise _err(f"[{key}]", "missing", hint="see docs/tune.md for the spec format")
        return {}
    if not isinstance(value, dict):
        raise _err(f"[{key}]", f"must be a table, got {type(value).__name__}")
    return value


def _unknown(table: Mapping[str, Any], where: str, accepted: Sequence[str]) -> None:
    for key in table:
        if key not in accepted:
            raise _err(f"{where}.{key}", f"unknown key; accepted: {', '.join(accepted)}")


def _number(value: Any, key: str, *, minimum: float = 0.0, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _err(key, f"must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (v <= minimum if strict else v < minimum):
        sign = ">" if strict else "≥"
        raise _err(key, f"must be {sign} {minimum:g}, got {value!r}")
    return v


def _whole(value: Any, key: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(key, f"must be a whole number ≥ {minimum}, got {value!r}")
    if value < minimum:
        raise _err(key, f"must be a whole number ≥ {minimum}, got {value!r}")
    return int(value)


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(key, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _expand_env(text: str, key: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in env or not env[name]:
            raise _err(key, f"${{{name}}} is not set in the environment", hint=f"export {name}=…")
        return env[name]

    return _ENV_RE.sub(sub, text)


def _param_value(name: str, value: Any, key: str) -> Any:
    kind = _PARAM_KIND.get(name)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("on", "off", "true", "false"):
            return value.strip().lower() in ("on", "true")
        raise _err(key, f"{value!r} is not one of: {_ACCEPTS['bool']}")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _err(key, f"{value!r} is not one of: {_ACCEPTS['int']}")
        return int(value)
    if kind in ("fraction", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _err(key, f"{value!r} is not one of: {_ACCEPTS[kind]}")
        v = float(value)
        if not math.isfinite(v) or v <= 0 or (kind == "fraction" and v > 1):
            raise _err(key, f"{value!r} is not one of: {_ACCEPTS[kind]}")
        return v
    return value


def _range(name: str, spec: Mapping[str, Any], key: str) -> list[Any]:
    _unknown(spec, key, ("from", "to", "steps", "scale"))
    for k in ("from", "to", "steps"):
        if k not in spec:
            raise _err(key, f"a range needs from, to and steps; {k!r} is missing")
    lo = _number(spec["from"], f"{key}.from")
    hi = _number(spec["to"], f"{key}.to")
    steps = _whole(spec["steps"], f"{key}.steps", minimum=2)
    if steps > MAX_SWEEP_RUNS:
        raise _err(
            f"{key}.steps",
            f"{steps:,} is more than the {MAX_SWEEP_RUNS:,} runs a sweep may measure",
        )
    if hi <= lo:
        raise _err(key, f"to ({hi:g}) must be above from ({lo:g})")
    scale = spec.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise _err(f"{key}.scale", f"{scale!r} unknown; accepted: linear, log")
    if scale == "log":
        values = [lo * (hi / lo) ** (i / (steps - 1)) for i in range(steps)]
    else:
        values = [lo + (hi - lo) * i / (steps - 1) for i in range(steps)]
    if _PARAM_KIND.get(name) == "int":
        ints: list[Any] = []
        for v in values:
            r = round(v)
            if r not in ints:
                ints.append(r)
        return ints
    return [round(v, 6) for v in values]


def _placeholders(command: str) -> str:
    """``command`` when each of its ``{…}`` is a placeholder name (``{port}``,
    ``{max_batch_size}``); ``{}``, ``{0}``, ``{a.b}``, ``{a[0]}``, ``{a!r}``, ``{a:5}`` and a lone
    brace are refused here, before any launch (``{{``/``}}`` are literal braces)."""
    key = "[engine].command"
    hint = "placeholders are {name} (a parameter, port, model or host); write {{ and }} for a brace"
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(command)]
    except ValueError as exc:  # "Single '{' encountered", "unmatched '{'"
        raise _err(key, f"{exc} in {command!r}", hint=hint) from None
    for field_name, spec, conv in fields:
        if field_name is None:
            continue
        if not _PLACEHOLDER_RE.fullmatch(field_name) or spec or conv:
            shown = (
                "{" + field_name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            )
            raise _err(key, f"{shown} is not a placeholder name", hint=hint)
    return command


def _grid(table: Mapping[str, Any], *, endpoint: bool) -> dict[str, tuple[Any, ...]]:
    accepted = CLIENT_PARAMS if endpoint else (*ENGINE_PARAMS, "max_tokens")
    grid: dict[str, tuple[Any, ...]] = {}
    for name, raw in table.items():
        key = f"[grid].{name}"
        if name not in accepted:
            if endpoint and name in ENGINE_PARAMS:
                raise _err(
                    key,
                    "an engine parameter cannot be swept against an already-running endpoint "
                    f"(nothing restarts it); accepted: {', '.join(CLIENT_PARAMS)}",
                    hint="give [engine] template or command to launch the engine per point",
                )
            raise _err(key, f"unknown parameter; accepted: {', '.join(accepted)}")
        if isinstance(raw, dict):
            values = _range(name, raw, key)
        elif isinstance(raw, list):
            values = list(raw)
        else:
            values = [raw]
        if not values:
            raise _err(key, "needs at least one value")
        checked = [_param_value(name, v, key) for v in values]
        if len(set(map(repr, checked))) != len(checked):
            raise _err(key, f"a value is given twice in {values!r}")
        grid[name] = tuple(checked)
    return grid


def _engine(table: Mapping[str, Any], env: Mapping[str, str]) -> EngineSpec:
    accepted = (
        "template",
        "command",
        "endpoint",
        "model",
        "binary",
        "args",
        "params",
        "env",
        "port",
        "startup_timeout_s",
        "stop_timeout_s",
    )
    _unknown(table, "[engine]", accepted)
    given = [k for k in ("template", "command", "endpoint") if table.get(k)]
    if len(given) != 1:
        raise _err(
            "[engine]",
            "give exactly one of template (" + ", ".join(TEMPLATE_NAMES) + "), command "
            "(with {param} placeholders) or endpoint (an engine already running)"
            + (f"; got {', '.join(given)}" if given else ""),
        )
    template = table.get("template")
    if template is not None and template not in TEMPLATE_NAMES:
        raise _err(
            "[engine].template", f"{template!r} unknown; accepted: {', '.join(TEMPLATE_NAMES)}"
        )
    endpoint = table.get("endpoint")
    if endpoint is not None:
        endpoint = _expand_env(_text(endpoint, "[engine].endpoint"), "[engine].endpoint", env)
        if not re.match(r"^https?://[^/]+", endpoint):
            raise _err("[engine].endpoint", f"{endpoint!r} is not an http(s) URL")
        extra = [k for k in ("model", "binary", "args", "params", "env", "port") if k in table]
        extra = [k for k in extra if k != "model"]
        if extra:
            raise _err(
                f"[engine].{extra[0]}",
                "applies to a launched engine, not to an endpoint already running",
            )
    command = table.get("command")
    if command is not None:
        command = _placeholders(
            _expand_env(_text(command, "[engine].command"), "[engine].command", env)
        )
    model = table.get("model")
    if model is not None:
        model = _expand_env(_text(model, "[engine].model"), "[engine].model", env)
    elif template is not None:
        raise _err("[engine].model", "missing: a template needs the model to serve")
    binary = table.get("binary")
    if binary is not None:
        binary = _expand_env(_text(binary, "[engine].binary"), "[engine].binary", env)
    args_raw = table.get("args", [])
    if not isinstance(args_raw, list):
        raise _err("[engine].args", 'must be a list of strings, e.g. ["--seed", "0"]')
    args = tuple(
        _expand_env(str(a), "[engine].args", env)
        for a in args_raw
        if isinstance(a, str | int | float) and not isinstance(a, bool)
    )
    if len(args) != len(args_raw):
        raise _err("[engine].args", "must be a list of strings or numbers")
    params_raw = table.get("params", {})
    if not isinstance(params_raw, dict):
        raise _err("[engine].params", "must be a table of fixed engine parameters")
    params: dict[str, Any] = {}
    for name, value in params_raw.items():
        if name not in ENGINE_PARAMS:
            raise _err(f"[engine].params.{name}", f"unknown; accepted: {', '.join(ENGINE_PARAMS)}")
        params[name] = _param_value(name, value, f"[engine].params.{name}")
    env_raw = table.get("env", {})
    if not isinstance(env_raw, dict) or not all(isinstance(v, str) for v in env_raw.values()):
        raise _err("[engine].env", 'must be a table of NAME = "value" strings')
    port = _whole(table.get("port", 0), "[engine].port", minimum=0) if "port" in table else 0
    if port > 65535:
        raise _err("[engine].port", f"{port} is not a TCP port (0: pick a free one)")
    return EngineSpec(
        template=template,
        command=command,
        endpoint=endpoint,
        model=model,
        binary=binary,
        args=args,
        params=params,
        env={k: _expand_env(v, f"[engine].env.{k}", env) for k, v in env_raw.items()},
        port=port,
        startup_timeout_s=_number(
            table.get("startup_timeout_s", 600.0), "[engine].startup_timeout_s"
        ),
        stop_timeout_s=_number(table.get("stop_timeout_s", 30.0), "[engine].stop_timeout_s"),
    )


def _load(table: Mapping[str, Any], grid: Mapping[str, Any]) -> LoadSpec:
    accepted = (
        "workload",
        "kind",
        "levels",
        "search",
        "requests",
        "duration_s",
        "warmup",
        "max_tokens",
        "api",
        "arrival",
        "seed",
        "timeout_s",
    )
    _unknown(table, "[load]", accepted)
    workload = _text(table.get("workload"), "[load].workload")
    kind = table.get("kind")
    if kind not in LOAD_KINDS:
        raise _err("[load].kind", f"{kind!r} unknown; accepted: {', '.join(LOAD_KINDS)}")
    swept_load = [k for k in ("concurrency", "rate") if k in grid]
    if swept_load and swept_load != [kind]:
        raise _err(
            f"[grid].{swept_load[0]}", f"the grid sweeps {swept_load[0]} but [load].kind is {kind}"
        )
    levels: tuple[float, ...] = ()
    search: SearchSpec | None = None
    if swept_load:
        if "levels" in table or "search" in table:
            raise _err(
                "[load]",
                f"the grid already sweeps {kind}: give neither levels nor search",
            )
    elif ("levels" in table) == ("search" in table):
        raise _err(
            "[load]",
            "give exactly one of levels = [...] (fixed load levels) or search = { low, high, "
            "precision, max_runs } (SLO-capacity search)",
        )
    elif "levels" in table:
        raw = table["levels"]
        if not isinstance(raw, list) or not raw:
            raise _err("[load].levels", "must be a non-empty list of numbers")
        vals = [_number(v, "[load].levels") for v in raw]
        if kind == "concurrency" and any(v != int(v) for v in vals):
            raise _err("[load].levels", f"concurrency levels must be whole numbers, got {raw!r}")
        if len(set(vals)) != len(vals):
            raise _err("[load].levels", f"a level is given twice in {raw!r}")
        levels = tuple(sorted(vals))
    else:
        s = table["search"]
        if not isinstance(s, dict):
            raise _err("[load].search", "must be a table { low, high, precision, max_runs }")
        _unknown(s, "[load].search", ("low", "high", "precision", "max_runs", "start"))
        for k in ("low", "high"):
            if k not in s:
                raise _err(f"[load].search.{k}", "missing")
        low = _number(s["low"], "[load].search.low")
        high = _number(s["high"], "[load].search.high")
        if high <= low:
            raise _err("[load].search", f"high ({high:g}) must be above low ({low:g})")
        start = s.get("start")
        search = SearchSpec(
            low=low,
            high=high,
            precision=_number(s.get("precision", 0.1), "[load].search.precision"),
            max_runs=_whole(s.get("max_runs", 6), "[load].search.max_runs", minimum=2),
            start=None if start is None else _number(start, "[load].search.start"),
        )
        if search.start is not None and not low <= search.start <= high:
            raise _err("[load].search.start", f"must lie between low and high, got {start!r}")
    has_req, has_dur = "requests" in table, "duration_s" in table
    if has_req == has_dur:
        raise _err("[load]", "give exactly one of requests = N or duration_s = S per level")
    api = table.get("api", "chat")
    if api not in APIS:
        raise _err("[load].api", f"{api!r} unknown; accepted: {', '.join(APIS)}")
    arrival = table.get("arrival", "poisson")
    if not isinstance(arrival, str):
        raise _err("[load].arrival", f"must be a string, got {arrival!r}")
    return LoadSpec(
        workload=workload,
        kind=kind,
        levels=levels,
        search=search,
        requests=_whole(table["requests"], "[load].requests") if has_req else None,
        duration_s=_number(table["duration_s"], "[load].duration_s") if has_dur else None,
        warmup=_whole(table.get("warmup", 0), "[load].warmup", minimum=0),
        max_tokens=_whole(table["max_tokens"], "[load].max_tokens")
        if "max_tokens" in table
        else None,
        api=api,
        arrival=arrival,
        seed=_whole(table.get("seed", 0), "[load].seed", minimum=0),
        timeout_s=_number(table.get("timeout_s", 120.0), "[load].timeout_s"),
    )


def _slo(table: Mapping[str, Any]) -> SloSpec:
    _unknown(table, "[slo]", ("profile", "max_memory_fraction", "max_preemptions_per_1k"))
    mem = table.get("max_memory_fraction")
    if mem is not None:
        mem = _number(mem, "[slo].max_memory_fraction")
        if mem > 1:
            raise _err("[slo].max_memory_fraction", f"must be above 0 up to 1, got {mem:g}")
    pre = table.get("max_preemptions_per_1k")
    return SloSpec(
        profile=_text(table.get("profile"), "[slo].profile"),
        max_memory_fraction=mem,
        max_preemptions_per_1k=None
        if pre is None
        else _number(pre, "[slo].max_preemptions_per_1k", strict=False),
    )


def parse_spec(text: str, *, env: Mapping[str, str] | None = None) -> SweepSpec:
    """The spec in ``text`` (TOML), validated; ``${VAR}`` in the engine's model, binary, args,
    command, endpoint and env values are taken from ``env``. Raises ``InputError``."""
    env = env or {}
    try:
        doc = toml_input.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"sweep spec: not valid TOML: {exc}") from None
    _unknown(doc, "spec", ("name", "engine", "grid", "load", "slo", "sweep"))
    name = _text(doc.get("name"), "name")
    if not _NAME_RE.match(name):
        raise _err("name", f"{name!r}: letters, digits, '.', '_' and '-' only (≤ 80)")
    engine = _engine(_table(doc, "engine"), env)
    grid_table = _table(doc, "grid", required=False)
    grid = _grid(grid_table, endpoint=engine.endpoint is not None)
    overlap = sorted(set(grid) & set(engine.params))
    if overlap:
        raise _err(f"[grid].{overlap[0]}", "is also fixed in [engine].params: give it once")
    load = _load(_table(doc, "load"), grid)
    slo = _slo(_table(doc, "slo"))
    sweep = _table(doc, "sweep", required=False)
    _unknown(sweep, "[sweep]", ("repeats", "mode", "gpu", "model"))
    mode = sweep.get("mode", "grid")
    if mode not in MODES:
        raise _err("[sweep].mode", f"{mode!r} unknown; accepted: {', '.join(MODES)}")
    prior_gpu = sweep.get("gpu")
    prior_model = sweep.get("model")
    if engine.template == "sim":
        args = list(engine.args)
        if prior_gpu is None:
            prior_gpu = args[args.index("--gpu") + 1] if "--gpu" in args[:-1] else "H100-SXM-80GB"
        prior_model = prior_model or engine.model
    if mode == "efficient" and not (prior_gpu and prior_model):
        raise _err(
            "[sweep]",
            "mode efficient orders points by a prior from the performance model: give gpu and "
            "model (catalog names, seeds/gpus.toml and seeds/models.toml)",
        )
    repeats = _whole(sweep.get("repeats", 1), "[sweep].repeats")
    runs = repeats * math.prod(len(values) for values in grid.values())
    if runs > MAX_SWEEP_RUNS:
        sizes = " × ".join(f"{len(v):,} {n}" for n, v in grid.items())
        raise _err(
            "[grid]",
            f"{sizes}{f' × {repeats} repeats' if repeats > 1 else ''} = {runs:,} runs, more "
            f"than the {MAX_SWEEP_RUNS:,} a sweep may measure",
            hint="fewer values or steps (a coarse sweep first, then a finer one around its best)",
        )
    return SweepSpec(
        name=name,
        engine=engine,
        grid=grid,
        load=load,
        slo=slo,
        repeats=repeats,
        mode=mode,
        prior_gpu=None if prior_gpu is None else _text(prior_gpu, "[sweep].gpu"),
        prior_model=None if prior_model is None else _text(prior_model, "[sweep].model"),
    )


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the grid (the cartesian product, in the spec's key order), fixed
    engine params merged in; a spec with no grid is one point."""
    names = list(spec.grid)
    points: list[Point] = []
    for combo in itertools.product(*(spec.grid[n] for n in names)):
        swept = dict(zip(names, combo, strict=True))
        params = {**spec.engine.params, **swept}
        points.append(Point(point_id(params), params, swept))
    return points


def engine_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The engine part of a point's params (client params removed)."""
    return {k: v for k, v in params.items() if k not in CLIENT_PARAMS}
