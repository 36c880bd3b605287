"""The dashboard served for real (uvicorn on 127.0.0.1 port 0, in this process) over a
workspace built in-process: the pages, the event stream and its resumption by
``Last-Event-ID``, the masking, the headers that keep a page offline, /metrics."""

from __future__ import annotations

import re
from pathlib import Path

from framework_dashboard.pages import eta_text
from prometheus_client.parser import text_string_to_metric_families

from framework.workspace import ItemWrite, Outcome, RowStatus, Workspace
from tests.paths import REPO
from tests.plugins.dashboard.helpers import (
    SECRET,
    Stream,
    build_workspace,
    by_label,
    get,
    samples,
    serve,
)


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


def _commit_ok(ws: Workspace, kind: str, n: int, *, items: bool = False) -> None:
    """``n`` pending rows of ``kind`` fetched fine (one complete item each, if asked)."""
    rows = list(ws.store.iter_rows(RowStatus.PENDING, kind))[:n]
    assert len(rows) == n
    for row in rows:
        key = f"t:{row.id}"
        made = [ItemWrite(key, "t", str(row.id), {"title": f"case {row.id}"})] if items else []
        ws.store.commit(Outcome(row.id, ok=True, http_status=200, items=made))
        ws.urls.append({"url": row.url, "outcome": "ok", "kind": kind, "row": row.id})


def test_pages_items_per_second_and_the_eta_follow_the_samples(tmp_path: Path) -> None:
    """Rates over the samples' window and the ETA (rows still to fetch at the pace rows
    became ok), exact with a hand-moved clock: on /metrics, on the page and in the
    stream; no ETA once nothing is left to fetch."""
    root = _project(tmp_path)
    now = [1000.0]
    with serve(root, interval=1.0, clock=lambda: now[0]) as (server, _):
        first = get(server.url + "/metrics")[2]
        assert samples(first, "framework_rows_to_fetch")[0].value == 5  # 1 list + 4 detail
        assert samples(first, "framework_pages_per_second")[0].value == 0
        assert samples(first, "framework_eta_seconds") == []  # no pace yet: no guess
        with Workspace.open(root / "var" / "shop") as ws:
            _commit_ok(ws, "detail", 1, items=True)
            for n in range(9):
                ws.urls.append({"url": f"http://127.0.0.1:9/r/{n}", "outcome": "ok", "kind": "x"})
        now[0] += 50  # 10 requests, 1 row ok and 1 item in 50 s; 4 rows left
        text = get(server.url + "/metrics")[2]
        _, _, page = get(server.url + "/jobs/shop")
        stream = Stream(server.url + "/jobs/shop/stream")
        live = stream.until(lambda m: m.get("event") == "progress")[-1]
        stream.close()
        assert samples(text, "framework_pages_per_second")[0].value == 0.2
        assert samples(text, "framework_items_per_second")[0].value == 0.02
        assert samples(text, "framework_rows_to_fetch")[0].value == 4
        assert samples(text, "framework_eta_seconds")[0].value == 200  # 4 rows at 0.02/s
        assert '<span class="value" data-v="eta">3m 20s</span>' in page
        assert '<span class="value" data-v="pages_per_s">0.2</span>' in page
        assert live["data"]["eta_s"] == 200
        assert live["data"]["eta"] == "3m 20s"
        assert live["data"]["pages_per_s"] == 0.2
        assert live["data"]["items_per_s"] == 0.02

        with Workspace.open(root / "var" / "shop") as ws:
            _commit_ok(ws, "detail", 3)
            _commit_ok(ws, "list", 1)
        now[0] += 5
        done = get(server.url + "/metrics")[2]
        _, _, page = get(server.url + "/jobs/shop")
    assert samples(done, "framework_rows_to_fetch")[0].value == 0
    assert samples(done, "framework_eta_seconds") == []  # nothing left: no ETA
    assert '<span class="value" data-v="eta">\N{EN DASH}</span>' in page
    assert [eta_text(s, True) for s in (None, 59, 200, 3725)] == [
        "\N{EN DASH}",
        "59s",
        "3m 20s",
        "1h 2m",
    ]


def test_retry_after_deferrals_are_a_counter_by_host(tmp_path: Path) -> None:
    """framework_deferrals_total{job,host}: the URL log's answers that deferred their host
    (429, or 503 with Retry-After: outcome ``rate_limited``), by host without its user
    part; a plain error is no deferral."""
    root = _project(tmp_path)
    with Workspace.open(root / "var" / "shop") as ws:
        for url in (
            "http://127.0.0.1:9/list?page=2",
            "http://127.0.0.1:9/list?page=3",
            f"http://user:{SECRET}@other.test:8080/x",
        ):
            ws.urls.append({"url": url, "outcome": "rate_limited", "kind": "list"})
        ws.urls.append({"url": "http://127.0.0.1:9/y", "outcome": "http_5xx", "kind": "list"})
    with serve(root) as (server, _):
        text = get(server.url + "/metrics")[2]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["framework_deferrals"].type == "counter"
    assert by_label(text, "framework_deferrals_total", "host", job="shop") == {
        "127.0.0.1:9": 2,
        "other.test:8080": 1,
    }
    assert SECRET not in text
    errors = by_label(text, "framework_errors_total", "error", job="shop")
    assert errors == {"rate_limited": 3, "http_5xx": 1}


def test_a_run_without_its_end_shows_no_earlier_runs_counts(tmp_path: Path) -> None:
    """The Last run section names the newest run; until it ends (or when it was killed)
    it has no counts, and the previous run's are not shown under its heading."""
    root = _project(tmp_path)
    with Workspace.open(root / "var" / "shop") as ws:
        ws.events.append(
            {
                "time": "2026-01-01T00:01:00+00:00",
                "event": "run_finished",
                "reason": "finished",
                "counts": {"requests": 77},
                "warnings": [{"what": "field_empty", "kind": "list", "field": "x", "count": 2}],
            }
        )
        ws.events.append({"time": "2026-01-01T00:02:00+00:00", "event": "run_resumed"})
    with serve(root) as (server, _):
        _, _, killed = get(server.url + "/jobs/shop")
        with Workspace.open(root / "var" / "shop") as ws:
            ws.events.append(
                {
                    "time": "2026-01-01T00:03:00+00:00",
                    "event": "run_finished",
                    "reason": "finished",
                    "counts": {"requests": 5},
                }
            )
        _, _, ended = get(server.url + "/jobs/shop")
    run = re.search(r'<p data-field="last-run">([^<]*)</p>', killed)
    assert run is not None
    assert run.group(1) == "resumed 2026-01-01T00:02:00+00:00, not finished (interrupted)"
    assert "<th>requests</th>" not in killed
    assert "<h3>Warnings</h3>" not in killed  # the earlier run's
    assert "<tr><th>requests</th><td>5</td></tr>" in ended
    assert "<td>77</td>" not in ended


def test_every_metric_is_in_the_operations_guide(tmp_path: Path) -> None:
    """The metrics table of docs/operations.md names every family /metrics exports, as
    Prometheus sees it (a counter with its ``_total``), with its type."""
    with serve(_project(tmp_path)) as (server, _):
        text = get(server.url + "/metrics")[2]
    guide = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    table = guide[guide.index("### Metrics") : guide.index("### Metrics from a running")]
    families = list(text_string_to_metric_families(text))
    assert len(families) > 10
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name
        (row,) = [line for line in table.splitlines() if f"`{name}{{" in line]
        assert f"| {family.type} |" in row, row
