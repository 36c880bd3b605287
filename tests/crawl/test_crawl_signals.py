"""SIGINT/SIGTERM with a slow-drip response in flight (issue 8, item 10).

A local server answers ``/slow`` with headers and then one body byte at a time, far
slower than any test waits. The first signal must stop the crawl within its grace
period (``FRAMEWORK_STOP_GRACE``) and leave the in-flight row pending, not a
``timeout`` error; a second signal must stop it at once, still recording the run. Both
are checkpoints (exit 3). Scrapy alone waits for the download timeout (180 s) on the
first signal and, on the second, stops without ever writing ``run_finished``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from framework.workspace import RowStatus, Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events
from tests.paths import REPO

EXIT_CHECKPOINT = 3


class DripServer:
    """``/slow``: 200, a Content-Length of 100 kB, then one byte every 0.2 s."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.dripping = threading.Event()  # set once a /slow response has started
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.flush()
                server.dripping.set()
                try:
                    while not server.stopping.wait(0.2):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except OSError:
                    return  # the crawler hung up

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> DripServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def drip() -> Iterator[DripServer]:
    server = DripServer().start()
    yield server
    server.stop()


def _spec(root: Path, url: str) -> Path:
    path = root / "projects" / "drip" / "job.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "name: drip\n"
        "source_type: drip\n"
        f'start_urls: ["{url}/slow"]\n'
        "detail:\n"
        '  id: {css: "#id::text", required: true}\n'
        "  fields:\n"
        '    title: "h1::text"\n',
        encoding="utf-8",
    )
    return path


def _start(spec: Path, ws: Path, grace: float) -> subprocess.Popen[str]:
    return procs.popen(
        [
            *CLI,
            "crawl",
            str(spec),
            "--workspace",
            str(ws),
            "-L",
            "WARNING",
            "-s",
            f"FRAMEWORK_STOP_GRACE={grace}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start_scrapy(root: Path, ws: Path, grace: float) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FRAMEWORK_HOME": str(root),
        "SCRAPY_SETTINGS_MODULE": "framework.scrapy_settings",
    }
    scrapy = [sys.executable, "-c", "from scrapy.cmdline import execute; execute()"]
    settings = ["-s", f"JOBDIR={ws}", "-s", f"FRAMEWORK_STOP_GRACE={grace}", "-L", "WARNING"]
    return procs.popen(
        [*scrapy, "crawl", "drip", *settings],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _row_status(ws: Path) -> list[RowStatus]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        return [row.status for row in w.store.iter_rows()]


def _run_until_dripping(drip: DripServer, proc: subprocess.Popen[str]) -> None:
    assert drip.dripping.wait(60), "the crawl never reached the slow page"
    time.sleep(0.3)  # the response is being read
    assert proc.poll() is None


@pytest.mark.kill
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_stops_within_the_grace_and_leaves_the_row_pending(
    drip: DripServer, tmp_path: Path, sig: signal.Signals
) -> None:
    spec = _spec(tmp_path, drip.url)
    ws = tmp_path / "ws"
    proc = _start(spec, ws, grace=1)
    try:
        _run_until_dripping(drip, proc)
        proc.send_signal(sig)
        # Scrapy alone would sit out the 180 s download timeout here
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_CHECKPOINT, err[-2000:]
    assert "Traceback" not in err
    assert "deprecated" not in err  # the stop is Scrapy's current API (stop_async)
    assert "interrupted; 1 rows pending" in err
    assert _row_status(ws) == [RowStatus.PENDING]  # not a `timeout` error
    last = events(ws)[-1]
    assert (last["event"], last["reason"], last["exit_code"]) == ("run_finished", "shutdown", 3)
    assert last["counts"]["requests"] == 0  # nothing was recorded for the cut response


@pytest.mark.kill
def test_a_second_signal_stops_at_once_and_still_records_the_run(
    drip: DripServer, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, drip.url)
    ws = tmp_path / "ws"
    proc = _start(spec, ws, grace=3600)  # only the second signal can end it
    try:
        _run_until_dripping(drip, proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting for the slow response
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_CHECKPOINT, err[-2000:]
    assert "Traceback" not in err
    assert "aborted by a second signal" in err
    assert _row_status(ws) == [RowStatus.PENDING]
    last = events(ws)[-1]
    assert (last["event"], last["reason"], last["exit_code"]) == ("run_finished", "aborted", 3)

    # the next run fetches the row again: nothing was lost
    with Workspace.open(ws, create=False, readonly=True) as w:
        assert [r.url for r in w.store.resumable(3)] == [f"{drip.url}/slow"]


@pytest.mark.kill
@pytest.mark.parametrize("signals", [1, 2])
def test_scrapy_crawl_stops_the_same_way(drip: DripServer, tmp_path: Path, signals: int) -> None:
    _spec(tmp_path, drip.url)
    ws = tmp_path / "ws"
    proc = _start_scrapy(tmp_path, ws, grace=1 if signals == 1 else 3600)
    try:
        _run_until_dripping(drip, proc)
        for _ in range(signals):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err
    assert _row_status(ws) == [RowStatus.PENDING]
    last = events(ws)[-1]
    reason = "shutdown" if signals == 1 else "aborted"
    assert (last["event"], last["reason"], last["exit_code"]) == ("run_finished", reason, 3)
