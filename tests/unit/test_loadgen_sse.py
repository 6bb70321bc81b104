"""SSE reading: events split anywhere, many per read, comments, CRLF, [DONE], usage, errors;
malformed events, streams cut without [DONE], bodies that are not SSE."""

from __future__ import annotations

import json

import pytest

from collectors.loadgen.client import error_text, redact
from collectors.loadgen.http1 import ChunkedDecoder, ProtocolViolation, parse_head, request_head
from collectors.loadgen.sse import StreamAccumulator, has_content


def chat(content: str | None, *, finish: str | None = None, role: bool = False) -> bytes:
    delta: dict[str, object] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    obj = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


USAGE = (
    b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,'
    b'"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4}}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def stream(n: int = 5) -> bytes:
    parts = [chat("", role=True)]
    parts += [chat(f" w{i}") for i in range(n)]
    parts += [chat(None, finish="length"), USAGE, DONE]
    return b"".join(parts)


def feed_all(acc: StreamAccumulator, pieces: list[bytes], t0: float = 1.0) -> None:
    for i, piece in enumerate(pieces):
        acc.feed(piece, t0 + i)
    acc.finish()


def test_whole_stream_in_one_read() -> None:
    acc = StreamAccumulator()
    feed_all(acc, [stream()])
    assert acc.chunks == 5
    assert acc.first_t == acc.last_t == 1.0
    assert list(acc.gaps_ms) == [0.0] * 4
    assert acc.usage() == (12, 5, 4)
    assert acc.finish_reason() == "length"
    assert acc.done and acc.error() is None


def test_one_event_per_read_times_every_gap() -> None:
    events = [chat("", role=True)] + [chat(f" w{i}") for i in range(4)] + [USAGE, DONE]
    acc = StreamAccumulator()
    for i, ev in enumerate(events):
        acc.feed(ev, 10.0 + 0.01 * i)
    assert acc.chunks == 4
    assert acc.first_t == pytest.approx(10.01)  # the role chunk with empty content is not content
    assert list(acc.gaps_ms) == pytest.approx([10.0, 10.0, 10.0])


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 500])
def test_split_at_any_size_gives_the_same_result(size: int) -> None:
    data = stream(8)
    whole = StreamAccumulator()
    feed_all(whole, [data])
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    split = StreamAccumulator()
    for piece in pieces:
        split.feed(piece, 1.0)
    split.finish()
    assert (split.chunks, split.usage(), split.finish_reason(), split.done) == (
        whole.chunks,
        whole.usage(),
        whole.finish_reason(),
        whole.done,
    )


def test_every_split_point_of_two_events() -> None:
    data = chat(" a") + chat(" b")
    for cut in range(len(data) + 1):
        acc = StreamAccumulator()
        acc.feed(data[:cut], 1.0)
        acc.feed(data[cut:], 2.0)
        assert acc.chunks == 2, cut


def test_crlf_comments_event_fields_and_multiline_data() -> None:
    data = (
        b": keep-alive comment\r\n\r\n"
        b'event: message\r\nid: 1\r\ndata: {"choices":[{"delta":{"content":"x"}}]}\r\n\r\n'
        b'data: {"choices":[{"delta":\r\ndata: {"content":"y"}}]}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    for cut in range(len(data) + 1):
        acc = StreamAccumulator()
        acc.feed(data[:cut], 1.0)
        acc.feed(data[cut:], 2.0)
        assert acc.chunks == 2 and acc.done, cut


def test_completions_text_and_spaced_json() -> None:
    data = (
        b'data: {"choices": [{"text": "Hello", "finish_reason": null}]}\n\n'
        b'data: {"choices": [{"text": "", "finish_reason": "stop"}], "usage": {"prompt_tokens": 3,'
        b' "completion_tokens": 1}}\n\n'
    )
    acc = StreamAccumulator()
    feed_all(acc, [data])
    assert acc.chunks == 1
    assert acc.usage() == (3, 1, None)
    assert acc.finish_reason() == "stop"


def test_error_event_and_no_usage() -> None:
    acc = StreamAccumulator()
    feed_all(acc, [chat(" a"), b'data: {"error":{"message":"boom","code":500}}\n\n', DONE])
    assert acc.error() == "boom"
    assert acc.usage() == (None, None, None)


def test_has_content_rules() -> None:
    assert has_content(b'{"delta":{"content":"a"}}')
    assert has_content(b'{"delta":{"content": "a"}}')
    assert has_content(b'{"delta":{"reasoning_content":"think"}}')
    assert has_content(b'{"delta":{"tool_calls":[{"id":"x"}]}}')
    assert not has_content(b'{"delta":{"content":""}}')
    assert not has_content(b'{"delta":{"content":null}}')
    assert not has_content(b'{"delta":{"role":"assistant"}}')
    # a key inside a string value is escaped and does not count
    assert not has_content(b'{"delta":{"role":"say \\"content\\":\\"x\\""}}')


def test_escaped_quotes_in_content_keep_the_fast_path_exact() -> None:
    events = [chat(' he said "hi"'), chat("\\"), chat(' "'), chat(""), chat(" end")]
    acc = StreamAccumulator()
    for i, ev in enumerate(events):
        acc.feed(ev, float(i))
    assert acc.chunks == 4
    assert list(acc.gaps_ms) == [1000.0, 1000.0, 2000.0]
    acc2 = StreamAccumulator()
    acc2.feed(b"".join(events * 3), 0.0)
    assert acc2.chunks == 12


def test_collect_text() -> None:
    acc = StreamAccumulator(collect_text=True)
    feed_all(acc, [chat("Hel"), chat("lo"), DONE])
    assert acc.text() == "Hello"


# --- malformed and incomplete streams (issue 10, items 2 and 10) -----------------------------

BAD_EVENTS = [
    b'data: {"choices":[{"index":0,"delta":{"content":" tok"}}\n\n',  # cut short
    b'data: {"choices":[{"delta":{"content":"x"}}]}}\n\n',  # one brace too many
    b'data: not json, "content": "x"\n\n',
    b'data: {"choices":[{"delta":{"content":"a"b"}}]}\n\n',  # an unescaped quote
    b"data: <html>\n\n",
]


@pytest.mark.parametrize("bad", BAD_EVENTS)
@pytest.mark.parametrize("reads", ["one event per read", "one read", "split 7"])
def test_a_malformed_event_is_never_a_token_and_fails_the_stream(bad: bytes, reads: str) -> None:
    events = [chat("", role=True), chat(" a"), chat(" b"), bad, chat(" c")]
    events += [chat(None, finish="length"), USAGE, DONE]
    if reads == "one read":
        pieces = [b"".join(events)]
    elif reads == "split 7":
        data = b"".join(events)
        pieces = [data[i : i + 7] for i in range(0, len(data), 7)]
    else:
        pieces = events
    acc = StreamAccumulator()
    feed_all(acc, pieces)
    assert acc.chunks == 3  # a, b, c: the malformed event is not a token, nor an ITL sample
    assert len(acc.gaps_ms) == 2
    assert acc.malformed == 1
    problem = acc.problem()
    assert problem is not None and problem.startswith("malformed SSE: 1 data event")


def test_well_formed_streams_have_no_problem_even_with_braces_in_content() -> None:
    events = [chat("", role=True), chat(" {"), chat("]"), chat(' "x"'), chat(" \\")]
    events += [chat(None, finish="stop"), USAGE, DONE]
    for pieces in (events, [b"".join(events)]):
        acc = StreamAccumulator()
        feed_all(acc, pieces)
        assert (acc.chunks, acc.malformed, acc.problem(), acc.note()) == (4, 0, None, None)


def test_a_stream_cut_without_done_finish_or_usage_is_truncated() -> None:
    acc = StreamAccumulator()
    feed_all(acc, [chat("", role=True), chat(" a"), chat(" b")])
    assert not acc.done and acc.chunks == 2
    assert acc.problem() == (
        "truncated stream: it ended after 2 content event(s) without data: [DONE], "
        "a finish_reason or usage"
    )


def test_a_completed_stream_without_done_is_ok_with_a_note() -> None:
    acc = StreamAccumulator()
    feed_all(acc, [chat(" a"), chat(None, finish="stop"), USAGE])
    assert acc.problem() is None
    assert acc.note() is not None and "without data: [DONE]" in acc.note()  # type: ignore[operator]


def test_no_content_and_no_usage_is_not_a_success() -> None:
    acc = StreamAccumulator()
    feed_all(acc, [chat("", role=True), DONE])
    assert acc.problem() is not None and "no content and no usage" in acc.problem()  # type: ignore[operator]
    empty = StreamAccumulator()
    feed_all(empty, [])
    assert empty.problem() is not None and empty.problem().startswith("empty stream")  # type: ignore[union-attr]
    # the server says it generated nothing (usage 0): a success without TTFT
    zero = StreamAccumulator()
    usage0 = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}\n\n'
    feed_all(zero, [chat(None, finish="stop"), usage0, DONE])
    assert zero.problem() is None and zero.first_t is None


@pytest.mark.parametrize(
    "body",
    [
        b"<!doctype html><html><body><h1>Welcome</h1></body></html>",
        b'{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1}}',
        b"",
    ],
)
def test_a_body_that_is_not_sse_is_never_a_success(body: bytes) -> None:
    acc = StreamAccumulator()
    feed_all(acc, [body])
    assert acc.chunks == 0 and acc.first_t is None
    assert acc.problem() is not None


def test_a_non_streamed_completion_keeps_its_usage_and_is_a_problem() -> None:
    acc = StreamAccumulator()
    acc.non_streamed(
        b'{"id":"x","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}'
    )
    assert acc.usage() == (7, 2, None) and acc.finish_reason() == "length"
    assert acc.first_t is None and acc.chunks == 0
    assert acc.problem() is not None and "ignored" in acc.problem()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HTTP 401: bad key sk-FAKE-1 given", "HTTP 401: bad key *** given"),
        ("you sent authorization: Bearer abc.def-1; host: x", "authorization: Bearer ***; host"),
        ('{"api_key": "zzz", "max_tokens": 4}', '{"api_key": "***", "max_tokens": 4}'),
        ("GET http://u:pw@h/v1?key=abc&x=1", "GET http://***@h/v1?key=***&x=1"),
        ("authorization: Basic dGVzdGVyOnB3", "authorization: Basic ***"),
        ("missing key: model; 5000 tokens", "missing key: model; 5000 tokens"),
    ],
)
def test_redact_masks_credentials_and_keeps_the_rest(text: str, expected: str) -> None:
    assert expected in redact(text, ["sk-FAKE-1"])


def test_error_text_redacts_before_it_cuts() -> None:
    body = json.dumps({"error": {"message": "x" * 290 + " key sk-FAKE-LONG-123456789"}})
    assert "sk-FAKE" not in error_text(401, body.encode(), ["sk-FAKE-LONG-123456789"])


# --- HTTP/1.1 pieces -------------------------------------------------------------------------


def chunked(*parts: bytes, ext: bool = False) -> bytes:
    out = b""
    for p in parts:
        out += b"%x%s\r\n%s\r\n" % (len(p), b";x=1" if ext else b"", p)
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize("ext", [False, True])
def test_chunked_decoder_every_split(ext: bool) -> None:
    parts = [b"hello ", b"wor", b"ld" * 40]
    data = chunked(*parts, ext=ext)
    for cut in range(len(data) + 1):
        dec = ChunkedDecoder()
        out = dec.feed(data[:cut]) + dec.feed(data[cut:])
        assert out == b"".join(parts) and dec.done, cut


def test_chunked_decoder_trailers_and_extra() -> None:
    dec = ChunkedDecoder()
    out = dec.feed(b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT")
    assert out == b"abc" and dec.done and dec.extra == b"NEXT"


def test_chunked_decoder_rejects_garbage() -> None:
    with pytest.raises(ProtocolViolation):
        ChunkedDecoder().feed(b"zz\r\nabc\r\n")
    with pytest.raises(ProtocolViolation):
        ChunkedDecoder().feed(b"3\r\nabcXY")


def test_parse_head() -> None:
    head = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b")
    assert head.status == 200 and head.chunked and head.keep_alive
    head = parse_head(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\nConnection: close"
    )
    assert head.content_length == 5 and not head.keep_alive
    head = parse_head(b"HTTP/1.0 200 OK")
    assert head.content_length is None and not head.keep_alive
    with pytest.raises(ProtocolViolation):
        parse_head(b"garbage")


def test_request_head() -> None:
    raw = request_head("POST", "/v1/x", [(b"Host", b"h")], 3)
    assert raw == b"POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n"
