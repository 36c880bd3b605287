"""`framework workspace copy SRC DST`: a job started on SQLite continues on PostgreSQL
without fetching again what it had, and comes back; a destination that is not empty is
refused; a password in the URL is never printed."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, workspace_items
from tests.fixtures.workspace_backends import Backend

PASSWORD = "copy-pw-h25"
QUIET = ("-L", "WARNING")


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    r = procs.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert PASSWORD not in r.stdout + r.stderr
    return r


def _hits(site: Any) -> Counter[str]:
    return Counter(
        {
            f"{r['method']} {r['target']}": r["count"]
            for r in site.stats()["requests"]
            if r["target"] != "/robots.txt"
        }
    )


def _with_password(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:{PASSWORD}@{host}"))


@pytest.mark.pg
@pytest.mark.process
def test_a_job_moves_to_postgresql_and_back_without_fetching_again(
    make_site, good_spec, tmp_path, make_workspace_backend: Callable[[str], Backend]
):
    cluster = _with_password(make_workspace_backend("postgres").where)  # or skip, first
    site = make_site(cases=30, edge_cases=False)
    spec = good_spec("cases", site.url, tmp_path)
    reference = tmp_path / "reference"
    assert _run("crawl", str(spec), "--workspace", str(reference), *QUIET).returncode == 0
    pages = _hits(site)
    site.reset_stats()

    laptop = tmp_path / "laptop"
    started = _run("crawl", str(spec), "--workspace", str(laptop), "--max-requests", "40", *QUIET)
    assert started.returncode == 3, started.stderr  # a checkpoint: rows left pending
    moved = _run("workspace", "copy", str(laptop), cluster)
    assert moved.returncode == 0, moved.stderr
    assert "[redacted]" in moved.stderr
    with Workspace.open(cluster, create=False, readonly=True) as ws:
        assert len(list(ws.urls)) == 40  # the URL log came along
    again = _run("workspace", "copy", str(laptop), cluster)
    assert again.returncode == 2
    assert "empty" in again.stderr

    finished = _run("crawl", str(spec), "--workspace", cluster, *QUIET)
    assert finished.returncode == 0, finished.stderr
    assert _hits(site) == pages  # each page once, across both machines
    assert workspace_items(cluster) == workspace_items(reference)

    with Workspace.open(cluster, create=False, readonly=True) as ws:
        logged = list(ws.urls)
    assert len(logged) == sum(pages.values())  # 40 on the laptop, the rest on the cluster
    back = tmp_path / "back"
    returned = _run("workspace", "copy", cluster, str(back))
    assert returned.returncode == 0, returned.stderr
    assert workspace_items(back) == workspace_items(reference)
    status = _run("status", "fixture-cases", "--workspace", str(back), "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert '"done": true' in status.stdout
    with Workspace.open(back, create=False, readonly=True) as ws:
        assert list(ws.urls) == logged
