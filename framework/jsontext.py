"""JSON text both ways: a JSON object read from text that may be anything, and JSON
written so that every line of it is safe to look at.

Reading (:func:`json_object`): what the core and its plugins read back of what they
wrote (a lock file, a log line that may be torn, a summary kept in a database) is a JSON
object or worth nothing: text that is not JSON, or JSON that is not an object, is read
as None, so a damaged or foreign value is skipped, never raised on.

Writing (:func:`json_text`, :func:`json_line`, :func:`escape_json`): every JSON line the
framework writes (the event and URL logs, the ship log, the JSON and JSON Lines exports
and feeds) carries text a site chose. ``json.dumps`` escapes the C0 controls itself;
with ``ensure_ascii=False`` (kept, so that Cyrillic or Chinese stays readable and
compact) it writes the rest raw, among them characters that act rather than show:
DEL and the C1 controls (0x9b is a one-byte CSI to some terminals), the bidirectional
marks that reorder what follows them ("Trojan Source"), the line and paragraph
separators U+2028/U+2029 (line breaks to editors and to JavaScript before ES2019) and
lone surrogates (which UTF-8 cannot even encode). These are written as ``\\uXXXX``
escapes: the same JSON, so ``json.loads`` gives back the very string. The writers are on
the crawl's per-page path, so a line without any of them costs one regex search.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["escape_json", "json_line", "json_object", "json_text"]

# DEL and the C1 controls; the Arabic letter mark, LRM, RLM; the line and paragraph
# separators and the bidirectional embeddings and overrides (U+2028..U+202E); the
# bidirectional isolates; lone surrogates. Only a JSON string can hold any of them (the
# rest of a JSON document is ASCII), so each may be written as its \u escape.
_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_COMPACT_STR = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def json_object(text: str | bytes) -> dict[str, Any] | None:
    """``text`` as a JSON object, or None when it is not JSON or not an object."""
    try:
        value = json.loads(text)
    except ValueError:  # UnicodeDecodeError of bytes too
        return None
    return value if isinstance(value, dict) else None


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_json(text: str) -> str:
    """JSON text (as ``json.dumps`` wrote it, with or without ``ensure_ascii``) with
    every character that acts rather than shows written as its ``\\uXXXX`` escape: the
    same JSON value, safe in a terminal, an editor or a JavaScript parser."""
    if _UNSAFE.search(text) is None:
        return text  # the common case: one search at C speed
    return _UNSAFE.sub(_escaped, text)


def json_text(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as compact JSON (no spaces, non-ASCII letters as they are), with what
    acts rather than shows escaped (:func:`escape_json`). ``default`` as ``json.dumps``
    takes it (``str``: anything else written as its text)."""
    if default is None:
        encoder = _COMPACT
    elif default is str:
        encoder = _COMPACT_STR
    else:
        encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=default)
    return escape_json(encoder.encode(value))


def json_line(value: Any, *, default: Callable[[Any], Any] | None = None) -> bytes:
    """``value`` as one JSON Lines line: :func:`json_text`, a newline, UTF-8."""
    return (json_text(value, default=default) + "\n").encode("utf-8")
