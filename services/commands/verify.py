"""``servescope verify``: does an OpenAI-compatible endpoint behave as clients expect?

Resolves the endpoint's identity first (an unreachable endpoint: one error line, exit 2, nothing
stored), runs ``collectors.endpoint_checks``, prints each check as it ends, a summary line, and
stores the verification (``store.verifications``) unless ``--no-store``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import socket
import sys
import time
import uuid
from typing import Any

from collectors.loadgen.runner import api_key_from_env
from errors import EndpointError, ExitCode, InputError

EPILOG = """\
checks (each for the API(s) chosen; greedy: temperature 0, a fixed seed):
{checks}
examples:
  servescope verify --endpoint http://127.0.0.1:8000
  servescope verify --endpoint http://127.0.0.1:8080/v1 --api chat -v --no-store
exit codes: 0 every check passed · 2 bad input, endpoint unreachable or store unusable
  (nothing checked or stored) · 3 a check failed.
"""


def _epilog() -> str:
    from collectors.endpoint_checks import CHECKS

    lines = [
        f"  {c.name:<21} {'/'.join(c.apis) if len(c.apis) == 1 else 'both':<6} {c.why_it_matters}"
        for c in CHECKS.values()
    ]
    return EPILOG.format(checks="\n".join(lines))


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``verify`` subcommand (``set_defaults(func=run)``)."""
    p = subparsers.add_parser(
        "verify",
        help="check that an OpenAI-compatible endpoint behaves as clients expect",
        description="Functional conformance of an OpenAI-compatible endpoint: response shape, "
        "stop sequences, max_tokens, streaming, over-long input, multi-turn history, "
        "concurrent isolation, malformed requests. Each check is PASS or FAIL with what was "
        "sent, what came back and why it matters.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--endpoint", required=True, metavar="URL", help="base URL, e.g. http://127.0.0.1:8000"
    )
    p.add_argument("--model", metavar="M", help="model name (default: the first of /v1/models)")
    p.add_argument(
        "--api",
        choices=("chat", "completions", "both"),
        default="both",
        help="the API(s) checked (default both)",
    )
    p.add_argument(
        "--framework", metavar="NAME", help="framework label (default: what the endpoint says)"
    )
    p.add_argument(
        "--framework-version",
        metavar="V",
        help="framework version (default: what the endpoint says)",
    )
    p.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key")
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="per-request timeout; a stream or an answer that takes longer fails (default 60)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="details",
        action="store_true",
        help="print what each check sent and received, and why it matters (always on a FAIL)",
    )
    p.add_argument("--no-store", action="store_true", help="print the results, store nothing")
    p.add_argument("--db", metavar="URL", help="store URL (default: SERVESCOPE_DB)")
    p.set_defaults(func=run)


def _print(result: Any, verbose: bool, secrets: tuple[str, ...]) -> None:
    from collectors.redact import redact

    mark = "PASS" if result.passed else "FAIL"
    print(f"{mark}  {result.name:<21} {result.api:<11} {redact(result.message, secrets)}")
    if verbose or not result.passed:
        print(f"      sent:     {redact(result.sent, secrets)}")
        print(f"      received: {redact(result.received, secrets)}")
        print(f"      why:      {result.why_it_matters}")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """Verify the endpoint; 0 when every check passed, 3 (``ExitCode.FAILED``) when one failed,
    2 (a ServeScopeError, raised) when the endpoint or store cannot be used."""
    import httpx

    from collectors import http_client
    from collectors.endpoint_checks import CheckResult, run_checks
    from collectors.endpoint_identity import EndpointIdentity, identify
    from collectors.loadgen.client import split_endpoint
    from collectors.redact import redact

    if args.timeout is None or not args.timeout > 0:
        raise InputError(f"--timeout must be > 0 seconds, got {args.timeout}")
    apis = ("chat", "completions") if args.api == "both" else (args.api,)
    key = api_key_from_env(args.api_key_env)
    base, query, creds = split_endpoint(args.endpoint)
    secrets = tuple(s for s in (key, creds[1] if creds else None) if s)
    headers: dict[str, str] = {}
    if key:
        headers["authorization"] = f"Bearer {key}"
    elif creds is not None:
        token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")
        headers["authorization"] = f"Basic {token}"
    verbose = bool(getattr(args, "details", False) or getattr(args, "verbose", False))

    def client() -> httpx.AsyncClient:
        return http_client.async_client(args.timeout, headers=headers)

    async def who() -> EndpointIdentity:
        async with client() as c:
            return await identify(c, base, query)

    identity = asyncio.run(who())  # unreachable: EndpointError, before anything is opened
    model = args.model or identity.model
    if not model:
        raise EndpointError(
            f"cannot pick a model: {base}/v1/models lists none", hint="pass --model NAME"
        )
    framework = args.framework or identity.framework or "unknown"
    version = args.framework_version or identity.version
    store = None
    if not args.no_store:  # a store that cannot be opened fails before any check is sent
        from store.lifecycle import open_store

        store = open_store(args.db)
    print(
        f"verifying {base} · model {model} · {framework}"
        + (f" {version}" if version else "")
        + (f" ({identity.source})" if identity.source and not args.framework else "")
        + f" · api {args.api}",
        flush=True,
    )

    async def check() -> list[CheckResult]:
        async with client() as c:
            return await run_checks(
                c,
                base,
                model=model,
                apis=apis,
                timeout_s=args.timeout,
                max_model_len=identity.max_model_len,
                query=query,
                on_result=lambda r: _print(r, verbose, secrets),
            )

    started = time.time()
    try:
        results = asyncio.run(check())
    except BaseException:
        if store is not None:
            store.dispose()
        raise
    duration = time.time() - started
    passed = sum(1 for r in results if r.passed)
    failed = len(results) - passed
    verify_id = f"verify-{uuid.uuid4().hex[:12]}"
    failed_names = ", ".join(f"{r.name}/{r.api}" for r in results if not r.passed)
    print(
        f"{passed} passed, {failed} failed of {len(results)} checks in {duration:.1f} s"
        + (f": FAILED {failed_names}" if failed else "")
    )
    if store is not None:
        from store.verifications import add_verification

        header = {
            "verify_id": verify_id,
            "endpoint": base,
            "api": args.api,
            "model": model,
            "framework": framework,
            "framework_version": version,
            "identity_source": "--framework" if args.framework else identity.source,
            "host": socket.gethostname(),
            "started_at": started,
            "duration_s": duration,
            "passed": passed,
            "failed": failed,
        }
        rows = [
            {
                **r.as_row(),
                **{k: redact(getattr(r, k), secrets) for k in ("sent", "received", "message")},
            }
            for r in results
        ]
        try:
            add_verification(store, header, rows)
        finally:
            store.dispose()
        print(f"stored as {verify_id} in {store.url}")
    return ExitCode.FAILED if failed else ExitCode.OK
