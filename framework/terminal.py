"""Text a site, a server or a copied workspace chose, made safe to print on a terminal.

Owns one function, :func:`printable`: control characters become visible escapes, so
a dedupe key, a field value or a server's error text cannot move the cursor, rewrite
a line, set the window title or hide what follows (an ``ESC [`` sequence), nor reorder
what is shown (the Unicode bidirectional overrides, "Trojan Source"). It knows nothing
of masking secrets (each command masks first, then escapes) and never writes itself.
"""

from __future__ import annotations

import functools

# C0 controls, DEL and the C1 controls (0x9b is a one-byte CSI on some terminals), and
# the invisible marks that reorder or isolate the text that follows them.
_CONTROLS = (
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


@functools.cache
def _table(keep: str) -> dict[int, str]:
    kept = {ord(ch) for ch in keep}
    return {code: _escape(code) for code in _CONTROLS if code not in kept}


def printable(text: str, keep: str = "\t\n") -> str:
    """``text`` with every control character written as ``\\x..`` (``\\u....`` for
    the bidirectional marks), except those in ``keep`` (tab and newline by default;
    ``keep=""`` for a value shown inside one line, where a newline could forge the next
    line). Everything else, backslashes included, passes unchanged."""
    if text.isprintable():
        return text  # the common case, at C speed: no control character at all
    return text.translate(_table(keep))


__all__ = ["printable"]
