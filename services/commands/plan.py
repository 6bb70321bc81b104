"""``servescope plan``: the Plan page's capacity plan on the command line, GPU prices and saved
plans.

    servescope plan --model M --peak-qps 40 --avg-qps 15 --input-tokens 1000 --output-tokens 200
                    --slo PROFILE [--gpu G …] [--tp N …] [--precision P …] [--headroom 0.2]
                    [--lengths run:ID|metrics:TARGET] [--kv-memory-fraction F]
                    [--max-batch-size N] [--kv-dtype D] [--save NAME]
    servescope plan price GPU USD_PER_HOUR [--note TEXT]
    servescope plan prices
    servescope plan list
    servescope plan show NAME
    servescope plan delete NAME

The plan is the page's (``services.views.plan.plan_view``): one row per option with its
capacity per replica (measured or the model's, labelled), replicas, GPUs and costs, then the
memory table. Every input is checked before anything is stored: an unknown model, GPU or SLO
profile, a QPS that is not positive or an average above the peak, a price that is not above 0
end in one ``servescope: error:`` line and exit status 2, and ``--save`` stores nothing.
"""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis import plan as planner
from errors import InputError
from services.views import plan as plan_view_module
from services.views.plan import PlanSpec, PlanView, plan_view
from store import plans as plans_store
from store.db import Store


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _open(args: argparse.Namespace) -> Store:
    from store.lifecycle import open_store

    return open_store(args.db)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "plan",
        help="GPUs needed at peak and their cost per option; GPU prices; saved plans",
        description=(
            "A capacity plan (the Plan page): per GPU × TP × precision × configuration, the "
            "SLO capacity per replica (measured where the store has it, else the model's), the "
            "replicas and GPUs for the peak with headroom, and the cost at your GPU prices."
        ),
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.add_argument("--model", help="catalogue model (seeds/models.toml)")
    p.add_argument("--peak-qps", type=float, help="peak load, requests/s")
    p.add_argument("--avg-qps", type=float, help="average load, requests/s (≤ the peak)")
    p.add_argument("--input-tokens", type=float, help="mean input tokens (default 1000)")
    p.add_argument("--output-tokens", type=float, help="mean output tokens (default 200)")
    p.add_argument(
        "--lengths",
        help="take the lengths from a stored run (run:ID) or a watch target (metrics:TARGET)",
    )
    p.add_argument("--slo", help=f"SLO profile (default: {plan_view_module.DEFAULT_SLO})")
    p.add_argument(
        "--gpu",
        action="extend",
        nargs="+",
        default=None,
        metavar="GPU",
        help="catalogue GPUs to consider (space-separated or repeated; default: all)",
    )
    p.add_argument(
        "--tp",
        action="extend",
        nargs="+",
        default=None,
        metavar="N",
        help="tensor-parallel sizes (default: 1 2 4 8)",
    )
    p.add_argument(
        "--precision",
        action="extend",
        nargs="+",
        default=None,
        metavar="P",
        help=f"weight precisions of {', '.join(planner.PLAN_PRECISIONS)} (default: fp16 int8 int4)",
    )
    p.add_argument("--headroom", type=float, help="kept above the peak, 0.2 = 20 %% (default)")
    p.add_argument("--kv-memory-fraction", type=float, help="engine memory fraction (0.9)")
    p.add_argument("--max-batch-size", type=int, help="engine batch cap (256)")
    p.add_argument("--kv-dtype", help=f"KV-cache dtype, of {', '.join(planner.KV_DTYPES)}")
    p.add_argument("--save", metavar="NAME", help="store the plan's inputs under NAME")
    p.set_defaults(func=run_plan, action=None)
    sub = p.add_subparsers(dest="action", required=False, metavar="ACTION")
    pr = sub.add_parser("price", help="set a GPU's price per GPU-hour (US dollars)")
    pr.add_argument("gpu", metavar="GPU")
    pr.add_argument("usd_per_hour", metavar="USD_PER_HOUR")
    pr.add_argument("--note", help="e.g. '3-year reserved, provider X'")
    pr.set_defaults(func=run_price)
    sub.add_parser("prices", help="list the stored GPU prices").set_defaults(func=run_prices)
    sub.add_parser("list", help="list the saved plans").set_defaults(func=run_list)
    sh = sub.add_parser("show", help="recompute and print a saved plan")
    sh.add_argument("name", metavar="NAME")
    sh.set_defaults(func=run_show)
    de = sub.add_parser("delete", help="delete a saved plan")
    de.add_argument("name", metavar="NAME")
    de.set_defaults(func=run_delete)


def spec_from_args(args: argparse.Namespace) -> PlanSpec:
    """The plan's inputs from the command line; an InputError names a missing or bad one."""
    missing = [
        flag
        for flag, value in (
            ("--model", args.model),
            ("--peak-qps", args.peak_qps),
            ("--avg-qps", args.avg_qps),
        )
        if value is None
    ]
    if missing:
        raise InputError(
            f"plan needs {', '.join(missing)}",
            hint="servescope plan --model llama-3.1-8b --peak-qps 40 --avg-qps 15 "
            "--input-tokens 1000 --output-tokens 200 --slo interactive-chat",
        )
    values: dict[str, Any] = {
        "model": args.model,
        "peak_qps": args.peak_qps,
        "avg_qps": args.avg_qps,
        "input_tokens": args.input_tokens,
        "output_tokens": args.output_tokens,
        "lengths": args.lengths,
        "slo": args.slo,
        "gpus": args.gpu,
        "tps": args.tp,
        "precisions": args.precision,
        "headroom": args.headroom,
        "kv_memory_fraction": args.kv_memory_fraction,
        "max_batch_size": args.max_batch_size,
        "kv_dtype": args.kv_dtype,
    }
    if (args.input_tokens is not None or args.output_tokens is not None) and args.lengths:
        raise InputError("give either --input-tokens/--output-tokens or --lengths, not both")
    return PlanSpec.from_values({k: v for k, v in values.items() if v is not None})


def run_plan(args: argparse.Namespace) -> int:
    """Compute the plan, print it, and store its inputs under ``--save``."""
    spec = spec_from_args(args)
    if args.save is not None:
        plans_store.check_name(args.save)
    store = _open(args)
    try:
        view = plan_view(store, spec)
        if args.save is not None:
            name = save_plan(store, args.save, spec)
    finally:
        store.dispose()
    for line in plan_lines(view):
        print(line)
    if args.save is not None:
        print(f"saved plan {name!r}: servescope plan show {name}")
    return 0


def save_price(store: Store, gpu: str, usd_per_hour: Any, *, note: str | None = None) -> float:
    """The Plan page's price edit: validated (GPU of the catalogue, finite price above 0),
    then stored; returns the price."""
    return plans_store.set_price(store, gpu, usd_per_hour, note=note or None, by=_user())


def save_plan(store: Store, name: str, spec: PlanSpec) -> str:
    """The Plan page's "Save plan": the plan is computed first (an unknown model, GPU or
    profile stores nothing), then its inputs are stored under ``name``."""
    name = plans_store.check_name(name)
    plan_view(store, spec)
    return plans_store.save_plan(store, name, spec.to_json(), by=_user())


def run_price(args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        value = plans_store.set_price(
            store, args.gpu, args.usd_per_hour, note=args.note, by=_user()
        )
    finally:
        store.dispose()
    print(f"{args.gpu}: ${value:,.2f} per GPU-hour")
    return 0


def run_prices(args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        df = plans_store.list_prices(store)
    finally:
        store.dispose()
    if df.empty:
        print("no GPU prices stored: servescope plan price GPU USD_PER_HOUR")
        return 0
    for r in df.to_dict("records"):
        note = f"  ({r['note']})" if r.get("note") else ""
        print(f"{r['gpu']:<22} ${float(r['usd_per_hour']):,.2f}/GPU-hour{note}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        df = plans_store.list_plans(store)
    finally:
        store.dispose()
    if df.empty:
        print("no saved plans: servescope plan … --save NAME")
        return 0
    for r in df.to_dict("records"):
        spec = PlanSpec.from_json(str(r["spec"]))
        print(
            f"{r['name']:<24} {spec.model} · {spec.peak_qps:g} req/s peak, "
            f"{spec.avg_qps:g} average · {spec.slo}"
        )
    return 0


def run_show(args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        spec = PlanSpec.from_json(plans_store.load_plan(store, args.name))
        view = plan_view(store, spec)
    finally:
        store.dispose()
    print(f"plan {args.name!r}")
    for line in plan_lines(view):
        print(line)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        done = plans_store.delete_plan(store, args.name)
    finally:
        store.dispose()
    if not done:
        raise InputError(f"no saved plan {args.name!r}", hint="servescope plan list")
    print(f"deleted plan {args.name!r}")
    return 0


def _num(value: Any, fmt: str = "{:.3g}") -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "—"
    return fmt.format(value)


def plan_lines(view: PlanView) -> list[str]:
    """The plan as text: inputs, the headline, one line per option, the memory table."""
    spec, lengths, demand = view.spec, view.lengths, view.demand
    assert lengths is not None and demand is not None
    out = [
        f"model {spec.model} · SLO {spec.slo} · peak {demand.peak_qps:g} req/s "
        f"(+{demand.headroom:.0%} headroom) · average {demand.avg_qps:g} req/s",
        f"lengths: {lengths.input_mean:.0f} in / {lengths.output_mean:.0f} out tokens "
        f"({lengths.source})",
        plan_view_module.headline(view),
        "",
        f"{'GPU':<16} {'TP':>2} {'prec':<9} {'cap/replica':>11} {'from':<12} {'repl':>4} "
        f"{'GPUs':>5} {'$/hour':>9} {'$/1M out':>9} {'$/1M tok':>9} {'pred':>7} {'error':>6}  "
        "configuration · source · note",
    ]
    rows: Sequence[planner.PlanOption] = view.options
    for o in rows:
        extra = " · ".join(x for x in (o.config, o.source, o.note) if x)
        out.append(
            f"{o.gpu:<16} {o.tp:>2} {planner.PRECISION_LABELS.get(o.precision, o.precision):<9} "
            f"{_num(o.capacity_rps):>11} {o.label:<12} {_num(o.replicas, '{}'):>4} "
            f"{_num(o.gpus, '{}'):>5} {_num(o.cost_per_hour, '${:,.2f}'):>9} "
            f"{_num(o.cost_per_1m_output, '${:,.2f}'):>9} "
            f"{_num(o.cost_per_1m_total, '${:,.2f}'):>9} {_num(o.predicted_rps):>7} "
            f"{_num(o.error, '{:+.0%}'):>6}  {extra}"
        )
    if not view.prices:
        out.append("no GPU prices stored: servescope plan price GPU USD_PER_HOUR")
    for text in view.skipped:
        out.append(f"not measured: {text}")
    out += ["", "memory per GPU (at the plan's lengths):"]
    table = plan_view_module.memory_table(view)
    out += table.to_string(index=False).splitlines() if not table.empty else ["(none)"]
    out += [
        "",
        "capacity: req/s per replica meeting the SLO; replicas = ceil(peak × (1 + headroom) / "
        "capacity); GPUs = replicas × TP; $/1M = $/hour ÷ (average req/s × 3600 × tokens per "
        "request) × 10⁶, output tokens ($/1M out) or input + output ($/1M tok); error: "
        "0 when the prediction lies between the measured capacity and the first failing "
        "load, else (predicted − nearer end) / nearer end",
    ]
    return out
