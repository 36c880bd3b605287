"""The dashboard's reading side, in-process: log cursors (framework_dashboard.tail), the
last run summed over every worker (findings), the live counts (progress) and the jobs
it finds (jobs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from framework_dashboard import tail
from framework_dashboard.findings import last_run_events, last_run_findings, merge
from framework_dashboard.jobs import discover, parse_targets
from framework_dashboard.progress import Tracker

from framework.errors import UsageError
from framework.workspace import JsonlLog, Workspace
from tests.plugins.dashboard.helpers import SECRET, build_workspace


def test_a_cursor_reads_each_whole_line_once_and_never_a_torn_one(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "events.jsonl")
    log.append({"event": "a"})
    log.append({"event": "b", "url": f"http://x/?token={SECRET}"})
    lines, cursor = tail.after(log, 0)
    assert [r["event"] for _, r in lines] == ["a", "b"]
    assert lines[-1][0] == cursor == (tmp_path / "events.jsonl").stat().st_size
    assert SECRET not in str(lines)  # masked again on the way out
    # a line being written (no newline yet) is not read, and is read once it is whole
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(b'{"event": "c"')
    assert tail.after(log, cursor) == ([], cursor)
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(b"}\n")
    again, end = tail.after(log, cursor)
    assert [r["event"] for _, r in again] == ["c"]
    # a log replaced by a shorter one starts again at its beginning
    (tmp_path / "events.jsonl").write_bytes(b'{"event": "new"}\n')
    fresh, _ = tail.after(log, end)
    assert [r["event"] for _, r in fresh] == ["new"]


def test_recent_lines_end_where_the_stream_starts(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "events.jsonl")
    for n in range(30):
        log.append({"event": "e", "n": n})
    shown, end = tail.recent(log, 5)
    assert [r["n"] for _, r in shown] == [25, 26, 27, 28, 29]
    assert shown[-1][0] == end
    log.append({"event": "e", "n": 30})
    after, _ = tail.after(log, end)
    assert [r["n"] for _, r in after] == [30]  # nothing between the page and its stream
    # and the cursor of a line shown resumes right after it
    middle, _ = tail.after(log, shown[1][0])
    assert [r["n"] for _, r in middle] == [27, 28, 29, 30]
    assert tail.recent(JsonlLog(tmp_path / "none.jsonl"), 5) == ([], 0)


def _finished(worker: int | None, fill_records: int, title: int, **extra: object) -> dict:
    event: dict = {
        "event": "run_finished",
        "time": f"2026-01-01T00:00:{10 + fill_records:02d}+00:00",
        "reason": "finished",
        "counts": {"requests": fill_records * 2, "errors_by_kind": {"http_5xx": 1}},
        "fill": {"detail": {"pages": fill_records, "records": fill_records,
                            "fields": {"title": title}}},
        "warnings": [{"what": "field_empty", "kind": "detail", "field": "room", "count": 2,
                      "examples": [f"http://x/{worker}"]}],
        "drift": [{"reason": "fallback", "kind": "detail", "field": "amount", "count": 1}],
        **extra,
    }  # fmt: skip
    if worker is not None:
        event["worker"] = worker
    return event


def test_the_last_run_of_several_workers_sums_every_workers_findings(tmp_path: Path) -> None:
    with build_workspace(tmp_path / "ws") as ws:
        # an earlier run of two workers, then a run of three: worker 5 killed (no end)
        for w in (1, 2):
            ws.events.append({"event": "run_started", "worker": w})
        for w in (1, 2):
            ws.events.append(_finished(w, 50, 50))
        for w in (3, 4, 5):
            ws.events.append({"event": "run_started", "worker": w})
        ws.events.append(_finished(3, 10, 9))
        ws.events.append({"event": "row_failed", "worker": 4})
        ws.events.append(_finished(4, 20, 20))
        ends = last_run_events(ws)
        assert sorted(e["worker"] for e in ends) == [3, 4]
        found = last_run_findings(ws)
    assert found["workers"] == 2
    assert found["fill"]["detail"] == {"pages": 30, "records": 30, "fields": {"title": 29}}
    assert found["counts"] == {"requests": 60, "errors_by_kind": {"http_5xx": 2}}
    (warning,) = found["warnings"]
    assert warning["count"] == 4
    assert warning["examples"] == ["http://x/4", "http://x/3"]
    assert len(found["drift"]) == 1


def test_a_single_process_run_is_its_newest_end_as_status_has_it(tmp_path: Path) -> None:
    with build_workspace(tmp_path / "ws") as ws:
        ws.events.append(_finished(None, 7, 7))
        ws.events.append({"event": "run_resumed"})
        ws.events.append(_finished(None, 3, 1))
        assert [e["fill"]["detail"]["records"] for e in last_run_events(ws)] == [3]
        ws.events.append({"event": "reparse_finished", "fill": {}})
        assert [e["event"] for e in last_run_events(ws)] == ["reparse_finished"]
    assert merge([])["workers"] == 0


def test_progress_counts_rows_and_requests_and_samples_at_most_once_an_interval(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    tracker = Tracker(min_interval=1.0, clock=lambda: now[0])
    path = tmp_path / "ws"
    build_workspace(path).close()
    with Workspace.open(path) as ws:
        ws.urls.append({"url": "http://127.0.0.1:9/list?page=1", "outcome": "ok", "kind": "list"})
        ws.urls.append(
            {"url": "http://127.0.0.1:9/list?page=2", "outcome": "http_4xx", "kind": "list"}
        )

    def open_ws() -> Workspace:
        return Workspace.open(path, create=False, readonly=True)

    progress, first = tracker.sample("shop", open_ws, lambda ws: 3)
    assert first["rows"]["by_kind"]["list"] == {"pending": 1, "ok": 1, "error": 1, "total": 3}
    assert first["rows"]["by_kind"]["detail"]["pending"] == 4
    assert first["requests"] == 2
    assert first["errors"] == 1
    assert dict(progress.errors_by_kind) == {("list", "http_4xx"): 1}
    assert tracker.sample("shop", open_ws, lambda ws: 3)[1] is first  # within the interval
    with Workspace.open(path) as ws:
        for n in range(10):
            ws.urls.append(
                {"url": f"http://127.0.0.1:9/item/{n}", "outcome": "ok", "kind": "detail"}
            )
    now[0] += 2.0
    _, second = tracker.sample("shop", open_ws, lambda ws: 3)
    assert second["requests"] == 12
    assert second["pages_per_s"] == 5.0  # 10 requests in 2 s
    assert progress.series() == [(1002.0, 5.0)]


def test_jobs_are_the_projects_and_the_workspaces_found_and_named(tmp_path: Path) -> None:
    spec = tmp_path / "projects" / "shop" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text("name: shop\nsource_type: s\n", encoding="utf-8")
    build_workspace(tmp_path / "var" / "orphan").close()
    (tmp_path / "var" / "not-a-workspace").mkdir()
    url = "postgresql://u:pw-9981@127.0.0.1:5432/db"
    jobs = discover(tmp_path, targets=parse_targets([f"far={url}"]))
    assert sorted(jobs) == ["far", "orphan", "shop"]
    assert jobs["shop"].spec == spec
    assert not jobs["shop"].exists()
    assert jobs["orphan"].exists()
    assert jobs["far"].is_database
    assert "pw-9981" not in jobs["far"].where
    with pytest.raises(UsageError):
        parse_targets(["../etc=/tmp"])
    with pytest.raises(UsageError):
        parse_targets(["nothing"])


def test_the_plugin_only_adds_a_command_so_a_crawl_runs_none_of_it() -> None:
    from importlib.metadata import distribution

    groups = {ep.group for ep in distribution("framework-dashboard").entry_points}
    # no renderer, status section, copy hook or Scrapy component: a crawl, a status
    # and a ship load nothing of the dashboard, whether it runs or not; the metrics
    # server is loaded only for --metrics-port (test_metrics_port.py proves a crawl
    # without it imports none of the plugin)
    assert groups == {"framework.commands", "framework.metrics"}
