"""The ``url`` type: no whitespace inside, parses, an allowed scheme; relative URLs
resolved against the page when the field is ``absolute``."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from framework.extract.converters.context import ConversionError, ConvertContext, short

__all__ = ["URL_SCHEMES", "to_url"]

URL_SCHEMES = frozenset({"http", "https", "mailto", "tel"})

# an absolute http(s) URL or a root-relative path without spaces: the common case,
# read without the checks below
_PLAIN_URL = re.compile(
    r"(?:https?://[A-Za-z0-9.-]+(?::\d{1,5})?)?/[!#-~]*|https?://[A-Za-z0-9.-]+"
)
_WHITESPACE = re.compile(r"\s")


def to_url(value: Any, ctx: ConvertContext) -> str:
    if not isinstance(value, str):
        raise ConversionError(f"not a URL: {value!r}")
    text = value.strip()
    if _PLAIN_URL.fullmatch(text) is None:
        _check_url(text, value)
    if ctx.absolute and ctx.base_url:
        joined = urljoin(ctx.base_url, text)
        if not joined.startswith(("http://", "https://", "mailto:", "tel:")):
            _check_url(joined, value)
        return joined
    return text


def _check_url(text: str, value: str) -> None:
    """Raise unless ``text`` is a URL: no whitespace or control characters, it parses,
    and its scheme (when it has one) is one of :data:`URL_SCHEMES`."""
    if not text or _WHITESPACE.search(text) is not None or not text.isprintable():
        raise ConversionError(f"not a URL: {short(value)} (spaces or control characters)")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ConversionError(f"not a URL: {short(value)} ({exc})") from exc
    scheme = parts.scheme.lower()
    if scheme:
        if scheme not in URL_SCHEMES:
            raise ConversionError(
                f"not a URL: {short(value)} (scheme {scheme!r}; allowed: "
                + ", ".join(sorted(URL_SCHEMES))
                + ")"
            )
        if scheme in ("http", "https") and not parts.hostname:
            raise ConversionError(f"not a URL: {short(value)} (no host)")
        if scheme in ("mailto", "tel") and not parts.path:
            raise ConversionError(f"not a URL: {short(value)} (nothing after {scheme}:)")
    elif text.lower().startswith("www."):
        raise ConversionError(f"not a URL: {short(value)} (a host without a scheme)")
