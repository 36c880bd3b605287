"""Every JSON line the framework writes escapes what acts rather than shows.

A site chooses URLs, dedupe keys and field values. The event and URL logs, a database
workspace's log lines, the ship log and the JSON / JSON Lines exports write them with
DEL, the C1 controls (0x9b: a terminal's CSI), the bidirectional marks (U+202E) and the
line and paragraph separators (U+2028/U+2029) as ``\\u`` escapes, letters of any script
as they are; ``json.loads`` gives back the very text (framework/jsontext.py).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from framework_ship.shiplog import Attempt, ShipLog, read_attempts

from framework.cli import main
from framework.jsontext import escape_json, json_line, json_text
from framework.workspace import ItemWrite, NewRow, Outcome, Workspace

# one of each kind, and the text each writer is handed (C0 too, which JSON escapes itself)
ACTING = {
    "bidi override": "\u202e",
    "bidi isolate": "\u2066",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "DEL": "\x7f",
    "C1 CSI": "\x9b",
    "C1 NEL": "\x85",
}
LETTERS = "Žilina Жанна 中文 é"  # stays as it is: readable and compact


def hostile(ch: str) -> str:
    return f"x{ch}[2J\x1b[31m {LETTERS} {ch}y"


def _acts(ch: str) -> bool:
    """What must never be written raw: controls, separators, bidirectional marks,
    lone surrogates."""
    return (
        unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs")
        or ch in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    )


def assert_escaped(data: bytes, ch: str) -> list[Any]:
    """The lines of ``data``: none holds ``ch`` (nor any other acting character) raw,
    the letters are kept raw; returns them parsed."""
    text = data.decode("utf-8")
    assert ch not in text
    assert [c for c in text if _acts(c) and c != "\n"] == []
    assert LETTERS in text
    return [json.loads(line) for line in text.splitlines()]


# the helper ---------------------------------------------------------------------------


def test_every_character_round_trips_and_none_that_acts_is_written_raw() -> None:
    for code in range(0x10000):  # the BMP, lone surrogates included
        ch = chr(code)
        written = json_text({"k": ch})
        assert json.loads(written) == {"k": ch}, hex(code)
        if _acts(ch):
            assert ch not in written, hex(code)
            if code >= 0x20:  # JSON's own escapes of C0 are short ones: \b, \n, ...
                assert f"\\u{code:04x}" in written.lower(), hex(code)
        elif ch not in '"\\':
            assert written == f'{{"k":"{ch}"}}', hex(code)  # as it is: no escape
    astral = "\U0001f600"
    assert json_text(astral) == f'"{astral}"'


def test_text_without_anything_to_escape_is_returned_as_it_is() -> None:
    text = json.dumps({"url": "http://site/a?b=c", "t": LETTERS}, ensure_ascii=False)
    assert escape_json(text) is text  # the common case: one search, no copy


def test_escape_json_keeps_a_document_the_same_json() -> None:
    value = {ch: [ch, {"n": 1, "s": hostile(ch)}] for ch in ACTING.values()}
    for raw in (
        json.dumps(value, ensure_ascii=False, indent=2),
        json.dumps(value),  # ensure_ascii leaves DEL raw
    ):
        escaped = escape_json(raw)
        assert json.loads(escaped) == value
        assert [c for c in escaped if _acts(c) and c not in "\n"] == []
    assert json_line({"a": "\x7f"}) == b'{"a":"\\u007f"}\n'


# the writers --------------------------------------------------------------------------


@pytest.mark.parametrize("ch", ACTING.values(), ids=ACTING.keys())
def test_the_event_and_url_logs(tmp_path: Path, ch: str) -> None:
    text = hostile(ch)
    with Workspace.open(tmp_path / "ws") as ws:
        ws.events.append({"event": "review_accepted", "key": text, "value": text})
        ws.events.append_many([{"event": "x", "fields": {text: text}}])
        ws.urls.append({"url": f"http://site/{text}?q={text}", "outcome": "ok"}, redacted=True)
    events = assert_escaped((tmp_path / "ws" / "events.jsonl").read_bytes(), ch)
    assert events[0]["key"] == events[0]["value"] == text
    assert events[1]["fields"] == {text: text}
    (url,) = assert_escaped((tmp_path / "ws" / "urls.jsonl").read_bytes(), ch)
    assert url["url"] == f"http://site/{text}?q={text}"
    with Workspace.open(tmp_path / "ws", readonly=True) as ws:
        assert [e["key"] for e in ws.events if "key" in e] == [text]  # read back as written


@pytest.mark.parametrize("ch", ACTING.values(), ids=ACTING.keys())
def test_a_database_workspaces_log_lines(make_workspace_backend: Any, ch: str) -> None:
    import psycopg

    text = hostile(ch)
    url = make_workspace_backend("postgres").where
    with Workspace.open(url) as ws:
        ws.events.append({"event": "x", "key": text, "url": f"http://site/{text}"})
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT record FROM log_lines").fetchall()
    ((record,),) = rows
    (line,) = assert_escaped(record.encode(), ch)
    assert line["key"] == text
    assert line["url"] == f"http://site/{text}"
    with Workspace.open(url, readonly=True) as ws:
        assert [e["key"] for e in ws.events] == [text]


@pytest.mark.parametrize("ch", ACTING.values(), ids=ACTING.keys())
def test_the_ship_log(tmp_path: Path, ch: str) -> None:
    text = hostile(ch)
    path = tmp_path / "ship-log.jsonl"
    with ShipLog(path) as log:
        log.write([Attempt(text, "sha256:0", 1, 422, "rejected", 1.0, detail=text)])
    (line,) = assert_escaped(path.read_bytes(), ch)
    assert line["dedupe_key"] == line["detail"] == text
    assert [r["dedupe_key"] for r, _ in read_attempts(path)] == [text]


@pytest.mark.parametrize("ch", ACTING.values(), ids=ACTING.keys())
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_the_json_exports(tmp_path: Path, ch: str, fmt: str) -> None:
    text = hostile(ch)
    ws = tmp_path / "ws"
    with Workspace.open(ws) as w:
        (row,) = w.store.seed([NewRow("detail", f"http://site/{text}")])
        item = ItemWrite(f"t:{text}", "t", text, {"title": text, text: [text]})
        w.store.commit(Outcome(row.id, ok=True, items=[item]))
    out = tmp_path / f"items.{fmt}"
    assert main(["export", "anyjob", "--workspace", str(ws), "-o", str(out)]) == 0
    parsed = assert_escaped(out.read_bytes(), ch)
    (got,) = parsed if fmt == "jsonl" else [json.loads(out.read_text(encoding="utf-8"))[0]]
    assert got == {
        "dedupe_key": f"t:{text}",
        "source_type": "t",
        "source_id": text,
        "url": f"http://site/{text}",
        "title": text,
        text: [text],
    }
