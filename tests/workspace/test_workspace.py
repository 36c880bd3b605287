"""Workspace: the folder, read-only opening during a crawl, locks, spec hash, public door."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import framework.workspace as public
from framework.errors import LockHeld, WorkspaceError
from framework.workspace import NewRow, Outcome, RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import run_cli
from tests.paths import REPO


def test_open_creates_the_folder_and_its_files(tmp_path: Path) -> None:
    path = tmp_path / "var" / "cases"
    with Workspace.open(path) as ws:
        assert ws.path == path
        assert ws.state_path == path / "state.sqlite"
        ws.events.append({"event": "run_started"})
        ws.urls.append({"url": "http://site/"})
        assert ws.ship_log_path == path / "ship-log.jsonl"
    assert {p.name for p in path.iterdir()} >= {"state.sqlite", "events.jsonl", "urls.jsonl"}


def test_missing_workspace_is_an_error_without_create_or_readonly(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="no workspace"):
        Workspace.open(tmp_path / "nope", create=False)
    with pytest.raises(WorkspaceError, match="no workspace"):
        Workspace.open(tmp_path / "nope", readonly=True)
    assert not (tmp_path / "nope").exists()


def test_a_file_in_place_of_the_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "ws").write_text("x")
    with pytest.raises(WorkspaceError, match="not a folder"):
        Workspace.open(tmp_path / "ws")


WRITER = textwrap.dedent(
    """
    import sys
    from framework.workspace import NewRow, Outcome, Workspace

    ws = Workspace.open(sys.argv[1])
    rows = ws.store.seed([NewRow("detail", f"http://site/{i}") for i in range(10)])
    ws.store.commit(Outcome(rows[0].id, ok=True))
    print("ready", flush=True)
    sys.stdin.readline()  # hold the database open (a running crawl) until told
    ws.store.commit(Outcome(rows[1].id, ok=True))
    print("done", flush=True)
    sys.stdin.readline()
    """
)


@pytest.mark.kill
def test_readonly_workspace_reads_a_live_crawl(tmp_path: Path) -> None:
    path = tmp_path / "ws"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = procs.popen(
        [sys.executable, "-c", WRITER, str(path)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin
    assert proc.stdout
    try:
        assert proc.stdout.readline().strip() == "ready"
        with Workspace.open(path, readonly=True) as ws:
            assert ws.store.row_counts() == {"detail": {RowStatus.OK: 1, RowStatus.PENDING: 9}}
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "done"
            assert ws.store.row_counts()["detail"][RowStatus.OK] == 2
            with pytest.raises(WorkspaceError, match="read-only"):
                ws.store.set_meta("x", "y")
    finally:
        proc.kill()
        proc.wait()


def test_readonly_open_of_a_closed_workspace_in_a_readonly_folder(tmp_path: Path) -> None:
    path = tmp_path / "ws"
    with Workspace.open(path) as ws:
        (row,) = ws.store.seed([NewRow("list", "http://site/")])
        ws.store.commit(Outcome(row.id, ok=True))
    path.chmod(0o555)
    # root (as in CI) ignores the mode bits, so also check directly that a read-only
    # open writes nothing: the database is byte for byte the same and no file appears
    # but SQLite's own WAL index (which a reader of a live WAL needs)
    before = {p.name for p in path.iterdir()}
    db = (path / "state.sqlite").read_bytes()
    try:
        with Workspace.open(path, readonly=True) as ws:
            assert ws.store.row_counts() == {"list": {RowStatus.OK: 1}}
    finally:
        path.chmod(0o755)
    assert {p.name for p in path.iterdir()} - before <= {"state.sqlite-wal", "state.sqlite-shm"}
    assert (path / "state.sqlite").read_bytes() == db
    wal = path / "state.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # nothing was written to the log


def test_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    with Workspace.open(tmp_path / "ws") as ws:
        with ws.lock("crawl") as info:
            assert info["pid"] == os.getpid()
            assert ws.lock_holder("crawl") == info
            with pytest.raises(LockHeld, match=f"held by pid {os.getpid()}"), ws.lock("crawl"):
                pass
            with ws.lock("ship"):  # another name is another lock
                pass
        assert ws.lock_holder("crawl") is None
        with ws.lock("crawl"):  # released: taken again
            pass
        with pytest.raises(ValueError, match="bad lock name"), ws.lock("../x"):
            pass


HOLDER = textwrap.dedent(
    """
    import sys, time
    from framework.workspace import Workspace

    ws = Workspace.open(sys.argv[1])
    with ws.lock("crawl"):
        print("locked", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.kill
def test_lock_held_by_another_process_and_dropped_when_it_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "ws"
    Workspace.open(path).close()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = procs.popen(
        [sys.executable, "-c", HOLDER, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout
    try:
        assert proc.stdout.readline().strip() == "locked"
        with Workspace.open(path) as ws:
            with pytest.raises(LockHeld, match=f"pid {proc.pid}") as caught, ws.lock("crawl"):
                pass
            assert caught.value.exit_code == 3
            assert ws.lock_holder("crawl")["pid"] == proc.pid  # type: ignore[index]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert ws.lock_holder("crawl") is None  # the text stays, its pid is gone
            with ws.lock("crawl") as info:
                assert info["pid"] == os.getpid()
    finally:
        proc.kill()
        proc.wait()


def test_record_spec_says_when_the_spec_changed(tmp_path: Path) -> None:
    with Workspace.open(tmp_path / "ws") as ws:
        assert ws.spec_hash() is None
        assert ws.record_spec("sha256:aaa") is False  # first record: nothing changed
        assert ws.record_spec("sha256:aaa") is False
        assert ws.record_spec("sha256:bbb") is True
        assert ws.spec_hash() == "sha256:bbb"
        assert [h["hash"] for h in ws.spec_history()] == ["sha256:aaa", "sha256:bbb"]
    with Workspace.open(tmp_path / "ws", readonly=True) as ws:
        assert ws.spec_hash() == "sha256:bbb"


def test_public_door() -> None:
    assert sorted(public.__all__) == sorted(
        [
            "Workspace",
            "JsonlLog",
            "SqliteStore",
            "Store",
            "RequeueFilter",
            "RowStatus",
            "ErrorKind",
            "NewRow",
            "Row",
            "Outcome",
            "ItemWrite",
            "PartWrite",
            "CommitResult",
            "StoredItem",
            "content_hash",
            "canonical_json",
            "redact",
            "redact_url",
            "utc_now",
            # what plugins read a workspace with (docs/architecture.md, "What plugins
            # may use"; the import contracts hold them to it)
            "is_database_url",
            "last_extraction",
            "rates",
            "build_status",
            "pid_alive",
            "PgBase",
        ]
    )
    for name in public.__all__:
        assert getattr(public, name) is not None


def test_sqlite_store_satisfies_the_store_protocol(tmp_path: Path) -> None:
    from framework.workspace.store import Store

    members = [
        n for n in vars(Store) if not n.startswith("_") and callable(getattr(Store, n, None))
    ]
    assert len(members) >= 15
    with Workspace.open(tmp_path / "ws") as ws:
        for name in members:
            assert callable(getattr(ws.store, name)), name


# symlinks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["events.jsonl", "urls.jsonl", "crawl.lock", "state.sqlite", "state.sqlite-wal"]
)
def test_nothing_is_written_through_a_symlink_in_the_workspace(tmp_path: Path, name: str) -> None:
    """A copied workspace holding a link named like one of its files (here to a shell's
    rc file): the target keeps every byte, and the error names the link."""
    ws = tmp_path / "ws"
    with Workspace.open(ws) as w:
        w.events.append({"event": "first"})
    (ws / name).unlink(missing_ok=True)
    target = tmp_path / "bashrc"
    target.write_bytes(b"# mine\n")
    (ws / name).symlink_to(target)

    def write_everything() -> None:
        with Workspace.open(ws) as w, w.lock("crawl"):
            w.events.append({"event": "x$(touch${IFS}pwned)"})
            w.urls.append({"url": "http://site/"})

    with pytest.raises(WorkspaceError, match="is a symbolic link") as caught:
        write_everything()
    assert str(ws / name) in str(caught.value)
    assert target.read_bytes() == b"# mine\n"


def test_new_workspace_files_are_private(tmp_path: Path) -> None:
    with Workspace.open(tmp_path / "ws") as w, w.lock("crawl"):
        w.events.append({"event": "first"})
    for name in ("events.jsonl", "crawl.lock"):
        assert (tmp_path / "ws" / name).stat().st_mode & 0o777 == 0o600, name


@pytest.mark.process
def test_a_crawl_into_a_workspace_holding_a_link_stops_in_one_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    with Workspace.open(ws) as w:
        w.events.append({"event": "first"})
    (ws / "events.jsonl").unlink()
    target = tmp_path / "profile"
    target.write_bytes(b"# mine\n")
    (ws / "events.jsonl").symlink_to(target)
    r = run_cli("crawl", "demo", "--workspace", str(ws), "-q", cwd=REPO)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        f"error: {ws / 'events.jsonl'} is a symbolic link: the framework never writes "
        "through one (it would write wherever the link points); replace it with a file "
        "or remove it"
    ]
    assert target.read_bytes() == b"# mine\n"
