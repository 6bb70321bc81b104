"""Functional conformance of an OpenAI-compatible endpoint: does it do what clients rely on?

Each check sends a few greedy requests (temperature 0, a fixed seed) and says PASS or FAIL with
what it sent, what came back (abridged) and why it matters. ``CHECKS`` is the registry (one
dict, in the order they run); ``run_checks`` runs them for the chosen APIs and never raises for
what an endpoint does: a check that raises (a reset connection, a timeout, a body that is not
JSON) is a FAIL that names the error.

=====================  =====  =====================================================================
check                  APIs   passes when
=====================  =====  =====================================================================
response_format        both   the non-streaming answer has id, object, choices[0] text and
                              finish_reason, and integer usage with total = prompt + completion
stop_sequences         both   asked again with stop=[a word of its first answer], the answer stops
                              before that word, equals the first answer up to it (whitespace
                              aside) and finishes with "stop"
max_tokens             both   max_tokens=5 gives at most 5 completion tokens, "length" at 5
streaming              both   every ``data:`` line parses, content, a finish_reason and a usage
                              chunk arrive, and ``data: [DONE]`` ends it, within the timeout
overlong_input         both   a prompt longer than the context gets a 4xx with an error message
multi_turn             chat   the conversation's prompt_tokens exceed the last message's alone by
                              at least the first turn's tokens (the history was used)
concurrent_isolation   both   8 requests at once: prompt_tokens rank as the prompts' lengths and
                              no answer holds another request's marker
malformed_request      both   a body that is not JSON and one without messages/prompt each get a
                              4xx with an error message
=====================  =====  =====================================================================
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from collectors import http_client
from collectors.loadgen.client import API_PATHS

APIS: tuple[str, ...] = ("chat", "completions")
#: greedy decoding: the same request gives the same answer
SEED = 1234
#: the cap of ``sent`` / ``received`` texts
ABRIDGE = 300
#: the overlong prompt's size cap (bytes of text)
OVERLONG_MAX_BYTES = 4_000_000
#: the context assumed when neither /v1/models nor /props tells it
FALLBACK_CONTEXT = 1_000_000
CONCURRENT = 8
#: httpx's words when a server closes a connection before any byte of the answer
_NOT_ANSWERED = "Server disconnected without sending a response"
_WORD = re.compile(r"[A-Za-z]{3,}|\d+")
_FILLER = (  # noqa: SIM905 (a word list reads better as text)
    "river stone cloud paper light garden window music forest bridge yellow silver winter "
    "market letter circle simple travel number morning"
).split()


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict for one API (``sent``/``received`` abridged to ``ABRIDGE`` chars)."""

    name: str
    api: str
    passed: bool
    sent: str
    received: str
    message: str
    why_it_matters: str
    duration_ms: float

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


class CheckFailed(Exception):
    """Raised inside a check: the endpoint did something wrong (the message says what)."""


@dataclass
class Trace:
    """What a check sent and received so far (kept when it fails half-way)."""

    sent: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)

    def send(self, text: str) -> None:
        self.sent.append(text)

    def got(self, text: str) -> None:
        self.received.append(text)


@dataclass(frozen=True)
class Target:
    """The endpoint under test: a client (timeout, credentials), its base URL and model."""

    client: httpx.AsyncClient
    base: str
    model: str | None
    timeout_s: float
    query: str = ""
    #: the context in tokens and where it was learnt (identity, /props), None if unknown
    context_tokens: int | None = None
    context_source: str | None = None

    def url(self, api: str) -> str:
        return self.base + API_PATHS[api] + self.query


CheckFn = Callable[[Target, str, Trace], Awaitable[str]]


@dataclass(frozen=True)
class Check:
    """One check: its name, the APIs it applies to, why it matters, and its coroutine (returns
    the PASS message; raises ``CheckFailed`` with the FAIL message)."""

    name: str
    apis: tuple[str, ...]
    why_it_matters: str
    run: CheckFn


# --- helpers -----------------------------------------------------------------------------------


def abridge(text: str, limit: int = ABRIDGE) -> str:
    """One line, at most ``limit`` characters (``…`` marks a cut)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _body(
    target: Target,
    api: str,
    text: str | None = None,
    *,
    messages: Sequence[Mapping[str, str]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": target.model} if target.model else {}
    if api == "chat":
        body["messages"] = (
            [dict(m) for m in messages] if messages else [{"role": "user", "content": text or ""}]
        )
    else:
        if messages:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        body["prompt"] = text or ""
    body.update({"temperature": 0, "seed": SEED})
    body.update(extra)
    return body


def _ask(api: str, chat: str, completion: str) -> str:
    """The prompt for ``api``: a request for chat, a text to continue for completions (an
    instruct model given a bare request as a completion often ends it at once)."""
    return chat if api == "chat" else completion


def _describe(body: Mapping[str, Any]) -> str:
    """A body as JSON, long strings shortened."""

    def short(value: Any) -> Any:
        if isinstance(value, str) and len(value) > 80:
            return f"{value[:40]}…({len(value):,} chars)"
        if isinstance(value, list):
            return [short(v) for v in value]
        if isinstance(value, dict):
            return {k: short(v) for k, v in value.items()}
        return value

    return json.dumps(short(dict(body)), ensure_ascii=False)


async def _post(
    target: Target, api: str, body: Mapping[str, Any], trace: Trace, *, label: str = ""
) -> httpx.Response:
    trace.send((label + ": " if label else "") + "POST " + API_PATHS[api] + " " + _describe(body))
    return await target.client.post(target.url(api), json=dict(body), timeout=target.timeout_s)


def _json(resp: httpx.Response, trace: Trace) -> dict[str, Any]:
    """The 200 JSON object of an answer, or ``CheckFailed`` saying what it was instead."""
    trace.got(f"HTTP {resp.status_code} {resp.text}")
    if resp.status_code != 200:
        raise CheckFailed(f"answered HTTP {resp.status_code}: {abridge(resp.text, 160)}")
    try:
        obj = http_client.json_of(resp)
    except ValueError:
        raise CheckFailed(f"the answer is not JSON: {abridge(resp.text, 120)}") from None
    if not isinstance(obj, dict):
        raise CheckFailed(f"the answer is not a JSON object: {abridge(resp.text, 120)}")
    return obj


def _choice(obj: Mapping[str, Any]) -> dict[str, Any]:
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CheckFailed("the answer has no choices[0]")
    return choices[0]


def _text(api: str, obj: Mapping[str, Any]) -> str:
    choice = _choice(obj)
    if api == "chat":
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise CheckFailed("choices[0].message.content is not a string")
        return content
    text = choice.get("text")
    if not isinstance(text, str):
        raise CheckFailed("choices[0].text is not a string")
    return text


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(obj: Mapping[str, Any], key: str) -> int:
    usage = obj.get("usage")
    value = _int(usage.get(key)) if isinstance(usage, dict) else None
    if value is None:
        raise CheckFailed(f"usage.{key} is missing or not an integer")
    return value


async def _answer(
    target: Target, api: str, trace: Trace, text: str | None = None, *, label: str = "", **kw: Any
) -> tuple[str, str | None, dict[str, Any]]:
    """(text, finish_reason, the answer object) of a greedy non-streaming request."""
    resp = await _post(target, api, _body(target, api, text, **kw), trace, label=label)
    obj = _json(resp, trace)
    reason = _choice(obj).get("finish_reason")
    return _text(api, obj), reason if isinstance(reason, str) else None, obj


def error_message(resp: httpx.Response) -> str | None:
    """The error an error response states: JSON ``error`` (object or text), ``message`` or
    ``detail``, or a plain-text body; None when the body says nothing."""
    raw = resp.text.strip()
    if not raw:
        return None
    try:
        obj = http_client.loads(raw)
    except ValueError:
        return raw
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            return str(msg) if msg else None
        return str(err) if err else None
    return raw


def _expect_4xx(resp: httpx.Response, what: str) -> str:
    """``what`` was answered with a 4xx and a message (the PASS text), else ``CheckFailed``."""
    status = resp.status_code
    if 400 <= status < 500:
        msg = error_message(resp)
        if not msg:
            raise CheckFailed(f"{what}: HTTP {status} but no error message in the body")
        return f"{what}: HTTP {status} ({abridge(msg, 100)})"
    if status >= 500:
        raise CheckFailed(
            f"{what}: HTTP {status}, a server error (5xx) where a client error (4xx) was due"
        )
    raise CheckFailed(f"{what}: HTTP {status}: the server accepted it instead of refusing it (4xx)")


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


# --- the checks --------------------------------------------------------------------------------


async def response_format(target: Target, api: str, trace: Trace) -> str:
    resp = await _post(
        target,
        api,
        _body(
            target, api, _ask(api, "Say hello in five words.", "Hello, my name is"), max_tokens=16
        ),
        trace,
    )
    obj = _json(resp, trace)
    problems: list[str] = []
    if not isinstance(obj.get("id"), str) or not obj.get("id"):
        problems.append("no id")
    expected = "chat.completion" if api == "chat" else "text_completion"
    if obj.get("object") != expected:
        problems.append(f"object is {obj.get('object')!r}, not {expected!r}")
    try:
        _text(api, obj)
    except CheckFailed as exc:
        problems.append(str(exc))
    choices = obj.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if isinstance(first, dict) and not isinstance(first.get("finish_reason"), str):
        problems.append("choices[0].finish_reason is missing")
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        problems.append("no usage object")
    else:
        counts = {k: _int(usage.get(k)) for k in ("prompt_tokens", "completion_tokens")}
        counts["total_tokens"] = _int(usage.get("total_tokens"))
        bad = [k for k, v in counts.items() if v is None]
        if bad:
            problems.append(f"usage.{', usage.'.join(bad)} not integer(s)")
        else:
            p, c, t = counts["prompt_tokens"], counts["completion_tokens"], counts["total_tokens"]
            assert p is not None and c is not None and t is not None
            if t != p + c:
                problems.append(f"usage.total_tokens {t} ≠ prompt {p} + completion {c}")
    if problems:
        raise CheckFailed("the answer is not OpenAI-shaped: " + "; ".join(problems))
    return f"id, object {expected!r}, choices[0] text and finish_reason, integer usage that adds up"


def _stop_word(text: str) -> tuple[str, int] | None:
    """A word from the middle of ``text`` whose first occurrence is not at the start: (word,
    index of its first occurrence)."""
    found = [(m.group(), m.start()) for m in _WORD.finditer(text)]
    if len(found) < 3:
        return None
    middle = len(found) / 2
    for word, _ in sorted(found[1:], key=lambda f: abs(found.index(f) - middle)):
        at = text.find(word)
        if at > 0 and text[:at].strip():
            return word, at
    return None


async def stop_sequences(target: Target, api: str, trace: Trace) -> str:
    prompts = (
        _ask(api, "Write two sentences about the ocean.", "The ocean is"),
        _ask(api, "Count from 1 to 30, separated by commas.", "Count from 1 to 30: 1, 2, 3,"),
    )
    first = ""
    picked = None
    for prompt in prompts:
        first, _, _ = await _answer(target, api, trace, prompt, label="without stop", max_tokens=24)
        picked = _stop_word(first)
        if picked is not None:
            break
    if picked is None:
        raise CheckFailed(
            f"inconclusive: no usable output to pick a stop word from (last answer {first!r})"
        )
    word, at = picked
    expected = first[:at]
    second, reason, _ = await _answer(
        target, api, trace, prompt, label=f"with stop=[{word!r}]", max_tokens=24, stop=[word]
    )
    if word in second:
        raise CheckFailed(f"stop={[word]!r} ignored: the answer still contains {word!r}")
    if not _same(second, expected):
        raise CheckFailed(
            f"with stop={[word]!r} the answer {abridge(second, 80)!r} is not the first answer "
            f"up to {word!r} ({abridge(expected, 80)!r})"
        )
    if reason != "stop":
        raise CheckFailed(f"the answer stopped at {word!r} but finish_reason is {reason!r}")
    return f"stop={[word]!r} cut the answer right before it ({len(expected)} chars), reason stop"


async def max_tokens(target: Target, api: str, trace: Trace) -> str:
    limit = 5
    _, reason, obj = await _answer(
        target,
        api,
        trace,
        _ask(
            api,
            "Write a long essay about the history of computing, in detail.",
            "The history of computing is a long story. It began",
        ),
        max_tokens=limit,
    )
    n = _usage(obj, "completion_tokens")
    if n > limit:
        raise CheckFailed(f"max_tokens {limit} ignored: usage.completion_tokens is {n}")
    if n == limit and reason != "length":
        raise CheckFailed(f"{n} tokens (the limit) but finish_reason is {reason!r}, not 'length'")
    return f"{n} completion tokens ≤ {limit}, finish_reason {reason!r}"


async def streaming(target: Target, api: str, trace: Trace) -> str:
    body = _body(
        target,
        api,
        _ask(api, "Tell me a short story about a robot.", "Once upon a time, a little robot"),
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    trace.send("POST " + API_PATHS[api] + " " + _describe(body))
    lines: list[str] = []
    contents = 0
    finish: str | None = None
    usage: dict[str, Any] | None = None
    done = False
    after_done: list[str] = []
    try:
        async with asyncio.timeout(target.timeout_s):
            async with target.client.stream(
                "POST", target.url(api), json=body, timeout=target.timeout_s
            ) as resp:
                if resp.status_code != 200:
                    raw = (await resp.aread()).decode("utf-8", "replace")
                    trace.got(f"HTTP {resp.status_code} {raw}")
                    raise CheckFailed(f"answered HTTP {resp.status_code}: {abridge(raw, 160)}")
                ctype = resp.headers.get("content-type", "")
                async for line in resp.aiter_lines():
                    if not line.strip() or line.startswith(":"):
                        continue
                    lines.append(line)
                    if done:
                        after_done.append(line)
                        continue
                    if not line.startswith("data:"):
                        continue  # event:/id:/retry: fields
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        continue
                    try:
                        chunk = http_client.loads(data)
                    except ValueError:
                        raise CheckFailed(
                            f"a data line is not JSON: {abridge(data, 100)!r}"
                        ) from None
                    if not isinstance(chunk, dict):
                        raise CheckFailed(f"a data line is not a JSON object: {abridge(data, 100)}")
                    if isinstance(chunk.get("usage"), dict):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices") or ():
                        if not isinstance(choice, dict):
                            continue
                        delta = choice.get("delta")
                        piece = (
                            delta.get("content") if isinstance(delta, dict) else choice.get("text")
                        )
                        if isinstance(piece, str) and piece:
                            contents += 1
                        if isinstance(choice.get("finish_reason"), str):
                            finish = choice["finish_reason"]
    except TimeoutError:
        trace.got("\n".join(lines))
        raise CheckFailed(
            f"the stream stalled: no end within {target.timeout_s:g} s after {len(lines)} "
            f"line(s){' (no [DONE])' if not done else ''}"
        ) from None
    trace.got("\n".join(lines))
    problems: list[str] = []
    completion = _int(usage.get("completion_tokens")) if usage is not None else None
    if not ctype.startswith("text/event-stream"):
        problems.append(f"content-type {ctype!r}, not text/event-stream")
    if contents == 0:
        problems.append(
            "no content chunk"
            + (f" (usage.completion_tokens {completion})" if usage is not None else "")
        )
    if finish is None:
        problems.append("no finish_reason")
    if usage is None:
        problems.append("no usage chunk (stream_options.include_usage)")
    elif completion is None:
        problems.append("the usage chunk has no integer completion_tokens")
    elif completion < contents - 1:
        problems.append(f"usage.completion_tokens {completion} < {contents} content chunks − 1")
    if not done:
        problems.append("the stream ended without data: [DONE]")
    elif after_done:
        problems.append(f"{len(after_done)} line(s) after data: [DONE]")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (
        f"{len(lines)} data lines all JSON, {contents} content chunks, finish_reason {finish!r}, "
        f"usage.completion_tokens {completion} (≥ content chunks − 1), ended with [DONE]"
    )


def _overlong_text(tokens: int) -> str:
    """Text of more than ``tokens`` tokens under any tokenizer (a space-led common word is at
    least one token; ~4.5 bytes each would also beat bytes/4 counting), capped in size."""
    words = int(tokens * 1.25) + 64
    text_words = (_FILLER[i % len(_FILLER)] for i in range(words))
    return " ".join(text_words)[:OVERLONG_MAX_BYTES]


async def overlong_input(target: Target, api: str, trace: Trace) -> str:
    tokens = target.context_tokens or FALLBACK_CONTEXT
    source = target.context_source if target.context_tokens else "assumed: context unknown"
    text = _overlong_text(tokens)
    body = _body(target, api, text, max_tokens=4)
    trace.send(
        f"POST {API_PATHS[api]}: a prompt of {len(text.split()):,} words ({len(text):,} bytes) "
        f"for a context of {tokens:,} tokens ({source}), max_tokens 4"
    )
    try:
        async with asyncio.timeout(target.timeout_s):
            resp = await target.client.post(target.url(api), json=body, timeout=target.timeout_s)
    except (TimeoutError, httpx.TimeoutException):
        raise CheckFailed(
            f"no answer within {target.timeout_s:g} s: the server hung on an over-long prompt"
        ) from None
    trace.got(f"HTTP {resp.status_code} {resp.text}")
    if resp.status_code == 200:
        raise CheckFailed(
            f"HTTP 200: the server accepted a prompt longer than its context ({tokens:,} tokens) "
            "instead of refusing it (4xx): it truncated or shifted it silently"
        )
    return _expect_4xx(resp, "over-long prompt")


_CODE_WORD = "ZEPHYRINE"


async def multi_turn(target: Target, api: str, trace: Trace) -> str:
    first = (
        f"Remember this code word: {_CODE_WORD}. I will ask you for it later. Until then, "
        "here is some context you can ignore: "
        + " ".join(_FILLER[i % len(_FILLER)] for i in range(40))
        + "."
    )
    last = "What is the code word? Reply with the code word only."
    conversation = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "OK"},
        {"role": "user", "content": last},
    ]
    answer, _, whole = await _answer(
        target, api, trace, messages=conversation, label="conversation", max_tokens=12
    )
    _, _, alone = await _answer(target, api, trace, last, label="last message alone", max_tokens=1)
    _, _, first_alone = await _answer(
        target, api, trace, first, label="first message alone", max_tokens=1
    )
    _, _, short = await _answer(target, api, trace, "OK", label="one-word message", max_tokens=1)
    p_whole = _usage(whole, "prompt_tokens")
    p_alone = _usage(alone, "prompt_tokens")
    # the first turn's tokens, at least: its prompt_tokens less those of a one-word message
    # (the template's overhead and the word cancel out)
    earlier = _usage(first_alone, "prompt_tokens") - _usage(short, "prompt_tokens")
    recalled = _CODE_WORD.lower() in answer.lower()
    extra = (
        f"; the answer {'contains' if recalled else 'does not contain'} the code word "
        f"({abridge(answer, 40)!r}; recall is not required)"
    )
    if p_whole - p_alone < earlier:
        raise CheckFailed(
            f"the conversation's prompt_tokens ({p_whole}) exceed the last message's alone "
            f"({p_alone}) by {p_whole - p_alone}, less than the first turn's {earlier} tokens: "
            "the server dropped the history" + extra
        )
    return (
        f"the conversation's prompt_tokens ({p_whole}) exceed the last message's alone "
        f"({p_alone}) by {p_whole - p_alone} ≥ the first turn's {earlier} tokens" + extra
    )


def _marker(i: int) -> str:
    return f"QX{chr(ord('A') + i)}{i + 3}{chr(ord('Z') - i)}K"


async def concurrent_isolation(target: Target, api: str, trace: Trace) -> str:
    markers = [_marker(i) for i in range(CONCURRENT)]
    prompts = [
        f"Request {m}. Repeat the marker {m} once, then describe these words: "
        + " ".join(_FILLER[(i + j) % len(_FILLER)] for j in range(8 + 12 * i))
        for i, m in enumerate(markers)
    ]
    trace.send(
        f"{CONCURRENT} requests at once, markers {', '.join(markers)}, prompts of "
        f"{', '.join(str(len(p)) for p in prompts)} chars, max_tokens 12"
    )
    inner = Trace()

    async def one(prompt: str) -> tuple[str, int]:
        text, _, obj = await _answer(target, api, inner, prompt, max_tokens=12)
        return text, _usage(obj, "prompt_tokens")

    results = await asyncio.gather(*(one(p) for p in prompts), return_exceptions=True)
    answers: list[tuple[str, int]] = []
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            trace.got("; ".join(inner.received))
            if isinstance(r, CheckFailed):
                raise CheckFailed(f"request {i} ({markers[i]}): {r}")
            raise r
        answers.append(r)
    counts = [n for _, n in answers]
    trace.got(
        "prompt_tokens "
        + ", ".join(map(str, counts))
        + "; answers "
        + " | ".join(abridge(t, 30) for t, _ in answers)
    )
    if any(b <= a for a, b in itertools.pairwise(counts)):
        raise CheckFailed(
            f"prompt_tokens {counts} do not rise with the prompts' lengths: answers were mixed "
            "up between concurrent requests (or usage is not per request)"
        )
    leaks = [
        f"answer {i} holds {other}"
        for i, (text, _) in enumerate(answers)
        for j, other in enumerate(markers)
        if j != i and other in text
    ]
    if leaks:
        raise CheckFailed("answers crossed between concurrent requests: " + "; ".join(leaks))
    return (
        f"{CONCURRENT} concurrent answers: prompt_tokens {counts} rise with the prompts' lengths, "
        "no answer holds another request's marker"
    )


async def malformed_request(target: Target, api: str, trace: Trace) -> str:
    url = target.url(api)
    raw = b'{"model": "x", "max_tokens": 4, '  # cut short: not JSON
    trace.send(f"POST {API_PATHS[api]} {raw.decode()!r} (not JSON)")
    resp = await target.client.post(
        url, content=raw, headers={"content-type": "application/json"}, timeout=target.timeout_s
    )
    trace.got(f"not JSON → HTTP {resp.status_code} {resp.text}")
    messages: list[str] = []
    problems: list[str] = []
    try:
        messages.append(_expect_4xx(resp, "not JSON"))
    except CheckFailed as exc:
        problems.append(str(exc))
    key = "messages" if api == "chat" else "prompt"
    body = {k: v for k, v in _body(target, api, "hello", max_tokens=4).items() if k != key}
    trace.send(f"POST {API_PATHS[api]} {_describe(body)} (no {key})")
    resp = await target.client.post(url, json=body, timeout=target.timeout_s)
    trace.got(f"no {key} → HTTP {resp.status_code} {resp.text}")
    try:
        messages.append(_expect_4xx(resp, f"no {key}"))
    except CheckFailed as exc:
        problems.append(str(exc))
    if problems:
        raise CheckFailed("; ".join(problems))
    return "; ".join(messages)


CHECKS: dict[str, Check] = {
    c.name: c
    for c in (
        Check(
            "response_format",
            APIS,
            "OpenAI clients and SDKs parse these fields; a missing one breaks them",
            response_format,
        ),
        Check(
            "stop_sequences",
            APIS,
            "agents, tool calls and templates end answers with stop strings",
            stop_sequences,
        ),
        Check(
            "max_tokens",
            APIS,
            "the output cap bounds latency, cost and memory; benchmarks rely on it",
            max_tokens,
        ),
        Check(
            "streaming",
            APIS,
            "chat UIs and TTFT measurements read the SSE stream; a stream without [DONE] hangs",
            streaming,
        ),
        Check(
            "overlong_input",
            APIS,
            "a too-long prompt must be refused clearly, not truncated silently, crash or hang",
            overlong_input,
        ),
        Check(
            "multi_turn",
            ("chat",),
            "chat applications send the whole history; a server that drops it answers blind",
            multi_turn,
        ),
        Check(
            "concurrent_isolation",
            APIS,
            "under load, one user's answer must never reach another (batching bugs leak data)",
            concurrent_isolation,
        ),
        Check(
            "malformed_request",
            APIS,
            "bad requests must get a 4xx clients can act on, not a 5xx (retried) or a 200",
            malformed_request,
        ),
    )
}


async def run_check(check: Check, target: Target, api: str) -> CheckResult:
    """One check for one API; whatever it raises becomes a FAIL naming the error."""
    trace = Trace()
    t0 = time.perf_counter()
    note = ""
    try:
        try:
            message = await check.run(target, api, trace)
        except httpx.RemoteProtocolError as exc:
            if _NOT_ANSWERED not in str(exc):
                raise
            # the server closed a kept-alive connection as the request went out: it never saw
            # the request, so it is sent again (as HTTP clients do), once, and said so
            note = f" (sent twice: {_NOT_ANSWERED.lower()} the first time)"
            trace = Trace()
            message = await check.run(target, api, trace)
        passed = True
    except CheckFailed as exc:
        message, passed = str(exc), False
    except (httpx.HTTPError, OSError, TimeoutError, ValueError) as exc:
        kind = type(exc).__name__
        message, passed = f"{kind}: {exc}" if str(exc) else kind, False
        if isinstance(exc, httpx.TimeoutException | TimeoutError):
            message = f"no answer within {target.timeout_s:g} s ({kind})"
    return CheckResult(
        name=check.name,
        api=api,
        passed=passed,
        sent=abridge(" ‖ ".join(trace.sent)),
        received=abridge(" ‖ ".join(trace.received)),
        message=message + note,
        why_it_matters=check.why_it_matters,
        duration_ms=(time.perf_counter() - t0) * 1000.0,
    )


async def props_context(client: httpx.AsyncClient, base: str) -> int | None:
    """llama.cpp's per-slot context (``/props`` ``default_generation_settings.n_ctx``), or
    None."""
    try:
        resp = await client.get(base + "/props")
        obj = http_client.json_of(resp) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    settings = obj.get("default_generation_settings") if isinstance(obj, dict) else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return _int(n_ctx) if _int(n_ctx) else None


async def run_checks(
    client: httpx.AsyncClient,
    base: str,
    *,
    model: str | None,
    apis: Sequence[str] = APIS,
    timeout_s: float = 60.0,
    max_model_len: int | None = None,
    query: str = "",
    names: Sequence[str] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run the checks (``names``: a subset of ``CHECKS``, default all) for each API in
    ``apis`` (check by check, each API in turn) against ``base`` (``http://host:port``).

    ``max_model_len`` is the context from the endpoint's identity; llama.cpp's ``/props``
    ``n_ctx`` is asked too (the larger is used: the prompt must exceed both), else
    ``FALLBACK_CONTEXT`` is assumed. ``on_result`` sees each
    result as it comes. Never raises for what the endpoint does.
    """
    unknown = [a for a in apis if a not in APIS]
    if unknown:
        raise ValueError(f"unknown api(s) {unknown}; choose from {APIS}")
    chosen = [CHECKS[n] for n in names] if names is not None else list(CHECKS.values())
    context, source = max_model_len, "the endpoint's max_model_len" if max_model_len else None
    if any(c.name == "overlong_input" for c in chosen):
        n_ctx = await props_context(client, base)  # llama.cpp: its slots' real context
        if n_ctx is not None and (context is None or n_ctx > context):
            context, source = n_ctx, "llama.cpp /props n_ctx"
    target = Target(client, base, model, timeout_s, query, context, source)
    results: list[CheckResult] = []
    for check in chosen:
        for api in apis:
            if api not in check.apis:
                continue
            result = await run_check(check, target, api)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results
