"""`framework status` and `framework requeue` through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from framework.cli import main
from framework.demo.site import DemoSite
from framework.workspace import (
    ErrorKind,
    ItemWrite,
    NewRow,
    Outcome,
    RowStatus,
    Workspace,
)
from framework.workspace.status import build_status
from tests.fixtures import procs
from tests.paths import REPO

FRAMEWORK = Path(sys.executable).parent / "framework"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project root with one job's workspace under var/cases."""
    monkeypatch.setenv("FRAMEWORK_HOME", str(tmp_path))
    with Workspace.open(tmp_path / "var" / "cases") as ws:
        s = ws.store
        (lst,) = s.seed([NewRow("list", "http://site/list")])
        rows = s.commit(
            Outcome(
                lst.id,
                ok=True,
                new_rows=[NewRow("detail", f"http://site/case/{i}") for i in range(4)],
            )
        ).inserted
        s.commit(Outcome(rows[0].id, ok=True, items=[ItemWrite("c:0", "c", "0", {"n": 0})]))
        for _ in range(2):
            s.commit(Outcome(rows[1].id, ok=False, http_status=502, error_kind=ErrorKind.HTTP_5XX))
        s.commit(Outcome(rows[2].id, ok=False, http_status=404, error_kind=ErrorKind.HTTP_4XX))
        s.set_meta("max_attempts", "2")
        ws.events.append({"event": "run_started", "time": "2026-01-01T10:00:00+00:00"})
        ws.events.append(
            {
                "event": "run_finished",
                "time": "2026-01-01T10:00:05+00:00",
                "reason": "max_requests",
                "counts": {"requests": 6},
            }
        )
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_status_json_is_the_build_status_dict(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["status", "cases", "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    with Workspace.open(home / "var" / "cases", readonly=True) as ws:
        assert report == json.loads(json.dumps(build_status(ws, max_attempts=2)))
    assert report["max_attempts"] == 2  # recorded by the crawl in meta
    assert report["queue"] == {"pending": 1, "retryable": 0, "exhausted": 2, "to_fetch": 1}
    assert [m["url"] for m in report["misbehaving"]] == [
        "http://site/case/1",
        "http://site/case/2",
    ]
    assert report["last_run"]["reason"] == "max_requests"


def test_status_table(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["status", "cases"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("job cases: unfinished")
    assert "detail  1        1   2      4" in lines  # kind pending ok error total
    assert "total   1        2   2      5" in lines
    assert any(
        "next run fetches 1 rows (1 pending, 0 errors to retry); 2 exhausted" in line
        for line in lines
    )
    assert "items: 1 complete, 0 incomplete" in lines
    assert any("http_5xx" in line and "http://site/case/1" in line for line in lines)
    header = next(line for line in lines if line.startswith("row "))
    assert header.split() == [
        "row",
        "kind",
        "status",
        "fails/counted",
        "http",
        "last",
        "error",
        "url",
    ]
    assert any(
        line.startswith("last run: started") and "max_requests, 5.0s" in line for line in lines
    )
    # both misbehaving rows are exhausted: listed once, under "exhausted rows"
    assert sum("http://site/case/1" in line for line in lines) == 1
    assert sum("http://site/case/2" in line for line in lines) == 1
    assert lines.index("exhausted rows:") < lines.index(
        "misbehaving URLs: the 2 exhausted rows above"
    )


def test_status_lists_a_misbehaving_row_that_is_not_exhausted_on_its_own(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Workspace.open(home / "var" / "cases") as ws:
        (row,) = [r for r in ws.store.iter_rows() if r.url == "http://site/case/3"]
        ws.store.commit(
            Outcome(row.id, ok=False, http_status=503, error_kind=ErrorKind.HTTP_5XX)
        )  # one failure of two allowed: retried by the next run
    code, out, _ = run(["status", "cases"], capsys)
    assert code == 0
    lines = out.splitlines()
    title = "misbehaving URLs (besides the 2 exhausted rows above):"
    assert lines.index("exhausted rows:") < lines.index(title)
    below = lines[lines.index(title) :]
    assert sum("http://site/case/3" in line for line in below) == 1
    assert not any("http://site/case/1" in line for line in below)
    for url in ("http://site/case/1", "http://site/case/2", "http://site/case/3"):
        assert sum(url in line for line in lines) == 1, url


def test_status_of_a_missing_workspace_exits_2(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["status", "nosuchjob"], capsys)
    assert code == 2
    assert "no workspace" in err
    assert "nothing was crawled into it yet; `framework crawl JOB` makes it" in err
    assert not (home / "var" / "nosuchjob").exists()


def test_status_with_an_explicit_workspace(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moved = home / "var" / "cases"
    code, out, _ = run(
        ["status", "anyname", "--workspace", str(moved), "--json", "--top", "1"], capsys
    )
    assert code == 0
    assert len(json.loads(out)["misbehaving"]) == 1


@pytest.mark.process
def test_status_starts_without_the_spec_models(home: Path) -> None:
    """status only reads a workspace: it checks the job name without importing pydantic
    and the spec's models (a fifth of its start-up when it did)."""
    probe = (
        "import sys; from framework.cli import main; code = main(['status', 'cases']); "
        "print(code, [m for m in ('pydantic', 'framework.spec.models') if m in sys.modules])"
    )
    # a new interpreter, not a fork of the test's server, which has imported everything
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "0 []"


def test_requeue_filters_print_the_count_and_log_an_event(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws_path = home / "var" / "cases"
    assert run(["requeue", "cases", "--exhausted", "--url-contains", "case/2"], capsys)[:2] == (
        0,
        "requeued 1 rows\n",
    )
    assert run(["requeue", "cases"], capsys)[1] == "requeued 1 rows\n"  # default: errors
    assert run(["requeue", "cases", "--errors"], capsys)[1] == (
        "requeued 0 rows: no row matches all of: status error "
        "(`framework status cases` shows the rows by kind and status)\n"
    )
    # a filter that reaches nothing says which conditions it held
    out = run(["requeue", "cases", "--exhausted", "--kind", "list", "--url-contains", "x"], capsys)
    assert out[:2] == (
        0,
        "requeued 0 rows: no row matches all of: exhausted (not retried by the next run); "
        "kind list; URL containing 'x' (`framework status cases` shows the rows by kind and "
        "status)\n",
    )
    with Workspace.open(ws_path, readonly=True) as ws:
        counts = ws.store.row_counts()
        assert counts["detail"] == {RowStatus.OK: 1, RowStatus.PENDING: 3}
        events = [e for e in ws.events if e["event"] == "requeued"]
    assert [e["count"] for e in events] == [1, 1, 0, 0]
    assert events[0]["filter"] == {
        "errors": False,
        "exhausted": True,
        "kind": None,
        "url_contains": "case/2",
    }
    assert run(["requeue", "cases", "--kind", "list"], capsys)[1] == "requeued 1 rows\n"
    # a misspelt kind is a bad call, not "requeued 0 rows"; nothing is logged for it
    code, out, err = run(["requeue", "cases", "--kind", "detial"], capsys)
    assert (code, out) == (2, "")
    assert "--kind 'detial': the workspace has no row of that kind" in err
    assert "expected one of: detail, list" in err
    with Workspace.open(ws_path, readonly=True) as ws:
        assert len([e for e in ws.events if e["event"] == "requeued"]) == 5


HOLDER = textwrap.dedent(
    """
    import sys, time
    from framework.workspace import Workspace

    with Workspace.open(sys.argv[1]) as ws, ws.lock("crawl"):
        print("locked", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.kill
def test_requeue_refuses_while_a_crawl_holds_the_lock(home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FRAMEWORK_HOME": str(home)}
    ws_path = home / "var" / "cases"
    holder = procs.popen(
        [sys.executable, "-c", HOLDER, str(ws_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout
    try:
        assert holder.stdout.readline().strip() == "locked"
        done = procs.run(
            [str(FRAMEWORK), "requeue", "cases", "--errors"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 3, done.stderr
        assert f"held by pid {holder.pid}" in done.stderr
        # status still works while the "crawl" runs, and says so
        shown = procs.run(
            [str(FRAMEWORK), "status", "cases", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["crawl_running"] is True
    finally:
        holder.kill()
        holder.wait()
    with Workspace.open(ws_path, readonly=True) as ws:
        assert ws.store.counts(2)["exhausted"] == 2  # nothing was requeued


# ---------------------------------------------------------------- issue 8, item 12
@pytest.mark.process
def test_status_agrees_with_a_crawl_that_exited_4(
    site: DemoSite, good_spec: Callable[..., Path], tmp_path: Path, crawl_cli: Callable[..., Any]
) -> None:
    spec = good_spec("cases", site.url, tmp_path)
    ws = tmp_path / "ws"
    crawl = crawl_cli("crawl", str(spec), "--workspace", str(ws), "-L", "WARNING")
    assert crawl.returncode == 4, crawl.stderr[-2000:]  # the demo's broken pages
    status = crawl_cli("status", "fixture-cases", "--workspace", str(ws), "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["done"] is False  # it said done before: nothing left to fetch
    assert (report["state"], report["exit_code"]) == ("needs_attention", 4)
    assert report["last_run"]["exit_code"] == 4  # recorded by the crawl in run_finished
    table = crawl_cli("status", "fixture-cases", "--workspace", str(ws))
    assert table.stdout.startswith("job fixture-cases: needs attention: 3 rows in error (exit 4")


def test_a_workspace_killed_before_its_start_rows_is_not_done(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Workspace.open(home / "var" / "early") as ws:  # the schema, and nothing else
        ws.events.append({"event": "run_started", "time": "2026-01-01T10:00:00+00:00"})
    code, out, _ = run(["status", "early", "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    assert report["done"] is False
    assert (report["state"], report["exit_code"]) == ("not_started", 3)
    assert report["last_run"]["reason"] == "interrupted"
    code, out, _ = run(["status", "early"], capsys)
    assert out.startswith("job early: not started")


@pytest.mark.parametrize(
    "broken",
    [
        {"counts": [1, 2], "time": 12, "duration_s": "long", "exit_code": "4"},
        {"counts": "x", "reason": {"a": 1}, "exit_code": True},
        {"time": None, "counts": None, "duration_s": None},
        {"time": "not a time"},
    ],
)
def test_a_malformed_run_finished_does_not_crash_status(
    home: Path, capsys: pytest.CaptureFixture[str], broken: dict[str, Any]
) -> None:
    with Workspace.open(home / "var" / "cases") as ws:
        ws.events.append({"event": "run_started", "time": "2026-01-01T11:00:00+00:00"})
        ws.events.append({"event": "run_finished", **broken})
    code, out, err = run(["status", "cases"], capsys)
    assert code == 0, err
    assert "last run: started 2026-01-01T11:00:00+00:00, finished" in out
    code, out, err = run(["status", "cases", "--json"], capsys)
    assert code == 0, err
    last = json.loads(out)["last_run"]
    assert last["exit_code"] is None
    assert isinstance(last["counts"], dict)
    assert last["reason"] is None or isinstance(last["reason"], str)


@pytest.mark.parametrize("command", ["status", "requeue"])
def test_a_path_is_not_a_job_name(
    home: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    outside = home / "outside"
    shutil.copytree(home / "var" / "cases", outside)  # a real workspace out of var/
    for name in ("../outside", str(outside), "cases/../../outside", ".."):
        code, out, err = run([command, name], capsys)
        assert code == 2, (name, out, err)
        assert err == (
            f"error: {name!r} is not a job name (letters, digits, '_' or '-', as in a spec's "
            "name:); to read a workspace elsewhere, pass --workspace DIR\n"
        )
    with Workspace.open(outside, readonly=True) as ws:
        assert not [e for e in ws.events if e["event"] == "requeued"]


def test_resolve_job_with_names_only_refuses_paths(tmp_path: Path) -> None:
    from framework.errors import UsageError
    from framework.project import resolve_job

    spec = tmp_path / "projects" / "cases" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text("name: cases\n", encoding="utf-8")
    assert resolve_job(str(spec), tmp_path) == spec  # crawl and validate take a path
    for name in (str(spec), "../cases", "projects/cases"):
        with pytest.raises(UsageError, match="is not a job name"):
            resolve_job(name, tmp_path, names_only=True)


def test_status_says_when_it_lists_only_the_first_rows_and_counts_in_words(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Workspace.open(home / "var" / "cases") as ws:
        ws.events.append({"event": "run_started", "time": "2026-01-01T11:00:00+00:00"})
        ws.events.append(
            {
                "event": "run_finished",
                "time": "2026-01-01T11:00:05+00:00",
                "reason": "finished",
                "counts": {"requests": 3, "errors_by_kind": {"http_4xx": 1, "http_5xx": 2}},
            }
        )
    code, out, _ = run(["status", "cases", "--top", "1"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert "exhausted rows (the first 1 of 2; --top N lists more):" in lines
    assert "  requests 3, errors_by_kind (http_4xx 1, http_5xx 2)" in lines
    assert "{" not in out  # no Python dict in the text
    code, out, _ = run(["status", "cases"], capsys)
    assert "exhausted rows:" in out.splitlines()  # all of them listed: nothing to add
