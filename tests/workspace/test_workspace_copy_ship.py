"""`framework workspace copy` moves the ship step's state too: a job crawled and shipped
on a laptop (a folder) and copied to PostgreSQL ships nothing again there, nor after
coming back to a folder; the ship log comes along line for line. A destination with a
ship log of its own is refused. Real crawl, real ingest server, real PostgreSQL
(FRAMEWORK_TEST_PG; skips without it unless FRAMEWORK_REQUIRE_PG=1)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI
from tests.fixtures.ingest import IngestServer
from tests.fixtures.workspace_backends import Backend

pytestmark = pytest.mark.pg

TOKEN = "tok-copy-ship-4d1e-secret"
QUIET = ("-L", "WARNING")


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INGEST_TOKEN": TOKEN}
    return procs.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _ship(where: str, server: IngestServer, cwd: Path) -> subprocess.CompletedProcess[str]:
    r = _run(
        "ship", "fixture-cases", "--workspace", where, "--endpoint", server.url,
        "--token-env", "INGEST_TOKEN", cwd=cwd,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert TOKEN not in r.stdout + r.stderr
    return r


def _pg_count(url: str, table: str) -> int:
    import psycopg  # the postgres extra; imported only when PostgreSQL is used

    with psycopg.connect(url, autocommit=True) as conn:
        got = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert got is not None
    return int(got[0])


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _server_state(server: IngestServer) -> list[tuple[Any, ...]]:
    return [(r["dedupe_key"], r["content_hash"], r["version"]) for r in server.rows()]


def test_a_shipped_job_moves_to_postgresql_and_back_and_ships_nothing_again(
    make_site: Any,
    good_spec: Any,
    tmp_path: Path,
    make_workspace_backend: Callable[[str], Backend],
    make_ingest_server: Callable[..., IngestServer],
) -> None:
    cluster = make_workspace_backend("postgres").where  # or skip, first
    site = make_site(cases=12, edge_cases=False)
    spec = good_spec("cases", site.url, tmp_path)
    laptop = tmp_path / "laptop"
    crawled = _run("crawl", str(spec), "--workspace", str(laptop), *QUIET)
    assert crawled.returncode == 0, crawled.stderr
    with Workspace.open(laptop, create=False, readonly=True) as ws:
        n = sum(1 for _ in ws.store.iter_items())
    assert n > 0

    server = make_ingest_server(token=TOKEN)
    first = _ship(str(laptop), server, tmp_path)
    assert f"accepted {n}," in first.stdout
    delivered = _server_state(server)
    assert len(delivered) == n
    history = _lines(laptop / "ship-log.jsonl")
    assert len(history) == n

    moved = _run("workspace", "copy", str(laptop), cluster)
    assert moved.returncode == 0, moved.stderr
    assert f"{n} ship log lines" in moved.stderr
    assert _pg_count(cluster, "ship_log") == n
    assert _pg_count(cluster, "ship_latest") == n
    assert _pg_count(cluster, "shippers WHERE summary IS NOT NULL") == 1  # the last run

    on_cluster = _ship(cluster, server, tmp_path)
    assert f"accepted 0, updated 0, duplicate 0, skipped {n}," in on_cluster.stdout
    assert _pg_count(cluster, "ship_log") == n  # no attempt was made
    assert _server_state(server) == delivered

    back = tmp_path / "back"
    returned = _run("workspace", "copy", cluster, str(back))
    assert returned.returncode == 0, returned.stderr
    assert _lines(back / "ship-log.jsonl") == history  # the same lines, in order
    at_home = _ship(str(back), server, tmp_path)
    assert f"accepted 0, updated 0, duplicate 0, skipped {n}," in at_home.stdout
    assert _lines(back / "ship-log.jsonl") == history
    assert _server_state(server) == delivered


def test_a_destination_with_a_ship_log_is_refused_before_anything_is_copied(
    make_site: Any,
    good_spec: Any,
    tmp_path: Path,
    make_workspace_backend: Callable[[str], Backend],
) -> None:
    make_workspace_backend("postgres")  # or skip, first: the suite is PostgreSQL's
    site = make_site(cases=3, edge_cases=False)
    spec = good_spec("cases", site.url, tmp_path)
    laptop = tmp_path / "laptop"
    assert _run("crawl", str(spec), "--workspace", str(laptop), *QUIET).returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    leftover = b'{"v":1,"dedupe_key":"x:1","content_hash":"sha256:00","outcome":"accepted"}\n'
    (other / "ship-log.jsonl").write_bytes(leftover)

    refused = _run("workspace", "copy", str(laptop), str(other))
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "already has a ship log" in refused.stderr
    assert (other / "ship-log.jsonl").read_bytes() == leftover
    with Workspace.open(other, create=False, readonly=True) as ws:
        assert next(iter(ws.store.iter_items()), None) is None  # no state was copied
