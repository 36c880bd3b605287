"""The dashboard served for real (uvicorn on 127.0.0.1 port 0, in this process) over a
workspace built in-process: the pages, the event stream and its resumption by
``Last-Event-ID``, the masking, the headers that keep a page offline, /metrics."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from framework.workspace import Workspace
from tests.plugins.dashboard.helpers import SECRET, Stream, build_workspace, get, serve


def _project(tmp_path: Path) -> Path:
    spec = tmp_path / "projects" / "shop" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text("name: shop\nsource_type: s\n", encoding="utf-8")
    (tmp_path / "projects" / "later").mkdir()
    (tmp_path / "projects" / "later" / "job.yaml").write_text(
        "name: later\nsource_type: s\n", encoding="utf-8"
    )
    build_workspace(tmp_path / "var" / "shop").close()
    return tmp_path


def test_the_list_page_shows_every_job_with_its_state(tmp_path: Path) -> None:
    with serve(_project(tmp_path)) as (server, _):
        status, headers, body = get(server.url + "/")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    shop = re.search(r'<tr data-job="shop">.*?</tr>', body)
    later = re.search(r'<tr data-job="later">.*?</tr>', body)
    assert shop
    assert later
    assert 'data-field="state">unfinished' in shop.group(0)
    assert 'data-field="rows">7<' in shop.group(0)
    assert 'data-field="state">no_workspace' in later.group(0)
    assert "read-only, serving on 127.0.0.1" in body


def test_a_job_page_shows_its_rows_misbehaving_urls_and_no_secret(tmp_path: Path) -> None:
    with serve(_project(tmp_path)) as (server, _):
        status, headers, body = get(server.url + "/jobs/shop")
        assert get(server.url + "/jobs/nope")[0] == 404
        assert get(server.url + "/jobs/..%2Fetc")[0] == 404
        _, _, report = get(server.url + "/api/jobs/shop")
    assert status == 200
    assert '<td class="num" data-k="list" data-s="ok">1</td>' in body
    assert '<td class="num" data-k="detail" data-s="pending">4</td>' in body
    assert "http_4xx" in body
    assert "HTTP 404 at http://127.0.0.1:9/list?page=2" in body
    assert SECRET not in body
    assert SECRET not in report
    # offline and inert: no inline script, nothing from another origin
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert re.findall(r"<script[^>]*>", body) == ['<script src="/static/dashboard.js" defer>']
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", body)


def test_a_hostile_note_is_text_on_the_page_never_markup(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with Workspace.open(root / "var" / "shop") as ws:
        ws.events.append({"event": "row_failed", "error": "<img src=x onerror=alert(1)>"})
    with serve(root) as (server, _):
        _, _, body = get(server.url + "/jobs/shop")
    assert "<img src=x" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body


def test_the_stream_sends_new_lines_and_resumes_after_the_last_event_id(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with serve(root) as (server, _):
        _, _, page = get(server.url + "/jobs/shop")
        cursor = re.search(r'data-cursor="(\d+)"', page)
        assert cursor is not None
        stream = Stream(f"{server.url}/jobs/shop/stream?after={cursor.group(1)}")
        assert stream.content_type.startswith("text/event-stream")
        first = stream.until(lambda m: m.get("event") == "progress")
        assert first[0].get("retry") == "2000"
        assert first[-1]["data"]["rows"]["by_status"] == {"pending": 5, "ok": 1, "error": 1}
        with Workspace.open(root / "var" / "shop") as ws:
            for n in range(3):
                ws.events.append({"event": "tick", "n": n, "url": f"http://h/?token={SECRET}"})
        got = stream.until(lambda m: m.get("event") == "log" and m["data"]["n"] == 2)
        logs = [m for m in got if m.get("event") == "log"]
        assert [m["data"]["n"] for m in logs] == [0, 1, 2]  # none before the page's cursor
        assert SECRET not in str(logs)
        stream.close()
        # the browser reconnects with the id of the last line it saw: the rest follows
        with Workspace.open(root / "var" / "shop") as ws:
            ws.events.append({"event": "tick", "n": 3})
        again = Stream(
            f"{server.url}/jobs/shop/stream?after={cursor.group(1)}",
            headers={"Last-Event-ID": logs[0]["id"]},
        )
        resumed = again.until(lambda m: m.get("event") == "log" and m["data"]["n"] == 3)
        assert [m["data"]["n"] for m in resumed if m.get("event") == "log"] == [1, 2, 3]
        again.close()


def test_metrics_parse_and_agree_with_the_workspace(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with Workspace.open(root / "var" / "shop") as ws:
        ws.urls.append({"url": "http://127.0.0.1:9/list?page=1", "outcome": "ok", "kind": "list"})
        ws.urls.append(
            {"url": "http://127.0.0.1:9/list?page=2", "outcome": "http_4xx", "kind": "list"}
        )
    with serve(root) as (server, _):
        status, headers, text = get(server.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rows = {
        (s.labels["kind"], s.labels["state"]): s.value
        for s in families["framework_rows"].samples
        if s.labels["job"] == "shop"
    }
    assert rows[("list", "ok")] == 1
    assert rows[("list", "error")] == 1
    assert rows[("detail", "pending")] == 4
    assert families["framework_pages"].type == "counter"
    (pages,) = [s for s in families["framework_pages"].samples if s.name.endswith("_total")]
    assert pages.value == 2
    (errors,) = [s for s in families["framework_errors"].samples if s.name.endswith("_total")]
    assert errors.labels == {"job": "shop", "kind": "list", "error": "http_4xx"}
    up = {s.labels["job"]: s.value for s in families["framework_job_up"].samples}
    assert up == {"shop": 1.0, "later": 0.0}
