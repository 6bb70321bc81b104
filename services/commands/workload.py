"""``servescope workload from-metrics``: production's length mix → a workload spec ``bench``
replays (``servescope bench --workload-file prod.toml``).

The watched target's prompt and output length histograms (``prompt_length_tokens`` /
``output_length_tokens``, stored by ``servescope watch``) are read over the window, each
bucket's increase taken and summed (``services.views.production_mix``, the same read the
Compare and Select flags use), and written as one ``[[workloads]]`` entry whose
``input_tokens`` and ``output_tokens`` are ``dist = "histogram"`` lengths: a bucket is drawn by
its share of the requests, then a whole number uniformly inside it.

What the file cannot say, its header states: the two histograms are separate, so input and
output lengths are drawn independently (their joint is unknown); lengths inside a bucket are
uniform; an open ``+Inf`` bucket holding requests is closed at ``--inf-max`` (default twice the
last finite bound), an empty one is dropped.

Refused (exit 2, nothing written, an existing ``--out`` untouched: the file is written beside it
and renamed over it only when complete and re-read): an unknown target (the known ones are
listed), a target without length histograms (which engines export them), fewer finished requests
than ``--min-requests`` in the window, a bad ``--window`` / ``--end``, a missing ``--out`` folder.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from analysis.length_mix import LengthDist, describe
from collectors.loadgen.traces import MAX_REQUEST_TOKENS
from collectors.loadgen.workloads import load_workload_file
from errors import InputError
from services.commands.bench import whole_number
from services.commands.watch import parse_duration
from services.views.production_mix import HISTS, production_mix
from store import sample_series
from store.db import Store

#: Fewer finished requests than this in the window: refused (``--min-requests``).
DEFAULT_MIN_REQUESTS: Final = 100
#: The +Inf bucket is closed at this multiple of the last finite bound unless --inf-max says.
INF_CLOSE_FACTOR: Final = 2.0
WINDOW_FORMS: Final = "a number and a unit s, m, h or d: e.g. 30m, 24h, 7d"
END_FORMS: Final = "now, or an ISO 8601 time such as 2026-12-01T14:00:00Z (no zone: UTC)"
#: Which engines export the two length histograms, for the refusal's message.
EXPORTERS: Final = (
    "vLLM and the sim (vllm:request_prompt_tokens, vllm:request_generation_tokens), "
    "TGI (tgi_request_input_length, tgi_request_generated_tokens), SGLang only when started "
    "with --collect-tokens-histogram (sglang:prompt_tokens_histogram, "
    "sglang:generation_tokens_histogram)"
)


def parse_window(text: str) -> float:
    """``30m``, ``24h``, ``7d``, ``90s`` → seconds (> 0; ``watch.parse_duration``'s syntax, the
    unit required); an InputError naming the forms."""
    try:
        seconds = parse_duration(text) if text.strip()[-1:].isalpha() else 0.0
    except argparse.ArgumentTypeError:
        seconds = 0.0
    if not seconds > 0:
        raise InputError(f"--window {text!r} is not a duration", hint=f"give {WINDOW_FORMS}")
    return seconds


def parse_end(text: str | None, *, now: float) -> float | None:
    """``--end``: None (the target's last sample), ``now``, or ISO 8601 → epoch seconds."""
    if text is None:
        return None
    if text.strip().lower() == "now":
        return now
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--end {text!r} is not a time", hint=f"give {END_FORMS}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _window_text(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _num(x: float) -> str:
    """A TOML number: whole values without a decimal point."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Histogram:
    """One side written: edges ``[lo0, le1, …]`` and weights (requests per bucket), and how
    its ``+Inf`` bucket was closed (a sentence for the header)."""

    edges: tuple[float, ...]
    weights: tuple[float, ...]
    inf_note: str

    def spec(self) -> dict[str, Any]:
        return {"dist": "histogram", "edges": list(self.edges), "weights": list(self.weights)}


def close_histogram(d: LengthDist, *, side: str, inf_max: int | None) -> Histogram:
    """``d`` as histogram edges/weights with a finite last edge: trailing empty buckets (an
    empty ``+Inf`` one included) are dropped; a ``+Inf`` bucket holding requests is closed at
    ``inf_max`` (default ``INF_CLOSE_FACTOR`` × the last finite bound)."""
    counts = list(d.counts)
    edges = list(d.edges)
    while counts and counts[-1] <= 0:
        counts.pop()
        edges.pop()
    if not counts:
        raise InputError(f"the {side} length histogram holds no request")
    too_far = [e for e in edges if math.isfinite(e) and e > MAX_REQUEST_TOKENS]
    if too_far:  # le="1e300" was written, then crashed bench with OverflowError
        raise InputError(
            f"the {side} length histogram has requests up to a bucket bound "
            f'le="{too_far[0]:g}", above the {MAX_REQUEST_TOKENS:,} tokens a request may have',
            hint="is it a histogram of token lengths? (docs/workloads.md)",
        )
    last_finite = edges[-2] if len(edges) > 1 else 0.0
    if math.isinf(edges[-1]):
        n_inf = counts[-1]
        if inf_max is None:
            if last_finite <= 0:
                raise InputError(
                    f"the {side} length histogram has only a +Inf bucket: no bound to close it at",
                    hint="give --inf-max TOKENS, the longest length to draw",
                )
            close = float(min(math.ceil(INF_CLOSE_FACTOR * last_finite), MAX_REQUEST_TOKENS))
            how = f"default {INF_CLOSE_FACTOR:g} × the last finite bound"
            if close <= last_finite:
                raise InputError(
                    f"the {side} length histogram's +Inf bucket holds requests above "
                    f"{_num(last_finite)} tokens, the most a request may have",
                )
            if close == MAX_REQUEST_TOKENS:
                how += f", at most {MAX_REQUEST_TOKENS:,}"
        else:
            if inf_max > MAX_REQUEST_TOKENS:
                raise InputError(
                    f"--inf-max {inf_max} is above the {MAX_REQUEST_TOKENS:,} tokens a request "
                    "may have",
                    hint=f"give --inf-max up to {MAX_REQUEST_TOKENS:,}",
                )
            if inf_max <= last_finite:
                raise InputError(
                    f"--inf-max {inf_max} must be above the {side} histogram's last finite "
                    f"bound {_num(last_finite)}",
                    hint=f"give --inf-max above {_num(last_finite)} tokens",
                )
            close = float(inf_max)
            how = "--inf-max"
        edges[-1] = close
        share = n_inf / d.total
        note = (
            f"{side}: the +Inf bucket held {_num(n_inf)} request(s) ({share:.1%}) above "
            f"{_num(last_finite)} tokens; closed at {_num(close)} tokens ({how}), drawn uniformly "
            "in between"
        )
    else:
        note = (
            f"{side}: no request above {_num(edges[-1])} tokens (the +Inf bucket was empty and "
            "is dropped)"
        )
    return Histogram((0.0, *edges), tuple(float(c) for c in counts), note)


def render(
    *,
    name: str,
    target: str,
    engine: str | None,
    start: float,
    end: float,
    prompt: LengthDist,
    output: LengthDist,
    inputs: Histogram,
    outputs: Histogram,
    written_at: float,
) -> str:
    """The workload file: the header comments, then one ``[[workloads]]`` entry."""
    requests = round(min(prompt.total, output.total))
    window = _window_text(end - start)
    header = [
        f"# Workload {name!r}: production's length mix, written by `servescope workload "
        f"from-metrics` at {_iso(written_at)}.",
        f"# Source: target {target} (engine {engine or 'unknown'}), its prompt_length_tokens and "
        "output_length_tokens histograms (bucket increases summed over",
        f"#   the window {_iso(start)} → {_iso(end)}, {window}).",
        f"# Requests finished in the window: {requests} "
        f"(prompt histogram {_num(prompt.total)}, output histogram {_num(output.total)}).",
        f"# Prompt lengths: {describe(prompt)}; output lengths: {describe(output)}.",
        "# Independence assumption: the input and output histograms are separate, so their "
        "joint distribution is unknown and",
        "#   is taken as independent: bench draws a request's input and output lengths "
        "independently of each other.",
        "# Inside a bucket (lo, le] lengths are drawn uniformly as whole tokens (the histogram "
        "says nothing finer).",
        f"# +Inf bucket: {inputs.inf_note}.",
        f"#   {outputs.inf_note}.",
        "# Replay: servescope bench --endpoint URL --workload-file THIS_FILE --concurrency 8 "
        "--requests 500",
        "# (--max-tokens overrides the output lengths; --ignore-eos makes the engine generate "
        "them all.)",
    ]
    description = (
        f"Production length mix of {target} over {window} ending {_iso(end)} "
        f"({requests} requests); input and output drawn independently."
    )
    body = [
        "[[workloads]]",
        f"name = {json.dumps(name)}",
        f"description = {json.dumps(description, ensure_ascii=False)}",
        f"source = {json.dumps(f'servescope workload from-metrics --target {target}')}",
    ]
    for key, hist in (("input_tokens", inputs), ("output_tokens", outputs)):
        body += [
            "",
            f"[workloads.{key}]",
            'dist = "histogram"',
            f"edges = [{', '.join(_num(e) for e in hist.edges)}]",
            f"weights = [{', '.join(_num(w) for w in hist.weights)}]",
        ]
    return "\n".join([*header, "", *body]) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` and rename it over ``path`` once complete and readable as
    a workload file: an existing file is never left half-overwritten."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        load_workload_file(tmp)  # what bench will read: refuse to publish what it could not
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class Written:
    """What ``from_metrics`` wrote."""

    path: Path
    name: str
    target: str
    start: float
    end: float
    requests: int
    prompt: LengthDist
    output: LengthDist
    text: str


def _resolve_target(store: Store, target: str) -> str:
    """The stored target key ``target`` names (as stored, or as ``watch --metrics`` would
    have stored it: ``host:port`` / a base URL gets ``/metrics``)."""
    from collectors.watch import metrics_url

    last = sample_series.last_sample_times(store)
    known = [str(k) for k in last.loc[last["kind"] == "engine", "key"]]
    if target in known:
        return target
    with contextlib.suppress(ValueError):
        if metrics_url(target) in known:
            return metrics_url(target)
    raise InputError(
        f"target {target!r} has no engine samples in this store",
        hint="known targets: "
        + (", ".join(known) or "none (collect with `servescope watch --metrics URL`)"),
    )


def _check_out(out: Path) -> None:
    if out.is_dir():
        raise InputError(f"--out {out} is a folder", hint="give a file path, e.g. prod.toml")
    if not out.parent.is_dir():
        raise InputError(
            f"--out {out}: the folder {out.parent} does not exist",
            hint="create it first, or write into an existing folder",
        )


def from_metrics(
    store: Store,
    *,
    target: str,
    window_s: float,
    out: Path,
    end: float | None = None,
    name: str = "prod",
    min_requests: int = DEFAULT_MIN_REQUESTS,
    inf_max: int | None = None,
    now: float | None = None,
) -> Written:
    """Read ``target``'s length histograms over (end − window_s, end] and write the workload
    file ``out`` (``end`` None: the target's last sample). InputError on every refusal, with
    nothing written."""
    _check_out(out)
    if not name.strip():
        raise InputError("--name must not be empty", hint="e.g. --name prod")
    key = _resolve_target(store, target)
    mix = production_mix(store, target=key, window_s=window_s, end=end)
    if mix is None or mix.prompt is None or mix.output is None:
        _refuse_missing(store, key, window_s=window_s, end=end, mix_found=mix is not None)
    assert mix is not None and mix.prompt is not None and mix.output is not None
    requests = round(min(mix.prompt.total, mix.output.total))
    if requests < min_requests:
        raise InputError(
            f"target {key} finished {requests} request(s) in the window "
            f"{_iso(mix.start)} → {_iso(mix.end)}; at least {min_requests} are needed for a "
            "length mix",
            hint="widen --window, move --end, or lower --min-requests",
        )
    inputs = close_histogram(mix.prompt, side="prompt", inf_max=inf_max)
    outputs = close_histogram(mix.output, side="output", inf_max=inf_max)
    engines = sample_series.target_engines(store, since=mix.start, until=mix.end)
    text = render(
        name=name,
        target=key,
        engine=engines.get(key),
        start=mix.start,
        end=mix.end,
        prompt=mix.prompt,
        output=mix.output,
        inputs=inputs,
        outputs=outputs,
        written_at=time.time() if now is None else now,
    )
    write_atomically(out, text)
    return Written(out, name, key, mix.start, mix.end, requests, mix.prompt, mix.output, text)


def _refuse_missing(
    store: Store, target: str, *, window_s: float, end: float | None, mix_found: bool
) -> None:
    """Why no length mix came out: no length histograms at all, or none that moved."""
    last = sample_series.last_sample_times(store)
    last_ts = float(last.loc[last["key"] == target, "last_ts"].max())
    until = last_ts if end is None else end
    since = until - window_s
    present = [
        hist
        for hist in HISTS.values()
        if not sample_series.engine_histogram_series(
            store, target, hist, since=since, until=until
        ).empty
    ]
    engine = sample_series.target_engines(store).get(target, "unknown")
    where = f"the window {_iso(since)} → {_iso(until)}"
    if not present:
        raise InputError(
            f"target {target} (engine {engine}) has no prompt/output length histograms in {where}",
            hint=f"these are exported by {EXPORTERS}; watch such an engine with "
            "`servescope watch --metrics URL` while it serves traffic"
            + ("" if end is None else ", or move --end into the watched period"),
        )
    missing = [h for h in HISTS.values() if h not in present]
    if missing:
        raise InputError(
            f"target {target} (engine {engine}) exports no {missing[0]} histogram in {where}: "
            "both the prompt and the output length histograms are needed",
            hint=f"these are exported by {EXPORTERS}",
        )
    raise InputError(
        f"target {target} finished 0 requests in {where}"
        + (" on one of its length histograms" if mix_found else ""),
        hint="widen --window or move --end to when it served traffic",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``workload`` and its ``from-metrics`` action to cli.py's parser."""
    p = sub.add_parser(
        "workload",
        help="write workload specs: from-metrics (production's length mix, for bench)",
    )
    actions = p.add_subparsers(dest="workload_action", required=True, metavar="ACTION")
    fm = actions.add_parser(
        "from-metrics",
        help="a workload spec from a watched target's prompt/output length histograms",
        description="Read a watched target's prompt and output length histograms over a "
        "window and write\na workload spec (one [[workloads]] entry, histogram lengths) that\n"
        "`servescope bench --workload-file FILE` replays.\nExit status: 0 written, 2 refused "
        "(nothing written; an existing --out is left as it was).",
        epilog="example:\n  servescope watch --metrics http://10.0.0.5:8000 --duration 24h\n"
        "  servescope workload from-metrics --target http://10.0.0.5:8000/metrics --window 24h "
        "--out prod.toml\n  servescope bench --endpoint http://10.0.0.5:8000 --workload-file "
        "prod.toml --concurrency 8 --requests 500\ndocs/workloads.md says how lengths are drawn "
        "and what the file assumes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fm.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="the watched engine target (its /metrics URL as watch stored it; host:port works)",
    )
    fm.add_argument(
        "--window", default="24h", metavar="DURATION", help=f"{WINDOW_FORMS} (default 24h)"
    )
    fm.add_argument(
        "--end",
        metavar="ISO|now",
        help="the window's end: now or an ISO 8601 time (default: the target's last sample)",
    )
    fm.add_argument("--name", default="prod", help="the workload's name (default prod)")
    fm.add_argument("--out", required=True, metavar="FILE.toml", help="the file to write")
    fm.add_argument(
        "--min-requests",
        type=whole_number(1),
        default=DEFAULT_MIN_REQUESTS,
        metavar="N",
        help=f"refuse a window with fewer finished requests (default {DEFAULT_MIN_REQUESTS})",
    )
    fm.add_argument(
        "--inf-max",
        type=whole_number(1),
        metavar="TOKENS",
        help="close an open +Inf bucket holding requests at this length (default "
        f"{INF_CLOSE_FACTOR:g} × the last finite bound)",
    )
    fm.add_argument("--db", metavar="URL", help="store URL (default: SERVESCOPE_DB)")
    fm.set_defaults(func=run_from_metrics)


def run_from_metrics(args: argparse.Namespace) -> int:
    """``servescope workload from-metrics``: 0 written (the path on stdout), 2 refused."""
    from store.lifecycle import open_store

    window_s = parse_window(args.window)
    now = time.time()
    end = parse_end(args.end, now=now)
    out = Path(args.out)
    _check_out(out)
    store = open_store(args.db)
    try:
        written = from_metrics(
            store,
            target=args.target,
            window_s=window_s,
            out=out,
            end=end,
            name=args.name,
            min_requests=args.min_requests,
            inf_max=args.inf_max,
            now=now,
        )
    finally:
        store.dispose()
    print(
        f"servescope workload: wrote {written.name!r} from {written.requests} requests of "
        f"{written.target} ({_iso(written.start)} → {_iso(written.end)}); prompt "
        f"{describe(written.prompt)}; output {describe(written.output)}",
        file=sys.stderr,
    )
    print(written.path, flush=True)
    return 0
