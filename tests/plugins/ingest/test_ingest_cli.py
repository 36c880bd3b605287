"""``framework ingest serve`` as users run it: a real process, port 0, a token from the
environment, SIGTERM to stop; the token never shows in its output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.fixtures import procs
from tests.fixtures.ingest import make_item

FRAMEWORK = str(Path(sys.executable).parent / "framework")
TOKEN = "cli-token-never-printed-0123456789"


@pytest.mark.kill
def test_serve_on_port_0_with_a_token_from_the_environment(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    env = {**os.environ, "INGEST_TOKEN": TOKEN}
    proc = procs.popen(
        [
            FRAMEWORK,
            "ingest",
            "serve",
            "--db",
            f"sqlite:///{db}",
            "--port",
            "0",
            "--token-env",
            "INGEST_TOKEN",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        match = re.search(r"on (http://127\.0\.0\.1:(\d+))", first)
        assert match, first
        assert match.group(2) != "0", first
        url = match.group(1)
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.1)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert requests.post(f"{url}/v1/items", json=make_item("1"), timeout=10).status_code == 401
        r = requests.post(f"{url}/v1/items", json=make_item("1"), headers=headers, timeout=10)
        assert r.status_code == 201
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    # uvicorn shuts down cleanly, then re-raises the signal it caught, as servers should
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Application shutdown complete" in err
    assert "POST /v1/items HTTP/1.1" in out + err  # the access log is on by default
    assert TOKEN not in out + err + first
    stats = procs.run(
        [FRAMEWORK, "ingest", "stats", "--db", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert '"items": 1' in stats.stdout
