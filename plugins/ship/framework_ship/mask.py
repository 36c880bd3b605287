"""Masking secrets out of everything the ship step stores or prints.

Owns :class:`Masker`: the one filter between text that may carry a credential (what a
server sends back: a problem ``detail`` quoting the ``Authorization`` header, a
``Retry-After`` value, a transport error) and the places the ship step writes to (the
ship log, the deadline file, ``events.jsonl``, stdout and stderr). It removes

* the literal values it was given (the bearer token, the signing secret), also in
  their JSON-escaped and percent-encoded spellings;
* anything that looks like a credential whoever it belongs to: ``Bearer <...>``,
  ``Basic <...>``, and the value of an ``Authorization``/``Proxy-Authorization``
  header, of ``X-Framework-Signature``, of ``api_key=``/``token=``/``password=`` and the
  like, quoted or not.

A server may answer anything, so the filter runs on the way out, not on what was sent.
It never raises: masking must not be the reason an attempt goes unlogged.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from urllib.parse import quote

REDACTED = "<redacted>"

# "Bearer abc.def" / "basic dXNlcjpw": RFC 7235 token68 after the scheme name.
_SCHEME = re.compile(r"(?i)\b(bearer|basic|digest)(\s+)([A-Za-z0-9\-._~+/=]{3,})")
_LETTERS = re.compile(r"[A-Za-z]+")
# A header or parameter that holds a credential, up to the end of its value: a header
# value runs to the end of the line or quote; a parameter to a separator.
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-framework-signature|cookie|set-cookie)"
    r"(\"?\s*[:=]\s*\"?)([^\"\r\n]*)"
)
_PARAM = re.compile(
    r"(?i)\b(api[-_]?key|access[-_]?token|refresh[-_]?token|token|secret|password|passwd"
    r"|client[-_]?secret)(\"?\s*[:=]\s*\"?)([^\s\"',;&}\]]+)"
)


class Masker:
    """``masker(text)`` -> text without the given secrets and without anything that
    looks like a credential."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        spellings: set[str] = set()
        for secret in secrets:
            if not secret:
                continue
            spellings.add(secret)
            spellings.add(json.dumps(secret, ensure_ascii=False)[1:-1])
            spellings.add(json.dumps(secret)[1:-1])
            spellings.add(quote(secret, safe=""))
        # Longest first, so a secret that contains another is removed whole.
        self._literals = sorted((s for s in spellings if s), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        try:
            return self._mask(text)
        except Exception:  # never let masking lose a log line
            return REDACTED

    def _mask(self, text: str) -> str:
        for literal in self._literals:
            if literal in text:
                text = text.replace(literal, REDACTED)
        if not _might_hold_credential(text):
            return text
        text = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
        text = _SCHEME.sub(_scheme_value, text)
        return _PARAM.sub(_param_value, text)

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self(text)


def _param_value(match: re.Match[str]) -> str:
    if match.group(3) == REDACTED:
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def _scheme_value(match: re.Match[str]) -> str:
    scheme, value = match.group(1), match.group(3)
    if scheme.lower() == "basic" and _LETTERS.fullmatch(value) and not _is_basic(value):
        return match.group(0)  # an English word after "basic" ("basic validation")
    return f"{scheme}{match.group(2)}{REDACTED}"


def _is_basic(value: str) -> bool:
    """Whether ``value`` is base64 of ``user:password`` (what a Basic credential is)."""
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except ValueError:
        return False
    return b":" in raw


_HINTS = (
    "bearer",
    "basic",
    "digest",
    "token",
    "authorization",
    "signature",
    "cookie",
    "key",
    "secret",
    "passw",
)


def _might_hold_credential(text: str) -> bool:
    """A cheap pre-check: most texts (``"connect"``, a validation message) hold none of
    the words the patterns start with, and skip the regexes."""
    lowered = text.lower()
    return any(hint in lowered for hint in _HINTS)


__all__ = ["REDACTED", "Masker"]
