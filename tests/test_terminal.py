"""framework.terminal.printable: what a terminal would act on is shown, not obeyed."""

from __future__ import annotations

import unicodedata

import pytest

from framework.terminal import printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain key:1", "plain key:1"),
        ("caf\u00e9 \u4e2d\u6587 \\x1b", "caf\u00e9 \u4e2d\u6587 \\x1b"),  # text and backslashes
        ("a\x1b[2J\x1b]0;owned\x07b", "a\\x1b[2J\\x1b]0;owned\\x07b"),  # clear screen, title
        ("over\rwrite", "over\\x0dwrite"),
        ("nul\x00 del\x7f", "nul\\x00 del\\x7f"),
        ("c1 \x9b31m", "c1 \\x9b31m"),  # the one-byte CSI
        ("\u202eexe.txt", "\\u202eexe.txt"),  # right-to-left override
        ("iso\u2066late\u2069", "iso\\u2066late\\u2069"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),  # kept by default
    ],
)
def test_controls_are_escaped(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_keep_empty_escapes_newlines_and_tabs_too() -> None:
    """A value shown inside one line must not start a forged next line."""
    assert printable("k1\nship     forged\t", keep="") == "k1\\x0aship     forged\\x09"


def test_every_control_is_escaped_and_nothing_else_changes() -> None:
    for code in range(0x3000):
        ch = chr(code)
        shown = printable(ch, keep="")
        if unicodedata.category(ch) == "Cc":
            assert shown == f"\\x{code:02x}", hex(code)
        elif ch in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
            assert shown == f"\\u{code:04x}", hex(code)
        else:
            assert shown == ch, hex(code)  # letters, marks, spaces: as they are
    text = "k\x1b[31m\u202e\n"
    assert printable(printable(text)) == printable(text)  # an escape is itself printable
