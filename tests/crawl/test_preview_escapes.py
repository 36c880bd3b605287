"""``framework preview`` prints what a page chose (ids, values, keys, notes) escaped:
a hostile page cannot send a terminal its control sequences (clear the screen, set the
title, hide text) through the preview (framework/terminal.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_crawl_hostile import _page, _write_spec
from tests.fixtures.hostile import HostileServer

SPEC = """\
name: hostile
source_type: hostile
start_urls: ["{base}/case"]
pages:
  detail:
    id: {{css: "h1::text"}}
    fields:
      title: {{css: "h2::text"}}
"""
CLEAR = "\x1b[2J"  # erase the screen
TITLE = "\x1b]0;pwned\x07"  # set the window title
CSI = "\x9b31m"  # the one-byte CSI of C1


@pytest.mark.process
@pytest.mark.timeout(120)
def test_preview_escapes_what_the_page_chose(
    hostile_server: Callable[[], HostileServer], tmp_path: Path, crawl_cli: Any
) -> None:
    site = hostile_server()
    site.route("/case", _page(f"<h1>A{CLEAR}B{TITLE}</h1><h2>red{CSI}\u202etxt.exe</h2>"))
    _write_spec(tmp_path, SPEC.format(base=site.url))

    r = crawl_cli("preview", "hostile", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in r.stdout, repr(r.stdout)
    assert "A\\x1b[2JB\\x1b]0;pwned\\x07" in r.stdout  # the id, shown escaped
    assert "\\x9b31m" in r.stdout

    r = crawl_cli("preview", "hostile", "--json", cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in r.stdout, repr(r.stdout)
    record = json.loads(r.stdout)["records"][0]
    assert CSI in json.dumps(record, ensure_ascii=False)  # the same JSON, escaped only
