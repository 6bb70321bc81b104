"""Workloads (``seeds/workloads.toml`` entries) and dataset files → the requests of a run.

A workload is parsed and validated here (the catalog only stores the TOML fields); errors name
the workload, the key and what is accepted. ``RequestFactory.conversation(i)`` builds request
``i`` of a run deterministically from the seed alone, so several worker processes can each build
their own share without coordination.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis import toml_input
from collectors.loadgen.prompts import Calibration, synthesise
from collectors.loadgen.traces import MAX_REQUEST_TOKENS, Trace
from errors import ConfigError, InputError

DISTS = ("lognormal", "normal", "uniform", "fixed", "histogram")
HISTORY = ("full", "none")
PREFIX_CHOICES = ("uniform", "zipf")
_KNOWN_KEYS = {
    "name",
    "description",
    "source",
    "input_tokens",
    "output_tokens",
    "mix",
    "prefix_tokens",
    "num_prefixes",
    "prefix_choice",
    "prefix_zipf_s",
    "turns",
    "history",
    "api",
    # catalog bookkeeping that may come back with an entry
    "origin",
    "seed_hash",
    "updated_at",
    "spec",
}


@dataclass(frozen=True)
class Length:
    """A distribution of token lengths; draws are clipped to [min, max] and rounded.

    ``histogram``: piecewise uniform over ``edges`` (lo0, le1, le2, …): a bucket is chosen by
    ``weights`` (one per bucket), then a uniform whole number inside (lo, le]; ``min``/``max``
    are then the smallest and largest whole numbers the buckets hold and ``mean`` the exact
    expected value.
    """

    dist: str
    mean: float = 0.0
    sd: float = 0.0
    min: int = 1
    max: int = 1_000_000
    edges: tuple[float, ...] = ()
    weights: tuple[float, ...] = ()

    def sample(self, rng: random.Random) -> int:
        d = self.dist
        if d == "fixed":
            v = self.mean
        elif d == "uniform":
            return rng.randint(self.min, self.max)
        elif d == "histogram":
            (i,) = rng.choices(range(len(self.weights)), weights=self.weights)
            lo, hi = _whole_range(self.edges[i], self.edges[i + 1])
            return rng.randint(lo, hi)
        elif d == "normal":
            v = rng.gauss(self.mean, self.sd)
        else:  # lognormal with the given mean and sd of the lengths themselves
            if self.sd <= 0:
                v = self.mean
            else:
                sigma2 = math.log1p((self.sd / self.mean) ** 2)
                v = rng.lognormvariate(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2))
        return int(min(self.max, max(self.min, round(v))))

    @property
    def expected(self) -> float:
        if self.dist == "uniform":
            return (self.min + self.max) / 2
        if self.dist == "histogram":
            return self.mean
        return min(self.max, max(self.min, self.mean))


def _whole_range(lo: float, le: float) -> tuple[int, int]:
    """The whole numbers inside (lo, le], at least 1: (first, last); first > last when none."""
    return max(1, math.floor(lo) + 1), math.floor(le)


HISTOGRAM_EXAMPLE = '{ dist = "histogram", edges = [0, 128, 512, 2048], weights = [0.5, 0.3, 0.2] }'


def _parse_histogram(value: Mapping[str, Any], *, where: str) -> Length:
    """``{ dist = "histogram", edges = [lo0, le1, …], weights = [w1, …] }`` → a ``Length``."""
    accepted = f"accepted: {HISTOGRAM_EXAMPLE}"
    unknown = set(value) - {"dist", "edges", "weights"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}; a histogram has dist, edges, weights",
            hint=accepted,
        )

    def numbers(key: str) -> list[float]:
        raw = value.get(key)
        if (
            not isinstance(raw, Sequence)
            or isinstance(raw, str)
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in raw)
        ):
            raise ConfigError(
                f"{where}: histogram {key!r} must be a list of numbers", hint=accepted
            )
        out = [float(x) for x in raw]
        if not all(math.isfinite(x) for x in out):
            raise ConfigError(
                f"{where}: histogram {key!r} must be finite numbers, got {raw!r}",
                hint="an open +Inf bucket must be closed at a stated finite maximum length; "
                + accepted,
            )
        if key == "edges" and any(x > MAX_REQUEST_TOKENS for x in out):
            raise ConfigError(
                f"{where}: histogram edge {max(out):g} is above the {MAX_REQUEST_TOKENS:,} "
                "tokens a request may have",
                hint=accepted,
            )
        return out

    edges, weights = numbers("edges"), numbers("weights")
    if len(edges) < 2 or len(weights) != len(edges) - 1:
        raise ConfigError(
            f"{where}: a histogram needs n + 1 edges (the first bucket's lower bound, then each "
            f"bucket's upper bound) for n weights, got {len(edges)} edges and {len(weights)} "
            "weights",
            hint=accepted,
        )
    if edges[0] < 0 or any(b <= a for a, b in itertools.pairwise(edges)):
        raise ConfigError(
            f"{where}: histogram edges must be ≥ 0 and strictly ascending, got {edges}",
            hint=accepted,
        )
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ConfigError(
            f"{where}: histogram weights must be ≥ 0 with a positive sum, got {weights}",
            hint=accepted,
        )
    for lo, le, w in zip(edges, edges[1:], weights, strict=False):
        first, last = _whole_range(lo, le)
        if w > 0 and first > last:
            raise ConfigError(
                f"{where}: the histogram bucket ({lo:g}, {le:g}] holds no whole number of "
                f"tokens ≥ 1 but has weight {w:g}",
                hint="lengths are whole tokens ≥ 1: give it weight 0 or widen it",
            )
    total = sum(weights)
    mean = 0.0
    used: list[tuple[int, int]] = []
    for lo, le, w in zip(edges, edges[1:], weights, strict=False):
        if w > 0:
            first, last = _whole_range(lo, le)
            mean += w / total * (first + last) / 2
            used.append((first, last))
    return Length(
        "histogram",
        mean,
        0.0,
        min(a for a, _ in used),
        max(b for _, b in used),
        tuple(edges),
        tuple(weights),
    )


def parse_length(value: Any, *, where: str) -> Length:
    """A length spec: an integer (fixed) or a table {dist, mean, sd, min, max | value}."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a number of tokens or a distribution table")
    if isinstance(value, int | float):
        if not 1 <= value <= MAX_REQUEST_TOKENS:  # NaN fails too
            raise ConfigError(
                f"{where}: a length must be ≥ 1 and ≤ {MAX_REQUEST_TOKENS:,} tokens, got {value!r}"
            )
        return Length("fixed", float(value), 0.0, int(value), int(value))
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{where}: expected a number of tokens or a table like "
            '{ dist = "lognormal", mean = 128, sd = 48, min = 16, max = 512 }'
        )
    dist = value.get("dist")
    if dist not in DISTS:
        raise ConfigError(f"{where}: unknown dist {dist!r}; choose one of: {', '.join(DISTS)}")
    if dist == "histogram":
        return _parse_histogram(value, where=where)
    unknown = set(value) - {"dist", "mean", "sd", "min", "max", "value"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}; a length has dist, mean, sd, min, max"
            " (or value for fixed)"
        )

    def num(key: str, default: float | None = None) -> float:
        v = value.get(key, default)
        if v is None or isinstance(v, bool) or not isinstance(v, int | float):
            raise ConfigError(f"{where}: {dist} needs a numeric {key!r}")
        if not math.isfinite(v) or v > MAX_REQUEST_TOKENS:
            raise ConfigError(
                f"{where}: {key} {v!r} is not a length up to the {MAX_REQUEST_TOKENS:,} tokens "
                "a request may have"
            )
        return float(v)

    if dist == "fixed":
        v = num("value") if "value" in value else num("mean")
        if v < 1:
            raise ConfigError(f"{where}: a length must be ≥ 1 token, got {v!r}")
        return Length("fixed", v, 0.0, int(v), int(v))
    lo = int(num("min", 1))
    hi = int(num("max", 1_000_000))
    if lo < 1 or hi < lo:
        raise ConfigError(f"{where}: need 1 ≤ min ≤ max, got min={lo}, max={hi}")
    if dist == "uniform":
        return Length("uniform", (lo + hi) / 2, 0.0, lo, hi)
    mean, sd = num("mean"), num("sd", 0.0)
    if mean < 1 or sd < 0:  # a mean below a token also made sd / mean overflow
        raise ConfigError(f"{where}: need mean ≥ 1 and sd ≥ 0, got mean={mean}, sd={sd}")
    return Length(dist, mean, sd, lo, hi)


@dataclass(frozen=True)
class Shape:
    """One component of a workload: input and output length distributions, with a weight."""

    input: Length
    output: Length
    weight: float = 1.0
    label: str = ""


@dataclass(frozen=True)
class Workload:
    name: str
    shapes: tuple[Shape, ...]
    prefix_tokens: Length | None = None
    num_prefixes: int = 0
    prefix_choice: str = "uniform"
    prefix_zipf_s: float = 1.1
    turns: Length | None = None
    history: str = "full"
    api: str = "any"
    description: str = ""

    @property
    def multi_turn(self) -> bool:
        return self.turns is not None


def parse_workload(entry: Mapping[str, Any]) -> Workload:
    """Validate a workload entry (the TOML fields) into a ``Workload``."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("a workload needs a non-empty 'name'")
    where = f"workload {name!r}"
    unknown = set(entry) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}; accepted: "
            + ", ".join(sorted(_KNOWN_KEYS - {"origin", "seed_hash", "updated_at", "spec"}))
        )
    shapes: list[Shape] = []
    if "mix" in entry:
        if "input_tokens" in entry or "output_tokens" in entry:
            raise ConfigError(f"{where}: give either 'mix' or input_tokens/output_tokens, not both")
        mix = entry["mix"]
        if not isinstance(mix, Sequence) or isinstance(mix, str) or not mix:
            raise ConfigError(f"{where}: 'mix' must be a non-empty list of components")
        for i, comp in enumerate(mix):
            cw = f"{where}: mix[{i}]"
            if not isinstance(comp, Mapping):
                raise ConfigError(
                    f"{cw}: expected a table with weight, input_tokens, output_tokens"
                )
            bad = set(comp) - {"weight", "input_tokens", "output_tokens", "label"}
            if bad:
                raise ConfigError(
                    f"{cw}: unknown key(s) {sorted(bad)}; accepted: weight, input_tokens, "
                    "output_tokens, label"
                )
            weight = comp.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
                raise ConfigError(f"{cw}: weight must be a number > 0, got {weight!r}")
            for key in ("input_tokens", "output_tokens"):
                if key not in comp:
                    raise ConfigError(f"{cw}: missing {key!r}")
            shapes.append(
                Shape(
                    parse_length(comp["input_tokens"], where=f"{cw}.input_tokens"),
                    parse_length(comp["output_tokens"], where=f"{cw}.output_tokens"),
                    float(weight),
                    str(comp.get("label", f"component {i}")),
                )
            )
    else:
        for key in ("input_tokens", "output_tokens"):
            if key not in entry:
                raise ConfigError(f"{where}: missing {key!r} (or a 'mix' of components)")
        shapes.append(
            Shape(
                parse_length(entry["input_tokens"], where=f"{where}.input_tokens"),
                parse_length(entry["output_tokens"], where=f"{where}.output_tokens"),
            )
        )
    prefix: Length | None = None
    num_prefixes = 0
    if "prefix_tokens" in entry or "num_prefixes" in entry:
        if "prefix_tokens" not in entry or "num_prefixes" not in entry:
            raise ConfigError(f"{where}: shared prefixes need both prefix_tokens and num_prefixes")
        prefix = parse_length(entry["prefix_tokens"], where=f"{where}.prefix_tokens")
        n = entry["num_prefixes"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{where}: num_prefixes must be an integer ≥ 1, got {n!r}")
        num_prefixes = n
    choice = entry.get("prefix_choice", "uniform")
    if choice not in PREFIX_CHOICES:
        raise ConfigError(
            f"{where}: prefix_choice {choice!r} unknown; choose one of: {', '.join(PREFIX_CHOICES)}"
        )
    zipf_s = entry.get("prefix_zipf_s", 1.1)
    if isinstance(zipf_s, bool) or not isinstance(zipf_s, int | float) or zipf_s <= 0:
        raise ConfigError(f"{where}: prefix_zipf_s must be a number > 0, got {zipf_s!r}")
    turns: Length | None = None
    if "turns" in entry:
        turns = parse_length(entry["turns"], where=f"{where}.turns")
    history = entry.get("history", "full")
    if history not in HISTORY:
        raise ConfigError(
            f"{where}: history {history!r} unknown; choose one of: {', '.join(HISTORY)}"
        )
    api = entry.get("api", "any")
    if api not in ("any", "chat", "completions"):
        raise ConfigError(f"{where}: api {api!r} unknown; choose one of: any, chat, completions")
    return Workload(
        name=name,
        shapes=tuple(shapes),
        prefix_tokens=prefix,
        num_prefixes=num_prefixes,
        prefix_choice=str(choice),
        prefix_zipf_s=float(zipf_s),
        turns=turns,
        history=str(history),
        api=str(api),
        description=str(entry.get("description", "")),
    )


# --- workload files -----------------------------------------------------------------------

WORKLOAD_FILE_FORMS = (
    "a TOML file with one [[workloads]] entry (name, input_tokens, output_tokens or mix, …; "
    "the form of seeds/workloads.toml and of `servescope workload from-metrics`), or those "
    "keys at the top level"
)


def load_workload_file(path: str | Path) -> dict[str, Any]:
    """The one workload entry of a TOML file (``bench --workload-file``), validated with
    ``parse_workload``; errors name the file and what is accepted."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"workload file {p} does not exist", hint=WORKLOAD_FILE_FORMS) from None
    except OSError as exc:
        raise InputError(f"workload file {p} cannot be read: {exc}") from None
    try:
        doc = toml_input.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(
            f"workload file {p} is not valid TOML: {exc}", hint=WORKLOAD_FILE_FORMS
        ) from None
    if "workloads" in doc:
        entries = doc["workloads"]
        if set(doc) - {"workloads"}:
            raise InputError(
                f"workload file {p}: top-level key(s) {sorted(set(doc) - {'workloads'})} next "
                "to [[workloads]]",
                hint=WORKLOAD_FILE_FORMS,
            )
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise InputError(
                f"workload file {p}: 'workloads' must be [[workloads]] tables",
                hint=WORKLOAD_FILE_FORMS,
            )
        if len(entries) != 1:
            names = ", ".join(repr(e.get("name")) for e in entries) or "none"
            raise InputError(
                f"workload file {p} holds {len(entries)} workloads ({names}); a workload file "
                "holds exactly one",
                hint=WORKLOAD_FILE_FORMS,
            )
        entry: dict[str, Any] = dict(entries[0])
    else:
        entry = dict(doc)
    try:
        parse_workload(entry)
    except ConfigError as exc:
        raise InputError(
            f"workload file {p}: {exc.message}", hint=exc.hint or WORKLOAD_FILE_FORMS
        ) from None
    return entry


# --- dataset files ------------------------------------------------------------------------

DATASET_FORMATS = (
    'JSONL with one {"prompt": "...", "max_tokens"?: N} or {"messages": [...], "max_tokens"?: N}'
    " object per line",
    'a JSON list of such objects, or ShareGPT-style [{"conversations": [{"from": "human", '
    '"value": "..."}, {"from": "gpt", "value": "..."}]}]',
)


@dataclass(frozen=True)
class DatasetItem:
    prompt: str | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    max_tokens: int | None = None


def _bad_dataset(path: Path, reason: str) -> InputError:
    return InputError(
        f"dataset {path}: {reason}",
        hint="accepted formats: " + "; or ".join(DATASET_FORMATS),
    )


def _json_kind(value: Any) -> str:
    """How JSON would name ``value``'s type, with the value: ``a number (42)``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _item(obj: Any, path: Path, where: str) -> DatasetItem | None:
    if not isinstance(obj, Mapping):
        raise _bad_dataset(path, f"{where}: expected a JSON object, got {type(obj).__name__}")
    max_tokens = obj.get("max_tokens", obj.get("output_tokens", obj.get("output_len")))
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise _bad_dataset(path, f"{where}: max_tokens must be an integer ≥ 1, got {max_tokens!r}")
    other_keys = any(k in obj for k in ("messages", "conversations", "conversation"))
    if "prompt" in obj and not (obj["prompt"] is None and other_keys):
        if not isinstance(obj["prompt"], str):
            raise _bad_dataset(
                path,
                f"{where}: 'prompt' must be a string, found {_json_kind(obj['prompt'])}",
            )
        return DatasetItem(prompt=obj["prompt"], max_tokens=max_tokens)
    if "messages" in obj:
        msgs = obj["messages"]
        if (
            not isinstance(msgs, list)
            or not msgs
            or not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in msgs)
        ):
            raise _bad_dataset(path, f"{where}: 'messages' must be a list of {{role, content}}")
        return DatasetItem(messages=tuple(dict(m) for m in msgs), max_tokens=max_tokens)
    convs = obj.get("conversations", obj.get("conversation"))
    if isinstance(convs, list):
        human = [c for c in convs if isinstance(c, Mapping) and c.get("from") in ("human", "user")]
        reply = [
            c for c in convs if isinstance(c, Mapping) and c.get("from") in ("gpt", "assistant")
        ]
        if not human or not isinstance(human[0].get("value"), str):
            return None  # ShareGPT files have such entries; skipped as vLLM does
        if max_tokens is None and reply and isinstance(reply[0].get("value"), str):
            # no tokenizer: ~4 characters per token, the usual estimate for English
            max_tokens = max(1, math.ceil(len(reply[0]["value"]) / 4))
        return DatasetItem(prompt=human[0]["value"], max_tokens=max_tokens)
    raise _bad_dataset(
        path, f"{where}: no 'prompt', 'messages' or 'conversations' key (keys: {sorted(obj)[:8]})"
    )


def load_dataset(path: str | Path) -> list[DatasetItem]:
    """Read a dataset file; errors name the file, the line or index, and the accepted formats."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"dataset file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"dataset file {p} cannot be read: {exc}") from None
    stripped = text.lstrip()
    items: list[DatasetItem] = []
    if not stripped:
        raise _bad_dataset(p, "the file is empty")
    if stripped[0] == "[":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _bad_dataset(p, f"not valid JSON: {exc}") from None
        for i, obj in enumerate(data):
            item = _item(obj, p, f"item {i}")
            if item is not None:
                items.append(item)
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise _bad_dataset(p, f"line {n} is not valid JSON: {exc}") from None
            item = _item(obj, p, f"line {n}")
            if item is not None:
                items.append(item)
    if not items:
        raise _bad_dataset(p, "no usable prompts found")
    return items


# --- requests -----------------------------------------------------------------------------


@dataclass
class TurnSpec:
    """One request: the new user text (or prompt), its output budget and target length."""

    text: str
    max_tokens: int
    target_input_tokens: int | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None  # dataset chat items


@dataclass
class Conversation:
    index: int
    turns: list[TurnSpec] = field(default_factory=list)
    prefix: str | None = None
    label: str = ""


def _mix_rng(seed: int, index: int) -> random.Random:
    return random.Random((seed * 1_000_003 + index) * 2_654_435_761 % (1 << 63))


class RequestFactory:
    """Builds conversation ``i`` of a run from (seed, i) alone: a deterministic request plan."""

    def __init__(
        self,
        *,
        workload: Workload | None,
        dataset: Sequence[DatasetItem] | None,
        calibration: Calibration,
        seed: int,
        max_tokens: int | None = None,
        trace: Trace | None = None,
    ) -> None:
        if trace is None and (workload is None) == (dataset is None):
            raise ConfigError("a run needs exactly one of a workload or a dataset")
        self.trace = trace
        self.workload = workload
        self.dataset = list(dataset) if dataset is not None else None
        self.cal = calibration
        self.seed = seed
        self.max_tokens = max_tokens
        self._prefixes: list[str] = []
        self._order: list[int] = []
        if workload is not None and workload.prefix_tokens is not None:
            for k in range(workload.num_prefixes):
                prng = random.Random(f"prefix-{seed}-{k}")
                n = workload.prefix_tokens.sample(prng)
                self._prefixes.append(synthesise(prng, n, calibration, with_overhead=False))
        if self.dataset is not None:
            self._order = list(range(len(self.dataset)))
            random.Random(seed).shuffle(self._order)
        self._weights: list[float] = []
        if workload is not None:
            total = sum(s.weight for s in workload.shapes)
            acc = 0.0
            for s in workload.shapes:
                acc += s.weight / total
                self._weights.append(acc)

    def _prefix(self, rng: random.Random) -> str | None:
        if not self._prefixes:
            return None
        assert self.workload is not None
        n = len(self._prefixes)
        if self.workload.prefix_choice == "zipf":
            weights = [1.0 / (k + 1) ** self.workload.prefix_zipf_s for k in range(n)]
            return self._prefixes[rng.choices(range(n), weights=weights)[0]]
        return self._prefixes[rng.randrange(n)]

    def conversation(self, index: int) -> Conversation:
        rng = _mix_rng(self.seed, index)
        if self.trace is not None:
            # request i of the trace: its own input and output lengths (the output asked for
            # exactly: max_tokens, with ignore_eos where the engine honours it)
            n = len(self.trace.input_tokens)
            target = self.trace.input_tokens[index % n]
            out = self.max_tokens or self.trace.output_tokens[index % n]
            text = synthesise(rng, target, self.cal, with_overhead=True)
            return Conversation(index, [TurnSpec(text, max(1, out), target)], None, "trace")
        if self.dataset is not None:
            item = self.dataset[self._order[index % len(self._order)]]
            mt = self.max_tokens or item.max_tokens or 256
            return Conversation(
                index, [TurnSpec(item.prompt or "", mt, None, item.messages)], None, "dataset"
            )
        wl = self.workload
        assert wl is not None
        u = rng.random()
        shape = wl.shapes[-1]
        for s, edge in zip(wl.shapes, self._weights, strict=True):
            if u <= edge:
                shape = s
                break
        n_turns = wl.turns.sample(rng) if wl.turns is not None else 1
        prefix = self._prefix(rng)
        turns: list[TurnSpec] = []
        for t in range(n_turns):
            target = shape.input.sample(rng)
            out = self.max_tokens or shape.output.sample(rng)
            first = t == 0
            text = synthesise(rng, target, self.cal, with_overhead=first)
            turns.append(
                TurnSpec(text, out, target + (self._prefix_tokens(prefix) if first else 0))
            )
        return Conversation(index, turns, prefix, shape.label)

    def _prefix_tokens(self, prefix: str | None) -> int:
        if prefix is None:
            return 0
        return round(self.cal.tokens_per_word * (prefix.count(" ") + 1))
