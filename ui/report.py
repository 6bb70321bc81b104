"""The planning-review report as ONE self-contained HTML document (``render_html``), and the
dashboard's button that downloads it (``download_button``, for Tune and Plan).

The document needs nothing but itself: Plotly's JavaScript is embedded once, inline
(``plotly.offline.get_plotlyjs``), every figure is a ``<div>`` plus a ``Plotly.newPlot`` call
(``plotly.io.to_html(full_html=False, include_plotlyjs=False)``) with :data:`FIGURE_CONFIG`
(no logo link, no cloud button), and it names no external resource: no CDN, no web font, no
image by URL — it opens offline, from a file or an e-mail attachment.

Everything the store holds is user text (run names, labels, notes, model names, the title):
each goes through :func:`esc` (``html.escape``) into the document, and the only JSON embedded
in a script is made unable to close it (:func:`script_json`: ``<``, ``>`` and ``&`` as
``\\u00XX``; Plotly's own figure JSON is escaped the same way by ``plotly.io``).

The figures are the pages' own builders (``ui.select_charts``, ``ui.latency_charts``,
``ui.memory_charts``, ``ui.tune_charts``) and the tables Compare's (``ui.compare_tables``), so
the report shows what the pages show. No Streamlit at import: ``servescope report`` (cli.py)
renders with this module; only :func:`download_button` imports Streamlit, when called.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any, Final

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from analysis.compare import load_axis_title
from analysis.recommend import STATUS_TEXT, UNITS, value_text
from services.views import plan as plan_tables
from services.views.compare import slo_limits
from services.views.latency import BY, METRICS
from services.views.report import (
    PlanSection,
    ReportData,
    ReportRequest,
    RunLatency,
    RunMemory,
    SloSection,
)
from ui import (
    compare_tables,
    display,
    latency_charts,
    memory_charts,
    plan_charts,
    select_charts,
    tune_charts,
)

#: Every figure's Plotly config: no "Produced with Plotly" link, no cloud export.
FIGURE_CONFIG: Final[Mapping[str, Any]] = {
    "displaylogo": False,
    "showSendToCloud": False,
    "responsive": True,
}
#: The sections, in the document's order: (anchor, heading).
SECTIONS: Final = (
    ("summary", "Summary"),
    ("checklist", "Checklist"),
    ("slo", "SLO table"),
    ("latency", "P99 by input length"),
    ("memory", "Memory"),
    ("recommendation", "Recommendation"),
    ("plan", "Capacity plan"),
)
#: What fills a section that has no data (shown in its place).
FILL: Final[Mapping[str, str]] = {
    "summary": "Name runs (servescope report --runs ID …), a sweep (--sweep ID) or a plan "
    "(--plan NAME).",
    "checklist": "The checklist ranks the catalogued frameworks; a store without the seeded "
    "checklist has none (servescope db migrate seeds it).",
    "slo": "Runs (--runs ID …) and an SLO profile in the store (--slo NAME) fill the SLO table.",
    "latency": "Runs with per-request rows (servescope bench, or an import with per-request "
    "data) fill P99 by input length.",
    "memory": "Runs measured with the endpoint's /metrics (servescope bench records it; "
    "--dcgm URL adds GPU memory) fill the memory curves.",
    "recommendation": "A parameter sweep (--sweep ID; servescope sweep SPEC stores one) fills "
    "the recommendation.",
    "plan": "A capacity plan (--plan NAME, saved on the Plan page) fills the capacity plan.",
}
DOWNLOAD_LABEL: Final = "Download the planning-review report (HTML)"
_GIB: Final = 2**30

_STYLE: Final = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2933;
background:#fff;line-height:1.45}
header,main,nav{max-width:1200px;margin:0 auto;padding:0 24px}
header{border-bottom:1px solid #d9e2ec;padding-top:16px;padding-bottom:8px}
h1{margin:0 0 4px 0;font-size:1.8em}h2{border-bottom:1px solid #d9e2ec;padding-bottom:4px;
margin-top:40px}h3{margin-top:28px}
.meta,.note,.empty{color:#52606d;font-size:.92em}.empty{font-style:italic}
nav ol{columns:2;padding-left:20px}
table{border-collapse:collapse;margin:8px 0 16px 0;font-size:.88em;display:block;
overflow-x:auto}
th,td{border:1px solid #d9e2ec;padding:3px 8px;text-align:left;vertical-align:top;
white-space:nowrap}th{background:#f0f4f8}
.headline{font-size:1.1em;font-weight:600}.warn{color:#9b2c2c}
.figure{margin:8px 0 24px 0}
"""


# --- escaping ------------------------------------------------------------------------------------


def esc(value: Any) -> str:
    """``value`` as HTML text: ``& < > " '`` escaped (safe in element text and in quoted
    attributes)."""
    return html.escape(str(value), quote=True)


def script_json(value: Any) -> str:
    """``value`` as JSON that cannot end the ``<script>`` it sits in: ``<``, ``>`` and ``&``
    written as ``\\u003c`` … (so neither ``</script>`` nor ``<!--`` can appear), and the line
    separators JavaScript would not accept in a string."""
    text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    for raw, safe in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, safe)
    return text


def _cell(value: Any) -> str:
    if value is None or display.is_missing(value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def table(df: pd.DataFrame) -> str:
    """``df`` as an HTML table, every header and cell escaped."""
    if df.empty:
        return '<p class="empty">no rows</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(_cell(v))}</td>" for v in row) + "</tr>"
        for row in df.itertuples(index=False, name=None)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _p(text: str, css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    return f"<p{cls}>{esc(text)}</p>"


def _list(items: Iterable[str], css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    lis = "".join(f"<li>{esc(i)}</li>" for i in items)
    return f"<ul{cls}>{lis}</ul>" if lis else ""


# --- figures -----------------------------------------------------------------------------------


class _Figures:
    """Numbers the figures of one document (``figure-1`` …) and renders each as a div."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: go.Figure) -> str:
        self.count += 1
        height = fig.layout.height or 450
        div = pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            include_mathjax=False,
            config=dict(FIGURE_CONFIG),
            div_id=f"figure-{self.count}",
            default_height=f"{int(height)}px",
            default_width="100%",
        )
        return f'<div class="figure">{div}</div>'


@cache
def plotly_js() -> str:
    """Plotly's JavaScript bundle (once per process; it is a few MB)."""
    js = get_plotlyjs()
    if "</script" in js.lower() or "<!--" in js:  # inline, it would end its <script> early
        raise RuntimeError("this Plotly bundle cannot be inlined: it holds </script or <!--")
    return js


# --- sections ----------------------------------------------------------------------------------


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _run_rows(data: ReportData) -> pd.DataFrame:
    rows = []
    verdicts: dict[str, Any] = {}
    if data.slo is not None:
        verdicts = {str(r["run_id"]): r.get("passed") for r in display.records(data.slo.rows)}
    for r in display.records(data.runs):
        rid = str(r["run_id"])
        rows.append(
            {
                "run": data.run_label(rid),
                "id": rid,
                "framework": r.get("framework"),
                "model": r.get("model"),
                "GPU": r.get("gpu_name"),
                "GPUs": r.get("gpu_count"),
                "load": display.load_label(
                    r.get("arrival"), r.get("concurrency"), r.get("target_rate")
                ),
                "requests": r.get("requests"),
                "SLO": {True: "pass", False: "FAIL", None: "no data"}.get(verdicts.get(rid)),
            }
        )
    return pd.DataFrame(rows)


def _summary(data: ReportData) -> str:
    facts: list[str] = []
    view = data.checklist
    if view is not None and view.ranking.rows:
        top = view.ranking.rows[0]
        facts.append(
            f"Checklist ({view.selection.preset}): "
            + " and ".join(view.framework_label(f) for f in view.ranking.tied_for_first)
            + f" rank{'s' if len(view.ranking.tied_for_first) == 1 else ''} first "
            f"with {top.total:.2f} / 5."
        )
    if data.slo is not None and not data.slo.rows.empty:
        passed = [r for r in display.records(data.slo.rows) if r.get("passed") is True]
        facts.append(
            f"SLO ({data.slo.profile.name}): {len(passed)} of {len(data.slo.rows)} runs pass."
        )
        best = _best_capacity(data.slo)
        if best:
            facts.append(best)
    if data.tune is not None and data.tune.recommendation is not None:
        facts.append(data.tune.recommendation.headline())
    if data.plan is not None:
        facts.append(_plan_headline(data.plan))
    parts = [_list(facts, "facts")] if facts else []
    runs = _run_rows(data)
    parts.append(table(runs) if not runs.empty else _p(FILL["summary"], "empty"))
    parts += [_p(n, "note") for n in data.notes]
    return "".join(parts)


def _best_capacity(section: SloSection) -> str:
    best: tuple[float, str, str] | None = None
    for item in section.capacity:
        value = item.capacity.interpolated or item.capacity.measured
        if value is not None and (best is None or value > best[0]):
            best = (value, item.capacity.series, item.load_kind)
    if best is None:
        return "No series meets the SLO at any load measured."
    unit = {"rate": "req/s", "concurrency": "concurrent requests"}.get(best[2], "")
    return f"Highest SLO capacity: {best[0]:.3g} {unit} ({best[1]}).".replace("  ", " ")


def _checklist(data: ReportData, figure: _Figures) -> str:
    view = data.checklist
    if view is None or not view.ranking.rows:
        why = view.problem if view is not None and view.problem else FILL["checklist"]
        return _p(why, "empty")
    rows = view.ranking.rows
    tied = view.ranking.tied_for_first
    verb = "tie for first" if len(tied) > 1 else "ranks first"
    ev = view.selection
    out = [
        _p(
            " and ".join(view.framework_label(f) for f in tied)
            + f" {verb} with {rows[0].total:.2f} / 5 under the preset {ev.preset}.",
            "headline",
        ),
        _p(
            f"Measured evidence: model {ev.model or '—'}, GPU {ev.gpu or '—'}, "
            f"SLO profile {ev.slo or '—'}.",
            "note",
        ),
    ]
    table_rows = []
    for row in rows:
        missing = [view.catalog.criterion(c).display_name or c for c in row.missing]
        table_rows.append(
            {
                "rank": row.rank,
                "framework": view.framework_label(row.framework),
                "score (0–5)": round(row.total, 2),
                "first under weight changes": f"{100 * view.shares.get(row.framework, 0.0):.0f} %",
                "measured": "yes" if view.evidence[row.framework].measured else "no",
                "counted 0 (no score)": ", ".join(missing),
            }
        )
    out.append(table(pd.DataFrame(table_rows)))
    if view.ranking.excluded:
        out.append(
            _list(
                f"{view.framework_label(ex.framework)} left out: lacks "
                + ", ".join(view.tag_labels.get(t, t) for t in ex.lacking)
                for ex in view.ranking.excluded
            )
        )
    criteria = [(c.name, c.display_name or c.name) for c in view.catalog.criteria]
    labels = {f.name: f.display_name or f.name for f in view.catalog.frameworks}
    contributions = {r.framework: r.contributions for r in rows}
    order = [r.framework for r in rows]
    out.append(figure(select_charts.contributions_bar(contributions, order, criteria, labels)))
    return "".join(out)


def _slo(data: ReportData) -> str:
    section = data.slo
    if section is None or section.rows.empty:
        return _p(data.slo_problem or FILL["slo"], "empty")
    profile = section.profile
    targets = ", ".join(
        f"{k.removesuffix('_ms').upper()} ≤ {v:g} ms" for k, v in slo_limits(profile).items()
    )
    out = [
        _p(
            f"SLO profile {profile.name}: P{profile.percentile:g} {targets or 'targets'}, "
            f"error rate ≤ {profile.max_error_rate:.2%}"
            + (
                f", GPU memory ≤ {profile.max_memory_fraction:.0%}"
                if profile.max_memory_fraction is not None
                else ""
            )
            + ".",
            "note",
        ),
        table(compare_tables.runs_table(section.rows, profile)),
        "<h3>SLO capacity per configuration</h3>",
        table(compare_tables.capacity_table(section.capacity))
        if section.capacity
        else _p("no series", "empty"),
    ]
    return "".join(out)


def _latency(data: ReportData, figure: _Figures) -> str:
    with_rows = [r for r in data.latency if r.buckets is not None]
    if not with_rows:
        notes = [f"{r.label}: {r.note}" for r in data.latency if r.note]
        return _p(FILL["latency"], "empty") + _list(notes, "note")
    return "".join(_run_latency(r, figure) for r in data.latency)


def _run_latency(run: RunLatency, figure: _Figures) -> str:
    head = f"<h3>{esc(run.label)}</h3>"
    if run.buckets is None:
        return head + _p(run.note, "empty")
    b = run.buckets
    metric = METRICS[b.metric]
    return (
        head
        + _p(f"{metric} percentiles by {BY[b.by]} (run {run.run_id})", "note")
        + figure(latency_charts.bucket_percentiles(b.rows, run.labels, metric))
        + table(b.table)
    )


def _memory_facts(run: RunMemory) -> list[str]:
    f = run.figures
    facts = []
    if f.gpu_peak_bytes is not None:
        facts.append(
            f"GPU memory peak {f.gpu_peak_bytes / _GIB:,.1f} GiB of "
            f"{(f.gpu_total_bytes or 0.0) / _GIB:,.1f} GiB; headroom to the {run.cap:.0%} cap "
            f"{(f.headroom_bytes or 0.0) / _GIB:+,.1f} GiB"
        )
    if f.kv_peak is not None:
        facts.append(f"KV usage peak {f.kv_peak:.0%}, mean {f.kv_mean or 0.0:.0%}")
    if f.preemptions is not None:
        facts.append(f"preemptions {display.fmt_count(f.preemptions)}")
    return facts


def _memory(data: ReportData, figure: _Figures) -> str:
    if not any(r.has_samples for r in data.memory):
        notes = [f"{r.label}: {r.note}" for r in data.memory if r.note]
        return _p(FILL["memory"], "empty") + _list(notes, "note")
    out = []
    for run in data.memory:
        out.append(f"<h3>{esc(run.label)}</h3>")
        if not run.has_samples:
            out.append(_p(run.note, "empty"))
            continue
        facts = _memory_facts(run)
        if facts:
            out.append(_p("; ".join(facts) + ".", "note"))
        if run.gpu.empty:
            out.append(_p("No GPU samples: memory is shown through the KV-cache usage.", "note"))
        out.append(figure(memory_charts.memory_timeline(run.engine, run.gpu, cap_fraction=run.cap)))
    return "".join(out)


def _points_table(data: ReportData) -> pd.DataFrame:
    assert data.tune is not None and data.tune.recommendation is not None
    rec = data.tune.recommendation
    best = rec.best.point_id if rec.best is not None else None
    rows = []
    for p in rec.points:
        if p.point_id == best:
            verdict = "recommended"
        elif p.rejected:
            verdict = f"rejected: {p.rejected}"
        elif p.status != "completed":
            verdict = STATUS_TEXT.get(p.status, p.status)
        else:
            verdict = "on the frontier" if p.on_front else ""
        rows.append(
            {
                "point": p.label,
                "status": p.status,
                "SLO capacity": p.capacity_text if p.capacity is not None else "—",
                "unit": UNITS.get(p.capacity_kind, p.capacity_kind),
                "tok/s per GPU": p.throughput_per_gpu,
                "tok/s per user": p.tokens_per_s_per_user,
                "peak memory": "—"
                if p.peak_memory_fraction is None
                else f"{p.peak_memory_fraction:.0%}",
                "verdict": verdict,
                "error": p.error,
            }
        )
    return pd.DataFrame(rows)


def _recommendation(data: ReportData, figure: _Figures) -> str:
    view = data.tune
    if view is None or view.recommendation is None:
        return _p(FILL["recommendation"], "empty")
    rec = view.recommendation
    record = view.sweep or {}
    out = [
        _p(
            f"Sweep {record.get('name') or record.get('sweep_id')} "
            f"(id {record.get('sweep_id')}): engine {record.get('engine') or '?'}, workload "
            f"{record.get('workload') or '?'}, SLO {record.get('slo') or '?'}, "
            f"status {record.get('status') or '?'}.",
            "note",
        ),
        _p(rec.headline(), "headline" if rec.best is not None else "headline warn"),
        _list(e.sentence for e in rec.explanations),
    ]
    if rec.fixed:
        fixed = " ".join(f"{k}={value_text(v)}" for k, v in sorted(rec.fixed.items()))
        out.append(_p(f"Every point shares: {fixed}.", "note"))
    out.append(_list(rec.warnings, "warn"))
    out.append(table(_points_table(data)))
    best = rec.best.point_id if rec.best is not None else None
    out.append(figure(tune_charts.pareto_chart(rec.points, best, view.per_gpu_known)))
    kinds = [str(k) for k in view.points.get("capacity_kind", []) if k]
    out.append(figure(tune_charts.search_curves(view.curves, load_axis_title(kinds))))
    return "".join(out)


def _plan_headline(plan: PlanSection) -> str:
    name = f"Capacity plan {plan.name}" if plan.name else "Capacity plan"
    return f"{name}: {plan_tables.headline(plan.view)}"


def _plan(data: ReportData, figure: _Figures) -> str:
    plan = data.plan
    if plan is None:
        return _p(FILL["plan"], "empty")
    view = plan.view
    out = [_p(_plan_headline(plan), "headline" if view.best is not None else "headline warn")]
    if view.lengths is not None:
        out.append(
            _p(
                f"Mean lengths: {view.lengths.input_mean:,.0f} input, "
                f"{view.lengths.output_mean:,.0f} output tokens"
                + (f"; SLO profile {view.profile.name}." if view.profile is not None else "."),
                "note",
            )
        )
    out.append("<h3>Inputs</h3>")
    out.append(table(pd.DataFrame([{"input": k, "value": v} for k, v in plan.inputs])))
    out.append("<h3>Options</h3>")
    out.append(figure(plan_charts.gpus_chart(view)))
    out.append(figure(plan_charts.cost_chart(view)))
    out.append(table(plan_tables.options_table(view)))
    if view.skipped:
        out.append(_p("Measured series that gave no capacity:", "note"))
        out.append(_list(view.skipped, "note"))
    out.append("<h3>Memory by precision, GPU and TP</h3>")
    out.append(figure(plan_charts.memory_chart(view.memory)))
    out.append(table(plan_tables.memory_table(view)))
    return "".join(out)


# --- the document ----------------------------------------------------------------------------


def _meta(data: ReportData) -> dict[str, Any]:
    req = data.request
    return {
        "title": data.title,
        "generated_at": _when(data.generated_at),
        "store": data.store,
        "runs": list(req.run_ids) or [str(r) for r in data.runs.get("run_id", [])],
        "sweep": req.sweep_id,
        "plan": req.plan_name,
        "slo": data.slo.profile.name if data.slo is not None else None,
    }


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML document (UTF-8 text)."""
    figure = _Figures()
    bodies: Mapping[str, Callable[[], str]] = {
        "summary": lambda: _summary(data),
        "checklist": lambda: _checklist(data, figure),
        "slo": lambda: _slo(data),
        "latency": lambda: _latency(data, figure),
        "memory": lambda: _memory(data, figure),
        "recommendation": lambda: _recommendation(data, figure),
        "plan": lambda: _plan(data, figure),
    }
    sections = "".join(
        f'<section id="{anchor}"><h2>{esc(heading)}</h2>{bodies[anchor]()}</section>'
        for anchor, heading in SECTIONS
    )
    toc = "".join(f'<li><a href="#{a}">{esc(h)}</a></li>' for a, h in SECTIONS)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(data.title)}</title>"
        f"<style>{_STYLE}</style>"
        '<script type="application/json" id="report-meta">'
        f"{script_json(_meta(data))}</script>"
        f'<script type="text/javascript">{plotly_js()}</script>'
        "</head><body>"
        f"<header><h1>{esc(data.title)}</h1>"
        f'<p class="meta">Generated {esc(_when(data.generated_at))} by ServeScope from the '
        f"store {esc(data.store)}.</p></header>"
        f'<nav aria-label="Contents"><h2>Contents</h2><ol>{toc}</ol></nav>'
        f"<main>{sections}</main>"
        "</body></html>\n"
    )


# --- the dashboard's button ------------------------------------------------------------------


def report_file_name(request: ReportRequest) -> str:
    """``review-<sweep or plan or first run>.html``, with only [A-Za-z0-9._-] kept."""
    base = request.sweep_id or request.plan_name or (request.run_ids[0] if request.run_ids else "")
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in base)[:60].strip("-.")
    return f"review-{safe}.html" if safe else "review.html"


def build_report(request: ReportRequest, url: str | None = None) -> str:
    """The report for ``request`` on the dashboard's store (``url``: another store), as HTML."""
    from services.store_session import short_lived_store
    from services.views.report import report_data

    with short_lived_store(url) as store:
        return render_html(report_data(store, request))


def download_button(
    request: ReportRequest,
    *,
    key: str,
    label: str = DOWNLOAD_LABEL,
    help_text: str | None = None,
) -> None:
    """A download button for the report of ``request``, built only when clicked (Streamlit's
    callable ``data``; ``on_click="ignore"``: the page does not rerun). The store URL is read
    now, in the script, so the build needs no Streamlit context."""
    import streamlit as st

    from services.store_session import store_url

    url = store_url()
    st.download_button(
        label,
        data=lambda: build_report(request, url),
        file_name=report_file_name(request),
        mime="text/html",
        key=key,
        help=help_text
        or "One self-contained HTML file (charts embedded, opens offline): the checklist, the "
        "SLO table, P99 by input length, memory curves, the recommendation and the plan.",
        on_click="ignore",
        icon=":material/download:",
    )
