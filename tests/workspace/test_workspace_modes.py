"""What a crawl, an export and a ship create is private to its owner, whatever the
umask: the workspace folder 0700, its files 0600 (the state database with its WAL, the
logs, the locks, the ship log and index), a crawl's ``-o`` feed and a new export 0600 in
folders made 0700. They hold logged-in pages (framework/files.py). A symlink where a
feed or an export goes is refused, its target unchanged."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import DETAIL_BY_URL, _page, _write_spec
from tests.fixtures.hostile import HostileServer
from tests.fixtures.ship import FaultEndpoint

LINK_REFUSED = (
    "is a symbolic link: the framework never writes through one (it would write "
    "wherever the link points); replace it with a file or remove it"
)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask most systems start with (0022), which would give 0644 and 0755: the
    CLI children inherit it."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.process
@pytest.mark.timeout(240)
def test_the_workspace_the_feed_the_export_and_the_ship_files_are_private(
    open_umask: None,
    hostile_server: Callable[[], HostileServer],
    fault_endpoint: FaultEndpoint,
    tmp_path: Path,
    crawl_cli: Any,
) -> None:
    site = hostile_server()
    site.route("/", _page('<a href="/case-1">1</a>'))
    site.route("/case-1", "logged-in \x7f\x9b[2J\u202e page")  # the record's whole text
    spec = _write_spec(tmp_path, DETAIL_BY_URL.format(base=site.url))
    ws = tmp_path / "var" / "ws"
    feed = tmp_path / "feeds" / "daily" / "items.jsonl"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-o", str(feed), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]

    assert _mode(ws) == 0o700
    assert _mode(ws.parent) == 0o700  # var/, made for it
    files = [p for p in ws.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"state.sqlite", "urls.jsonl", "events.jsonl", "crawl.lock"} <= names, names
    assert {p.name: _mode(p) for p in files} == dict.fromkeys(names, 0o600)
    assert all(_mode(p) == 0o700 for p in ws.rglob("*") if p.is_dir())

    # the crawl's -o feed: 0600 in folders made 0700, written as export writes JSON
    assert (_mode(feed), _mode(feed.parent), _mode(feed.parent.parent)) == (0o600, 0o700, 0o700)
    data = feed.read_text(encoding="utf-8")
    assert not {"\x7f", "\x9b", "\u202e"} & set(data)
    assert [json.loads(line)["text"] for line in data.splitlines()] == [
        "logged-in \x7f\x9b[2J\u202e page"
    ]

    out = tmp_path / "exports" / "deep" / "items.jsonl"
    r = crawl_cli("export", "hostile", "--workspace", str(ws), "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (_mode(out), _mode(out.parent), _mode(out.parent.parent)) == (0o600, 0o700, 0o700)

    r = crawl_cli(
        "ship", "hostile", "--workspace", str(ws), "--endpoint", fault_endpoint.url, "-q",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(fault_endpoint.rows) == 1
    files = [p for p in ws.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"ship-index.sqlite", "ship-log.jsonl", "ship.lock"} <= names, names
    assert {p.name: _mode(p) for p in files} == dict.fromkeys(names, 0o600)


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_symlink_where_a_feed_or_an_export_goes_is_refused(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    """`-o`/`-O` at a link, and `export -o` at one: one line naming it, exit 2, and
    the link's target keeps every byte (a shell's rc file, say)."""
    site = hostile_server()
    site.route("/", _page('<a href="/case-1">1</a>'))
    site.route("/case-1", "a page")
    spec = _write_spec(tmp_path, DETAIL_BY_URL.format(base=site.url))
    ws = tmp_path / "ws"
    target = tmp_path / "bashrc"
    target.write_bytes(b"# mine\n")
    link = tmp_path / "out" / "items.jsonl"
    link.parent.mkdir()
    link.symlink_to(target)
    for flag in ("-o", "-O"):
        r = crawl_cli("crawl", str(spec), "--workspace", str(ws), flag, str(link), "-q")
        assert r.returncode == 2, r.stderr[-3000:]
        assert r.stderr.splitlines() == [f"error: {link} {LINK_REFUSED}"]
        assert target.read_bytes() == b"# mine\n"
    assert not ws.exists()  # refused before the crawl began

    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 0, r.stderr[-3000:]
    r = crawl_cli("export", "hostile", "--workspace", str(ws), "-o", str(link), cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.splitlines() == [f"error: {link} {LINK_REFUSED}"]
    assert target.read_bytes() == b"# mine\n"
    assert link.is_symlink()
