"""Engine and DCGM series from a Prometheus server (``/api/v1/query_range``), for fleets that
already scrape their engines (DESIGN §6, §10).

One range query fetches every series the normalisation maps read (and the DCGM fields), limited
by the user's label matchers (``--match 'job="vllm",namespace="prod"'``). The answer is cut into
per-instance snapshots at each step, and each snapshot goes through the same normalisation as a
live scrape — so rows from Prometheus and from ``/metrics`` look alike in the store. The
``instance`` label (else ``job``) names the target; DCGM rows take their ``Hostname`` label.

httpx errors and Prometheus API errors become ``CollectorError`` here, once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from collectors import engine_metrics, gpu, http_client
from collectors.prometheus_text import Exposition, Sample, labels_key
from collectors.row_sink import RowSink
from errors import CollectorError, InputError

#: Prometheus refuses range queries of more than 11,000 points per series.
MAX_POINTS = 10_000

DCGM_NAMES: tuple[str, ...] = (
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
)

_MATCHER_RE = re.compile(
    r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)'
)


def parse_match(match: str | None) -> str:
    """Validate label matchers (``job="vllm",ns=~"prod.*"``, braces optional); returns the
    inside of a selector. Raises ``InputError`` naming the expected form."""
    if not match:
        return ""
    text = match.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    pos, parts = 0, []
    while pos < len(text):
        m = _MATCHER_RE.match(text, pos)
        if m is None or m.end() == pos:
            raise InputError(
                f"cannot read the label matchers {match!r}",
                hint='write them as in PromQL, e.g. --match \'job="vllm",namespace="prod"\'',
            )
        if m.group(1) == "__name__":
            raise InputError("--match selects targets by label; it cannot match __name__")
        parts.append(f'{m.group(1)}{m.group(2)}"{m.group(3)}"')
        pos = m.end()
    return ",".join(parts)


def selector(names: Iterable[str], match: str | None = None) -> str:
    """A PromQL selector for the series ``names`` restricted by ``match``."""
    alternatives = "|".join(re.escape(n) for n in sorted(set(names)))
    inner = f'__name__=~"{alternatives}"'
    extra = parse_match(match)
    return "{" + inner + ("," + extra if extra else "") + "}"


@dataclass
class RangeSeries:
    labels: dict[str, str]
    points: list[tuple[float, float]]


@dataclass
class PrometheusClient:
    """A small synchronous client for ``/api/v1/query_range`` (the ``httpx.Client`` is
    injectable; one is created, and closed by :meth:`close`, when not given)."""

    base_url: str
    client: httpx.Client | None = None
    timeout_s: float = 30.0
    _owned: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if self.client is None:
            self.client = http_client.sync_client(
                self.timeout_s, max_bytes=http_client.MAX_METRICS_BYTES
            )
            self._owned = True

    def close(self) -> None:
        if self._owned and self.client is not None:
            self.client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query_range(
        self, query: str, *, start: float, end: float, step: float
    ) -> list[RangeSeries]:
        """Run a range query, split in chunks of at most ``MAX_POINTS`` steps."""
        if step <= 0 or end < start:
            raise InputError(f"bad range: start {start}, end {end}, step {step}")
        merged: dict[tuple[tuple[str, str], ...], RangeSeries] = {}
        chunk = step * (MAX_POINTS - 1)
        t0 = start
        while t0 <= end:
            t1 = min(end, t0 + chunk)
            for s in self._query_range_once(query, t0, t1, step):
                key = tuple(sorted(s.labels.items()))
                have = merged.get(key)
                if have is None:
                    merged[key] = s
                else:
                    have.points.extend(s.points)
            t0 = t1 + step
        return list(merged.values())

    def _query_range_once(
        self, query: str, start: float, end: float, step: float
    ) -> list[RangeSeries]:
        assert self.client is not None
        url = f"{self.base_url}/api/v1/query_range"
        try:
            resp = self.client.post(
                url,
                data={"query": query, "start": repr(start), "end": repr(end), "step": repr(step)},
            )
        except httpx.HTTPError as exc:
            raise CollectorError(
                f"Prometheus at {self.base_url} did not answer: {exc}",
                hint="check the --prometheus URL (e.g. http://prometheus:9090)",
            ) from exc
        try:
            body = http_client.json_of(resp)
        except ValueError as exc:
            deep = isinstance(exc, http_client.JSONTooDeep)
            raise CollectorError(
                f"Prometheus at {self.base_url} answered HTTP {resp.status_code} with "
                + ("JSON nested too deep to decode" if deep else "no JSON"),
                hint="is this the Prometheus server's address?",
            ) from exc
        if not isinstance(body, dict):
            raise self._malformed(f"the answer is a JSON {type(body).__name__}, not an object")
        if body.get("status") != "success":
            raise CollectorError(
                f"Prometheus refused the query: {_short(body.get('errorType', '?'))}: "
                f"{_short(body.get('error', resp.status_code))}"
            )
        data = body.get("data", {})
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            kind = data.get("resultType") if isinstance(data, dict) else data
            raise CollectorError(f"unexpected Prometheus result type {_short(kind)!r}")
        result = data.get("result", [])
        if not isinstance(result, list):
            raise self._malformed("data.result is not a list")
        return [self._series(i, item) for i, item in enumerate(result)]

    def _malformed(self, why: str) -> CollectorError:
        return CollectorError(
            f"Prometheus at {self.base_url} answered a malformed range query: {why}",
            hint="expected the /api/v1/query_range answer of the Prometheus HTTP API",
        )

    def _series(self, i: int, item: Any) -> RangeSeries:
        """One ``{"metric": {...}, "values": [[t, "v"], ...]}`` of a matrix, checked: labels
        are text, each point two elements, its timestamp Unix seconds (0 to 10¹⁰)."""
        where = f"data.result[{i}]"
        if not isinstance(item, dict):
            raise self._malformed(f"{where} is not an object")
        metric, values = item.get("metric", {}), item.get("values", [])
        if not isinstance(metric, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
        ):
            raise self._malformed(f"{where}.metric is not a table of label = text")
        if not isinstance(values, list):
            raise self._malformed(f"{where}.values is not a list")
        points: list[tuple[float, float]] = []
        for j, point in enumerate(values):
            if not isinstance(point, list) or len(point) != 2:
                raise self._malformed(
                    f'{where}.values[{j}] is {_short(point)}; expected [timestamp, "value"]'
                )
            t = point[0]
            if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < 1e10:
                raise self._malformed(
                    f"{where}.values[{j}] has the timestamp {_short(t)}; expected Unix seconds"
                )
            points.append((float(t), _value(point[1])))
        return RangeSeries(dict(metric), points)


def _short(value: Any, n: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= n else text[: n - 1] + "…"


def _value(text: Any) -> float:
    if isinstance(text, bool):
        return math.nan
    try:
        return float(text)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _target_of(labels: dict[str, str]) -> str:
    return labels.get("instance") or labels.get("job") or "prometheus"


@dataclass
class RangeRows:
    """Store rows built from range-query results, and what they cover."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    targets: dict[str, str | None] = field(default_factory=dict)  # target → engine
    hosts: set[str] = field(default_factory=set)
    last_ts: float | None = None

    def add(self, table: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.rows.setdefault(table, []).extend(rows)


def rows_from_series(series: Sequence[RangeSeries], *, raw: str = "engine") -> RangeRows:
    """Cut range results into per-target snapshots and normalise each one."""
    snaps: dict[tuple[str, float], list[Sample]] = {}
    for s in series:
        name = s.labels.get("__name__")
        if not name:
            continue
        target = _target_of(s.labels)
        labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "__name__"))
        for ts, value in s.points:
            snaps.setdefault((target, ts), []).append(Sample(name, labels, value))
    out = RangeRows()
    for (target, ts), samples in sorted(snaps.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        expo = Exposition(samples=samples)
        names = {s.name for s in samples}
        engine = engine_metrics.detect_engine(names)
        if engine is not None:
            out.targets[target] = engine
            out.add(
                "engine_samples",
                [
                    {"target": target, "ts": ts, "metric": m, "engine": engine, "value": v}
                    for m, v in engine_metrics.normalise(expo, engine).items()
                ],
            )
        if engine_metrics.has_dcgm(names):
            rows = gpu.dcgm_rows(expo, ts=ts, default_host=target, source="dcgm")
            out.hosts.update(str(r["host"]) for r in rows)
            out.add("gpu_samples", rows)
        if raw != "none":
            seen: dict[tuple[str, str], dict[str, Any]] = {}
            for smp in samples:
                if engine_metrics.keep_raw(smp.name, raw):
                    lk = labels_key(smp.labels)
                    seen[(smp.name, lk)] = {
                        "target": target,
                        "ts": ts,
                        "name": smp.name,
                        "labels": lk,
                        "value": smp.value,
                    }
            out.add("engine_raw_samples", list(seen.values()))
        out.last_ts = ts if out.last_ts is None else max(out.last_ts, ts)
    return out


def default_query(match: str | None = None) -> str:
    """The selector of everything ServeScope reads from Prometheus (engines and DCGM)."""
    return selector([*engine_metrics.source_names(), *DCGM_NAMES], match)


def import_window(
    sink: RowSink,
    prometheus_url: str,
    *,
    start: float,
    end: float,
    step: float = 15.0,
    match: str | None = None,
    raw: str = "engine",
    client: httpx.Client | None = None,
    on_rows: Callable[[RangeRows], None] | None = None,
) -> RangeRows:
    """Fetch [start, end] at ``step`` from Prometheus and hand the rows to ``sink.add``.

    ``sink`` has ``add(table, rows)`` (a ``BufferedWriter``). Returns what was fetched.
    """
    with PrometheusClient(prometheus_url, client=client) as prom:
        series = prom.query_range(default_query(match), start=start, end=end, step=step)
    result = rows_from_series(series, raw=raw)
    # the raw counters first, as the watcher hands them over (collectors.watch._raw_first)
    for table, rows in sorted(result.rows.items(), key=lambda kv: kv[0] != "engine_raw_samples"):
        sink.add(table, rows)
    if on_rows is not None:
        on_rows(result)
    return result
