"""Which framework, which version, which model: ask the endpoint itself.

Every engine answers a route of its own that names it and its version; the OpenAI-compatible
``/v1/models`` names the model (and often the owner). ``identify`` asks them in turn and keeps
the first answer that names a framework, and says which route named it (``source``), so that a
stored run, verification or quality result says how its framework was known:

=================  ===============================  ===========================================
framework          route                             what names it
=================  ===============================  ===========================================
sglang             ``GET /get_server_info``          a JSON object with ``version`` (SGLang only)
tgi                ``GET /info``                     JSON with ``model_id`` and ``version``
llama.cpp          ``GET /props``                    JSON with ``build_info`` (``b4567-1a2b3c4``)
ollama             ``GET /api/version``              ``{"version": …}``
vllm / tensorrt-…  ``GET /version``                  ``{"version": …}``: both serve it, so the
                                                     ``/v1/models`` owner or the ``/metrics``
                                                     names decide which
sim                ``/v1/models`` owner              ``servescope-sim`` (it never poses as an
                                                     engine)
(fallback)         ``GET /metrics``                  the engine whose metric names appear
=================  ===============================  ===========================================

Nothing here raises for an endpoint that answers none of them: the identity is then unknown
(``framework = None``) and the caller decides (bench labels the run ``unknown``; a ``--framework``
given by the user always wins). An endpoint that cannot be reached at all raises
``EndpointError``.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from collectors import engine_metrics, http_client
from collectors.loadgen.client import base_url
from collectors.prometheus_text import PrometheusTextError, parse
from errors import EndpointError

#: ``/v1/models`` ``owned_by`` → framework (catalogue names, seeds/frameworks.toml)
OWNED_BY: dict[str, str] = {
    "servescope-sim": "sim",
    "servescope-mock": "mock",
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama.cpp",
    "lmdeploy": "lmdeploy",
    "tensorrt_llm": "tensorrt-llm",
    "tensorrt-llm": "tensorrt-llm",
    "deepspeed-mii": "deepspeed-mii",
}
#: ``collectors.engine_metrics.detect_engine`` names → framework
METRICS_ENGINE: dict[str, str] = {
    "vllm": "vllm",
    "sim": "sim",
    "sglang": "sglang",
    "tgi": "tgi",
    "llamacpp": "llama.cpp",
    "triton-trtllm": "tensorrt-llm",
    "trtllm-serve": "tensorrt-llm",
}
_BUILD = re.compile(r"^b?(\d+)(?:-([0-9a-f]+))?")


@dataclass(frozen=True)
class EndpointIdentity:
    """What an endpoint says about itself. ``framework`` uses the catalogue's names (``vllm``,
    ``sglang``, ``tgi``, ``llama.cpp``, ``ollama``, ``tensorrt-llm``, ``lmdeploy``, ``sim`` …),
    None when nothing named it; ``source`` is the route that did."""

    framework: str | None
    version: str | None
    source: str | None
    model: str | None = None
    owned_by: str | None = None
    max_model_len: int | None = None

    def describe(self) -> str:
        """``vllm 0.11.0 (GET /version)``, or ``unknown framework``."""
        if not self.framework:
            return "unknown framework"
        version = f" {self.version}" if self.version else ""
        return f"{self.framework}{version} ({self.source})"


async def _get_json(client: httpx.AsyncClient, url: str, *, strict: bool = False) -> Any:
    """The JSON at ``url``, or None (not found, not JSON, an error status); ``strict``: JSON
    nested too deep to decode raises ``EndpointError`` instead (a hostile answer, not a miss)."""
    try:
        resp = await client.get(url)
    except httpx.TimeoutException:
        return None
    if resp.status_code != 200:
        return None
    try:
        return http_client.json_of(resp)
    except http_client.JSONTooDeep as exc:
        if strict:
            raise EndpointError(exc.msg, hint="is this an OpenAI-compatible endpoint?") from None
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _text(value: Any) -> str | None:
    return str(value).strip() or None if isinstance(value, str | int | float) else None


def _llamacpp_version(props: dict[str, Any]) -> str | None:
    build = _text(props.get("build_info"))
    if build is None:
        return None
    m = _BUILD.match(build)
    return f"b{m.group(1)}" + (f"-{m.group(2)}" if m.group(2) else "") if m else build


async def _models(
    client: httpx.AsyncClient, base: str, query: str
) -> tuple[str | None, str | None, int | None]:
    data = await _get_json(client, f"{base}/v1/models{query}", strict=True)
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        return None, None, None
    first = entries[0]
    length = first.get("max_model_len")
    if not isinstance(length, int) and isinstance(first.get("meta"), dict):
        length = first["meta"].get("n_ctx_train")  # llama.cpp
    return (
        _text(first.get("id")),
        _text(first.get("owned_by")),
        length if isinstance(length, int) and not isinstance(length, bool) else None,
    )


async def _metrics_engine(client: httpx.AsyncClient, base: str, query: str) -> str | None:
    try:
        resp = await client.get(f"{base}/metrics{query}")
    except httpx.TimeoutException:
        return None
    if resp.status_code != 200:
        return None
    try:
        names = parse(resp.text).names()
    except PrometheusTextError:
        return None
    engine = engine_metrics.detect_engine(names)
    return METRICS_ENGINE.get(engine) if engine else None


async def identify(client: httpx.AsyncClient, base: str, query: str = "") -> EndpointIdentity:
    """Ask the endpoint at ``base`` (``http://host:port``, with or without ``/v1``) who it is.

    ``client`` carries the timeout and any credentials; ``query`` (``?api-version=…``, from the
    ``--endpoint`` URL) is appended to every probe, as to every request. Raises
    ``EndpointError`` when the endpoint cannot be reached at all (connection refused, DNS);
    otherwise returns what it could learn, with ``framework`` None when no route named one.
    """
    base = base_url(base)
    try:
        model, owned_by, max_len = await _models(client, base, query)
    except http_client.ResponseTooLarge as exc:
        raise EndpointError(str(exc), hint="is this an OpenAI-compatible endpoint?") from None
    except httpx.TransportError as exc:
        raise EndpointError(
            f"cannot reach {base}: {exc.__class__.__name__}: {exc}",
            hint="is the server running, and is the URL its OpenAI-compatible base "
            "(http://host:port or http://host:port/v1)?",
        ) from exc
    owner = OWNED_BY.get((owned_by or "").lower())

    def found(framework: str, version: str | None, source: str) -> EndpointIdentity:
        return EndpointIdentity(framework, version, source, model, owned_by, max_len)

    if owner in ("sim", "mock"):
        return found(owner, None, "GET /v1/models (owned_by)")
    try:
        info = await _get_json(client, f"{base}/get_server_info{query}")
        if isinstance(info, dict) and _text(info.get("version")):
            return found("sglang", _text(info.get("version")), "GET /get_server_info")
        info = await _get_json(client, f"{base}/info{query}")
        if isinstance(info, dict) and "model_id" in info and _text(info.get("version")):
            return found("tgi", _text(info.get("version")), "GET /info")
        props = await _get_json(client, f"{base}/props{query}")
        if isinstance(props, dict) and (
            "build_info" in props or "default_generation_settings" in props
        ):
            return found("llama.cpp", _llamacpp_version(props), "GET /props")
        info = await _get_json(client, f"{base}/api/version{query}")
        if isinstance(info, dict) and _text(info.get("version")):
            return found("ollama", _text(info.get("version")), "GET /api/version")
        info = await _get_json(client, f"{base}/version{query}")
        version = _text(info.get("version")) if isinstance(info, dict) else None
        engine = await _metrics_engine(client, base, query)
        if version and owner in ("vllm", "tensorrt-llm", "lmdeploy", "sglang"):
            return found(owner, version, "GET /version")
        if version and engine in ("vllm", "tensorrt-llm"):
            return found(engine, version, "GET /version + /metrics")
        if engine:
            return found(engine, version, "GET /metrics (engine)")
        if owner:
            return found(owner, version, "GET /v1/models (owned_by)")
        return EndpointIdentity(None, version, None, model, owned_by, max_len)
    except httpx.TransportError:
        # it answered /v1/models and then dropped: keep what the models list said
        if owner:
            return found(owner, None, "GET /v1/models (owned_by)")
        return EndpointIdentity(None, None, None, model, owned_by, max_len)


def identify_sync(
    base: str,
    *,
    headers: dict[str, str] | None = None,
    query: str = "",
    timeout_s: float = 3.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> EndpointIdentity:
    """``identify`` with a client of its own (``headers``: e.g. the Authorization header)."""

    async def run() -> EndpointIdentity:
        async with http_client.async_client(
            timeout_s, headers=headers, transport=transport
        ) as client:
            return await identify(client, base, query)

    return asyncio.run(run())
