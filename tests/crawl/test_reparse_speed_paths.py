"""The reparse's fast paths give what reading the pages one by one gives: commits
grouped (FRAMEWORK_REPARSE_BATCH pages per transaction) and the parse in worker
processes (--processes) change no item, hash, row or count; a reparse killed at any
moment leaves a whole workspace that the next reparse finishes to the same items."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from framework.workspace import Workspace
from framework.workspace.integrity import ensure_whole
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events, item_hashes, run_cli, workspace_items
from tests.fixtures.site import write_good_spec

OLD, NEW = '".court::text"', '".courtroom::text"'  # the new one changes every item
NEW_TAB = """    extra:                              # a new sub-tab: a new pending row per item
      url: "/cases/{id}/tab/extra"
      each: "li"
      fields:
        name: "a::text"
    documents:"""


@pytest.fixture
def crawled(make_site, tmp_path) -> tuple[Path, Path]:
    """A crawled workspace of the fixture site (pages stored), then the spec changed
    so that a reparse changes every detail item."""
    site = make_site()
    spec = write_good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-q")
    assert r.returncode == 4, r.stderr[-2000:]  # the fixture site's broken pages
    text = spec.read_text(encoding="utf-8")
    assert OLD in text
    text = text.replace(OLD, NEW).replace("    documents:", NEW_TAB)
    spec.write_text(text, encoding="utf-8")
    return spec, ws


def _rows(ws: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(ws / "state.sqlite") as conn:
        return conn.execute(
            "SELECT id, fingerprint, kind, status, attempts, last_error_kind, context "
            "FROM rows ORDER BY id"
        ).fetchall()


def _finished(ws: Path) -> dict[str, Any]:
    done = [e for e in events(ws) if e["event"] == "reparse_finished"][-1]
    where = ("time", "duration_s", "cpu_s", "processes", "chunks")  # how, not what
    return {k: v for k, v in done.items() if k not in where}


def _reparse(spec: Path, ws: Path, *args: str, batch: int | None = None):
    env = {**os.environ}
    if batch is not None:
        env["FRAMEWORK_REPARSE_BATCH"] = str(batch)
    return procs.run(
        [*CLI, "reparse", str(spec), "--workspace", str(ws), "-q", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.process
def test_groups_and_workers_give_what_one_by_one_gives(crawled, tmp_path) -> None:
    spec, ws = crawled
    before = item_hashes(ws)
    ways = {
        "one by one": ("--processes", "1", 1),
        "groups of 7": ("--processes", "1", 7),
        "2 workers, groups of 50": ("--processes", "2", 50),
    }
    got: dict[str, tuple[Any, ...]] = {}
    for name, (flag, n, batch) in ways.items():
        copy = tmp_path / f"ws-{n}-{batch}"
        shutil.copytree(ws, copy)
        r = _reparse(spec, copy, flag, n, batch=batch)
        assert r.returncode == 0, (name, r.stderr[-2000:])
        started = [e for e in events(copy) if e["event"] == "reparse_started"][-1]
        assert started["processes"] == int(n)
        done = [e for e in events(copy) if e["event"] == "reparse_finished"][-1]
        cpu, chunks = done["cpu_s"], done["chunks"]
        # the parse ran where it was sent: one process parses everything itself; with
        # workers, a chunk no worker has started yet is parsed by the writer when it
        # would otherwise wait (take_back), so on a busy machine the writer may parse
        # them all: the workers' CPU is there exactly when they parsed a chunk
        if int(n) == 1:
            assert cpu["workers"] == 0
            assert chunks["workers"] == 0
        else:
            assert (cpu["workers"] > 0) == (chunks["workers"] > 0), done
        assert chunks["writer"] + chunks["workers"] > 0
        got[name] = (workspace_items(copy), item_hashes(copy), _rows(copy), _finished(copy))
    first = got["one by one"]
    items, hashes, rows, finished = first
    assert finished["counts"]["items_changed"] == len(before) > 50  # the change reached all
    assert finished["counts"]["rows_new"] == len(before)
    assert all(hashes[k][0] != before[k][0] for k in before)
    assert all(item["court"] is None for item in items.values())
    for name, other in got.items():
        assert other[0] == items, name
        assert other[1] == hashes, name
        assert other[2] == rows, name
        assert other[3] == finished, name


@pytest.mark.kill
def test_a_reparse_killed_at_any_moment_leaves_a_whole_workspace(crawled, tmp_path) -> None:
    spec, ws = crawled
    reference = tmp_path / "reference"
    shutil.copytree(ws, reference)
    r = _reparse(spec, reference, "--processes", "2", batch=5)
    assert r.returncode == 0, r.stderr[-2000:]
    want_items, want_hashes = workspace_items(reference), item_hashes(reference)
    old = item_hashes(ws)

    env = {**os.environ, "FRAMEWORK_REPARSE_BATCH": "5", "FRAMEWORK_PROGRESS_INTERVAL": "1e-6"}
    proc = procs.popen(
        [*CLI, "reparse", str(spec), "--workspace", str(ws), "--processes", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its workers die with it
    )
    assert proc.stderr is not None
    seen = 0
    deadline = time.monotonic() + 120
    for line in proc.stderr:  # killed mid-way: after a few dozen pages were read
        if line.startswith("progress: reparse "):
            seen += 1
            if seen >= 40:
                break
        assert time.monotonic() < deadline
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stderr.close()
    assert seen >= 40, "the reparse ended before it could be killed"

    with Workspace.open(ws, create=False, readonly=True) as opened:
        ensure_whole(opened, deep=True)
        # both digests of the detail kind: the next reparse reads all its pages again
        assert len(opened.read_with()["detail"]) == 2
    partial = item_hashes(ws)
    assert sorted(partial) == sorted(old)
    changed = {k for k in old if partial[k][0] != old[k][0]}
    assert all(partial[k][0] == want_hashes[k][0] for k in changed)  # whole outcomes only
    logged_events = [json.loads(x) for x in (ws / "events.jsonl").read_text().splitlines()]
    starts = [i for i, e in enumerate(logged_events) if e["event"] == "reparse_started"]
    reparsed = logged_events[starts[-1] :]
    assert not [e for e in reparsed if e["event"] == "reparse_finished"]
    logged = {k for e in reparsed if e["event"] == "items_changed" for k in e["keys"]}
    assert logged == changed  # an event only for what was committed

    r = _reparse(spec, ws, "--processes", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert workspace_items(ws) == want_items
    assert item_hashes(ws) == want_hashes


def test_how_many_processes_parse() -> None:
    from framework.crawl.reparse import processes_for
    from framework.errors import UsageError

    assert processes_for(3, 10) == 3  # asked for: given, whatever the size
    assert processes_for("2", 10) == 2
    assert processes_for("auto", 999) == 1  # a small workspace is not worth a fork
    cores = len(os.sched_getaffinity(0))
    assert 1 <= processes_for("auto", 100_000) <= cores  # idle cores only, at least 1
    with pytest.raises(UsageError):
        processes_for(0, 10)


def test_idle_cores_are_measured_now_not_over_the_last_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from framework.crawl import cores as sampling

    # the real machine: a share of its cores, whatever else runs
    cores = len(os.sched_getaffinity(0))
    assert 0.0 <= sampling.idle_cores(cores, window=0.05) <= cores
    # the arithmetic, on two readings of /proc/stat 0.1 s apart: 300 busy and 100 idle
    # ticks since the first reading are a quarter idle, whatever the load average says
    readings = iter([(1_000, 5_000), (1_300, 5_100)])
    monkeypatch.setattr(sampling, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr(sampling.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert sampling.idle_cores(4, window=0.0) == pytest.approx(1.0)
    readings = iter([(1_000, 5_000), (1_000, 5_400)])  # nothing else ran: all idle
    assert sampling.idle_cores(2, window=0.0) == pytest.approx(2.0)
    # measured from a sample taken at start-up: the window is already over (no sleep),
    # and the 100 ticks this process spent starting up (1 s) are its own, not another
    # program's: 300 busy ticks of which 100 ours, 100 idle: half the cores are free
    readings = iter([(1_000, 5_000), (1_300, 5_100)])
    own = iter([10.0, 11.0])
    monkeypatch.setattr(sampling, "_own_cpu", lambda: next(own))
    monkeypatch.setattr(sampling, "_TICKS_PER_S", 100)
    sample = sampling.CoreSample()
    slept: list[float] = []
    monkeypatch.setattr(sampling.time, "sleep", slept.append)
    sample.at -= 1.0  # taken a second ago
    assert sampling.idle_cores(4, since=sample) == pytest.approx(2.0)
    assert slept == []
    readings = iter([(1_000, 5_000), (1_050, 5_050)])  # ours can never exceed the busy
    own = iter([10.0, 12.0])
    assert sampling.idle_cores(2, window=0.0) == pytest.approx(2.0)
    monkeypatch.setattr(sampling, "_own_cpu", lambda: 0.0)
    monkeypatch.setattr(sampling, "_cpu_times", lambda: None)  # no /proc: the load average
    monkeypatch.setattr(sampling.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert sampling.idle_cores(2) == pytest.approx(0.5)


def test_a_stored_page_is_inflated_where_it_is_parsed() -> None:
    """The store hands out the compressed body (what crosses the pipe to a worker);
    ``body`` inflates it; a damaged one is a workspace error naming its row."""
    import pickle
    import zlib

    from framework.errors import WorkspaceError
    from framework.workspace.records import StoredResponse

    page = b"<html><body>" + b"<p>x</p>" * 500 + b"</body></html>"
    packed = zlib.compress(page, 1)
    stored = StoredResponse(7, "http://a/", "http://a/", 200, "text/html", packed, len(packed))
    assert stored.body == page
    assert len(pickle.dumps(stored)) < len(page) // 4  # what a worker is sent
    damaged = StoredResponse(7, "http://a/", "http://a/", 200, None, b"not zlib", 8)
    with pytest.raises(WorkspaceError, match="row 7"):
        _ = damaged.body


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/html; charset=windows-1252", "<p>café</p>".encode("cp1252")),
        ("text/html; charset=utf-8", b"\xef\xbb\xbf<p>caf\xc3\xa9</p>"),  # BOM and header
        ("text/html; charset=iso-8859-1", b"\xff\xfe<\x00p\x00>\x00"),  # a BOM wins
        ("text/html", b'<meta charset="koi8-r"><p>\xc3\xd4</p>'),  # the body declares
        ("text/html", "<p>café</p>".encode()),  # nothing declares: inferred
        ("text/html; charset=nonsense", "<p>café</p>".encode()),  # an unknown charset
        ("text/plain; charset=UTF-8", "naïve".encode()),
        ("application/json", b'{"a": "\xc3\xa9"}'),
        (None, b"<html><body>x</body></html>"),
    ],
)
def test_a_rebuilt_page_reads_as_the_crawled_one(content_type: str | None, body: bytes) -> None:
    """The rebuilt response names its encoding up front when Scrapy's would find it
    declared (BOM, then header): class, encoding and text are what Scrapy makes of the
    same URL, header and body."""
    import zlib

    from scrapy.http import Headers
    from scrapy.responsetypes import responsetypes

    from framework.crawl.reparse import rebuild
    from framework.workspace.records import StoredResponse

    packed = zlib.compress(body)
    stored = StoredResponse(1, "http://a/p", "http://a/p", 200, content_type, packed, len(packed))
    got = rebuild(stored)
    headers = {"Content-Type": content_type} if content_type else {}
    cls = responsetypes.from_args(headers=Headers(headers), url="http://a/p", body=body)
    want = cls(url="http://a/p", status=200, headers=headers, body=body)
    assert type(got) is type(want)
    if hasattr(want, "encoding"):
        assert got.encoding == want.encoding
        assert got.text == want.text


def _detail_job(tmp_path: Path):
    from framework.crawl import reparse

    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: gcjob\nsource_type: gc\nstart_urls: ['http://127.0.0.1:9/list']\n"
        "list:\n  each: 'li'\n  follow: 'a::attr(href)'\n"
        "detail:\n  id: {css: '#id::text', required: true}\n"
        "  fields:\n    title: 'h1::text'\n",
        encoding="utf-8",
    )
    return reparse._compile(reparse.load_spec(spec))[0]


def test_a_reparsed_page_is_freed_as_soon_as_it_is_read(tmp_path, monkeypatch) -> None:
    """The response a stored page becomes, its selector and its lxml tree refer to each
    other; the crawl's one path from a page to its outcome (the reparse's too) cuts that
    cycle after the page, so they are freed without waiting for the garbage collector."""
    import gc
    import weakref
    import zlib

    from framework.crawl import reparse
    from framework.workspace.records import Row, RowStatus, StoredResponse

    job = _detail_job(tmp_path)
    body = b"<html><body><h1>A title</h1><p id='id'>C-1</p></body></html>"
    packed = zlib.compress(body)
    url = "http://127.0.0.1:9/cases/C-1"
    stored = StoredResponse(3, url, url, 200, "text/html; charset=utf-8", packed, len(packed))
    row = Row(3, "detail", url, "GET", None, None, 1, RowStatus.OK, 1, True, None, None,
              200, {}, "t", "t")  # fmt: skip
    seen: list[weakref.ref[Any]] = []
    real = reparse.rebuild

    def watched(page: StoredResponse) -> Any:
        response = real(page)
        seen.append(weakref.ref(response))
        return response

    monkeypatch.setattr(reparse, "rebuild", watched)
    enabled = gc.isenabled()
    gc.disable()
    try:
        parsed = reparse.parse(job, row, stored)
        assert len(seen) == 1
        assert seen[0]() is None, "the page outlived its parse"
    finally:
        if enabled:
            gc.enable()
    assert parsed.records[0].values == {"title": "A title"}  # the page was read whole
    assert parsed.records[0].dedupe_key == "gc:C-1"


@pytest.mark.process
def test_the_reparse_freezes_its_start_up_heap_and_thaws_it(crawled, monkeypatch) -> None:
    """What start-up built is frozen for the run (the collector skips it, here and in
    the forked workers) and thawed after, so a caller's garbage stays collectable."""
    import gc

    from framework.crawl import reparse

    spec, ws = crawled
    during: list[int] = []
    real = reparse._run

    def watched(*args: Any, **kwargs: Any) -> Any:
        during.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(reparse, "_run", watched)
    assert gc.get_freeze_count() == 0
    result = reparse.reparse(spec, ws, processes=1)
    assert result.counts["pages"] > 0
    assert len(during) == 1
    assert during[0] > 1000  # the modules and the compiled spec, at least
    assert gc.get_freeze_count() == 0


@pytest.mark.process
def test_a_reparse_that_cannot_start_its_workers_thaws_too(crawled, monkeypatch) -> None:
    import gc

    from framework.crawl import reparse

    spec, ws = crawled

    def no_fork(job: Any, n: int, narrow: Any = None) -> Any:
        raise OSError("fork failed")

    monkeypatch.setattr(reparse, "_Parser", no_fork)
    with pytest.raises(OSError, match="fork failed"):
        reparse.reparse(spec, ws, processes=2)
    assert gc.get_freeze_count() == 0


@pytest.mark.process
def test_the_writer_parses_what_a_slow_worker_has_not_started(
    crawled, tmp_path, monkeypatch
) -> None:
    """With one worker slowed down, the writing process takes back the chunks no worker
    has started rather than wait, and parses them itself: the same items, rows and
    counts as a reparse in one process, the chunks parsed on both sides."""
    from framework.crawl import reparse

    spec, ws = crawled
    one = tmp_path / "one"
    shutil.copytree(ws, one)
    assert _reparse(spec, one, "--processes", "1").returncode == 0
    parse_chunk = reparse._parse_chunk

    def slow(*args: Any) -> Any:  # runs in the forked worker, which inherits the patch
        time.sleep(0.2)
        return parse_chunk(*args)

    # found by the worker under the original's name, as the pool pickles it by name
    slow.__module__, slow.__qualname__ = parse_chunk.__module__, parse_chunk.__qualname__
    monkeypatch.setattr(reparse, "_parse_chunk", slow)
    monkeypatch.setattr(reparse, "CHUNK_PAGES", 8)  # more chunks than the worker can take
    reparse.reparse(spec, ws, processes=2)
    done = [e for e in events(ws) if e["event"] == "reparse_finished"][-1]
    assert done["processes"] == 2
    assert done["chunks"]["writer"] > 0
    assert done["chunks"]["workers"] > 0
    assert workspace_items(ws) == workspace_items(one)
    assert item_hashes(ws) == item_hashes(one)
    assert _rows(ws) == _rows(one)
    assert _finished(ws) == _finished(one)
