"""Run the quality prompt set against one OpenAI-compatible endpoint, greedily.

``load_prompt_set`` reads the bundled set (``seeds/quality_prompts.toml``) and its SHA-256;
``probe`` sends every prompt (chat API by default, or completions) with ``temperature`` 0,
``seed`` 0 and ``max_tokens`` 32, not streamed, at most ``concurrency`` in flight, each with its
own timeout. A request that fails (connection, timeout, an HTTP error, a body without an answer)
becomes an answer with ``error`` set — counted wrong by ``analysis.quality`` — never an
exception. The answers come back in prompt order. The caller owns the ``httpx.AsyncClient``
(headers, credentials, transport).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import httpx

from analysis.quality import QualityPrompt, parse_prompts
from collectors import http_client
from collectors.loadgen.client import API_PATHS
from collectors.redact import redact
from errors import ConfigError

PROMPT_FILE = "quality_prompts.toml"
MAX_TOKENS = 32
CONCURRENCY = 4
TIMEOUT_S = 60.0
#: the completions API has no chat template: the question is framed so that a base model
#: continues with the answer
COMPLETION_TEMPLATE = "Question: {prompt}\nAnswer:"
_ERROR_CHARS = 300


@dataclass(frozen=True)
class PromptSet:
    """The prompt set: its ``name`` (the TOML's ``name``), the SHA-256 of the file's bytes, and
    the prompts in file order."""

    name: str
    sha256: str
    prompts: tuple[QualityPrompt, ...]


def parse_prompt_set(data: bytes, *, source: str) -> PromptSet:
    """A prompt-set TOML's bytes → ``PromptSet`` (``ConfigError`` on a bad file)."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source} is not valid TOML: {exc}") from exc
    name = doc.get("name")
    prompts = parse_prompts(doc.get("prompts") or [], source=source)
    return PromptSet(
        name if isinstance(name, str) and name else source,
        hashlib.sha256(data).hexdigest(),
        prompts,
    )


def load_prompt_set() -> PromptSet:
    """The bundled prompt set, ``seeds/quality_prompts.toml``."""
    resource = resources.files("seeds").joinpath(PROMPT_FILE)
    if not resource.is_file():
        raise ConfigError(f"seeds/{PROMPT_FILE} is missing from the installation")
    return parse_prompt_set(resource.read_bytes(), source=f"seeds/{PROMPT_FILE}")


@dataclass(frozen=True)
class ProbeAnswer:
    """One prompt's answer from one endpoint: ``text`` (None when the request failed) or
    ``error`` (one line, credentials masked), and the seconds the request took."""

    prompt_id: str
    text: str | None
    error: str | None
    latency_s: float


def request_body(
    api: str, model: str, prompt: str, *, max_tokens: int = MAX_TOKENS
) -> dict[str, Any]:
    """The JSON body of one greedy, non-streamed request."""
    body: dict[str, Any] = {"model": model}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    elif api == "completions":
        body["prompt"] = COMPLETION_TEMPLATE.format(prompt=prompt)
    else:
        raise ConfigError(f"unknown API {api!r}; known: {', '.join(API_PATHS)}")
    body.update(temperature=0, seed=0, max_tokens=max_tokens, stream=False)
    return body


def answer_text(api: str, payload: Any) -> str:
    """The generated text of a non-streamed response; ``ValueError`` when it has none."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the response has no choices")
    first = choices[0]
    if api == "chat":
        message = first.get("message")
        text = message.get("content") if isinstance(message, dict) else None
    else:
        text = first.get("text")
    if not isinstance(text, str):
        raise ValueError("the response's first choice has no text")
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_ERROR_CHARS]


async def _ask(
    client: httpx.AsyncClient,
    url: str,
    api: str,
    model: str,
    prompt: QualityPrompt,
    *,
    max_tokens: int,
    timeout_s: float,
    secrets: Sequence[str],
) -> ProbeAnswer:
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    def failed(why: str) -> ProbeAnswer:
        return ProbeAnswer(prompt.id, None, redact(_one_line(why), secrets), loop.time() - t0)

    body = request_body(api, model, prompt.prompt, max_tokens=max_tokens)
    try:
        resp = await client.post(url, json=body, timeout=timeout_s)
    except httpx.TimeoutException:
        return failed(f"timeout after {timeout_s:g} s")
    except httpx.HTTPError as exc:
        return failed(f"{exc.__class__.__name__}: {exc}")
    if resp.status_code != 200:
        return failed(f"HTTP {resp.status_code}: {resp.text}")
    try:
        text = answer_text(api, http_client.json_of(resp))
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        return failed(f"unreadable response: {exc}")
    return ProbeAnswer(prompt.id, text, None, loop.time() - t0)


async def probe(
    client: httpx.AsyncClient,
    base: str,
    prompts: Sequence[QualityPrompt],
    *,
    model: str,
    api: str = "chat",
    max_tokens: int = MAX_TOKENS,
    concurrency: int = CONCURRENCY,
    timeout_s: float = TIMEOUT_S,
    query: str = "",
    secrets: Iterable[str] = (),
) -> list[ProbeAnswer]:
    """Ask ``base`` (``http://host:port``, no ``/v1``) every prompt; the answers in prompt order.

    ``query``: a ``?query`` appended to the request URL (``split_endpoint``); ``secrets``: texts
    masked in error messages (the API key, the URL's password).
    """
    if api not in API_PATHS:
        raise ConfigError(f"unknown API {api!r}; known: {', '.join(API_PATHS)}")
    if concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
    url = f"{base.rstrip('/')}{API_PATHS[api]}{query}"
    gate = asyncio.Semaphore(concurrency)
    masked = tuple(secrets)

    async def one(prompt: QualityPrompt) -> ProbeAnswer:
        async with gate:
            return await _ask(
                client,
                url,
                api,
                model,
                prompt,
                max_tokens=max_tokens,
                timeout_s=timeout_s,
                secrets=masked,
            )

    return list(await asyncio.gather(*(one(p) for p in prompts)))
