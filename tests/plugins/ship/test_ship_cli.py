"""`framework ship` through the real CLI: settings precedence, exit codes, the lock,
signals, and the token never written anywhere."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from framework_ship.client import IngestClient
from framework_ship.deliver import item_body
from framework_ship.run import ShipOptions, Shipper

from framework.cli import main
from framework.errors import Halted
from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.ingest import IngestServer
from tests.fixtures.ship import Fault, FaultEndpoint

FRAMEWORK = str(Path(sys.executable).parent / "framework")

SPEC = """\
name: {job}
source_type: test
start_urls: [http://127.0.0.1:9/]
detail:
  id: {{css: "#id::text"}}
  fields:
    title: "h1::text"
ship:
  endpoint: {endpoint}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "home"
    (root / "projects").mkdir(parents=True)
    monkeypatch.setenv("FRAMEWORK_HOME", str(root))
    monkeypatch.delenv("FRAMEWORK_SHIP_ENDPOINT", raising=False)
    monkeypatch.delenv("FRAMEWORK_SHIP_TOKEN_ENV", raising=False)
    return root


def run(*args: str) -> int:
    return main(["ship", *args])


def test_ships_and_reports(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace(7)
    assert run("job", "--workspace", str(ws.path), "--endpoint", ingest_server.url) == 0
    out = capsys.readouterr().out
    assert "accepted 7" in out
    assert "drained" in out
    events = [e for e in ws.events if e["event"].startswith("ship_")]
    assert [e["event"] for e in events] == ["ship_started", "ship_finished"]
    assert events[1]["counts"]["accepted"] == 7
    assert events[1]["exit_code"] == 0
    assert len(ingest_server.rows()) == 7


def test_usage_errors_exit_2(
    make_ship_workspace: Callable[..., Workspace], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = make_ship_workspace(1)
    assert run("job", "--workspace", str(ws.path)) == 2
    assert "no endpoint" in capsys.readouterr().err
    code = run("job", "--workspace", str(ws.path), "--endpoint", "http://127.0.0.1:9",
               "--token-env", "NO_SUCH_VARIABLE_X")  # fmt: skip
    assert code == 2
    assert "NO_SUCH_VARIABLE_X" in capsys.readouterr().err
    assert run("job", "--workspace", str(ws.path), "--endpoint", "ftp://x") == 2
    # credentials or a query in the endpoint would reach error texts (the ship log)
    # and replace the bearer token: refused, without echoing them
    for endpoint in ("http://u:s3cr3t@127.0.0.1:9", "http://127.0.0.1:9/v1/items?key=s3cr3t"):
        assert run("job", "--workspace", str(ws.path), "--endpoint", endpoint) == 2
        err = capsys.readouterr().err
        assert "must not carry credentials" in err
        assert "s3cr3t" not in err
    assert run("job", "--workspace", str(ws.path / "nope"), "--endpoint", "http://x") == 2


@pytest.mark.parametrize(
    ("job", "where"),
    [
        ("../ws", "home/ws"),
        ("../../escaped", "escaped"),
        ("ABS", "abs"),
        ("var/../../dots", "dots"),
    ],
)
def test_a_job_name_that_leads_out_of_the_project_is_a_usage_error(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    job: str,
    where: str,
) -> None:
    """Without a spec the name names the workspace folder var/<job>: ``../ws`` would
    ship from (and write the ship log of) a folder outside the project. Exit 2."""
    (home / "var").mkdir()  # as in any project that crawled: ../ then resolves
    ws = make_ship_workspace(2, name=where)
    if job == "ABS":
        job = str(ws.path)
    log = ws.ship_log_path
    assert run(job, "--endpoint", ingest_server.url) == 2
    assert job in capsys.readouterr().err
    assert not log.exists()
    assert ingest_server.rows() == []


def test_flag_beats_spec_beats_environment(
    make_ship_workspace: Callable[..., Workspace],
    make_ingest_server: Callable[..., IngestServer],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flag, spec, env = make_ingest_server(), make_ingest_server(), make_ingest_server()
    ws = make_ship_workspace(1)
    monkeypatch.setenv("FRAMEWORK_SHIP_ENDPOINT", env.url)
    assert run("job", "--workspace", str(ws.path), "--only", "test:000000") == 0
    assert len(env.rows()) == 1
    (home / "projects" / "job").mkdir()
    (home / "projects" / "job" / "job.yaml").write_text(SPEC.format(job="job", endpoint=spec.url))
    # Already delivered from this workspace: skipped, whichever endpoint is configured.
    assert run("job", "--workspace", str(ws.path)) == 0
    assert spec.rows() == []
    # A fresh workspace: the spec's endpoint wins over the environment.
    ws2 = make_ship_workspace(1, name="ws2")
    assert run("job", "--workspace", str(ws2.path)) == 0
    assert len(spec.rows()) == 1
    assert len(env.rows()) == 1
    ws3 = make_ship_workspace(1, name="ws3")
    assert run("job", "--workspace", str(ws3.path), "--endpoint", flag.url) == 0
    assert len(flag.rows()) == 1
    assert len(spec.rows()) == 1


def test_a_second_shipper_exits_3_naming_the_holder(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace(2)
    with ws.lock("ship"):
        code = run("job", "--workspace", str(ws.path), "--endpoint", ingest_server.url)
    assert code == 3
    assert f"pid {os.getpid()}" in capsys.readouterr().err
    assert ingest_server.rows() == []


def test_exit_codes_of_the_cron_contract(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
) -> None:
    ws = make_ship_workspace(3)
    base = [
        "job",
        "--workspace",
        str(ws.path),
        "--endpoint",
        fault_endpoint.url,
        "--batch-size",
        "1",
    ]
    fault_endpoint.script("/v1/items", Fault(status=401))
    assert run(*base) == 4
    fault_endpoint.script("/v1/items", Fault(status=429, headers={"Retry-After": "999"}))
    assert run(*base) == 3
    assert run(*base, "--retry-after-cap", "2000", "--max-items", "0") == 3
    assert fault_endpoint.rows == {}


def test_the_token_is_never_written_or_printed(
    make_ship_workspace: Callable[..., Workspace],
    make_ingest_server: Callable[..., IngestServer],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = "tok-Zq8vX3-never-log-me"
    server = make_ingest_server(token=token)
    monkeypatch.setenv("INGEST_TOKEN", token)
    ws = make_ship_workspace(5)
    args = [
        "job",
        "--workspace",
        str(ws.path),
        "--endpoint",
        server.url,
        "--token-env",
        "INGEST_TOKEN",
    ]
    assert run(*args, "--batch-size", "1") == 0
    assert run(*args, "--dry-run") == 0
    monkeypatch.setenv("INGEST_TOKEN", "wrong-" + token)
    ws2 = make_ship_workspace(2, name="ws2")
    assert run("job", "--workspace", str(ws2.path), "--endpoint", server.url,
               "--token-env", "INGEST_TOKEN") == 4  # fmt: skip
    captured = capsys.readouterr()
    assert len(server.rows()) == 5
    assert token not in captured.out
    assert token not in captured.err
    for folder in (ws.path, ws2.path):
        for path in folder.iterdir():
            assert token.encode() not in path.read_bytes(), path.name


@pytest.mark.kill
def test_sigterm_finishes_the_attempt_in_flight_logs_it_and_exits_3(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
) -> None:
    ws = make_ship_workspace(50)
    ws.close()
    fault_endpoint.script("/v1/items", *[Fault(kind="slow", delay=0.3)] * 50)
    proc = procs.popen(
        [
            FRAMEWORK,
            "ship",
            "job",
            "--workspace",
            str(ws.path),
            "--endpoint",
            fault_endpoint.url,
            "--batch-size",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "FRAMEWORK_HOME": str(home)},
    )
    log = ws.path / "ship-log.jsonl"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_bytes().count(b"\n") >= 2):
        assert time.monotonic() < deadline
        assert proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    # Every request the server saw was logged: the one in flight finished and was written.
    assert len(lines) == len(fault_endpoint.requests) < 50
    assert all(x["outcome"] == "accepted" for x in lines)
    finished = [json.loads(x) for x in (ws.path / "events.jsonl").read_text().splitlines()]
    assert finished[-1]["event"] == "ship_finished"
    assert finished[-1]["reason"] == "interrupted (SIGTERM)"
    assert b"interrupted" in err


def test_status_shows_ship_progress(
    make_ship_workspace: Callable[..., Workspace],
    ingest_server: IngestServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws = make_ship_workspace(4)
    assert run("job", "--workspace", str(ws.path), "--endpoint", ingest_server.url,
               "--max-items", "3") == 3  # fmt: skip
    capsys.readouterr()
    assert main(["status", "job", "--workspace", str(ws.path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ship = report["plugins"]["ship"]
    assert ship["latest_outcomes"] == {"accepted": 3}
    assert ship["keys_delivered"] == 3
    assert ship["complete_items"] == 4
    assert ship["last_run"]["reason"].startswith("--max-items 3 reached")
    assert main(["status", "job", "--workspace", str(ws.path)]) == 0
    text = capsys.readouterr().out
    # in words, not JSON: nested values in parentheses, flags as yes/no
    assert "\nship:\n  latest_outcomes: accepted 3\n  keys_delivered: 3\n" in text
    assert "  shipping_now: no\n" in text
    assert "  last_run: counts (accepted 3, " in text
    assert "reason --max-items 3 reached" in text
    assert '{"' not in text.split("\nship:\n", 1)[1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream_cls", [io.StringIO, _Terminal])
def test_progress_line_only_on_a_terminal(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    stream_cls: type[io.StringIO],
) -> None:
    ws = make_ship_workspace(5)
    stream = stream_cls()
    Shipper(
        ws,
        ShipOptions(endpoint=fault_endpoint.url, batch_size=1),
        echo=lambda line: None,
        progress_stream=stream,
    ).run()
    text = stream.getvalue()
    if stream.isatty():
        assert "ship: 5/5 items (100%)" in text  # the live line (framework.progress)
        assert "shipped 5, skipped 0" in text
        assert "progress:" not in text
    else:
        assert text == ""  # plain lines only every FRAMEWORK_PROGRESS_INTERVAL (30 s)


def test_a_token_a_header_cannot_carry_is_refused_without_echoing_it(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = "tok-secret-98\n"
    monkeypatch.setenv("BAD_TOKEN", secret)
    ws = make_ship_workspace(1)
    args = ["job", "--workspace", str(ws.path), "--endpoint", fault_endpoint.url]
    assert run(*args, "--token-env", "BAD_TOKEN") == 2
    captured = capsys.readouterr()
    assert "tok-secret-98" not in captured.out + captured.err
    assert fault_endpoint.requests == []
    # Below the CLI, requests itself refuses such a header: that halts, quoting nothing.
    client = IngestClient(fault_endpoint.url, "tok-secret-98\r\nX-Evil: 1")
    with pytest.raises(Halted) as caught:
        client.post_item(item_body(next(iter(ws.store.iter_items()))))
    assert "tok-secret-98" not in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.kill
@pytest.mark.parametrize("batch_size", ["1", "5"])
def test_ctrl_c_against_a_hung_endpoint_says_what_it_waits_for_and_twice_aborts(
    make_ship_workspace: Callable[..., Workspace],
    fault_endpoint: FaultEndpoint,
    home: Path,
    batch_size: str,
) -> None:
    """Issue 13: Ctrl-C against an endpoint that never answers sat out the whole read
    timeout silently, and a second Ctrl-C was ignored. Now the first names the request
    it waits for, the second aborts at once (exit 3, the run recorded as aborted), long
    before the (here 600 s) timeout; nothing of the abandoned attempt is logged."""
    ws = make_ship_workspace(5)
    ws.close()
    path = "/v1/items" if batch_size == "1" else "/v1/items/batch"
    fault_endpoint.script(path, Fault(kind="hang"))
    proc = procs.popen(
        [FRAMEWORK, "ship", "job", "--workspace", str(ws.path), "--endpoint",
         fault_endpoint.url, "--batch-size", batch_size, "--timeout", "600",
         "--stop-grace", "300"],  # the second Ctrl-C ends the wait, not the grace
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FRAMEWORK_HOME": str(home)},
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not fault_endpoint.requests:
        assert time.monotonic() < deadline
        assert proc.poll() is None, lines
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    while not any("waiting for the answer" in line for line in lines):
        assert time.monotonic() < deadline, lines
        assert proc.poll() is None, lines
        time.sleep(0.05)
    (notice,) = [line for line in lines if "waiting for the answer" in line]
    items = "1 item" if batch_size == "1" else "5 items"
    assert f"POST {path} ({items}," in notice
    assert "--timeout 600 s" in notice
    assert "it gets 300 s more (--stop-grace), then it is abandoned" in notice
    assert "SIGINT again to abort at once" in notice
    assert proc.poll() is None  # the first Ctrl-C waits for the answer
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)  # far below the 600 s read timeout
    reader.join(timeout=10)
    assert proc.returncode == 3, lines
    assert "aborted (SIGINT twice)" in out
    assert len(fault_endpoint.requests) == 1
    assert (
        not (ws.path / "ship-log.jsonl").exists()
        or not (ws.path / "ship-log.jsonl").read_text().strip()
    )
    events = [json.loads(x) for x in (ws.path / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "ship_finished"
    assert events[-1]["reason"].startswith("aborted (SIGINT twice)")
    assert events[-1]["exit_code"] == 3
