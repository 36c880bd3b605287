"""What `framework crawl` shows: a progress line (live on a terminal, log lines
elsewhere) fed by the crawl's counters, Scrapy's start-up boilerplate hidden unless -v,
-q, and the summary as a table."""

from __future__ import annotations

import logging
import os
import pty
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from framework.crawl.output import Progress, Tally, summary
from framework.crawl.process import CrawlResult
from framework.crawl.runtime import RunCounters
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli
from tests.fixtures.site import write_good_spec

BOILERPLATE = (
    "Scrapy 2.",  # versions
    "Overridden settings",
    "Enabled downloader middlewares",
    "Enabled extensions",
    "Spider opened",
    "Dumping Scrapy stats",
    "'downloader/request_count'",
)


# ------------------------------------------------------------------- the tally
def test_tally_moves_on_with_the_counters_between_reads_of_the_workspace():
    tally = Tally(window_s=10)
    c = RunCounters()
    tally.sync({"list": {"ok": 2, "pending": 3}, "detail": {"error": 1}}, {"complete": 4}, c)
    snap = tally.snapshot(c, now=100.0)
    assert (snap.ok, snap.pending, snap.error, snap.items) == (2, 3, 1, 4)
    assert snap.eta_s is None  # no rate yet
    c.requests, c.ok, c.rows_new, c.items_new = 4, 3, 5, 2
    c.errors = 1
    snap = tally.snapshot(c, now=102.0)
    assert snap.ok == 5
    assert snap.pending == 3 + 5 - 3 - 1
    assert snap.error == 2
    assert snap.items == 6
    assert snap.pages_per_s == pytest.approx(2.0)
    assert snap.eta_s == pytest.approx(4 / 2.0)
    assert snap.line() == "rows 5 ok, 4 pending, 2 error | 2.0 pages/s | items 6 | ETA 0:00:02"
    # the next read of the workspace is the truth again
    tally.sync({"list": {"ok": 6, "pending": 3}}, {"complete": 6}, c)
    snap = tally.snapshot(c, now=103.0)
    assert (snap.ok, snap.pending, snap.error) == (6, 3, 0)


class _Store:
    def __init__(self) -> None:
        self.reads = 0

    def row_counts(self) -> dict[str, dict[str, int]]:
        self.reads += 1
        return {"detail": {"ok": 1, "pending": 9}}

    def item_counts(self) -> dict[str, int]:
        return {"complete": 1, "incomplete": 0}


def test_progress_reads_the_workspace_once_per_resync_not_per_tick(caplog):
    store = _Store()
    counters = RunCounters()
    runtime = SimpleNamespace(ws=SimpleNamespace(store=store), counters=counters)
    crawler: Any = SimpleNamespace(spider=SimpleNamespace(runtime=runtime, name="job"))
    progress = Progress(crawler, "lines", interval=1.0, resync=3600.0)
    with caplog.at_level(logging.INFO, logger="framework.crawl.output"):
        for i in range(50):
            counters.requests = counters.ok = i
            progress.tick()
    assert store.reads == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "framework.crawl.output"]
    assert len(lines) == 50
    assert lines[-1].startswith("progress: rows 50 ok, 0 pending, 0 error")


def test_progress_never_breaks_the_crawl_when_the_workspace_is_gone():
    class Closed(_Store):
        def row_counts(self) -> dict[str, dict[str, int]]:
            raise RuntimeError("Cannot operate on a closed database.")

    runtime = SimpleNamespace(ws=SimpleNamespace(store=Closed()), counters=RunCounters())
    crawler: Any = SimpleNamespace(spider=SimpleNamespace(runtime=runtime, name="job"))
    Progress(crawler, "lines", interval=1.0, resync=1.0).tick()  # no exception
    Progress(SimpleNamespace(spider=None), "lines", 1.0, 1.0).tick()  # type: ignore[arg-type]


def test_summary_is_a_table():
    result = CrawlResult(
        job="cases",
        reason="finished",
        workspace=Path("/w"),
        rows={"list": {"ok": 7}, "detail": {"ok": 70, "error": 2}},
        pending=0,
        errors=2,
        items={"complete": 69, "incomplete": 1},
    )
    assert summary(result).splitlines() == [
        "cases: finished (workspace /w)",
        "  kind         ok  pending    error",
        "  detail       70        0        2",
        "  list          7        0        0",
        "  total        77        0        2",
        "  items: 69 complete, 1 incomplete",
    ]


# ----------------------------------------------------------------- the real CLI
@pytest.fixture
def spec(make_site, tmp_path) -> Path:
    site = make_site(delay=0.01)  # a crawl long enough for a few progress ticks
    return write_good_spec("cases", site.url, tmp_path)


def _crawl(spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("crawl", str(spec), "--workspace", str(spec.parent / "ws"), *args)


@pytest.mark.process
def test_default_output_has_no_scrapy_boilerplate_and_ends_with_the_table(spec):
    r = _crawl(spec, "-s", "FRAMEWORK_PROGRESS_INTERVAL=0.2")
    assert r.returncode == 4, r.stderr[-2000:]
    for text in BOILERPLATE:
        assert text not in r.stderr, text
    assert "matched fallback" in r.stderr  # the crawl's own warnings stay
    assert "[framework.crawl.output] INFO: progress: rows " in r.stderr  # not a terminal
    assert "pages/s | items " in r.stderr
    tail = r.stderr.strip().splitlines()[-10:]
    assert tail[0].startswith("fixture-cases: finished (workspace ")
    assert tail[1].split() == ["kind", "ok", "pending", "error"]
    assert tail[-3].split() == ["total", "286", "0", "3"]
    assert tail[-2] == "  items: 69 complete, 1 incomplete"


@pytest.mark.process
def test_verbose_keeps_scrapy_s_log_and_quiet_says_only_warnings(spec):
    r = _crawl(spec, "-q")
    assert r.returncode == 4
    assert " INFO: " not in r.stderr
    assert " WARNING: " in r.stderr
    assert "progress:" not in r.stderr
    r = _crawl(spec, "-v")
    assert r.returncode == 4
    for text in ("Overridden settings", "Enabled extensions", "Dumping Scrapy stats"):
        assert text in r.stderr, text
    r = _crawl(spec, "-q", "-v")
    assert r.returncode == 2
    assert "not both" in r.stderr


@pytest.mark.process
def test_a_terminal_gets_a_live_line(spec):
    master, slave = pty.openpty()
    try:
        proc = procs.popen(
            [*CLI, "crawl", str(spec), "--workspace", str(spec.parent / "ws")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            env={**os.environ, "COLUMNS": "160"},
        )
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its side
                break
            if not chunk:
                break
            out += chunk
        code = proc.wait(timeout=240)
        assert code == 4, out.decode("utf-8", "replace")[-2000:]
    finally:
        os.close(master)
    text = out.decode("utf-8", "replace")
    assert "\x1b[2Kfixture-cases: rows " in text  # the line, redrawn in place
    assert "pages/s | items" in text
    assert "progress:" not in text  # no log lines for it on a terminal
    assert "Traceback" not in text
    assert "  items: 69 complete, 1 incomplete" in text
