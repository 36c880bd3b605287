"""A full disk and a broken workspace, through the real CLI (issue 8, items 8 and 9).

* Disk full: the crawl stops at the first failed commit with one line naming the
  workspace and the space to free (exit 4, no traceback), and once space is back the
  resume is exact: the items equal a clean crawl's and no row that was ok is fetched
  again. The quota is a real tmpfs of a few hundred KB when the tests run as root (and
  the kernel lets them mount one), and always a simulated SQLITE_FULL (the store's
  test-only page cap, ``FRAMEWORK_TEST_SQLITE_MAX_PAGES``).
* The WAL cannot outgrow the data: once nothing pins it, the background checkpoint
  truncates it.
* A damaged ``state.sqlite`` (garbled or truncated) or one that lost commits (its WAL
  deleted, or an older copy restored) is said in one line with what to do, exit 4, by
  both ``crawl`` and ``status``; ``crawl --fresh`` starts over.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework.demo.site import DemoSite
from framework.workspace import ItemWrite, NewRow, Outcome, RowStatus, Workspace
from framework.workspace.sqlite_base import CHECKPOINT_EVERY
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, item_hashes, url_log
from tests.paths import REPO

EXIT_CHECKPOINT = 3
EXIT_HALTED = 4
MAX_PAGES_ENV = "FRAMEWORK_TEST_SQLITE_MAX_PAGES"  # the store's test-only page cap
WAL_SIZE_LIMIT = 4 * 2**20  # the WAL is truncated back under this (sqlite_base)
QUIET = ("-L", "WARNING", "-s", "CONCURRENT_REQUESTS=4")
GROUPS = ("-s", "FRAMEWORK_COMMIT_BATCH=4")  # a commit group holds at most 4 outcomes


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return procs.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _one_clean_line(err: str, needle: str) -> str:
    """The stderr of a refused run: no traceback, and exactly one line saying ``needle``."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if needle in line]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def _assert_no_ok_row_fetched_again(ws: Path) -> None:
    ok: set[int] = set()
    for line in url_log(ws):
        assert line["row"] not in ok, f"row {line['row']} fetched again after it was ok"
        if line["outcome"] == "ok":
            ok.add(line["row"])


# ---------------------------------------------------------------------------- disk full
class Quota:
    """Where the crawl writes, and how space comes back."""

    def __init__(self, kind: str, base: Path) -> None:
        self.kind = kind
        self.env: dict[str, str] = {}
        self.mount: Path | None = None
        if kind == "tmpfs":
            self.mount = base / "mnt"
            self.mount.mkdir()
            self.folder = self.mount / "ws"
        else:
            self.folder = base / "ws"
            self.env = {MAX_PAGES_ENV: "40"}  # 160 KB: part of a crawl

    def __enter__(self) -> Quota:
        if self.mount is not None:
            procs.run(
                ["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(self.mount)], check=True
            )
        return self

    def free_space(self) -> None:
        if self.mount is not None:
            procs.run(["mount", "-o", "remount,size=64m", str(self.mount)], check=True)
        self.env = {}

    def __exit__(self, *exc: object) -> None:
        if self.mount is not None:
            procs.run(["umount", str(self.mount)], check=False)


def _can_mount_tmpfs(base: Path) -> bool:
    probe = base / f"probe-{uuid.uuid4().hex}"
    probe.mkdir()
    done = procs.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
        capture_output=True,
        check=False,
    )
    if done.returncode == 0:
        procs.run(["umount", str(probe)], check=False)
    probe.rmdir()
    return done.returncode == 0


@pytest.fixture(params=["simulated", "tmpfs"])
def quota(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Quota]:
    if request.param == "tmpfs" and (
        shutil.which("mount") is None or not _can_mount_tmpfs(tmp_path)
    ):
        pytest.skip("mounting a tmpfs needs root; the simulated quota covers the same path")
    with Quota(request.param, tmp_path) as q:
        yield q


@pytest.mark.slow
@pytest.mark.process
def test_a_full_disk_stops_in_one_line_and_the_resume_is_exact(
    make_site: Callable[..., DemoSite],
    good_spec: Callable[..., Path],
    tmp_path: Path,
    quota: Quota,
) -> None:
    # one site for both crawls: the items carry absolute URLs of it
    site = make_site()
    spec = good_spec("cases", site.url, tmp_path)
    reference = tmp_path / "reference"
    r = _cli("crawl", str(spec), "--workspace", str(reference), *QUIET)
    assert r.returncode == EXIT_HALTED, r.stderr[-2000:]  # the demo's broken pages

    ws = quota.folder
    full = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET, *GROUPS, env=quota.env)
    assert full.returncode == EXIT_HALTED, full.stderr[-3000:]
    line = _one_clean_line(full.stderr, "the disk is full")
    assert line.startswith(f"error: {ws}: the disk is full")
    assert "free at least 16.0 MB there" in line
    with Workspace.open(ws, create=False, readonly=True) as w:
        counts = w.store.row_counts()
    assert sum(n.get(RowStatus.PENDING, 0) for n in counts.values()) > 0  # stopped early

    # a run on the still-full disk says the same, and touches nothing
    again = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET, *GROUPS, env=quota.env)
    assert again.returncode == EXIT_HALTED
    _one_clean_line(again.stderr, "the disk is full")

    quota.free_space()
    lines_before = len(url_log(ws))
    resumed = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET, *GROUPS, env=quota.env)
    assert resumed.returncode == EXIT_HALTED, resumed.stderr[-3000:]
    assert "rows in error" in resumed.stderr  # the demo's broken pages, as in the reference
    assert item_hashes(ws) == item_hashes(reference)
    _assert_no_ok_row_fetched_again(ws)
    assert len(url_log(ws)) > lines_before

    # Every request the site answered is in the URL log, except those whose response
    # found the disk full (nothing of them was kept: they were asked again).
    def per_path(folder: Path) -> Counter[str]:
        return Counter(line["url"].removeprefix(site.url) for line in url_log(folder))

    logged, by_reference = per_path(ws), per_path(reference)
    extra = {
        path: site.hits(path) - n - by_reference[path]
        for path, n in logged.items()
        if site.hits(path) != n + by_reference[path]
    }
    # (the simulated quota lets the second run send a few requests before it stops too)
    assert all(v <= 2 for v in extra.values()), extra
    # what each full run lost when it stopped: the requests in flight (4 at a time) and
    # the commit group that failed (at most GROUPS' 4 outcomes), and on a loaded machine
    # one more round the engine had already handed to the downloader before the stop
    # took effect (17 seen once in CI with the next list page sent first: over the
    # 3 * (4 + 1) this bound was before groups were counted)
    assert sum(extra.values()) <= 3 * (4 + 4), extra


def test_the_wal_is_truncated_once_no_reader_pins_it(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    ws = Workspace.open(tmp_path)
    try:
        rows = ws.store.seed([NewRow("detail", f"http://site/{i}") for i in range(400)])
        # A reader holding one snapshot keeps every later commit in the WAL.
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM rows").fetchone()
        blob = "x" * 12_000
        for row in rows[:350]:
            ws.store.commit(
                Outcome(
                    row.id, ok=True, items=[ItemWrite(f"k:{row.id}", "k", str(row.id), {"b": blob})]
                )
            )
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size > WAL_SIZE_LIMIT  # pinned: it could only grow
        reader.execute("ROLLBACK")
        reader.close()
        deadline = time.monotonic() + 60
        for row in rows[350:]:
            ws.store.commit(Outcome(row.id, ok=True))
            if wal.stat().st_size <= WAL_SIZE_LIMIT:
                break
        while wal.stat().st_size > WAL_SIZE_LIMIT and time.monotonic() < deadline:
            ws.store._checkpoint_soon()  # what the next commits would do
            time.sleep(0.05)
        assert wal.stat().st_size <= WAL_SIZE_LIMIT
    finally:
        ws.close()


# ---------------------------------------------------------------------- broken workspace
@pytest.fixture
def crawled(site: DemoSite, good_spec: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """A spec and a workspace that crawled 40 requests of it (exit 3)."""
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    r = _cli("crawl", str(spec), "--workspace", str(ws), "--max-requests", "40", *QUIET)
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    return spec, ws


def _garble(path: Path, start_fraction: float, pages: int) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(int(size * start_fraction) // 4096 * 4096)
        fh.write(os.urandom(4096 * pages))


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize(
    "damage",
    ["garbled", "truncated", "not_a_database"],
)
def test_a_damaged_state_file_is_one_line_in_status_and_crawl(
    crawled: tuple[Path, Path], damage: str
) -> None:
    spec, ws = crawled
    state = ws / "state.sqlite"
    with Workspace.open(ws, create=False, readonly=True):
        pass  # closed: everything is checkpointed into state.sqlite
    if damage == "garbled":
        _garble(state, 0.3, 40)  # pages past the schema: open() alone would not notice
    elif damage == "truncated":
        os.truncate(state, state.stat().st_size // 2)
    else:
        _garble(state, 0.0, 1)
    status = _cli("status", "cases", "--workspace", str(ws))
    assert status.returncode == EXIT_HALTED, status.stderr[-2000:]
    line = _one_clean_line(status.stderr, "damaged")
    assert "restore the workspace folder from a backup, or start over with" in line
    crawl = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET)
    assert crawl.returncode == EXIT_HALTED, crawl.stderr[-2000:]
    _one_clean_line(crawl.stderr, "damaged")
    requeue = _cli("requeue", "cases", "--workspace", str(ws))
    assert requeue.returncode == EXIT_HALTED, requeue.stderr[-2000:]
    _one_clean_line(requeue.stderr, "damaged")

    # --fresh starts over: the damaged file is set aside, not deleted
    fresh = _cli("crawl", str(spec), "--workspace", str(ws), "--fresh", *QUIET)
    assert fresh.returncode == EXIT_HALTED, fresh.stderr[-2000:]  # the demo's broken pages
    assert "rows in error" in fresh.stderr
    assert any(p.name.startswith("state.sqlite.damaged-") for p in ws.iterdir())


@pytest.mark.slow
@pytest.mark.process
def test_lost_commits_are_flagged_by_status_and_refused_by_crawl(
    crawled: tuple[Path, Path],
) -> None:
    spec, ws = crawled
    state = ws / "state.sqlite"
    older = ws.parent / "older.sqlite"
    shutil.copyfile(state, older)  # closed: the copy is whole
    r = _cli("crawl", str(spec), "--workspace", str(ws), "--max-requests", "40", *QUIET)
    assert r.returncode == EXIT_CHECKPOINT, r.stderr[-2000:]
    # what a deleted WAL after a kill leaves: the database of an earlier commit
    shutil.copyfile(older, state)
    for suffix in ("-wal", "-shm"):
        Path(f"{state}{suffix}").unlink(missing_ok=True)

    status = _cli("status", "cases", "--workspace", str(ws), "--json")
    assert status.returncode == EXIT_HALTED
    line = _one_clean_line(status.stderr, "ok rows that state.sqlite lacks")
    assert "restore the workspace folder from a backup, or start over with" in line
    report = json.loads(status.stdout)
    assert report["state"] == "broken"
    assert report["integrity"]["lost_ok_rows"] > 0
    lines = len(url_log(ws))
    crawl = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET)
    assert crawl.returncode == EXIT_HALTED, crawl.stderr[-2000:]
    _one_clean_line(crawl.stderr, "ok rows that state.sqlite lacks")
    assert len(url_log(ws)) == lines  # refused before any request

    fresh = _cli("crawl", str(spec), "--workspace", str(ws), "--fresh", *QUIET)
    assert fresh.returncode == EXIT_HALTED, fresh.stderr[-2000:]
    assert "rows in error" in fresh.stderr
    after = _cli("status", "cases", "--workspace", str(ws), "--json")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["integrity"]["whole"] is True


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("how", ["empty", "missing"])
def test_a_lost_state_file_is_not_silently_started_over(
    crawled: tuple[Path, Path], how: str
) -> None:
    spec, ws = crawled
    state = ws / "state.sqlite"
    with Workspace.open(ws, create=False, readonly=True):
        pass
    if how == "empty":
        os.truncate(state, 0)
    else:
        state.unlink()
    crawl = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET)
    assert crawl.returncode == EXIT_HALTED, crawl.stderr[-2000:]
    _one_clean_line(crawl.stderr, f"the state file is {how} but urls.jsonl names requests")
    fresh = _cli("crawl", str(spec), "--workspace", str(ws), "--fresh", *QUIET)
    assert fresh.returncode == EXIT_HALTED, fresh.stderr[-2000:]  # the demo's broken pages
    assert "rows in error" in fresh.stderr
    again = _cli("crawl", str(spec), "--workspace", str(ws), *QUIET)
    assert again.returncode == EXIT_HALTED, again.stderr[-2000:]
    assert "ok rows that state.sqlite lacks" not in again.stderr  # the old lines are history


KILLED = """
import os, sys, time
from framework.workspace import NewRow, Outcome, Workspace, utc_now
from framework.workspace.sqlite_base import CHECKPOINT_EVERY

ws = Workspace.open(sys.argv[1])
rows = ws.store.seed([NewRow("detail", f"http://site/{i}") for i in range(CHECKPOINT_EVERY + 5)])
for n, row in enumerate(rows, 1):
    res = ws.store.commit(Outcome(row.id, ok=True, http_status=200))
    ws.urls.append({"time": utc_now(), "url": row.url, "outcome": "ok", "row": row.id,
                    "attempt": res.attempt})
    if n == CHECKPOINT_EVERY:  # this commit asks for a checkpoint: let it finish, no other runs
        while ws.store._checkpointer is None or ws.store._checkpointer.runs < 1:
            time.sleep(0.01)
os._exit(0)  # as kill -9 would: no close, so the last commits live in the WAL only
"""


@pytest.mark.kill
def test_a_wal_deleted_after_a_kill_is_flagged(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs.run([*CLI[:1], "-c", KILLED, str(ws)], env=env, check=True, timeout=60)
    wal = ws / "state.sqlite-wal"
    assert wal.stat().st_size > 0
    wal.unlink()
    (ws / "state.sqlite-shm").unlink(missing_ok=True)
    status = _cli("status", "x", "--workspace", str(ws), "--json")
    assert status.returncode == EXIT_HALTED, status.stderr[-2000:]
    line = _one_clean_line(status.stderr, "ok rows that state.sqlite lacks")
    lost = list(range(CHECKPOINT_EVERY + 1, CHECKPOINT_EVERY + 6))
    named = ", ".join(map(str, lost))
    assert f"urls.jsonl names 5 ok rows that state.sqlite lacks (row {named})" in line
    report = json.loads(status.stdout)
    assert report["integrity"]["lost_examples"] == lost
    assert report["rows"]["by_status"]["ok"] == CHECKPOINT_EVERY
