"""`framework review` through the real command (in-process: ``framework.cli.main``):
the keys, field names and values a site chose reach the terminal escaped, never obeyed,
and one entry cannot forge the next line; `status --json` alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.cli import main
from framework.workspace import ItemWrite, NewRow, Outcome, Workspace
from framework.workspace.holds import INVALID, REVIEW
from framework.workspace.records import HoldWrite

# clear screen, set the window title, a one-byte CSI, DEL, a right-to-left override, and
# a newline that would start a forged line
EVIL_KEY = "t:k\x1b]0;owned\x07\x1b[2J\u202e\nt:forged  (held since never)"
EVIL_FIELD = "price\x9b31m\u2066"
EVIL_VALUE = "12\x7f\x1b[8m hidden\u2028\u202eroot"
RAW = ("\x1b", "\x07", "\x9b", "\x7f", "\u202e", "\u2066", "\u2028")


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace holding one candidate for review against its accepted version, and
    one held as invalid, every key and value chosen by a hostile site."""
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path))
    path = tmp_path / "var" / "job"
    with Workspace.open(path) as w:
        s = w.store
        a, b = s.seed([NewRow("detail", "http://site/a"), NewRow("detail", "http://site/b")])
        s.commit(Outcome(a.id, ok=True, items=[ItemWrite(EVIL_KEY, "t", "k", {EVIL_FIELD: 1})]))
        change = [{"rule": "max_change", "field": EVIL_FIELD, "value": EVIL_VALUE}]
        bad = [{"rule": "min", "field": EVIL_FIELD, "value": EVIL_VALUE}]
        held = HoldWrite(EVIL_KEY, "t", "k", {EVIL_FIELD: EVIL_VALUE}, REVIEW, change)
        s.commit(Outcome(a.id, ok=True, holds=[held]))
        invalid = HoldWrite(EVIL_KEY + "2", "t", "k2", {EVIL_FIELD: EVIL_VALUE}, INVALID, bad)
        s.commit(Outcome(b.id, ok=True, holds=[invalid]))
    return path


def _review(ws: Path, *args: str) -> int:
    return main(["review", "job", *args, "--workspace", str(ws)])


def test_the_list_shows_the_sites_text_escaped(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _review(ws) == 0
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, repr(raw)
    lines = out.splitlines()
    # one line per held key and one per changed field: nothing forged
    assert len(lines) == 4, lines
    key = r"t:k\x1b]0;owned\x07\x1b[2J\u202e\x0at:forged  (held since never)"
    assert lines[0].startswith(key + "  (" + r"price\x9b31m\u2066 max_change;")
    # the value as JSON: what a terminal obeys as \u escapes (JSON escapes ESC itself)
    assert lines[1] == (
        r"  price\x9b31m\u2066: 1 -> "
        r'"12\u007f\u001b[8m hidden\u2028\u202eroot"'
    )
    assert lines[2].startswith("held as invalid (1:")
    assert lines[3].startswith(key + "2  (")
    assert r'min "12\u007f\u001b[8m hidden\u2028\u202eroot"' in lines[3]


def test_the_json_list_is_escaped_and_the_same_json(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _review(ws, "--json") == 0
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, repr(raw)
    listed = json.loads(out)
    assert [h["key"] for h in listed] == [EVIL_KEY, EVIL_KEY + "2"]
    assert listed[0]["candidate"] == {EVIL_FIELD: EVIL_VALUE}
    assert listed[0]["accepted"] == {EVIL_FIELD: 1}
    assert listed[0]["reasons"][0]["value"] == EVIL_VALUE


def test_settling_and_refusing_keys_echo_them_escaped(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _review(ws, "accept", EVIL_KEY) == 0
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, repr(raw)
    assert out.splitlines() == [
        r"t:k\x1b]0;owned\x07\x1b[2J\u202e\x0at:forged  (held since never): accepted"
    ]
    assert _review(ws, "reject", "t:x\x1b[2J\nforged") == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert err.splitlines() == [r"error: not held for review: t:x\x1b[2J\x0aforged"]
    with Workspace.open(ws, readonly=True) as w:  # the key itself was settled as given
        item = w.store.get_item(EVIL_KEY)
        assert item is not None
        assert dict(item.data) == {EVIL_FIELD: EVIL_VALUE}


def test_status_json_shows_the_held_keys_escaped_and_the_same_json(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "job", "--workspace", str(ws), "--json"]) == 0
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, repr(raw)
    held = json.loads(out)["held"]
    assert held["by_rule"] == {f"{EVIL_FIELD}: max_change": 1, f"{EVIL_FIELD}: min": 1}
    assert held["keys"]["by_status"] == {REVIEW: [EVIL_KEY], INVALID: [EVIL_KEY + "2"]}
