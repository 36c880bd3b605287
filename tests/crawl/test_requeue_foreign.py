"""`framework requeue` on a SQLite file that is not a framework workspace: a clear
one-line error, exit 2 (WorkspaceError), and not one byte of the folder changed (no
schema added to the foreign database, no WAL switch, no lock file, no events.jsonl).

Through the real CLI in a child process, on real SQLite files.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from framework.workspace import Workspace
from tests.fixtures.crawl import run_cli

EXIT_USAGE = 2


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _foreign(folder: Path, schema: str) -> Path:
    folder.mkdir(parents=True)
    path = folder / "state.sqlite"
    con = sqlite3.connect(path)
    try:
        con.executescript(schema)
        con.commit()
    finally:
        con.close()
    return path


def _requeue(home: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (home / "projects").mkdir(exist_ok=True)
    return run_cli("requeue", "cases", "--workspace", str(folder), *extra, cwd=home, timeout=60)


@pytest.mark.process
@pytest.mark.parametrize(
    "schema",
    [
        # an application's database: nothing of ours in it
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
        "INSERT INTO customers (name) VALUES ('ada'), ('grace');",
        # tables named like ours, but no schema version: still not a workspace
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO meta VALUES ('owner', 'someone else');"
        "CREATE TABLE rows (id INTEGER PRIMARY KEY, url TEXT, status TEXT);"
        "INSERT INTO rows (url, status) VALUES ('http://x/', 'error');",
        # an empty database file
        "",
    ],
    ids=["app", "lookalike", "empty"],
)
@pytest.mark.parametrize("extra", [(), ("--clear-deferrals",), ("--kind", "detail")])
def test_requeue_refuses_a_foreign_sqlite_file_and_touches_nothing(
    tmp_path: Path, schema: str, extra: tuple[str, ...]
) -> None:
    folder = tmp_path / "elsewhere"
    state = _foreign(folder, schema)
    before = _snapshot(folder)

    r = _requeue(tmp_path, folder, *extra)

    assert r.returncode == EXIT_USAGE, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), lines
    assert "not a framework workspace" in lines[0], lines
    assert str(state) in lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
    assert _snapshot(folder) == before  # same files, same bytes: nothing created or written


@pytest.mark.process
def test_requeue_of_a_plain_file_named_as_the_workspace_is_refused(tmp_path: Path) -> None:
    """``--workspace`` naming the SQLite file itself (not its folder)."""
    state = _foreign(tmp_path / "elsewhere", "CREATE TABLE t (x);")
    before = state.read_bytes()
    r = _requeue(tmp_path, state)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert state.read_bytes() == before
    assert sorted(p.name for p in state.parent.iterdir()) == ["state.sqlite"]


@pytest.mark.process
def test_requeue_still_works_on_a_real_workspace(tmp_path: Path) -> None:
    """The check does not refuse what it guards: a workspace made by the framework."""
    folder = tmp_path / "ws"
    with Workspace.open(folder) as ws:
        ws.store.set_meta("max_attempts", "2")
    r = _requeue(tmp_path, folder)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("requeued 0 rows: no row matches all of: status error")


SPEC = """\
name: cases
source_type: cases
start_urls: ["http://127.0.0.1:9/list"]
detail:
  id: "#id::text"
  fields: {t: "h1::text"}
"""


@pytest.mark.process
@pytest.mark.parametrize(
    "command",
    [
        ("crawl", "cases"),
        ("ship", "cases", "--dry-run"),
        ("review", "cases", "accept", "k1"),
        ("status", "cases"),
        ("export", "cases", "-o", "-"),
        ("reparse", "cases"),
    ],
    ids=lambda c: c[0],
)
def test_every_command_refuses_an_application_database_and_touches_nothing(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The refusal is in the store's open (before the WAL switch and the schema), so a
    command that opens the workspace for writing cannot change a foreign file either."""
    spec = tmp_path / "projects" / "cases" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC, encoding="utf-8")
    folder = tmp_path / "elsewhere"
    _foreign(folder, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
    before = _snapshot(folder)

    r = run_cli(*command, "--workspace", str(folder), cwd=tmp_path, timeout=60)

    assert r.returncode == EXIT_USAGE, (r.stdout, r.stderr)
    assert "not a framework workspace" in r.stderr or "not a workspace" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert _snapshot(folder) == before
