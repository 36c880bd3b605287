"""The dashboard over a PostgreSQL workspace shared by several workers: the last run is
every worker's (their fill counts summed, not the newest worker's alone), the stream
resumes by the log table's ids, and the URL's password never reaches a page."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from framework.workspace import Workspace
from tests.fixtures.workspace_backends import Backend
from tests.plugins.dashboard.helpers import SECRET, Stream, build_workspace, get, serve

pytestmark = pytest.mark.pg

PASSWORD = "pg-dash-pw-4410"


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
