"""`framework export` and a crawl's -o/-O, through the real CLI against the fixture site.

One crawl of the fixture site (70 cases, one incomplete) for the module; every export
is read back and compared with what the workspace stores."""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import shutil
import stat
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.crawl import run_cli, workspace_items
from tests.fixtures.site import write_good_spec


@pytest.fixture(scope="module")
def crawled(site, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    spec = write_good_spec("cases", site.url, root)
    feed = root / "run.jsonl"
    feed.write_text('{"stale": "line"}\n', encoding="utf-8")
    r = run_cli(
        "crawl", str(spec), "--workspace", str(root / "ws"), "-O", str(feed), "-L", "WARNING"
    )
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture's broken pages need a human
    return {"root": root, "ws": root / "ws", "feed": feed, "spec": spec}


def _export(crawled: dict[str, Path], *args: str) -> Any:
    return run_cli("export", "fixture-cases", "--workspace", str(crawled["ws"]), *args)


def _exported(ws: Path, complete_only: bool = False) -> dict[str, dict[str, Any]]:
    """The stored items as export writes them: the page each came from as ``url``
    after the keys, read here straight from the tables (the detail page: its row)."""
    import sqlite3

    with sqlite3.connect(f"file:{ws / 'state.sqlite'}?mode=ro", uri=True) as db:
        pages = dict(
            db.execute(
                "SELECT items.dedupe_key, rows.url FROM items JOIN rows ON rows.id = items.row_id"
            )
        )
    out = {}
    for key, item in workspace_items(ws, complete_only).items():
        keys, data = list(item)[:3], list(item)[3:]
        out[key] = {**{k: item[k] for k in keys}, "url": pages[key]}
        out[key].update({k: item[k] for k in data})
    assert all("/cases/" in u and "/tab/" not in u for u in pages.values())
    return out


def _snapshot(ws: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ws.iterdir())}


def _csv_cell(value: Any) -> str:
    # the documented CSV form: strings as is, null empty, anything else JSON
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _xml_view(value: Any) -> Any:
    # the documented XML form: no null or empty list/record; scalars as JSON text
    if isinstance(value, dict):
        return {k: _xml_view(v) for k, v in value.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_xml_view(v) for v in value if v not in (None, [], {})]
    return value if isinstance(value, str) else json.dumps(value)


def _xml_read(element: ET.Element) -> Any:
    children = list(element)
    if not children:
        return element.text or ""
    if all(c.tag == "value" for c in children):
        return [_xml_read(c) for c in children]
    return {c.tag: _xml_read(c) for c in children}


@pytest.mark.process
def test_crawl_O_replaces_the_feed_with_this_runs_completed_items(crawled):
    lines = crawled["feed"].read_text(encoding="utf-8").splitlines()
    assert "stale" not in lines[0]
    emitted = {json.loads(x)["dedupe_key"] for x in lines}
    stored = workspace_items(crawled["ws"], complete_only=True)
    assert emitted == set(stored)  # the incomplete record is not in the run's feed


@pytest.mark.process
def test_a_feed_holding_fewer_records_than_the_workspace_says_so(crawled, tmp_path):
    # a crawl of a finished workspace completes nothing: its feed is empty, and said so
    ws = tmp_path / "ws"
    shutil.copytree(crawled["ws"], ws)
    feed = tmp_path / "again.jsonl"
    r = run_cli("crawl", str(crawled["spec"]), "--workspace", str(ws), "-O", str(feed), "-q")
    assert r.returncode == 4, r.stderr[-2000:]
    sent = len(feed.read_text(encoding="utf-8").splitlines())
    stored = len(workspace_items(ws, complete_only=True))
    assert sent < stored
    assert (
        f"the -o/-O feed holds the {sent} records this run completed; the workspace holds "
        f"{stored} complete items: `framework export fixture-cases -o FILE --workspace {ws}` "
        "writes them all"
    ) in r.stderr
    # a feed with every stored item is not told about
    r = run_cli(
        "crawl", str(crawled["spec"]), "--workspace", str(tmp_path / "ws2"), "-O", str(feed), "-q"
    )
    assert r.returncode == 4, r.stderr[-2000:]
    assert "feed holds" not in r.stderr


@pytest.mark.process
@pytest.mark.parametrize("ext", ["jsonl", "json"])
def test_json_exports_round_trip_every_stored_item(crawled, ext):
    out = crawled["root"] / f"all.{ext}"
    before = _snapshot(crawled["ws"])
    r = _export(crawled, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "70 items" in r.stderr
    text = out.read_text(encoding="utf-8")
    got = [json.loads(x) for x in text.splitlines()] if ext == "jsonl" else json.loads(text)
    stored = _exported(crawled["ws"])
    assert len(stored) == 70
    assert {i["dedupe_key"]: i for i in got} == stored
    assert len(got) == len(stored)
    assert _snapshot(crawled["ws"]) == before  # export only reads


@pytest.mark.process
def test_csv_export_round_trips_every_stored_item(crawled):
    out = crawled["root"] / "all.csv"
    r = _export(crawled, "-o", str(out))
    assert r.returncode == 0, r.stderr
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    stored = _exported(crawled["ws"])
    columns = list(dict.fromkeys(k for item in stored.values() for k in item))
    assert sorted(rows[0]) == sorted(columns)
    expected = {key: {c: _csv_cell(item.get(c)) for c in columns} for key, item in stored.items()}
    assert {r["dedupe_key"]: r for r in rows} == expected
    # a nested value is JSON that reads back to the stored value
    some = next(k for k, v in stored.items() if v["rulings"])
    row = next(r for r in rows if r["dedupe_key"] == some)
    assert json.loads(row["rulings"]) == stored[some]["rulings"]


@pytest.mark.process
def test_xml_export_round_trips_every_stored_item(crawled):
    out = crawled["root"] / "all.xml"
    r = _export(crawled, "-o", str(out))
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()  # noqa: S314 - our own export of a local file
    assert root.tag == "items"
    got = [_xml_read(item) for item in root]
    stored = _exported(crawled["ws"])
    assert {i["dedupe_key"]: i for i in got} == {k: _xml_view(v) for k, v in stored.items()}
    assert len(got) == 70


@pytest.mark.process
def test_stdout_only_complete_and_since(crawled):
    r = _export(crawled, "-o", "-", "--only-complete")
    assert r.returncode == 0, r.stderr
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert {i["dedupe_key"]: i for i in got} == _exported(crawled["ws"], True)
    assert len(got) == 69
    # what the filter left out is said, not only what was written
    assert (
        "69 items written to stdout (jsonl); 1 of the 70 stored left out by --only-complete"
        in r.stderr
    )
    r = _export(crawled, "-o", "-", "--format", "csv", "--since", "2000-01-01")
    assert r.returncode == 0, r.stderr
    assert len(list(csv.DictReader(io.StringIO(r.stdout)))) == 70
    r = _export(crawled, "-o", "-", "--since", "2999-01-01T00:00:00Z")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "0 items written to stdout (jsonl); 70 of the 70 stored left out by --since" in (
        r.stderr
    )
    r = _export(crawled, "-o", "-", "--since", "yesterday")
    assert r.returncode == 2
    assert "--since expects an ISO time" in r.stderr


@pytest.mark.process
def test_unknown_formats_are_one_line_errors(crawled, tmp_path):
    r = _export(crawled, "-o", str(tmp_path / "items.parquet"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "'parquet'" in r.stderr
    assert ".jsonl" in r.stderr
    assert not (tmp_path / "items.parquet").exists()
    r = run_cli("crawl", str(crawled["spec"]), "--workspace", str(tmp_path / "ws"), "-o", "x.foo")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "unknown feed format" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "ws").exists()  # refused before the crawl started
    r = run_cli(
        "crawl",
        str(crawled["spec"]),
        "--workspace",
        str(tmp_path / "ws"),
        "-o",
        "a.jsonl",
        "-O",
        "b.jsonl",
    )
    assert r.returncode == 2
    assert "not both" in r.stderr


@pytest.mark.process
def test_export_of_a_missing_workspace_is_a_usage_error(tmp_path):
    r = run_cli("export", "nojob", "--workspace", str(tmp_path / "none"), "-o", "-")
    assert r.returncode == 2
    assert "no workspace" in r.stderr
    assert "nothing was crawled into it yet" in r.stderr
    r = run_cli("export", "../etc", "-o", "-")
    assert r.returncode == 2
    assert "not a job name" in r.stderr


@pytest.mark.process
def test_the_export_file_is_an_ordinary_file_where_asked(crawled, tmp_path):
    """Missing folders are made (as a crawl's -o makes them); a new file is private
    (0600: its items come from logged-in pages), one that replaces another keeps that
    one's mode; a folder, or a path under a file, is one line and exit 2."""
    target = tmp_path / "a" / "b" / "items.jsonl"
    r = _export(crawled, "-o", str(target))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert len(target.read_text().splitlines()) == len(workspace_items(crawled["ws"]))
    target.chmod(0o640)
    r = _export(crawled, "-o", str(target))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the replaced file's
    for bad, says in (
        (tmp_path / "a", "it is a folder"),
        (target / "x.jsonl", "cannot write"),  # under a file: no folder can be made
    ):
        r = _export(crawled, "-o", str(bad), "--format", "jsonl")
        assert r.returncode == 2, r.stderr
        assert says in r.stderr
        assert r.stderr.strip().count("\n") == 0, r.stderr
        assert "Traceback" not in r.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == ["items.jsonl"]  # no .part


@pytest.mark.process
def test_a_write_that_fails_midway_leaves_the_old_file(crawled, tmp_path, monkeypatch):
    """A full disk cannot be made here: the exporter's write fails as one would
    (ENOSPC) after writing part of the file; the old file stays whole, no .part is left."""
    from framework import export
    from framework.errors import FrameworkError

    target = tmp_path / "items.csv"
    target.write_text("old\n")
    real = export._write

    def full(out, fmt, items, fields, *options):
        out.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(export, "_write", full)
    with pytest.raises(FrameworkError, match="No space left on device; the old file is left"):
        export.export_items(crawled["ws"], str(target))
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["items.csv"]
    monkeypatch.setattr(export, "_write", real)
    assert export.export_items(crawled["ws"], str(target)).items > 0


@pytest.mark.process
def test_an_export_of_a_workspace_with_no_item_says_so(site, tmp_path):
    spec = write_good_spec("cases", site.url, tmp_path)
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace('"#case-number::text"', '"#no-such::text"'), encoding="utf-8")
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # every record lacks its id: nothing stored
    r = run_cli("export", "fixture-cases", "--workspace", str(ws), "-o", str(tmp_path / "x.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "x.json").read_text(encoding="utf-8")) == []
    assert "fixture-cases: 0 items written to " in r.stderr
    assert "; the workspace stores no item yet (`framework status fixture-cases` says why)" in (
        r.stderr
    )
