"""What a crawl and an export create is private to its owner, whatever the umask: the
workspace folder 0700, its files 0600 (the state database with its WAL, the logs, the
locks), a new export 0600. They hold logged-in pages (framework/files.py)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import DETAIL_BY_URL, _page, _write_spec
from tests.fixtures.hostile import HostileServer


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
def test_the_workspace_and_the_export_are_private_to_their_owner(
    open_umask: None,
    hostile_server: Callable[[], HostileServer],
    tmp_path: Path,
    crawl_cli: Any,
) -> None:
    site = hostile_server()
    site.route("/", _page('<a href="/case-1">1</a>'))
    site.route("/case-1", _page("<p>logged-in page</p>"))
    spec = _write_spec(tmp_path, DETAIL_BY_URL.format(base=site.url))
    ws = tmp_path / "var" / "ws"
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]

    assert _mode(ws) == 0o700
    files = [p for p in ws.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"state.sqlite", "urls.jsonl", "events.jsonl", "crawl.lock"} <= names, names
    assert {p.name: _mode(p) for p in files} == dict.fromkeys(names, 0o600)
    assert all(_mode(p) == 0o700 for p in ws.rglob("*") if p.is_dir())

    out = tmp_path / "exports" / "items.jsonl"
    r = crawl_cli("export", "hostile", "--workspace", str(ws), "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _mode(out) == 0o600
