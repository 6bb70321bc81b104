"""Credentials out of text: one function that every message, log record and stored error passes
through before it leaves the process (the load generator's errors, the watcher's, config errors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

_AUTH_RE = re.compile(r"\b(Bearer|Basic|Token)(\s+|%20)[^\s\"',;&]+", re.IGNORECASE)
_PARAM_RE = re.compile(
    r"\b((?:x-)?(?:api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|password"
    r"|passwd|secret)[\"']?\s*[=:]\s*[\"']?)([^\s\"'&,;}]+)",
    re.IGNORECASE,
)
# query-string credentials with generic names (?key=…, &token=…, &sig=…)
_QUERY_RE = re.compile(r"([?&](?:key|token|sig|signature|code)=)([^\s\"'&#]+)", re.IGNORECASE)
_USERINFO_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
# environment-style assignments of a secret (HF_TOKEN=…, VLLM_API_KEY=…) and a bare token=…
_ENV_FORM_RE = re.compile(
    r"\b([A-Z][A-Z0-9_]*_(?:KEY|TOKEN|SECRET|PASSWORD)|(?i:token))(\s*=\s*[\"']?)"
    r"([^\s\"'&,;}]+)"
)
MASK = "***"
#: Command-line flags whose value is a secret, whatever the program (an engine's template may
#: mark more): ``--api-key VALUE`` and ``--api-key=VALUE`` are shown and stored as ``***``.
SECRET_FLAGS: Final = ("--api-key", "--hf-token", "--token")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: the given ``secrets`` (the API key, the URL's password),
    ``Bearer``/``Basic`` values, ``api_key=``/``token:``-style values and URL userinfo."""
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, MASK)
    text = _AUTH_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _PARAM_RE.sub(lambda m: m.group(1) + MASK, text)
    text = _QUERY_RE.sub(lambda m: m.group(1) + MASK, text)
    text = _ENV_FORM_RE.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _flag_re(SECRET_FLAGS).sub(lambda m: m.group(1) + MASK, text)
    return _USERINFO_RE.sub(lambda m: m.group(1) + MASK + "@", text)


def _flag_re(flags: Iterable[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(f) for f in sorted(set(flags), key=len, reverse=True))
    return re.compile(rf"(?<![\w-])((?:{names})(?:=|\s+)[\"']?)([^\s\"']+)")


def argv_secrets(argv: Sequence[str], secret_flags: Iterable[str] = ()) -> list[str]:
    """The secret values in a command line: the argument after (or ``=``-joined to) a secret
    flag (:data:`SECRET_FLAGS` and ``secret_flags``), and the value of a ``NAME_KEY=…`` /
    ``NAME_TOKEN=…`` argument."""
    flags = {*SECRET_FLAGS, *secret_flags}
    out: list[str] = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if arg in flags and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif eq and (name in flags or _ENV_FORM_RE.fullmatch(arg)):
            out.append(value)
    return [v for v in out if v]


def redact_argv(argv: Sequence[str], secret_flags: Iterable[str] = ()) -> list[str]:
    """``argv`` with every value of :func:`argv_secrets` replaced by ``***`` (the flags kept)."""
    flags = {*SECRET_FLAGS, *secret_flags}
    out: list[str] = []
    masked_next = False
    for arg in argv:
        name, eq, value = arg.partition("=")
        if masked_next:
            out.append(MASK)
        elif eq and value and (name in flags or _ENV_FORM_RE.fullmatch(arg)):
            out.append(f"{name}={MASK}")
        else:
            out.append(arg)
        masked_next = arg in flags
    return out
