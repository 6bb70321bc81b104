"""Incremental reading of one streamed completion (Server-Sent Events), timed per read.

The hot path of the load generator: every byte a server streams passes through
``StreamAccumulator.feed``. It splits SSE events without decoding JSON, decides with a few byte
searches whether an event carries generated content (``"content"``, ``"text"``,
``"reasoning_content"``, ``"tool_calls"``), and keeps only the few payloads that must be decoded
at the end (usage, finish reason, an error). Timestamps come from the caller: the instant the
bytes were read from the socket.

Metric definitions (DESIGN §5): the first content event gives TTFT; every gap between
consecutive content events is one ITL sample (``gaps_ms``); the last byte gives E2E.

Malformed input is rejected without decoding every event: a content event counts only when it
is structurally a JSON object (it starts with ``{`` and ends with ``}``, its braces, brackets and
unescaped quotes balance; only an event that fails this cheap check is JSON-decoded to decide).
The learned-shape fast paths take an event only when its bytes around the content string are
those of an event already validated and its content string holds no unescaped quote (counted).
A rejected event is counted in ``malformed`` and never timed. ``problem()`` says why a finished
stream cannot count as a successful response (docs/metrics.md, "Request status").
"""

from __future__ import annotations

import json
from array import array
from typing import Any

_CONTENT_KEYS: tuple[bytes, ...] = (
    b'"content":',
    b'"text":',
    b'"reasoning_content":',
    b'"reasoning":',
)
_WS = (b" ", b"\t", b"\n", b"\r")


def has_content(payload: bytes) -> bool:
    """True when a chunk's JSON carries generated content (a non-empty string or tool calls).

    Works on the raw bytes: ``"content":""`` and ``"content":null`` are not content. A key
    inside a JSON string cannot match, because quotes inside strings are escaped.
    """
    for key in _CONTENT_KEYS:
        i = payload.find(key)
        while i >= 0:
            j = i + len(key)
            c = payload[j : j + 1]
            while c in _WS and c:
                j += 1
                c = payload[j : j + 1]
            if c == b'"' and payload[j + 1 : j + 2] != b'"':
                return True
            i = payload.find(key, j)
    return b'"tool_calls":[' in payload or b'"tool_calls": [' in payload


def _string_closed(data: bytes, start: int, end: int) -> bool:
    """True when ``data[start:end]`` (a JSON string's inside) holds no unescaped quote."""
    q = data.find(b'"', start, end)
    while q >= 0:
        b = q - 1
        while b >= start and data[b] == 92:  # backslashes before the quote: odd → escaped
            b -= 1
        if (q - 1 - b) % 2 == 0:
            return False
        q = data.find(b'"', q + 1, end)
    return True


def _quotes_balance(region: bytes, expected: int) -> bool:
    """True when ``region``'s unescaped quotes number ``expected`` (those of its events' learned
    shape: every content string is then closed where the shape says). One count in the usual
    case; with escaped quotes, a second; with escaped backslashes, False (checked per event)."""
    quotes = region.count(b'"')
    if quotes == expected:
        return True
    return quotes - region.count(b'\\"') == expected and b"\\\\" not in region


def _value_follows(payload: bytes, key: bytes, first: bytes) -> bool:
    """True when ``key`` occurs and its value starts with the byte ``first`` (e.g. ``{``)."""
    i = payload.find(key)
    while i >= 0:
        j = i + len(key)
        c = payload[j : j + 1]
        while c in _WS and c:
            j += 1
            c = payload[j : j + 1]
        if c == first:
            return True
        i = payload.find(key, j)
    return False


def _data_of(event: bytes) -> bytes | None:
    """The data of one SSE event (lines joined by LF), or None for comments/other fields only."""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if not line or line[:1] == b":":
            continue  # blank line or comment
        field, sep, value = line.partition(b":")
        if field != b"data":
            continue  # event:, id:, retry: — not needed here
        if sep and value[:1] == b" ":
            value = value[1:]
        data.append(value)
    if not data:
        return None
    return b"\n".join(data)


class StreamAccumulator:
    """Reads one SSE response body incrementally and times its content events.

    ``feed(data, t)`` takes body bytes (already de-chunked) and the perf-counter instant they
    were read. Events split across reads and several events per read are both handled; ``\\r\\n``
    line endings are normalised. Nothing is JSON-decoded here except, with ``collect_text``,
    content events (multi-turn conversations need the answer's text).
    """

    __slots__ = (
        "_buf",
        "_error_raw",
        "_finish_raw",
        "_malformed_raw",
        "_plen",
        "_prefix",
        "_quotes",
        "_shortest",
        "_slen",
        "_suffix",
        "_suffix_nn",
        "_texts",
        "_usage_raw",
        "chunks",
        "collect_text",
        "done",
        "events",
        "first_t",
        "gaps_ms",
        "last_byte_t",
        "last_t",
        "malformed",
        "plain",
    )

    def __init__(self, *, collect_text: bool = False) -> None:
        self._buf = b""
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.last_byte_t: float | None = None
        self.chunks = 0
        self.events = 0
        self.gaps_ms = array("d")
        self.done = False
        self.collect_text = collect_text
        self._texts: list[str] = []
        self._usage_raw: bytes | None = None
        self._finish_raw: bytes | None = None
        self._error_raw: bytes | None = None
        self.malformed = 0  # data events that are not JSON objects (never counted as content)
        self._malformed_raw = b""
        self.plain = False  # a non-streamed JSON completion (see ``non_streamed``)
        # the learned shape of this stream's plain content events (see feed)
        self._prefix = b""
        self._suffix = b""
        self._suffix_nn = b""
        self._shortest = 0
        self._quotes = 0  # quotes in data: + prefix + suffix (an exact match holds no others)
        self._plen = 0  # len(prefix)
        self._slen = 0  # len(suffix) + 2: from the content string's closing quote to the end

    # --- the hot path -------------------------------------------------------------------

    def feed(self, data: bytes, t: float) -> None:
        self.last_byte_t = t
        if (
            not self._buf
            and self._suffix_nn
            and data.endswith(self._suffix_nn)
            and data.startswith(self._prefix)
            and len(data) > self._shortest
        ):
            # the commonest read: exactly one plain content event, when the content string
            # between the learned prefix and suffix holds no raw newline (a JSON string has
            # none, so no second event hides in it) and no unescaped quote
            p = self._plen
            q = len(data) - self._slen
            if data.find(b"\n", p, q) < 0 and (
                data.find(b'"', p, q) < 0 or _string_closed(data, p, q)
            ):
                self.events += 1
                last = self.last_t
                if last is None:
                    self.first_t = t
                else:
                    self.gaps_ms.append((t - last) * 1000.0)
                self.last_t = t
                self.chunks += 1
                return
        buf = self._buf + data if self._buf else data
        tail = b""
        if b"\r" in buf:
            if buf[-1:] == b"\r":  # maybe the first half of a CRLF split across reads
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf + tail
            return
        region = buf[:end]
        self._buf = buf[end + 2 :] + tail
        prefix, suffix = self._prefix, self._suffix
        shortest = len(prefix) + len(suffix)
        if shortest and region.startswith(prefix) and region.endswith(suffix):
            # several events in one read: all plain content events of the learned shape?
            # (prefix and suffix hold unescaped quotes, so they cannot occur inside content)
            n = region.count(b"\n\n") + 1
            if (
                n > 1
                and region.count(b"\n") == 2 * (n - 1)
                and region.count(b"\n\n" + prefix) == n - 1
                and region.count(suffix + b"\n\n") == n - 1
                and prefix + suffix not in region
                and _quotes_balance(region, n * self._quotes)
            ):
                self.events += n
                self.chunks += n
                last = self.last_t
                if last is None:
                    self.first_t = t
                else:
                    self.gaps_ms.append((t - last) * 1000.0)
                self.gaps_ms.frombytes(bytes(8 * (n - 1)))  # zero gaps: the same read
                self.last_t = t
                return
        for event in region.split(b"\n\n") if b"\n\n" in region else (region,):
            # Fast path: a plain content event of this stream's learned shape (same bytes
            # before and after the content string) is counted without any search.
            if (
                shortest
                and len(event) > shortest
                and event.startswith(prefix)
                and event.endswith(suffix)
                and (
                    event.find(b'"', len(prefix)) == len(event) - len(suffix)
                    or _string_closed(event, len(prefix), len(event) - len(suffix))
                )
            ):
                self.events += 1
                last = self.last_t
                if last is None:
                    self.first_t = t
                else:
                    self.gaps_ms.append((t - last) * 1000.0)
                self.last_t = t
                self.chunks += 1
                continue
            if event[:5] == b"data:" and b"\n" not in event:
                before = self.chunks
                self._event(event[5:], t)
                if self.chunks != before and not self.collect_text:
                    self._learn(event)
                    prefix, suffix = self._prefix, self._suffix
                    shortest = len(prefix) + len(suffix)
            else:
                found = _data_of(event)
                if found is not None:
                    self._event(found, t)

    def _learn(self, event: bytes) -> None:
        """Remember the bytes around the content string of a one-line content event."""
        for key in (b'"content":"', b'"text":"'):
            i = event.find(key)
            if i < 0:
                continue
            j = i + len(key)
            n = len(event)
            while j < n:
                q = event.find(b'"', j)
                if q < 0:
                    return
                # count the backslashes before the quote: an even number → it closes the string
                b = q - 1
                while b >= j and event[b] == 92:
                    b -= 1
                if (q - 1 - b) % 2 == 0:
                    if q > i + len(key):
                        prefix, suffix = event[: i + len(key)], event[q:]
                        if key not in suffix and b'"usage":{' not in suffix:
                            self._prefix, self._suffix = prefix, suffix
                            self._suffix_nn = suffix + b"\n\n"
                            self._shortest = len(prefix) + len(suffix) + 2
                            self._quotes = prefix.count(b'"') + suffix.count(b'"')
                            self._plen = len(prefix)
                            self._slen = len(suffix) + 2
                    return
                j = q + 1
            return

    def _event(self, payload: bytes, t: float) -> None:
        self.events += 1
        if has_content(payload):
            if not _looks_like_object(payload) and not _is_object(payload):
                self._reject(payload)
                return
            last = self.last_t
            if last is None:
                self.first_t = t
            else:
                self.gaps_ms.append((t - last) * 1000.0)
            self.last_t = t
            self.chunks += 1
            if self.collect_text:
                self._texts.append(_content_text(payload))

        elif payload.strip() == b"[DONE]":
            self.done = True
            return
        elif not _is_object(payload):  # rare: role, finish, usage and error events
            self._reject(payload)
            return
        if b'"usage"' in payload and _value_follows(payload, b'"usage":', b"{"):
            self._usage_raw = payload
        if b'"finish_reason"' in payload and _value_follows(payload, b'"finish_reason":', b'"'):
            self._finish_raw = payload
        if b'"error"' in payload and _value_follows(payload, b'"error":', b"{"):
            self._error_raw = payload

    def _reject(self, payload: bytes) -> None:
        self.malformed += 1
        if not self._malformed_raw:
            self._malformed_raw = payload[:80]

    # --- after the stream ---------------------------------------------------------------

    def non_streamed(self, raw: bytes) -> None:
        """Take a whole non-streamed JSON completion: its usage and finish reason are read, it
        has no content events (no TTFT, no ITL) and it is never a successful streamed response.
        """
        self.plain = True
        if _is_object(raw):
            self._usage_raw = raw
            self._finish_raw = raw
            self._error_raw = raw

    def problem(self) -> str | None:
        """Why this finished response is not a successful streamed completion, or None.

        Rules (docs/metrics.md, "Request status"): an error event, a non-streamed body, any
        malformed event, a stream with neither content nor usage, and a stream cut without
        ``[DONE]`` whose finish reason and usage do not show it completed are failures. A stream
        that completed (finish reason or usage sent) but omitted ``[DONE]`` is not: ``note()``
        says so.
        """
        err = self.error()
        if err is not None:
            return err
        if self.plain:
            return (
                'a non-streamed JSON completion: the server ignored "stream": true, so TTFT '
                "and ITL cannot be measured"
            )
        if self.malformed:
            first = self._malformed_raw.decode("utf-8", "replace")
            return (
                f"malformed SSE: {self.malformed} data event(s) not a JSON object "
                f"(first: {' '.join(first.split())[:80]!r})"
            )
        completed = self._usage_raw is not None or self.finish_reason() is not None
        if not self.done and not completed:
            if self.chunks:
                return (
                    f"truncated stream: it ended after {self.chunks} content event(s) without "
                    "data: [DONE], a finish_reason or usage"
                )
            return "empty stream: no content, no usage and no data: [DONE]"
        if not self.chunks and self._usage_raw is None:
            return "the stream carried no content and no usage (nothing was generated or measured)"
        return None

    def note(self) -> str | None:
        """A remark on a successful stream: it completed but did not end with ``[DONE]``."""
        if not self.done and not self.plain:
            return "note: the stream ended without data: [DONE] (finish_reason/usage were sent)"
        return None

    def finish(self) -> None:
        """Process a last event that ended without a blank line (at end of body)."""
        if self._buf.strip():
            rest, self._buf = self._buf, b""
            payload = _data_of(rest.replace(b"\r\n", b"\n"))
            if payload is not None and self.last_byte_t is not None:
                self._event(payload, self.last_byte_t)

    def usage(self) -> tuple[int | None, int | None, int | None]:
        """(prompt_tokens, completion_tokens, cached_tokens) from the usage chunk, when sent."""
        obj = _loads(self._usage_raw)
        usage = obj.get("usage") if isinstance(obj, dict) else None
        if not isinstance(usage, dict):
            return None, None, None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), _int(cached)

    def finish_reason(self) -> str | None:
        obj = _loads(self._finish_raw)
        if not isinstance(obj, dict):
            return None
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                return str(choice["finish_reason"])
        return None

    def error(self) -> str | None:
        """The message of an error event in the stream (servers report late failures so)."""
        obj = _loads(self._error_raw)
        if not isinstance(obj, dict) or "error" not in obj:
            return None
        err = obj["error"]
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)

    def text(self) -> str:
        return "".join(self._texts)


def _looks_like_object(payload: bytes) -> bool:
    """The cheap structural check of a content event: a JSON object whose braces, brackets and
    unescaped quotes balance. False does not mean invalid (a brace inside a string breaks the
    count); the caller then decodes. An object cut short fails it (its last closing brace is
    missing) unless its strings hold braces that happen to compensate.
    """
    p = payload.strip()
    if p[:1] != b"{" or p[-1:] != b"}":
        return False
    if p.count(b"{") != p.count(b"}") or p.count(b"[") != p.count(b"]"):
        return False
    quotes = p.count(b'"') - p.count(b'\\"') + p.count(b'\\\\"')
    return quotes % 2 == 0


def _is_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def _loads(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _content_text(payload: bytes) -> str:
    obj = _loads(payload)
    if not isinstance(obj, dict):
        return ""
    parts: list[str] = []
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
        elif isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "".join(parts)
