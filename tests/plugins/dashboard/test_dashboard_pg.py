"""The dashboard over a PostgreSQL workspace shared by several workers: the last run is
every worker's (their fill counts summed, not the newest worker's alone), the stream
resumes by the log table's ids, and the URL's password never reaches a page; and two
real crawl workers on one database, whose findings the page and /metrics sum."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from framework.errors import FrameworkError
from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, run_cli
from tests.fixtures.wait import wait_for
from tests.fixtures.workspace_backends import Backend
from tests.plugins.dashboard.helpers import (
    SECRET,
    Stream,
    assert_every_worker_counted,
    build_workspace,
    get,
    serve,
    url_lines,
    worker_ends,
)

pytestmark = pytest.mark.pg

PASSWORD = "pg-dash-pw-4410"
JOB = "fixture-cases"


def _with_password(url: str) -> str:
    parts = urlsplit(url)  # the test server trusts the connection: any password works
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:{PASSWORD}@{host}"))


def test_a_database_workspace_of_several_workers(
    make_workspace_backend: Callable[[str], Backend], tmp_path: Path
) -> None:
    url = _with_password(make_workspace_backend("postgres").where)
    with build_workspace(url, job="far") as ws:
        for worker in (1, 2, 3):
            ws.events.append({"event": "run_started", "worker": worker})
        for worker, records in ((1, 5), (2, 7)):  # worker 3 was killed: no end
            ws.events.append(
                {
                    "event": "run_finished",
                    "worker": worker,
                    "reason": "finished",
                    "counts": {"requests": records},
                    "fill": {"detail": {"pages": records, "records": records,
                                        "fields": {"title": records}}},
                }
            )  # fmt: skip
    (tmp_path / "projects").mkdir()
    with serve(tmp_path, targets={"far": url}) as (server, _):
        _, _, listing = get(server.url + "/")
        _, _, page = get(server.url + "/jobs/far")
        _, _, api = get(server.url + "/api/jobs/far")
        report = json.loads(api)
        assert report["run_findings"]["workers"] == 2
        assert report["run_findings"]["fill"]["detail"]["records"] == 12
        assert report["run_findings"]["counts"] == {"requests": 12}
        assert report["rows"]["by_status"] == {"pending": 5, "ok": 1, "error": 1}
        assert "summed over 2 workers" in page
        assert '<td class="num" data-k="detail" data-s="pending">4</td>' in page
        for text in (listing, page, api):
            assert PASSWORD not in text
            assert SECRET not in text
        cursor = re.search(r'data-cursor="(\d+)"', page)
        assert cursor is not None
        assert int(cursor.group(1)) > 0
        with Workspace.open(url, create=False) as ws:
            for n in range(3):
                ws.events.append({"event": "tick", "n": n})
        stream = Stream(f"{server.url}/jobs/far/stream?after={cursor.group(1)}")
        got = stream.until(lambda m: m.get("event") == "log" and m["data"]["n"] == 2)
        logs = [m for m in got if m.get("event") == "log"]
        assert [m["data"]["n"] for m in logs] == [0, 1, 2]
        stream.close()
        again = Stream(f"{server.url}/jobs/far/stream", headers={"Last-Event-ID": logs[1]["id"]})
        rest = again.until(lambda m: m.get("event") == "log")
        assert [m["data"]["n"] for m in rest if m.get("event") == "log"] == [2]
        again.close()


@pytest.mark.process
@pytest.mark.slow
def test_two_crawl_workers_on_a_database_show_summed(
    make_workspace_backend: Callable[[str], Backend],
    make_site: Any,
    good_spec: Any,
    tmp_path: Path,
) -> None:
    """Two ``framework crawl --workspace postgresql://...`` at once (each a worker of the
    database): the page and /metrics show status's totals and both workers' findings
    summed; the password reaches neither."""
    url = _with_password(make_workspace_backend("postgres").where)
    # slow answers until both workers have started, so that neither finds the job done
    site = make_site(cases=24, delay=1.0)
    good_spec("cases", site.url, tmp_path)
    args = [*CLI, "crawl", JOB, "--workspace", url, "-q", "-s", "CONCURRENT_REQUESTS=2"]
    args += ["-s", "FRAMEWORK_RETRY_BACKOFF_BASE=0.05", "-s", "FRAMEWORK_RETRY_BACKOFF_MAX=0.1"]
    workers = [
        procs.popen(
            args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        wait_for(lambda: len(_starts(url)) == 2, 120, "both workers started")
        site.set_faults((), delay=0.05)
        for worker in workers:
            _, err = worker.communicate(timeout=300)
            assert worker.returncode in (0, 4), err  # 4: the site's edge cases
            assert PASSWORD not in err
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=30)
    r = run_cli("status", JOB, "--workspace", url, "--json", cwd=tmp_path)
    assert r.returncode in (0, 4), r.stderr
    status = json.loads(r.stdout)
    with serve(tmp_path, targets={JOB: url}) as (server, _):
        assert_every_worker_counted(server.url, JOB, status, worker_ends(url), url_lines(url))
        for path in ("/metrics", f"/jobs/{JOB}", f"/api/jobs/{JOB}"):
            assert PASSWORD not in get(server.url + path)[2]


def _starts(url: str) -> list[dict[str, Any]]:
    """The workers' starts in the database's event log (none before it is made)."""
    import psycopg

    try:
        with Workspace.open(url, create=False, readonly=True) as ws:
            return [e for e in ws.events if e.get("event") in ("run_started", "run_resumed")]
    except (FrameworkError, psycopg.Error):  # not made yet, or being made
        return []
