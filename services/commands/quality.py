"""``servescope quality``: does a candidate deployment answer as well as a reference?

Both endpoints are identified first (``collectors.endpoint_identity``; one that cannot be
reached → ``EndpointError``, exit 2, nothing stored), then the bundled prompt set
(``seeds/quality_prompts.toml``) runs greedily on both at once (``collectors.quality_probe``),
``analysis.quality`` scores it, the figures and a verdict are printed, and the run is stored
(``store.quality_results``: header and answers in one transaction) unless ``--no-store``.
Quality is information, not a gate: exit 0 whatever the figures say.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import httpx

from analysis.quality import (
    CATEGORIES,
    Estimate,
    QualityFigures,
    QualityPrompt,
    QualitySummary,
    ScoredAnswer,
    score,
    select_prompts,
    summarise,
)
from collectors import http_client
from collectors.endpoint_identity import EndpointIdentity, identify
from collectors.loadgen.client import API_PATHS, split_endpoint
from collectors.loadgen.runner import api_key_from_env
from collectors.quality_probe import (
    CONCURRENCY,
    MAX_TOKENS,
    TIMEOUT_S,
    ProbeAnswer,
    PromptSet,
    load_prompt_set,
    probe,
)
from errors import EndpointError, InputError

IDENTIFY_TIMEOUT_S = 5.0

EPILOG = f"""\
examples:
  servescope quality --reference http://gpu1:8000 --reference-precision fp16 \\
      --candidate http://gpu2:8000 --candidate-precision int4
  servescope quality --reference http://127.0.0.1:8080 --candidate http://127.0.0.1:8000/v1 \\
      --category arithmetic code --limit 20 --no-store
Every prompt is sent once to each side, greedily (temperature 0, seed 0, max_tokens
{MAX_TOKENS}), {CONCURRENCY} at a time per side. Accuracy: the answer's first line, normalised,
equals or contains an accepted answer (analysis.quality). Intervals are 95 %: Wilson for
accuracy and agreement, a seeded bootstrap for similarity and retention.
exit codes: 0 it ran (whatever the figures) · 2 bad input, an endpoint unreachable or one side
failed every request (nothing stored).
"""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``quality`` subcommand (``set_defaults(func=run)``)."""
    p = subparsers.add_parser(
        "quality",
        help="compare a candidate deployment's answers with a reference's (quality retention)",
        description="Run the bundled prompt set greedily on a reference and a candidate "
        "endpoint: each side's exact-answer accuracy, their agreement and similarity, and the "
        "candidate's retention of the reference's accuracy, each with a 95 % interval.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--reference", required=True, metavar="URL", help="the reference's base URL")
    p.add_argument("--candidate", required=True, metavar="URL", help="the candidate's base URL")
    p.add_argument("--reference-model", metavar="M", help="default: the first of /v1/models")
    p.add_argument("--candidate-model", metavar="M", help="default: the first of /v1/models")
    p.add_argument("--reference-precision", metavar="P", help="label, e.g. fp16, bf16")
    p.add_argument("--candidate-precision", metavar="P", help="label, e.g. int4, fp8")
    p.add_argument("--api", choices=tuple(API_PATHS), default="chat", help="default chat")
    p.add_argument(
        "--category",
        action="extend",
        nargs="+",
        default=[],
        metavar="C",
        help=f"only these categories ({', '.join(CATEGORIES)}); space-separated or repeated",
    )
    p.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="at most N prompts, taken in turn from each category",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        metavar="S",
        help=f"per-request timeout (default {TIMEOUT_S:g})",
    )
    p.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="environment variable holding the API key (sent to both sides as a Bearer token)",
    )
    p.add_argument("--no-store", action="store_true", help="print only; store nothing")
    p.add_argument("--db", metavar="URL", help="store URL (default: SERVESCOPE_DB)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Side:
    """One endpoint as given and as identified."""

    role: str  # reference | candidate
    endpoint: str  # public: no credentials, no query
    query: str
    auth: tuple[str, str] | None
    identity: EndpointIdentity
    model: str
    precision: str | None

    def label(self) -> str:
        parts = [self.identity.describe(), self.model]
        if self.precision:
            parts.append(self.precision)
        return " · ".join(parts) + f" · {self.endpoint}"


def choose_prompts(
    prompt_set: PromptSet, categories: Sequence[str], limit: int | None
) -> tuple[QualityPrompt, ...]:
    """The prompts the arguments ask for; ``InputError`` for an unknown category or a limit < 1."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise InputError(f"unknown --category {', '.join(unknown)}; known: {', '.join(CATEGORIES)}")
    if limit is not None and limit < 1:
        raise InputError(f"--limit {limit}: give a whole number ≥ 1")
    prompts = select_prompts(prompt_set.prompts, tuple(dict.fromkeys(categories)), limit)
    if not prompts:
        raise InputError(f"no prompt of {prompt_set.name} is in --category {' '.join(categories)}")
    return prompts


def _client(key: str | None, auth: tuple[str, str] | None, timeout_s: float) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return http_client.async_client(
        timeout_s,
        headers=headers,
        auth=httpx.BasicAuth(*auth) if auth and not key else None,
        max_connections=CONCURRENCY,
    )


async def _identify(
    role: str,
    url: str,
    model: str | None,
    precision: str | None,
    key: str | None,
    timeout_s: float = IDENTIFY_TIMEOUT_S,
) -> Side:
    public, query, auth = split_endpoint(url)
    async with _client(key, auth, min(timeout_s, IDENTIFY_TIMEOUT_S)) as client:
        try:
            identity = await identify(client, public, query)
        except EndpointError as exc:
            raise EndpointError(f"{role}: {exc.message}", hint=exc.hint) from None
    chosen = model or identity.model
    if not chosen:
        raise EndpointError(
            f"{role}: {public}/v1/models lists no model",
            hint=f"pass --{role}-model NAME (if the server wants a key: --api-key-env NAME)",
        )
    return Side(role, public, query, auth, identity, chosen, precision)


async def _run_side(
    side: Side,
    prompts: Sequence[QualityPrompt],
    api: str,
    key: str | None,
    timeout_s: float,
) -> list[ProbeAnswer]:
    secrets = [s for s in (key, side.auth[1] if side.auth else None) if s]
    async with _client(key, side.auth, timeout_s) as client:
        return await probe(
            client,
            side.endpoint,
            prompts,
            model=side.model,
            api=api,
            timeout_s=timeout_s,
            query=side.query,
            secrets=secrets,
        )


def _fmt(est: Estimate) -> str:
    if est.value is None:
        return "n/a"
    if est.lo is None or est.hi is None:
        return f"{100 * est.value:3.0f} %"
    return f"{100 * est.value:3.0f} % [{100 * est.lo:.0f}–{100 * est.hi:.0f}]"


_COLUMNS = (
    ("reference acc", "reference_accuracy"),
    ("candidate acc", "candidate_accuracy"),
    ("agreement", "agreement"),
    ("similarity", "similarity"),
    ("retention", "retention"),
)


def report(
    summary: QualitySummary,
    reference: Side,
    candidate: Side,
    prompt_set: PromptSet,
    api: str,
    out: TextIO,
) -> None:
    """The printed report: both sides, a table per category and overall, the verdict."""
    print(f"reference  {reference.label()}", file=out)
    print(f"candidate  {candidate.label()}", file=out)
    print(
        f"prompts    {summary.overall.prompts} of {prompt_set.name} "
        f"(sha256 {prompt_set.sha256[:12]}) · {api} API · temperature 0, seed 0, "
        f"max_tokens {MAX_TOKENS}",
        file=out,
    )
    print("", file=out)
    rows: list[tuple[str, QualityFigures]] = list(summary.categories.items())
    rows.append(("overall", summary.overall))
    head = f"{'category':<12} {'n':>3}  " + "  ".join(f"{t:<18}" for t, _ in _COLUMNS)
    print(head.rstrip(), file=out)
    for name, fig in rows:
        cells = "  ".join(f"{_fmt(getattr(fig, attr)):<18}" for _, attr in _COLUMNS)
        print(f"{name:<12} {fig.prompts:>3}  {cells}".rstrip(), file=out)
    o = summary.overall
    print(
        f"\nerrors     reference {o.reference_errors}, candidate {o.candidate_errors} "
        "(a failed request counts wrong)",
        file=out,
    )
    print(f"verdict    {summary.verdict}", file=out)


def _all_failed(side: Side, answers: Sequence[ProbeAnswer]) -> None:
    if answers and all(a.error is not None for a in answers):
        raise EndpointError(
            f"{side.role} {side.endpoint}: all {len(answers)} requests failed, e.g. "
            f"{answers[0].error}",
            hint=f"check --{side.role}-model and --api (nothing was stored)",
        )


def run(args: argparse.Namespace) -> int:
    """Identify both sides, run the prompts on both, print the figures and store the run."""
    prompt_set = load_prompt_set()
    prompts = choose_prompts(prompt_set, args.category, args.limit)
    if not args.timeout > 0:
        raise InputError(f"--timeout {args.timeout}: give a number of seconds > 0")
    key = api_key_from_env(args.api_key_env)

    async def identify_both() -> tuple[Side, Side]:
        # both finish before an error is raised: no request is cut off mid-way
        ref, cand = await asyncio.gather(
            _identify(
                "reference",
                args.reference,
                args.reference_model,
                args.reference_precision,
                key,
                args.timeout,
            ),
            _identify(
                "candidate",
                args.candidate,
                args.candidate_model,
                args.candidate_precision,
                key,
                args.timeout,
            ),
            return_exceptions=True,
        )
        for side in (ref, cand):
            if isinstance(side, BaseException):
                raise side
        assert isinstance(ref, Side) and isinstance(cand, Side)
        return ref, cand

    reference, candidate = asyncio.run(identify_both())

    store = None
    if not args.no_store:
        from store.lifecycle import open_store

        store = open_store(args.db)  # a bad store fails before the prompts are run

    async def run_both() -> tuple[list[ProbeAnswer], list[ProbeAnswer]]:
        ref, cand = await asyncio.gather(
            _run_side(reference, prompts, args.api, key, args.timeout),
            _run_side(candidate, prompts, args.api, key, args.timeout),
        )
        return ref, cand

    started = time.time()
    t0 = time.perf_counter()
    try:
        ref_answers, cand_answers = asyncio.run(run_both())
        duration = time.perf_counter() - t0
        _all_failed(reference, ref_answers)
        _all_failed(candidate, cand_answers)
        scored = [
            score(p, r.text, c.text, reference_error=r.error, candidate_error=c.error)
            for p, r, c in zip(prompts, ref_answers, cand_answers, strict=True)
        ]
        summary = summarise(scored)
        report(summary, reference, candidate, prompt_set, args.api, sys.stdout)
        if store is not None:
            from store.quality_results import add_quality_run

            qid = f"q-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(started))}-{uuid.uuid4().hex[:6]}"
            add_quality_run(
                store,
                header(qid, reference, candidate, prompt_set, summary, started, duration, args.api),
                [answer_row(a) for a in scored],
            )
            print(f"stored     quality run {qid}", file=sys.stdout)
    finally:
        if store is not None:
            store.dispose()
    return 0


def header(
    quality_id: str,
    reference: Side,
    candidate: Side,
    prompt_set: PromptSet,
    summary: QualitySummary,
    started_at: float,
    duration_s: float,
    api: str,
) -> dict[str, Any]:
    """The ``quality_runs`` row of a run (the API rides in the summary JSON: no column)."""
    row: dict[str, Any] = {
        "quality_id": quality_id,
        "prompt_set": prompt_set.name,
        "prompt_set_sha256": prompt_set.sha256,
        "started_at": started_at,
        "duration_s": duration_s,
        "prompts": summary.overall.prompts,
        "summary": summary.to_dict() | {"api": api, "max_tokens": MAX_TOKENS},
    }
    for side in (reference, candidate):
        row[f"{side.role}_endpoint"] = side.endpoint
        row[f"{side.role}_model"] = side.model
        row[f"{side.role}_framework"] = side.identity.framework or "unknown"
        row[f"{side.role}_version"] = side.identity.version
        row[f"{side.role}_precision"] = side.precision
    return row


def answer_row(answer: ScoredAnswer) -> dict[str, Any]:
    """The ``quality_answers`` row of one scored prompt (without ``quality_id``)."""
    return asdict(answer)
