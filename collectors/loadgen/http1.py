"""The small pure parts of HTTP/1.1 the lean transport needs: response heads and chunked bodies.

Pure and incremental, so they are unit-tested byte by byte (split anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass


class ProtocolViolation(Exception):
    """The peer broke HTTP/1.1 framing (translated to ``httpx.RemoteProtocolError``)."""


@dataclass(frozen=True)
class ResponseHead:
    status: int
    reason: str
    http_version: str
    headers: list[tuple[bytes, bytes]]
    chunked: bool
    content_length: int | None
    keep_alive: bool


MAX_HEAD = 64 * 1024


def parse_head(raw: bytes, *, method: str = "POST") -> ResponseHead:
    """Parse a response head (status line and headers, without the blank line)."""
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ProtocolViolation(f"bad status line {lines[0][:80]!r}")
    version = parts[0][5:].decode("ascii", "replace")
    try:
        status = int(parts[1])
    except ValueError as exc:
        raise ProtocolViolation(f"bad status code {parts[1][:20]!r}") from exc
    reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    headers: list[tuple[bytes, bytes]] = []
    chunked = False
    length: int | None = None
    connection = b""
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolViolation(f"bad header line {line[:80]!r}")
        name = name.strip()
        value = value.strip()
        headers.append((name, value))
        lname = name.lower()
        if lname == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif lname == b"content-length":
            try:
                length = int(value)
            except ValueError as exc:
                raise ProtocolViolation(f"bad content-length {value[:20]!r}") from exc
        elif lname == b"connection":
            connection = value.lower()
    if chunked:
        length = None
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        length = 0
        chunked = False
    keep_alive = (version == "1.1" and b"close" not in connection) or (
        version == "1.0" and b"keep-alive" in connection
    )
    if not chunked and length is None:
        keep_alive = False  # body ends when the connection closes
    return ResponseHead(status, reason, version, headers, chunked, length, keep_alive)


class ChunkedDecoder:
    """Incremental decoder of ``Transfer-Encoding: chunked`` bodies.

    ``feed(data)`` returns the body bytes decoded so far from ``data``; ``done`` is True once
    the last chunk and the trailers have arrived. Bytes after the end are kept in ``extra``.
    """

    __slots__ = ("_buf", "_left", "_state", "done", "extra")

    _SIZE, _DATA, _CRLF, _TRAILER = 0, 1, 2, 3

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0
        self._state = self._SIZE
        self.done = False
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        if not self._buf and self._state == self._SIZE:
            # the commonest read: exactly one complete chunk
            eol = data.find(b"\r\n", 0, 20)
            if eol > 0:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0
                if size and eol + size + 4 == len(data) and data.endswith(b"\r\n"):
                    return data[eol + 2 : -2]
        buf = self._buf + data if self._buf else data
        self._buf = b""
        n = len(buf)
        pos = 0
        out: list[bytes] = []
        while pos < n:
            state = self._state
            if state == self._SIZE:
                # fast loop over complete "SIZE\r\nDATA\r\n" chunks (no extensions)
                while True:
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        break
                    try:
                        size = int(buf[pos:eol], 16)
                    except ValueError:
                        break
                    end = eol + 2 + size
                    if size == 0 or end + 2 > n or buf[end : end + 2] != b"\r\n":
                        break
                    out.append(buf[eol + 2 : end])
                    pos = end + 2
                if pos >= n:
                    break
            if state == self._DATA:
                take = self._left if self._left <= n - pos else n - pos
                out.append(buf[pos : pos + take] if take != n or pos else buf)
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = self._CRLF
            elif state == self._SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 1024:
                        raise ProtocolViolation("chunk size line too long")
                    self._buf = buf[pos:]
                    break
                token = buf[pos:eol].split(b";", 1)[0].strip()
                try:
                    size = int(token, 16)
                except ValueError as exc:
                    raise ProtocolViolation(f"bad chunk size {token[:20]!r}") from exc
                pos = eol + 2
                if size == 0:
                    self._state = self._TRAILER
                else:
                    self._left = size
                    self._state = self._DATA
            elif state == self._CRLF:
                if n - pos < 2:
                    self._buf = buf[pos:]
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ProtocolViolation("missing CRLF after chunk data")
                pos += 2
                self._state = self._SIZE
            else:  # trailers: lines until an empty one
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    self._buf = buf[pos:]
                    break
                line_empty = eol == pos
                pos = eol + 2
                if line_empty:
                    self.done = True
                    self.extra = buf[pos:]
                    break
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)


def request_prefix(method: str, target: str, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers but Content-Length and Transfer-Encoding, each line ending
    with CRLF: what every request of one endpoint shares (``+ b"Content-Length: N\\r\\n\\r\\n"
    + body`` completes one)."""
    parts = [f"{method} {target} HTTP/1.1\r\n".encode("ascii")]
    for name, value in headers:
        if name.lower() not in (b"content-length", b"transfer-encoding"):
            parts.append(name + b": " + value + b"\r\n")
    return b"".join(parts)


def request_head(
    method: str, target: str, headers: list[tuple[bytes, bytes]], body_length: int
) -> bytes:
    """The request line and headers (with Content-Length), ending with the blank line."""
    parts = [f"{method} {target} HTTP/1.1\r\n".encode("ascii")]
    has_length = False
    for name, value in headers:
        lname = name.lower()
        if lname == b"content-length":
            has_length = True
        elif lname == b"transfer-encoding":
            continue
        parts.append(name + b": " + value + b"\r\n")
    if not has_length and (body_length or method in ("POST", "PUT", "PATCH")):
        parts.append(b"Content-Length: " + str(body_length).encode("ascii") + b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
