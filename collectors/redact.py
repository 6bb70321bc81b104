"""Credentials out of text: one function that every message, log record and stored error passes
through before it leaves the process (the load generator's errors, the watcher's, config errors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_AUTH_RE = re.compile(r"\b(Bearer|Basic|Token)(\s+|%20)[^\s\"',;&]+", re.IGNORECASE)
_PARAM_RE = re.compile(
    r"\b((?:x-)?(?:api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password"
    r"|passwd|secret)[\"']?\s*[=:]\s*[\"']?)([^\s\"'&,;}]+)",
    re.IGNORECASE,
)
# query-string credentials with generic names (?key=…, &token=…, &sig=…)
_QUERY_RE = re.compile(r"([?&](?:key|token|sig|signature|code)=)([^\s\"'&#]+)", re.IGNORECASE)
_USERINFO_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
MASK = "***"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: the given ``secrets`` (the API key, the URL's password),
    ``Bearer``/``Basic`` values, ``api_key=``/``token:``-style values and URL userinfo."""
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, MASK)
    text = _AUTH_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _PARAM_RE.sub(lambda m: m.group(1) + MASK, text)
    text = _QUERY_RE.sub(lambda m: m.group(1) + MASK, text)
    return _USERINFO_RE.sub(lambda m: m.group(1) + MASK + "@", text)
